//! The transaction a handler sees: typed reads and writes of one command, against the committed
//! state (execution) or against the leader's speculative overlay (simulation). The handler
//! cannot tell the two apart.

use super::overlay::{Overlay, OverlayMark, Step};
use super::{Key, Record, State, StateError, Table, TxMark};

/// What a transaction reads and writes.
enum Target<'a> {
    /// The committed state; rollback by undo log.
    Real { state: &'a mut State, mark: TxMark },
    /// The overlay above the committed state; the committed state is only read.
    Sim {
        base: &'a State,
        overlay: &'a mut Overlay,
        mark: OverlayMark,
    },
}

/// One command's transaction. Everything it writes is applied when the handler returns `Ok`, and
/// rolled back when the handler returns `Err` (or ignored a failed write).
pub struct Tx<'a> {
    target: Target<'a>,
    now_ms: u64,
    /// The first write that failed: the command cannot commit, whatever the handler returns.
    failed: Option<StateError>,
}

impl<'a> Tx<'a> {
    /// A transaction on the committed state.
    pub(crate) fn begin(state: &'a mut State, now_ms: u64) -> Self {
        let mark = state.begin();
        Tx {
            target: Target::Real { state, mark },
            now_ms,
            failed: None,
        }
    }

    /// A transaction of a simulated command (`step`) on the overlay above `base`.
    pub(crate) fn simulate(
        base: &'a State,
        overlay: &'a mut Overlay,
        step: Step,
        now_ms: u64,
    ) -> Self {
        let mark = overlay.begin(step);
        Tx {
            target: Target::Sim {
                base,
                overlay,
                mark,
            },
            now_ms,
            failed: None,
        }
    }

    /// Commits when `ok` and no write failed; rolls back otherwise. Returns the failed write's
    /// error when there was one.
    pub(crate) fn finish(self, ok: bool) -> Option<StateError> {
        if !ok || self.failed.is_some() {
            match self.target {
                Target::Real { state, mark } => state.rollback(mark),
                Target::Sim { overlay, mark, .. } => overlay.rollback(mark),
            }
        }
        self.failed
    }

    /// The time the leader stamped on the entry, in milliseconds since the Unix epoch: the only
    /// clock a handler may read (the same value on every replica).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The record under `key`, if any.
    pub fn get<K: Key, R: Record>(&mut self, table: &Table<K, R>, key: &K) -> Option<R> {
        match &mut self.target {
            Target::Real { state, .. } => state.typed(table).map.get(key).cloned(),
            Target::Sim { base, overlay, .. } => overlay.get(base, table, key),
        }
    }

    /// True when `table` holds a record under `key`.
    pub fn contains<K: Key, R: Record>(&mut self, table: &Table<K, R>, key: &K) -> bool {
        match &mut self.target {
            Target::Real { state, .. } => state.typed(table).map.get(key).is_some(),
            Target::Sim { base, overlay, .. } => overlay.get(base, table, key).is_some(),
        }
    }

    /// Writes `record` under `key`, replacing any record there. Fails, changing nothing, when the
    /// state would exceed its capacity.
    pub fn put<K: Key, R: Record>(
        &mut self,
        table: &Table<K, R>,
        key: K,
        record: R,
    ) -> Result<(), StateError> {
        let result = match &mut self.target {
            Target::Real { state, .. } => state.put(table, key, record),
            Target::Sim { base, overlay, .. } => {
                overlay.write(base, table, key, Some(record)).map(drop)
            }
        };
        self.note(result)
    }

    /// Removes the record under `key`; returns it, or `None` when there was none.
    pub fn delete<K: Key, R: Record>(
        &mut self,
        table: &Table<K, R>,
        key: &K,
    ) -> Result<Option<R>, StateError> {
        let result = match &mut self.target {
            Target::Real { state, .. } => state.delete(table, key),
            Target::Sim { base, overlay, .. } => overlay.write(base, table, key.clone(), None),
        };
        self.note(result)
    }

    /// The number of records in `table`.
    pub fn len<K: Key, R: Record>(&mut self, table: &Table<K, R>) -> usize {
        match &mut self.target {
            Target::Real { state, .. } => state.len(table),
            Target::Sim { base, overlay, .. } => overlay.len(base, table),
        }
    }

    /// Calls `f` on every record of `table`, in an order that is unspecified and may differ
    /// between replicas: use it only for results that do not depend on order (counts, sums).
    pub fn for_each_unordered<K: Key, R: Record>(
        &mut self,
        table: &Table<K, R>,
        mut f: impl FnMut(&K, &R),
    ) {
        match &mut self.target {
            Target::Real { state, .. } => {
                for (key, record) in state.iter_unordered(table) {
                    f(key, record);
                }
            }
            Target::Sim { base, overlay, .. } => overlay.for_each(base, table, f),
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
    pub fn key<K: Key, R: Record>(&mut self, table: &Table<K, R>, key: &K) {
        self.state.touch(table, key);
    }
}
