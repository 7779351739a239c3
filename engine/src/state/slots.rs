//! An open-addressing hash map with linear probing, records stored inline in the slot array.
//!
//! Why not `std` or `hashbrown`: a lookup here costs one cache miss (the key and the record share
//! the slot), the hash is deterministic (rustc-hash's Fx, no random seed), growth is fallible (a
//! full state is a business error, never an abort), and [`Slots::touch`] lets the apply loop pull
//! the slots of a whole batch into cache before executing it. See
//! `notes/decisions/state-store.md` for the measurements behind the choice.

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

const _: () = assert!(SLOTS_INITIAL.is_power_of_two());
const _: () = assert!(LOAD_NUMERATOR < LOAD_DENOMINATOR);

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
    len: usize,
    /// `64 - log2(slots.len())`: the shift that turns a spread hash into a slot index.
    shift: u32,
    /// A snapshot scan in progress (see [`Scan`]).
    scan: Option<Box<Scan<K, V>>>,
    /// The array grew while a scan was in progress: the scan is void.
    scan_void: bool,
    /// Records removed so far (a removal moves other records between slots).
    removals: u64,
}

/// A copy-on-write scan of the array as it was when the scan began: slots before `cursor`
/// are done; a slot at or past it that is about to be written has its content saved first
/// (once), and the scan reads the saved content there instead of the live one. Writes cost
/// one comparison while no scan runs, and a saved copy only the first time a slot ahead of
/// the cursor is written during one.
struct Scan<K, V> {
    cursor: usize,
    /// One bit per slot: its content at the start is in `saved`.
    saved_bits: Vec<u64>,
    saved: rustc_hash::FxHashMap<u32, Option<(K, V)>>,
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

impl<K: Hash + Eq + Clone, V: Clone> Slots<K, V> {
    /// An empty map.
    pub(crate) fn new() -> Self {
        let mut slots = Vec::with_capacity(SLOTS_INITIAL);
        slots.resize_with(SLOTS_INITIAL, || Slot(None));
        Slots {
            slots,
            len: 0,
            shift: 64 - SLOTS_INITIAL.trailing_zeros(),
            scan: None,
            scan_void: false,
            removals: 0,
        }
    }

    /// Saves the slot's content for a scan in progress before it is written (when the scan
    /// has not passed it and did not save it already).
    #[inline]
    fn before_write(&mut self, position: usize) {
        let Some(scan) = self.scan.as_deref_mut() else {
            return;
        };
        let (word, bit) = (position >> 6, 1u64 << (position & 63));
        if position >= scan.cursor && scan.saved_bits[word] & bit == 0 {
            scan.saved_bits[word] |= bit;
            scan.saved
                .insert(position as u32, self.slots[position].0.clone());
        }
    }

    /// Starts a scan of the array as it is now, except that the slots in `committed` are
    /// scanned with the content given there (what they held before changes still pending).
    pub(crate) fn begin_scan(&mut self, committed: Vec<(usize, Option<(K, V)>)>) {
        let mut scan = Scan {
            cursor: 0,
            saved_bits: vec![0; self.slots.len().div_ceil(64)],
            saved: rustc_hash::FxHashMap::default(),
        };
        for (position, content) in committed {
            scan.saved_bits[position >> 6] |= 1 << (position & 63);
            scan.saved.insert(position as u32, content);
        }
        self.scan = Some(Box::new(scan));
        self.scan_void = false;
    }

    /// Scans up to `slots` more slots, calling `record` for each record found, in slot order.
    pub(crate) fn scan_step(&mut self, slots: usize, mut record: impl FnMut(&(K, V))) -> ScanStep {
        if std::mem::take(&mut self.scan_void) {
            return ScanStep::Void;
        }
        let Some(scan) = self.scan.as_deref_mut() else {
            return ScanStep::Done;
        };
        let end = (scan.cursor + slots).min(self.slots.len());
        for position in scan.cursor..end {
            if scan.saved_bits[position >> 6] & (1 << (position & 63)) != 0 {
                if let Some(Some(saved)) = scan.saved.remove(&(position as u32)) {
                    record(&saved);
                }
            } else if let Some(live) = &self.slots[position].0 {
                record(live);
            }
        }
        scan.cursor = end;
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

    /// Abandons a scan in progress.
    pub(crate) fn end_scan(&mut self) {
        self.scan = None;
        self.scan_void = false;
    }

    /// Records removed so far.
    pub(crate) fn removals(&self) -> u64 {
        self.removals
    }

    /// The number of records held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of memory the slot array holds.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot<K, V>>()
    }

    /// The number of slots (a power of two).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, key: &K) -> usize {
        let mut hasher = FxHasher::default();
        key.hash(&mut hasher);
        (hasher.finish().wrapping_mul(SPREAD) >> self.shift) as usize
    }

    /// `Ok(i)`: the key is at slot `i`; `Err(i)`: it is absent and slot `i` is where it would go.
    fn find(&self, key: &K) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            match &self.slots[i].0 {
                None => return Err(i),
                Some((k, _)) if k == key => return Ok(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// Starts loading the key's home slot so that a later lookup finds it in cache.
    #[inline]
    pub(crate) fn touch(&self, key: &K) {
        super::memory::prefetch(&self.slots[self.home(key)]);
    }

    /// The slot holding `key`, if any: a position for [`Slots::at`] and [`Slots::replace`],
    /// valid until the next insert or removal.
    pub(crate) fn position(&self, key: &K) -> Option<usize> {
        self.find(key).ok()
    }

    /// The record at a position [`Slots::position`] returned.
    pub(crate) fn at(&self, position: usize) -> &V {
        &self.slots[position]
            .0
            .as_ref()
            .expect("position holds a record")
            .1
    }

    /// Replaces the record at a position [`Slots::position`] returned; returns the old one.
    pub(crate) fn replace(&mut self, position: usize, value: V) -> V {
        self.before_write(position);
        let slot = self.slots[position]
            .0
            .as_mut()
            .expect("position holds a record");
        std::mem::replace(&mut slot.1, value)
    }

    /// Inserts a key known to be absent. Fails only when growing the slot array fails, and then
    /// the map is unchanged.
    pub(crate) fn insert_new(&mut self, key: K, value: V) -> Result<(), TryReserveError> {
        let slots = slots_after_insert(self.len, self.slots.len());
        if slots > self.slots.len() {
            self.resize_to(slots)?;
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
            Ok(i) => self.slots[i].0.as_ref().map(|(_, v)| v),
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
        let mut hole = self.find(key).ok()?;
        self.before_write(hole);
        let (_, removed) = self.slots[hole].0.take().expect("found slot is full");
        self.len -= 1;
        self.removals += 1;
        let mask = self.mask();
        let mut next = (hole + 1) & mask;
        while let Some((k, _)) = &self.slots[next].0 {
            let from_home = next.wrapping_sub(self.home(k)) & mask;
            let from_hole = next.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.before_write(next);
                self.slots[hole].0 = self.slots[next].0.take();
                hole = next;
            }
            next = (next + 1) & mask;
        }
        Some(removed)
    }

    /// Every record, in slot order (which depends on the insertion history: never let a
    /// replicated result depend on it).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots
            .iter()
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
        self.move_to(count)
    }

    fn move_to(&mut self, count: usize) -> Result<(), TryReserveError> {
        let mut slots: Vec<Slot<K, V>> = Vec::new();
        slots.try_reserve_exact(count)?;
        super::memory::advise_huge_pages(&slots);
        slots.resize_with(count, || Slot(None));
        let old = std::mem::replace(&mut self.slots, slots);
        self.shift = 64 - count.trailing_zeros();
        if self.scan.take().is_some() {
            self.scan_void = true;
        }
        for (key, value) in old.into_iter().filter_map(|slot| slot.0) {
            let i = self.find(&key).expect_err("keys are unique");
            self.slots[i] = Slot(Some((key, value)));
        }
        Ok(())
    }
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
mod scan_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
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
            for op in before {
                apply(&mut map, op);
            }
            let mut expected: Vec<(u16, u32)> = map.iter().map(|(k, v)| (*k, *v)).collect();
            expected.sort_unstable();
            let slots = map.slots.len();
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
            if map.slots.len() == slots {
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
