//! Tables: a handler declares typed tables (its own key and record types) in a [`Schema`]; the
//! engine stores them.

use super::capture::LoadError;
use super::slots::{SLOTS_INITIAL, ScanStep, Slots, slot_bytes, slots_hold};
use crate::codec::{Decode, Encode};
use std::any::Any;
use std::collections::{BTreeSet, TryReserveError, VecDeque};
use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

/// Tables a schema may declare; table ids run from 0 to `TABLES_MAX - 1`.
pub const TABLES_MAX: usize = 64;

const _: () = assert!(
    TABLES_MAX <= u8::MAX as usize,
    "table ids fit the write stream's byte"
);

/// A table key: any type that hashes, compares and encodes deterministically (an account id, an
/// order id, a `(resource, day)` pair).
pub trait Key: Clone + Eq + Hash + Encode + Decode<()> + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Encode + Decode<()> + Send + Sync + 'static> Key for T {}

/// A table record: any type that clones, compares and encodes (an account, an order, a
/// booking). Comparison lets a simulation's reads be verified against the committed state.
pub trait Record: Clone + PartialEq + Encode + Decode<()> + Send + Sync + 'static {}
impl<T: Clone + PartialEq + Encode + Decode<()> + Send + Sync + 'static> Record for T {}

/// The number that names a table in the state, the write stream and snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableId(pub u16);

/// A typed handle on one table, declared once by a handler as a constant. A table is hashed
/// (point reads and writes) unless declared ordered, which adds iteration in key order, range
/// scans, first and last (see [`OrderedTable`]):
///
/// ```
/// # use engine::{OrderedTable, Table};
/// const ORDERS: Table<u64, (u32, u64)> = Table::new(0, "orders");
/// const LEVELS: OrderedTable<u64, u64> = Table::ordered(1, "levels");
/// ```
pub struct Table<K, R, O = Hashed> {
    id: TableId,
    name: &'static str,
    types: PhantomData<Types<K, R, O>>,
}

/// A table handle's types, in a form that is `Send`, `Sync` and `Copy` whatever they are.
type Types<K, R, O> = fn() -> (K, R, O);

/// A table whose keys are also kept in key order: [`crate::Tx::first`], [`crate::Tx::last`],
/// [`crate::Tx::range`] and [`crate::Tx::range_rev`] read it in that order.
pub type OrderedTable<K, R> = Table<K, R, Ordered>;

impl<K: Key, R: Record> Table<K, R> {
    /// A hashed table with id `id` (below [`TABLES_MAX`]) and a name for reports.
    pub const fn new(id: u16, name: &'static str) -> Self {
        Table::declare(id, name)
    }
}

impl<K: Key + Ord, R: Record> Table<K, R, Ordered> {
    /// An ordered table with id `id` (below [`TABLES_MAX`]) and a name for reports: hashed
    /// point reads as any table, plus an index of its keys in their `Ord` order.
    pub const fn ordered(id: u16, name: &'static str) -> Self {
        Table::declare(id, name)
    }
}

impl<K, R, O> Table<K, R, O> {
    const fn declare(id: u16, name: &'static str) -> Self {
        assert!(
            (id as usize) < TABLES_MAX,
            "table id must be below TABLES_MAX"
        );
        Table {
            id: TableId(id),
            name,
            types: PhantomData,
        }
    }

    /// The table's id.
    pub const fn id(&self) -> TableId {
        self.id
    }

    /// The table's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// How a table keeps its keys: [`Hashed`] (no order) or [`Ordered`] (an index in key order
/// besides the hashed records). Sealed: the engine's two kinds are the only ones.
pub trait Order<K>: sealed::Sealed + Send + Sync + 'static {
    /// The keys' index: nothing for a hashed table, the keys in order for an ordered one.
    #[doc(hidden)]
    type Index: Default + Send + Sync + 'static;
    /// Adds `key` (absent from the index) to `index`.
    #[doc(hidden)]
    fn index_insert(index: &mut Self::Index, key: &K);
    /// Removes `key` (present in the index) from `index`.
    #[doc(hidden)]
    fn index_remove(index: &mut Self::Index, key: &K);
    /// Keys in `index` (a hashed table's index counts none).
    #[doc(hidden)]
    fn index_len(index: &Self::Index) -> usize;
    /// Bytes the capacity account charges the index for one key that encodes to `key_bytes`.
    #[doc(hidden)]
    fn index_bytes(key_bytes: usize) -> u64;
    /// Whether the index holds the table's keys (an ordered table's does; a hashed table's
    /// holds none).
    #[doc(hidden)]
    const KEEPS_KEYS: bool;
}

mod sealed {
    /// Keeps [`super::Order`] to the engine's two kinds.
    pub trait Sealed {}
    impl Sealed for super::Hashed {}
    impl Sealed for super::Ordered {}
}

/// A hashed table's kind: point reads and writes, no order (the default of [`Table`]).
#[derive(Clone, Copy, Debug)]
pub struct Hashed;

/// An ordered table's kind: its keys are also kept in a `BTreeSet`, in their `Ord` order.
#[derive(Clone, Copy, Debug)]
pub struct Ordered;

impl<K> Order<K> for Hashed {
    type Index = ();
    const KEEPS_KEYS: bool = false;

    #[inline(always)]
    fn index_insert((): &mut (), _: &K) {}

    #[inline(always)]
    fn index_remove((): &mut (), _: &K) {}

    fn index_len((): &()) -> usize {
        0
    }

    #[inline(always)]
    fn index_bytes(_: usize) -> u64 {
        0
    }
}

impl<K: Key + Ord> Order<K> for Ordered {
    type Index = BTreeSet<K>;
    const KEEPS_KEYS: bool = true;

    fn index_insert(index: &mut BTreeSet<K>, key: &K) {
        let added = index.insert(key.clone());
        debug_assert!(added, "the index follows the records");
    }

    fn index_remove(index: &mut BTreeSet<K>, key: &K) {
        let removed = index.remove(key);
        debug_assert!(removed, "the index follows the records");
    }

    fn index_len(index: &BTreeSet<K>) -> usize {
        index.len()
    }

    fn index_bytes(key_bytes: usize) -> u64 {
        let inline = size_of::<K>();
        INDEX_KEY_OVERHEAD_BYTES + INDEX_KEY_COPIES * inline as u64 + heap_bytes(key_bytes, inline)
    }
}

/// Copies of a key's inline size the account charges an ordered table's index per key. The
/// index is a `BTreeSet`: nodes of 11 keys (a leaf: the keys, a parent link and two lengths;
/// an inner node also 12 child links), never fewer than 5 outside the root (std rebalances
/// below that). At that worst fill a `u64` key costs ~31 bytes; measured with a counting
/// allocator, 15.4 bytes after random inserts and 19.6 after ascending ones. The charge
/// (2 copies + [`INDEX_KEY_OVERHEAD_BYTES`]: 32 bytes for a `u64`) bounds the worst fill.
pub(crate) const INDEX_KEY_COPIES: u64 = 2;

/// Bytes the account charges an ordered table's index per key beyond the key's copies: a
/// node's share of its links and lengths (see [`INDEX_KEY_COPIES`]).
pub(crate) const INDEX_KEY_OVERHEAD_BYTES: u64 = 16;

/// The tables a handler uses: the engine creates them before the first command.
#[derive(Default)]
pub struct Schema {
    pub(crate) tables: Vec<TableDecl>,
}

pub(crate) struct TableDecl {
    pub(crate) id: TableId,
    pub(crate) name: &'static str,
    pub(crate) create: fn(u64) -> Box<dyn AnyTable>,
    /// Bytes of one slot of the table's array.
    pub(crate) slot_bytes: u64,
    /// Slots the table asks to start with (at least [`SLOTS_INITIAL`]).
    pub(crate) slots: u64,
}

/// The fewest slots (a power of two, at least [`SLOTS_INITIAL`]) that hold `records` records
/// within the load limit; [`SLOTS_INITIAL`] for a count no array could hold.
fn slots_for(records: u64) -> u64 {
    let mut slots = SLOTS_INITIAL as u64;
    while !super::slots::slots_hold(slots, records) {
        match slots.checked_mul(2) {
            Some(more) => slots = more,
            None => return SLOTS_INITIAL as u64,
        }
    }
    slots
}

impl Schema {
    /// An empty schema.
    pub fn new() -> Self {
        Schema::default()
    }

    /// Bytes the schema's tables take when empty: every table's first array, of
    /// `SLOTS_INITIAL` slots (what a capacity must hold at least before any record).
    pub fn empty_bytes(&self) -> u64 {
        self.tables
            .iter()
            .map(|decl| decl.slot_bytes.saturating_mul(SLOTS_INITIAL as u64))
            .fold(0, u64::saturating_add)
    }

    /// Tables declared.
    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    /// Declares `table`. Each id may be declared once.
    pub fn table<K: Key, R: Record, O: Order<K>>(self, table: &Table<K, R, O>) -> Self {
        self.table_sized(table, 0)
    }

    /// Declares `table` with room for `records` records from the start, so that it does not
    /// grow until it holds more (growth is spread over later inserts, but a table that will
    /// be large is cheapest sized once). The slots are charged to the capacity account from
    /// the start; a size whose array would not fit in the state's capacity (beside the tables
    /// declared before it) is not taken, and the table starts small and grows as any other.
    /// The size is part of the schema: every replica must run the same, as with any table.
    pub fn table_sized<K: Key, R: Record, O: Order<K>>(
        mut self,
        table: &Table<K, R, O>,
        records: u64,
    ) -> Self {
        assert!(
            self.tables.iter().all(|t| t.id != table.id),
            "table id {} declared twice (second name: {})",
            table.id.0,
            table.name
        );
        self.tables.push(TableDecl {
            id: table.id,
            name: table.name,
            create: TypedTable::<K, R, O>::boxed,
            slot_bytes: slot_bytes::<K, R>(),
            slots: slots_for(records),
        });
        self
    }

    /// True when the schema declares a table with this id.
    pub fn declares(&self, id: TableId) -> bool {
        self.tables.iter().any(|t| t.id == id)
    }

    /// The declared tables' ids and names, in the order declared.
    pub fn tables(&self) -> impl Iterator<Item = (TableId, &'static str)> + '_ {
        self.tables.iter().map(|t| (t.id, t.name))
    }
}

/// The operations the state needs on a table whose types it does not know.
pub(crate) trait AnyTable: Any + Send + Sync {
    /// Reverts the newest change still in the undo log.
    fn undo_last(&mut self);
    /// Forgets the undo log (the entry finished).
    fn clear_undo(&mut self);
    /// Forgets the oldest undo record (its entry became final).
    fn forget_oldest(&mut self);
    /// Memory held by the table's slots, in bytes.
    fn allocated_bytes(&self) -> usize;
    /// Memory held by the arrays of a growth beside the one in use (see
    /// [`Slots::growth_bytes`]), in bytes.
    fn growth_bytes(&self) -> usize;
    /// Waits for the helper threads of the table's growth (see [`Slots::settle`]).
    fn settle_growth(&mut self);
    /// Bytes of one slot.
    fn slot_bytes(&self) -> u64;
    /// The slot count the capacity account charges for: what the array holds unless a rolled
    /// back growth could not be given back.
    fn counted_slots(&self) -> u64;
    /// Charges for `slots` slots again after a growth was rolled back (the array keeps its
    /// slots until [`AnyTable::give_back_slots`]).
    fn uncount_growth(&mut self, slots: u64);
    /// Gives the array's slots beyond the counted ones back, when the allocator has room for
    /// the smaller array (else it keeps them: more memory than counted, never an abort).
    fn give_back_slots(&mut self);
    /// True when [`AnyTable::begin_scan`] can see the committed content now (false while a
    /// pending speculation removed records, which moves others between slots).
    fn can_scan(&self) -> bool;
    /// Moves up to `slots` more slots' records of a growth in progress into the new array;
    /// true when none is left in progress (see [`Slots::advance_growth`]).
    fn advance_growth(&mut self, slots: usize) -> bool;
    /// Starts a copy-on-write scan of the committed records (pending speculations' writes
    /// replaced by what their undo records kept).
    fn begin_scan(&mut self);
    /// Encodes up to `slots` more slots' records as `(key, record)` pairs onto `out`; returns
    /// how the scan stands and how many records it encoded.
    fn scan_step(&mut self, slots: usize, out: &mut Vec<u8>) -> (ScanStep, u64);
    /// Abandons the snapshot whose scan this is: the next one must be whole.
    fn end_scan(&mut self);
    /// True when the table knows what it wrote since the last snapshot point, so that
    /// [`AnyTable::begin_delta_scan`] can start.
    fn can_delta(&self) -> bool;
    /// Starts a delta's copy-on-write scan (the committed records of the slots written since
    /// the last snapshot point); encodes the keys removed since onto `removed` and returns
    /// their count.
    fn begin_delta_scan(&mut self, removed: &mut Vec<u8>) -> u64;
    /// Forgets what was written since the last snapshot point: the next snapshot is whole.
    fn forget_written(&mut self);
    /// Whether scans begun from now on track the writes after them (see
    /// [`Slots::set_tracking`]).
    fn set_tracking(&mut self, tracking: bool);
    /// Records a delta taken now would hold (slots written and keys removed since the last
    /// snapshot point), and the records the table holds; `None` without tracking.
    fn written(&self) -> Option<(u64, u64)>;
    /// Applies a delta's removed keys and records (each encoded, with its count) to a loaded
    /// table; returns the account's bytes beyond the slots added and dropped.
    fn apply_delta(
        &mut self,
        removed: (&[u8], u64),
        records: (&[u8], u64),
    ) -> Result<(u64, u64), LoadError>;
    /// The bytes beyond the slots (records' heap bytes, an ordered table's index) the account
    /// charges for `count` encoded `(key, record)` pairs, decoded
    /// and dropped one at a time (none is stored); `None` when one does not decode.
    fn heap_bytes_of(&self, records: &[u8], count: u64) -> Option<u64>;
    /// Fills an empty table of `slots` slots from `count` encoded `(key, record)` pairs (and
    /// an ordered table's index from their keys); returns the bytes the account charges for
    /// them beyond the slots (see [`TypedTable::loaded_bytes`]).
    fn load(&mut self, records: &[u8], count: u64, slots: u64) -> Result<u64, LoadError>;
    /// Undo records held (changes not yet final).
    fn undo_len(&self) -> usize;
    /// True while a snapshot scan is in progress, or was made void and not yet found so.
    fn scan_pending(&self) -> bool;
    /// Checks the table's own invariants (table `id` of the state); panics naming the first
    /// one broken.
    fn check_invariants(&self, id: TableId);
}

/// A table's records, its keys' index (an ordered table's) and the undo log of the running
/// command.
pub(crate) struct TypedTable<K, R, O: Order<K> = Hashed> {
    pub(crate) map: Slots<K, R>,
    /// The keys in order (an ordered table's; nothing for a hashed one): always exactly the
    /// keys of `map`, changed with it by every write, undo and load.
    pub(crate) index: O::Index,
    /// The previous value of each key written by a change not yet final, oldest first.
    pub(crate) undo: VecDeque<(K, Option<R>)>,
    /// Removals counted the last time no change was pending.
    pub(crate) removals_final: u64,
    /// The slot count the capacity account charges for (see [`AnyTable::counted_slots`]).
    pub(crate) counted_slots: u64,
}

impl<K: Key, R: Record, O: Order<K>> TypedTable<K, R, O> {
    /// A table of `slots` slots (a power of two, at least [`SLOTS_INITIAL`]).
    pub(crate) fn boxed(slots: u64) -> Box<dyn AnyTable> {
        let mut map = Slots::new();
        // The account charges `slots` whatever happens (every replica agrees on it). Memory
        // the system refuses leaves the array small, to grow as any other: the account stays
        // the same on every replica.
        let _ = map.resize_to(slots as usize);
        Box::new(TypedTable::<K, R, O> {
            map,
            index: O::Index::default(),
            undo: VecDeque::new(),
            removals_final: 0,
            counted_slots: slots,
        })
    }

    /// Bytes a key and record take inline, in a slot.
    pub(crate) const INLINE_BYTES: usize = size_of::<(K, R)>();

    /// Bytes the account charges, beyond its slot, for a record loaded from a snapshot whose
    /// key and record encode to `encoded_bytes`: its heap bytes and its key's in the index.
    pub(crate) fn loaded_bytes(key: &K, encoded_bytes: usize) -> u64 {
        let key_bytes = crate::codec::encoded_len(key).unwrap_or(0);
        heap_bytes(encoded_bytes, Self::INLINE_BYTES) + O::index_bytes(key_bytes)
    }

    /// Writes `record` under `key`, at `position` when the key is already there, remembering
    /// the previous value for a rollback.
    pub(crate) fn put(
        &mut self,
        key: K,
        record: R,
        position: Option<usize>,
    ) -> Result<(), TryReserveError> {
        let old = match position {
            Some(position) => Some(self.map.replace(position, record)),
            None => {
                self.map.insert_new(key.clone(), record)?;
                O::index_insert(&mut self.index, &key);
                None
            }
        };
        self.undo.push_back((key, old));
        Ok(())
    }

    /// Removes `key`, remembering the previous value for a rollback.
    pub(crate) fn delete(&mut self, key: &K) -> Option<R> {
        let old = self.map.remove(key)?;
        O::index_remove(&mut self.index, key);
        self.undo.push_back((key.clone(), Some(old.clone())));
        Some(old)
    }
}

impl<K: Key, R: Record, O: Order<K>> AnyTable for TypedTable<K, R, O> {
    fn undo_last(&mut self) {
        let (key, old) = self
            .undo
            .pop_back()
            .expect("undo log matches the state's undo order");
        match old {
            // Restoring a key that the command replaced or removed never grows the slot array:
            // the table held it before the command began.
            Some(record) => {
                let replaced = self
                    .map
                    .insert(key.clone(), record)
                    .expect("restoring a key never grows the table");
                if replaced.is_none() {
                    O::index_insert(&mut self.index, &key);
                }
            }
            None => {
                self.map.remove(&key);
                O::index_remove(&mut self.index, &key);
            }
        }
    }

    fn clear_undo(&mut self) {
        self.undo.clear();
        self.removals_final = self.map.removals();
    }

    fn forget_oldest(&mut self) {
        self.undo
            .pop_front()
            .expect("undo log matches the state's undo order");
        if self.undo.is_empty() {
            self.removals_final = self.map.removals();
        }
    }

    fn can_scan(&self) -> bool {
        self.undo.is_empty() || self.map.removals() == self.removals_final
    }

    fn advance_growth(&mut self, slots: usize) -> bool {
        self.map.advance_growth(slots)
    }

    fn begin_scan(&mut self) {
        self.begin_committed_scan();
    }

    fn scan_step(&mut self, slots: usize, out: &mut Vec<u8>) -> (ScanStep, u64) {
        let mut records = 0;
        let step = self.map.scan_step(slots, |record| {
            crate::codec::encode_into(record, out).expect("records encode into a vector");
            records += 1;
        });
        (step, records)
    }

    fn end_scan(&mut self) {
        self.map.end_scan();
    }

    fn can_delta(&self) -> bool {
        self.map.can_delta()
    }

    fn begin_delta_scan(&mut self, removed: &mut Vec<u8>) -> u64 {
        self.begin_committed_delta_scan(removed)
    }

    fn forget_written(&mut self) {
        self.map.forget_written();
    }

    fn set_tracking(&mut self, tracking: bool) {
        self.map.set_tracking(tracking);
    }

    fn written(&self) -> Option<(u64, u64)> {
        let (slots, removed) = self.map.written()?;
        Some(((slots + removed) as u64, self.map.len() as u64))
    }

    fn apply_delta(
        &mut self,
        removed: (&[u8], u64),
        records: (&[u8], u64),
    ) -> Result<(u64, u64), LoadError> {
        TypedTable::apply_delta(self, removed, records)
    }

    fn load(&mut self, records: &[u8], count: u64, slots: u64) -> Result<u64, LoadError> {
        self.load_records(records, count, slots)
    }

    fn allocated_bytes(&self) -> usize {
        self.map.allocated_bytes()
    }

    fn growth_bytes(&self) -> usize {
        self.map.growth_bytes()
    }

    fn settle_growth(&mut self) {
        self.map.settle();
    }

    fn heap_bytes_of(&self, mut records: &[u8], count: u64) -> Option<u64> {
        let mut bytes = 0;
        for _ in 0..count {
            let ((key, _), used): ((K, R), usize) = crate::codec::decode_prefix(records).ok()?;
            records = &records[used..];
            bytes += Self::loaded_bytes(&key, used);
        }
        Some(bytes)
    }

    fn slot_bytes(&self) -> u64 {
        slot_bytes::<K, R>()
    }

    fn counted_slots(&self) -> u64 {
        self.counted_slots
    }

    fn uncount_growth(&mut self, slots: u64) {
        assert!(
            slots < self.counted_slots,
            "a growth undone counts fewer slots: {slots}, not fewer than {}",
            self.counted_slots
        );
        self.counted_slots = slots;
    }

    fn give_back_slots(&mut self) {
        if self.map.slot_count() as u64 > self.counted_slots {
            // Failure keeps the larger array (see the trait).
            let _ = self.map.resize_to(self.counted_slots as usize);
            assert!(
                self.map.slot_count() as u64 >= self.counted_slots,
                "giving slots back leaves {} slots, fewer than the {} counted",
                self.map.slot_count(),
                self.counted_slots
            );
        }
    }

    fn undo_len(&self) -> usize {
        self.undo.len()
    }

    fn scan_pending(&self) -> bool {
        self.map.scan_pending()
    }

    fn check_invariants(&self, id: TableId) {
        let records = self.map.len() as u64;
        let indexed = O::index_len(&self.index) as u64;
        assert_eq!(
            indexed,
            if O::KEEPS_KEYS { records } else { 0 },
            "table {}: the index holds {indexed} keys, the table {records} records",
            id.0
        );
        assert!(
            slots_hold(self.counted_slots, records),
            "table {}: {} counted slots cannot hold {records} records",
            id.0,
            self.counted_slots
        );
        assert!(
            self.map.removals() >= self.removals_final,
            "table {}: {} removals, fewer than the {} counted when last final",
            id.0,
            self.map.removals(),
            self.removals_final
        );
        self.map.check_invariants();
    }
}

/// The heap bytes the capacity account charges for a record whose key and record encode to
/// `encoded_bytes` and take `inline_bytes` in their slot: what the encoding holds beyond the
/// slot (string and vector contents live outside it) plus one allocation's overhead; nothing
/// for records that fit their slot (integers and fixed-size structs). A function of the
/// record's value and the build's types only, so every replica charges the same.
pub(crate) fn heap_bytes(encoded_bytes: usize, inline_bytes: usize) -> u64 {
    match encoded_bytes.checked_sub(inline_bytes) {
        Some(beyond) if beyond > 0 => beyond as u64 + HEAP_RECORD_OVERHEAD_BYTES,
        Some(_) | None => 0,
    }
}

/// Bytes the account adds for a record with contents outside its slot, beyond those contents:
/// the allocator's header and rounding, and the inline part of the contents' length that the
/// encoding's length prefix does not cover.
pub(crate) const HEAP_RECORD_OVERHEAD_BYTES: u64 = 32;

/// True when `keys` holds no key by its bounds alone (its start after its end, or one key
/// excluded at both ends): the ranges that `BTreeSet::range` refuses with a panic, which a
/// handler's read must never cause.
pub(crate) fn empty_range<K: Ord>(keys: &impl RangeBounds<K>) -> bool {
    match (keys.start_bound(), keys.end_bound()) {
        (Bound::Excluded(start), Bound::Excluded(end)) => start >= end,
        (Bound::Included(start) | Bound::Excluded(start), Bound::Included(end))
        | (Bound::Included(start), Bound::Excluded(end)) => start > end,
        (Bound::Unbounded, Bound::Included(_) | Bound::Excluded(_) | Bound::Unbounded)
        | (Bound::Included(_) | Bound::Excluded(_), Bound::Unbounded) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::empty_range;
    use std::ops::Bound;

    /// Proves exactly the ranges that `BTreeSet::range` refuses (start after end, one key
    /// excluded at both ends) are the ones found empty by their bounds, and that those are
    /// empty in a model.
    #[test]
    fn empty_ranges_are_the_ones_btreeset_refuses() {
        let set: std::collections::BTreeSet<u32> = (0..10).collect();
        let bounds = |k: u32| [Bound::Included(k), Bound::Excluded(k), Bound::Unbounded];
        for start in (2..5).flat_map(bounds) {
            for end in (2..5).flat_map(bounds) {
                let range = (start, end);
                let refused = std::panic::catch_unwind(|| set.range(range).count()).is_err();
                assert_eq!(empty_range(&range), refused, "{range:?}");
            }
        }
    }
}
