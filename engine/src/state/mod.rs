//! The state the engine owns on behalf of a handler: typed tables, per-command transactions
//! (undo log), a capacity in bytes and the running state hash.

mod hash;
mod slots;
mod table;
mod tx;

pub use hash::{HASH_PAGE_BYTES, StateHash, StreamHasher};
pub use table::{Key, Record, Schema, TABLES_MAX, Table, TableId};
pub use tx::{Prefetch, Tx};

use crate::codec::{self, Encode};
use std::any::Any;
use table::{AnyTable, TypedTable};

/// The bytes every record costs beyond its encoded key and record, in the capacity account
/// (about what a slot and its share of free slots cost in memory).
pub const RECORD_OVERHEAD_BYTES: u64 = 32;
/// The capacity of a node's state when none is configured: 2 GiB, as in the reference setup.
pub const STATE_BYTES_DEFAULT: u64 = 2 << 30;

/// Operation tags in the write stream.
const WRITE_PUT: u8 = 1;
const WRITE_DELETE: u8 = 2;

/// Why a write could not be made. Handlers convert it into their own business error (their
/// `Error` type implements `From<StateError>`); the command then changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The write would take the state past its configured capacity.
    #[error("state capacity exhausted: {needed_bytes} bytes needed, capacity {capacity_bytes}")]
    CapacityExhausted {
        /// Bytes the state would hold after the write.
        needed_bytes: u64,
        /// The configured capacity.
        capacity_bytes: u64,
    },
    /// The process could not get memory below the configured capacity. The node stops applying
    /// (replicas may not agree on this), so the command's outcome is never released.
    #[error("memory exhausted below the configured capacity")]
    MemoryExhausted,
    /// A key or record failed to encode (a handler type whose `Encode` returns an error).
    #[error("a key or record failed to encode: {0}")]
    Unencodable(String),
}

/// Where a command's transaction began: what a rollback returns to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxMark {
    writes_bytes: usize,
    bytes_used: u64,
}

/// The replicated state of one node.
pub struct State {
    tables: Vec<Option<Box<dyn AnyTable>>>,
    bytes_used: u64,
    capacity_bytes: u64,
    /// The table of each change in the undo logs of the running command, oldest first.
    undo: Vec<TableId>,
    /// The encoded writes of the running entry, not yet absorbed by the hasher.
    writes: Vec<u8>,
    hasher: StreamHasher,
    /// Set when memory ran out below capacity: the node must stop applying.
    memory_fault: bool,
}

impl State {
    /// An empty state with the tables of `schema` and room for `capacity_bytes`.
    pub fn new(schema: Schema, capacity_bytes: u64) -> Self {
        let mut tables: Vec<Option<Box<dyn AnyTable>>> = (0..TABLES_MAX).map(|_| None).collect();
        for decl in schema.tables {
            tables[decl.id.0 as usize] = Some((decl.create)());
        }
        State {
            tables,
            bytes_used: 0,
            capacity_bytes,
            undo: Vec::new(),
            writes: Vec::new(),
            hasher: StreamHasher::default(),
            memory_fault: false,
        }
    }

    /// Bytes the state holds, as counted against its capacity.
    pub fn bytes_used(&self) -> u64 {
        self.bytes_used
    }

    /// The configured capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Memory held by all tables' slot arrays, in bytes.
    pub fn allocated_bytes(&self) -> usize {
        self.tables
            .iter()
            .flatten()
            .map(|t| t.allocated_bytes())
            .sum()
    }

    /// The number of records in `table`.
    pub fn len<K: Key, R: Record>(&self, table: &Table<K, R>) -> usize {
        self.typed(table).map.len()
    }

    /// The record under `key` in `table` (a read outside any transaction, for inspection).
    pub fn get<K: Key, R: Record>(&self, table: &Table<K, R>, key: &K) -> Option<&R> {
        self.typed(table).map.get(key)
    }

    /// Every record of `table` in an unspecified order that may differ between replicas.
    pub fn iter_unordered<K: Key, R: Record>(
        &self,
        table: &Table<K, R>,
    ) -> impl Iterator<Item = (&K, &R)> {
        self.typed(table).map.iter()
    }

    /// The state hash after the last finished entry.
    pub fn hash(&self) -> StateHash {
        self.hasher.digest()
    }

    pub(crate) fn begin(&self) -> TxMark {
        debug_assert!(self.undo.is_empty(), "a transaction is already open");
        TxMark {
            writes_bytes: self.writes.len(),
            bytes_used: self.bytes_used,
        }
    }

    pub(crate) fn commit(&mut self) {
        for id in self.undo.drain(..) {
            table_slot(&mut self.tables, id).clear_undo();
        }
    }

    pub(crate) fn rollback(&mut self, mark: TxMark) {
        while let Some(id) = self.undo.pop() {
            table_slot(&mut self.tables, id).undo_last();
        }
        self.writes.truncate(mark.writes_bytes);
        self.bytes_used = mark.bytes_used;
    }

    /// True once memory ran out below capacity; the node must stop applying.
    pub(crate) fn memory_fault(&self) -> bool {
        self.memory_fault
    }

    /// Appends engine bookkeeping (such as a client session update) to the write stream.
    pub(crate) fn record_extra(&mut self, bytes: &[u8]) {
        self.writes.extend_from_slice(bytes);
    }

    /// Folds the entry's writes into the state hash and returns the new hash.
    pub(crate) fn finish_entry(&mut self) -> StateHash {
        debug_assert!(
            self.undo.is_empty(),
            "an entry finished inside a transaction"
        );
        self.hasher.absorb(&self.writes);
        self.writes.clear();
        self.hasher.digest()
    }

    fn typed<K: Key, R: Record>(&self, table: &Table<K, R>) -> &TypedTable<K, R> {
        let any: &dyn Any = self.tables[table.id().0 as usize]
            .as_deref()
            .unwrap_or_else(|| panic!("table {} is not in the schema", table.name()));
        any.downcast_ref().unwrap_or_else(|| mismatch(table.name()))
    }

    fn typed_mut<K: Key, R: Record>(&mut self, table: &Table<K, R>) -> &mut TypedTable<K, R> {
        let any: &mut dyn Any = table_slot(&mut self.tables, table.id());
        any.downcast_mut().unwrap_or_else(|| mismatch(table.name()))
    }

    /// The capacity account after replacing `old_bytes` with `new_bytes`, if it fits.
    fn account(&self, old_bytes: u64, new_bytes: u64) -> Result<u64, StateError> {
        let needed_bytes = self.bytes_used - old_bytes + new_bytes;
        if needed_bytes > self.capacity_bytes {
            return Err(StateError::CapacityExhausted {
                needed_bytes,
                capacity_bytes: self.capacity_bytes,
            });
        }
        Ok(needed_bytes)
    }

    pub(crate) fn put<K: Key, R: Record>(
        &mut self,
        table: &Table<K, R>,
        key: K,
        record: R,
    ) -> Result<(), StateError> {
        let start = self.writes.len();
        let encoded = encode_write(&mut self.writes, table.id(), WRITE_PUT, &key, Some(&record));
        let (key_bytes, record_bytes) = match encoded {
            Ok(sizes) => sizes,
            Err(error) => return self.abandon_write(start, error),
        };
        let old_bytes = match self.typed(table).map.get(&key) {
            Some(old) => record_cost(key_bytes, codec::encoded_len(old).unwrap_or(0)),
            None => 0,
        };
        let bytes_used = match self.account(old_bytes, record_cost(key_bytes, record_bytes)) {
            Ok(bytes_used) => bytes_used,
            Err(error) => return self.abandon_write(start, error),
        };
        if self.typed_mut(table).put(key, record).is_err() {
            self.memory_fault = true;
            return self.abandon_write(start, StateError::MemoryExhausted);
        }
        self.undo.push(table.id());
        self.bytes_used = bytes_used;
        Ok(())
    }

    pub(crate) fn delete<K: Key, R: Record>(
        &mut self,
        table: &Table<K, R>,
        key: &K,
    ) -> Result<Option<R>, StateError> {
        let start = self.writes.len();
        let key_bytes =
            match encode_write::<K, R>(&mut self.writes, table.id(), WRITE_DELETE, key, None) {
                Ok((key_bytes, _)) => key_bytes,
                Err(error) => return self.abandon_write(start, error),
            };
        let Some(old) = self.typed_mut(table).delete(key) else {
            self.writes.truncate(start);
            return Ok(None);
        };
        self.undo.push(table.id());
        let old_bytes = record_cost(key_bytes, codec::encoded_len(&old).unwrap_or(0));
        self.bytes_used -= old_bytes;
        Ok(Some(old))
    }

    fn abandon_write<T>(&mut self, start: usize, error: StateError) -> Result<T, StateError> {
        self.writes.truncate(start);
        Err(error)
    }

    pub(crate) fn touch<K: Key, R: Record>(&self, table: &Table<K, R>, key: &K) {
        let any: Option<&dyn Any> = self.tables[table.id().0 as usize]
            .as_deref()
            .map(|t| t as _);
        if let Some(typed) = any.and_then(|t| t.downcast_ref::<TypedTable<K, R>>()) {
            typed.map.touch(key);
        }
    }
}

fn table_slot(tables: &mut [Option<Box<dyn AnyTable>>], id: TableId) -> &mut dyn AnyTable {
    tables[id.0 as usize]
        .as_deref_mut()
        .unwrap_or_else(|| panic!("table {} is not in the schema", id.0))
}

fn mismatch(name: &str) -> ! {
    panic!("table {name} used with other key or record types than its schema declares")
}

/// What one record costs in the capacity account.
fn record_cost(key_bytes: usize, record_bytes: usize) -> u64 {
    (key_bytes + record_bytes) as u64 + RECORD_OVERHEAD_BYTES
}

/// Appends one write to the stream: table, operation, key, record. Returns the encoded sizes of
/// the key and the record.
fn encode_write<K: Encode, R: Encode>(
    out: &mut Vec<u8>,
    table: TableId,
    op: u8,
    key: &K,
    record: Option<&R>,
) -> Result<(usize, usize), StateError> {
    let unencodable = |e: codec::CodecError| StateError::Unencodable(e.to_string());
    out.extend_from_slice(&table.0.to_le_bytes());
    out.push(op);
    let key_start = out.len();
    codec::encode_into(key, out).map_err(unencodable)?;
    let record_start = out.len();
    if let Some(record) = record {
        codec::encode_into(record, out).map_err(unencodable)?;
    }
    Ok((record_start - key_start, out.len() - record_start))
}
