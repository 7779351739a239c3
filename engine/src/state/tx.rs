//! The transaction a handler sees: typed reads and writes of one command. A leader runs the
//! same transactions speculatively before commit; the handler cannot tell.

use super::{Key, Order, OrderedTable, Record, State, StateError, Table, TxMark};
use std::ops::RangeBounds;

/// One command's transaction. Everything it writes is applied when the handler returns `Ok`, and
/// rolled back when the handler returns `Err` (or ignored a failed write).
pub struct Tx<'a> {
    state: &'a mut State,
    now_ms: u64,
    handler_version: u32,
    mark: TxMark,
    /// The first write that failed: the command cannot commit, whatever the handler returns.
    failed: Option<StateError>,
    /// The handler marked the command read-only ([`crate::Handler::read_only`]): every write
    /// fails with [`StateError::ReadOnly`].
    read_only: bool,
}

impl<'a> Tx<'a> {
    pub(crate) fn begin(state: &'a mut State, (now_ms, handler_version): (u64, u32)) -> Self {
        let mark = state.begin();
        Tx {
            state,
            now_ms,
            handler_version,
            mark,
            failed: None,
            read_only: false,
        }
    }

    /// Makes every write of this transaction fail with [`StateError::ReadOnly`].
    pub(crate) fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Commits when `ok` and no write failed; rolls back otherwise. Returns the failed write's
    /// error when there was one.
    pub(crate) fn finish(self, ok: bool) -> Option<StateError> {
        // A read-only command's writes are refused before they touch the state.
        debug_assert!(
            !self.read_only || self.state.begin() == self.mark,
            "a read-only command changed the state"
        );
        if !ok || self.failed.is_some() {
            self.state.rollback(self.mark);
        }
        self.failed
    }

    /// The time the leader stamped on the entry, in milliseconds since the Unix epoch: the only
    /// clock a handler may read (the same value on every replica).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The handler version in force at this command's entry (see
    /// [`crate::Handler::VERSIONS`]): the same on every replica, and in a replay.
    pub fn handler_version(&self) -> u32 {
        self.handler_version
    }

    /// The record under `key`, if any.
    pub fn get<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        key: &K,
    ) -> Option<R> {
        self.state.typed(table).map.get(key).cloned()
    }

    /// True when `table` holds a record under `key`.
    pub fn contains<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        key: &K,
    ) -> bool {
        self.state.typed(table).map.get(key).is_some()
    }

    /// Writes `record` under `key`, replacing any record there. Fails, changing nothing, when the
    /// state would exceed its capacity, or in a read-only command.
    pub fn put<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        key: K,
        record: R,
    ) -> Result<(), StateError> {
        let result = match self.read_only {
            true => Err(StateError::ReadOnly),
            false => self.state.put(table, key, record),
        };
        self.note(result)
    }

    /// Removes the record under `key`; returns it, or `None` when there was none. Fails,
    /// changing nothing, in a read-only command.
    pub fn delete<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        key: &K,
    ) -> Result<Option<R>, StateError> {
        let result = match self.read_only {
            true => Err(StateError::ReadOnly),
            false => self.state.delete(table, key),
        };
        self.note(result)
    }

    /// The number of records in `table`.
    pub fn len<K: Key, R: Record, O: Order<K>>(&mut self, table: &Table<K, R, O>) -> usize {
        self.state.len(table)
    }

    /// The record with the smallest key in ordered `table`, if any (this transaction's own
    /// writes included, as in every read).
    pub fn first<K: Key + Ord, R: Record>(&mut self, table: &OrderedTable<K, R>) -> Option<(K, R)> {
        let mut all = self.state.iter_ordered(table, ..);
        all.next()
            .map(|(key, record)| (key.clone(), record.clone()))
    }

    /// The record with the largest key in ordered `table`, if any.
    pub fn last<K: Key + Ord, R: Record>(&mut self, table: &OrderedTable<K, R>) -> Option<(K, R)> {
        let mut all = self.state.iter_ordered(table, ..);
        all.next_back()
            .map(|(key, record)| (key.clone(), record.clone()))
    }

    /// Up to `limit` records of ordered `table` whose keys are in `keys`, in ascending key
    /// order (the same on every replica). A range whose start is after its end is empty.
    pub fn range<K: Key + Ord, R: Record>(
        &mut self,
        table: &OrderedTable<K, R>,
        keys: impl RangeBounds<K>,
        limit: usize,
    ) -> Vec<(K, R)> {
        self.state.ordered_records(table, keys, limit, false)
    }

    /// Up to `limit` records of ordered `table` whose keys are in `keys`, in descending key
    /// order: [`Tx::range`] from the other end.
    pub fn range_rev<K: Key + Ord, R: Record>(
        &mut self,
        table: &OrderedTable<K, R>,
        keys: impl RangeBounds<K>,
        limit: usize,
    ) -> Vec<(K, R)> {
        self.state.ordered_records(table, keys, limit, true)
    }

    /// Calls `f` on every record of `table`, in an order that is unspecified and may differ
    /// between replicas: use it only for results that do not depend on order (counts, sums).
    pub fn for_each_unordered<K: Key, R: Record, O: Order<K>>(
        &mut self,
        table: &Table<K, R, O>,
        mut f: impl FnMut(&K, &R),
    ) {
        for (key, record) in self.state.iter_unordered(table) {
            f(key, record);
        }
    }

    fn note<T>(&mut self, result: Result<T, StateError>) -> Result<T, StateError> {
        if let Err(error) = &result {
            self.failed.get_or_insert_with(|| error.clone());
        }
        result
    }
}

/// Lets a handler name the records a command will touch, so that the engine can load them into
/// cache for a whole batch before executing it. Only a hint: it never changes a result.
pub struct Prefetch<'a> {
    state: &'a State,
}

impl<'a> Prefetch<'a> {
    pub(crate) fn new(state: &'a State) -> Self {
        Prefetch { state }
    }

    /// Hints that the command will read or write `key` in `table`.
    #[inline]
    pub fn key<K: Key, R: Record, O: Order<K>>(&mut self, table: &Table<K, R, O>, key: &K) {
        self.state.touch(table, key);
    }
}
