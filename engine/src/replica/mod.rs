//! One replica of the cluster without IO: the node's whole protocol in one type.
//!
//! A [`Replica`] owns the consensus [`Core`], the [`StateMachine`] with both modes, the
//! [`Batcher`], admission, the requests waiting for their entry (as opaque tokens `T`: a reply
//! channel in the node, a client number in the simulator) and the snapshot policy, counted in
//! ticks. It takes events (a tick, a peer's message, a client's request, what the WAL and the
//! snapshot store report) and returns [`Io`] only: append, acknowledge once durable, send,
//! write the hard state, write or send a snapshot, answer a client. The tokio driver
//! (`node::driver`) and the simulator (`sim`) carry those out and hold no protocol or
//! admission logic of their own: both run this code.
//!
//! The one clock it reads is for the stage statistics in [`NodeStatus`] (`timing`), never for
//! a decision; the time that handlers see (`Tx::now_ms`) is given to [`Replica::propose`].

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

mod admit;
mod reads;
mod snapshots;
#[cfg(test)]
mod tests;
mod timing;

use crate::apply::{ApplyError, Reply, ReplyStatus, StateMachine};
use crate::batcher::Batcher;
use crate::core::{
    Action, ChangeRefused, Core, CoreConfig, Event, HardState, KnownMembers, LogBase, NotLeader,
    Recovered,
};
use crate::entry::{Entry, EntryKind, RequestDigest};
use crate::handler::Handler;
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber, Term};
use crate::members::MemberChange;
use crate::snapshot::SnapshotMeta;
use crate::state::InstallError;
use crate::storage::IoFault;
use bytes::Bytes;
use net::message::{
    AppliedHash, ClientReply, Divergence, HandlerVersions, MembersRefusal, NodeStatus, PeerMessage,
    Role, UpgradeRefusal,
};
use snapshots::Snapshots;
use std::collections::{BTreeMap, VecDeque};
use timing::Timing;
pub use timing::{LATENCY_BUCKETS, Latencies, PeerLag, StageLatencies};

/// Committed entries a follower leaves unapplied at most while its WAL is busy.
pub const FOLLOWER_APPLY_LAG_ENTRIES_MAX: u64 = 64;

/// What a replica needs to know beside its core's configuration.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// The consensus core's configuration.
    pub core: CoreConfig,
    /// Commands an entry holds at most.
    pub entry_commands_max: u32,
    /// Entries a leader keeps appended and not yet committed at most.
    pub pipeline_entries_max: u64,
    /// Entries between snapshots (0: none).
    pub snapshot_every: u64,
    /// Snapshots may be deltas over the last one (`notes/decisions/snapshot-deltas.md`):
    /// the state then tracks the slots it writes.
    pub snapshot_deltas: bool,
    /// Members take turns at snapshots: a node whose snapshot is due waits for its share of
    /// the period, so that no two write theirs at once (`notes/decisions/snapshots.md`).
    pub snapshot_turns: bool,
    /// Ticks a durable snapshot is kept at least before a newer one starts.
    pub snapshot_retain_ticks: u64,
    /// Entries behind the last applied one the log keeps at least (the change stream's
    /// retention); 0 keeps what recovery and lagging followers need only.
    pub changes_retain_entries: u64,
    /// Whether followers keep each command's outcome for the change stream.
    pub change_stream: bool,
    /// Percent of the newest snapshot's size that the log applied since must reach before the
    /// next one starts.
    pub snapshot_log_percent: u64,
    /// Slots one slice of a snapshot scans.
    pub snapshot_slice_slots: usize,
    /// Bytes of a snapshot in progress gathered before they are handed to the writer.
    pub snapshot_write_bytes: usize,
    /// Where clients reach each node, for the "ask the leader there" answer.
    pub client_addresses: BTreeMap<NodeId, String>,
}

/// Work for the WAL, carried out in order.
#[derive(Clone, Debug)]
pub enum WalOp {
    /// Append and fsync, then report [`Replica::persisted`].
    Append(Vec<Entry>),
    /// Remove entries from this index on.
    Truncate(EntryIndex),
    /// Once everything appended so far is durable, send this message to this node (an
    /// acknowledgement); report [`Replica::ack_failed`] if it cannot be sent.
    Ack {
        /// The node.
        to: NodeId,
        /// The message.
        message: PeerMessage,
    },
    /// Remove what a durable snapshot covers, up to this index.
    Compact(EntryIndex),
    /// Empty the log to continue after an installed snapshot of this entry.
    Reset(LogBase),
    /// Read entries back for a peer and report [`Replica::loaded`].
    Load {
        /// The peer.
        peer: NodeId,
        /// The first.
        from: EntryIndex,
        /// The last.
        to: EntryIndex,
    },
    /// Keep in the apply journal (not durably) that this entry applied with this state hash,
    /// and what its commands answered under which handler version
    /// (`StateMachine::set_journaling`).
    Journal {
        /// The entry.
        index: EntryIndex,
        /// The state hash after it.
        state_hash: crate::state::StateHash,
        /// Each command's outcome fingerprint by position, the commands that ran, the version.
        ran: crate::apply::Ran,
    },
}

/// Work for the snapshot writer, in order: a begin, its bytes, then a finish or an abort.
#[derive(Clone, Debug)]
pub enum SnapshotWrite {
    /// A snapshot of the state at this entry starts.
    Begin(EntryIndex),
    /// The next bytes of its file.
    Bytes(Vec<u8>),
    /// The last bytes were given: seal the file and make it durable, then report
    /// [`Replica::snapshot_durable`].
    Finish(SnapshotMeta),
    /// Forget the snapshot in progress.
    Abort,
}

/// Something that happened, for logs and checkers; nothing to carry out.
#[derive(Clone, Debug)]
pub enum Note {
    /// The role or the known leader changed.
    RoleChanged {
        /// The new role.
        role: Role,
        /// The term.
        term: Term,
        /// The leader, if known.
        leader: Option<NodeId>,
    },
    /// A committed entry was applied (or installed from a snapshot): the state hash after it.
    Applied(AppliedHash),
    /// The leader's snapshot was installed in place of the state and the log.
    Installed {
        /// Its entry.
        index: EntryIndex,
        /// Its size.
        bytes: u64,
    },
    /// This replica's state hash differs from another's after the same entry.
    Diverged(Divergence),
    /// The replica halted for good.
    Halted(Halt),
    /// The members in force changed: the driver connects to these.
    Members(crate::members::Members),
}

/// What a replica asks of its driver, in order.
#[derive(Clone, Debug)]
pub enum Io<T> {
    /// Send a message to a replica (a full queue may drop it: consensus resends).
    Send {
        /// The receiver.
        to: NodeId,
        /// The message.
        message: PeerMessage,
    },
    /// Make term and vote durable before carrying out anything after this; on failure call
    /// [`Replica::halt`] and carry out nothing else of this batch.
    PersistHardState(HardState),
    /// Make the record of known members durable before carrying out anything after this; on
    /// failure call [`Replica::halt`] and carry out nothing else of this batch.
    PersistKnownMembers(KnownMembers),
    /// WAL work.
    Wal(WalOp),
    /// Answer a client.
    Answer {
        /// Who waits.
        to: T,
        /// The answer.
        reply: ClientReply,
    },
    /// Stream the durable snapshot of `index` to `peer`; report
    /// [`Replica::snapshot_send_aborted`] if that fails.
    SendSnapshot {
        /// The follower.
        peer: NodeId,
        /// The snapshot's entry.
        index: EntryIndex,
        /// The leader's term the chunks carry.
        term: Term,
    },
    /// Work for the snapshot writer.
    Snapshot(SnapshotWrite),
    /// Keep this chunk of the leader's snapshot; once the file is whole, verified and durable,
    /// report [`Replica::snapshot_received`].
    StoreSnapshotChunk(net::message::SnapshotChunk),
    /// For logs and checkers.
    Note(Note),
}

/// Why a replica halted: it takes no further part in consensus and applies nothing more.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Halt {
    /// The hard state could not be written.
    #[error("cannot persist the hard state: {0}")]
    HardState(IoFault),
    /// The record of known members could not be written.
    #[error("cannot persist the record of known members: {0}")]
    KnownMembers(IoFault),
    /// The WAL thread is gone.
    #[error("the WAL thread stopped")]
    WalStopped,
    /// The WAL failed for good (after a failed fsync the page cache's state is unknown).
    #[error("the WAL failed: {0}")]
    WalFailed(WalFailure),
    /// Every copy of a committed entry is lost.
    #[error(
        "unrecoverable corruption at index {0}: every copy of this committed entry is damaged or lost"
    )]
    Unrecoverable(EntryIndex),
    /// A committed entry to apply is not in memory.
    #[error("entry {0} is committed but not in memory")]
    NotInMemory(EntryIndex),
    /// The apply loop stopped.
    #[error("apply stopped: {0}")]
    Apply(ApplyError),
    /// The leader's snapshot verified but does not install here.
    #[error("the leader's snapshot of entry {index} does not install: {error}")]
    Install {
        /// Its entry.
        index: EntryIndex,
        /// Why.
        error: InstallError,
    },
}

/// The WAL's work that failed for good, and how. The node halts on any of them rather than
/// go on from a log it cannot trust.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WalFailure {
    /// Writing entries to a segment.
    #[error("writing entries: {0}")]
    Write(IoFault),
    /// An fsync of the log: what the page cache holds of it is unknown.
    #[error("syncing: {0}")]
    Sync(IoFault),
    /// Cutting the log's tail for the leader's entries.
    #[error("truncating: {0}")]
    Truncate(IoFault),
    /// Starting the log over after a snapshot.
    #[error("starting over after a snapshot: {0}")]
    Reset(IoFault),
    /// Reading entries back for a peer.
    #[error("reading entries for a peer: {0}")]
    Read(IoFault),
}

/// One replica: see the module's documentation.
pub struct Replica<H: Handler, T> {
    config: ReplicaConfig,
    core: Core,
    machine: StateMachine<H>,
    batcher: Batcher,
    /// Requests waiting for their entry: what their commands are, and who to answer.
    waiters: BTreeMap<(ClientId, RequestNumber), (RequestDigest, T)>,
    /// Clients asking where their session stands, answered once the entry named has applied
    /// (the leader's last entry when they asked: everything committed before is then applied).
    resumes: Vec<(EntryIndex, ClientId, T)>,
    halted: Option<Halt>,
    /// The WAL found the file system full and retries its append.
    storage_full: bool,
    /// Entries this leader proposed and has not simulated yet.
    unsimulated: Vec<EntryIndex>,
    /// Follower: the commit index to apply up to once nothing waits for the WAL.
    commit_to: EntryIndex,
    /// Ticks since the replica started.
    ticks: u64,
    /// The time given with the latest tick or proposal, in milliseconds since the Unix epoch:
    /// what a read's commands see as `Tx::now_ms`.
    now_ms: u64,
    /// Reads off the log in progress.
    reads: reads::Reads<T>,
    /// The protocol version each peer's latest connection to this replica spoke.
    peer_protocols: BTreeMap<NodeId, u16>,
    snapshots: Snapshots,
    timing: Timing,
}

impl<H: Handler, T> Replica<H, T> {
    /// Checks every invariant of the replica and the parts it owns (the consensus core, the
    /// state machine with its sessions, the batcher); panics naming the first one broken. The
    /// simulator calls it every few events, the node after each round of inputs in debug
    /// builds: it walks whole structures, too slow for every step of a release build.
    pub fn check_invariants(&self) {
        self.core.check_invariants();
        self.machine.check_invariants();
        self.check_own(false);
    }

    /// [`Replica::check_invariants`] without the walks whose cost grows with the state or
    /// the load: the log window's end only; no sessions, tables, state hash, queued requests
    /// or kept answers (see [`Core::check_recent_invariants`],
    /// [`StateMachine::check_recent_invariants`]). The simulator calls it after every event,
    /// a release node after every round of inputs.
    pub fn check_recent_invariants(&self) {
        self.core.check_recent_invariants();
        self.machine.check_recent_invariants();
        self.check_own(true);
    }

    fn check_own(&self, recent: bool) {
        self.check_step();
        if !recent {
            self.batcher.check_invariants();
            self.check_queued();
        }
        self.check_waiting();
        self.check_reads(recent);
        self.check_snapshots();
    }

    /// What waits for the leader: nothing on a replica that does not lead or halted; each
    /// resume for an entry the log holds and that has not applied yet.
    fn check_waiting(&self) {
        let leading = self.core.role() == Role::Leader && self.halted.is_none();
        if !leading {
            assert!(
                self.batcher.is_empty() && self.waiters.is_empty() && self.resumes.is_empty(),
                "a replica that does not lead holds {} requests, {} waiters, {} resumes",
                self.batcher.queued().count(),
                self.waiters.len(),
                self.resumes.len()
            );
        }
        if self.core.role() != Role::Leader {
            assert!(
                self.unsimulated.is_empty(),
                "a follower with entries to simulate"
            );
        }
        let (applied, last) = (self.machine.applied_index(), self.core.last_index());
        for (index, client, _) in &self.resumes {
            assert!(
                *index > applied && *index <= last,
                "client {client}'s resume at {index} (applied {applied}, last {last})"
            );
        }
        // Entries proposed and applied before their simulation ran stay listed (and skipped).
        let mut after = EntryIndex::ZERO;
        for &index in &self.unsimulated {
            assert!(
                index > after && index <= last,
                "entry {index} to simulate after {after} (last {last})"
            );
            after = index;
        }
    }

    /// Each request queued once, the waiter still here for it waiting for the same commands.
    fn check_queued(&self) {
        let mut queued = std::collections::BTreeSet::new();
        for request in self.batcher.queued() {
            let key = (request.client, request.request);
            assert!(
                queued.insert(key),
                "request {} of client {} queued twice",
                key.1,
                key.0
            );
            assert!(
                self.waiters
                    .get(&key)
                    .is_none_or(|(d, _)| *d == request.digest),
                "request {} of client {} waits for other commands than it queued",
                key.1,
                key.0
            );
        }
    }

    /// A replica from what recovery found: the core's durable state, the state machine with
    /// the committed log replayed, and the newest durable snapshot's entry and size.
    pub fn new(
        config: ReplicaConfig,
        recovered: Recovered,
        mut machine: StateMachine<H>,
        latest_snapshot: Option<(EntryIndex, u64)>,
    ) -> Self {
        machine.set_replying(false);
        machine.set_write_tracking(config.snapshot_deltas);
        let snapshots = Snapshots::new(&config, machine.applied_index(), latest_snapshot);
        Replica {
            core: Core::new(config.core.clone(), recovered),
            batcher: Batcher::new(config.entry_commands_max),
            waiters: BTreeMap::new(),
            resumes: Vec::new(),
            halted: None,
            storage_full: false,
            unsimulated: Vec::new(),
            commit_to: EntryIndex::ZERO,
            ticks: 0,
            now_ms: 0,
            reads: reads::Reads::default(),
            peer_protocols: BTreeMap::new(),
            snapshots,
            timing: Timing::default(),
            machine,
            config,
        }
    }

    /// The consensus core (read only).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// The state machine (read only).
    pub fn machine(&self) -> &StateMachine<H> {
        &self.machine
    }

    /// Why the replica halted, if it did.
    pub fn halted(&self) -> Option<&Halt> {
        self.halted.as_ref()
    }

    /// What leaders do with their simulations from now on.
    pub fn set_mode(&mut self, mode: crate::apply::Mode) {
        self.machine.set_mode(mode);
    }

    /// A tick of the consensus clock; then proposes what waits (`now_ms` stamps the entries).
    pub fn tick(&mut self, now_ms: u64, out: &mut Vec<Io<T>>) {
        self.ticks += 1;
        self.step(Event::Tick, out);
        self.renew_read_rounds(out);
        self.serve_reads(out);
        self.propose(now_ms, out);
    }

    /// A message from another replica.
    pub fn receive(&mut self, from: NodeId, message: PeerMessage, out: &mut Vec<Io<T>>) {
        if let PeerMessage::Append(append) = &message {
            for entry in &append.entries {
                self.timing.received(entry.index());
            }
        }
        let acknowledgement = matches!(message, PeerMessage::AppendReply(_));
        self.step(Event::Message { from, message }, out);
        if acknowledgement {
            let matched = self.core.matched().find(|&(peer, _)| peer == from);
            if let Some((peer, matched)) = matched {
                self.timing.peer_matched(peer, matched);
            }
        }
    }

    /// The WAL made every entry up to `index` durable.
    pub fn persisted(&mut self, index: EntryIndex, term: Term, out: &mut Vec<Io<T>>) {
        self.timing.persisted(index);
        self.step(Event::Persisted { index, term }, out);
    }

    /// The WAL read entries back for `peer`.
    pub fn loaded(&mut self, peer: NodeId, entries: Vec<Entry>, out: &mut Vec<Io<T>>) {
        self.step(Event::Loaded { peer, entries }, out);
    }

    /// An acknowledgement could not be sent.
    pub fn ack_failed(&mut self, out: &mut Vec<Io<T>>) {
        self.step(Event::AckFailed, out);
    }

    /// Whether the WAL finds the file system full (new requests are refused meanwhile).
    pub fn set_storage_full(&mut self, full: bool) {
        self.storage_full = full;
    }

    /// Steps the core, unless the replica halted: a halted replica takes no part in
    /// consensus, so that the others elect a leader that can serve.
    fn step(&mut self, event: Event, out: &mut Vec<Io<T>>) {
        if self.halted.is_some() {
            return;
        }
        let mut actions = Vec::new();
        self.core.step(event, &mut actions);
        self.take_actions(actions, out);
        self.check_step();
    }

    /// The step's postconditions (cheap: checked after every step, in release builds too).
    fn check_step(&self) {
        let core = &self.core;
        let applied = self.machine.applied_index();
        assert_eq!(
            core.applied().map_or(EntryIndex::ZERO, |a| a.index),
            applied,
            "the core and the state machine disagree on the entry applied"
        );
        assert!(
            self.commit_to <= core.commit_index(),
            "applying up to {} past the commit index {}",
            self.commit_to,
            core.commit_index()
        );
        assert!(
            core.durable_index() <= core.last_index(),
            "durable past the log's end"
        );
        assert!(
            self.machine.applied_index() <= core.commit_index(),
            "applied {} past the commit index {}",
            self.machine.applied_index(),
            core.commit_index()
        );
        assert!(
            core.commit_index() <= core.last_index().max(core.log_base().index),
            "commit past the log's end"
        );
    }

    /// Turns the core's actions into IO, in order, and does what is the replica's own (apply,
    /// role changes). Once the replica halts nothing more is asked for.
    fn take_actions(&mut self, actions: Vec<Action>, out: &mut Vec<Io<T>>) {
        let mut queue = VecDeque::from(actions);
        while let Some(action) = queue.pop_front() {
            if self.halted.is_some() {
                return;
            }
            self.take(action, &mut queue, out);
        }
    }

    fn take(&mut self, action: Action, queue: &mut VecDeque<Action>, out: &mut Vec<Io<T>>) {
        match action {
            Action::Send { to, message } => out.push(Io::Send { to, message }),
            Action::PersistHardState(state) => out.push(Io::PersistHardState(state)),
            Action::PersistKnownMembers(known) => out.push(Io::PersistKnownMembers(known)),
            Action::Persist(entries) => {
                self.check_appended(&entries);
                out.push(Io::Wal(WalOp::Append(entries)));
            }
            Action::AckWhenDurable { to, reply } => out.push(Io::Wal(WalOp::Ack {
                to,
                message: PeerMessage::AppendReply(reply),
            })),
            Action::Truncate(from) => {
                assert!(
                    from > self.machine.applied_index(),
                    "truncating from {from}, at or below the applied {}",
                    self.machine.applied_index()
                );
                out.push(Io::Wal(WalOp::Truncate(from)));
            }
            Action::Load { peer, from, to } => out.push(Io::Wal(WalOp::Load { peer, from, to })),
            Action::Commit(index) => self.committed(index, queue, out),
            Action::RoleChanged { role, term, leader } => {
                self.role_changed(role, out);
                out.push(Io::Note(Note::RoleChanged { role, term, leader }));
            }
            Action::SendSnapshot { peer } => match self.snapshots.latest() {
                Some((index, _)) => out.push(Io::SendSnapshot {
                    peer,
                    index,
                    term: self.core.term(),
                }),
                None => {
                    let mut actions = Vec::new();
                    self.core
                        .step(Event::SnapshotAborted { peer }, &mut actions);
                    queue.extend(actions);
                }
            },
            Action::StoreSnapshotChunk(chunk) => out.push(Io::StoreSnapshotChunk(chunk)),
            Action::Unrecoverable(index) => self.halt(Halt::Unrecoverable(index), out),
            Action::Diverged(divergence) => out.push(Io::Note(Note::Diverged(divergence))),
            Action::MembersChanged(members) => {
                // Clients are pointed at a leader by its address: learn the new members'.
                for member in members
                    .list()
                    .iter()
                    .filter(|m| !m.client_address.is_empty())
                {
                    let address = member.client_address.clone();
                    self.config
                        .client_addresses
                        .entry(member.id)
                        .or_insert(address);
                }
                out.push(Io::Note(Note::Members(members)));
            }
            Action::ReadsConfirmed(_) => self.serve_reads(out),
        }
    }

    /// Entries up to `index` are committed: the leader applies them now, a follower once its
    /// acknowledgements are out (see `catch_up`).
    fn committed(&mut self, index: EntryIndex, queue: &mut VecDeque<Action>, out: &mut Vec<Io<T>>) {
        assert!(
            index <= self.core.commit_index(),
            "told to apply up to {index} past the commit index {}",
            self.core.commit_index()
        );
        self.timing.committed(index);
        if self.core.role() == Role::Leader {
            self.apply_committed(index, queue, out);
            assert!(
                self.halted.is_some() || self.machine.applied_index() >= index,
                "the leader left committed entries up to {index} unapplied"
            );
        } else {
            self.commit_to = self.commit_to.max(index);
        }
    }

    fn role_changed(&mut self, role: Role, out: &mut Vec<Io<T>>) {
        self.machine.set_replying(role == Role::Leader);
        if role != Role::Leader {
            self.abandon_waiters(out);
            self.unsimulated.clear();
            self.machine.discard_simulations();
            self.timing.forget();
        }
    }

    /// Entries handed to the WAL to append: consecutive, after what was applied, and (checked
    /// in debug builds only: it hashes every payload again) each chained to the one before.
    fn check_appended(&self, entries: &[Entry]) {
        let Some(first) = entries.first() else {
            return;
        };
        assert!(
            first.index() > self.machine.applied_index(),
            "appending entry {} at or below the applied {}",
            first.index(),
            self.machine.applied_index()
        );
        debug_assert!(
            entries.windows(2).all(|pair| {
                pair[1].index() == pair[0].index().next()
                    && pair[1].verify(&pair[0].header.hash).is_ok()
            }),
            "entries appended from {} do not chain",
            first.index()
        );
    }

    /// Applies committed entries in order, answers the requests they finish, and tells the
    /// core each state hash (the core's answers join `queue`).
    fn apply_committed(
        &mut self,
        index: EntryIndex,
        queue: &mut VecDeque<Action>,
        out: &mut Vec<Io<T>>,
    ) {
        while self.halted.is_none() && self.machine.applied_index() < index {
            let next = self.machine.applied_index().next();
            let Some(entry) = self.core.entry(next).cloned() else {
                self.halt(Halt::NotInMemory(next), out);
                return;
            };
            self.check_applying(&entry, next);
            // A leader's followers keep the changes; a cluster of one keeps them itself.
            let keep = self.config.change_stream
                && (self.core.role() != Role::Leader || self.core.members().len() == 1);
            self.machine.set_keep_changes(keep);
            let started = timing::now();
            let applied = match self.machine.apply(&entry) {
                Ok(applied) => applied,
                Err(error) => {
                    self.halt(Halt::Apply(error), out);
                    return;
                }
            };
            debug_assert_eq!(applied.index, next, "apply skipped an entry");
            self.timing.applied(started);
            let hash = AppliedHash {
                index: applied.index,
                hash: applied.state_hash,
            };
            out.push(Io::Note(Note::Applied(hash)));
            if self.machine.journaling() {
                out.push(Io::Wal(WalOp::Journal {
                    index: applied.index,
                    state_hash: applied.state_hash,
                    ran: applied.ran,
                }));
            }
            for reply in applied.replies {
                self.answer(reply, out);
            }
            self.answer_resumes(out);
            self.serve_reads(out);
            let mut actions = Vec::new();
            self.core.step(Event::Applied(hash), &mut actions);
            queue.extend(actions);
            self.maybe_start_snapshot(out);
        }
    }

    /// An entry about to be applied as `next`: committed, and the one the log holds there,
    /// chained to the entry before it (that check hashes the payload: debug builds only).
    fn check_applying(&self, entry: &Entry, next: EntryIndex) {
        assert!(
            entry.index() == next && next <= self.core.commit_index(),
            "applying entry {} as {next} (commit {})",
            entry.index(),
            self.core.commit_index()
        );
        assert_eq!(
            self.core.hash_at(next),
            Some(entry.header.hash),
            "entry {next} to apply is not the one the log holds"
        );
        debug_assert!(
            self.core
                .hash_at(next.prev())
                .is_some_and(|prev| entry.verify(&prev).is_ok()),
            "entry {next} does not chain to the entry before it"
        );
    }

    /// Answers the client waiting for `reply`'s request, if one waits here.
    fn answer(&mut self, reply: Reply, out: &mut Vec<Io<T>>) {
        let key = (reply.client, reply.request);
        // A waiter for other commands under the same number is answered by its own
        // fragment (as reused), not with these results.
        if self
            .waiters
            .get(&key)
            .is_none_or(|(d, _)| *d != reply.digest)
        {
            return;
        }
        let (_, waiter) = self.waiters.remove(&key).expect("found");
        let reply = match reply.status {
            ReplyStatus::Results(results) => ClientReply::Results {
                client: reply.client,
                request: reply.request,
                command_count: reply.command_count,
                results,
            },
            ReplyStatus::Stale => ClientReply::Stale {
                request: reply.request,
            },
            ReplyStatus::Expired => ClientReply::Expired {
                request: reply.request,
            },
            ReplyStatus::NotYet => ClientReply::NotYet {
                request: reply.request,
            },
            ReplyStatus::Reused => ClientReply::Reused {
                request: reply.request,
            },
        };
        out.push(Io::Answer { to: waiter, reply });
    }

    /// Halts for good: every waiting client is told to ask elsewhere (their requests may still
    /// commit through the other replicas: never that nothing was applied).
    pub fn halt(&mut self, reason: Halt, out: &mut Vec<Io<T>>) {
        if self.halted.is_some() {
            return;
        }
        self.batcher.drain();
        let elsewhere = ClientReply::NotLeader {
            leader: None,
            address: None,
        };
        let resumes = std::mem::take(&mut self.resumes).into_iter();
        let waiting = std::mem::take(&mut self.waiters)
            .into_values()
            .map(|(_, w)| w);
        let reads = self.reads.drain();
        for waiter in waiting.chain(resumes.map(|(_, _, w)| w)).chain(reads) {
            out.push(Io::Answer {
                to: waiter,
                reply: elsewhere.clone(),
            });
        }
        out.push(Io::Note(Note::Halted(reason.clone())));
        self.halted = Some(reason);
    }

    /// Forms entries from waiting requests while the pipeline has room; with none waiting, an
    /// empty entry when a read waits for one past the log's end.
    pub fn propose(&mut self, now_ms: u64, out: &mut Vec<Io<T>>) {
        self.now_ms = self.now_ms.max(now_ms);
        while self.halted.is_none()
            && self.core.role() == Role::Leader
            && self.core.uncommitted() < self.config.pipeline_entries_max
        {
            let (kind, count, payload) = match self.batcher.next_entry(now_ms) {
                Some((payload, count, kind)) => (kind, count, payload),
                None if self.reads_need_entry() => (EntryKind::Noop, 0, Bytes::new()),
                None => return,
            };
            let mut actions = Vec::new();
            let index = self
                .core
                .propose(kind, count, payload, &mut actions)
                .expect("the leader proposes");
            assert_eq!(index, self.core.last_index(), "a proposal ends the log");
            self.timing.proposed(index, !self.batcher.is_empty());
            // An empty entry is simulated too, so that the speculations after it go on.
            self.unsimulated.push(index);
            self.take_actions(actions, out);
        }
    }

    /// As leader, proposes the members after `change` (one node added or removed); the new
    /// list is in force from its entry on, and the change is done once that entry commits.
    pub fn propose_members(
        &mut self,
        change: &MemberChange,
        out: &mut Vec<Io<T>>,
    ) -> Result<EntryIndex, ChangeRefused> {
        if self.halted.is_some() {
            return Err(NotLeader { leader: None }.into());
        }
        let mut actions = Vec::new();
        let index = self.core.propose_members(change, &mut actions)?;
        self.take_actions(actions, out);
        self.check_step();
        Ok(index)
    }

    /// An operator's change of members, answered at once: in the log at an index (done once
    /// committed), refused with the reason, or "not the leader".
    pub fn change_members(&mut self, change: &MemberChange, out: &mut Vec<Io<T>>) -> ClientReply {
        match self.propose_members(change, out) {
            Ok(index) => ClientReply::MembersChanging { index },
            Err(ChangeRefused::NotLeader(_)) => self.not_leader(),
            Err(ChangeRefused::Pending) => ClientReply::MembersRefused(MembersRefusal::Pending),
            // Too few live holders is answered like an unsettled leader (asked again): it
            // lasts while a member is silent, which `member replace` avoids by removing a
            // dead member first, and `member add` names when it gives up.
            Err(ChangeRefused::NotSettled | ChangeRefused::Unheld) => {
                ClientReply::MembersRefused(MembersRefusal::NotSettled)
            }
            Err(ChangeRefused::Invalid(error)) => {
                ClientReply::MembersRefused(MembersRefusal::Invalid(error.to_string()))
            }
        }
    }

    /// An operator's handler upgrade, answered at once: in the log at an index (every replica
    /// switches there once it is committed), refused with the reason, or "not the leader".
    /// The leader's build must run the version, and it must be newer than the version in
    /// force or already in the log on its way.
    pub fn upgrade(&mut self, version: u32, out: &mut Vec<Io<T>>) -> ClientReply {
        if self.halted.is_some() {
            return ClientReply::UpgradeRefused(UpgradeRefusal::Halted);
        }
        if self.core.role() != Role::Leader {
            return self.not_leader();
        }
        let (oldest, newest) = (*H::VERSIONS.start(), *H::VERSIONS.end());
        if !H::VERSIONS.contains(&version) {
            let refusal = UpgradeRefusal::Unsupported {
                version,
                oldest,
                newest,
            };
            return ClientReply::UpgradeRefused(refusal);
        }
        let in_force = self.newest_handler_version();
        if version <= in_force {
            return ClientReply::UpgradeRefused(UpgradeRefusal::NotNewer { version, in_force });
        }
        let payload = Bytes::from(crate::codec::encode_to_vec(&version).expect("a u32 encodes"));
        let mut actions = Vec::new();
        let proposed = self
            .core
            .propose(EntryKind::Upgrade, 0, payload, &mut actions);
        self.take_actions(actions, out);
        match proposed {
            Ok(index) => ClientReply::Upgrading { index },
            Err(_) => self.not_leader(),
        }
    }

    /// The newest handler version in force or in the log beyond the last entry applied.
    fn newest_handler_version(&self) -> u32 {
        let applied = self.machine.applied_index().0;
        let pending = (applied + 1..=self.core.last_index().0)
            .filter_map(|i| self.core.entry(EntryIndex(i)))
            .filter(|e| e.kind() == EntryKind::Upgrade)
            .filter_map(|e| crate::codec::decode::<u32>(&e.payload).ok());
        pending.fold(self.machine.handler_version(), u32::max)
    }

    /// The handler versions this replica's build runs, and the one in force on it.
    pub fn versions(&self) -> HandlerVersions {
        HandlerVersions {
            node: self.core.id(),
            in_force: self.machine.handler_version(),
            applied_index: self.machine.applied_index(),
            oldest: *H::VERSIONS.start(),
            newest: *H::VERSIONS.end(),
        }
    }

    /// A follower applies committed entries when its WAL has nothing in flight: its
    /// acknowledgement (on the leader's critical path) goes out first, the apply (not on it)
    /// after. A follower whose WAL is never idle (a slow disk under steady load) applies
    /// anyway once it is [`FOLLOWER_APPLY_LAG_ENTRIES_MAX`] entries behind.
    pub fn catch_up(&mut self, out: &mut Vec<Io<T>>) {
        let core = &self.core;
        let idle = core.durable_index() == core.last_index() || core.role() == Role::Leader;
        let behind = self
            .commit_to
            .0
            .saturating_sub(self.machine.applied_index().0);
        if (idle || behind >= FOLLOWER_APPLY_LAG_ENTRIES_MAX) && behind > 0 {
            let mut queue = VecDeque::new();
            self.apply_committed(self.commit_to, &mut queue, out);
            assert!(
                self.halted.is_some() || self.machine.applied_index() >= self.commit_to,
                "caught up to {} of {}",
                self.machine.applied_index(),
                self.commit_to
            );
            self.take_actions(queue.into(), out);
        }
    }

    /// Work kept off the critical path: simulations to run, committed entries to apply.
    pub fn has_deferred_work(&self) -> bool {
        !self.unsimulated.is_empty() || self.commit_to > self.machine.applied_index()
    }

    /// Work for a moment with nothing else to do, in the order a node does it: the leader
    /// simulates what it proposed (so that its apply can reuse the simulation), a follower
    /// applies what committed, then, when `slice_due`, a slice of the snapshot in progress is
    /// scanned. The driver runs it after each round of inputs, the simulator when it draws a
    /// quiet moment.
    pub fn idle_work(&mut self, slice_due: bool, out: &mut Vec<Io<T>>) {
        self.simulate();
        self.catch_up(out);
        if slice_due && self.snapshotting() {
            self.snapshot_slice(out);
        }
    }

    /// The rule for IO that failed with `halt`: of the IO still `queued` after it only the
    /// answers to clients are carried out (their waiters are taken already), then the replica
    /// halts. A vote must not leave after its persistence failed.
    pub fn io_failed(&mut self, halt: Halt, queued: &mut VecDeque<Io<T>>, out: &mut Vec<Io<T>>) {
        queued.retain(|io| matches!(io, Io::Answer { .. }));
        self.halt(halt, out);
    }

    /// Simulates the entries proposed since the last call, in order (only while still leading
    /// and not yet applied: an entry applied first has nothing left to gain).
    pub fn simulate(&mut self) {
        for index in std::mem::take(&mut self.unsimulated) {
            if self.core.role() != Role::Leader || index <= self.machine.applied_index() {
                continue;
            }
            if let Some(entry) = self.core.entry(index).cloned() {
                assert_eq!(entry.index(), index, "simulating another entry");
                let started = timing::now();
                self.machine.simulate(&entry);
                self.timing.simulated(started);
            }
        }
    }

    /// Each stage's distribution of per-entry times (the metrics' histograms).
    pub fn latencies(&self) -> &StageLatencies {
        &self.timing.latencies
    }

    /// On a leader, each follower's lag and round trip (the metrics' figures).
    pub fn peer_lags(&self) -> Vec<PeerLag> {
        (self.timing).peer_lags(self.core.last_index(), self.core.matched())
    }

    /// What `runner status` shows.
    pub fn status(&self) -> NodeStatus {
        let counters = self.machine.counters();
        let mut stages = self.timing.stages;
        stages.simulated_commands = counters.simulated;
        stages.executed_commands = counters.executed;
        stages.reused_commands = counters.reused;
        stages.verified_commands = counters.verified;
        NodeStatus {
            node: self.config.core.id,
            role: self.core.role(),
            term: self.core.term(),
            leader: self.core.leader(),
            last_index: self.core.last_index(),
            commit_index: self.core.commit_index(),
            applied_index: self.machine.applied_index(),
            state_hash: self.machine.state_hash(),
            divergence: self.core.divergence().cloned(),
            halted: self.halted.as_ref().map(Halt::to_string),
            storage_full: self.storage_full,
            mode: self.machine.mode(),
            stages,
            members: self.core.members().ids().collect(),
            members_pending: self.core.members_pending(),
        }
    }
}
