//! The speculative overlay a leader's simulation executes against: the committed state plus
//! the writes of entries simulated but not yet applied. It records, per command, what the
//! command read (to verify later that it still holds) and what it wrote (to apply it later
//! without executing again), in the global order.
//!
//! The overlay never changes the committed state. When an entry is applied, its recorded reads
//! and writes are consumed in order: verified and applied (reuse), or dropped (the command is
//! executed instead).

use super::table::TypedTable;
use super::{
    Key, Record, State, StateError, TABLES_MAX, Table, TableId, WRITE_DELETE, WRITE_PUT,
    encode_write, record_cost,
};
use crate::codec;
use crate::ids::EntryIndex;
use rustc_hash::FxHashMap;
use std::any::Any;
use std::collections::VecDeque;

/// One command of one simulated entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Step {
    /// The entry.
    pub entry: EntryIndex,
    /// The command's position in the entry.
    pub command: u32,
}

#[derive(Clone, Copy, Debug)]
struct ReadRef {
    step: Step,
    table: TableId,
    /// A read of a whole table (a scan or a count): it cannot be verified key by key.
    scan: bool,
}

#[derive(Clone, Copy, Debug)]
struct WriteRef {
    step: Step,
    table: TableId,
}

/// Where a simulated command began: what its rollback returns to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverlayMark {
    stream_bytes: usize,
    bytes_delta: i64,
    writes: usize,
}

/// The overlay.
#[derive(Default)]
pub struct Overlay {
    tables: Vec<Option<Box<dyn AnyOverlay>>>,
    /// Capacity change of every pending simulated write.
    bytes_delta: i64,
    writes: VecDeque<WriteRef>,
    reads: VecDeque<ReadRef>,
    /// Tables changed by the running command, in order (for its rollback).
    undo: Vec<TableId>,
    /// The write stream of the entry being simulated.
    pub(crate) stream: Vec<u8>,
    step: Option<Step>,
}

impl Overlay {
    /// True when no simulated entry is pending.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reads.is_empty()
    }

    /// Forgets everything (leadership lost: the simulations will not be used).
    pub fn clear(&mut self) {
        for table in self.tables.iter_mut().flatten() {
            table.clear();
        }
        self.bytes_delta = 0;
        self.writes.clear();
        self.reads.clear();
        self.undo.clear();
        self.stream.clear();
        self.step = None;
    }

    pub(crate) fn begin(&mut self, step: Step) -> OverlayMark {
        self.step = Some(step);
        // The previous command committed: its undo records are of no further use.
        while let Some(id) = self.undo.pop() {
            self.table_mut(id).forget_undo();
        }
        OverlayMark {
            stream_bytes: self.stream.len(),
            bytes_delta: self.bytes_delta,
            writes: self.writes.len(),
        }
    }

    /// Undoes the running command's writes (its reads stay: a refused command's outcome depends
    /// on them too).
    pub(crate) fn rollback(&mut self, mark: OverlayMark) {
        while let Some(id) = self.undo.pop() {
            self.table_mut(id).undo_last();
        }
        while self.writes.len() > mark.writes {
            let write = self.writes.pop_back().expect("longer than the mark");
            self.table_mut(write.table).pop_write_back();
        }
        self.stream.truncate(mark.stream_bytes);
        self.bytes_delta = mark.bytes_delta;
    }

    fn step(&self) -> Step {
        self.step.expect("a simulated command is running")
    }

    fn table_mut(&mut self, id: TableId) -> &mut dyn AnyOverlay {
        self.tables[id.0 as usize]
            .as_deref_mut()
            .expect("the table was used")
    }

    fn typed<K: Key, R: Record>(&mut self, table: &Table<K, R>) -> &mut OverlayTable<K, R> {
        if self.tables.is_empty() {
            self.tables = (0..TABLES_MAX).map(|_| None).collect();
        }
        let slot = &mut self.tables[table.id().0 as usize];
        let any: &mut dyn Any = slot
            .get_or_insert_with(|| Box::new(OverlayTable::<K, R>::new(table.id())))
            .as_mut();
        any.downcast_mut().expect("one overlay type per table")
    }

    fn note_read(&mut self, table: TableId, scan: bool) {
        let step = self.step();
        self.reads.push_back(ReadRef { step, table, scan });
    }

    /// The record under `key` as the simulation sees it.
    pub(crate) fn get<K: Key, R: Record>(
        &mut self,
        base: &State,
        table: &Table<K, R>,
        key: &K,
    ) -> Option<R> {
        let value = self.typed(table).visible(base, table, key);
        self.typed(table)
            .reads
            .push_back((key.clone(), value.clone()));
        self.note_read(table.id(), false);
        value
    }

    /// The number of records of `table` as the simulation sees it (a whole-table read).
    pub(crate) fn len<K: Key, R: Record>(&mut self, base: &State, table: &Table<K, R>) -> usize {
        self.note_read(table.id(), true);
        let overlay = self.typed(table);
        let mut count = base.len(table) as i64;
        for (key, (_, value)) in &overlay.latest {
            count += i64::from(value.is_some()) - i64::from(base.get(table, key).is_some());
        }
        count as usize
    }

    /// Every record of `table` as the simulation sees it, in no particular order (a whole-table
    /// read).
    pub(crate) fn for_each<K: Key, R: Record>(
        &mut self,
        base: &State,
        table: &Table<K, R>,
        mut f: impl FnMut(&K, &R),
    ) {
        self.note_read(table.id(), true);
        let overlay = self.typed(table);
        for (key, record) in base.iter_unordered(table) {
            if !overlay.latest.contains_key(key) {
                f(key, record);
            }
        }
        for (key, (_, value)) in &overlay.latest {
            if let Some(record) = value {
                f(key, record);
            }
        }
    }

    /// Writes (`Some`) or deletes (`None`) in the overlay, checking capacity against the base
    /// state plus every pending simulated write. Returns the record that was visible before.
    pub(crate) fn write<K: Key, R: Record>(
        &mut self,
        base: &State,
        table: &Table<K, R>,
        key: K,
        record: Option<R>,
    ) -> Result<Option<R>, StateError> {
        let start = self.stream.len();
        let op = if record.is_some() {
            WRITE_PUT
        } else {
            WRITE_DELETE
        };
        let (key_bytes, record_bytes) =
            encode_write(&mut self.stream, table.id(), op, &key, record.as_ref())?;
        let old = self.typed(table).visible(base, table, &key);
        if old.is_none() && record.is_none() {
            self.stream.truncate(start);
            return Ok(None);
        }
        let old_bytes = old.as_ref().map_or(0, |o| {
            record_cost(key_bytes, codec::encoded_len(o).unwrap_or(0)) as i64
        });
        let new_bytes = record
            .as_ref()
            .map_or(0, |_| record_cost(key_bytes, record_bytes) as i64);
        let delta = new_bytes - old_bytes;
        let needed = base.bytes_used() as i64 + self.bytes_delta + delta;
        if needed > base.capacity_bytes() as i64 {
            self.stream.truncate(start);
            let capacity_bytes = base.capacity_bytes();
            return Err(StateError::CapacityExhausted {
                needed_bytes: needed as u64,
                capacity_bytes,
            });
        }
        let step = self.step();
        self.typed(table).write(step, key, record, delta);
        self.bytes_delta += delta;
        self.undo.push(table.id());
        self.writes.push_back(WriteRef {
            step,
            table: table.id(),
        });
        Ok(old)
    }

    /// Verifies the recorded reads of `step` against the committed state as it stands now,
    /// consuming them; true when every one still holds.
    pub fn verify_reads(&mut self, step: Step, state: &State) -> bool {
        let mut holds = true;
        while self.reads.front().is_some_and(|r| r.step <= step) {
            let read = self.reads.pop_front().expect("checked");
            let current = read.step == step;
            if read.scan {
                // A whole-table read cannot be verified key by key.
                holds &= !current;
                continue;
            }
            let check = current && holds;
            let held = self.table_mut(read.table).pop_read(check.then_some(state));
            holds &= !current || held;
        }
        holds
    }

    /// Consumes the recorded reads of every step up to `step` without verifying them (their
    /// simulation's base is known exact).
    pub fn skip_reads(&mut self, step: Step) {
        while self.reads.front().is_some_and(|r| r.step <= step) {
            let read = self.reads.pop_front().expect("checked");
            if !read.scan {
                self.table_mut(read.table).pop_read(None);
            }
        }
    }

    /// Applies the recorded writes of `step` to the committed state (reuse), consuming them.
    /// The caller appends the step's stream bytes and capacity change itself.
    pub fn apply_writes(&mut self, step: Step, state: &mut State) -> Result<(), StateError> {
        while self.writes.front().is_some_and(|w| w.step <= step) {
            let write = self.writes.pop_front().expect("checked");
            let apply = write.step == step;
            let bytes = self
                .table_mut(write.table)
                .pop_write(apply.then_some(&mut *state))?;
            self.bytes_delta -= bytes;
        }
        Ok(())
    }

    /// Drops the recorded reads and writes of every step up to `step` without applying them.
    pub fn drop_through(&mut self, step: Step) {
        self.skip_reads(step);
        while self.writes.front().is_some_and(|w| w.step <= step) {
            let write = self.writes.pop_front().expect("checked");
            let bytes = self
                .table_mut(write.table)
                .pop_write(None)
                .expect("dropping never fails");
            self.bytes_delta -= bytes;
        }
    }
}

/// What the overlay needs of a table whose types it does not know.
trait AnyOverlay: Any + Send + Sync {
    fn undo_last(&mut self);
    fn forget_undo(&mut self);
    fn pop_write_back(&mut self);
    /// Consumes the oldest recorded write, applying it to `state` when given; returns its
    /// capacity change.
    fn pop_write(&mut self, state: Option<&mut State>) -> Result<i64, StateError>;
    /// Consumes the oldest recorded read; when `state` is given, true when the read still holds.
    fn pop_read(&mut self, state: Option<&State>) -> bool;
    fn clear(&mut self);
}

/// The newest simulated value of a key (`None`: deleted) and the entry that wrote it.
type Newest<R> = (EntryIndex, Option<R>);

/// One table's overlay: the newest simulated value of every key written by a pending
/// simulation (with the entry that wrote it), and the logs of reads and writes.
struct OverlayTable<K, R> {
    id: TableId,
    latest: FxHashMap<K, Newest<R>>,
    /// The running command's changes to `latest`, oldest first: the key and what it replaced.
    undo: Vec<(K, Option<Newest<R>>)>,
    writes: VecDeque<(EntryIndex, K, Option<R>, i64)>,
    reads: VecDeque<(K, Option<R>)>,
}

impl<K: Key, R: Record> OverlayTable<K, R> {
    fn new(id: TableId) -> Self {
        OverlayTable {
            id,
            latest: FxHashMap::default(),
            undo: Vec::new(),
            writes: VecDeque::new(),
            reads: VecDeque::new(),
        }
    }

    fn visible(&self, base: &State, table: &Table<K, R>, key: &K) -> Option<R> {
        match self.latest.get(key) {
            Some((_, value)) => value.clone(),
            None => base.get(table, key).cloned(),
        }
    }

    fn write(&mut self, step: Step, key: K, record: Option<R>, delta: i64) {
        let replaced = self
            .latest
            .insert(key.clone(), (step.entry, record.clone()));
        self.undo.push((key.clone(), replaced));
        self.writes.push_back((step.entry, key, record, delta));
    }

    /// Forgets `latest[key]` once the write of `entry` that set it is consumed.
    fn retire(&mut self, key: &K, entry: EntryIndex) {
        if self
            .latest
            .get(key)
            .is_some_and(|(writer, _)| *writer <= entry)
        {
            self.latest.remove(key);
        }
    }
}

impl<K: Key, R: Record> AnyOverlay for OverlayTable<K, R> {
    fn undo_last(&mut self) {
        let (key, replaced) = self.undo.pop().expect("undo matches the overlay's order");
        match replaced {
            Some(previous) => self.latest.insert(key, previous),
            None => self.latest.remove(&key),
        };
    }

    fn forget_undo(&mut self) {
        self.undo.clear();
    }

    fn pop_write_back(&mut self) {
        self.writes
            .pop_back()
            .expect("write log matches the overlay's order");
    }

    fn pop_write(&mut self, state: Option<&mut State>) -> Result<i64, StateError> {
        let (entry, key, record, delta) = self.writes.pop_front().expect("write log matches");
        self.retire(&key, entry);
        if let Some(state) = state {
            state.put_reused::<K, R>(self.id, key, record, delta)?;
        }
        Ok(delta)
    }

    fn pop_read(&mut self, state: Option<&State>) -> bool {
        let (key, seen) = self.reads.pop_front().expect("read log matches");
        match state {
            Some(state) => state.typed_by_id::<K, R>(self.id).map.get(&key) == seen.as_ref(),
            None => false,
        }
    }

    fn clear(&mut self) {
        self.latest.clear();
        self.undo.clear();
        self.writes.clear();
        self.reads.clear();
    }
}

impl<K: Key, R: Record> TypedTable<K, R> {
    /// Writes or removes without undo (a reused simulated write).
    pub(crate) fn put_final(
        &mut self,
        key: K,
        record: Option<R>,
    ) -> Result<(), std::collections::TryReserveError> {
        match record {
            Some(record) => self.map.insert(key, record).map(drop),
            None => {
                self.map.remove(&key);
                Ok(())
            }
        }
    }
}
