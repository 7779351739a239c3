//! Snapshots of a table: a copy-on-write scan of its committed records (what the scan sees
//! is the table as it was when the scan began, minus the writes of speculations still
//! pending), and loading a table back from a snapshot's records.

use super::table::TypedTable;
use super::{Key, RECORD_OVERHEAD_BYTES, Record};
use crate::codec;
use rustc_hash::FxHashMap;

impl<K: Key, R: Record> TypedTable<K, R> {
    /// Starts a scan of the committed records: where a pending speculation wrote a key, the
    /// scan sees what the speculation's oldest undo record kept. (No pending speculation
    /// removed a record: `can_scan` holds, so every key written is where it was.)
    pub(crate) fn begin_committed_scan(&mut self) {
        let mut committed: FxHashMap<&K, &Option<R>> = FxHashMap::default();
        for (key, old) in &self.undo {
            committed.entry(key).or_insert(old);
        }
        let fixes: Vec<(usize, Option<(K, R)>)> = committed
            .into_iter()
            .map(|(key, old)| {
                let position = self
                    .map
                    .position(key)
                    .expect("no removal is pending: the key is in place");
                (position, old.clone().map(|record| (key.clone(), record)))
            })
            .collect();
        self.map.begin_scan(fixes);
    }

    /// Fills an empty table from `count` encoded `(key, record)` pairs; returns their cost in
    /// the capacity account.
    pub(crate) fn load_records(&mut self, mut records: &[u8], count: u64) -> Result<u64, String> {
        let mut bytes = 0;
        // The count is read from the file: reserve no more records than its bytes can hold
        // (every record takes at least one), so that a wrong count costs an error, not
        // gigabytes (found by the snapshot_file fuzz target).
        let reserve = count.min(records.len() as u64) as usize;
        self.map
            .reserve(self.map.len() + reserve)
            .map_err(|e| e.to_string())?;
        for _ in 0..count {
            let ((key, record), used): ((K, R), usize) =
                codec::decode_prefix(records).map_err(|e| e.to_string())?;
            records = &records[used..];
            bytes += used as u64 + RECORD_OVERHEAD_BYTES;
            if self
                .map
                .insert(key, record)
                .map_err(|e| e.to_string())?
                .is_some()
            {
                return Err("a key appears twice".into());
            }
        }
        if !records.is_empty() {
            return Err(format!("{} bytes after the last record", records.len()));
        }
        self.undo.clear();
        Ok(bytes)
    }
}
