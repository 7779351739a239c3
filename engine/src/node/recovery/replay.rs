//! The decisions of recovery that do not depend on where the log lives, written once for the
//! real WAL and for the simulator's disk: which snapshot the log can continue, where the log
//! starts after it, and the replay of the committed log into the state machine and into what
//! the consensus core starts from.

use crate::apply::{Applied, ApplyError, StateMachine};
use crate::core::{HardState, LogBase, Recovered, Repair};
use crate::entry::{Entry, EntryHash};
use crate::handler::Handler;
use crate::ids::{EntryIndex, Term};
use crate::snapshot::SnapshotMeta;
use crate::storage::Storage;
use crate::wal::{Wal, WalError};
use net::message::AppliedHash;

/// The log as recovery reads it once its scan is done (damage cut, torn tail dropped).
pub trait RecoveryLog {
    /// Why an entry cannot be read back.
    type Error;
    /// The first index the log holds.
    fn first_index(&self) -> EntryIndex;
    /// The last index the log holds (`first_index() - 1` when it is empty).
    fn last_index(&self) -> EntryIndex;
    /// The highest commit index any entry carries: every entry up to it is committed.
    fn max_commit(&self) -> EntryIndex;
    /// The term of the entry at `index`, if the log holds it.
    fn term_at(&self, index: EntryIndex) -> Option<Term>;
    /// The hash of the entry at `index`, if the log holds it.
    fn hash_at(&self, index: EntryIndex) -> Option<EntryHash>;
    /// The entry at `index`, read back and verified.
    fn read(&self, index: EntryIndex) -> Result<Entry, Self::Error>;
}

impl<S: Storage> RecoveryLog for Wal<S> {
    type Error = WalError;

    fn first_index(&self) -> EntryIndex {
        Wal::first_index(self)
    }

    fn last_index(&self) -> EntryIndex {
        Wal::last_index(self)
    }

    fn max_commit(&self) -> EntryIndex {
        Wal::max_commit(self)
    }

    fn term_at(&self, index: EntryIndex) -> Option<Term> {
        Wal::term_at(self, index)
    }

    fn hash_at(&self, index: EntryIndex) -> Option<EntryHash> {
        Wal::hash_at(self, index)
    }

    fn read(&self, index: EntryIndex) -> Result<Entry, WalError> {
        Wal::read(self, index)
    }
}

/// Whether a snapshot of entry `index` can start the node: the log after it is all there
/// (the log starts no later than the entry right after it).
pub fn log_reaches<L: RecoveryLog>(log: &L, index: EntryIndex) -> bool {
    log.first_index() <= index.next()
}

/// True when the log holds the log right after a snapshot of entry `index` (hash `hash`): it
/// holds that entry with that hash, or starts right after it with an entry chained to it, or
/// is empty right after it.
pub fn log_continues<L: RecoveryLog>(log: &L, index: EntryIndex, hash: EntryHash) -> bool {
    if index >= log.first_index() {
        return log.hash_at(index) == Some(hash);
    }
    match log.read(index.next()) {
        Ok(entry) => entry.verify(&hash).is_ok(),
        Err(_) => log.last_index() < log.first_index(),
    }
}

/// Where the log starts after the chosen snapshot, and whether the log must be emptied to get
/// there (it conflicts with the snapshot, which is of committed state: those entries are
/// garbage). `None` when there is no snapshot and the log does not start at entry 1: there is
/// no state to start from, and the caller refuses.
pub fn log_base<L: RecoveryLog>(log: &L, chosen: Option<&SnapshotMeta>) -> Option<(LogBase, bool)> {
    match chosen {
        Some(meta) => {
            assert!(
                log_reaches(log, meta.index),
                "a chosen snapshot the log reaches"
            );
            let base = LogBase {
                index: meta.index,
                term: meta.term,
                hash: meta.entry_hash,
            };
            Some((base, !log_continues(log, meta.index, meta.entry_hash)))
        }
        None if log.first_index() > EntryIndex(1) => None,
        None => Some((LogBase::default(), false)),
    }
}

/// The repair obligation of a node about to be rebuilt empty (the operator's order, for data
/// that cannot be used): the end of the log it may have acknowledged, merged with `damage`
/// (what a damaged entry cut off), and, when only a snapshot reaches further, the entry of the
/// newest snapshot it holds (`newest_snapshot`; its term unknown, so no candidate is taken
/// for holding it). None when the node held nothing.
pub fn rebuild_repair<L: RecoveryLog>(
    log: &L,
    damage: Option<Repair>,
    newest_snapshot: Option<EntryIndex>,
) -> Option<Repair> {
    let (first, last) = (log.first_index(), log.last_index());
    let mut repair = (last >= first).then(|| Repair {
        index: last,
        term: log.term_at(last).expect("the log holds its last entry"),
        committed: log.max_commit(),
    });
    if let Some(lost) = damage {
        repair = Some(repair.map_or(lost, |r| r.merge(lost)));
    }
    if let Some(index) = newest_snapshot
        && repair.is_none_or(|r| r.index < index)
    {
        let only = Repair {
            index,
            term: Term(u64::MAX),
            committed: index,
        };
        repair = Some(repair.map_or(only, |r| r.merge(only)));
    }
    repair.filter(|r| r.index > EntryIndex::ZERO)
}

/// Why the replay stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError<E> {
    /// An entry the log holds could not be read back.
    #[error("reading the log: {0}")]
    Log(E),
    /// A committed entry did not apply.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Where the replay starts: the hard state, the base, whether the log is taken as empty after
/// it, and the snapshot installed into the machine (if any; with deltas loaded over it the
/// machine may be past the base, at an entry the log holds).
pub struct ReplayFrom {
    /// Term, vote and repair obligation.
    pub hard_state: HardState,
    /// What the log starts after.
    pub base: LogBase,
    /// The log is emptied to continue after the base (emptied yet or not).
    pub reset_log: bool,
    /// The snapshot installed: its index and state hash.
    pub snapshot: Option<AppliedHash>,
    /// Entries after this one are replayed with their commands' outcomes kept.
    pub keep_outcomes_after: Option<EntryIndex>,
}

/// Applies every entry the log shows committed after the base, calling `applied` after each;
/// returns what the consensus core starts from.
pub fn replay<H: Handler, L: RecoveryLog>(
    log: &L,
    machine: &mut StateMachine<H>,
    from: ReplayFrom,
    mut applied: impl FnMut(&Applied, u64),
) -> Result<Recovered, ReplayError<L::Error>> {
    let base = from.base;
    let loaded = machine.applied_index();
    assert!(
        loaded == base.index
            || (!from.reset_log && loaded > base.index && loaded <= log.last_index()),
        "the machine holds the snapshot of the base, or a state at an entry the log holds after \
         it: {loaded} against the base {}",
        base.index
    );
    let last = if from.reset_log {
        base.index
    } else {
        log.last_index()
    };
    let committed = log.max_commit().min(last).max(loaded);
    let mut latest = from.snapshot;
    for index in (loaded.0 + 1..=committed.0).map(EntryIndex) {
        let entry = log.read(index).map_err(ReplayError::Log)?;
        machine.set_journaling(from.keep_outcomes_after.is_some_and(|after| index > after));
        let done = machine.apply(&entry)?;
        latest = Some(AppliedHash {
            index,
            hash: done.state_hash,
        });
        applied(&done, committed.0 - loaded.0);
    }
    machine.set_journaling(false);
    let after_base = || (base.index.0 + 1..=last.0).map(EntryIndex);
    let held = "an index the log holds";
    let window = (committed.0 + 1..=last.0)
        .map(|i| log.read(EntryIndex(i)))
        .collect::<Result<_, _>>()
        .map_err(ReplayError::Log)?;
    let recovered = Recovered {
        hard_state: from.hard_state,
        base,
        terms: after_base().map(|i| log.term_at(i).expect(held)).collect(),
        hashes: after_base().map(|i| log.hash_at(i).expect(held)).collect(),
        window,
        applied: latest,
        members: machine.members().cloned(),
        // Read beside the log by the start (`recovery::recover_on`).
        known: crate::core::KnownRead::Missing,
    };
    assert_eq!(machine.applied_index(), committed, "replayed to the commit");
    Ok(recovered)
}

/// What recovery relies on from a [`RecoveryLog`], checked the same way for every
/// implementation (the real WAL here, the simulator's disk in `sim::disk`).
#[cfg(test)]
pub(crate) mod conformance {
    use super::*;
    use crate::entry::EntryKind;
    use crate::state::StreamHasher;

    /// `count` no-op entries chained after `base`: one term after the base's for the first
    /// half, two after it for the rest; each
    /// declares committed what precedes it, up to `committed`.
    pub(crate) fn chain(base: LogBase, count: u64, committed: EntryIndex) -> Vec<Entry> {
        let mut entries: Vec<Entry> = Vec::new();
        for index in (base.index.0 + 1..=base.index.0 + count).map(EntryIndex) {
            let prev = entries.last().map_or(base.hash, |e| e.header.hash);
            let later = if index.0 - base.index.0 <= count / 2 {
                1
            } else {
                2
            };
            let term = Term(base.term.0 + later);
            let commit = index.prev().min(committed);
            let payload = bytes::Bytes::new();
            entries.push(Entry::seal(
                index,
                term,
                EntryKind::Noop,
                commit,
                0,
                payload,
                &prev,
            ));
        }
        entries
    }

    /// A snapshot's description of `entry`, or of `entry` with another hash.
    fn meta(index: EntryIndex, term: Term, entry_hash: EntryHash) -> SnapshotMeta {
        SnapshotMeta {
            index,
            term,
            entry_hash,
            state_hash: Default::default(),
            hasher: StreamHasher::default().save(),
            members: None,
            handler_version: crate::handler::HANDLER_VERSION_FIRST,
        }
    }

    /// Checks a log that holds exactly `entries` after `base`.
    pub(crate) fn check<L: RecoveryLog>(log: &L, base: LogBase, entries: &[Entry])
    where
        L::Error: std::fmt::Debug,
    {
        let last = EntryIndex(base.index.0 + entries.len() as u64);
        assert_eq!(log.first_index(), base.index.next());
        assert_eq!(log.last_index(), last);
        // A log may remember a commit index from entries it no longer holds (the WAL does,
        // across a reset); what recovery derives from it must be what the held entries say.
        let held = entries.iter().map(|e| e.header.commit).max();
        let derived = |commit: EntryIndex| commit.min(last).max(base.index);
        assert_eq!(
            derived(log.max_commit()),
            derived(held.unwrap_or(EntryIndex::ZERO))
        );
        for entry in entries {
            assert_eq!(log.term_at(entry.index()), Some(entry.term()));
            assert_eq!(log.hash_at(entry.index()), Some(entry.header.hash));
            assert_eq!(log.read(entry.index()).unwrap(), *entry);
        }
        assert_eq!(log.term_at(last.next()), None);
        assert!(log.read(last.next()).is_err());
        if base.index > EntryIndex::ZERO {
            assert_eq!(log.hash_at(base.index), None, "the base itself is not held");
            assert!(!log_reaches(log, base.index.prev()), "a gap after it");
        }
        check_continues(log, base, entries);
    }

    /// Which snapshots the log continues, and the base `log_base` derives from each.
    fn check_continues<L: RecoveryLog>(log: &L, base: LogBase, entries: &[Entry]) {
        let other = EntryHash([0xA5; 32]);
        assert!(log_reaches(log, base.index));
        assert!(
            log_continues(log, base.index, base.hash),
            "chained to its base"
        );
        assert!(!log_continues(log, base.index, other) || entries.is_empty());
        for entry in entries {
            let (index, term, hash) = (entry.index(), entry.term(), entry.header.hash);
            assert!(log_continues(log, index, hash));
            assert!(!log_continues(log, index, other));
            let (kept, reset) = log_base(log, Some(&meta(index, term, hash))).unwrap();
            assert_eq!((kept.index, kept.hash, reset), (index, hash, false));
            let (_, reset) = log_base(log, Some(&meta(index, term, other))).unwrap();
            assert!(reset, "a log that conflicts with the snapshot is emptied");
        }
        match log_base(log, None) {
            None => assert!(base.index > EntryIndex::ZERO, "refused only after a base"),
            Some((kept, reset)) => assert_eq!((kept, reset), (LogBase::default(), false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::conformance::{chain, check};
    use super::*;

    /// Proves the real WAL keeps the contract recovery relies on: from entry 1, and after a
    /// reset to a snapshot's base.
    #[test]
    fn the_wal_meets_the_recovery_log_contract() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        check(&wal, LogBase::default(), &[]);
        let entries = chain(LogBase::default(), 8, EntryIndex(5));
        for entry in &entries {
            wal.append(entry).unwrap();
        }
        check(&wal, LogBase::default(), &entries);
        let base = LogBase {
            index: EntryIndex(20),
            term: Term(3),
            hash: EntryHash([7; 32]),
        };
        wal.reset_to(base.index, base.hash).unwrap();
        check(&wal, base, &[]);
        let entries = chain(base, 6, EntryIndex(23));
        for entry in &entries {
            wal.append(entry).unwrap();
        }
        check(&wal, base, &entries);
        drop(wal);
        let (wal, _) = Wal::open(dir.path()).unwrap();
        check(&wal, base, &entries);
    }
}
