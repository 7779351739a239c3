//! The consensus core's view of the log: a base (the last entry a snapshot covers, whose term
//! and hash are kept), every later entry's term and hash, and a window of recent entries kept in
//! memory for replication and apply. The WAL holds the entries on disk.

use crate::entry::{Entry, EntryHash};
use crate::ids::{EntryIndex, Term};
use std::collections::VecDeque;

/// Entries the window always keeps, applied or not (so that a follower a little behind is
/// served from memory).
pub const LOG_WINDOW_ENTRIES_MIN: usize = 1024;
/// Bytes of payload above which the window drops applied entries even when a follower still
/// needs them (it is then served from the WAL).
pub const LOG_WINDOW_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Entries at the window's end that a check of recent work walks (the ones an event can have
/// appended or replaced); a whole check walks the window.
pub const LOG_CHECK_RECENT_ENTRIES: usize = 16;

/// The last entry a snapshot covers: the log starts after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogBase {
    /// Its index (zero: no snapshot, the log starts at 1).
    pub index: EntryIndex,
    /// Its term.
    pub term: Term,
    /// Its chained hash.
    pub hash: EntryHash,
}

/// The log as the core sees it.
#[derive(Debug, Default)]
pub(crate) struct Log {
    base: LogBase,
    /// `terms[i]`, `hashes[i]`: term and hash of entry `base + 1 + i`.
    terms: Vec<Term>,
    hashes: Vec<EntryHash>,
    /// Entries from `window_start` to the last, in memory.
    window: VecDeque<Entry>,
    window_start: EntryIndex,
    window_bytes: usize,
}

impl Log {
    /// A log after `base` holding the terms and hashes of the entries after it, with the
    /// in-memory entries `window` (the tail of the log, possibly empty).
    pub(crate) fn new(
        base: LogBase,
        terms: Vec<Term>,
        hashes: Vec<EntryHash>,
        window: Vec<Entry>,
    ) -> Self {
        assert_eq!(terms.len(), hashes.len());
        let last = EntryIndex(base.index.0 + terms.len() as u64);
        let window_start = EntryIndex(last.0 + 1 - window.len() as u64);
        for (offset, entry) in window.iter().enumerate() {
            assert_eq!(
                entry.index(),
                EntryIndex(window_start.0 + offset as u64),
                "window in order"
            );
        }
        assert!(
            window_start > base.index,
            "window starts at {window_start}, inside the snapshot's base {}",
            base.index
        );
        let window_bytes = window.iter().map(|e| e.payload.len()).sum();
        Log {
            base,
            terms,
            hashes,
            window: window.into(),
            window_start,
            window_bytes,
        }
    }

    pub(crate) fn base(&self) -> LogBase {
        self.base
    }

    pub(crate) fn last_index(&self) -> EntryIndex {
        EntryIndex(self.base.index.0 + self.terms.len() as u64)
    }

    pub(crate) fn last_term(&self) -> Term {
        self.terms.last().copied().unwrap_or(self.base.term)
    }

    pub(crate) fn last_hash(&self) -> EntryHash {
        self.hashes.last().copied().unwrap_or(self.base.hash)
    }

    /// The term at `index`: known for the base and the entries after it (and zero for the index
    /// before the first entry of a log without a snapshot).
    pub(crate) fn term_at(&self, index: EntryIndex) -> Option<Term> {
        match index.0.checked_sub(self.base.index.0)? {
            0 => Some(self.base.term),
            offset => self.terms.get(offset as usize - 1).copied(),
        }
    }

    /// The hash of the entry at `index`, if the log holds it (or it is the base).
    pub(crate) fn hash_at(&self, index: EntryIndex) -> Option<EntryHash> {
        match index.0.checked_sub(self.base.index.0)? {
            0 => Some(self.base.hash),
            offset => self.hashes.get(offset as usize - 1).copied(),
        }
    }

    /// The entry at `index` if it is in the window.
    pub(crate) fn entry(&self, index: EntryIndex) -> Option<&Entry> {
        let offset = index.0.checked_sub(self.window_start.0)?;
        self.window.get(offset as usize)
    }

    /// The first index held in memory.
    pub(crate) fn window_start(&self) -> EntryIndex {
        self.window_start
    }

    pub(crate) fn append(&mut self, entry: Entry) {
        assert_eq!(
            entry.index(),
            self.last_index().next(),
            "log appends in order"
        );
        assert!(
            entry.term() >= self.last_term(),
            "entry {} of term {} after one of term {}: terms never decrease along a log",
            entry.index(),
            entry.term(),
            self.last_term()
        );
        // Hashing the payload again costs real time on the hot path: debug builds only. The
        // callers verified (a follower) or sealed (the leader) the entry against this hash.
        debug_assert!(
            entry.verify(&self.last_hash()).is_ok(),
            "entry {} does not chain to the log's last hash",
            entry.index()
        );
        self.terms.push(entry.term());
        self.hashes.push(entry.header.hash);
        self.window_bytes += entry.payload.len();
        self.window.push_back(entry);
    }

    /// Removes every entry from `index` on (never the base).
    pub(crate) fn truncate_from(&mut self, index: EntryIndex) {
        assert!(index > self.base.index, "the base is covered by a snapshot");
        let keep = (index.0 - self.base.index.0 - 1) as usize;
        self.terms.truncate(keep);
        self.hashes.truncate(keep);
        while self.window.back().is_some_and(|e| e.index() >= index) {
            let dropped = self.window.pop_back().expect("checked");
            self.window_bytes -= dropped.payload.len();
        }
        if self.window.is_empty() {
            self.window_start = self.last_index().next();
        }
        assert_eq!(
            self.last_index(),
            index.prev(),
            "truncation ends the log before it"
        );
    }

    /// Moves the base up to `through` (a durable snapshot covers it): the terms and hashes up
    /// to it, and any entries up to it still in memory, are forgotten.
    pub(crate) fn compact(&mut self, through: EntryIndex) {
        if through <= self.base.index || through > self.last_index() {
            return;
        }
        let drop = (through.0 - self.base.index.0) as usize;
        self.base = LogBase {
            index: through,
            term: self.terms[drop - 1],
            hash: self.hashes[drop - 1],
        };
        self.terms.drain(..drop);
        self.hashes.drain(..drop);
        while self.window.front().is_some_and(|e| e.index() <= through) {
            let dropped = self.window.pop_front().expect("checked");
            self.window_bytes -= dropped.payload.len();
        }
        self.window_start = self.window_start.max(through.next());
        assert!(
            self.window_start > self.base.index,
            "window starts at {} inside the base {}",
            self.window_start,
            self.base.index
        );
    }

    /// Replaces the whole log with a snapshot's base (an installed snapshot).
    pub(crate) fn reset(&mut self, base: LogBase) {
        *self = Log::new(base, Vec::new(), Vec::new(), Vec::new());
    }

    /// Drops entries from memory that are at or below `done` (applied, and replicated where it
    /// matters), keeping at least [`LOG_WINDOW_ENTRIES_MIN`]; also drops entries at or below
    /// `applied` while the window is over [`LOG_WINDOW_BYTES_MAX`].
    pub(crate) fn trim(&mut self, done: EntryIndex, applied: EntryIndex) {
        while let Some(front) = self.window.front() {
            let over_count = self.window.len() > LOG_WINDOW_ENTRIES_MIN && front.index() <= done;
            let over_bytes = self.window_bytes > LOG_WINDOW_BYTES_MAX && front.index() <= applied;
            if !over_count && !over_bytes {
                break;
            }
            self.window_bytes -= front.payload.len();
            self.window.pop_front();
            self.window_start = self.window_start.next();
        }
        // Only applied entries leave memory: what is left to apply is still here.
        assert!(
            self.window_start <= applied.next(),
            "trimmed the window to {} past the applied entry {applied}",
            self.window_start
        );
    }

    /// Checks the log's invariants against `term`, the replica's current term: the window is
    /// the log's tail after the base, its entries agree with the terms and hashes kept for
    /// them, and terms never decrease. Walks the window (bounded), not the whole log; with
    /// `recent`, only its last [`LOG_CHECK_RECENT_ENTRIES`] entries, and not its byte count.
    pub(crate) fn check_invariants(&self, term: Term, recent: bool) {
        assert_eq!(
            self.terms.len(),
            self.hashes.len(),
            "a term and a hash per entry"
        );
        assert!(
            self.window_start > self.base.index,
            "window starts at {} inside the base {}",
            self.window_start,
            self.base.index
        );
        assert_eq!(
            self.window_start.0 + self.window.len() as u64,
            self.last_index().0 + 1,
            "the window (from {}, {} entries) is not the log's tail (last {})",
            self.window_start,
            self.window.len(),
            self.last_index()
        );
        assert!(
            self.last_term() <= term,
            "the log's last term {} is above the current term {term}",
            self.last_term()
        );
        let first = self.terms.first().copied().unwrap_or(self.base.term);
        assert!(
            self.base.term <= first,
            "the first entry's term {first} is below the base's term {}",
            self.base.term
        );
        let skipped = match recent {
            true => self.window.len().saturating_sub(LOG_CHECK_RECENT_ENTRIES),
            false => 0,
        };
        let first = EntryIndex(self.window_start.0 + skipped as u64);
        let mut bytes = 0;
        let mut previous = self.term_at(first.prev()).unwrap_or(self.base.term);
        for (offset, entry) in self.window.range(skipped..).enumerate() {
            let index = EntryIndex(first.0 + offset as u64);
            self.check_window_entry(index, entry, previous);
            previous = entry.term();
            bytes += entry.payload.len();
        }
        if !recent {
            assert_eq!(self.window_bytes, bytes, "the window's byte count");
        }
    }

    /// One entry of the window at `index`, after an entry of term `previous`.
    fn check_window_entry(&self, index: EntryIndex, entry: &Entry, previous: Term) {
        assert_eq!(entry.index(), index, "window entries are contiguous");
        assert_eq!(
            self.term_at(index),
            Some(entry.term()),
            "entry {index}'s term disagrees with the term kept for it"
        );
        assert_eq!(
            self.hash_at(index),
            Some(entry.header.hash),
            "entry {index}'s hash disagrees with the hash kept for it"
        );
        assert!(
            previous <= entry.term(),
            "entry {index} of term {} follows one of term {previous}",
            entry.term()
        );
        assert!(
            entry.header.commit < index,
            "entry {index} claims itself committed"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryKind;
    use bytes::Bytes;

    /// A log of `count` no-op entries from 1, all in the window, with the hash kept for entry
    /// `wrong` not its entry's.
    fn log_with_a_wrong_hash(count: u64, wrong: u64) -> Log {
        let mut previous = EntryHash::default();
        let window: Vec<Entry> = (1..=count)
            .map(|n| {
                let entry = Entry::seal(
                    EntryIndex(n),
                    Term(1),
                    EntryKind::Noop,
                    EntryIndex(n - 1),
                    0,
                    Bytes::new(),
                    &previous,
                );
                previous = entry.header.hash;
                entry
            })
            .collect();
        let terms = vec![Term(1); count as usize];
        let mut hashes: Vec<EntryHash> = window.iter().map(|e| e.header.hash).collect();
        hashes[wrong as usize - 1] = EntryHash([7; 32]);
        let base = LogBase {
            index: EntryIndex::ZERO,
            term: Term(0),
            hash: EntryHash::default(),
        };
        Log::new(base, terms, hashes, window)
    }

    /// Proves a check of recent work finds a wrong hash among the window's last entries.
    #[test]
    #[should_panic(expected = "entry 100's hash disagrees with the hash kept for it")]
    fn a_recent_check_finds_the_window_end_wrong() {
        log_with_a_wrong_hash(100, 100).check_invariants(Term(1), true);
    }

    /// Proves a check of recent work walks only the window's end, and the whole check the
    /// rest: a wrong hash further back passes the first and not the second.
    #[test]
    fn only_the_whole_check_walks_the_window_start() {
        let log = log_with_a_wrong_hash(100, 3);
        log.check_invariants(Term(1), true);
        let whole = std::panic::catch_unwind(|| log.check_invariants(Term(1), false));
        let message = whole.expect_err("the whole check walks entry 3");
        let message = message
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(message.contains("entry 3's hash disagrees"), "{message}");
    }
}
