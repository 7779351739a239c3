//! Snapshots of a table: a copy-on-write scan of its committed records (what the scan sees
//! is the table as it was when the scan began, minus the writes of speculations still
//! pending), and loading a table back from a snapshot's records.

use super::slots::slots_hold;
use super::table::{Order, TypedTable};
use super::{Key, Record};
use crate::codec;
use rustc_hash::FxHashMap;
use std::collections::TryReserveError;

/// Why a table's records from a snapshot cannot be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The table's slot count is not one a table holding its records can have.
    #[error("{slots} slots cannot hold {records} records")]
    SlotCount {
        /// The slot count the snapshot gives.
        slots: u64,
        /// Records the snapshot says the table holds.
        records: u64,
    },
    /// The table holds records already (the snapshot names it twice).
    #[error("the table holds {records} records already")]
    Loaded {
        /// Records it holds.
        records: u64,
    },
    /// No memory for the records the snapshot says the table holds.
    #[error("no memory for {records} records: {source}")]
    Reserve {
        /// Records the table was to hold.
        records: u64,
        /// The allocator's refusal.
        source: TryReserveError,
    },
    /// No memory to insert a record.
    #[error("no memory to insert record {record}: {source}")]
    Insert {
        /// The record's position (from 0) among the table's records.
        record: u64,
        /// The allocator's refusal.
        source: TryReserveError,
    },
    /// A record does not decode as this handler's key and record types.
    #[error("record {record} of {count}: {reason}")]
    Decode {
        /// The record's position (from 0) among the table's records.
        record: u64,
        /// Records the table holds.
        count: u64,
        /// The decoder's account of the failure.
        reason: String,
    },
    /// Two records have the same key.
    #[error("a key appears twice (record {record} repeats an earlier key)")]
    DuplicateKey {
        /// The position (from 0) of the second record with the key.
        record: u64,
    },
    /// Bytes are left after the last record the count announced.
    #[error("{bytes} bytes after the last record")]
    TrailingBytes {
        /// Bytes left over.
        bytes: usize,
    },
}

impl<K: Key, R: Record, O: Order<K>> TypedTable<K, R, O> {
    /// Starts a scan of the committed records: where a pending speculation wrote a key, the
    /// scan sees what the speculation's oldest undo record kept. (No pending speculation
    /// removed a record: `can_scan` holds, so every key written is where it was.)
    pub(crate) fn begin_committed_scan(&mut self) {
        let fixes = self.committed_fixes();
        self.map.begin_scan(fixes);
    }

    /// Starts a delta's scan: the committed records of the slots written since the last
    /// snapshot point (see [`TypedTable::begin_committed_scan`]); encodes the keys removed
    /// since onto `removed` and returns their count. The table must know what it wrote
    /// ([`Slots::can_delta`](super::slots::Slots::can_delta)).
    pub(crate) fn begin_committed_delta_scan(&mut self, removed: &mut Vec<u8>) -> u64 {
        let fixes = self.committed_fixes();
        let keys = self.map.begin_delta_scan(fixes);
        let keys = keys.expect("a delta only of a table that knows what it wrote");
        for key in &keys {
            codec::encode_into(key, removed).expect("keys encode into a vector");
        }
        keys.len() as u64
    }

    /// Where a pending speculation wrote a key, the slot and the content its oldest undo
    /// record kept: the committed content a scan must see there.
    fn committed_fixes(&self) -> Vec<(usize, Option<(K, R)>)> {
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
        fixes
    }

    /// Fills an empty table of `slots` slots (what the table that wrote the snapshot had) from
    /// `count` encoded `(key, record)` pairs; returns the heap bytes the capacity account
    /// charges for them.
    pub(crate) fn load_records(
        &mut self,
        mut records: &[u8],
        count: u64,
        slots: u64,
    ) -> Result<u64, LoadError> {
        let mut bytes = 0;
        // The counts are read from the file: the slot count must hold the record count (and
        // was checked against the capacity before), so that a wrong count costs an error, not
        // gigabytes (found by the snapshot_file fuzz target).
        if !slots_hold(slots, count) {
            return Err(LoadError::SlotCount {
                slots,
                records: count,
            });
        }
        if self.map.len() != 0 {
            return Err(LoadError::Loaded {
                records: self.map.len() as u64,
            });
        }
        self.map
            .resize_to(slots as usize)
            .map_err(|source| LoadError::Reserve {
                records: count,
                source,
            })?;
        self.counted_slots = slots;
        for record in 0..count {
            let ((key, value), used): ((K, R), usize) = decode_next(records, (record, count))?;
            records = &records[used..];
            bytes += Self::loaded_bytes(&key, used);
            if self.map.get(&key).is_some() {
                return Err(LoadError::DuplicateKey { record });
            }
            self.map
                .insert_new(key.clone(), value)
                .map_err(|source| LoadError::Insert { record, source })?;
            O::index_insert(&mut self.index, &key);
        }
        if !records.is_empty() {
            return Err(LoadError::TrailingBytes {
                bytes: records.len(),
            });
        }
        self.undo.clear();
        // Every record went in, into the slots the snapshot gave (they hold them: no growth).
        assert_eq!(
            self.map.len() as u64,
            count,
            "a table loaded with {count} records"
        );
        assert_eq!(
            self.map.slot_count() as u64,
            slots,
            "a table loaded into {slots} slots"
        );
        assert_eq!(
            O::index_len(&self.index) as u64,
            if O::KEEPS_KEYS { count } else { 0 },
            "the index of a table loaded with {count} records"
        );
        Ok(bytes)
    }
}

impl<K: Key, R: Record, O: Order<K>> TypedTable<K, R, O> {
    /// Applies a delta to a loaded table: the `removed_count` encoded keys go, then the
    /// `count` encoded `(key, record)` pairs are put (replacing a key's record, or new). A
    /// delta never grows a table (a growth ends the chain): a record past the table's load
    /// limit is refused. Returns the bytes the account charges beyond the slots after it and
    /// before it, each [`TypedTable::loaded_bytes`] of the records put or dropped.
    pub(crate) fn apply_delta(
        &mut self,
        (mut removed, removed_count): (&[u8], u64),
        (mut records, count): (&[u8], u64),
    ) -> Result<(u64, u64), LoadError> {
        let (mut added, mut dropped) = (0, 0);
        for record in 0..removed_count {
            let (key, used): (K, usize) = decode_next(removed, (record, removed_count))?;
            removed = &removed[used..];
            if let Some(old) = self.map.remove(&key) {
                O::index_remove(&mut self.index, &key);
                dropped += Self::record_bytes(&key, &old);
            }
        }
        if !removed.is_empty() {
            return Err(LoadError::TrailingBytes {
                bytes: removed.len(),
            });
        }
        for record in 0..count {
            let ((key, value), used): ((K, R), usize) = decode_next(records, (record, count))?;
            records = &records[used..];
            added += Self::loaded_bytes(&key, used);
            self.put_loaded(key, value, record, &mut dropped)?;
        }
        if !records.is_empty() {
            return Err(LoadError::TrailingBytes {
                bytes: records.len(),
            });
        }
        self.undo.clear();
        Ok((added, dropped))
    }

    /// Puts a delta's record `record`, counting the bytes of the one it replaces, if any,
    /// into `dropped`.
    fn put_loaded(
        &mut self,
        key: K,
        value: R,
        record: u64,
        dropped: &mut u64,
    ) -> Result<(), LoadError> {
        if let Some(position) = self.map.position(&key) {
            let old = self.map.replace(position, value);
            *dropped += Self::record_bytes(&key, &old);
            return Ok(());
        }
        let slots = self.map.slot_count();
        if !slots_hold(slots as u64, self.map.len() as u64 + 1) {
            return Err(LoadError::SlotCount {
                slots: slots as u64,
                records: self.map.len() as u64 + 1,
            });
        }
        self.map
            .insert_new(key.clone(), value)
            .map_err(|source| LoadError::Insert { record, source })?;
        O::index_insert(&mut self.index, &key);
        Ok(())
    }

    /// What [`TypedTable::loaded_bytes`] charged for `key`'s record `value`.
    fn record_bytes(key: &K, value: &R) -> u64 {
        let used = codec::encoded_len(&(key, value)).unwrap_or(0);
        Self::loaded_bytes(key, used)
    }
}

/// The item `bytes` begin with, the `at`th of `count`, and the bytes it took.
fn decode_next<T: codec::Decode<()>>(
    bytes: &[u8],
    (at, count): (u64, u64),
) -> Result<(T, usize), LoadError> {
    codec::decode_prefix(bytes).map_err(|e| LoadError::Decode {
        record: at,
        count,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::slots::Slots;
    use std::collections::VecDeque;

    fn table() -> TypedTable<u64, u64> {
        TypedTable {
            map: Slots::new(),
            index: (),
            undo: VecDeque::new(),
            removals_final: 0,
            counted_slots: 16,
        }
    }

    fn records(pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        for pair in pairs {
            codec::encode_into(pair, &mut out).unwrap();
        }
        out
    }

    /// Proves records that repeat a key, leave bytes over, stop short or do not fit the slot
    /// count are refused, each as its own variant, and that sound records load into the slot
    /// count given.
    #[test]
    fn records_that_do_not_load_say_which_and_why() {
        let twice = records(&[(1, 10), (1, 11)]);
        let error = table().load_records(&twice, 2, 16).unwrap_err();
        assert_eq!(error, LoadError::DuplicateKey { record: 1 });
        assert!(error.to_string().contains("a key appears twice"), "{error}");

        let over = records(&[(1, 10), (2, 20)]);
        let error = table().load_records(&over, 1, 16).unwrap_err();
        assert_eq!(error, LoadError::TrailingBytes { bytes: 16 });
        assert_eq!(error.to_string(), "16 bytes after the last record");

        let short = records(&[(1, 10)]);
        let error = table().load_records(&short, 2, 16).unwrap_err();
        assert!(
            matches!(
                error,
                LoadError::Decode {
                    record: 1,
                    count: 2,
                    ..
                }
            ),
            "{error:?}"
        );

        let error = table().load_records(&over, 13, 16).unwrap_err();
        assert_eq!(
            error,
            LoadError::SlotCount {
                slots: 16,
                records: 13
            }
        );

        let mut sound = table();
        let heap = sound.load_records(&over, 2, 32).unwrap();
        assert_eq!(heap, 0, "integers live in their slots");
        assert_eq!(sound.map.slot_count(), 32);
    }
}
