//! The WAL's executor: the replica's WAL work carried out in order over any [`Storage`], with
//! the rule that decides when an acknowledgement may leave. The node runs it on the WAL's
//! thread or its own; the simulator runs it over its simulated disk. Neither decides anything
//! about durability: they only say when a sync may run and when it completes.
//!
//! Work is taken in order. Appends are written unsynced; before anything that must follow
//! what they wrote (the last acknowledgement queued, a truncation, a compaction) and at the
//! end of the queue the executor stops with [`Step::SyncDue`], and goes on once the shell has
//! called [`WalExecutor::sync`]. Of several acknowledgements queued only the last is sent: it
//! covers the others (group commit). An append that finds the file system full stays first in
//! the queue, with everything behind it, until a later [`WalExecutor::run`] writes it.

use super::{Wal, WalError};
use crate::entry::Entry;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::replica::{WalFailure, WalOp};
use crate::state::StateHash;
use crate::storage::{IoFault, Storage};
use net::message::PeerMessage;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the executor reports.
#[derive(Debug)]
pub(crate) enum WalEvent {
    /// Every entry up to `index` is durable.
    Persisted {
        /// The last durable entry.
        index: EntryIndex,
        /// Its term.
        term: Term,
    },
    /// Entries read back for a peer.
    Loaded {
        /// The peer.
        peer: NodeId,
        /// The entries.
        entries: Vec<Entry>,
    },
    /// An acknowledgement could not be sent.
    AckFailed,
    /// The WAL failed; nothing more can be made durable.
    Failed(WalFailure),
    /// The file system has no room for the next append; it is tried again at the shell's
    /// next [`WalExecutor::run`], and everything after it waits.
    Full(WalError),
    /// An append that found the file system full succeeded.
    SpaceBack,
}

/// Where a [`WalExecutor::run`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing is queued.
    Idle,
    /// A sync must complete before the work goes on: call [`WalExecutor::sync`], then
    /// [`WalExecutor::run`] again.
    SyncDue,
    /// An append found the file system full: it waits, with everything behind it, for a
    /// later run.
    Full,
    /// The WAL failed for good: nothing more is carried out.
    Failed,
}

/// Where an acknowledgement goes once what it covers is durable.
pub(crate) trait AckSink {
    /// Sends `message` to `to`; false when it could not.
    fn ack(&mut self, to: NodeId, message: PeerMessage) -> bool;
}

/// Acknowledgements kept for the shell to send on its own connections.
impl AckSink for Vec<(NodeId, PeerMessage)> {
    fn ack(&mut self, to: NodeId, message: PeerMessage) -> bool {
        self.push((to, message));
        true
    }
}

/// What differs by where the executor runs: how the log's next segment is prepared, the apply
/// journal, what a sync is counted as, and how freed segments are removed.
pub(crate) trait Beside<S: Storage> {
    /// Before each run: the log's next segment file, when it wants one.
    fn prepare(&mut self, wal: &mut Wal<S>);
    /// An entry's record for the apply journal.
    fn journal(&mut self, index: EntryIndex, state_hash: StateHash, ran: crate::apply::Ran);
    /// A sync of the log completed in `took`.
    fn synced(&mut self, wal: &Wal<S>, took: Duration);
    /// The log let go of the entries through `through`; `segments` in `dir` are free to remove.
    fn released(&mut self, storage: &S, dir: &Path, through: EntryIndex, segments: Vec<PathBuf>);
    /// The queue is empty and everything written is durable.
    fn drained(&mut self);
}

/// The WAL and the work queued for it (see the module's documentation).
pub(crate) struct WalExecutor<S: Storage> {
    wal: Wal<S>,
    pending: VecDeque<WalOp>,
    /// Acknowledgements in `pending`: one found with none behind it is the one sent.
    acks_queued: usize,
    /// The latest acknowledgement passed over for a later one: sent after all when a full
    /// file system stops the work before that later one.
    passed_over: Option<(NodeId, PeerMessage)>,
    /// The last entry written and not synced yet.
    unsynced: Option<(EntryIndex, Term)>,
    /// The file system had no room at the last try of the first append.
    full: bool,
    failed: bool,
}

impl<S: Storage> WalExecutor<S> {
    /// An executor of `wal`, with nothing queued.
    pub(crate) fn new(wal: Wal<S>) -> Self {
        WalExecutor {
            wal,
            pending: VecDeque::new(),
            acks_queued: 0,
            passed_over: None,
            unsynced: None,
            full: false,
            failed: false,
        }
    }

    /// The log.
    #[cfg(feature = "sim")]
    pub(crate) fn wal(&self) -> &Wal<S> {
        &self.wal
    }

    /// Queues work for the next run.
    pub(crate) fn queue(&mut self, op: WalOp) {
        if matches!(op, WalOp::Ack { .. }) {
            self.acks_queued += 1;
        }
        self.pending.push_back(op);
    }

    /// True while work is queued (written or not).
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Carries out the queued work in order until it is done or a sync is due; adds to
    /// `events` what it did and sends through `acks` the acknowledgements now covered.
    pub(crate) fn run(
        &mut self,
        beside: &mut impl Beside<S>,
        acks: &mut impl AckSink,
        events: &mut Vec<WalEvent>,
    ) -> Step {
        if self.failed {
            return Step::Failed;
        }
        beside.prepare(&mut self.wal);
        while let Some(op) = self.pending.pop_front() {
            let step = self.carry_out(op, beside, acks, events);
            if let Err(step) = step.map_err(|step| self.room_back_unless(step, events)) {
                return step;
            }
        }
        self.room_back_unless(Step::Idle, events);
        if self.unsynced.is_some() {
            return Step::SyncDue;
        }
        beside.drained();
        match cfg!(debug_assertions) {
            true => self.wal.check_invariants(),
            false => self.wal.check_recent_invariants(),
        }
        Step::Idle
    }

    /// Reports room back once a run that found the file system full gets past the append it
    /// held (`step`, where the run stopped, is not [`Step::Full`] again).
    fn room_back_unless(&mut self, step: Step, events: &mut Vec<WalEvent>) -> Step {
        if step != Step::Full && step != Step::Failed && std::mem::take(&mut self.full) {
            events.push(WalEvent::SpaceBack);
        }
        step
    }

    /// The work queued and not carried out yet, in order.
    #[cfg(feature = "sim")]
    pub(crate) fn queued(&self) -> impl Iterator<Item = &WalOp> {
        self.pending.iter()
    }

    /// Makes everything written so far durable; reports the last entry it covers.
    pub(crate) fn sync(&mut self, beside: &mut impl Beside<S>, events: &mut Vec<WalEvent>) {
        let Some((index, term)) = self.unsynced.take() else {
            return;
        };
        let started = Instant::now();
        if let Err(error) = self.wal.sync() {
            self.fail(WalFailure::Sync(IoFault::from(&error)), events);
            return;
        }
        beside.synced(&self.wal, started.elapsed());
        events.push(WalEvent::Persisted { index, term });
    }

    /// Carries out one piece of work; `Err` with where the run stops (the work put back
    /// first in the queue when it is to be done again).
    fn carry_out(
        &mut self,
        op: WalOp,
        beside: &mut impl Beside<S>,
        acks: &mut impl AckSink,
        events: &mut Vec<WalEvent>,
    ) -> Result<(), Step> {
        match op {
            WalOp::Append(entries) => self.append(entries, acks, events)?,
            WalOp::Ack { to, message } => self.acknowledge(to, message, acks, events)?,
            WalOp::Truncate(from) => {
                self.after_sync(WalOp::Truncate(from))?;
                let truncated = self.wal.truncate_from(from);
                self.check(truncated, WalFailure::Truncate, events)?;
            }
            WalOp::Compact(through) => {
                self.after_sync(WalOp::Compact(through))?;
                let (_, segments) = self.wal.release_through(through);
                let (storage, dir) = (self.wal.storage(), self.wal.dir());
                beside.released(storage, dir, through, segments);
            }
            WalOp::Reset(base) => {
                // What was written before belongs to the replaced log: nothing to report, and
                // an acknowledgement passed over that may name its unsynced entries is void
                // (the later one it was passed over for still goes).
                if self.unsynced.take().is_some() {
                    self.passed_over = None;
                }
                let reset = self.wal.reset_to(base.index, base.hash);
                self.check(reset, WalFailure::Reset, events)?;
            }
            WalOp::Journal {
                index,
                state_hash,
                ran,
            } => beside.journal(index, state_hash, ran),
            WalOp::Load { peer, from, to } => {
                let entries = self.load(from, to);
                let entries = self.check(entries, WalFailure::Read, events)?;
                events.push(WalEvent::Loaded { peer, entries });
            }
        }
        Ok(())
    }

    /// `op` goes back first in the queue while appends before it wait for their sync.
    fn after_sync(&mut self, op: WalOp) -> Result<(), Step> {
        if self.unsynced.is_none() {
            return Ok(());
        }
        self.pending.push_front(op);
        Err(Step::SyncDue)
    }

    /// Writes the entries of an append that the log does not hold yet, unsynced. One that
    /// finds no room stays first; what was written before it is synced and acknowledged.
    fn append(
        &mut self,
        entries: Vec<Entry>,
        acks: &mut impl AckSink,
        events: &mut Vec<WalEvent>,
    ) -> Result<(), Step> {
        let last = self.wal.last_index();
        for entry in entries.iter().filter(|e| e.index() > last) {
            match self.wal.write(entry) {
                Ok(()) => self.unsynced = Some((entry.index(), entry.term())),
                Err(error) if error.is_storage_full() => {
                    return Err(self.stall(entries, error, acks, events));
                }
                Err(error) => {
                    self.fail(WalFailure::Write(IoFault::from(&error)), events);
                    return Err(Step::Failed);
                }
            }
        }
        Ok(())
    }

    /// An append that found no room waits first in the queue. What came before it is made
    /// durable first; then the acknowledgement passed over for one behind it goes, and the
    /// full file system is reported (once, until an append succeeds).
    fn stall(
        &mut self,
        entries: Vec<Entry>,
        error: WalError,
        acks: &mut impl AckSink,
        events: &mut Vec<WalEvent>,
    ) -> Step {
        self.pending.push_front(WalOp::Append(entries));
        if self.unsynced.is_some() {
            return Step::SyncDue;
        }
        if let Some((to, message)) = self.passed_over.take() {
            self.send(acks, to, message, events);
        }
        if !std::mem::replace(&mut self.full, true) {
            events.push(WalEvent::Full(error));
        }
        Step::Full
    }

    /// The last acknowledgement queued goes once what it covers is durable; an earlier one is
    /// passed over (the later one covers it).
    fn acknowledge(
        &mut self,
        to: NodeId,
        message: PeerMessage,
        acks: &mut impl AckSink,
        events: &mut Vec<WalEvent>,
    ) -> Result<(), Step> {
        if self.acks_queued > 1 {
            self.acks_queued -= 1;
            self.passed_over = Some((to, message));
            return Ok(());
        }
        if self.unsynced.is_some() {
            self.pending.push_front(WalOp::Ack { to, message });
            return Err(Step::SyncDue);
        }
        self.acks_queued -= 1;
        self.passed_over = None;
        self.send(acks, to, message, events);
        Ok(())
    }

    /// Sends an acknowledgement: only once no append before it waits for a sync. (Not that
    /// the entry it names is still in the log: one passed over and sent at a full file system
    /// may name entries a later truncation cut, after the sync that made them durable; it
    /// says what was durable when it was made.)
    fn send(
        &mut self,
        acks: &mut impl AckSink,
        to: NodeId,
        message: PeerMessage,
        events: &mut Vec<WalEvent>,
    ) {
        assert!(
            self.unsynced.is_none(),
            "an acknowledgement before the sync of the appends ahead of it ({:?})",
            self.unsynced
        );
        if !acks.ack(to, message) {
            events.push(WalEvent::AckFailed);
        }
    }

    /// The entries `from..=to` the log holds, up to about [`crate::core::APPEND_BYTES_MAX`].
    fn load(&self, from: EntryIndex, to: EntryIndex) -> Result<Vec<Entry>, WalError> {
        let mut entries = Vec::new();
        let mut bytes = 0;
        for index in from.0..=to.0.min(self.wal.last_index().0) {
            let entry = self.wal.read(EntryIndex(index))?;
            bytes += entry.payload.len();
            entries.push(entry);
            if bytes >= crate::core::APPEND_BYTES_MAX {
                break;
            }
        }
        Ok(entries)
    }

    /// The value of a step that worked; a failure of the WAL for good otherwise, named by
    /// `step` (a [`WalFailure`] variant).
    fn check<T>(
        &mut self,
        result: Result<T, WalError>,
        step: fn(IoFault) -> WalFailure,
        events: &mut Vec<WalEvent>,
    ) -> Result<T, Step> {
        result.map_err(|error| {
            self.fail(step(IoFault::from(&error)), events);
            Step::Failed
        })
    }

    fn fail(&mut self, failure: WalFailure, events: &mut Vec<WalEvent>) {
        self.failed = true;
        events.push(WalEvent::Failed(failure));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::entry::{EntryHash, EntryKind};
    use crate::storage::Files;
    #[cfg(feature = "sim")]
    use crate::storage::SimDisk;
    use net::message::{AppendOutcome, AppendReply};

    const SEGMENT_BYTES: u64 = 64 * 1024;

    /// Nothing beside the log: what a test of the acknowledgement rule needs.
    struct Nothing;

    impl<S: Storage> Beside<S> for Nothing {
        fn prepare(&mut self, _: &mut Wal<S>) {}
        fn journal(&mut self, _: EntryIndex, _: StateHash, _: crate::apply::Ran) {}
        fn synced(&mut self, _: &Wal<S>, _: Duration) {}
        fn released(&mut self, _: &S, _: &Path, _: EntryIndex, _: Vec<PathBuf>) {}
        fn drained(&mut self) {}
    }

    /// A follower's acknowledgement of entries through `index`, to node 1.
    pub(crate) fn ack(index: u64) -> WalOp {
        let message = PeerMessage::AppendReply(AppendReply {
            term: Term(1),
            from: NodeId(2),
            outcome: AppendOutcome::Matched {
                index: EntryIndex(index),
            },
            applied: None,
        });
        WalOp::Ack {
            to: NodeId(1),
            message,
        }
    }

    /// Entries `from..=to` of term 1, chained from `prev`.
    pub(crate) fn noops(from: u64, to: u64, prev: &mut EntryHash) -> Vec<Entry> {
        (from..=to)
            .map(|i| {
                let index = EntryIndex(i);
                let entry = Entry::seal(
                    index,
                    Term(1),
                    EntryKind::Noop,
                    index.prev(),
                    0,
                    Default::default(),
                    prev,
                );
                *prev = entry.header.hash;
                entry
            })
            .collect()
    }

    fn executor<S: Storage>(storage: S, dir: &Path) -> WalExecutor<S> {
        let (wal, _) = Wal::open_in(storage, dir, SEGMENT_BYTES).unwrap();
        WalExecutor::new(wal)
    }

    /// Proves an acknowledgement waits for the sync of the appends ahead of it, the last of
    /// several queued is the only one sent, and a crash before the sync keeps the
    /// acknowledgement unsent whatever the device loses.
    #[test]
    fn an_acknowledgement_waits_for_the_sync_that_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut executor = executor(Files, &dir.path().join("wal"));
        let mut prev = EntryHash::default();
        executor.queue(WalOp::Append(noops(1, 2, &mut prev)));
        executor.queue(ack(2));
        executor.queue(WalOp::Append(noops(3, 3, &mut prev)));
        executor.queue(ack(3));
        let (mut acks, mut events) = (Vec::new(), Vec::new());
        let step = executor.run(&mut Nothing, &mut acks, &mut events);
        assert_eq!(step, Step::SyncDue);
        assert!(acks.is_empty() && events.is_empty(), "{events:?}");
        // A crash now may lose any of the three entries: nothing was acknowledged.
        executor.sync(&mut Nothing, &mut events);
        let [WalEvent::Persisted { index, .. }] = events.as_slice() else {
            panic!("one report of the appends: {events:?}");
        };
        assert_eq!(*index, EntryIndex(3));
        let step = executor.run(&mut Nothing, &mut acks, &mut events);
        assert_eq!(step, Step::Idle);
        let [(NodeId(1), PeerMessage::AppendReply(reply))] = acks.as_slice() else {
            panic!("the last acknowledgement only: {acks:?}");
        };
        assert_eq!(
            reply.outcome,
            AppendOutcome::Matched {
                index: EntryIndex(3)
            }
        );
        // With nothing new written, an acknowledgement goes at once.
        executor.queue(ack(3));
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::Idle
        );
        assert_eq!(acks.len(), 2);
    }

    /// An executor on `disk` with entry 1 appended and acknowledged, not run yet; the hash
    /// the next entry chains from.
    #[cfg(feature = "sim")]
    fn one_append_acknowledged(disk: &SimDisk) -> (WalExecutor<SimDisk>, EntryHash) {
        let mut executor = executor(disk.clone(), Path::new("/wal"));
        let mut prev = EntryHash::default();
        executor.queue(WalOp::Append(noops(1, 1, &mut prev)));
        executor.queue(ack(1));
        (executor, prev)
    }

    /// Proves an append that finds the disk full waits first in the queue with what is behind
    /// it, after what came before it is synced and acknowledged; the full disk is reported
    /// once, and the append goes on when there is room.
    #[test]
    #[cfg(feature = "sim")]
    fn a_full_disk_holds_the_append_and_what_follows() {
        let disk = SimDisk::new();
        let (mut executor, mut prev) = one_append_acknowledged(&disk);
        let (mut acks, mut events) = (Vec::new(), Vec::new());
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::SyncDue
        );
        executor.sync(&mut Nothing, &mut events);
        // The first acknowledgement is now covered; the second is queued behind an append
        // the disk has no room for.
        executor.queue(WalOp::Append(noops(2, 200, &mut prev)));
        executor.queue(ack(200));
        disk.set_full(true);
        let step = executor.run(&mut Nothing, &mut acks, &mut events);
        assert_eq!(step, Step::Full);
        assert_eq!(acks.len(), 1, "the acknowledgement of entry 1 only");
        assert!(
            matches!(events.last(), Some(WalEvent::Full(_))),
            "{events:?}"
        );
        let reported = events.len();
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::Full
        );
        assert_eq!(events.len(), reported, "reported once");
        assert!(executor.has_pending());
        disk.set_full(false);
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::SyncDue
        );
        assert!(
            matches!(events.last(), Some(WalEvent::SpaceBack)),
            "{events:?}"
        );
        executor.sync(&mut Nothing, &mut events);
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::Idle
        );
        assert_eq!(acks.len(), 2);
        assert_eq!(executor.wal().last_index(), EntryIndex(200));
    }

    /// Proves an acknowledgement passed over for a later one is forgotten when a reset throws
    /// away the unsynced appends it names: a full disk that stops the work before the later
    /// one does not let it go.
    #[test]
    #[cfg(feature = "sim")]
    fn a_reset_forgets_the_acknowledgement_of_appends_it_threw_away() {
        let disk = SimDisk::new();
        let (mut wal, _) = Wal::open_in(disk.clone(), Path::new("/wal"), SEGMENT_BYTES).unwrap();
        wal.set_zero_ahead(8 * 1024);
        let mut executor = WalExecutor::new(wal);
        let mut prev = EntryHash::default();
        executor.queue(WalOp::Append(noops(1, 1, &mut prev)));
        let (mut acks, mut events) = (Vec::new(), Vec::new());
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::SyncDue
        );
        executor.sync(&mut Nothing, &mut events);
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::Idle
        );
        // Entries 2 and 3 fit in the zeros written ahead; a new segment does not.
        disk.set_full(true);
        executor.queue(WalOp::Append(noops(2, 3, &mut prev)));
        executor.queue(ack(3));
        let base = crate::core::LogBase {
            index: EntryIndex(10),
            term: Term(1),
            hash: EntryHash::default(),
        };
        executor.queue(WalOp::Reset(base));
        let mut after = EntryHash::default();
        executor.queue(WalOp::Append(noops(11, 11, &mut after)));
        executor.queue(ack(11));
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::Full
        );
        assert!(
            acks.is_empty(),
            "no acknowledgement of entries never synced: {acks:?}"
        );
    }

    /// Proves a failed sync fails the WAL for good: reported once, nothing acknowledged,
    /// nothing more carried out.
    #[test]
    #[cfg(feature = "sim")]
    fn a_failed_sync_stops_the_wal() {
        let disk = SimDisk::new();
        let (mut executor, _) = one_append_acknowledged(&disk);
        let (mut acks, mut events) = (Vec::new(), Vec::new());
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::SyncDue
        );
        disk.fail_syncs(1);
        executor.sync(&mut Nothing, &mut events);
        assert!(
            matches!(events.as_slice(), [WalEvent::Failed(WalFailure::Sync(_))]),
            "{events:?}"
        );
        assert_eq!(
            executor.run(&mut Nothing, &mut acks, &mut events),
            Step::Failed
        );
        assert!(acks.is_empty());
    }
}
