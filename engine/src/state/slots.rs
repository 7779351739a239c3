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
const SLOTS_INITIAL: usize = 16;
/// The map grows when more than this fraction (numerator / denominator) of its slots are full.
const LOAD_NUMERATOR: usize = 3;
const LOAD_DENOMINATOR: usize = 4;
/// Fibonacci hashing spreads the Fx hash over the slot index bits.
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;
/// Largest emptied capture buffer a map keeps for reuse, in slot writes (a whole-array
/// capture's buffer is dropped instead).
pub(crate) const JOURNAL_SPARE_ENTRIES_MAX: usize = 1 << 20;

const _: () = assert!(SLOTS_INITIAL.is_power_of_two());
const _: () = assert!(LOAD_NUMERATOR < LOAD_DENOMINATOR);

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
    /// Every slot write since the last capture, with the content written, in order (for
    /// incremental snapshots). Kept from the first capture on: a map never captured keeps none.
    /// Copying a slot's content as it is written costs a sequential append while the slot is
    /// in cache; copying the written slots at capture time cost a cache miss each (about 0.9
    /// ms per 64 entries of transfers, on the reply path).
    journal: Vec<(u32, Option<(K, V)>)>,
    journaling: bool,
    /// An emptied journal buffer handed back by the snapshot writer, for the next capture.
    spare: Vec<(u32, Option<(K, V)>)>,
    /// The whole array changed (new or grown): the next capture takes every slot.
    dirty_all: bool,
    /// Records removed so far (a removal moves other records between slots).
    removals: u64,
}

/// The slots a capture took: the array's length, whether it took all of them, and the content
/// of each slot it took (empty or a record), by position.
pub(crate) struct SlotsCapture<K, V> {
    pub(crate) slots: usize,
    pub(crate) full: bool,
    pub(crate) changed: Vec<(u32, Option<(K, V)>)>,
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
            journal: Vec::new(),
            journaling: false,
            spare: Vec::new(),
            dirty_all: true,
            removals: 0,
        }
    }

    /// Journals the slot's content, just written (unless the next capture takes every slot).
    /// A journal longer than the array (captures not taken for long) is dropped for a whole
    /// capture instead: memory stays bounded by the table's size.
    #[inline]
    fn mark(&mut self, position: usize) {
        if self.journaling && !self.dirty_all {
            if self.journal.len() >= self.slots.len() {
                self.journal = Vec::new();
                self.dirty_all = true;
                return;
            }
            self.journal
                .push((position as u32, self.slots[position].0.clone()));
        }
    }

    /// Journals a slot's current content again, so that the next capture takes it.
    pub(crate) fn mark_dirty(&mut self, position: usize) {
        self.mark(position);
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
        let slot = self.slots[position]
            .0
            .as_mut()
            .expect("position holds a record");
        let old = std::mem::replace(&mut slot.1, value);
        self.mark(position);
        old
    }

    /// Inserts a key known to be absent. Fails only when growing the slot array fails, and then
    /// the map is unchanged.
    pub(crate) fn insert_new(&mut self, key: K, value: V) -> Result<(), TryReserveError> {
        if (self.len + 1) * LOAD_DENOMINATOR > self.slots.len() * LOAD_NUMERATOR {
            self.grow()?;
        }
        let i = self.find(&key).expect_err("key is absent");
        self.slots[i] = Slot(Some((key, value)));
        self.mark(i);
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
        let (_, removed) = self.slots[hole].0.take().expect("found slot is full");
        self.len -= 1;
        self.removals += 1;
        let mask = self.mask();
        let mut next = (hole + 1) & mask;
        while let Some((k, _)) = &self.slots[next].0 {
            let from_home = next.wrapping_sub(self.home(k)) & mask;
            let from_hole = next.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.slots[hole].0 = self.slots[next].0.take();
                self.mark(hole);
                hole = next;
            }
            next = (next + 1) & mask;
        }
        // The last hole is empty now.
        self.mark(hole);
        Some(removed)
    }

    /// Every record, in slot order (which depends on the insertion history: never let a
    /// replicated result depend on it).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots
            .iter()
            .filter_map(|slot| slot.0.as_ref().map(|(k, v)| (k, v)))
    }

    /// Takes the slots written since the last capture, in the order written (every slot, if
    /// the array changed whole), then journals afresh.
    pub(crate) fn capture(&mut self) -> SlotsCapture<K, V> {
        self.journaling = true;
        let full = std::mem::take(&mut self.dirty_all);
        let changed = if full {
            self.journal.clear();
            self.slots
                .iter()
                .enumerate()
                .filter_map(|(position, slot)| {
                    let record = slot.0.as_ref()?;
                    Some((position as u32, Some(record.clone())))
                })
                .collect()
        } else {
            let mut fresh = std::mem::take(&mut self.spare);
            if fresh.capacity() < self.journal.len() {
                // As much room as this capture took: the next one is likely alike.
                fresh = Vec::with_capacity(self.journal.len() + self.journal.len() / 4);
            }
            std::mem::replace(&mut self.journal, fresh)
        };
        SlotsCapture {
            slots: self.slots.len(),
            full,
            changed,
        }
    }

    /// Keeps an emptied capture buffer for the next capture (one at most, and none larger than
    /// [`JOURNAL_SPARE_ENTRIES_MAX`]).
    pub(crate) fn recycle(&mut self, mut buffer: Vec<(u32, Option<(K, V)>)>) {
        if buffer.capacity() <= JOURNAL_SPARE_ENTRIES_MAX
            && buffer.capacity() > self.spare.capacity()
        {
            buffer.clear();
            self.spare = buffer;
        }
    }

    /// Makes room for `records` records in all, so that loading them never grows the array.
    /// Loading a snapshot needs it: its records come in slot order, which in a smaller array
    /// fall on the same few neighbourhoods, and linear probing then turns quadratic.
    pub(crate) fn reserve(&mut self, records: usize) -> Result<(), TryReserveError> {
        let mut count = self.slots.len();
        while records * LOAD_DENOMINATOR > count * LOAD_NUMERATOR {
            count *= 2;
        }
        if count > self.slots.len() {
            self.grow_to(count)?;
        }
        Ok(())
    }

    fn grow(&mut self) -> Result<(), TryReserveError> {
        self.grow_to(self.slots.len() * 2)
    }

    fn grow_to(&mut self, count: usize) -> Result<(), TryReserveError> {
        let mut slots: Vec<Slot<K, V>> = Vec::new();
        slots.try_reserve_exact(count)?;
        super::memory::advise_huge_pages(&slots);
        slots.resize_with(count, || Slot(None));
        let old = std::mem::replace(&mut self.slots, slots);
        self.shift = 64 - count.trailing_zeros();
        self.journal.clear();
        self.dirty_all = true;
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
mod capture_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Proves incremental captures rebuild the slot array exactly: a mirror that applies
        /// every capture (full ones reset it) holds the same content at every position, through
        /// inserts, replacements, removals (which move records) and growth.
        #[test]
        fn captures_mirror_the_slots(ops in proptest::collection::vec((any::<u16>(), any::<u32>(), 0u8..4), 0..800)) {
            let mut map: Slots<u16, u32> = Slots::new();
            let mut mirror: Vec<Option<(u16, u32)>> = Vec::new();
            for (n, (key, value, kind)) in ops.into_iter().enumerate() {
                let key = key % 300;
                if kind == 0 {
                    map.remove(&key);
                } else {
                    map.insert(key, value).unwrap();
                }
                if n % 17 == 0 {
                    let capture = map.capture();
                    if capture.full {
                        mirror = vec![None; capture.slots];
                    }
                    prop_assert_eq!(mirror.len(), capture.slots);
                    for (position, content) in capture.changed {
                        mirror[position as usize] = content;
                    }
                    let live: Vec<Option<(u16, u32)>> = map.slots.iter().map(|s| s.0).collect();
                    prop_assert_eq!(&mirror, &live);
                }
            }
        }
    }
}
