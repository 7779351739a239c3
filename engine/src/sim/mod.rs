//! The deterministic cluster simulator (feature `sim`), in the style of TigerBeetle's VOPR and
//! FoundationDB's simulation: three nodes' own protocol code ([`Replica`]: the consensus
//! core, the state machine, the batcher, admission, sessions, the snapshot policy, exactly
//! what `node::driver` runs) and clients running the client library's own retry logic
//! ([`crate::client::Requests`]) run in one thread from one seed, over a simulated network and
//! simulated disks, with crashes and restarts. Checkers look for violations of the invariants
//! I1-I10 after every event (see [`check`]).
//!
//! Everything that varies comes from one [`Rng`]: the same seed replays the same run, event for
//! event. Time is a counter of [`Time`] units; the product's storage code reads the clock only
//! to time its work and to name quarantine folders, which no decision depends on.
//!
//! What is simulated:
//! - the network: per-message delay, loss, duplication and reordering (by delay), partitions
//!   (both ways or one way) and clogged links (delays twenty times longer);
//! - the disk: each node's data directory on a [`crate::storage::SimDisk`], written and read
//!   by the product's own storage code (the WAL, the hard state, the snapshot writer's files,
//!   snapshot receiving); appends become durable when a simulated fsync completes, and
//!   acknowledgements wait for it; a crash keeps, of what was not yet durable, what the
//!   device draws (writes lost, or torn at page boundaries);
//! - crashes and restarts: a restarted node runs the product's recovery
//!   ([`crate::node::recovery::recover_on`]) over its disk: the WAL scan, the recovery plan,
//!   the snapshot choice, the replay of the committed log;
//! - damage at rest: bits flipped in a WAL segment (mostly the last), the newest snapshot or
//!   the hard state, found by the product's scans at restart: damaged entries are cut and
//!   repaired from the leader (`HardState::repair`), damaged snapshots passed over and
//!   quarantined; where that leaves no usable state (or the hard state is damaged), the
//!   operator rebuilds the node from the leader (`--rebuild-from-leader`, the product's
//!   code);
//! - fsync errors: the replica halts as the driver makes it, the process exits, and the
//!   operator restarts it;
//! - stopped processes, failing acknowledgement connections, and clients whose attempts time
//!   out early or are hedged at other nodes;
//! - pipelining clients: half of the seeds give each client 2 to `PIPELINE_REQUESTS_MAX`
//!   requests in flight, one lane each, as `Client::submit_pipelined` sends them, so that
//!   requests of one client arrive out of order and are answered "not yet".
//! - callers' keys: half of the seeds whose nodes all speak keys (about a third of all) send
//!   keyed runs inside some write requests, keys of a pool every client shares, mostly with
//!   the commands each was first sent with and sometimes with others, and now and then a key
//!   alone as request 1 of its own session (`sim/keys.rs`), so that one key reaches the cluster
//!   through several clients and copies.
//! - snapshots: taken a slice at a time while entries apply (copy-on-write), written by the
//!   product's snapshot files, logs compacted behind them, sent to a lagging follower in
//!   chunks and installed;
//!
//! - full disks: appends (and the WAL work behind them) wait until the disk has room, and
//!   the node refuses new requests meanwhile. The hard state and snapshot files are still
//!   written on a full disk (the real node halts when its hard state cannot be written).
//!
//! - damage on more than one node: one restart in four while another node still repairs
//!   also finds damage. When that takes every copy of a committed entry (no disk holds it
//!   in its log or under a snapshot), the loss is real, not a bug: the cluster may stop for
//!   good or go on without it, and the run stops checking (`copies_lost`,
//!   `rewritten_after_loss` in the report).
//!
//! Not simulated yet: a hard state lost while its node still repairs earlier damage (the
//! obligation is in it).

pub mod check;
mod clients;
mod disk;
mod faults;
mod keys;
mod network;
pub mod odds;
mod options;
mod snapshots;
mod storage;
mod swarm;
pub mod violation;

use crate::apply::{SESSION_RETENTION_S_DEFAULT, SESSIONS_MAX_DEFAULT, StateMachine};
use crate::core::{CoreConfig, ELECTION_TICKS_MIN_DEFAULT, HEARTBEAT_TICKS_DEFAULT, Recovered};
use crate::entry::Entry;
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{EntryIndex, NodeId, RequestNumber};
use crate::node::NodeError;
use crate::node::recovery::{RecoveryOptions, recover_on};
use crate::replica::{Halt, Io, Note, Replica, ReplicaConfig, SnapshotWrite, WalFailure, WalOp};
use crate::rng::Rng;
use crate::snapshot::{Intake, IntakeError, SnapshotFiles, snapshot_path};
use crate::state::State;
use crate::storage::journal::read_journal_on;
use crate::storage::{SimDisk, Storage};
use check::Checker;
use clients::{SimClient, Token, Window};
use disk::Disk;
use disk::SIM_WAL_SEGMENT_BYTES;
pub use faults::{FAULTS_UNITS_MAX, STALL_UNITS_MAX};
use net::message::AppliedHash;
use net::message::{ClientReply, PeerMessage, Read, Role, SnapshotChunk, SubmitKeyed};
use network::Links;
pub use options::{SimOptions, SimReport};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
pub use swarm::Swarm;
use violation::{Invariant, Violation};

/// Events between two whole checks of every node's own invariants (`Replica::check_invariants`,
/// `Wal::check_invariants`): they walk the in-memory log, the WAL's index, the sessions and the
/// tables, and hash the state's stream again, and after every event they made a seed 2.4 times
/// slower. After every other event the recent ones run (`Replica::check_recent_invariants`,
/// `Wal::check_recent_invariants`: the log window's end, the WAL's last segment, every check
/// that walks nothing).
pub const SIM_INVARIANTS_EVERY_EVENTS: u64 = 4;

/// Simulated time, in units of 100 microseconds.
pub type Time = u64;

/// Members a simulated cluster starts with (nodes 1 to 3).
pub const SIM_NODES: u8 = 3;
/// Nodes a seed with membership changes runs beside them, not members at first (started to
/// join), which changes add and remove (nodes 4 and 5).
pub const SIM_SPARES: u8 = 2;
/// Fewest and most members membership changes leave.
pub const SIM_MEMBERS_RANGE: (usize, usize) = (3, 5);
/// Time between two ticks of a node (1 ms).
pub const TICK_UNITS: Time = 10;
/// Time a client waits for an answer before it retries at another node (50 ms).
pub const CLIENT_TIMEOUT_UNITS: Time = 500;
/// The shortest and longest attempt timeouts of seeds whose clients retry fast enough to race
/// their own first attempt (2 ms and 30 ms).
pub const CLIENT_TIMEOUT_SHORT_UNITS: (Time, Time) = (20, 300);
/// Bytes of state each simulated node may hold.
pub const SIM_STATE_BYTES: u64 = 16 << 20;
/// Commands per entry the simulated leaders pack at most.
pub const SIM_ENTRY_COMMANDS_MAX: u32 = 16;
/// Entries a simulated leader keeps uncommitted at most.
pub const SIM_PIPELINE_ENTRIES_MAX: u64 = 4;
/// Events one run may take (a run takes about 11,000): past it, messages breed messages
/// faster than time passes, and the run stops with a liveness violation instead of hanging.
pub const SIM_EVENTS_MAX: u64 = 2_000_000;

/// Time the healed cluster gets at the end of a run to answer every client (10 s).
pub const SETTLE_UNITS: Time = 100_000;
/// Bytes of a snapshot chunk (small, so that a snapshot takes several).
pub const SIM_SNAPSHOT_CHUNK_BYTES: usize = 1024;
/// Slots a snapshot slice scans (small, so that entries apply between slices).
pub const SIM_SNAPSHOT_SLICE_SLOTS: usize = 4;
/// Bytes of a snapshot gathered before they go to the simulated writer (small, so that a
/// snapshot goes in several pieces).
pub const SIM_SNAPSHOT_WRITE_BYTES: usize = 256;
/// Time a node hears from a leader over a whole link before asking for votes is a violation
/// (four minimal election timeouts: 60 ms).
pub const QUIET_UNITS: Time = 4 * ELECTION_TICKS_MIN_DEFAULT as Time * TICK_UNITS;
/// A business the simulator drives: its handler, the requests its clients send, the
/// invariant its state must keep (I3 for the Bank), and optionally its own model of the
/// business: an independent oracle, sharing no code with the engine's apply, sessions or
/// codec, that the checker feeds the committed log and compares with the reference replica.
///
/// A workload needs only [`Workload::handler`], [`Workload::next_request`] and
/// [`Workload::check`]; the other methods default to a workload without a model (the
/// simulator still compares every replica with its reference replica, outcome by outcome
/// and hash by hash). A model catches what the reference cannot: a handler that is
/// deterministic but wrong.
pub trait Workload {
    /// The handler under test.
    type H: Handler;
    /// What the workload's checks find wrong ([`Workload::check`], and the model's
    /// [`Workload::logged`] and [`Workload::check_model`]): the simulator reports its message
    /// as a violation.
    type Error: std::error::Error;
    /// A fresh handler (one per node and one for the checker's reference replica).
    fn handler(&self) -> Self::H;
    /// The commands of a client's next request (1 to 1,024).
    fn next_request(&mut self, rng: &mut Rng) -> Vec<<Self::H as Handler>::Command>;
    /// Checks the committed state against what was observed (the business invariant).
    fn check(&self, state: &State) -> Result<(), Self::Error>;
    /// Takes note of a command's outcome, in the global order of the committed log; nothing
    /// by default.
    fn observe(&mut self, command: &<Self::H as Handler>::Command, outcome: &OutcomeOf<Self::H>) {
        let _ = (command, outcome);
    }
    /// The model takes in one request fragment as the committed log holds it (every copy, a
    /// retried request logged twice included, in log order): it decides by itself which of
    /// the commands apply (exactly once) and what each outputs, and says where the
    /// reference's answer differs (naming the entry, client, request and command). A
    /// fragment may carry keyed runs ([`check::Logged::runs`]; a third of the seeds send
    /// them, whatever the workload): a model decides each run's part within the commands the
    /// fragment's own session runs as request 1 of the run's key's session (one the model
    /// keeps like a client's), runs those commands only when that says so, and expects the
    /// request's answer as [`check::Answer::Keyed`], the keyed commands' `Ran`, `Expired` or
    /// `Reused`. A model that ignores the runs reports false violations in those seeds. A key
    /// may also come alone, as a plain request 1 of its session. Without a model (the
    /// default) it accepts every fragment.
    fn logged(&mut self, logged: check::Logged<'_, Self::H>) -> Result<(), Self::Error> {
        let _ = logged;
        Ok(())
    }
    /// Compares the model with the committed state after an entry; passes by default (no
    /// model).
    fn check_model(&self, state: &State) -> Result<(), Self::Error> {
        let _ = state;
        Ok(())
    }
}

/// A message between nodes and clients.
enum SimEvent {
    /// The node's clock ticks (the incarnation it was scheduled for: each process has one
    /// chain of ticks, and a tick of a crashed process must not start a second one in its
    /// restarted successor).
    Tick {
        node: NodeId,
        incarnation: u64,
    },
    Peer {
        to: NodeId,
        from: NodeId,
        /// The incarnation of `to` the message was sent to (a restarted process has new
        /// connections: nothing sent to the old one reaches it).
        incarnation: u64,
        message: PeerMessage,
    },
    Synced {
        node: NodeId,
        incarnation: u64,
    },
    Loaded {
        node: NodeId,
        incarnation: u64,
        peer: NodeId,
        entries: Vec<Entry>,
    },
    SnapshotDurable {
        node: NodeId,
        incarnation: u64,
        durable: Box<crate::snapshot::Durable>,
    },
    Request {
        node: NodeId,
        client: usize,
        attempt: u64,
        request: RequestNumber,
    },
    Reply {
        client: usize,
        attempt: u64,
        reply: ClientReply,
    },
    ClientTimeout {
        client: usize,
        attempt: u64,
    },
    ClientRetry {
        client: usize,
        attempt: u64,
    },
    /// The attempt has waited the seed's hedge delay: the client may ask a second node too.
    ClientHedge {
        client: usize,
        attempt: u64,
    },
    Restart(NodeId),
    /// A stopped process may continue (if its latest stop ends now).
    Resume(NodeId),
    /// The connection carrying a snapshot transfer from `leader` (that incarnation) to `peer`
    /// broke: the leader's connection task reports it.
    TransferBroken {
        leader: NodeId,
        incarnation: u64,
        peer: NodeId,
    },
    /// A full disk has room again.
    SpaceBack(NodeId),
    Fault,
    Heal,
}

impl SimEvent {
    /// The node whose process handles the event, if one does.
    fn node(&self) -> Option<NodeId> {
        match self {
            SimEvent::Tick { node, .. } => Some(*node),
            SimEvent::Peer { to, .. } => Some(*to),
            SimEvent::Synced { node, .. }
            | SimEvent::Loaded { node, .. }
            | SimEvent::SnapshotDurable { node, .. }
            | SimEvent::Request { node, .. } => Some(*node),
            SimEvent::TransferBroken { leader, .. } => Some(*leader),
            SimEvent::Reply { .. }
            | SimEvent::ClientTimeout { .. }
            | SimEvent::ClientRetry { .. }
            | SimEvent::ClientHedge { .. }
            | SimEvent::Restart(_)
            | SimEvent::Resume(_)
            | SimEvent::SpaceBack(_)
            | SimEvent::Fault
            | SimEvent::Heal => None,
        }
    }
}

/// A running node: what a crash loses.
struct Live<H: Handler> {
    /// The node's own protocol code; clients are known by their number.
    replica: Replica<H, Token>,
    /// When it started.
    up_since: Time,
    /// When it became leader, while it leads.
    leading_since: Option<Time>,
    /// When its members in force last changed.
    members_since: Time,
    /// The commit index before the event being handled (what a truncation must stay above).
    commit_before: EntryIndex,
    /// The product's snapshot files, as the writer thread runs them.
    snapshots: SnapshotFiles<SimDisk>,
    /// The snapshots arriving from the leader, as the node takes them.
    intake: Intake<SimDisk>,
}

struct SimNode<H: Handler> {
    id: NodeId,
    disk: Disk,
    live: Option<Live<H>>,
    incarnation: u64,
    /// The process is stopped (SIGSTOP, a stalled node thread): what reaches it waits in
    /// `waiting`, in order, and its clock does not tick, until [`SimEvent::Resume`].
    stopped: bool,
    /// When the latest stop ends (ended).
    stalled_until: Time,
    /// Events for the stopped process, in the order they reached it.
    waiting: VecDeque<SimEvent>,
    /// Its WAL thread's acknowledgement connections fail until then: an acknowledgement after
    /// an fsync is reported undeliverable and the core sends it the ordinary way.
    acks_down_until: Time,
    /// The WAL failed in this incarnation where the faults explain it (the halt that
    /// follows is expected).
    wal_failed: bool,
    /// Its WAL executor is running: work queued meanwhile waits for the running loop.
    wal_running: bool,
}

impl<H: Handler> SimNode<H> {
    /// The node's consensus state, for a violation's message.
    fn describe(&self) -> String {
        let Some(live) = &self.live else {
            return format!("node {}: down", self.id.0);
        };
        let core = live.replica.core();
        let view = core.repair_view();
        format!(
            "node {}: {:?} term {} leader {:?} members {:?} base {} last {} durable {} commit {} \
             repair {:?} (judges {:?}, log ends heard {:?}, members kept {:?}, votes lost {:?}) \
             disk full {}",
            self.id.0,
            core.role(),
            core.term().0,
            core.leader().map(|l| l.0),
            core.members().ids().map(|n| n.0).collect::<Vec<_>>(),
            core.log_base().index.0,
            core.last_index().0,
            core.durable_index().0,
            core.commit_index().0,
            self.disk.hard.repair,
            view.judges
                .map(|j| j.iter().map(|n| n.0).collect::<Vec<_>>()),
            view.log_ends
                .iter()
                .map(|(n, (t, i))| (n.0, t.0, i.0))
                .collect::<Vec<_>>(),
            self.disk
                .hard
                .members
                .map(|m| m.ids().map(|n| n.0).collect::<Vec<_>>()),
            self.disk.hard.votes_lost,
            self.disk.full
        )
    }
}

/// One simulated cluster.
pub struct Sim<W: Workload> {
    options: SimOptions,
    rng: Rng,
    now: Time,
    seq: u64,
    queue: BTreeMap<(Time, u64), SimEvent>,
    nodes: Vec<SimNode<W::H>>,
    /// Every client's lanes, in client order.
    clients: Vec<SimClient>,
    /// Each client's requests in flight together.
    windows: Vec<Window>,
    links: Links,
    /// Snapshot transfers under way, (leader, follower), with the incarnations of both and
    /// when the last chunk arrives: a crash of either end before then breaks the connection,
    /// which the leader notices (as the node's connection task does).
    transfers: BTreeMap<(NodeId, NodeId), (u64, u64, Time)>,
    /// What this seed drew.
    swarm: Swarm,
    /// When the links last changed (cut, clogged or healed).
    links_changed: Time,
    checker: Checker<W>,
    workload: W,
    /// The callers' keys the clients share, with the commands each was first drawn with.
    keys: keys::Keys,
    healed: bool,
    /// A committed entry that damage took from every disk: the cluster may stop for good,
    /// which is then no violation.
    copies_lost: Option<EntryIndex>,
    report: SimReport,
}

/// Runs one simulation of `workload` and returns what it found.
/// A panic of the product's code (an assertion that tripped) ends the run as a violation of
/// [`Invariant::Assertion`], naming the event it happened at.
pub fn run<W: Workload>(workload: W, options: SimOptions) -> SimReport {
    let mut sim = Sim::new(workload, options);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
    if let Err(panic) = ran {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        let detail = format!("at event {}: {message}", sim.report.events);
        sim.report
            .violations
            .push(Violation::new(Invariant::Assertion, detail));
    }
    sim.report
}

impl<W: Workload> Sim<W> {
    fn new(workload: W, options: SimOptions) -> Self {
        let mut rng = Rng::new(options.seed);
        let mut keys = keys::Keys::new(options.seed);
        let mut swarm = Swarm::draw(&mut rng);
        swarm.draw_keys(&mut keys.rng);
        swarm.snapshot_deltas = options.seed.is_multiple_of(2);
        // Every pairing of deltas and turns, a quarter of the seeds each.
        swarm.snapshot_turns = matches!(options.seed % 4, 0 | 3);
        let nodes = (1..=SIM_NODES + swarm.spares)
            .map(|id| SimNode {
                id: NodeId(id),
                disk: Disk::default(),
                live: None,
                incarnation: 0,
                stopped: false,
                stalled_until: 0,
                waiting: VecDeque::new(),
                acks_down_until: 0,
                wal_failed: false,
                wal_running: false,
            })
            .collect();
        let width = swarm.pipeline;
        let clients = (0..options.clients)
            .flat_map(|k| (0..width).map(move |_| SimClient::new(k, SIM_NODES + swarm.spares)))
            .collect();
        let windows = (0..options.clients)
            .map(|k| Window::new((k * width) as usize, width))
            .collect();
        let checker = Checker::new(workload.handler());
        let report = SimReport {
            seed: options.seed,
            swarm: swarm.clone(),
            ..SimReport::default()
        };
        Sim {
            options,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            nodes,
            clients,
            windows,
            links: Links::default(),
            transfers: BTreeMap::new(),
            swarm,
            links_changed: 0,
            checker,
            workload,
            keys,
            healed: false,
            copies_lost: None,
            report,
        }
    }

    fn schedule(&mut self, after: Time, event: SimEvent) {
        self.seq += 1;
        self.queue.insert((self.now + after, self.seq), event);
    }

    fn run(&mut self) {
        for id in self.node_ids() {
            self.restart(id);
        }
        for window in 0..self.windows.len() {
            self.next_batch(window);
        }
        if self.options.faults {
            self.links.loss = self.rng.below(odds::LINK_FAULT_PERMILLE_BELOW);
            self.links.duplication = self.rng.below(odds::LINK_FAULT_PERMILLE_BELOW);
            self.swarm.loss_permille = self.links.loss;
            self.swarm.duplication_permille = self.links.duplication;
            self.report.swarm = self.swarm.clone();
            let first = 100 + self.rng.below(2_000);
            self.schedule(first, SimEvent::Fault);
        }
        while let Some(((time, _), event)) = self.queue.pop_first() {
            self.now = time;
            self.report.events += 1;
            self.handle(event);
            self.check_nodes();
            if self.clients_done() && self.converged() {
                break;
            }
            if !self.healed && (self.all_sent() || self.now > FAULTS_UNITS_MAX) {
                self.heal();
            }
            if self.healed && self.now > self.heal_deadline() {
                break;
            }
            if self.report.events >= SIM_EVENTS_MAX {
                // Not through the checker, which may have stopped after a real loss.
                self.report.violations.push(Violation::new(
                    Invariant::Liveness,
                    format!(
                        "{SIM_EVENTS_MAX} events by {:.1} ms of simulated time: a message storm",
                        self.now as f64 / 10.0
                    ),
                ));
                break;
            }
        }
        self.finish();
    }

    /// Every node's id, members or not.
    fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// True when `id` is a member of the newest committed list (a node that is none gets no
    /// entries, and is not waited for).
    fn committed_member(&self, id: NodeId) -> bool {
        match self.checker.committed_members() {
            Some(members) => members.contains(id),
            None => id.0 <= SIM_NODES,
        }
    }

    /// True when every member is up and has applied everything committed, with no snapshot
    /// or fsync pending that could change it.
    fn converged(&self) -> bool {
        let committed = self.checker.committed();
        self.nodes
            .iter()
            .filter(|n| self.committed_member(n.id))
            .all(|n| {
                n.live
                    .as_ref()
                    .is_some_and(|l| l.replica.machine().applied_index().0 == committed)
            })
    }

    fn heal_deadline(&self) -> Time {
        self.report.time + SETTLE_UNITS
    }

    fn all_sent(&self) -> bool {
        self.windows.iter().all(|w| w.sent >= self.options.requests)
    }

    fn clients_done(&self) -> bool {
        self.all_sent() && self.clients.iter().all(|c| c.current.is_none())
    }

    fn finish(&mut self) {
        if !self.healed {
            self.report.time = self.now;
        }
        let in_flight = self.clients.iter().filter(|c| c.current.is_some()).count();
        let unsent: u32 = self
            .windows
            .iter()
            .map(|w| self.options.requests - w.sent)
            .sum();
        let unknown = in_flight as u64 + u64::from(unsent);
        self.report.unknown = unknown;
        let behind: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| self.committed_member(n.id))
            .filter_map(|n| {
                let applied = n
                    .live
                    .as_ref()
                    .map(|l| l.replica.machine().applied_index().0);
                (applied != Some(self.checker.committed()))
                    .then(|| format!("node {} applied {:?}", n.id.0, applied))
            })
            .collect();
        self.note_copies_lost();
        self.check_journals();
        if self.copies_lost.is_some() {
            // Damage took every copy of a committed entry: a cluster that stops is right.
        } else if unknown == 0 && !behind.is_empty() {
            self.report.violations.push(Violation::new(
                Invariant::Liveness,
                format!(
                    "{} entries committed, but after healing {}",
                    self.checker.committed(),
                    behind.join(", ")
                ),
            ));
        }
        if unknown > 0 && self.copies_lost.is_none() {
            let nodes: Vec<String> = self.nodes.iter().map(SimNode::describe).collect();
            self.report.violations.push(Violation::new(
                Invariant::NoOutcome,
                format!(
                    "{unknown} requests still have no outcome after healing ({})",
                    nodes.join("; ")
                ),
            ));
        }
        let mut violations = self.checker.finish();
        self.report.violations.append(&mut violations);
        self.report.committed = self.checker.committed();
        self.report.rewritten_after_loss = u64::from(self.checker.rewritten);
        self.report.keyed_repeats = self.checker.keyed.repeats;
        self.report.keyed_reused += self.checker.keyed.reused;
        self.report.violations.truncate(check::VIOLATIONS_KEPT_MAX);
    }

    fn node(&mut self, id: NodeId) -> &mut SimNode<W::H> {
        &mut self.nodes[usize::from(id.0 - 1)]
    }

    fn handle(&mut self, event: SimEvent) {
        if let Some(id) = event.node()
            && self.node(id).stopped
        {
            self.node(id).waiting.push_back(event);
            return;
        }
        match event {
            SimEvent::Tick { .. }
            | SimEvent::Peer { .. }
            | SimEvent::Synced { .. }
            | SimEvent::Loaded { .. }
            | SimEvent::SnapshotDurable { .. }
            | SimEvent::TransferBroken { .. } => self.node_io(event),
            SimEvent::Request {
                node,
                client,
                attempt,
                request,
            } => self.on_request(node, (client, attempt), request),
            SimEvent::Reply {
                client,
                attempt,
                reply,
            } => self.on_reply(client, attempt, reply),
            SimEvent::ClientTimeout { client, attempt } => self.on_timeout(client, attempt),
            SimEvent::ClientHedge { client, attempt } => self.on_hedge(client, attempt),
            SimEvent::ClientRetry { client, attempt }
                if self.clients[client].attempt == attempt =>
            {
                self.send_request(client);
            }
            SimEvent::ClientRetry { .. } => {}
            SimEvent::SpaceBack(id) => self.space_back(id),
            SimEvent::Resume(id) => self.resume(id),
            SimEvent::Restart(id) if self.node(id).live.is_none() => self.restart(id),
            SimEvent::Restart(_) => {}
            SimEvent::Fault if !self.healed => {
                self.inject_fault();
                let next = 100 + self.rng.below(2_000);
                self.schedule(next, SimEvent::Fault);
            }
            SimEvent::Heal if !self.healed => {
                self.links.cut.clear();
                self.links.clogged.clear();
                self.links_changed = self.now;
            }
            SimEvent::Fault | SimEvent::Heal => {}
        }
    }

    /// An event of a node's own: its clock, a message to it, its disk's and its network's
    /// reports. One for an incarnation of the node that is gone is lost with it.
    fn node_io(&mut self, event: SimEvent) {
        match event {
            SimEvent::Tick {
                node: id,
                incarnation,
            } => self.on_tick(id, incarnation),
            SimEvent::Peer {
                to,
                from,
                incarnation,
                message,
            } if self.current(to, incarnation) && self.node(to).live.is_some() => {
                self.drive(to, |r, out| r.receive(from, message, out));
                self.deferred(to);
            }
            SimEvent::Synced { node, incarnation } if self.current(node, incarnation) => {
                self.synced(node);
            }
            SimEvent::Loaded {
                node,
                incarnation,
                peer,
                entries,
            } if self.current(node, incarnation) => {
                self.drive(node, |r, out| r.loaded(peer, entries, out));
            }
            SimEvent::SnapshotDurable {
                node,
                incarnation,
                durable,
            } if self.current(node, incarnation) => self.snapshot_durable(node, &durable),
            SimEvent::TransferBroken {
                leader,
                incarnation,
                peer,
            } if self.current(leader, incarnation) => {
                self.drive(leader, |r, out| r.snapshot_send_aborted(peer, out));
            }
            SimEvent::Peer { .. }
            | SimEvent::Synced { .. }
            | SimEvent::Loaded { .. }
            | SimEvent::SnapshotDurable { .. }
            | SimEvent::TransferBroken { .. } => {}
            SimEvent::Request { .. }
            | SimEvent::Reply { .. }
            | SimEvent::ClientTimeout { .. }
            | SimEvent::ClientHedge { .. }
            | SimEvent::ClientRetry { .. }
            | SimEvent::SpaceBack(_)
            | SimEvent::Resume(_)
            | SimEvent::Restart(_)
            | SimEvent::Fault
            | SimEvent::Heal => unreachable!("handle passes only a node's own events"),
        }
    }

    /// True when `incarnation` is node `id`'s current one (what an earlier one started is
    /// gone with it).
    fn current(&mut self, id: NodeId, incarnation: u64) -> bool {
        self.node(id).incarnation == incarnation
    }

    /// A tick of node `id`'s clock, when it is up in that incarnation; the next one after.
    fn on_tick(&mut self, id: NodeId, incarnation: u64) {
        if !self.current(id, incarnation) || self.node(id).live.is_none() {
            return;
        }
        let now_ms = self.now / 10;
        self.drive(id, |r, out| r.tick(now_ms, out));
        self.deferred(id);
        let jitter = self.rng.below(3);
        let tick = SimEvent::Tick {
            node: id,
            incarnation,
        };
        self.schedule(TICK_UNITS - 1 + jitter, tick);
    }

    // ----- nodes -----

    fn live(&mut self, id: NodeId) -> Option<&mut Live<W::H>> {
        self.node(id).live.as_mut()
    }

    /// Hands node `id`'s replica one event (`f`) and carries out the IO it asks for.
    fn drive(
        &mut self,
        id: NodeId,
        f: impl FnOnce(&mut Replica<W::H, Token>, &mut Vec<Io<Token>>),
    ) {
        let Some(live) = self.live(id) else { return };
        live.commit_before = live.replica.core().commit_index();
        let mut out = Vec::new();
        f(&mut live.replica, &mut out);
        self.carry_out(id, out);
    }

    /// Carries out a replica's IO in order, on the simulated disk and network.
    fn carry_out(&mut self, id: NodeId, ios: Vec<Io<Token>>) {
        let mut queue = std::collections::VecDeque::from(ios);
        while let Some(io) = queue.pop_front() {
            if self.live(id).is_none() {
                return;
            }
            let mut more = Vec::new();
            if let Err(halt) = self.execute(id, io, &mut more)
                && let Some(live) = self.live(id)
            {
                live.replica.io_failed(halt, &mut queue, &mut more);
            }
            queue.extend(more);
        }
    }

    /// Carries out one IO, as the node's driver does; what the replica asks for meanwhile
    /// goes to `more`.
    fn execute(
        &mut self,
        id: NodeId,
        io: Io<Token>,
        more: &mut Vec<Io<Token>>,
    ) -> Result<(), Halt> {
        match io {
            Io::Send { to, message } => {
                if let PeerMessage::Vote(vote) = &message {
                    self.check_quiet(id, vote.term);
                }
                self.send_peer(id, to, message);
            }
            Io::PersistHardState(hard) => (self.node(id).disk.persist(hard))
                .map_err(|error| Halt::HardState((&error).into()))?,
            Io::PersistKnownMembers(known) => (self.node(id).disk.persist_known(&known))
                .map_err(|error| Halt::KnownMembers((&error).into()))?,
            Io::Wal(op) => {
                if let WalOp::Truncate(from) = op {
                    self.check_truncate(id, from);
                }
                self.write_log(id, op);
            }
            Io::Answer { to, reply } => {
                if let ClientReply::Results {
                    client, request, ..
                } = &reply
                {
                    let commit = self
                        .live(id)
                        .map_or(EntryIndex::ZERO, |l| l.replica.core().commit_index());
                    self.checker.answered(*client, *request, id, commit);
                }
                self.reply(to, reply);
            }
            Io::SendSnapshot { peer, index, term } => {
                self.send_snapshot(id, peer, index, term, more)
            }
            Io::Snapshot(write) => self.write_snapshot(id, write),
            Io::StoreSnapshotChunk(chunk) => self.store_snapshot_chunk(id, chunk, more),
            Io::Note(note) => self.note(id, note),
        }
        Ok(())
    }

    fn note(&mut self, id: NodeId, note: Note) {
        match note {
            Note::RoleChanged { role, term, leader } => {
                let now = self.now;
                let leader = leader.map(|l| l.0);
                tracing::trace!(now, node = id.0, ?role, term = term.0, ?leader, "role");
                if let Some(live) = self.live(id) {
                    live.leading_since = (role == Role::Leader).then_some(now);
                }
                if role == Role::Leader {
                    self.report.leaders += 1;
                    self.checker.leader(term, id);
                }
            }
            Note::Applied(hash) => self.checker.node_applied(id, hash.index, hash.hash),
            Note::Installed { index, .. } => {
                tracing::trace!(now = self.now, node = id.0, index = index.0, "installed");
                self.report.installs += 1;
            }
            Note::Diverged(divergence) => self.checker.violation(
                Invariant::Diverged,
                format!(
                    "node {} reports divergence after entry {}: {:?}",
                    id.0, divergence.index, divergence
                ),
            ),
            // A failed fsync halts its node by design (the process then exits), and so does
            // damage that took every copy of a committed entry; nothing else here makes a node
            // halt.
            // The network carries messages by node id: nothing to connect.
            Note::Members(_) => {
                let now = self.now;
                if let Some(live) = self.live(id) {
                    live.members_since = now;
                }
            }
            Note::Halted(Halt::WalFailed(_)) if self.node(id).wal_failed => {}
            Note::Halted(Halt::Unrecoverable(index)) if self.lost_for_real(index) => {}
            Note::Halted(reason) => self
                .checker
                .violation(Invariant::Halted, format!("node {}: {reason}", id.0)),
        }
    }

    /// Checks what every node's apply journal holds against the state hashes the replicas
    /// reached (a journal that cannot be read is a storage failure).
    fn check_journals(&mut self) {
        for node in &self.nodes {
            match read_journal_on(&node.disk.device, disk::data_dir()) {
                Ok(journal) => self.checker.journaled(node.id, &journal),
                Err(error) => self.checker.violation(
                    Invariant::Storage,
                    format!("node {}'s apply journal: {error}", node.id.0),
                ),
            }
        }
    }

    /// Notes, once, that damage took every copy of a committed entry. Only damage on more
    /// than one node can: without it, an entry on no disk is a bug, for the checks to find.
    pub(super) fn note_copies_lost(&mut self) {
        if self.copies_lost.is_some() || self.report.damaged_together == 0 {
            return;
        }
        self.copies_lost = self.checker.first_without_copy(
            &self
                .nodes
                .iter()
                .map(|n| n.disk.copies())
                .collect::<Vec<_>>(),
        );
        if self.copies_lost.is_some() {
            self.report.copies_lost = 1;
            self.checker.stop();
        }
    }

    /// True when a halt for `index` (every copy lost) is right: damage took every copy of a
    /// committed entry at or before it.
    fn lost_for_real(&mut self, index: EntryIndex) -> bool {
        self.note_copies_lost();
        self.copies_lost.is_some_and(|lost| lost <= index)
    }

    /// A node asks for votes (or pre-votes) for `term` only when it does not hear from a
    /// leader: never while a leader of its term or later, whose members include it, has led
    /// for [`QUIET_UNITS`] with the same members, over a link to it that has been whole as
    /// long, with both up and running (not stopped) as long. (A leader sends nothing to a node
    /// it removed; one that missed its removal asks for pre-votes, which change nothing.)
    fn check_quiet(&mut self, id: NodeId, term: crate::ids::Term) {
        let now = self.now;
        let links_whole = now - self.links_changed >= QUIET_UNITS;
        let Some(up_since) = self.live(id).map(|l| l.up_since) else {
            return;
        };
        let running = |n: &SimNode<W::H>| !n.stopped && now >= n.stalled_until + QUIET_UNITS;
        if !links_whole || now - up_since < QUIET_UNITS || !running(self.node(id)) {
            return;
        }
        let heard = self.nodes.iter().find(|n| {
            n.id != id
                && running(n)
                && !self.links.cut.contains(&(n.id, id))
                && !self.links.clogged.contains(&(n.id, id))
                && n.live.as_ref().is_some_and(|l| {
                    l.replica.halted().is_none()
                        && l.replica.core().role() == Role::Leader
                        && l.replica.core().members().contains(id)
                        && now - l.members_since >= QUIET_UNITS
                        && l.replica.core().term().0 + 1 >= term.0
                        && l.leading_since.is_some_and(|at| now - at >= QUIET_UNITS)
                })
        });
        if let Some(leader) = heard {
            let message = format!(
                "node {} asks for votes for term {} although node {} has led for {:.1} ms over a whole link ({}; {})",
                id.0,
                term.0,
                leader.id.0,
                QUIET_UNITS as f64 / 10.0,
                leader.describe(),
                self.nodes[usize::from(id.0 - 1)].describe()
            );
            self.checker.violation(Invariant::Liveness, message);
        }
    }

    /// I7: a truncation asked for stays above the commit index before the event.
    fn check_truncate(&mut self, id: NodeId, from: EntryIndex) {
        let commit = self.live(id).map_or(EntryIndex::ZERO, |l| l.commit_before);
        if from <= commit {
            self.checker.violation(
                Invariant::Leadership,
                format!(
                    "node {} truncates its log from {from}, below its commit index {commit}",
                    id.0
                ),
            );
        }
    }

    /// A client request reaches a node: the replica's admission.
    fn on_request(&mut self, id: NodeId, token: Token, request: RequestNumber) {
        let Some(submit) = self.clients[token.0].current.clone() else {
            return;
        };
        if submit.request != request {
            return;
        }
        // Nobody listens on a node that is down: the client times out.
        let now_ms = self.now / 10;
        let read = self.clients[token.0].read;
        let runs = self.clients[token.0].runs.clone();
        self.drive(id, |r, out| {
            if let Some(read) = read {
                let read = Read {
                    client: submit.client,
                    read,
                    command_count: submit.command_count,
                    commands: submit.commands,
                };
                r.read(read, token, out);
            } else if runs.is_empty() {
                r.admit(submit, token, out);
            } else {
                r.admit_keyed(SubmitKeyed { submit, runs }, token, out);
            }
            r.propose(now_ms, out);
        });
    }

    /// Checks every live node's own invariants, the recent ones after each event and all of
    /// them every [`SIM_INVARIANTS_EVERY_EVENTS`] events (they walk the logs), then compares
    /// what each committed and applied with the reference.
    fn check_nodes(&mut self) {
        let whole = self
            .report
            .events
            .is_multiple_of(SIM_INVARIANTS_EVERY_EVENTS);
        for node in &self.nodes {
            let Some(live) = &node.live else {
                continue;
            };
            match whole {
                true => live.replica.check_invariants(),
                false => live.replica.check_recent_invariants(),
            }
            node.disk.check_invariants(!whole);
        }
        for node in &self.nodes {
            if let Some(live) = &node.live {
                self.checker.learn_committed(live.replica.core());
                self.checker
                    .committed_on(node.id, live.replica.core().commit_index(), &node.disk);
            }
        }
        self.checker.advance(&mut self.workload);
    }
}
