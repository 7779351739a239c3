//! The consensus core, sans-IO: a deterministic state machine stepped with events (a message
//! arrived, a tick passed, the WAL made entries durable, the state machine applied an entry)
//! that returns actions (send, persist, truncate, commit, load). No clock, socket, file,
//! thread or ambient randomness: the tokio driver and the tests run the same code.
//!
//! The protocol is Raft: terms, randomized election timeouts counted in ticks (from a seeded
//! generator), votes, log matching with back-tracking, commit at a majority of durable copies.
//! Durability is explicit: the leader counts itself only after its own `Persisted` event, and a
//! follower acknowledges entries only after its own. Two additions guard against disruption: a
//! replica that heard from a leader within the minimum election timeout ignores vote requests
//! (leader stickiness), and a leader that has not heard from a majority for that long steps down
//! (check quorum). With pre-vote (`election`) a replica whose election timer runs out first asks
//! whether it could win, without raising its term; a replica cut off from the others therefore
//! comes back at its old term and cannot depose a leader the others still follow.

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

mod election;
mod invariants;
mod known;
mod log;
mod membership;
mod quorum;
mod read_check;
mod repair;

pub use known::{KnownMembers, KnownRead};
pub use log::{LOG_CHECK_RECENT_ENTRIES, LOG_WINDOW_BYTES_MAX, LOG_WINDOW_ENTRIES_MIN, LogBase};
pub use membership::{ChangeRefused, MemberSet, RepairView};
pub use quorum::{majority, quorum_index};

use crate::entry::{Entry, EntryHash, EntryKind};
use crate::ids::{EntryIndex, NodeId, Term};
use crate::members::Members;
use crate::rng::Rng;
use bytes::Bytes;
use log::Log;
use membership::Configs;
use net::message::{
    Append, AppendOutcome, AppendReply, AppliedHash, Divergence, PeerMessage, Role, SnapshotChunk,
    Vote, VoteReply,
};
use std::collections::{BTreeMap, VecDeque};

/// Minimum election timeout, in ticks, when none is configured; each timeout is drawn from
/// `[min, 2 * min)`.
pub const ELECTION_TICKS_MIN_DEFAULT: u32 = 15;
/// Ticks between a leader's heartbeats, when none is configured.
pub const HEARTBEAT_TICKS_DEFAULT: u32 = 3;
/// Most entries one append message carries.
pub const APPEND_ENTRIES_MAX: usize = 64;
/// Bytes of payload above which an append message takes no further entry (it always takes one).
pub const APPEND_BYTES_MAX: usize = 2 * 1024 * 1024;
/// Entries a leader sends a follower beyond what the follower acknowledged: bounds what a slow
/// follower queues for its WAL.
pub const PEER_INFLIGHT_ENTRIES_MAX: u64 = 256;
/// Applied state hashes remembered for comparing with other replicas'.
pub const HASH_HISTORY_ENTRIES: usize = 4096;
/// Ticks a leader waits for a follower to install a snapshot before sending it again.
pub const SNAPSHOT_RESEND_TICKS: u64 = 1_000;
/// Entries behind a durable snapshot that a leader keeps in its log for a lagging follower
/// (past this, the follower gets the snapshot instead, and the log stays bounded).
pub const LAGGING_FOLLOWER_ENTRIES_MAX: u64 = 4_096;

const _: () = assert!(
    APPEND_BYTES_MAX + crate::entry::ENTRY_PAYLOAD_BYTES_MAX as usize
        <= net::frame::FRAME_BODY_BYTES_MAX,
    "an append that stopped below the byte limit plus one largest entry fits a frame"
);
const _: () = assert!(HEARTBEAT_TICKS_DEFAULT < ELECTION_TICKS_MIN_DEFAULT);

/// A replica's configuration.
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// This replica.
    pub id: NodeId,
    /// The cluster's first members (its cluster file's nodes), in force until the log holds a
    /// members entry; none for a node started to join a running cluster.
    pub nodes: Vec<NodeId>,
    /// Minimum election timeout in ticks.
    pub election_ticks_min: u32,
    /// Ticks between heartbeats.
    pub heartbeat_ticks: u32,
    /// Seed of the election-timeout generator.
    pub seed: u64,
    /// Entries behind a durable snapshot a leader keeps for a lagging follower (see
    /// [`LAGGING_FOLLOWER_ENTRIES_MAX`]).
    pub lagging_entries_max: u64,
    /// Ask for pre-votes before campaigning (see `election`); plain Raft without.
    pub pre_vote: bool,
}

/// Term and vote: what must be durable before a replica acts on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    /// The current term.
    pub term: Term,
    /// The candidate voted for in that term.
    pub voted_for: Option<NodeId>,
    /// Entries this replica may have acknowledged and lost to damage on its disk: until a
    /// leader has made its log durable through them again, it votes as if it still held them
    /// and never campaigns.
    pub repair: Option<Repair>,
    /// Votes this replica may have cast and lost with a damaged hard state (an operator's
    /// rebuild): it votes and campaigns only in terms above every term the others held once it
    /// had heard from all of them (see [`LostVotes`]).
    pub votes_lost: Option<LostVotes>,
    /// The members last in force in its log, kept here as well (before any entry that
    /// changed them is acknowledged): what a replica whose log was cut by damage, or rebuilt
    /// empty, knows of who else may hold what it lost. None before the first change.
    pub members: Option<MemberSet>,
    /// The members before the first members entry (the cluster file's at the first start),
    /// while no members entry is applied: where a restart starts from when its log lost the
    /// entry that made `members` (a list no other log may hold). None once one is applied,
    /// and in data directories written before it was kept (then `members` stands for it).
    pub first_members: Option<MemberSet>,
}

/// What a replica whose hard state was lost knows of the votes it may have cast. A vote it
/// cast for a candidate was in a term no higher than that candidate's term today (terms only
/// grow, and a candidate's term is durable before it asks), so once every other replica has
/// been heard, the highest term heard bounds every lost vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostVotes {
    /// Not every other replica has been heard since the loss: no vote, no campaign.
    Unknown,
    /// Every lost vote was in this term or an earlier one: votes and campaigns only above it.
    Through(Term),
}

/// The end of the log a replica had before damage cut it: the last entry found on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repair {
    /// Its index.
    pub index: EntryIndex,
    /// Its term.
    pub term: Term,
    /// The highest commit index the entries found beyond the damage carried: entries up to
    /// it were committed.
    pub committed: EntryIndex,
}

impl Repair {
    /// The obligation of two damages found one after the other (a restart during a repair):
    /// the further log end (the higher term where the ends are equal) and the higher commit
    /// index, so that an obligation never shrinks.
    pub fn merge(self, other: Repair) -> Repair {
        let end = (self.index, self.term).max((other.index, other.term));
        Repair {
            index: end.0,
            term: end.1,
            committed: self.committed.max(other.committed),
        }
    }
}

/// What a replica recovered from disk.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// Term and vote.
    pub hard_state: HardState,
    /// The last entry the recovered snapshot covers (zero without one).
    pub base: LogBase,
    /// Term of every entry in the WAL after the base.
    pub terms: Vec<Term>,
    /// Hash of every entry in the WAL after the base.
    pub hashes: Vec<EntryHash>,
    /// The WAL's tail from `applied + 1`, to keep in memory.
    pub window: Vec<Entry>,
    /// Entries already applied from the WAL (known committed).
    pub applied: Option<AppliedHash>,
    /// The newest members entry applied (its index and list), if any.
    pub members: Option<(EntryIndex, Members)>,
    /// The record of every node it was told of, with the terms it vouched for each in.
    pub known: KnownRead,
}

/// Something that happened to the replica.
#[derive(Clone, Debug)]
pub enum Event {
    /// A tick of the logical clock.
    Tick,
    /// A message from another replica.
    Message {
        /// The sender.
        from: NodeId,
        /// The message.
        message: PeerMessage,
    },
    /// The WAL fsynced every entry up to `index`, which had term `term` when written.
    Persisted {
        /// The last durable entry.
        index: EntryIndex,
        /// Its term.
        term: Term,
    },
    /// The state machine applied an entry.
    Applied(AppliedHash),
    /// An acknowledgement handed to the WAL ([`Action::AckWhenDurable`]) could not be sent.
    AckFailed,
    /// Entries read back from the WAL for a peer, after an [`Action::Load`].
    Loaded {
        /// The peer they are for.
        peer: NodeId,
        /// The entries.
        entries: Vec<Entry>,
    },
    /// The driver could not finish sending a snapshot to `peer` ([`Action::SendSnapshot`]).
    SnapshotAborted {
        /// The peer.
        peer: NodeId,
    },
    /// A snapshot received from the leader was verified, made durable and installed in place
    /// of the state and the whole log ([`Action::StoreSnapshotChunk`]).
    Installed {
        /// The last entry it covers: the log continues after it.
        base: LogBase,
        /// The state hash it recorded, verified.
        applied: AppliedHash,
        /// The members in force at its entry, as it recorded them (none when no members entry
        /// preceded it).
        members: Option<Members>,
    },
}

/// Something the driver must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send a message to a replica.
    Send {
        /// The receiver.
        to: NodeId,
        /// The message.
        message: PeerMessage,
    },
    /// Make term and vote durable before carrying out any later action.
    PersistHardState(HardState),
    /// Make the record of known members durable before carrying out any later action.
    PersistKnownMembers(KnownMembers),
    /// Append entries to the WAL and fsync them, then report [`Event::Persisted`].
    Persist(Vec<Entry>),
    /// Once everything persisted so far is durable, send `reply` to `to` (from the WAL's own
    /// thread, so that a follower's acknowledgement leaves right after its fsync); report
    /// [`Event::AckFailed`] if it cannot be sent.
    AckWhenDurable {
        /// The leader.
        to: NodeId,
        /// The acknowledgement.
        reply: AppendReply,
    },
    /// Remove entries from `index` on from the WAL (before any later `Persist`).
    Truncate(EntryIndex),
    /// Entries up to this index are committed: apply them in order.
    Commit(EntryIndex),
    /// Read entries `from..=to` back from the WAL and report [`Event::Loaded`] for `peer`.
    Load {
        /// The peer that needs them.
        peer: NodeId,
        /// The first.
        from: EntryIndex,
        /// The last.
        to: EntryIndex,
    },
    /// The replica's role or the leader it knows changed.
    RoleChanged {
        /// The new role.
        role: Role,
        /// The term.
        term: Term,
        /// The leader, if known.
        leader: Option<NodeId>,
    },
    /// This replica's state hash differs from another's after the same entry.
    Diverged(Divergence),
    /// Every copy of committed entry `index` is lost: this replica lost it to damage and no
    /// other holds it. Halt: never apply it or anything after it.
    Unrecoverable(EntryIndex),
    /// Send `peer` the newest durable snapshot, in chunks; report [`Event::SnapshotAborted`] if
    /// that fails. The follower answers with an acknowledgement of its index once installed.
    SendSnapshot {
        /// The follower.
        peer: NodeId,
    },
    /// Keep this piece of a snapshot from the leader; once every piece is in and the digest
    /// verifies, make it durable, install it and report [`Event::Installed`].
    StoreSnapshotChunk(SnapshotChunk),
    /// The members in force changed (a members entry was appended, or left the log with a
    /// conflicting suffix, or a snapshot was installed): connect to these.
    MembersChanged(Members),
    /// A majority confirmed this leader's read rounds up to this one
    /// ([`Core::start_read_round`]): reads waiting for them may be answered.
    ReadsConfirmed(u64),
}

/// A proposal made to a replica that is not the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not the leader (leader: {leader:?})")]
pub struct NotLeader {
    /// The leader, if known.
    pub leader: Option<NodeId>,
}

/// A leader's view of one follower.
#[derive(Clone, Debug)]
struct Progress {
    /// The next index to send.
    next: EntryIndex,
    /// The highest index known to match and be durable there.
    matched: EntryIndex,
    /// Tick of the last reply.
    last_heard: u64,
    /// Entries for it are being read back from the WAL.
    loading: bool,
    /// A snapshot is on its way to it: the snapshot's index and the tick it was sent at.
    snapshot: Option<(EntryIndex, u64)>,
}

/// One replica's consensus state.
pub struct Core {
    config: CoreConfig,
    rng: Rng,
    hard: HardState,
    role: Role,
    leader: Option<NodeId>,
    log: Log,
    commit: EntryIndex,
    /// The highest commit index a leader has told this replica, which may lie beyond its own
    /// log (and so beyond `commit`): how far behind a follower that catches up is.
    leader_commit: EntryIndex,
    durable: EntryIndex,
    applied: Option<AppliedHash>,
    history: VecDeque<AppliedHash>,
    /// Remote hashes for entries not applied here yet, per node (the newest only).
    pending_checks: BTreeMap<NodeId, AppliedHash>,
    /// The log end (last term, last index) each candidate reported, since this replica
    /// started: what a repairing replica knows of the others' logs.
    log_ends: BTreeMap<NodeId, (Term, EntryIndex)>,
    /// While its lost votes are [`LostVotes::Unknown`]: the highest term heard from each other
    /// replica since this one started.
    heard_terms: BTreeMap<NodeId, Term>,
    divergence: Option<Divergence>,
    ticks: u64,
    election_elapsed: u32,
    election_timeout: u32,
    heartbeat_elapsed: u32,
    last_leader_contact: Option<u64>,
    votes: Vec<NodeId>,
    /// While asking for pre-votes: who granted one (this replica first).
    pre_votes: Option<Vec<NodeId>>,
    peers: BTreeMap<NodeId, Progress>,
    /// Follower: the highest index the current leader's appends showed to match.
    confirmed: EntryIndex,
    /// Follower: the highest index acknowledged to the current leader.
    acknowledged: EntryIndex,
    /// The member lists of the log.
    configs: Configs,
    /// Leader: its rounds of confirmation for reads.
    read_rounds: read_check::ReadRounds,
    /// Every node it was told of, with the highest term it vouched for each in.
    known: known::Known,
}

impl Core {
    /// Checks every invariant of the consensus state; panics naming the first one broken
    /// (see [`crate::replica::Replica::check_invariants`]).
    /// Walks the in-memory log window, the peers and the member lists, never the whole log.
    pub fn check_invariants(&self) {
        self.check_invariants_of(false);
    }

    /// [`Core::check_invariants`] walking only the log window's end
    /// ([`LOG_CHECK_RECENT_ENTRIES`]): what an event can have changed, at a cost that
    /// does not grow with the window.
    pub fn check_recent_invariants(&self) {
        self.check_invariants_of(true);
    }

    fn check_invariants_of(&self, recent: bool) {
        self.log.check_invariants(self.hard.term, recent);
        self.check_indexes();
        self.check_role();
        self.check_timers();
        self.check_peers();
        self.check_members();
        self.check_read_rounds();
        self.check_repair();
    }

    /// A replica starting from what it recovered, as a follower of no known leader.
    pub fn new(config: CoreConfig, recovered: Recovered) -> Self {
        assert!(config.heartbeat_ticks > 0 && config.heartbeat_ticks < config.election_ticks_min);
        let applied_index = recovered.applied.map_or(EntryIndex::ZERO, |a| a.index);
        // The first members: those its hard state kept, or (first start) the cluster file's,
        // which the hard state keeps from its first write on: a file edited later to list the
        // nodes that will join does not change them.
        let mut recovered = recovered;
        let hard = recovered.hard_state;
        let first = hard
            .first_members
            .or(hard.members)
            .unwrap_or_else(|| MemberSet::of(config.nodes.iter().copied()));
        recovered.hard_state.members = Some(hard.members.unwrap_or(first));
        recovered.hard_state.first_members = recovered.members.is_none().then_some(first);
        let settled = recovered
            .members
            .clone()
            .unwrap_or_else(|| (EntryIndex::ZERO, Members::of_ids(first.ids())));
        assert!(
            settled.0 <= applied_index,
            "the members recovered were applied"
        );
        let configs = Configs::recover(settled, recovered.members.is_none(), &recovered.window);
        let log = Log::new(
            recovered.base,
            recovered.terms,
            recovered.hashes,
            recovered.window,
        );
        assert!(
            applied_index <= log.last_index(),
            "applied entries are in the log"
        );
        let known =
            known::Known::start(&recovered.hard_state, std::mem::take(&mut recovered.known));
        let mut rng = Rng::new(config.seed ^ u64::from(config.id.0).rotate_left(32));
        let election_timeout =
            config.election_ticks_min + rng.below(u64::from(config.election_ticks_min)) as u32;
        let mut core = Core {
            rng,
            hard: recovered.hard_state,
            role: Role::Follower,
            leader: None,
            durable: log.last_index(),
            log,
            commit: applied_index,
            leader_commit: applied_index,
            applied: recovered.applied,
            history: recovered.applied.into_iter().collect(),
            pending_checks: BTreeMap::new(),
            log_ends: BTreeMap::new(),
            heard_terms: BTreeMap::new(),
            divergence: None,
            ticks: 0,
            election_elapsed: 0,
            election_timeout,
            heartbeat_elapsed: 0,
            last_leader_contact: None,
            votes: Vec::new(),
            pre_votes: None,
            peers: BTreeMap::new(),
            confirmed: EntryIndex::ZERO,
            acknowledged: EntryIndex::ZERO,
            configs,
            read_rounds: read_check::ReadRounds::default(),
            config,
            known,
        };
        core.learn_known();
        core
    }

    /// This replica.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// Its role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Its term.
    pub fn term(&self) -> Term {
        self.hard.term
    }

    /// The leader it knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    /// Its commit index.
    pub fn commit_index(&self) -> EntryIndex {
        self.commit
    }

    /// The newest commit index it knows of: its own on a leader; on a follower, the highest a
    /// leader has told it, even beyond its own log.
    pub fn leader_commit(&self) -> EntryIndex {
        match self.role {
            Role::Leader => self.commit,
            Role::Follower | Role::Candidate => self.leader_commit.max(self.commit),
        }
    }

    /// Its last log index.
    pub fn last_index(&self) -> EntryIndex {
        self.log.last_index()
    }

    /// On a leader: the highest index each follower is known to hold durably.
    pub fn matched(&self) -> impl Iterator<Item = (NodeId, EntryIndex)> + '_ {
        let leading = self.role == Role::Leader;
        (self.peers.iter())
            .filter(move |_| leading)
            .map(|(&id, progress)| (id, progress.matched))
    }

    /// The last index its WAL has made durable.
    pub fn durable_index(&self) -> EntryIndex {
        self.durable
    }

    /// The last entry applied, with its state hash.
    pub fn applied(&self) -> Option<AppliedHash> {
        self.applied
    }

    /// The first divergence detected, if any.
    pub fn divergence(&self) -> Option<&Divergence> {
        self.divergence.as_ref()
    }

    /// The entry at `index`, if it is held in memory.
    pub fn entry(&self, index: EntryIndex) -> Option<&Entry> {
        self.log.entry(index)
    }

    /// Entries in flight: appended by this leader and not yet committed.
    pub fn uncommitted(&self) -> u64 {
        self.log.last_index().0 - self.commit.0
    }

    /// Steps the replica with one event, appending the actions to carry out to `out`.
    pub fn step(&mut self, event: Event, out: &mut Vec<Action>) {
        match event {
            Event::Tick => self.on_tick(out),
            Event::Message { from, message } => self.on_message(from, message, out),
            Event::Persisted { index, term } => self.on_persisted(index, term, out),
            Event::AckFailed => {
                // Send it the ordinary way (what is durable of what the leader showed to match).
                if self.role == Role::Follower {
                    let index = self.durable.min(self.confirmed);
                    self.reply_append(AppendOutcome::Matched { index }, out);
                }
            }
            Event::Applied(applied) => self.on_applied(applied, out),
            Event::Loaded { peer, entries } => self.on_loaded(peer, entries, out),
            Event::SnapshotAborted { peer } => {
                if let Some(progress) = self.peers.get_mut(&peer) {
                    progress.snapshot = None;
                }
            }
            Event::Installed {
                base,
                applied,
                members,
            } => self.on_installed(base, applied, members, out),
        }
    }

    /// The chained hash of the entry at `index`, if the log holds it (or it is the base).
    pub fn hash_at(&self, index: EntryIndex) -> Option<EntryHash> {
        self.log.hash_at(index)
    }

    /// True when the log holds `base`'s entry with its hash (so everything up to it matches).
    pub fn holds(&self, base: LogBase) -> bool {
        self.log.hash_at(base.index) == Some(base.hash)
    }

    /// The last entry the log's base covers (a snapshot holds it and everything before).
    pub fn log_base(&self) -> LogBase {
        self.log.base()
    }

    /// The index up to which the log may be dropped now that a durable snapshot covers
    /// `snapshot`: a leader keeps what a follower a little behind still needs.
    pub fn compactable(&self, snapshot: EntryIndex) -> EntryIndex {
        let applied = self.applied.map_or(EntryIndex::ZERO, |a| a.index);
        let mut through = snapshot.min(applied).min(self.log.last_index());
        if self.role == Role::Leader {
            let slowest = self.peers.values().map(|p| p.matched).min();
            if let Some(slowest) = slowest
                && through.0.saturating_sub(slowest.0) <= self.config.lagging_entries_max
            {
                through = through.min(slowest);
            }
        }
        through.max(self.log.base().index)
    }

    /// Drops the log up to `through` (which a durable snapshot covers, see
    /// [`Core::compactable`]).
    pub fn compact(&mut self, through: EntryIndex) {
        let applied = self.applied.map_or(EntryIndex::ZERO, |a| a.index);
        assert!(through <= applied, "a snapshot covers applied entries only");
        let base = self.log.base().index;
        self.log.compact(through);
        assert!(
            self.log.base().index >= base.max(through),
            "compaction through {through} left the base at {} (was {base})",
            self.log.base().index
        );
    }

    /// As leader, appends a new entry to the log and starts replicating it.
    pub fn propose(
        &mut self,
        kind: EntryKind,
        command_count: u32,
        payload: Bytes,
        out: &mut Vec<Action>,
    ) -> Result<EntryIndex, NotLeader> {
        if self.role != Role::Leader {
            return Err(NotLeader {
                leader: self.leader,
            });
        }
        let index = self.log.last_index().next();
        let entry = Entry::seal(
            index,
            self.hard.term,
            kind,
            self.commit,
            command_count,
            payload,
            &self.log.last_hash(),
        );
        self.log.append(entry.clone());
        if kind == EntryKind::Members {
            let before = self.members().clone();
            self.configs.appended(&entry);
            self.members_maybe_changed(&before, out);
        }
        out.push(Action::Persist(vec![entry]));
        let caught_up: Vec<NodeId> = self
            .peers
            .iter()
            .filter(|(_, p)| {
                p.next == index && !p.loading && index.0 <= p.matched.0 + PEER_INFLIGHT_ENTRIES_MAX
            })
            .map(|(id, _)| *id)
            .collect();
        for peer in caught_up {
            self.send_append(peer, out);
        }
        Ok(index)
    }

    fn on_tick(&mut self, out: &mut Vec<Action>) {
        self.ticks += 1;
        if self
            .ticks
            .is_multiple_of(u64::from(self.config.election_ticks_min))
        {
            self.ask_terms(out);
        }
        match self.role {
            Role::Leader => {
                self.heartbeat_elapsed += 1;
                if self.heartbeat_elapsed >= self.config.heartbeat_ticks {
                    self.heartbeat_elapsed = 0;
                    self.heartbeat(out);
                }
                if !self.has_quorum_contact() {
                    let term = self.hard.term;
                    self.become_follower(term, None, out);
                }
            }
            Role::Follower | Role::Candidate if !self.is_member() => {
                // Not a member (yet, or any longer): it follows, and never campaigns; one
                // repairing damage still asks where the others' logs end.
                if self.hard.repair.is_none() {
                    self.election_elapsed = 0;
                } else {
                    self.election_elapsed += 1;
                    if self.election_elapsed >= self.election_timeout {
                        self.reset_election_timer();
                        self.ask_log_ends(out);
                    }
                }
            }
            Role::Follower | Role::Candidate => {
                self.election_elapsed += 1;
                if self.election_elapsed >= self.election_timeout {
                    self.ask_log_ends(out);
                    // A replica repairing damage campaigns too, but never leads (it may lack
                    // entries it acknowledged): its vote requests tell the others where its
                    // log ends, as theirs tell it where theirs end.
                    if self.config.pre_vote {
                        self.ask_pre_votes(out);
                    } else {
                        self.campaign(out);
                    }
                }
            }
        }
    }

    fn on_message(&mut self, from: NodeId, message: PeerMessage, out: &mut Vec<Action>) {
        // Members and nodes that are none (yet, or any longer) are heard alike: a node joins
        // by following a leader, and a vote or acknowledgement counts only from members.
        if from == self.config.id {
            return;
        }
        // The connection says who sent the message; a message claiming someone else, or an
        // append whose entries are not the consecutive run after `prev_index`, is dropped.
        let (term, sender) = term_and_sender(&message);
        if sender != from {
            return;
        }
        self.hear_term(from, &message, out);
        // A log end changes nothing but what a repairing replica knows, whatever its term.
        if let PeerMessage::LogEnd(end) = message {
            self.on_log_end(end, out);
            return;
        }
        // A pre-vote request names a term the candidate does not hold yet: it changes nothing
        // here, whatever its term.
        if let PeerMessage::Vote(vote) = &message
            && vote.pre
        {
            let vote = vote.clone();
            self.on_pre_vote(vote, out);
            return;
        }
        if let PeerMessage::Append(m) = &message
            && !m
                .entries
                .iter()
                .enumerate()
                .all(|(k, e)| e.index().0 == m.prev_index.0 + 1 + k as u64)
        {
            return;
        }
        if term > self.hard.term {
            if let PeerMessage::Vote(vote) = &message
                && self.leader_is_fresh()
            {
                self.answer_vote(vote.candidate, false, false, out);
                return;
            }
            let leader = match &message {
                PeerMessage::Append(m) => Some(m.leader),
                PeerMessage::Snapshot(m) => Some(m.leader),
                PeerMessage::ReadCheck(m) => Some(m.leader),
                PeerMessage::AppendReply(_)
                | PeerMessage::ReadCheckReply(_)
                | PeerMessage::Vote(_)
                | PeerMessage::VoteReply(_)
                | PeerMessage::LogEnd(_) => None,
            };
            self.become_follower(term, leader, out);
        }
        match message {
            PeerMessage::Append(m) => self.on_append(m, out),
            PeerMessage::AppendReply(m) => self.on_append_reply(m, out),
            PeerMessage::Vote(m) => self.on_vote(m, out),
            PeerMessage::VoteReply(m) if m.pre => self.on_pre_vote_reply(m, out),
            PeerMessage::VoteReply(m) => self.on_vote_reply(m, out),
            PeerMessage::Snapshot(m) => self.on_snapshot_chunk(m, out),
            PeerMessage::ReadCheck(m) => self.on_read_check(m, out),
            PeerMessage::ReadCheckReply(m) => self.on_read_check_reply(m, out),
            PeerMessage::LogEnd(_) => unreachable!("handled before any term is taken"),
        }
    }

    fn on_snapshot_chunk(&mut self, chunk: SnapshotChunk, out: &mut Vec<Action>) {
        // A stale chunk is answered like a stale append, so that a leader of an old term
        // learns the newer one and steps down (a leader sending only a snapshot sends
        // nothing else).
        if !self.heard_from_leader(chunk.term, chunk.leader, out) {
            return;
        }
        if chunk.index > self.commit {
            out.push(Action::StoreSnapshotChunk(chunk));
        } else if chunk.offset == 0 {
            // It holds nothing this replica lacks: tell the leader where the log matches.
            let index = self.commit.min(self.durable);
            self.reply_append(AppendOutcome::Matched { index }, out);
        }
    }

    fn on_installed(
        &mut self,
        base: LogBase,
        applied: AppliedHash,
        members: Option<Members>,
        out: &mut Vec<Action>,
    ) {
        assert_eq!(base.index, applied.index, "the snapshot's entry and state");
        if base.index <= self.commit {
            return;
        }
        let before = self.members().clone();
        let old_base = self.log.base().index;
        if self.holds(base) {
            // The log continues the snapshot (the hashes chain): keep what follows it.
            self.log.compact(base.index);
            self.durable = self.durable.max(base.index);
            self.configs.committed(base.index);
        } else {
            self.log.reset(base);
            self.durable = base.index;
            // No members entry preceded the snapshot: the cluster's first members were in force.
            let first = members.is_none();
            let members = members.unwrap_or_else(|| self.first_members());
            self.configs.reset(base.index, members, first);
            self.forget_first_members(base.index);
        }
        self.members_maybe_changed(&before, out);
        assert!(
            self.log.base().index == base.index && base.index > old_base,
            "an installed snapshot of {} left the base at {} (was {old_base})",
            base.index,
            self.log.base().index
        );
        self.commit = base.index;
        self.confirmed = self.confirmed.max(base.index);
        self.applied = Some(applied);
        self.history.clear();
        self.history.push_back(applied);
        self.pending_checks.clear();
        self.repaired(out);
        if self.role == Role::Follower {
            self.reply_append(AppendOutcome::Matched { index: base.index }, out);
        }
    }

    /// True when a vote request should be ignored: this replica leads, or heard from a leader
    /// within the minimum election timeout.
    fn leader_is_fresh(&self) -> bool {
        match self.role {
            Role::Leader => true,
            Role::Follower | Role::Candidate => self.last_leader_contact.is_some_and(|tick| {
                self.leader.is_some()
                    && self.ticks - tick < u64::from(self.config.election_ticks_min)
            }),
        }
    }

    fn has_quorum_contact(&self) -> bool {
        let window = u64::from(self.config.election_ticks_min);
        let heard = self
            .peers
            .values()
            .filter(|p| self.ticks - p.last_heard < window)
            .count();
        heard + usize::from(self.is_member()) >= self.quorum()
    }

    fn reset_election_timer(&mut self) {
        self.election_elapsed = 0;
        let min = self.config.election_ticks_min;
        self.election_timeout = min + self.rng.below(u64::from(min)) as u32;
    }

    fn set_role(&mut self, role: Role, leader: Option<NodeId>, out: &mut Vec<Action>) {
        assert_eq!(
            role == Role::Leader,
            leader == Some(self.config.id),
            "role {role:?} with leader {leader:?}"
        );
        if self.role != role || self.leader != leader {
            self.role = role;
            self.leader = leader;
            out.push(Action::RoleChanged {
                role,
                term: self.hard.term,
                leader,
            });
        }
    }

    fn become_follower(&mut self, term: Term, leader: Option<NodeId>, out: &mut Vec<Action>) {
        assert!(
            term >= self.hard.term,
            "following term {term} from term {}",
            self.hard.term
        );
        assert_ne!(leader, Some(self.config.id), "a follower of itself");
        if term > self.hard.term {
            self.hard = HardState {
                term,
                voted_for: None,
                repair: self.hard.repair,
                votes_lost: self.lost_votes_at(term),
                members: self.hard.members,
                first_members: self.hard.first_members,
            };
            out.push(Action::PersistHardState(self.hard));
            self.confirmed = EntryIndex::ZERO;
            self.acknowledged = EntryIndex::ZERO;
        }
        self.peers.clear();
        self.votes.clear();
        self.pre_votes = None;
        self.reset_election_timer();
        self.set_role(Role::Follower, leader, out);
    }

    fn campaign(&mut self, out: &mut Vec<Action>) {
        if self.hard.votes_lost == Some(LostVotes::Unknown) && self.members().len() > 1 {
            // It may have voted in any term the others hold. Pre-votes bind nobody, and their
            // answers tell it the others' terms; one round per election timeout.
            self.reset_election_timer();
            self.pre_votes = None;
            self.request_votes(Term(self.hard.term.0 + 1), true, out);
            return;
        }
        let above = match self.hard.votes_lost {
            Some(LostVotes::Through(lost)) => self.hard.term.max(lost),
            Some(LostVotes::Unknown) | None => self.hard.term,
        };
        let term = Term(above.0 + 1);
        assert_ne!(self.role, Role::Leader, "a leader campaigns");
        self.hard = HardState {
            term,
            voted_for: Some(self.config.id),
            repair: self.hard.repair,
            votes_lost: None,
            members: self.hard.members,
            first_members: self.hard.first_members,
        };
        out.push(Action::PersistHardState(self.hard));
        // Its vote for itself is recorded like any other, before its requests leave.
        self.vouch_known(self.config.id, term, out);
        self.votes = vec![self.config.id];
        self.pre_votes = None;
        self.confirmed = EntryIndex::ZERO;
        self.acknowledged = EntryIndex::ZERO;
        self.reset_election_timer();
        self.set_role(Role::Candidate, None, out);
        if self.members_among(&self.votes) >= self.quorum() && self.hard.repair.is_none() {
            self.become_leader(out);
            return;
        }
        self.request_votes(self.hard.term, false, out);
    }

    /// Asks every other replica for its vote (or pre-vote) in `term`, with where this log ends.
    fn request_votes(&self, term: Term, pre: bool, out: &mut Vec<Action>) {
        let vote = Vote {
            term,
            pre,
            candidate: self.config.id,
            last_index: self.log.last_index(),
            last_term: self.log.last_term(),
        };
        for to in self.others() {
            out.push(Action::Send {
                to,
                message: PeerMessage::Vote(vote.clone()),
            });
        }
    }

    fn become_leader(&mut self, out: &mut Vec<Action>) {
        assert_eq!(
            self.role,
            Role::Candidate,
            "only a candidate becomes leader"
        );
        assert_eq!(
            self.hard.voted_for,
            Some(self.config.id),
            "a leader of term {} that did not vote for itself",
            self.hard.term
        );
        assert!(
            self.hard.repair.is_none() && self.hard.votes_lost.is_none(),
            "a replica that may have lost entries or votes leads"
        );
        // A pre-vote round its campaign's timer opened ends here: a late grant must not make
        // the new leader campaign again.
        self.pre_votes = None;
        self.peers.clear();
        self.follow_members();
        self.heartbeat_elapsed = 0;
        self.begin_read_rounds();
        self.set_role(Role::Leader, Some(self.config.id), out);
        // A no-op of the new term commits the entries of earlier terms (Raft section 5.4.2).
        self.propose(EntryKind::Noop, 0, Bytes::new(), out)
            .expect("just became leader");
    }

    fn on_vote(&mut self, vote: Vote, out: &mut Vec<Action>) {
        let up_to_date = self.log_up_to_date(&vote, out);
        let free = self.hard.voted_for.is_none_or(|v| v == vote.candidate);
        let granted = vote.term == self.hard.term
            && free
            && up_to_date
            && self.role == Role::Follower
            && self.may_vote_in(vote.term);
        if granted && self.hard.voted_for.is_none() {
            self.hard.voted_for = Some(vote.candidate);
            out.push(Action::PersistHardState(self.hard));
        }
        if granted {
            self.vouch_known(vote.candidate, vote.term, out);
            // Never two candidates in one term: the vote granted is the one kept.
            assert_eq!(
                self.hard.voted_for,
                Some(vote.candidate),
                "a second vote in term {}",
                self.hard.term
            );
            self.reset_election_timer();
        }
        self.answer_vote(vote.candidate, false, granted, out);
    }

    /// False for a term in which this replica may have cast a vote it lost. Whether this
    /// replica is a member in its own log does not matter: a candidate counts only the votes
    /// of its own members, and its members and any other candidate's overlap (one change at a
    /// time), so one vote per term keeps one leader per term whoever casts it (Raft's thesis,
    /// 4.2.1). A member re-added while it was cut off must vote although its log still ends in
    /// the list that removed it: seed 113971 of the simulator found a cluster where no
    /// candidate could win without it. A node that joins with an empty log still votes for
    /// nobody whose log has entries (`log_up_to_date`).
    fn may_vote_in(&self, term: Term) -> bool {
        match self.hard.votes_lost {
            None => true,
            Some(LostVotes::Unknown) => false,
            Some(LostVotes::Through(lost)) => term > lost,
        }
    }

    /// True when this replica may vouch for the leader of its term: tell it that it holds
    /// entries beyond the commit, or confirm its leadership for a read. Not while its lost votes
    /// are unknown, nor in a term below their bound. Its hard state was lost, and with it the
    /// term it had reached: it may have acknowledged entries in a later term than its log
    /// still shows (damage can hide every entry of that term), for a leader that committed
    /// them. A leader of an older term, cut off meanwhile, could then count it towards a
    /// majority for entries that replace them, or for a read that misses them. Once it has
    /// heard every other replica's term, the highest bounds any term it acknowledged in
    /// (`hear_term`): terms only grow.
    pub(super) fn vouches(&self) -> bool {
        match self.hard.votes_lost {
            None => true,
            Some(LostVotes::Unknown) => false,
            Some(LostVotes::Through(lost)) => self.hard.term >= lost,
        }
    }

    /// How far this replica may acknowledge a log it holds through `index`: no further than
    /// the commit it knows unless it [`vouches`](Self::vouches) for its leader. Committed
    /// entries stay committed whoever asks, so acknowledging them is always safe.
    fn acknowledgeable(&self, index: EntryIndex) -> EntryIndex {
        match self.vouches() {
            true => index,
            false => index.min(self.commit),
        }
    }

    /// What is left of the lost votes in `term`: nothing once it is above every lost one.
    fn lost_votes_at(&self, term: Term) -> Option<LostVotes> {
        match self.hard.votes_lost {
            Some(LostVotes::Through(lost)) if term > lost => None,
            other => other,
        }
    }

    /// Notes the term `message` shows its sender `from` holds; once every other replica has
    /// been heard, lost votes of unknown terms are bounded by the highest term heard (made
    /// durable). Only messages that travel in order with the vote requests count: a vote
    /// request that won a lost vote reached the old process, so what the new one gets behind
    /// it on that connection is newer. Append replies do not count: acknowledgements travel
    /// on connections of their own and may have been built before the loss.
    fn hear_term(&mut self, from: NodeId, message: &PeerMessage, out: &mut Vec<Action>) {
        if self.hard.votes_lost != Some(LostVotes::Unknown) {
            return;
        }
        let term = match message {
            PeerMessage::AppendReply(_) => return,
            // A pre-vote request names the term after the candidate's own.
            PeerMessage::Vote(vote) if vote.pre => Term(vote.term.0.saturating_sub(1)),
            PeerMessage::Vote(vote) => vote.term,
            PeerMessage::Append(m) => m.term,
            PeerMessage::VoteReply(m) => m.term,
            PeerMessage::Snapshot(m) => m.term,
            PeerMessage::LogEnd(m) => m.term,
            PeerMessage::ReadCheck(m) => m.term,
            PeerMessage::ReadCheckReply(m) => m.term,
        };
        let heard = self.heard_terms.entry(from).or_insert(term);
        *heard = (*heard).max(term);
        // A replica that knows no other replica does not know whom to hear from.
        let Some(judges) = self.term_judges() else {
            return;
        };
        // A judge not heard is passed once the bound reaches its record (`judge_passed`):
        // the bound is at least the highest term heard and its own record (which is at least
        // the record's floor), so a node whose own campaign went past every term the others
        // hold still passes a judge that never answers.
        let highest = self.heard_terms.values().copied().max().unwrap_or_default();
        let reached = highest.max(self.own_record());
        let heard_or_passed =
            |n: &NodeId| self.heard_terms.contains_key(n) || self.judge_passed(*n, reached);
        if !judges.iter().all(heard_or_passed) {
            return;
        }
        // Its own votes for itself are no judge's to show: a judge passed may be the one that
        // holds the term it campaigned in. The record bounds them.
        let bound = highest.max(self.hard.term).max(self.own_record());
        self.hard.votes_lost = Some(LostVotes::Through(bound));
        self.found_known(bound, out);
        if bound > self.hard.term {
            // Below the bound it vouches for no leader (`vouches`): it takes the bound, so
            // that a leader of an older term hears of it and steps down, rather than lead on
            // with nobody able to unseat it (its followers would keep refusing pre-votes).
            self.become_follower(bound, None, out);
        } else {
            out.push(Action::PersistHardState(self.hard));
        }
    }

    /// Answers a vote (or pre-vote) request of `candidate`, with this replica's term.
    fn answer_vote(&self, candidate: NodeId, pre: bool, granted: bool, out: &mut Vec<Action>) {
        let reply = VoteReply {
            term: self.hard.term,
            pre,
            from: self.config.id,
            granted,
        };
        out.push(Action::Send {
            to: candidate,
            message: PeerMessage::VoteReply(reply),
        });
    }

    /// True when `vote`'s candidate's log is up to date enough for this replica's vote (or
    /// pre-vote); notes where the candidate's log ends.
    fn log_up_to_date(&mut self, vote: &Vote, out: &mut Vec<Action>) -> bool {
        let theirs = (vote.last_term, vote.last_index);
        self.log_ends.insert(vote.candidate, theirs);
        self.release_unheld_repair(out);
        let mut up_to_date = theirs >= (self.log.last_term(), self.log.last_index());
        if let Some(repair) = self.hard.repair {
            // A replica repairing damage may have lost committed entries. It votes for a
            // candidate at least as up to date as the log it had before the damage, or as
            // every other replica's log heard since it started: a committed entry it lost is
            // on another replica (a majority holds it), and a log at least as up to date as one
            // holding a committed entry holds it too.
            let as_before = theirs >= (repair.term, repair.index);
            // (Never a candidate that lacks an entry the damage showed committed: when the
            // others lack it too, every copy is lost, which `release_unheld_repair` reports.)
            // (The others are the members in force and those the hard state kept: the log may
            // have lost the entry that changed them.)
            let as_the_others = vote.last_index >= repair.committed
                && self.judges().is_some_and(|judges| {
                    judges
                        .iter()
                        .filter(|&&n| n != vote.candidate)
                        .all(|n| self.log_ends.get(n).is_some_and(|&end| theirs >= end))
                });
            up_to_date = up_to_date && (as_before || as_the_others);
        }
        // A replica with an empty log votes only while the whole cluster is new: once entries
        // exist, an empty log means a lost data directory, whose votes may already be cast.
        // (A log emptied by damage is known for what it was: its hard state survived.)
        up_to_date
            && (self.log.last_index().0 > 0 || self.hard.repair.is_some() || vote.last_index.0 == 0)
    }

    fn on_vote_reply(&mut self, reply: VoteReply, out: &mut Vec<Action>) {
        if self.role != Role::Candidate || reply.term != self.hard.term || !reply.granted {
            return;
        }
        if !self.votes.contains(&reply.from) {
            self.votes.push(reply.from);
        }
        if self.members_among(&self.votes) >= self.quorum() && self.hard.repair.is_none() {
            self.become_leader(out);
        }
    }

    fn reply_append(&mut self, outcome: AppendOutcome, out: &mut Vec<Action>) {
        let Some(leader) = self.leader else { return };
        let mut outcome = outcome;
        if let AppendOutcome::Matched { index } = outcome {
            // An acknowledgement vouches for its leader: recorded before it leaves (a write
            // only the first time in a term).
            self.vouch_known(leader, self.hard.term, out);
            // Less than it holds, when it may acknowledge no more: still an answer, so the
            // leader keeps sending and counts it as heard.
            let index = self.acknowledgeable(index);
            outcome = AppendOutcome::Matched { index };
            self.acknowledged = self.acknowledged.max(index);
        }
        let reply = AppendReply {
            term: self.hard.term,
            from: self.config.id,
            outcome,
            applied: self.applied,
        };
        out.push(Action::Send {
            to: leader,
            message: PeerMessage::AppendReply(reply),
        });
    }

    /// A message from `leader` of `term`: refused with this replica's term when stale (false);
    /// otherwise this replica follows it and its election timer restarts (true).
    fn heard_from_leader(&mut self, term: Term, leader: NodeId, out: &mut Vec<Action>) -> bool {
        if term < self.hard.term {
            self.refuse_stale(leader, out);
            return false;
        }
        if self.role != Role::Follower || self.leader != Some(leader) {
            self.become_follower(term, Some(leader), out);
        }
        self.election_elapsed = 0;
        self.last_leader_contact = Some(self.ticks);
        self.pre_votes = None;
        // Recorded before any answer to it leaves: an acknowledgement vouches for it.
        self.vouch_known(leader, self.hard.term, out);
        true
    }

    /// Answers a leader of an older term with this replica's term.
    fn refuse_stale(&mut self, leader: NodeId, out: &mut Vec<Action>) {
        let reply = AppendReply {
            term: self.hard.term,
            from: self.config.id,
            outcome: AppendOutcome::Conflict {
                hint: self.log.last_index(),
            },
            applied: self.applied,
        };
        out.push(Action::Send {
            to: leader,
            message: PeerMessage::AppendReply(reply),
        });
    }

    fn on_append(&mut self, append: Append, out: &mut Vec<Action>) {
        if !self.heard_from_leader(append.term, append.leader, out) {
            return;
        }
        self.leader_commit = self.leader_commit.max(append.commit);
        self.check_remote_hash(append.leader, append.applied, out);
        let mut append = append;
        let base = self.log.base();
        if append.prev_index < base.index {
            // A snapshot here covers the start: those entries are committed, so they match.
            let skip = (base.index.0 - append.prev_index.0).min(append.entries.len() as u64);
            append.entries.drain(..skip as usize);
            append.prev_index = EntryIndex(append.prev_index.0 + skip);
            if append.prev_index < base.index {
                self.confirmed = self.confirmed.max(base.index);
                let matched = self.durable.min(self.confirmed);
                self.reply_append(AppendOutcome::Matched { index: matched }, out);
                return;
            }
            append.prev_term = base.term;
        }
        if let Some(hint) = self.mismatch_hint(append.prev_index, append.prev_term) {
            self.reply_append(AppendOutcome::Conflict { hint }, out);
            return;
        }
        let covered = EntryIndex(append.prev_index.0 + append.entries.len() as u64);
        let persisting = match self.take_entries(append.entries, out) {
            Ok(persisting) => persisting,
            Err(hint) => {
                self.reply_append(AppendOutcome::Conflict { hint }, out);
                return;
            }
        };
        self.confirmed = self.confirmed.max(covered);
        if persisting && self.acknowledgeable(covered) == covered {
            // The acknowledgement of what this append covered goes out from the WAL, right
            // after the fsync that makes it durable (and not before: the WAL works in order).
            let reply = AppendReply {
                term: self.hard.term,
                from: self.config.id,
                outcome: AppendOutcome::Matched { index: covered },
                applied: self.applied,
            };
            assert!(
                self.known.record.recorded(append.leader) >= self.hard.term,
                "acknowledging {} in term {} above its record",
                append.leader,
                self.hard.term
            );
            out.push(Action::AckWhenDurable {
                to: append.leader,
                reply,
            });
            self.acknowledged = self.acknowledged.max(covered);
        }
        let commit = append.commit.min(covered);
        if commit > self.commit {
            self.raise_commit(commit, out);
        }
        // Every append that brings nothing new to persist is answered at once, with what is
        // durable so far: a heartbeat, and a resend of entries still on their way to disk (the
        // leader's quorum check counts on the answer; a leader resends what a follower on a
        // slow disk has not acknowledged yet, and used to hear nothing, and step down). New
        // entries are acknowledged once durable, here or when the WAL reports them.
        let matched = self.durable.min(self.confirmed);
        if !persisting || matched >= covered || matched > self.acknowledged {
            self.reply_append(AppendOutcome::Matched { index: matched }, out);
        }
    }

    /// `None` when the log holds `prev_index` with `prev_term`; otherwise an index at or below
    /// which the logs may match (the end of the log, or the entry before the conflicting term).
    fn mismatch_hint(&self, prev_index: EntryIndex, prev_term: Term) -> Option<EntryIndex> {
        if prev_index > self.log.last_index() {
            return Some(self.log.last_index());
        }
        let term = self.log.term_at(prev_index).expect("index within the log");
        if term == prev_term {
            return None;
        }
        let mut hint = prev_index.prev();
        while hint > self.commit && self.log.term_at(hint) == Some(term) {
            hint = hint.prev();
        }
        Some(hint)
    }

    /// Appends the entries the log lacks, truncating a conflicting suffix first; true when it
    /// persists any. Fails with a hint when an entry does not chain to the one before it. The
    /// members in force follow the log.
    fn take_entries(
        &mut self,
        entries: Vec<Entry>,
        out: &mut Vec<Action>,
    ) -> Result<bool, EntryIndex> {
        let members_touched =
            self.configs.has_pending() || entries.iter().any(|e| e.kind() == EntryKind::Members);
        if !members_touched {
            return self.take_entries_unchecked(entries, out);
        }
        let before = self.members().clone();
        let taken = self.take_entries_unchecked(entries, out);
        self.members_maybe_changed(&before, out);
        taken
    }

    fn take_entries_unchecked(
        &mut self,
        entries: Vec<Entry>,
        out: &mut Vec<Action>,
    ) -> Result<bool, EntryIndex> {
        let mut fresh = Vec::new();
        for entry in entries {
            let index = entry.index();
            if index <= self.log.last_index() {
                if self.log.term_at(index) == Some(entry.term()) {
                    continue;
                }
                if index <= self.commit {
                    // A correct leader never contradicts a committed entry: refuse, change nothing.
                    self.persist(fresh, out);
                    return Err(self.commit);
                }
                assert!(
                    index > self.commit,
                    "truncating from {index}, at or below the commit {}",
                    self.commit
                );
                self.log.truncate_from(index);
                self.configs.truncated(index);
                self.durable = self.durable.min(index.prev());
                out.push(Action::Truncate(index));
            }
            if index != self.log.last_index().next() || entry.verify(&self.log.last_hash()).is_err()
            {
                self.persist(fresh, out);
                return Err(self.log.last_index().min(index.prev()));
            }
            self.log.append(entry.clone());
            self.configs.appended(&entry);
            fresh.push(entry);
        }
        let persisting = !fresh.is_empty();
        self.persist(fresh, out);
        Ok(persisting)
    }

    fn persist(&mut self, entries: Vec<Entry>, out: &mut Vec<Action>) {
        if !entries.is_empty() {
            out.push(Action::Persist(entries));
        }
    }

    fn on_persisted(&mut self, index: EntryIndex, term: Term, out: &mut Vec<Action>) {
        if index <= self.durable || self.log.term_at(index) != Some(term) {
            return;
        }
        self.durable = index;
        self.repaired(out);
        match self.role {
            Role::Leader => self.advance_commit(out),
            Role::Follower => {
                let matched = self.durable.min(self.confirmed);
                if matched > self.acknowledged {
                    self.reply_append(AppendOutcome::Matched { index: matched }, out);
                }
            }
            Role::Candidate => {}
        }
    }

    fn on_append_reply(&mut self, reply: AppendReply, out: &mut Vec<Action>) {
        if self.role != Role::Leader || reply.term != self.hard.term {
            return;
        }
        self.check_remote_hash(reply.from, reply.applied, out);
        let last = self.log.last_index();
        let Some(progress) = self.peers.get_mut(&reply.from) else {
            return;
        };
        progress.last_heard = self.ticks;
        match reply.outcome {
            AppendOutcome::Matched { index } => {
                // An answer below what it acknowledged before (entries it holds but lost the
                // durability of, behind a full disk after a rebuild) is no reason to send at
                // once: answered at once again, the two would trade messages without end. The
                // next heartbeat sends what it lacks.
                let lagging = index < progress.matched;
                progress.matched = progress.matched.max(index.min(last));
                if progress
                    .snapshot
                    .is_some_and(|(sent, _)| progress.matched >= sent)
                {
                    progress.snapshot = None;
                }
                progress.next = progress.next.max(progress.matched.next());
                assert!(
                    progress.matched <= last && progress.next <= last.next(),
                    "peer {}: match {} next {} past the log's last {last}",
                    reply.from,
                    progress.matched,
                    progress.next
                );
                let behind = progress.next <= last && !progress.loading && !lagging;
                self.advance_commit(out);
                if behind {
                    self.send_append(reply.from, out);
                }
            }
            AppendOutcome::Conflict { hint } => {
                if hint < progress.matched {
                    // It lost entries it had acknowledged (its data directory was wiped): what
                    // it holds now is all that counts.
                    progress.matched = hint;
                }
                progress.next = hint.next().max(progress.matched.next()).min(last.next());
                assert!(
                    progress.matched < progress.next,
                    "peer {}: match {} not below next {}",
                    reply.from,
                    progress.matched,
                    progress.next
                );
                if !progress.loading {
                    self.send_append(reply.from, out);
                }
            }
        }
    }

    fn advance_commit(&mut self, out: &mut Vec<Action>) {
        let mut matched: Vec<EntryIndex> = self.peers.values().map(|p| p.matched).collect();
        if self.is_member() {
            matched.push(self.durable);
        }
        let quorum = quorum_index(&mut matched);
        if quorum > self.commit && self.log.term_at(quorum) == Some(self.hard.term) {
            self.raise_commit(quorum, out);
        }
    }

    /// Moves the commit index forward to `commit`, an index the log holds, and settles the
    /// member lists up to it.
    fn raise_commit(&mut self, commit: EntryIndex, out: &mut Vec<Action>) {
        assert!(
            commit > self.commit && commit <= self.log.last_index(),
            "commit moving from {} to {commit} (last {})",
            self.commit,
            self.log.last_index()
        );
        self.commit = commit;
        out.push(Action::Commit(commit));
        self.settle_members(out);
    }

    fn heartbeat(&mut self, out: &mut Vec<Action>) {
        let window = u64::from(self.config.heartbeat_ticks);
        let peers: Vec<NodeId> = self.peers.keys().copied().collect();
        for peer in peers {
            let progress = self.peers.get_mut(&peer).expect("listed");
            // Silence for a whole heartbeat: entries sent since the last match may be lost.
            if self.ticks - progress.last_heard >= window && !progress.loading {
                progress.next = progress.matched.next();
            }
            if progress.loading {
                self.send_matched_heartbeat(peer, out);
            } else {
                self.send_append(peer, out);
            }
            if self.peers[&peer].snapshot.is_some() {
                let base = self.log.base();
                self.send_heartbeat(peer, base.index, base.term, out);
            }
        }
    }

    /// A heartbeat for a follower whose entries are being read back from the WAL (a read
    /// that may wait behind a full disk): an empty append after what it matched, or at the
    /// log's base when that left the log.
    fn send_matched_heartbeat(&mut self, peer: NodeId, out: &mut Vec<Action>) {
        let matched = self.peers[&peer].matched;
        let base = self.log.base();
        match self.log.term_at(matched) {
            Some(term) if matched >= base.index => self.send_heartbeat(peer, matched, term, out),
            Some(_) | None => self.send_heartbeat(peer, base.index, base.term, out),
        }
    }

    /// An empty append after `prev_index`. A follower waiting for a snapshot gets one at the
    /// log's base, which it cannot match yet (it answers with a conflict, and the snapshot is
    /// not sent again for that). Without heartbeats the follower hears nothing from its
    /// leader while the snapshot travels or its entries are read, times out and asks for
    /// votes.
    fn send_heartbeat(
        &mut self,
        peer: NodeId,
        prev_index: EntryIndex,
        prev_term: Term,
        out: &mut Vec<Action>,
    ) {
        let append = Append {
            term: self.hard.term,
            leader: self.config.id,
            prev_index,
            prev_term,
            entries: Vec::new(),
            commit: self.commit,
            applied: self.applied,
        };
        out.push(Action::Send {
            to: peer,
            message: PeerMessage::Append(append),
        });
    }

    /// Sends `peer` the entries from its `next` index (as many as one message takes), or an
    /// empty append; asks for a WAL read when those entries left memory.
    fn send_append(&mut self, peer: NodeId, out: &mut Vec<Action>) {
        let last = self.log.last_index();
        let progress = self.peers.get_mut(&peer).expect("a peer of the leader");
        let next = progress.next;
        if next <= self.log.base().index {
            // What it needs is only in the snapshot.
            let due = progress
                .snapshot
                .is_none_or(|(_, sent)| self.ticks - sent >= SNAPSHOT_RESEND_TICKS);
            if due {
                progress.snapshot = Some((self.log.base().index, self.ticks));
                out.push(Action::SendSnapshot { peer });
            }
            return;
        }
        let limit = EntryIndex(last.0.min(progress.matched.0 + PEER_INFLIGHT_ENTRIES_MAX));
        let mut entries = Vec::new();
        let mut index = next;
        while index <= limit {
            let Some(entry) = self.log.entry(index) else {
                break;
            };
            entries.push(entry.clone());
            index = index.next();
            if !fits_append(&entries) {
                entries.pop();
                break;
            }
        }
        if entries.is_empty() && next <= last && next < self.log.window_start() {
            let to = EntryIndex((next.0 + APPEND_ENTRIES_MAX as u64 - 1).min(last.0));
            self.peers.get_mut(&peer).expect("listed").loading = true;
            out.push(Action::Load {
                peer,
                from: next,
                to,
            });
            return;
        }
        self.send_entries(peer, next, entries, out);
    }

    fn send_entries(
        &mut self,
        peer: NodeId,
        next: EntryIndex,
        entries: Vec<Entry>,
        out: &mut Vec<Action>,
    ) {
        let prev_index = next.prev();
        let prev_term = self
            .log
            .term_at(prev_index)
            .expect("the leader holds every index below next");
        // Walking the entries costs time on the replication path: debug builds only.
        debug_assert!(
            entries
                .iter()
                .enumerate()
                .all(|(k, e)| e.index().0 == next.0 + k as u64),
            "entries sent to {peer} from {next} are not consecutive"
        );
        let progress = self.peers.get_mut(&peer).expect("a peer of the leader");
        progress.next = EntryIndex(next.0 + entries.len() as u64);
        assert!(
            progress.next <= self.log.last_index().next(),
            "sent {peer} entries past the log's last"
        );
        let append = Append {
            term: self.hard.term,
            leader: self.config.id,
            prev_index,
            prev_term,
            entries,
            commit: self.commit,
            applied: self.applied,
        };
        out.push(Action::Send {
            to: peer,
            message: PeerMessage::Append(append),
        });
    }

    fn on_loaded(&mut self, peer: NodeId, entries: Vec<Entry>, out: &mut Vec<Action>) {
        if self.role != Role::Leader {
            return;
        }
        let Some(progress) = self.peers.get_mut(&peer) else {
            return;
        };
        progress.loading = false;
        let next = progress.next;
        let usable = entries.first().is_some_and(|e| e.index() == next)
            && entries
                .iter()
                .all(|e| self.log.term_at(e.index()) == Some(e.term()));
        if usable {
            let mut entries = entries;
            while !fits_append(&entries) {
                entries.pop();
            }
            self.send_entries(peer, next, entries, out);
        } else {
            self.send_append(peer, out);
        }
    }

    fn on_applied(&mut self, applied: AppliedHash, out: &mut Vec<Action>) {
        assert!(
            applied.index <= self.commit,
            "only committed entries are applied"
        );
        let before = self.applied.map_or(EntryIndex::ZERO, |a| a.index);
        assert_eq!(
            applied.index,
            before.next(),
            "entries are applied one after the other"
        );
        self.applied = Some(applied);
        self.forget_first_members(applied.index);
        if self.history.len() == HASH_HISTORY_ENTRIES {
            self.history.pop_front();
        }
        self.history.push_back(applied);
        let due: Vec<(NodeId, AppliedHash)> = self
            .pending_checks
            .iter()
            .filter(|(_, h)| h.index <= applied.index)
            .map(|(n, h)| (*n, *h))
            .collect();
        for (node, remote) in due {
            self.pending_checks.remove(&node);
            self.check_remote_hash(node, Some(remote), out);
        }
        let replicated = self
            .peers
            .values()
            .map(|p| p.matched)
            .min()
            .unwrap_or(applied.index);
        self.log.trim(replicated.min(applied.index), applied.index);
    }

    /// Compares another replica's state hash with this one's at the same entry; remembers it
    /// for later when this replica has not applied that entry yet.
    fn check_remote_hash(
        &mut self,
        node: NodeId,
        remote: Option<AppliedHash>,
        out: &mut Vec<Action>,
    ) {
        let Some(remote) = remote else { return };
        if self.divergence.is_some() {
            return;
        }
        if self.applied.is_none_or(|a| a.index < remote.index) {
            self.pending_checks.insert(node, remote);
            return;
        }
        let Some(local) = self.history.iter().rev().find(|h| h.index == remote.index) else {
            return;
        };
        if local.hash != remote.hash {
            let divergence = Divergence {
                index: remote.index,
                local: (self.config.id, local.hash),
                remote: (node, remote.hash),
            };
            self.divergence = Some(divergence.clone());
            out.push(Action::Diverged(divergence));
        }
    }
}

/// The term a message carries and the node it says sent it.
fn term_and_sender(message: &PeerMessage) -> (Term, NodeId) {
    match message {
        PeerMessage::Append(m) => (m.term, m.leader),
        PeerMessage::AppendReply(m) => (m.term, m.from),
        PeerMessage::Vote(m) => (m.term, m.candidate),
        PeerMessage::VoteReply(m) => (m.term, m.from),
        PeerMessage::Snapshot(m) => (m.term, m.leader),
        PeerMessage::LogEnd(m) => (m.term, m.from),
        PeerMessage::ReadCheck(m) => (m.term, m.leader),
        PeerMessage::ReadCheckReply(m) => (m.term, m.from),
    }
}

/// True when one append message may carry `entries`: at most [`APPEND_ENTRIES_MAX`] of them and
/// [`APPEND_BYTES_MAX`] of payload, though always the first (one entry always fits a frame).
fn fits_append(entries: &[Entry]) -> bool {
    let bytes: usize = entries.iter().map(|e| e.payload.len()).sum();
    entries.len() <= 1 || (entries.len() <= APPEND_ENTRIES_MAX && bytes <= APPEND_BYTES_MAX)
}

#[cfg(test)]
mod tests;
