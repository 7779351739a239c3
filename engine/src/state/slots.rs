//! An open-addressing hash map with linear probing, records stored inline in the slot array.
//!
//! Why not `std` or `hashbrown`: a lookup here costs one cache miss (the key and the record share
//! the slot), the hash is deterministic (rustc-hash's Fx, no random seed), growth is fallible (a
//! full state is a business error, never an abort), and [`Slots::touch`] lets the apply loop pull
//! the slots of a whole batch into cache before executing it. See
//! `notes/decisions/state-store.md` for the measurements behind the choice.

// Large tables are copied and freed on a thread of their own: when that finishes changes
// nothing the table holds, so the sans-IO rule against threads is lifted here.
#![allow(clippy::disallowed_methods)]

use rustc_hash::FxHasher;
use std::collections::TryReserveError;
use std::hash::{Hash, Hasher};

/// Slots a new map starts with; always a power of two.
pub(crate) const SLOTS_INITIAL: usize = 16;
/// The map grows when more than this fraction (numerator / denominator) of its slots are full.
const LOAD_NUMERATOR: usize = 3;
const LOAD_DENOMINATOR: usize = 4;
/// Fibonacci hashing spreads the Fx hash over the slot index bits.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;
/// Slots of the old array a growth moves per insert while it lasts (each insert moves at
/// least this many, finishing the cluster it is in). Growth is spread over the inserts after
/// it instead of moving every record at once: a table of 8 million records would otherwise
/// stop the node for about a second. At least 2, so that a growth ends before the next one
/// is due (a doubled array takes 3/4 of the old slot count in inserts to fill again).
const MIGRATE_SLOTS_PER_INSERT: usize = if cfg!(test) { 2 } else { 32 };
/// Slots of the old array a growth moves per snapshot try while it lasts. A table is scanned
/// only once its growth is done (its records are in two arrays until then), and a workload
/// that stops inserting would otherwise leave the growth, and every snapshot, waiting
/// forever. As many as a snapshot slice scans (`SNAPSHOT_SLICE_SLOTS`): a try costs what a
/// slice costs.
pub(crate) const MIGRATE_SLOTS_PER_SNAPSHOT_TRY: usize = 4096;
/// Arrays of at least this many bytes are written ahead of their growth by a helper thread
/// (see [`Next`]); smaller ones are allocated when their growth is due. Fresh memory costs
/// 0.1-0.3 s per GiB to touch for the first time on this machine kind
/// (`notes/decisions/state-store.md`), so 1 MiB costs the node thread at most a few
/// milliseconds, and a table reaches 1 GiB in ten prepared growths.
const PREPARE_BYTES_MIN: usize = if cfg!(test) { 16 << 10 } else { 1 << 20 };
/// The helper threads that write next arrays are named this.
const PREPARE_THREAD_NAME: &str = "table-grow";
/// Slots ahead of the one it moves that a drain starts loading the new home of: a moved record
/// lands in a slot of the new array nothing brought into cache. Measured on a 16M-slot growth
/// (32 slots per insert): an insert during the drain cost 920-958 ns with no prefetch, 750-830
/// with 16 ahead, 800-820 with 8.
const MIGRATE_PREFETCH_AHEAD: usize = 16;

const _: () = assert!(SLOTS_INITIAL.is_power_of_two());
const _: () = assert!(LOAD_NUMERATOR < LOAD_DENOMINATOR);
const _: () = assert!(MIGRATE_SLOTS_PER_INSERT >= 2);

/// The slot count a map of `slots` slots holding `records` records has after one more insert:
/// twice `slots` when the insert takes it past the load limit. The one growth rule, used by the
/// map and by the capacity account (which decides on it before the map allocates).
pub(crate) fn slots_after_insert(records: usize, slots: usize) -> usize {
    if (records + 1) * LOAD_DENOMINATOR > slots * LOAD_NUMERATOR {
        slots * 2
    } else {
        slots
    }
}

/// True when `slots` is a slot count a map may have while holding `records` records: a power
/// of two, at least [`SLOTS_INITIAL`], within the load limit.
pub(crate) fn slots_hold(slots: u64, records: u64) -> bool {
    slots.is_power_of_two()
        && slots >= SLOTS_INITIAL as u64
        && u128::from(records) * LOAD_DENOMINATOR as u128
            <= u128::from(slots) * LOAD_NUMERATOR as u128
}

/// Bytes of one slot of a map with keys `K` and records `V` (a compile-time constant of the
/// build: every replica running the same handler build agrees on it).
pub(crate) const fn slot_bytes<K, V>() -> u64 {
    size_of::<Slot<K, V>>() as u64
}

/// One slot, aligned to a cache line so that no slot straddles two lines: a lookup costs one
/// miss, and touching the slot's first byte brings in all of it (for records up to a line).
#[repr(align(64))]
struct Slot<K, V>(Option<(K, V)>);

/// The map: `slots.len()` is a power of two and at least one slot is always empty.
pub(crate) struct Slots<K, V> {
    slots: Vec<Slot<K, V>>,
    /// A growth in progress: the records not yet moved into `slots`.
    old: Option<Box<Migration<K, V>>>,
    /// The array the next growth will use, written ahead of it.
    next: Option<Next<K, V>>,
    /// Records held, in both arrays.
    len: usize,
    /// `64 - log2(slots.len())`: the shift that turns a spread hash into a slot index.
    shift: u32,
    /// A snapshot scan in progress (see [`Scan`]).
    scan: Option<Box<Scan<K, V>>>,
    /// What was written since the last snapshot point, for a delta (see [`Written`]); `None`
    /// while the map cannot tell.
    written: Option<Box<Written<K>>>,
    /// A scan starts tracking what is written (for a delta after it).
    tracking: bool,
    /// The array grew while a scan was in progress: the scan is void.
    scan_void: bool,
    /// Records removed so far (a removal moves other records between slots).
    removals: u64,
    /// The helper thread freeing the last drained old array, if any (see
    /// [`free_off_thread`]).
    freeing: Option<std::thread::JoinHandle<()>>,
    /// Bytes the state's capacity has left for this map's next growth, as the state last said
    /// ([`Slots::set_growth_room`]): the next array is written ahead, and kept, only for a
    /// growth the capacity could take; otherwise it would be memory held for nothing. 0 (no
    /// room) until the state says (a table loaded from a snapshot has been told nothing yet).
    growth_room: usize,
}

/// The array the next growth will use, written ahead of it off the node thread. Once the
/// table is half full, a helper thread allocates the doubled array and writes every slot
/// empty, so that the kernel's first-touch cost of the fresh memory (seconds per GiB here)
/// falls on that thread. The node thread only looks whether it is done (one atomic load per
/// insert). The growth itself still happens at the insert that crosses the load limit, on
/// every replica alike: the helper decides nothing but where the empty slots come from.
enum Next<K, V> {
    /// The helper is writing an array of this many slots.
    Writing(usize, std::thread::JoinHandle<Option<Vec<Slot<K, V>>>>),
    /// Written: every slot empty, `len() == capacity()`.
    Ready(Vec<Slot<K, V>>),
    /// Not prepared: the allocator refused the array or no thread could be started. The
    /// growth allocates when it is due, and nothing is tried again before it (a state near
    /// its memory limit would otherwise start a thread at every insert).
    Refused,
}

impl<K: Send + 'static, V: Send + 'static> Next<K, V> {
    /// Starts a helper writing an array of `count` empty slots ([`Next::Refused`] when no
    /// thread can be started).
    fn start(count: usize) -> Self {
        let thread = std::thread::Builder::new()
            .name(PREPARE_THREAD_NAME.into())
            .spawn(move || {
                let mut slots: Vec<Slot<K, V>> = Vec::new();
                slots.try_reserve_exact(count).ok()?;
                super::memory::advise_huge_pages(&slots);
                slots.resize_with(count, || Slot(None));
                Some(slots)
            });
        match thread {
            Ok(thread) => Next::Writing(count, thread),
            Err(_) => Next::Refused,
        }
    }

    /// The slot count of the array held or being written (0 when refused).
    fn count(&self) -> usize {
        match self {
            Next::Writing(count, _) => *count,
            Next::Ready(slots) => slots.capacity(),
            Next::Refused => 0,
        }
    }

    /// The array, waiting for the helper if it is still writing; `None` when it was refused.
    fn take(self) -> Option<Vec<Slot<K, V>>> {
        match self {
            Next::Writing(_, thread) => thread.join().ok().flatten(),
            Next::Ready(slots) => Some(slots),
            Next::Refused => None,
        }
    }

    /// Waits for the helper: the array written, or refused.
    fn finish(self) -> Self {
        self.take().map_or(Next::Refused, Next::Ready)
    }
}

/// Frees an array of at least [`PREPARE_BYTES_MIN`] on a helper thread (handing a gigabyte
/// back to the kernel takes tens of milliseconds), a smaller one here; the helper, if any.
fn free_off_thread<T: Send + 'static>(
    array: T,
    bytes: usize,
) -> Option<std::thread::JoinHandle<()>> {
    if bytes < PREPARE_BYTES_MIN {
        return None;
    }
    // A thread that cannot start drops its closure, and the array with it, here.
    std::thread::Builder::new()
        .name(PREPARE_THREAD_NAME.into())
        .spawn(move || drop(array))
        .ok()
}

/// The array a growth left behind, emptied a whole cluster at a time (a cluster: a run of full
/// slots between two empty ones) from an empty slot onwards, cyclically. Records still in it
/// sit in clusters nobody moved, so the ordinary probe finds them; a key whose home is in the
/// part already emptied was moved with its cluster. Inserts go to the new array only.
struct Migration<K, V> {
    slots: Vec<Slot<K, V>>,
    shift: u32,
    /// The next slot to empty.
    cursor: usize,
    /// Slots left to visit before every slot was visited once.
    remaining: usize,
}

/// A copy-on-write scan of the array as it was when the scan began: slots before `cursor`
/// are done; a slot at or past it that is about to be written has its content saved first
/// (once) and yielded at the next step, and the scan passes over it when it gets there.
/// Writes cost one comparison while no scan runs, and a saved copy only the first time a
/// slot ahead of the cursor is written during one. The records come out in slot order but
/// for the saved ones, which come first in the steps after their save (at most a step's
/// budget of them at a time): a snapshot's order is no promise (replicas' slot orders differ
/// anyway), and a list that steps empty costs a write far less than a map of saved slots,
/// which grew (and rehashed) through a whole scan.
struct Scan<K, V> {
    cursor: usize,
    /// One bit per slot: its content at the start is saved, or was yielded from there.
    saved_bits: Vec<u64>,
    /// The records saved since the last step (slots saved empty have only their bit).
    saved: Vec<(K, V)>,
    /// A delta's scan covers only these slots (one bit each): the ones written since the
    /// snapshot point before it. A whole scan covers every slot.
    only: Option<Vec<u64>>,
}

/// What a map wrote since the last snapshot point (the start of the last scan): one bit per
/// slot of its array, set by every write (a removal's shift included), and the keys it
/// removed. A delta holds the current records of those slots and the removed keys: loading
/// it over the snapshot before (removing the keys first) gives the map's records. Positions
/// are the array's: a growth ends the tracking, and so does a map made or loaded since the
/// last point, or a scan abandoned (its slots would be missing from the next delta).
struct Written<K> {
    bits: Vec<u64>,
    /// Bits set.
    count: usize,
    removed: Vec<K>,
}

impl<K> Written<K> {
    fn new(slots: usize) -> Self {
        let bits = vec![0; slots.div_ceil(64)];
        super::memory::advise_huge_pages(&bits);
        Written {
            bits,
            count: 0,
            removed: Vec::new(),
        }
    }

    #[inline]
    fn mark(&mut self, position: usize) {
        let (word, bit) = (&mut self.bits[position >> 6], 1 << (position & 63));
        self.count += usize::from(*word & bit == 0);
        *word |= bit;
    }
}

impl<K: Clone, V: Clone> Scan<K, V> {
    /// Saves `slot`'s content, at `position`, before it is written (when the scan has not
    /// passed it and did not save it already).
    #[inline]
    fn save(&mut self, position: usize, slot: &Slot<K, V>) {
        let (word, bit) = (position >> 6, 1u64 << (position & 63));
        let covered = self.only.as_ref().is_none_or(|only| only[word] & bit != 0);
        if position >= self.cursor && self.saved_bits[word] & bit == 0 && covered {
            self.saved_bits[word] |= bit;
            if let Some(record) = &slot.0 {
                self.saved.push(record.clone());
            }
        }
    }
}

impl<K, V> Scan<K, V> {
    /// Moves the cursor over the slots after it for a budget of `slots`, calling `record` for
    /// each record in a slot the scan covers and did not save; returns the new cursor. A
    /// whole scan spends one a slot; a delta's one a word of 64 slots and one a record, so
    /// that a step over slots nobody wrote costs little.
    fn advance(
        &mut self,
        array: &[Slot<K, V>],
        slots: usize,
        mut record: impl FnMut(&(K, V)),
    ) -> usize {
        let Some(only) = &self.only else {
            let end = self.cursor.saturating_add(slots).min(array.len());
            let slots = array.iter().enumerate().take(end).skip(self.cursor);
            for (position, slot) in slots {
                if self.saved_bits[position >> 6] & (1 << (position & 63)) == 0
                    && let Some(live) = &slot.0
                {
                    record(live);
                }
            }
            self.cursor = end;
            return end;
        };
        debug_assert_eq!(self.cursor % 64, 0, "a delta's scan moves a word at a time");
        let mut spent = 0;
        while self.cursor < array.len() && spent < slots {
            let word = self.cursor >> 6;
            let mut bits = only[word] & !self.saved_bits[word];
            while bits != 0 {
                if let Some(live) = &array[self.cursor + bits.trailing_zeros() as usize].0 {
                    record(live);
                }
                bits &= bits - 1;
                spent += 1;
            }
            spent += 1;
            self.cursor = (self.cursor + 64).min(array.len());
        }
        self.cursor
    }
}

/// How a scan step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScanStep {
    /// More slots to go.
    More,
    /// Every slot was scanned.
    Done,
    /// The array grew during the scan (its positions changed): the scan is void.
    Void,
}

impl<K: Hash + Eq + Clone + Send + 'static, V: Clone + Send + 'static> Slots<K, V> {
    /// An empty map.
    pub(crate) fn new() -> Self {
        let mut slots = Vec::with_capacity(SLOTS_INITIAL);
        slots.resize_with(SLOTS_INITIAL, || Slot(None));
        Slots {
            slots,
            old: None,
            next: None,
            len: 0,
            shift: 64 - SLOTS_INITIAL.trailing_zeros(),
            scan: None,
            written: None,
            tracking: true,
            scan_void: false,
            removals: 0,
            freeing: None,
            growth_room: 0,
        }
    }

    /// Says how many bytes the state's capacity has left beside what it holds now: a growth
    /// counts its new array and, while it moves the records, the old one (so a doubling needs
    /// the doubled array's bytes of room).
    pub(crate) fn set_growth_room(&mut self, bytes: usize) {
        self.growth_room = bytes;
    }

    /// Saves the slot's content for a scan in progress before it is written (when the scan
    /// has not passed it and did not save it already).
    #[inline]
    fn before_write(&mut self, position: usize) {
        if let Some(written) = self.written.as_deref_mut() {
            written.mark(position);
        }
        if let Some(scan) = self.scan.as_deref_mut() {
            scan.save(position, &self.slots[position]);
        }
    }

    /// Starts a scan of the array as it is now, except that the slots in `committed` are
    /// scanned with the content given there (what they held before changes still pending).
    /// While a growth is moving records between two arrays the scan is void at once.
    /// The scan is also a snapshot point: what the map writes from here on is tracked for
    /// the next delta.
    pub(crate) fn begin_scan(&mut self, committed: Vec<(usize, Option<(K, V)>)>) {
        self.begin_any_scan(committed, None);
    }

    /// Starts a scan of the slots written since the last snapshot point only, as they are
    /// now, except that the slots in `committed` are scanned with the content given there (as
    /// [`Slots::begin_scan`]); returns the keys removed since that point. `None`, and no scan,
    /// when the map cannot tell what it wrote (no point since it was made or loaded, a growth
    /// or an abandoned scan since): only a whole scan will do. A new snapshot point either way
    /// but the last.
    pub(crate) fn begin_delta_scan(
        &mut self,
        committed: Vec<(usize, Option<(K, V)>)>,
    ) -> Option<Vec<K>> {
        if self.old.is_some() {
            self.written = None;
        }
        let written = self.written.take()?;
        self.begin_any_scan(committed, Some(written.bits));
        Some(written.removed)
    }

    /// Whether the scans begun from now on track what is written after them (each write then
    /// sets a bit: off, no delta can follow them).
    pub(crate) fn set_tracking(&mut self, tracking: bool) {
        self.tracking = tracking;
        if !tracking {
            self.written = None;
        }
    }

    /// Ends the tracking of what was written: the next snapshot must be a whole one (the last
    /// delta taken was not kept, say).
    pub(crate) fn forget_written(&mut self) {
        self.written = None;
    }

    /// True when [`Slots::begin_delta_scan`] would start a scan: the map knows what it wrote
    /// since the last snapshot point.
    pub(crate) fn can_delta(&self) -> bool {
        self.written.is_some() && self.old.is_none()
    }

    /// Slots written (and keys removed) since the last snapshot point, when the map tracks
    /// them: what a delta would hold.
    pub(crate) fn written(&self) -> Option<(usize, usize)> {
        (self.written.as_deref()).map(|written| (written.count, written.removed.len()))
    }

    fn begin_any_scan(&mut self, committed: Vec<(usize, Option<(K, V)>)>, only: Option<Vec<u64>>) {
        if self.old.is_some() {
            self.scan = None;
            self.scan_void = true;
            self.written = None;
            return;
        }
        let mut scan = Scan {
            cursor: 0,
            saved_bits: vec![0; self.slots.len().div_ceil(64)],
            saved: Vec::new(),
            only,
        };
        // The writes of changes still pending are not in this scan: they belong to the next.
        self.written = self.tracking.then(|| {
            let mut written = Written::new(self.slots.len());
            for (position, _) in &committed {
                written.mark(*position);
            }
            Box::new(written)
        });
        for (position, content) in committed {
            assert!(
                position < self.slots.len(),
                "a committed record at slot {position} of {}",
                self.slots.len()
            );
            let bit = 1 << (position & 63);
            assert!(
                scan.saved_bits[position >> 6] & bit == 0,
                "slot {position} has one committed content"
            );
            scan.saved_bits[position >> 6] |= bit;
            scan.saved.extend(content);
        }
        self.scan = Some(Box::new(scan));
        self.scan_void = false;
    }

    /// Takes up to `slots` slots' worth of scanning: yields saved records first (each counts
    /// as one slot), then, once none is left, scans the slots after the cursor, calling
    /// `record` for each record in a slot not saved. The cursor moves only with no saved
    /// record left, so the saved ones always come from slots at or past it.
    pub(crate) fn scan_step(&mut self, slots: usize, mut record: impl FnMut(&(K, V))) -> ScanStep {
        if std::mem::take(&mut self.scan_void) {
            return ScanStep::Void;
        }
        let Some(scan) = self.scan.as_deref_mut() else {
            return ScanStep::Done;
        };
        let yielded = scan.saved.len().min(slots);
        let kept = scan.saved.len() - yielded;
        scan.saved.drain(kept..).for_each(|saved| record(&saved));
        if !scan.saved.is_empty() {
            return ScanStep::More;
        }
        let end = scan.advance(&self.slots, slots - yielded, record);
        if end < self.slots.len() {
            return ScanStep::More;
        }
        self.scan = None;
        ScanStep::Done
    }

    /// True while a scan is in progress.
    #[cfg(test)]
    pub(crate) fn scanning(&self) -> bool {
        self.scan.is_some() || self.scan_void
    }

    /// True while a scan is in progress, or was made void and not yet found so.
    pub(crate) fn scan_pending(&self) -> bool {
        self.scan.is_some() || self.scan_void
    }

    /// Abandons the snapshot whose scan this is, in progress or done: what it took over of
    /// the writes is lost with it, so the next snapshot must be a whole one.
    pub(crate) fn end_scan(&mut self) {
        self.scan = None;
        self.scan_void = false;
        self.written = None;
    }

    /// Records removed so far.
    pub(crate) fn removals(&self) -> u64 {
        self.removals
    }

    /// The number of records held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of memory the slot arrays hold (two while a growth is in progress).
    pub(crate) fn allocated_bytes(&self) -> usize {
        let old = self.old.as_ref().map_or(0, |old| old.slots.capacity());
        let next = self.next.as_ref().map_or(0, Next::count);
        (self.slots.capacity() + old + next) * size_of::<Slot<K, V>>()
    }

    /// Bytes of the arrays a growth holds beside the one in use: the old array while it
    /// drains, the next one while it is written ahead.
    pub(crate) fn growth_bytes(&self) -> usize {
        let old = self.old.as_ref().map_or(0, |old| old.slots.capacity());
        let next = self.next.as_ref().map_or(0, Next::count);
        (old + next) * size_of::<Slot<K, V>>()
    }

    /// True while a growth is moving records from the old array.
    #[cfg(test)]
    pub(crate) fn migrating(&self) -> bool {
        self.old.is_some()
    }

    /// The number of slots (a power of two).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    fn home(&self, key: &K) -> usize {
        home(key, self.shift)
    }

    /// `Ok(i)`: the key is at position `i` (a slot of the new array, or `slots.len()` plus a
    /// slot of the old one during a growth); `Err(i)`: it is absent and slot `i` of the new
    /// array is where it would go.
    fn find(&self, key: &K) -> Result<usize, usize> {
        let free = match probe(&self.slots, self.home(key), key) {
            Ok(i) => return Ok(i),
            Err(free) => free,
        };
        match &self.old {
            Some(old) => match probe(&old.slots, home(key, old.shift), key) {
                Ok(i) => Ok(self.slots.len() + i),
                Err(_) => Err(free),
            },
            None => Err(free),
        }
    }

    /// The slot a position names: in the new array, or past its end in the old one.
    fn slot(&self, position: usize) -> &Slot<K, V> {
        match position.checked_sub(self.slots.len()) {
            None => &self.slots[position],
            Some(old) => {
                &self
                    .old
                    .as_ref()
                    .expect("a position in the old array")
                    .slots[old]
            }
        }
    }

    fn slot_mut(&mut self, position: usize) -> &mut Slot<K, V> {
        match position.checked_sub(self.slots.len()) {
            None => &mut self.slots[position],
            Some(old) => {
                &mut self
                    .old
                    .as_mut()
                    .expect("a position in the old array")
                    .slots[old]
            }
        }
    }

    /// Starts loading the key's home slot so that a later lookup finds it in cache, in both
    /// arrays while a growth drains the old one (a lookup that misses the new array reads
    /// the old one too).
    #[inline]
    pub(crate) fn touch(&self, key: &K) {
        let at = self.home(key);
        super::memory::prefetch(&self.slots[at]);
        if let Some(old) = &self.old {
            super::memory::prefetch(&old.slots[home(key, old.shift)]);
        }
        // The bits a write of the key sets and reads: a bitmap of a large table is megabytes,
        // and a miss in it cost as much as the slot's own (2x the apply time at 12M records).
        if let Some(written) = &self.written {
            super::memory::prefetch(&written.bits[at >> 6]);
        }
        if let Some(scan) = &self.scan {
            super::memory::prefetch(&scan.saved_bits[at >> 6]);
            if let Some(only) = &scan.only {
                super::memory::prefetch(&only[at >> 6]);
            }
        }
    }

    /// The slot holding `key`, if any: a position for [`Slots::at`] and [`Slots::replace`],
    /// valid until the next insert or removal.
    pub(crate) fn position(&self, key: &K) -> Option<usize> {
        self.find(key).ok()
    }

    /// The record at a position [`Slots::position`] returned.
    pub(crate) fn at(&self, position: usize) -> &V {
        &self
            .slot(position)
            .0
            .as_ref()
            .expect("position holds a record")
            .1
    }

    /// Replaces the record at a position [`Slots::position`] returned; returns the old one.
    pub(crate) fn replace(&mut self, position: usize, value: V) -> V {
        self.before_write(position);
        let slot = self
            .slot_mut(position)
            .0
            .as_mut()
            .expect("position holds a record");
        std::mem::replace(&mut slot.1, value)
    }

    /// Inserts a key known to be absent. Fails only when growing the slot array fails, and then
    /// the map is unchanged.
    pub(crate) fn insert_new(&mut self, key: K, value: V) -> Result<(), TryReserveError> {
        self.migrate_step();
        self.prepare_step();
        let slots = slots_after_insert(self.len, self.slots.len());
        if slots > self.slots.len() {
            self.finish_migration();
            self.begin_growth(slots)?;
        }
        let i = self.find(&key).expect_err("key is absent");
        self.before_write(i);
        self.slots[i] = Slot(Some((key, value)));
        self.len += 1;
        Ok(())
    }

    /// The record under `key`.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        match self.find(key) {
            Ok(i) => self.slot(i).0.as_ref().map(|(_, v)| v),
            Err(_) => None,
        }
    }

    /// Inserts or replaces; returns the record replaced. Fails only when growing the slot array
    /// fails, and then the map is unchanged.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Result<Option<V>, TryReserveError> {
        match self.position(&key) {
            Some(i) => Ok(Some(self.replace(i, value))),
            None => self.insert_new(key, value).map(|()| None),
        }
    }

    /// Removes `key`; returns its record. Shifts the records after it back so that no probe
    /// sequence is broken (no tombstones).
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let position = self.find(key).ok()?;
        self.len -= 1;
        self.removals += 1;
        if let Some(at) = position.checked_sub(self.slots.len()) {
            // No scan runs during a growth: nothing to save first.
            debug_assert!(self.scan.is_none(), "no scan runs during a growth");
            let old = self.old.as_mut().expect("a position in the old array");
            return Some(remove_at(&mut old.slots, at, old.shift, |_, _| {}));
        }
        let (scan, written) = (&mut self.scan, &mut self.written);
        if let Some(written) = written.as_deref_mut() {
            written.removed.push(key.clone());
        }
        Some(remove_at(
            &mut self.slots,
            position,
            self.shift,
            |at, slot| {
                if let Some(written) = written.as_deref_mut() {
                    written.mark(at);
                }
                if let Some(scan) = scan.as_deref_mut() {
                    scan.save(at, slot);
                }
            },
        ))
    }

    /// Every record, in slot order (which depends on the insertion history: never let a
    /// replicated result depend on it).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let old = self.old.as_ref().map_or(&[][..], |old| &old.slots[..]);
        self.slots
            .iter()
            .chain(old)
            .filter_map(|slot| slot.0.as_ref().map(|(k, v)| (k, v)))
    }

    /// Moves every record into a new array of `count` slots (a power of two that holds them
    /// within the load limit): growth, loading a snapshot (which reserves the table's whole
    /// size first: its records come in slot order, which in a smaller array fall on the same
    /// few neighbourhoods, and linear probing then turns quadratic), and giving back a growth
    /// that was rolled back. Fails only when the new array cannot be allocated, and then the
    /// map is unchanged. A scan in progress is void (positions change).
    pub(crate) fn resize_to(&mut self, count: usize) -> Result<(), TryReserveError> {
        assert!(
            slots_hold(count as u64, self.len as u64),
            "{count} slots hold {} records",
            self.len
        );
        if count == self.slots.len() {
            return Ok(());
        }
        self.next = None;
        // A growth given back while it moves records (a write that grew the table was rolled
        // back) moves every record at once, as any resize here does: rare, and what a replica
        // that never ran the write has.
        self.finish_migration();
        self.begin_growth(count)?;
        self.finish_migration();
        assert!(
            self.old.is_none() && self.slots.len() == count,
            "a resize to {count} slots ends with {} slots, the old array gone: {}",
            self.slots.len(),
            self.old.is_none()
        );
        Ok(())
    }

    /// Makes a new array of `count` slots the one inserts go to; the records stay in the old
    /// one until [`Slots::migrate_step`]s move them. A scan in progress is void.
    fn begin_growth(&mut self, count: usize) -> Result<(), TryReserveError> {
        assert!(self.old.is_none(), "one growth at a time");
        assert!(
            count.is_power_of_two() && count > self.len,
            "a new array of {count} slots for {} records",
            self.len
        );
        let prepared = self.next.take().and_then(Next::take);
        let mut slots = match prepared {
            Some(next) if next.capacity() == count => next,
            _ => {
                let mut slots: Vec<Slot<K, V>> = Vec::new();
                slots.try_reserve_exact(count)?;
                super::memory::advise_huge_pages(&slots);
                slots
            }
        };
        slots.resize_with(count, || Slot(None));
        let old = std::mem::replace(&mut self.slots, slots);
        let old_shift = std::mem::replace(&mut self.shift, 64 - count.trailing_zeros());
        if self.scan.take().is_some() {
            self.scan_void = true;
        }
        self.written = None;
        let cursor = old
            .iter()
            .position(|slot| slot.0.is_none())
            .expect("an array always has an empty slot");
        self.old = Some(Box::new(Migration {
            remaining: old.len(),
            slots: old,
            shift: old_shift,
            cursor,
        }));
        Ok(())
    }

    /// Moves at least [`MIGRATE_SLOTS_PER_INSERT`] slots' records of a growth in progress
    /// (to the end of the cluster it stops in) into the new array.
    fn migrate_step(&mut self) {
        self.migrate(MIGRATE_SLOTS_PER_INSERT);
    }

    /// Starts the next growth's array on a helper thread once the table is half full (for
    /// arrays of [`PREPARE_BYTES_MIN`] and more, and only when the capacity has room for that
    /// growth), and takes it once written. An array the allocator refuses is not prepared:
    /// the growth allocates when it is due.
    fn prepare_step(&mut self) {
        let count = self.slots.len() * 2;
        match &self.next {
            Some(next) if next.count() * size_of::<Slot<K, V>>() > self.growth_room => {
                // The room shrank since the array was started (records, other tables'
                // growths, sessions): its growth would be refused, so it is not kept.
                self.drop_next();
            }
            Some(Next::Writing(_, thread)) if thread.is_finished() => {
                self.next = self.next.take().map(Next::finish);
            }
            Some(_) => {}
            None if self.old.is_none()
                && count * size_of::<Slot<K, V>>() >= PREPARE_BYTES_MIN
                && count * size_of::<Slot<K, V>>() <= self.growth_room
                && self.len * 2 >= self.slots.len() =>
            {
                self.next = Some(Next::start(count));
            }
            None => {}
        }
    }

    /// Lets go of the next array: a written one is freed off this thread, a helper still
    /// writing frees its own when done (its handle is dropped, the thread detached).
    fn drop_next(&mut self) {
        if let Some(Next::Ready(slots)) = self.next.take() {
            let bytes = slots.capacity() * size_of::<Slot<K, V>>();
            if let Some(freeing) = free_off_thread(slots, bytes)
                && let Some(earlier) = self.freeing.replace(freeing)
            {
                let _ = earlier.join();
            }
        }
    }

    /// Waits for the helper threads of this map's growth: the next array's writer (whose
    /// array is then kept) and the freeing of the last drained one.
    pub(crate) fn settle(&mut self) {
        if let Some(Next::Writing(..)) = &self.next {
            self.next = self.next.take().map(Next::finish);
        }
        if let Some(freeing) = self.freeing.take() {
            let _ = freeing.join();
        }
    }

    /// Moves up to `slots` more slots' records of a growth in progress (to the end of the
    /// cluster it stops in) into the new array; true when no growth is left in progress.
    pub(crate) fn advance_growth(&mut self, slots: usize) -> bool {
        self.migrate(slots);
        self.old.is_none()
    }

    /// Moves every record a growth in progress has not moved yet.
    fn finish_migration(&mut self) {
        self.migrate(usize::MAX);
    }

    fn migrate(&mut self, slots: usize) {
        let Some(mut old) = self.old.take() else {
            return;
        };
        let mask = old.slots.len() - 1;
        let mut visited = 0;
        // Stop only at an empty slot, so that every cluster left is whole.
        while old.remaining > 0 && (visited < slots || old.slots[old.cursor].0.is_some()) {
            let ahead = (old.cursor + MIGRATE_PREFETCH_AHEAD) & mask;
            if let Some((key, _)) = &old.slots[ahead].0 {
                super::memory::prefetch(&self.slots[self.home(key)]);
            }
            if let Some((key, value)) = old.slots[old.cursor].0.take() {
                let i = probe(&self.slots, self.home(&key), &key).expect_err("keys are unique");
                self.slots[i] = Slot(Some((key, value)));
            }
            old.cursor = (old.cursor + 1) & mask;
            old.remaining -= 1;
            visited += 1;
        }
        if old.remaining > 0 {
            self.old = Some(old);
        } else {
            // Debug builds only: it reads the whole drained array.
            debug_assert!(
                old.slots.iter().all(|slot| slot.0.is_none()),
                "a drained array holds no record"
            );
            let bytes = old.slots.capacity() * size_of::<Slot<K, V>>();
            self.freeing = free_off_thread(old, bytes);
        }
    }
}

impl<K, V> Slots<K, V> {
    /// Checks the map's shape: a power-of-two array within the load limit, its shift, a
    /// growth in progress (a doubling, draining its old array) and a scan in progress (never
    /// during a growth, its bookkeeping sized to the array). Walks no slot.
    pub(crate) fn check_invariants(&self) {
        let slots = self.slots.len();
        assert!(
            slots.is_power_of_two() && slots >= SLOTS_INITIAL,
            "{slots} slots: a power of two, at least {SLOTS_INITIAL}"
        );
        assert_eq!(
            self.shift,
            64 - slots.trailing_zeros(),
            "the shift of {slots} slots"
        );
        assert!(
            slots_hold(slots as u64, self.len as u64),
            "{slots} slots hold {} records within the load limit",
            self.len
        );
        assert!(
            self.old.is_none() || self.next.is_none(),
            "no next array is prepared while a growth drains the old one"
        );
        if let Some(old) = &self.old {
            assert_eq!(old.slots.len() * 2, slots, "a growth doubles the array");
            assert_eq!(
                old.shift,
                64 - old.slots.len().trailing_zeros(),
                "the old array's shift"
            );
            assert!(
                old.remaining <= old.slots.len() && old.cursor < old.slots.len(),
                "a drain at slot {} with {} of {} slots left",
                old.cursor,
                old.remaining,
                old.slots.len()
            );
        }
        if let Some(scan) = &self.scan {
            self.check_scan(scan);
        }
        if let Some(written) = &self.written {
            assert!(self.old.is_none(), "no tracking of writes during a growth");
            assert_eq!(
                written.bits.len(),
                slots.div_ceil(64),
                "the written slots' bits cover the array"
            );
        }
    }

    fn check_scan(&self, scan: &Scan<K, V>) {
        let slots = self.slots.len();
        assert!(
            self.old.is_none() && !self.scan_void,
            "a scan runs neither during a growth ({}) nor beside a void one ({})",
            self.old.is_some(),
            self.scan_void
        );
        assert_eq!(
            scan.saved_bits.len(),
            slots.div_ceil(64),
            "a scan's saved bits cover the {slots} slots"
        );
        if let Some(only) = &scan.only {
            assert_eq!(
                only.len(),
                scan.saved_bits.len(),
                "a delta's slots cover the array"
            );
        }
        // Each saved record is the content of a distinct slot at or past the cursor (saved
        // ahead of it, and yielded before it moves).
        assert!(
            scan.cursor <= slots && scan.saved.len() <= slots - scan.cursor,
            "a scan at slot {} of {slots} keeps {} saved records, only from slots ahead of it",
            scan.cursor,
            scan.saved.len()
        );
    }
}

/// The home slot of `key` in an array of `64 - shift` index bits.
fn home<K: Hash>(key: &K, shift: u32) -> usize {
    let mut hasher = FxHasher::default();
    key.hash(&mut hasher);
    (hasher.finish().wrapping_mul(SPREAD) >> shift) as usize
}

/// Linear probing from `home`: `Ok(i)` when `key` is at slot `i`, `Err(i)` when it is absent
/// and `i` is the first empty slot.
fn probe<K: Eq, V>(slots: &[Slot<K, V>], home: usize, key: &K) -> Result<usize, usize> {
    let mask = slots.len() - 1;
    let mut i = home;
    loop {
        match &slots[i].0 {
            None => return Err(i),
            Some((k, _)) if k == key => return Ok(i),
            Some(_) => i = (i + 1) & mask,
        }
    }
}

/// Takes the record at `hole` out and shifts the records after it back so that no probe
/// sequence is broken (no tombstones); `before_write` sees every slot before it is written.
fn remove_at<K: Hash, V>(
    slots: &mut [Slot<K, V>],
    mut hole: usize,
    shift: u32,
    mut before_write: impl FnMut(usize, &Slot<K, V>),
) -> V {
    before_write(hole, &slots[hole]);
    let (_, removed) = slots[hole].0.take().expect("found slot is full");
    let mask = slots.len() - 1;
    let mut next = (hole + 1) & mask;
    while let Some((k, _)) = &slots[next].0 {
        let from_home = next.wrapping_sub(home(k, shift)) & mask;
        let from_hole = next.wrapping_sub(hole) & mask;
        if from_home >= from_hole {
            before_write(next, &slots[next]);
            slots[hole].0 = slots[next].0.take();
            hole = next;
        }
        next = (next + 1) & mask;
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k % 512, v)),
            2 => any::<u16>().prop_map(|k| Op::Remove(k % 512)),
        ]
    }

    proptest! {
        /// Proves the map behaves as a BTreeMap under any sequence of inserts and removes,
        /// including the backward shifts of removal and growth.
        #[test]
        fn matches_btreemap(ops in proptest::collection::vec(op(), 0..600)) {
            let mut map = Slots::new();
            // Room for every growth: prepared arrays mix with inserts and removals.
            map.set_growth_room(usize::MAX);
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(map.insert(k, v).unwrap(), model.insert(k, v));
                    }
                    Op::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k)),
                }
                prop_assert_eq!(map.len(), model.len());
            }
            for (k, v) in &model {
                prop_assert_eq!(map.get(k), Some(v));
            }
            let mut all: Vec<_> = map.iter().map(|(k, v)| (*k, *v)).collect();
            all.sort_unstable();
            prop_assert_eq!(all, model.into_iter().collect::<Vec<_>>());
        }
    }
}

#[cfg(test)]
mod growth_tests {
    use super::*;

    /// Proves a growth moves the records a few slots per insert, not all at once, and that
    /// every record stays found throughout, including removals from the old array.
    #[test]
    fn growth_is_spread_over_the_inserts_after_it() {
        let mut map: Slots<u32, u32> = Slots::new();
        let mut key = 0;
        while !map.migrating() {
            map.insert_new(key, key).unwrap();
            key += 1;
        }
        let old_slots = map.old.as_ref().unwrap().slots.len();
        assert_eq!(map.slot_count(), old_slots * 2);
        let still_old = |map: &Slots<u32, u32>| {
            map.old
                .as_ref()
                .map_or(0, |old| old.slots.iter().filter(|s| s.0.is_some()).count())
        };
        assert!(
            still_old(&map) >= key as usize * 3 / 4,
            "most records wait in the old array"
        );
        assert_eq!(map.remove(&0), Some(0), "a removal from the old array");
        let mut inserts = 0;
        while map.migrating() {
            map.insert_new(key, key).unwrap();
            key += 1;
            inserts += 1;
            for k in 1..key {
                assert_eq!(map.get(&k), Some(&k), "key {k} after {inserts} inserts");
            }
        }
        assert!(
            inserts > 1 && inserts <= old_slots / 2,
            "{inserts} inserts for {old_slots}"
        );
        assert_eq!(map.len(), key as usize - 1);
        assert_eq!(map.get(&0), None);
    }

    /// A map of 256 slots, no drain under way, holding at least `records` records (keys from
    /// 0, one insert at a time), and the next key.
    fn at_256_slots_holding(records: usize) -> (Slots<u32, u32>, u32) {
        let mut map = Slots::new();
        map.set_growth_room(usize::MAX);
        let mut key = 0;
        while map.slot_count() < 256 || map.migrating() || map.len() < records {
            map.insert_new(key, key).unwrap();
            key += 1;
        }
        (map, key)
    }

    /// Asserts every key below `end` is found with itself as its record.
    fn assert_all_found(map: &Slots<u32, u32>, end: u32) {
        for k in 0..end {
            assert_eq!(map.get(&k), Some(&k));
        }
    }

    /// Proves a large enough table has its next array written ahead of the growth, from
    /// half full, and that the growth takes that array instead of allocating.
    #[test]
    fn the_next_array_is_written_ahead_of_its_growth() {
        // Past the growth to 256 slots: the next array, 512 slots of 64 bytes, is prepared.
        let (mut map, mut key) = at_256_slots_holding(0);
        while map.next.is_none() {
            assert!(map.len() * 2 <= 256, "not started before half full");
            map.insert_new(key, key).unwrap();
            key += 1;
        }
        let next = map.next.take().unwrap();
        assert_eq!(next.count(), 512);
        let written = next.take().expect("the helper wrote the array");
        assert_eq!((written.len(), written.capacity()), (512, 512));
        assert!(written.iter().all(|slot| slot.0.is_none()));
        let prepared = written.as_ptr();
        map.next = Some(Next::Ready(written));
        while map.slot_count() == 256 {
            map.insert_new(key, key).unwrap();
            key += 1;
        }
        assert_eq!(
            map.slots.as_ptr(),
            prepared,
            "the growth took the prepared array"
        );
        assert!(map.next.is_none());
        assert_all_found(&map, key);
    }

    /// Proves no next array is written for a growth the state's capacity has no room for,
    /// and that one is once the room is there.
    #[test]
    fn no_next_array_is_written_without_room_for_its_growth() {
        let (mut map, mut key) = at_256_slots_holding(0);
        let doubled = 512 * size_of::<Slot<u32, u32>>();
        map.next = None;
        map.set_growth_room(doubled - 1);
        while map.len() < 150 {
            map.insert_new(key, key).unwrap();
            key += 1;
        }
        assert!(
            map.next.is_none(),
            "nothing prepared past half full without room"
        );
        map.set_growth_room(doubled);
        map.insert_new(key, key).unwrap();
        key += 1;
        assert_eq!(map.next.as_ref().map(Next::count), Some(512));
        map.settle();
        // The room shrinks again before the growth (another table grew, say): the array is
        // let go rather than kept for a growth that would be refused.
        map.set_growth_room(doubled - 1);
        map.insert_new(key, key).unwrap();
        key += 1;
        assert_eq!(map.slot_count(), 256, "no growth yet");
        assert!(
            map.next.is_none(),
            "a prepared array is not kept without room"
        );
        map.settle();
        assert_all_found(&map, key);
    }

    /// Proves a growth due while its helper still writes waits for that array and takes it,
    /// at the same insert as without a helper, and that a resize drops a preparation.
    #[test]
    fn a_growth_waits_for_a_helper_still_writing() {
        // 192 records: the next insert crosses 3/4 of 256 slots.
        let (mut map, mut key) = at_256_slots_holding(192);
        map.next = None;
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (tell, told) = std::sync::mpsc::channel();
        let helper = std::thread::spawn(move || {
            wait.recv().unwrap();
            let slots: Vec<Slot<u32, u32>> = (0..512).map(|_| Slot(None)).collect();
            tell.send(slots.as_ptr() as usize).unwrap();
            Some(slots)
        });
        map.next = Some(Next::Writing(512, helper));
        assert_eq!(map.slot_count(), 256, "one insert before the growth");
        go.send(()).unwrap();
        map.insert_new(key, key).unwrap();
        key += 1;
        assert_eq!(map.slot_count(), 512, "the growth came at its insert");
        assert_eq!(map.slots.as_ptr() as usize, told.recv().unwrap());
        map.insert_new(key, key).unwrap();
        key += 1;
        map.resize_to(1024).unwrap();
        assert!(map.next.is_none());
        assert_all_found(&map, key);
    }

    /// Proves an array the helper could not allocate is not tried again at every insert (a
    /// state near its memory limit would start a thread per insert): the table waits for its
    /// growth, which allocates then, at the same insert as always.
    #[test]
    fn a_refused_array_is_not_tried_again_before_the_growth() {
        let (mut map, mut key) = at_256_slots_holding(128);
        // The allocator refused: the helper ends with nothing.
        let helper = std::thread::spawn(|| None);
        while !helper.is_finished() {
            std::thread::yield_now();
        }
        map.next = Some(Next::Writing(512, helper));
        map.insert_new(key, key).unwrap();
        key += 1;
        assert!(matches!(&map.next, Some(Next::Refused)));
        while map.slot_count() == 256 {
            assert!(
                matches!(&map.next, Some(Next::Refused)),
                "no new helper before the growth"
            );
            map.insert_new(key, key).unwrap();
            key += 1;
        }
        assert_eq!(map.len() - 1, 192, "the growth came past 3/4 of 256 slots");
        assert!(map.next.is_none());
        assert_all_found(&map, key);
    }
}

#[cfg(test)]
mod scan_tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Proves a step yields no more saved records than its budget of slots, however many
    /// writes came before it (a table scanned after others collects saves all that time),
    /// and that the scan still yields every record once and ends.
    #[test]
    fn a_step_yields_at_most_its_budget_of_saved_records() {
        let mut map: Slots<u32, u32> = Slots::new();
        for key in 0..100 {
            map.insert(key, key).unwrap();
        }
        assert!(map.advance_growth(usize::MAX), "no growth in progress");
        map.begin_scan(Vec::new());
        for key in 0..100 {
            map.insert(key, key + 1_000).unwrap();
        }
        let (budget, mut seen, mut steps) = (8, Vec::new(), 0);
        loop {
            let before = seen.len();
            let step = map.scan_step(budget, |(k, v)| seen.push((*k, *v)));
            assert!(seen.len() - before <= budget, "a step within its budget");
            steps += 1;
            if step == ScanStep::Done {
                break;
            }
            assert_eq!(step, ScanStep::More);
        }
        assert!(steps >= 100 / budget, "{steps} steps for 100 saved records");
        seen.sort_unstable();
        assert_eq!(seen, (0..100).map(|k| (k, k)).collect::<Vec<_>>());
    }

    /// One write of a property test: `kind` 0 removes `key`, any other puts `value` there.
    fn write(map: &mut Slots<u16, u32>, (key, value, kind): (u16, u32, u8)) {
        if kind == 0 {
            map.remove(&key);
        } else {
            map.insert(key, value).unwrap();
        }
    }

    /// Runs the scan begun on `map` to its end, `step` slots a step, making three of
    /// `during`'s writes after each step; its records, or `None` when it was void.
    fn run_scan(
        map: &mut Slots<u16, u32>,
        step: usize,
        during: &mut impl Iterator<Item = (u16, u32, u8)>,
    ) -> Option<Vec<(u16, u32)>> {
        let mut seen = Vec::new();
        loop {
            match map.scan_step(step, |(k, v)| seen.push((*k, *v))) {
                ScanStep::More => {}
                ScanStep::Done => return Some(seen),
                ScanStep::Void => return None,
            }
            for op in during.by_ref().take(3) {
                write(map, op);
            }
        }
    }

    fn records(map: &Slots<u16, u32>) -> BTreeMap<u16, u32> {
        map.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Proves a delta's scan covers only the slots written since the snapshot point before
    /// it: with nothing written, a step over the whole array yields nothing.
    #[test]
    fn a_delta_of_nothing_written_is_empty() {
        let mut map: Slots<u32, u32> = Slots::new();
        for key in 0..1_000 {
            map.insert(key, key).unwrap();
        }
        assert!(map.advance_growth(usize::MAX), "no growth in progress");
        assert!(map.begin_delta_scan(Vec::new()).is_none(), "no point yet");
        map.begin_scan(Vec::new());
        while map.scan_step(usize::MAX, |_| {}) == ScanStep::More {}
        let removed = map
            .begin_delta_scan(Vec::new())
            .expect("a point, then nothing grew");
        assert!(removed.is_empty());
        let mut seen = 0;
        let step = map.scan_step(map.slot_count() / 64, |_| seen += 1);
        assert_eq!((step, seen), (ScanStep::Done, 0));
        map.insert(7, 70).unwrap();
        map.remove(&8);
        let removed = map.begin_delta_scan(Vec::new()).expect("tracked");
        assert_eq!(removed, [8]);
        let mut seen = Vec::new();
        while map.scan_step(1, |(k, v)| seen.push((*k, *v))) == ScanStep::More {}
        assert!(seen.contains(&(7, 70)), "{seen:?}");
        assert!(
            seen.len() < 10,
            "the written slots and their shifted neighbours: {seen:?}"
        );
    }

    proptest! {
        /// Proves a chain of deltas rebuilds the map: after a whole scan (the base), each
        /// delta scan with writes before and during it, applied to what the scans before it
        /// rebuilt (its removed keys out, then its records in), gives the records the map
        /// held when the delta began. A growth, a void scan or an abandoned one ends the
        /// chain (the next delta is refused and a whole scan starts another), and nothing
        /// else does.
        #[test]
        fn deltas_over_a_base_rebuild_the_map(
            rounds in proptest::collection::vec((
                proptest::collection::vec((0u16..400, any::<u32>(), 0u8..4), 0..200),
                proptest::collection::vec((0u16..400, any::<u32>(), 0u8..4), 0..200),
                1usize..64,
                0u8..8,
            ), 1..8),
        ) {
            let mut map: Slots<u16, u32> = Slots::new();
            map.set_growth_room(usize::MAX);
            let mut rebuilt: Option<BTreeMap<u16, u32>> = None;
            let mut point_slots = 0;
            for (before, during, step, abandon) in rounds {
                for op in before {
                    write(&mut map, op);
                }
                let expected = records(&map);
                let grew = map.slots.len() != point_slots || map.migrating();
                let mut during = during.into_iter();
                let chained = rebuilt.is_some();
                match map.begin_delta_scan(Vec::new()) {
                    Some(removed) => {
                        prop_assert!(chained && !grew, "a delta only after a point, with no growth");
                        let mut base = rebuilt.take().expect("chained");
                        point_slots = map.slots.len();
                        if abandon == 0 {
                            map.end_scan();
                            continue;
                        }
                        let Some(seen) = run_scan(&mut map, step, &mut during) else {
                            continue;
                        };
                        for key in removed {
                            base.remove(&key);
                        }
                        base.extend(seen);
                        prop_assert_eq!(&base, &expected);
                        rebuilt = Some(base);
                    }
                    None => {
                        prop_assert!(!chained || grew, "the chain ended only by a growth");
                        rebuilt = None;
                        map.begin_scan(Vec::new());
                        point_slots = map.slots.len();
                        if let Some(seen) = run_scan(&mut map, step, &mut during) {
                            let base: BTreeMap<u16, u32> = seen.into_iter().collect();
                            prop_assert_eq!(&base, &expected);
                            rebuilt = Some(base);
                        }
                    }
                }
                map.check_invariants();
            }
        }

        /// Proves a scan yields the records exactly as they were when it began, whatever is
        /// inserted, replaced or removed (moving other records) while it runs, and that growth
        /// during a scan voids it.
        #[test]
        fn scans_see_the_array_as_it_began(
            before in proptest::collection::vec((0u16..300, any::<u32>(), 0u8..4), 0..600),
            during in proptest::collection::vec((0u16..300, any::<u32>(), 0u8..4), 0..600),
            step in 1usize..64,
        ) {
            let apply = |map: &mut Slots<u16, u32>, (key, value, kind): (u16, u32, u8)| {
                if kind == 0 {
                    map.remove(&key);
                } else {
                    map.insert(key, value).unwrap();
                }
            };
            let mut map: Slots<u16, u32> = Slots::new();
            map.set_growth_room(usize::MAX);
            for op in before {
                apply(&mut map, op);
            }
            let mut expected: Vec<(u16, u32)> = map.iter().map(|(k, v)| (*k, *v)).collect();
            expected.sort_unstable();
            let slots = map.slots.len();
            let growing = map.migrating();
            map.begin_scan(Vec::new());
            let mut seen = Vec::new();
            let mut during = during.into_iter();
            let outcome = loop {
                match map.scan_step(step, |(k, v)| seen.push((*k, *v))) {
                    ScanStep::More => {}
                    done @ (ScanStep::Done | ScanStep::Void) => break done,
                }
                for op in during.by_ref().take(3) {
                    apply(&mut map, op);
                }
            };
            if map.slots.len() == slots && !growing {
                prop_assert_eq!(outcome, ScanStep::Done);
                seen.sort_unstable();
                prop_assert_eq!(seen, expected);
            } else {
                prop_assert_eq!(outcome, ScanStep::Void);
            }
            prop_assert!(!map.scanning());
        }
    }
}
