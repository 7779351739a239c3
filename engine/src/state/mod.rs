//! The state the engine owns on behalf of a handler: typed tables, per-command transactions
//! (undo log), a capacity in bytes and the running state hash.

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

pub(crate) mod capture;
mod hash;
mod invariants;
mod memory;
mod slots;
pub(crate) use slots::{MIGRATE_SLOTS_PER_SNAPSHOT_TRY, SLOTS_INITIAL, ScanStep};
mod table;
#[cfg(test)]
mod tests;
mod tx;

pub use capture::LoadError;
pub use hash::{HASH_PAGE_BYTES, HasherState, StateHash, StreamHasher};
pub use table::{
    Hashed, Key, Order, Ordered, OrderedTable, Record, Schema, TABLES_MAX, Table, TableId,
};
pub use tx::{Prefetch, Tx};

use crate::codec::{self, Encode};
use std::any::Any;
use std::collections::VecDeque;
use std::ops::RangeBounds;
use table::{AnyTable, TypedTable, heap_bytes};

/// The capacity of a node's state when none is configured: 2 GiB, as in the reference setup.
pub const STATE_BYTES_DEFAULT: u64 = 2 << 30;

/// Operation tags in the write stream; each write starts with its table id and one of these.
const WRITE_PUT: u8 = 1;
const WRITE_DELETE: u8 = 2;

/// Why a write could not be made. Handlers convert it into their own business error (their
/// `Error` type implements `From<StateError>`); the command then changes nothing.
///
/// Exhaustive on purpose, unlike the engine's other public errors: handlers match on it to
/// choose their business error, so a new variant is a change to the handler API, made with a
/// new engine version and its changelog line rather than hidden behind a wildcard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The write would take the state past its configured capacity.
    #[error("state capacity exhausted: {needed_bytes} bytes needed, capacity {capacity_bytes}")]
    CapacityExhausted {
        /// Bytes the state would hold for the write: after it, and when it grows a table, with
        /// the old slot array beside the new one while the records move.
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
    /// A write inside a command its handler marked read-only ([`crate::Handler::read_only`]):
    /// the command fails, whatever the handler returns, and changes nothing.
    #[error("a write inside a read-only command")]
    ReadOnly,
}

/// Why a snapshot's content cannot be installed into this state (its file verified: the
/// handler, its schema or the configuration differs from the one that wrote it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The snapshot's state is under a handler version this build cannot run.
    #[error(
        "its handler version {version} is in force; this build runs versions {oldest} to {newest}"
    )]
    HandlerVersion {
        /// The version in force at the snapshot.
        version: u32,
        /// The oldest version this build runs.
        oldest: u32,
        /// The newest version this build runs.
        newest: u32,
    },
    /// The snapshot holds a table the handler's schema does not declare.
    #[error("it holds table {table}, which the handler's schema does not declare")]
    UnknownTable {
        /// The table's id.
        table: u16,
    },
    /// The snapshot's state does not fit the configured capacity.
    #[error("it holds {needed_bytes} bytes of state, over the capacity of {capacity_bytes} bytes")]
    Capacity {
        /// Bytes of state the snapshot holds, as the capacity account counts them (slot arrays
        /// and records' heap bytes).
        needed_bytes: u64,
        /// The configured capacity.
        capacity_bytes: u64,
    },
    /// A table's records do not decode with the handler's key and record types.
    #[error("the records of table {table} do not decode with this handler's types: {reason}")]
    Records {
        /// The table's id.
        table: u16,
        /// What failed.
        #[source]
        reason: LoadError,
    },
    /// The loaded state does not hash to what the snapshot recorded.
    #[error("the state it loads hashes to {computed}, not the recorded {recorded}")]
    StateHash {
        /// The hash of the loaded state.
        computed: StateHash,
        /// The hash the snapshot recorded.
        recorded: StateHash,
    },
    /// A delta's table has another slot count than the state it is applied to (a delta never
    /// grows a table: it does not continue that state).
    #[error("its table {table} has {slots} slots, the state it continues {loaded}")]
    DeltaSlots {
        /// The table's id.
        table: u16,
        /// The slot count the delta recorded.
        slots: u64,
        /// The slot count of the state it was applied to.
        loaded: u64,
    },
    /// A delta continues another snapshot than the state it is applied to.
    #[error("it continues the snapshot of entry {continues}, not the state of entry {applied}")]
    NotContinued {
        /// The index of the snapshot the delta continues.
        continues: crate::ids::EntryIndex,
        /// The index of the state it was applied to.
        applied: crate::ids::EntryIndex,
    },
}

/// A point in the state's history that a rollback returns to: the start of a command's
/// transaction, or of a speculatively applied entry. Positions are absolute (counted from the
/// start), so a mark stays valid while older undo records are forgotten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxMark {
    stream: u64,
    bytes_used: u64,
    undo: u64,
}

/// A table's growth not yet final: rolling back past it charges the table for its old slot
/// count again (and gives the extra slots back).
#[derive(Clone, Copy, Debug)]
struct Growth {
    /// The absolute position of the undo record of the write that grew the table.
    undo: u64,
    table: TableId,
    /// The slot count before the growth.
    slots_before: u64,
}

/// The replicated state of one node.
///
/// The capacity account (`bytes_used`) counts what the tables hold: every table's slot array
/// (its counted slot count times its slot size, free slots included) plus the heap bytes of
/// records whose encoding reaches beyond their slot. Both follow from the records and the
/// history of growth, never from the allocator, so every replica makes the same decisions.
pub struct State {
    tables: Vec<Option<Box<dyn AnyTable>>>,
    /// The tables of the schema, in the order declared.
    table_ids: Vec<TableId>,
    bytes_used: u64,
    capacity_bytes: u64,
    /// Bytes held outside the tables that count against the capacity too (client sessions).
    outside_bytes: u64,
    /// The table of each change in the undo logs, oldest first. Undo records live until their
    /// entry is final (so that a command that commits costs nothing, and a speculatively
    /// applied entry can be rolled back).
    undo: VecDeque<TableId>,
    /// Undo records forgotten from the front so far.
    undo_forgotten: u64,
    /// Bit `t` set: table `t` holds undo records.
    undo_tables: u64,
    /// The write stream's hasher; writes are encoded straight into its pending buffer.
    hasher: StreamHasher,
    /// Set when memory ran out below capacity: the node must stop applying.
    memory_fault: bool,
    /// Growths of tables not yet final, oldest first.
    growths: VecDeque<Growth>,
    /// Bit `t` set: table `t`'s array may hold more slots than counted (a growth was rolled
    /// back with [`State::rollback_keeping_slots`]).
    oversized_tables: u64,
}

/// A state capacity below what the handler's empty tables take: refused when the state is
/// made, since every write would then fail with [`StateError::CapacityExhausted`]. (A capacity
/// at that floor is taken, but holds little beside the empty tables: the client sessions count
/// against it too, so give room for the records and sessions.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "a state capacity of {capacity_bytes} bytes is below the {empty_bytes} bytes the handler's \
     empty tables take ({tables} declared): give at least {empty_bytes} bytes, plus room for \
     the records"
)]
pub struct CapacityTooSmall {
    /// The capacity asked for.
    pub capacity_bytes: u64,
    /// Bytes of the empty tables ([`Schema::empty_bytes`]).
    pub empty_bytes: u64,
    /// Tables the schema declares.
    pub tables: usize,
}

impl CapacityTooSmall {
    /// `Err` when `capacity_bytes` cannot hold `schema`'s empty tables.
    pub fn check(schema: &Schema, capacity_bytes: u64) -> Result<(), CapacityTooSmall> {
        let empty_bytes = schema.empty_bytes();
        match capacity_bytes < empty_bytes {
            true => Err(CapacityTooSmall {
                capacity_bytes,
                empty_bytes,
                tables: schema.table_count(),
            }),
            false => Ok(()),
        }
    }
}

impl State {
    /// An empty state with the tables of `schema` and room for `capacity_bytes`.
    ///
    /// # Panics
    /// When `capacity_bytes` cannot hold the empty tables (the message has both numbers);
    /// [`State::try_new`] returns that as an error.
    pub fn new(schema: Schema, capacity_bytes: u64) -> Self {
        State::try_new(schema, capacity_bytes).unwrap_or_else(|refused| panic!("{refused}"))
    }

    /// An empty state with the tables of `schema` and room for `capacity_bytes`, or the
    /// refusal of a capacity below the empty tables' bytes.
    pub fn try_new(schema: Schema, capacity_bytes: u64) -> Result<Self, CapacityTooSmall> {
        CapacityTooSmall::check(&schema, capacity_bytes)?;
        Ok(State::sized(schema, capacity_bytes))
    }

    /// The empty state, its capacity checked.
    fn sized(schema: Schema, capacity_bytes: u64) -> Self {
        let mut tables: Vec<Option<Box<dyn AnyTable>>> = (0..TABLES_MAX).map(|_| None).collect();
        let mut table_ids = Vec::new();
        let mut bytes_used = 0;
        for decl in schema.tables {
            let initial = slots::SLOTS_INITIAL as u64;
            let sized = bytes_used + array_bytes(decl.slot_bytes, decl.slots);
            // A size that does not fit in the capacity is not taken (see `Schema::table_sized`).
            let slots = if sized <= capacity_bytes {
                decl.slots
            } else {
                initial
            };
            tables[decl.id.0 as usize] = Some((decl.create)(slots));
            table_ids.push(decl.id);
            bytes_used += array_bytes(decl.slot_bytes, slots);
        }
        State {
            tables,
            table_ids,
            bytes_used,
            capacity_bytes,
            outside_bytes: 0,
            undo: VecDeque::new(),
            undo_forgotten: 0,
            undo_tables: 0,
            hasher: StreamHasher::default(),
            memory_fault: false,
            growths: VecDeque::new(),
            oversized_tables: 0,
        }
    }

    /// Bytes the state holds, as counted against its capacity: the tables' slot arrays and
    /// the heap bytes of records that reach beyond their slots.
    pub fn bytes_used(&self) -> u64 {
        self.bytes_used
    }

    /// The configured capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Bytes held outside the tables that count against the capacity (the client sessions,
    /// as of the last fragment applied).
    pub fn outside_bytes(&self) -> u64 {
        self.outside_bytes
    }

    /// Sets the bytes held outside the tables; a table's growth is refused once it and they
    /// would exceed the capacity.
    pub(crate) fn set_outside_bytes(&mut self, bytes: u64) {
        self.outside_bytes = bytes;
    }

    /// Memory held by all tables' slot arrays, in bytes.
    pub fn allocated_bytes(&self) -> usize {
        self.tables
            .iter()
            .flatten()
            .map(|t| t.allocated_bytes())
            .sum()
    }

    /// Memory, in bytes and part of [`State::allocated_bytes`], held by growths beside the
    /// arrays in use and left out of the capacity account: old arrays still draining into
    /// their successors, and next arrays written ahead of their growth
    /// (`notes/decisions/state-store.md`).
    pub fn growth_bytes(&self) -> usize {
        self.tables.iter().flatten().map(|t| t.growth_bytes()).sum()
    }

    /// Waits for the helper threads of the tables' growths: next arrays being written ahead,
    /// old arrays being freed. Memory figures read after it are final, which measurements of
    /// what the tables allocate need; a node never needs to wait for them.
    pub fn settle_growths(&mut self) {
        for table in self.tables.iter_mut().flatten() {
            table.settle_growth();
        }
    }

    /// The number of records in `table`.
    pub fn len<K: Key, R: Record, O: Order<K>>(&self, table: &Table<K, R, O>) -> usize {
        self.typed(table).map.len()
    }

    /// The record under `key` in `table` (a read outside any transaction, for inspection).
    pub fn get<K: Key, R: Record, O: Order<K>>(
        &self,
        table: &Table<K, R, O>,
        key: &K,
    ) -> Option<&R> {
        self.typed(table).map.get(key)
    }

    /// Every record of `table` in an unspecified order that may differ between replicas.
    pub fn iter_unordered<K: Key, R: Record, O: Order<K>>(
        &self,
        table: &Table<K, R, O>,
    ) -> impl Iterator<Item = (&K, &R)> {
        self.typed(table).map.iter()
    }

    /// The records of ordered `table` whose keys are in `keys`, in key order (the same on
    /// every replica). An empty range (its start after its end) yields nothing.
    pub fn iter_ordered<K: Key + Ord, R: Record>(
        &self,
        table: &OrderedTable<K, R>,
        keys: impl RangeBounds<K>,
    ) -> impl DoubleEndedIterator<Item = (&K, &R)> {
        let typed = self.typed(table);
        let keys = (!table::empty_range(&keys)).then(|| typed.index.range(keys));
        keys.into_iter().flatten().map(|key| {
            let record = typed
                .map
                .get(key)
                .expect("the index holds the table's keys");
            (key, record)
        })
    }

    /// Up to `limit` records of ordered `table` whose keys are in `keys`, ascending (or
    /// descending when `descending`), copied out. The keys come from the index first and
    /// their slots are prefetched together: the records of neighbouring keys lie anywhere in
    /// the slot array, and one miss at a time would cost a scan one memory latency a record.
    pub(crate) fn ordered_records<K: Key + Ord, R: Record>(
        &self,
        table: &OrderedTable<K, R>,
        keys: impl RangeBounds<K>,
        limit: usize,
        descending: bool,
    ) -> Vec<(K, R)> {
        let typed = self.typed(table);
        let mut found: Vec<&K> = Vec::new();
        if !table::empty_range(&keys) {
            let range = typed.index.range(keys);
            if descending {
                found.extend(range.rev().take(limit));
            } else {
                found.extend(range.take(limit));
            }
        }
        for key in &found {
            typed.map.touch(key);
        }
        let record = |key: &K| {
            typed
                .map
                .get(key)
                .expect("the index holds the table's keys")
        };
        found
            .into_iter()
            .map(|key| (key.clone(), record(key).clone()))
            .collect()
    }

    /// The state hash after the last finished entry.
    pub fn hash(&self) -> StateHash {
        self.hasher.digest()
    }

    /// The schema's tables, in the order declared.
    pub(crate) fn table_ids(&self) -> &[TableId] {
        &self.table_ids
    }

    /// True when a scan can see the committed content now (no pending speculation removed a
    /// record).
    pub(crate) fn can_scan(&self) -> bool {
        self.tables.iter().flatten().all(|t| t.can_scan())
    }

    /// Moves up to `slots` more slots' records of each table's growth in progress (a scan
    /// waits for them: see [`slots::MIGRATE_SLOTS_PER_SNAPSHOT_TRY`]); true when no table has
    /// one left. Only where records sit changes: no record, count or account does.
    pub(crate) fn advance_growths(&mut self, slots: usize) -> bool {
        let mut done = true;
        for table in self.tables.iter_mut().flatten() {
            done &= table.advance_growth(slots);
        }
        done
    }

    /// Starts a copy-on-write scan of every table's committed records; returns the hasher's
    /// committed state, to continue the write stream from.
    pub(crate) fn begin_scan(&mut self, track: bool) -> HasherState {
        assert!(
            self.can_scan(),
            "a scan begins only when it can see the committed records"
        );
        for table in self.tables.iter_mut().flatten() {
            table.set_tracking(track);
            table.begin_scan();
        }
        self.hasher.save()
    }

    /// True when every table knows what it wrote since the last scan began (see
    /// [`AnyTable::can_delta`]).
    pub(crate) fn can_delta(&self) -> bool {
        self.tables.iter().flatten().all(|t| t.can_delta())
    }

    /// Starts a delta's scan of every table (what each wrote since the last scan began, as
    /// committed); returns the hasher's committed state and, in the schema's order, each
    /// table's removed keys (encoded) and their count.
    pub(crate) fn begin_delta_scan(&mut self) -> (HasherState, Vec<(Vec<u8>, u64)>) {
        assert!(
            self.can_scan() && self.can_delta(),
            "a delta's scan begins only when it can see the committed records and each table \
             knows what it wrote"
        );
        let removed = (self.table_ids.iter())
            .map(|&id| {
                let mut keys = Vec::new();
                let count = table_slot(&mut self.tables, id).begin_delta_scan(&mut keys);
                (keys, count)
            })
            .collect();
        (self.hasher.save(), removed)
    }

    /// The part of the records a delta taken now would hold, as (records in it, records
    /// held), over every table; `None` when a table does not track its writes.
    pub(crate) fn written(&self) -> Option<(u64, u64)> {
        let mut sum = (0, 0);
        for table in self.tables.iter().flatten() {
            let (written, held) = table.written()?;
            sum = (sum.0 + written, sum.1 + held);
        }
        Some(sum)
    }

    /// Forgets what every table wrote since the last scan began: the next scan is whole.
    pub(crate) fn forget_written(&mut self) {
        for table in self.tables.iter_mut().flatten() {
            table.forget_written();
        }
    }

    /// Applies a delta's table `id` (its removed keys and records, see
    /// [`AnyTable::apply_delta`]) to a loaded state. The table must have the slot count the
    /// delta recorded: a delta never grows one.
    pub(crate) fn apply_delta_table(
        &mut self,
        id: TableId,
        slots: u64,
        removed: (&[u8], u64),
        records: (&[u8], u64),
    ) -> Result<(), InstallError> {
        let table = self.declared_mut(id)?;
        if table.counted_slots() != slots {
            return Err(InstallError::DeltaSlots {
                table: id.0,
                slots,
                loaded: table.counted_slots(),
            });
        }
        let (added, dropped) =
            table
                .apply_delta(removed, records)
                .map_err(|reason| InstallError::Records {
                    table: id.0,
                    reason,
                })?;
        assert!(
            self.bytes_used >= dropped,
            "the account ({} bytes) holds the {dropped} bytes of the records table {} dropped",
            self.bytes_used,
            id.0
        );
        self.bytes_used = (self.bytes_used - dropped).saturating_add(added);
        Ok(())
    }

    /// Encodes up to `slots` more slots of table `id` (see [`AnyTable::scan_step`]).
    pub(crate) fn scan_step(
        &mut self,
        id: TableId,
        slots: usize,
        out: &mut Vec<u8>,
    ) -> (slots::ScanStep, u64) {
        table_slot(&mut self.tables, id).scan_step(slots, out)
    }

    /// Abandons every scan in progress.
    pub(crate) fn end_scan(&mut self) {
        for table in self.tables.iter_mut().flatten() {
            table.end_scan();
        }
    }

    /// Bytes of slot arrays, in the capacity account, that loading tables of these slot counts
    /// into an empty state of `schema` allocates (tables not named keep their initial slots).
    /// A snapshot's arrays are checked against the capacity with it before they are allocated.
    pub fn install_array_bytes(
        schema: &Schema,
        tables: impl Iterator<Item = (TableId, u64)> + Clone,
    ) -> u64 {
        schema
            .tables
            .iter()
            .map(|decl| {
                let slots = tables.clone().find(|(id, _)| *id == decl.id);
                let slots = slots.map_or(slots::SLOTS_INITIAL as u64, |(_, slots)| slots);
                array_bytes(decl.slot_bytes, slots)
            })
            .fold(0, u64::saturating_add)
    }

    /// Heap bytes, in the capacity account, of the records of these tables (id, encoded
    /// records, count) in a state of `schema`: decoded one at a time, nothing stored. Records
    /// that do not decode count nothing (loading them reports why).
    pub fn install_heap_bytes<'a>(
        schema: &Schema,
        tables: impl Iterator<Item = (TableId, &'a [u8], u64)>,
    ) -> u64 {
        tables
            .filter_map(|(id, records, count)| {
                let decl = schema.tables.iter().find(|decl| decl.id == id)?;
                (decl.create)(slots::SLOTS_INITIAL as u64).heap_bytes_of(records, count)
            })
            .fold(0, u64::saturating_add)
    }

    /// The slot count of every table as committed (a pending speculation's growths left
    /// out), in the schema's order: what a snapshot of the committed state records.
    pub(crate) fn committed_slots(&self) -> Vec<u64> {
        self.table_ids
            .iter()
            .map(|&id| {
                let pending = self.growths.iter().find(|g| g.table == id);
                pending.map_or_else(
                    || {
                        self.tables[id.0 as usize]
                            .as_ref()
                            .expect("declared")
                            .counted_slots()
                    },
                    |growth| growth.slots_before,
                )
            })
            .collect()
    }

    /// Loads table `id` (empty) from a snapshot's encoded records, into the slot count the
    /// snapshot recorded. The capacity is checked by the caller once every table is loaded.
    pub(crate) fn load_table(
        &mut self,
        id: TableId,
        records: &[u8],
        count: u64,
        slots: u64,
    ) -> Result<(), InstallError> {
        let table = self.declared_mut(id)?;
        let before = array_bytes(table.slot_bytes(), table.counted_slots());
        let heap = table
            .load(records, count, slots)
            .map_err(|reason| InstallError::Records {
                table: id.0,
                reason,
            })?;
        let after = array_bytes(table.slot_bytes(), slots);
        assert_eq!(
            table.counted_slots(),
            slots,
            "table {} loaded counts its snapshot's slots",
            id.0
        );
        assert!(
            self.bytes_used >= before,
            "the account ({} bytes) holds table {}'s array ({before} bytes)",
            self.bytes_used,
            id.0
        );
        self.bytes_used = (self.bytes_used - before)
            .saturating_add(after)
            .saturating_add(heap);
        Ok(())
    }

    /// Table `id`, which a snapshot names: one the schema declares.
    fn declared_mut(&mut self, id: TableId) -> Result<&mut dyn AnyTable, InstallError> {
        (self.tables.get_mut(id.0 as usize))
            .and_then(Option::as_deref_mut)
            .ok_or(InstallError::UnknownTable { table: id.0 })
    }

    /// Checks the whole account against the capacity (after a snapshot's tables loaded).
    pub(crate) fn check_capacity(&self) -> Result<(), InstallError> {
        if self.bytes_used > self.capacity_bytes {
            return Err(InstallError::Capacity {
                needed_bytes: self.bytes_used,
                capacity_bytes: self.capacity_bytes,
            });
        }
        Ok(())
    }

    /// Continues the write stream a snapshot saved.
    pub(crate) fn restore_hasher(&mut self, hasher: HasherState) {
        self.hasher = StreamHasher::restore(hasher);
    }

    pub(crate) fn begin(&self) -> TxMark {
        TxMark {
            stream: self.hasher.position(),
            bytes_used: self.bytes_used,
            undo: self.undo_forgotten + self.undo.len() as u64,
        }
    }

    /// Undoes every change made since `mark`, and gives back the slots of growths it undid.
    pub(crate) fn rollback(&mut self, mark: TxMark) {
        let uncounted = self.undo_since(mark);
        self.give_back_slots(uncounted);
        // Debug builds only: a rollback ends every failed command.
        debug_assert_eq!(self.begin(), mark, "a rollback returns to its mark");
    }

    /// Undoes every change made since `mark`, but keeps the slots of growths it undid (no
    /// longer counted) until the entry finishes: for a rollback followed at once by the
    /// execution of the same commands, which grows the tables again (moving every record
    /// twice for nothing would also void a snapshot scan in progress).
    pub(crate) fn rollback_keeping_slots(&mut self, mark: TxMark) {
        self.oversized_tables |= self.undo_since(mark);
        assert_eq!(self.begin(), mark, "a rollback returns to its mark");
    }

    /// Undoes every change made since `mark`; returns the tables whose growths it uncounted
    /// (bit `t` for table `t`).
    fn undo_since(&mut self, mark: TxMark) -> u64 {
        // Debug builds only: it runs for every failed command.
        debug_assert!(
            mark.undo >= self.undo_forgotten,
            "a rollback to undo record {} reaches past the final ones ({})",
            mark.undo,
            self.undo_forgotten
        );
        while self.undo_forgotten + self.undo.len() as u64 > mark.undo {
            let id = self.undo.pop_back().expect("longer than the mark");
            table_slot(&mut self.tables, id).undo_last();
        }
        let mut uncounted = 0;
        while let Some(&growth) = self.growths.back().filter(|g| g.undo >= mark.undo) {
            self.growths.pop_back();
            table_slot(&mut self.tables, growth.table).uncount_growth(growth.slots_before);
            uncounted |= 1 << growth.table.0;
        }
        self.hasher.truncate_to(mark.stream);
        self.bytes_used = mark.bytes_used;
        uncounted
    }

    /// Gives back the slots that uncounted growths left in the tables of `tables` (bit `t`
    /// for table `t`).
    fn give_back_slots(&mut self, mut tables: u64) {
        while tables != 0 {
            let id = tables.trailing_zeros() as u16;
            tables &= tables - 1;
            table_slot(&mut self.tables, TableId(id)).give_back_slots();
        }
    }

    /// Makes everything up to `mark` final: its undo records are forgotten and its writes
    /// folded into the state hash, which is returned. Later changes stay undoable.
    pub(crate) fn confirm_through(&mut self, mark: TxMark) -> StateHash {
        while self.undo_forgotten < mark.undo {
            let id = self
                .undo
                .pop_front()
                .expect("the mark is within the undo log");
            table_slot(&mut self.tables, id).forget_oldest();
            self.undo_forgotten += 1;
        }
        while self.growths.front().is_some_and(|g| g.undo < mark.undo) {
            self.growths.pop_front();
        }
        self.hasher.absorb_through(mark.stream);
        assert_eq!(
            self.hasher.stream_bytes(),
            mark.stream,
            "the stream is absorbed through the confirmed mark"
        );
        assert_eq!(
            self.undo_forgotten, mark.undo,
            "the undo records are final through the confirmed mark"
        );
        self.hasher.digest()
    }

    /// True once memory ran out below capacity; the node must stop applying.
    pub(crate) fn memory_fault(&self) -> bool {
        self.memory_fault
    }

    /// The write stream appended since `mark` (not yet folded into the hash).
    pub(crate) fn stream_since(&self, mark: TxMark) -> &[u8] {
        self.hasher.appended_since(mark.stream)
    }

    /// Appends engine bookkeeping (such as a client session update), given in parts, to the
    /// write stream.
    pub(crate) fn record_extra(&mut self, parts: &[&[u8]]) {
        let pending = self.hasher.pending();
        for part in parts {
            pending.extend_from_slice(part);
        }
    }

    /// Folds the entry's writes into the state hash and returns the new hash.
    pub(crate) fn finish_entry(&mut self) -> StateHash {
        while self.undo_tables != 0 {
            let id = self.undo_tables.trailing_zeros() as u16;
            self.undo_tables &= self.undo_tables - 1;
            table_slot(&mut self.tables, TableId(id)).clear_undo();
        }
        self.undo_forgotten += self.undo.len() as u64;
        self.undo.clear();
        self.growths.clear();
        let oversized = std::mem::take(&mut self.oversized_tables);
        self.give_back_slots(oversized);
        self.hasher.absorb_pending();
        self.hasher.digest()
    }

    fn typed<K: Key, R: Record, O: Order<K>>(
        &self,
        table: &Table<K, R, O>,
    ) -> &TypedTable<K, R, O> {
        let any: &dyn Any = self.tables[table.id().0 as usize]
            .as_deref()
            .unwrap_or_else(|| panic!("table {} is not in the schema", table.name()));
        any.downcast_ref().unwrap_or_else(|| mismatch(table.name()))
    }

    pub(crate) fn put<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        key: K,
        record: R,
    ) -> Result<(), StateError> {
        let start = self.hasher.position();
        let encoded = encode_write(
            self.hasher.pending(),
            table.id(),
            WRITE_PUT,
            &key,
            Some(&record),
        );
        let (key_bytes, record_bytes) = match encoded {
            Ok(sizes) => sizes,
            Err(error) => return self.abandon_write(start, error),
        };
        let room = self
            .capacity_bytes
            .saturating_sub(self.bytes_used + self.outside_bytes);
        let typed = typed_mut(&mut self.tables, table);
        typed
            .map
            .set_growth_room(usize::try_from(room).unwrap_or(usize::MAX));
        let position = typed.map.position(&key);
        let cost = put_cost(typed, position, key_bytes, record_bytes);
        let bytes_used = self.bytes_used - cost.heap_old + cost.heap_new + cost.growth_bytes;
        let needed_bytes = (bytes_used + self.outside_bytes).saturating_add(cost.moving_bytes);
        if needed_bytes > self.capacity_bytes {
            let capacity_bytes = self.capacity_bytes;
            let error = StateError::CapacityExhausted {
                needed_bytes,
                capacity_bytes,
            };
            return self.abandon_write(start, error);
        }
        let slots_before = typed.counted_slots;
        if typed.put(key, record, position).is_err() {
            self.memory_fault = true;
            return self.abandon_write(start, StateError::MemoryExhausted);
        }
        if let Some(slots) = cost.slots_after {
            debug_assert!(slots > slots_before, "a growth counts more slots");
            typed.counted_slots = slots;
            self.growths.push_back(Growth {
                undo: self.undo_forgotten + self.undo.len() as u64,
                table: table.id(),
                slots_before,
            });
        }
        self.note_undo(table.id());
        self.bytes_used = bytes_used;
        // Debug builds only: it runs for every write.
        debug_assert!(
            bytes_used + self.outside_bytes <= self.capacity_bytes,
            "a write admitted takes the account to {bytes_used} bytes beside {} outside, \
             over the capacity of {} bytes",
            self.outside_bytes,
            self.capacity_bytes
        );
        Ok(())
    }

    pub(crate) fn delete<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        key: &K,
    ) -> Result<Option<R>, StateError> {
        let start = self.hasher.position();
        let encoded =
            encode_write::<K, R>(self.hasher.pending(), table.id(), WRITE_DELETE, key, None);
        let key_bytes = match encoded {
            Ok((key_bytes, _)) => key_bytes,
            Err(error) => return self.abandon_write(start, error),
        };
        let Some(old) = typed_mut(&mut self.tables, table).delete(key) else {
            self.hasher.truncate_to(start);
            return Ok(None);
        };
        self.note_undo(table.id());
        let encoded = key_bytes + codec::encoded_len(&old).unwrap_or(0);
        let charged = heap_bytes(encoded, TypedTable::<K, R, O>::INLINE_BYTES);
        let charged = charged + O::index_bytes(key_bytes);
        // Debug builds only: it runs for every write.
        debug_assert!(
            self.bytes_used >= charged,
            "a removal gives back {charged} bytes of an account of {}",
            self.bytes_used
        );
        self.bytes_used -= charged;
        Ok(Some(old))
    }

    fn note_undo(&mut self, id: TableId) {
        self.undo.push_back(id);
        self.undo_tables |= 1 << id.0;
    }

    fn abandon_write<T>(&mut self, start: u64, error: StateError) -> Result<T, StateError> {
        self.hasher.truncate_to(start);
        Err(error)
    }

    pub(crate) fn touch<K: Key, R: Record, O: Order<K>>(&self, table: &Table<K, R, O>, key: &K) {
        let any: Option<&dyn Any> = self.tables[table.id().0 as usize]
            .as_deref()
            .map(|t| t as _);
        if let Some(typed) = any.and_then(|t| t.downcast_ref::<TypedTable<K, R, O>>()) {
            typed.map.touch(key);
        }
    }
}

fn table_slot(tables: &mut [Option<Box<dyn AnyTable>>], id: TableId) -> &mut dyn AnyTable {
    tables[id.0 as usize]
        .as_deref_mut()
        .unwrap_or_else(|| panic!("table {} is not in the schema", id.0))
}

fn typed_mut<'t, K: Key, R: Record, O: Order<K>>(
    tables: &'t mut [Option<Box<dyn AnyTable>>],
    table: &Table<K, R, O>,
) -> &'t mut TypedTable<K, R, O> {
    let any: &mut dyn Any = table_slot(tables, table.id());
    any.downcast_mut().unwrap_or_else(|| mismatch(table.name()))
}

fn mismatch(name: &str) -> ! {
    panic!("table {name} used with other key or record types than its schema declares")
}

/// Bytes of a slot array of `slots` slots of `slot_bytes` each.
fn array_bytes(slot_bytes: u64, slots: u64) -> u64 {
    slot_bytes.saturating_mul(slots)
}

/// What a put changes in the capacity account.
struct PutCost {
    /// Heap bytes of the record replaced (0 for a new key) and of the new one (with its key's
    /// bytes in an ordered table's index, for a new key).
    heap_old: u64,
    heap_new: u64,
    /// The table's slot count after the put, when the put grows it.
    slots_after: Option<u64>,
    /// Bytes the grown array adds to the account.
    growth_bytes: u64,
    /// Bytes held only while a growth moves the records: the old array, alive beside the new.
    moving_bytes: u64,
}

/// The capacity cost of putting a record whose key and record encode to these sizes into
/// `typed`, at `position` when the key is there: decided from the counted slot count, before
/// the map allocates anything.
fn put_cost<K: Key, R: Record, O: Order<K>>(
    typed: &TypedTable<K, R, O>,
    position: Option<usize>,
    key_bytes: usize,
    record_bytes: usize,
) -> PutCost {
    let inline = TypedTable::<K, R, O>::INLINE_BYTES;
    let heap_old = position.map_or(0, |at| {
        heap_bytes(
            key_bytes + codec::encoded_len(typed.map.at(at)).unwrap_or(0),
            inline,
        )
    });
    let counted = typed.counted_slots;
    let slots_after = match position {
        Some(_) => counted,
        None => slots::slots_after_insert(typed.map.len(), counted as usize) as u64,
    };
    let slot_bytes = slots::slot_bytes::<K, R>();
    let grows = slots_after > counted;
    // A new key of an ordered table adds its key to the index.
    let index_new = if position.is_none() {
        O::index_bytes(key_bytes)
    } else {
        0
    };
    PutCost {
        heap_old,
        heap_new: heap_bytes(key_bytes + record_bytes, inline) + index_new,
        slots_after: grows.then_some(slots_after),
        growth_bytes: array_bytes(slot_bytes, slots_after - counted),
        moving_bytes: if grows {
            array_bytes(slot_bytes, counted)
        } else {
            0
        },
    }
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
    out.extend_from_slice(&[table.0 as u8, op]);
    let key_start = out.len();
    codec::encode_into(key, out).map_err(unencodable)?;
    let record_start = out.len();
    if let Some(record) = record {
        codec::encode_into(record, out).map_err(unencodable)?;
    }
    Ok((record_start - key_start, out.len() - record_start))
}
