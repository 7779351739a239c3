//! Incremental captures of the committed state, the mirror a background writer rebuilds from
//! them, and loading a table back from a snapshot's records.
//!
//! A capture takes the slots written since the previous capture (every slot when the array
//! changed whole), with their committed content: where a pending speculation wrote a key, the
//! capture takes what the speculation's undo record kept instead, and marks the slot to be
//! taken again. The mirror applies captures slot by slot, so it holds the same slot array as
//! the live table without ever hashing a key: applying a capture is a copy per written slot.

use super::slots::SlotsCapture;
use super::table::TypedTable;
use super::{Key, RECORD_OVERHEAD_BYTES, Record};
use crate::codec;
use rustc_hash::FxHashMap;
use std::any::Any;

impl<K: Key, R: Record> TypedTable<K, R> {
    /// The slots written since the last capture, with committed content.
    pub(crate) fn capture_committed(&mut self) -> SlotsCapture<K, R> {
        // The committed value of each key a pending speculation changed: its oldest undo record.
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
        let mut capture = self.map.capture();
        for (position, content) in fixes {
            match capture
                .changed
                .binary_search_by_key(&(position as u32), |(p, _)| *p)
            {
                Ok(at) => capture.changed[at].1 = content,
                Err(at) => capture.changed.insert(at, (position as u32, content)),
            }
            // Taken again by the next capture, once the speculation is committed or undone.
            self.map.mark_dirty(position);
        }
        capture
    }

    /// Fills an empty table from `count` encoded `(key, record)` pairs; returns their cost in
    /// the capacity account.
    pub(crate) fn load_records(&mut self, mut records: &[u8], count: u64) -> Result<u64, String> {
        let mut bytes = 0;
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

/// What a background writer needs of a table it mirrors, without knowing its types.
pub trait AnyMirror: Send {
    /// Applies a capture (a `SlotsCapture<K, R>` of this table's types).
    fn apply(&mut self, capture: Box<dyn Any + Send>);
    /// Records held.
    fn len(&self) -> u64;
    /// Appends every record, encoded as `(key, record)` pairs, to `out`.
    fn encode_into(&self, out: &mut Vec<u8>);
}

/// A copy of one table's slot array, kept up to date by captures.
pub(crate) struct Mirror<K, R> {
    slots: Vec<Option<(K, R)>>,
    len: u64,
}

impl<K: Key, R: Record> Mirror<K, R> {
    pub(crate) fn boxed() -> Box<dyn AnyMirror> {
        Box::new(Mirror::<K, R> {
            slots: Vec::new(),
            len: 0,
        })
    }
}

impl<K: Key, R: Record> AnyMirror for Mirror<K, R> {
    fn apply(&mut self, capture: Box<dyn Any + Send>) {
        let capture = *capture
            .downcast::<SlotsCapture<K, R>>()
            .expect("a capture of this table's types");
        if capture.full {
            self.slots.clear();
            self.slots.resize_with(capture.slots, || None);
            self.len = 0;
        }
        assert_eq!(
            self.slots.len(),
            capture.slots,
            "an incremental capture of the same slot array"
        );
        for (position, content) in capture.changed {
            let slot = &mut self.slots[position as usize];
            self.len = self.len + u64::from(content.is_some()) - u64::from(slot.is_some());
            *slot = content;
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        for record in self.slots.iter().flatten() {
            codec::encode_into(record, out).expect("records encode into a vector");
        }
    }
}
