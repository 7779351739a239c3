//! The deterministic cluster simulator (feature `sim`), in the style of TigerBeetle's VOPR and
//! FoundationDB's simulation: three real consensus cores ([`Core`]) and the real apply path
//! ([`StateMachine`], [`Batcher`], sessions) run in one thread from one seed, over a simulated
//! network and simulated disks, with crashes, restarts and clients that retry. Checkers look
//! for violations of the invariants I1-I7 after every event (see [`check`]).
//!
//! Everything that varies comes from one [`Rng`]: the same seed replays the same run, event for
//! event. Time is a counter of [`Time`] units; nothing reads the clock.
//!
//! What is simulated:
//! - the network: per-message delay, loss, duplication and reordering (by delay), partitions
//!   (both ways or one way) and clogged links (delays twenty times longer);
//! - the disk: appends are written at once and become durable only when a simulated fsync
//!   completes; acknowledgements wait for it; a crash keeps a random prefix of what was not
//!   yet durable (writes lost or torn: recovery keeps only whole entries);
//! - crashes and restarts: a restarted node recovers as `node::storage` does, from its hard
//!   state and its log, replaying the entries its log shows committed;
//! - damaged entries (a corrupted or misdirected sector, as the recovery scan finds it): on
//!   one node at a time, a restart finds an entry damaged, cuts the log before it and
//!   repairs it from the leader (`HardState::repair`).
//!
//! - snapshots: taken a slice at a time while entries apply (copy-on-write), durable after a
//!   simulated write, logs compacted behind them, sent to a lagging follower in chunks and
//!   installed; recovery starts from the newest snapshot its log continues.
//!
//! Not simulated yet: a disk full, damage on every copy of an entry.

pub mod check;
mod disk;

use crate::apply::{CommittedAnswer, Mode, ReplyStatus, StateMachine};
use crate::batcher::{Batcher, Queued, command_ends};
use crate::core::{
    APPEND_BYTES_MAX, Action, Core, CoreConfig, ELECTION_TICKS_MIN_DEFAULT, Event,
    HEARTBEAT_TICKS_DEFAULT, LAGGING_FOLLOWER_ENTRIES_MAX, LogBase, Recovered,
};
use crate::entry::{Entry, EntryKind, encode_commands};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber};
use crate::rng::Rng;
use crate::snapshot::{ScanProgress, SnapshotMeta, parse_snapshot};
use crate::state::State;
use bytes::Bytes;
use check::Checker;
use disk::Disk;
use net::message::{AppliedHash, PeerMessage, Role, SnapshotChunk};
use std::collections::{BTreeMap, BTreeSet};

/// Simulated time, in units of 100 microseconds.
pub type Time = u64;

/// Nodes in a simulated cluster.
pub const SIM_NODES: u8 = 3;
/// Time between two ticks of a node (1 ms).
pub const TICK_UNITS: Time = 10;
/// Time a client waits for an answer before it retries at another node (50 ms).
pub const CLIENT_TIMEOUT_UNITS: Time = 500;
/// Bytes of state each simulated node may hold.
pub const SIM_STATE_BYTES: u64 = 16 << 20;
/// Commands per entry the simulated leaders pack at most.
pub const SIM_ENTRY_COMMANDS_MAX: u32 = 16;
/// Entries a simulated leader keeps uncommitted at most.
pub const SIM_PIPELINE_ENTRIES_MAX: u64 = 4;
/// Time the healed cluster gets at the end of a run to answer every client (10 s).
pub const SETTLE_UNITS: Time = 100_000;
/// Bytes of a snapshot chunk (small, so that a snapshot takes several).
pub const SIM_SNAPSHOT_CHUNK_BYTES: usize = 1024;
/// Slots a snapshot slice scans (small, so that entries apply between slices).
pub const SIM_SNAPSHOT_SLICE_SLOTS: usize = 4;
/// Time after which faults end even if clients have not sent everything (60 s; a healthy
/// run takes a few seconds).
pub const FAULTS_UNITS_MAX: Time = 600_000;

/// A business the simulator drives: its handler, the requests its clients send, and the
/// invariant its state must keep (I3 for the Bank).
pub trait Workload {
    /// The handler under test.
    type H: Handler;
    /// A fresh handler (one per node and one for the checker's reference replica).
    fn handler(&self) -> Self::H;
    /// The commands of a client's next request (1 to 1,024).
    fn next_request(&mut self, rng: &mut Rng) -> Vec<<Self::H as Handler>::Command>;
    /// Takes note of a command's outcome, in the global order of the committed log.
    fn observe(&mut self, command: &<Self::H as Handler>::Command, outcome: &OutcomeOf<Self::H>);
    /// Checks the committed state against what was observed.
    fn check(&self, state: &State) -> Result<(), String>;
}

/// What one simulated run does.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// Clients, each with one request outstanding at a time.
    pub clients: u32,
    /// Requests each client sends.
    pub requests: u32,
    /// Whether faults are injected (off: a healthy run, for comparison).
    pub faults: bool,
}

impl SimOptions {
    /// The options of a standard run from `seed`.
    pub fn new(seed: u64) -> Self {
        SimOptions {
            seed,
            clients: 3,
            requests: 40,
            faults: true,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// The seed that replays this run.
    pub seed: u64,
    /// The mode the leaders ran in.
    pub mode: Mode,
    /// Entries between snapshots (0: none).
    pub snapshot_every: u64,
    /// Snapshots made durable.
    pub snapshots: u64,
    /// Snapshots installed from a leader.
    pub installs: u64,
    /// Restarts that found a damaged entry in the log (and repaired it).
    pub damaged: u64,
    /// Invariant violations, in the order found (empty: the run passed).
    pub violations: Vec<String>,
    /// Requests whose results reached their client.
    pub acknowledged: u64,
    /// Requests with no known outcome after the cluster healed (I6).
    pub unknown: u64,
    /// Entries committed.
    pub committed: u64,
    /// Node crashes.
    pub crashes: u64,
    /// Partitions and clogged links.
    pub partitions: u64,
    /// Leaders elected.
    pub leaders: u64,
    /// Events processed.
    pub events: u64,
    /// Simulated time the run took.
    pub time: Time,
}

/// A message between nodes and clients.
enum SimEvent {
    Tick(NodeId),
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
        meta: SnapshotMeta,
        bytes: Vec<u8>,
    },
    Request {
        node: NodeId,
        client: usize,
        request: RequestNumber,
    },
    Reply {
        client: usize,
        reply: SimReply,
    },
    ClientTimeout {
        client: usize,
        attempt: u64,
    },
    ClientRetry {
        client: usize,
        attempt: u64,
    },
    Restart(NodeId),
    Fault,
    Heal,
}

/// What a node answers a simulated client.
#[derive(Clone, Debug)]
enum SimReply {
    Results {
        request: RequestNumber,
        results: Vec<u8>,
    },
    NotLeader {
        leader: Option<NodeId>,
    },
    Stale {
        request: RequestNumber,
    },
    Expired {
        request: RequestNumber,
    },
    Refused,
}

/// A running node: what a crash loses.
struct Live<H: Handler> {
    core: Core,
    machine: StateMachine<H>,
    batcher: Batcher,
    /// Clients waiting for a request's results.
    waiters: BTreeMap<(ClientId, RequestNumber), usize>,
    unsimulated: Vec<EntryIndex>,
    commit_to: EntryIndex,
    /// The commit index before the event being handled (what a truncation must stay above).
    commit_before: EntryIndex,
    halted: bool,
    /// The snapshot being scanned: its bytes so far.
    snapshot_bytes: Vec<u8>,
    /// The applied index when the last snapshot started.
    snapshot_started: EntryIndex,
    /// A snapshot arriving from the leader: its index, size and the bytes so far.
    incoming: Option<(EntryIndex, u64, Vec<u8>)>,
}

struct SimNode<H: Handler> {
    id: NodeId,
    disk: Disk,
    live: Option<Live<H>>,
    incarnation: u64,
}

struct SimClient {
    id: ClientId,
    /// The request outstanding: its number, command count and encoded commands.
    current: Option<(RequestNumber, u32, Vec<u8>)>,
    next: RequestNumber,
    sent: u32,
    target: NodeId,
    attempt: u64,
}

/// The network's faults at the moment.
#[derive(Default)]
struct Links {
    /// Directed links that lose everything.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Directed links twenty times slower.
    clogged: BTreeSet<(NodeId, NodeId)>,
    /// Per-mille of messages lost.
    loss: u64,
    /// Per-mille of messages delivered twice.
    duplication: u64,
}

/// One simulated cluster.
pub struct Sim<W: Workload> {
    options: SimOptions,
    rng: Rng,
    now: Time,
    seq: u64,
    queue: BTreeMap<(Time, u64), SimEvent>,
    nodes: Vec<SimNode<W::H>>,
    clients: Vec<SimClient>,
    links: Links,
    mode: Mode,
    /// Entries between snapshots (0: none), drawn per seed.
    snapshot_every: u64,
    /// Entries a leader keeps behind a snapshot for a lagging follower, drawn per seed.
    lagging_entries_max: u64,
    checker: Checker<W>,
    workload: W,
    healed: bool,
    report: SimReport,
}

/// Runs one simulation of `workload` and returns what it found.
pub fn run<W: Workload>(workload: W, options: SimOptions) -> SimReport {
    let mut sim = Sim::new(workload, options);
    sim.run();
    sim.report
}

impl<W: Workload> Sim<W> {
    fn new(workload: W, options: SimOptions) -> Self {
        let mut rng = Rng::new(options.seed);
        let mode = if rng.chance(1, 2) {
            Mode::Verify
        } else {
            Mode::Performance
        };
        let snapshot_every = if rng.chance(1, 5) {
            0
        } else {
            4 + rng.below(29)
        };
        let lagging_entries_max = if rng.chance(1, 4) {
            LAGGING_FOLLOWER_ENTRIES_MAX
        } else {
            rng.below(64)
        };
        let nodes = (1..=SIM_NODES)
            .map(|id| SimNode {
                id: NodeId(id),
                disk: Disk::default(),
                live: None,
                incarnation: 0,
            })
            .collect();
        let clients = (0..options.clients)
            .map(|k| SimClient {
                id: ClientId(u64::from(k) + 1),
                current: None,
                next: RequestNumber(1),
                sent: 0,
                target: NodeId(1 + (k % u32::from(SIM_NODES)) as u8),
                attempt: 0,
            })
            .collect();
        let checker = Checker::new(workload.handler());
        let report = SimReport {
            seed: options.seed,
            mode,
            snapshot_every,
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
            links: Links::default(),
            mode,
            snapshot_every,
            lagging_entries_max,
            checker,
            workload,
            healed: false,
            report,
        }
    }

    fn schedule(&mut self, after: Time, event: SimEvent) {
        self.seq += 1;
        self.queue.insert((self.now + after, self.seq), event);
    }

    fn run(&mut self) {
        for id in 1..=SIM_NODES {
            self.restart(NodeId(id));
        }
        for client in 0..self.clients.len() {
            self.next_request(client);
        }
        if self.options.faults {
            self.links.loss = self.rng.below(30);
            self.links.duplication = self.rng.below(30);
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
        }
        self.finish();
    }

    /// True when every node is up and has applied everything committed, with no snapshot
    /// or fsync pending that could change it.
    fn converged(&self) -> bool {
        let committed = self.checker.committed();
        self.nodes.iter().all(|n| {
            n.live
                .as_ref()
                .is_some_and(|l| l.machine.applied_index().0 == committed)
        })
    }

    fn heal_deadline(&self) -> Time {
        self.report.time + SETTLE_UNITS
    }

    fn all_sent(&self) -> bool {
        self.clients.iter().all(|c| c.sent >= self.options.requests)
    }

    fn clients_done(&self) -> bool {
        self.all_sent() && self.clients.iter().all(|c| c.current.is_none())
    }

    /// Ends every fault: links whole, every node up. Clients then settle.
    fn heal(&mut self) {
        self.healed = true;
        self.report.time = self.now;
        self.links = Links::default();
        for id in 1..=SIM_NODES {
            if self.nodes[usize::from(id - 1)].live.is_none() {
                self.restart(NodeId(id));
            }
        }
    }

    fn finish(&mut self) {
        if !self.healed {
            self.report.time = self.now;
        }
        let unknown = self
            .clients
            .iter()
            .filter(|c| c.current.is_some() || c.sent < self.options.requests)
            .count() as u64;
        self.report.unknown = unknown;
        let behind: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let applied = n.live.as_ref().map(|l| l.machine.applied_index().0);
                (applied != Some(self.checker.committed()))
                    .then(|| format!("node {} applied {:?}", n.id.0, applied))
            })
            .collect();
        if unknown == 0 && !behind.is_empty() {
            self.report.violations.push(format!(
                "liveness: {} entries committed, but after healing {}",
                self.checker.committed(),
                behind.join(", ")
            ));
        }
        if unknown > 0 {
            let nodes: Vec<String> = self
                .nodes
                .iter()
                .map(|n| match &n.live {
                    Some(l) => format!(
                        "node {}: {:?} term {} last {} commit {} repair {:?}",
                        n.id.0,
                        l.core.role(),
                        l.core.term().0,
                        l.core.last_index().0,
                        l.core.commit_index().0,
                        n.disk.hard.repair
                    ),
                    None => format!("node {}: down", n.id.0),
                })
                .collect();
            self.report.violations.push(format!(
                "I6: {unknown} clients still have a request with no outcome after healing ({})",
                nodes.join("; ")
            ));
        }
        let mut violations = self.checker.finish();
        self.report.violations.append(&mut violations);
        self.report.committed = self.checker.committed();
        self.report.violations.truncate(check::VIOLATIONS_KEPT_MAX);
    }

    fn node(&mut self, id: NodeId) -> &mut SimNode<W::H> {
        &mut self.nodes[usize::from(id.0 - 1)]
    }

    fn handle(&mut self, event: SimEvent) {
        match event {
            SimEvent::Tick(id) => {
                if self.node(id).live.is_some() {
                    self.step(id, Event::Tick);
                    self.propose(id);
                    self.deferred(id);
                    let jitter = self.rng.below(3);
                    self.schedule(TICK_UNITS - 1 + jitter, SimEvent::Tick(id));
                }
            }
            SimEvent::Peer {
                to,
                from,
                incarnation,
                message,
            } => {
                if self.node(to).incarnation == incarnation && self.node(to).live.is_some() {
                    self.step(to, Event::Message { from, message });
                    self.deferred(to);
                }
            }
            SimEvent::Synced { node, incarnation } => {
                if self.node(node).incarnation == incarnation {
                    self.synced(node);
                }
            }
            SimEvent::Loaded {
                node,
                incarnation,
                peer,
                entries,
            } => {
                if self.node(node).incarnation == incarnation {
                    self.step(node, Event::Loaded { peer, entries });
                }
            }
            SimEvent::SnapshotDurable {
                node,
                incarnation,
                meta,
                bytes,
            } => {
                if self.node(node).incarnation == incarnation {
                    self.snapshot_durable(node, meta, bytes);
                }
            }
            SimEvent::Request {
                node,
                client,
                request,
            } => self.on_request(node, client, request),
            SimEvent::Reply { client, reply } => self.on_reply(client, reply),
            SimEvent::ClientTimeout { client, attempt } => {
                if self.clients[client].attempt == attempt && self.clients[client].current.is_some()
                {
                    let c = &mut self.clients[client];
                    c.target = NodeId(1 + c.target.0 % SIM_NODES);
                    self.send_request(client);
                }
            }
            SimEvent::ClientRetry { client, attempt } => {
                if self.clients[client].attempt == attempt {
                    self.send_request(client);
                }
            }
            SimEvent::Restart(id) => {
                if self.node(id).live.is_none() {
                    self.restart(id);
                }
            }
            SimEvent::Fault => {
                if !self.healed {
                    self.inject_fault();
                    let next = 100 + self.rng.below(2_000);
                    self.schedule(next, SimEvent::Fault);
                }
            }
            SimEvent::Heal => {
                if !self.healed {
                    self.links.cut.clear();
                    self.links.clogged.clear();
                }
            }
        }
    }

    /// Draws one fault: a crash (of the leader more often than not), a partition, a clogged
    /// link, or a restart of everything down.
    fn inject_fault(&mut self) {
        let leader = self.nodes.iter().find_map(|n| {
            n.live
                .as_ref()
                .filter(|l| l.core.role() == Role::Leader)
                .map(|_| n.id)
        });
        let random_node = NodeId(1 + self.rng.below(u64::from(SIM_NODES)) as u8);
        match self.rng.below(10) {
            0..=1 => {
                let victim = leader.unwrap_or(random_node);
                self.crash(victim);
                let down = 10 + self.rng.below(3_000);
                self.schedule(down, SimEvent::Restart(victim));
            }
            2 => {
                self.crash(random_node);
                let down = 10 + self.rng.below(3_000);
                self.schedule(down, SimEvent::Restart(random_node));
            }
            3 => {
                // Everything crashes at once (a power cut).
                for id in 1..=SIM_NODES {
                    self.crash(NodeId(id));
                    let down = 10 + self.rng.below(1_000);
                    self.schedule(down, SimEvent::Restart(NodeId(id)));
                }
            }
            4..=5 => {
                // Isolate one node, both ways or one way.
                let isolated = leader
                    .filter(|_| self.rng.chance(2, 3))
                    .unwrap_or(random_node);
                let one_way = self.rng.below(3);
                for other in (1..=SIM_NODES).map(NodeId).filter(|&n| n != isolated) {
                    if one_way != 1 {
                        self.links.cut.insert((isolated, other));
                    }
                    if one_way != 2 {
                        self.links.cut.insert((other, isolated));
                    }
                }
                self.report.partitions += 1;
                let lasting = 50 + self.rng.below(5_000);
                self.schedule(lasting, SimEvent::Heal);
            }
            6 => {
                // A node that reaches only one peer.
                let a = random_node;
                let b = NodeId(1 + a.0 % SIM_NODES);
                self.links.cut.insert((a, b));
                self.links.cut.insert((b, a));
                self.report.partitions += 1;
                let lasting = 50 + self.rng.below(5_000);
                self.schedule(lasting, SimEvent::Heal);
            }
            7 => {
                let a = random_node;
                let b = NodeId(1 + (a.0 + self.rng.below(2) as u8) % SIM_NODES);
                self.links.clogged.insert((a, b));
                self.report.partitions += 1;
                let lasting = 50 + self.rng.below(5_000);
                self.schedule(lasting, SimEvent::Heal);
            }
            _ => {
                for id in 1..=SIM_NODES {
                    if self.node(NodeId(id)).live.is_none() {
                        self.restart(NodeId(id));
                    }
                }
            }
        }
    }

    // ----- nodes -----

    fn crash(&mut self, id: NodeId) {
        let keep_draw = self.rng.next_u64();
        let node = self.node(id);
        if node.live.take().is_none() {
            return;
        }
        node.incarnation += 1;
        node.disk.crash(keep_draw);
        self.report.crashes += 1;
        self.checker.crashed(id);
    }

    /// Starts node `id` from its disk, as `node::recovery::restore` recovers a real one: the
    /// newest snapshot with no gap before the log (the log reset to it when it does not
    /// continue it), then the entries the log shows committed.
    fn restart(&mut self, id: NodeId) {
        let seed = self.rng.next_u64();
        let handler = self.workload.handler();
        let (mode, lagging_entries_max) = (self.mode, self.lagging_entries_max);
        // A damaged entry, found by the recovery scan, on one node at a time (so that a copy
        // of every committed entry survives somewhere).
        let repairing = self.nodes.iter().any(|n| n.disk.hard.repair.is_some());
        let damage_draw = (self.options.faults && !self.healed && !repairing)
            .then(|| self.rng.chance(1, 4).then(|| self.rng.next_u64()))
            .flatten();
        let node = &mut self.nodes[usize::from(id.0 - 1)];
        node.incarnation += 1;
        let disk = &mut node.disk;
        if let Some(draw) = damage_draw
            && disk.damage(draw)
        {
            self.report.damaged += 1;
        }
        let mut machine = StateMachine::new(handler, SIM_STATE_BYTES);
        let mut applied = None;
        let mut chosen = None;
        if let Some((meta, bytes)) = disk
            .snapshots
            .iter()
            .rev()
            .find(|(meta, _)| disk.first_index() <= meta.index.0 + 1)
        {
            let installed = parse_snapshot(bytes)
                .map_err(|e| e.to_string())
                .and_then(|snapshot| machine.install(snapshot).map_err(|e| e.to_string()));
            if let Err(reason) = installed {
                self.checker.violation(format!(
                    "node {}: its durable snapshot of entry {} does not load: {reason}",
                    id.0, meta.index
                ));
                return;
            }
            applied = Some(AppliedHash {
                index: meta.index,
                hash: meta.state_hash,
            });
            chosen = Some(meta.clone());
        }
        match &chosen {
            Some(meta) if !disk.continues(meta.index, meta.entry_hash) => disk.reset(LogBase {
                index: meta.index,
                term: meta.term,
                hash: meta.entry_hash,
            }),
            Some(meta) => disk.compact(meta.index.0),
            None if disk.first_index() > 1 => disk.reset(LogBase::default()),
            None => {}
        }
        machine.set_mode(mode);
        machine.set_replying(false);
        let base = disk.base;
        let committed = disk
            .entries()
            .iter()
            .map(|e| e.header.commit.0)
            .max()
            .unwrap_or(0)
            .min(disk.last_index())
            .max(base.index.0);
        let mut hashes: Vec<(EntryIndex, crate::state::StateHash)> =
            applied.iter().map(|a| (a.index, a.hash)).collect();
        for index in base.index.0 + 1..=committed {
            let entry = disk.get(index).expect("within the log");
            match machine.apply(entry) {
                Ok(done) => {
                    hashes.push((done.index, done.state_hash));
                    applied = Some(AppliedHash {
                        index: done.index,
                        hash: done.state_hash,
                    });
                }
                Err(error) => {
                    self.checker
                        .violation(format!("recovery of node {} failed: {error}", id.0));
                    return;
                }
            }
        }
        let entries = disk.entries();
        let recovered = Recovered {
            hard_state: disk.hard,
            base,
            terms: entries.iter().map(Entry::term).collect(),
            hashes: entries.iter().map(|e| e.header.hash).collect(),
            window: entries[(committed - base.index.0) as usize..].to_vec(),
            applied,
        };
        let config = CoreConfig {
            id,
            nodes: (1..=SIM_NODES).map(NodeId).collect(),
            election_ticks_min: ELECTION_TICKS_MIN_DEFAULT,
            heartbeat_ticks: HEARTBEAT_TICKS_DEFAULT,
            seed,
            lagging_entries_max,
            pre_vote: true,
        };
        node.live = Some(Live {
            core: Core::new(config, recovered),
            machine,
            batcher: Batcher::new(SIM_ENTRY_COMMANDS_MAX),
            waiters: BTreeMap::new(),
            unsimulated: Vec::new(),
            commit_to: EntryIndex(committed),
            commit_before: EntryIndex(committed),
            halted: false,
            snapshot_bytes: Vec::new(),
            snapshot_started: EntryIndex(committed),
            incoming: None,
        });
        for (index, hash) in hashes {
            self.checker.node_applied(id, index, hash);
        }
        self.checker.restarted(id, EntryIndex(committed));
        let first_tick = 1 + self.rng.below(TICK_UNITS);
        self.schedule(first_tick, SimEvent::Tick(id));
    }

    fn live(&mut self, id: NodeId) -> Option<&mut Live<W::H>> {
        self.node(id).live.as_mut().filter(|l| !l.halted)
    }

    fn step(&mut self, id: NodeId, event: Event) {
        let Some(live) = self.live(id) else { return };
        let mut out = Vec::new();
        live.commit_before = live.core.commit_index();
        live.core.step(event, &mut out);
        self.carry_out(id, out);
    }

    fn carry_out(&mut self, id: NodeId, actions: Vec<Action>) {
        let mut queue = std::collections::VecDeque::from(actions);
        while let Some(action) = queue.pop_front() {
            if self.live(id).is_none() {
                return;
            }
            queue.extend(self.execute(id, action));
        }
    }

    fn execute(&mut self, id: NodeId, action: Action) -> Vec<Action> {
        match action {
            Action::Send { to, message } => self.send_peer(id, to, message),
            Action::PersistHardState(hard) => self.node(id).disk.hard = hard,
            Action::Persist(entries) => {
                for entry in entries {
                    if let Err(error) = self.node(id).disk.append(entry) {
                        self.checker.violation(format!("node {}: {error}", id.0));
                        return Vec::new();
                    }
                }
                self.request_sync(id);
            }
            Action::AckWhenDurable { to, reply } => {
                self.node(id)
                    .disk
                    .push_ack(to, PeerMessage::AppendReply(reply));
                self.request_sync(id);
            }
            Action::Truncate(from) => {
                let commit = self.live(id).map_or(EntryIndex::ZERO, |l| l.commit_before);
                if from <= commit {
                    self.checker.violation(format!(
                        "I7: node {} truncates its log from {from}, below its commit index {commit}",
                        id.0
                    ));
                }
                self.node(id).disk.truncate_from(from.0);
            }
            Action::Commit(index) => {
                let live = self.live(id).expect("checked");
                if live.core.role() == Role::Leader {
                    return self.apply_committed(id, index);
                }
                live.commit_to = live.commit_to.max(index);
            }
            Action::Load { peer, from, to } => {
                let disk = &self.node(id).disk;
                let mut entries = Vec::new();
                let mut bytes = 0;
                if from.0 < disk.first_index() {
                    let message = format!(
                        "node {}: asked to read entry {from}, behind its log's start {}",
                        id.0,
                        disk.first_index()
                    );
                    self.checker.violation(message);
                    return Vec::new();
                }
                for index in from.0..=to.0.min(disk.last_index()) {
                    let entry = disk.get(index).expect("within the log").clone();
                    bytes += entry.payload.len();
                    entries.push(entry);
                    if bytes >= APPEND_BYTES_MAX {
                        break;
                    }
                }
                let incarnation = self.node(id).incarnation;
                let after = 1 + self.rng.below(20);
                self.schedule(
                    after,
                    SimEvent::Loaded {
                        node: id,
                        incarnation,
                        peer,
                        entries,
                    },
                );
            }
            Action::RoleChanged { role, term, .. } => {
                if role == Role::Leader {
                    self.report.leaders += 1;
                    self.checker.leader(term, id);
                }
                let live = self.live(id).expect("checked");
                live.machine.set_replying(role == Role::Leader);
                if role != Role::Leader {
                    live.batcher.drain();
                    live.unsimulated.clear();
                    live.machine.discard_simulations();
                    let leader = live.core.leader();
                    let waiting: Vec<usize> =
                        std::mem::take(&mut live.waiters).into_values().collect();
                    for client in waiting {
                        self.reply(client, SimReply::NotLeader { leader });
                    }
                }
            }
            Action::SendSnapshot { peer } => return self.send_snapshot(id, peer),
            Action::StoreSnapshotChunk(chunk) => return self.store_snapshot_chunk(id, chunk),
            Action::Unrecoverable(index) => {
                // Damage strikes one node at a time: another copy always exists.
                self.checker.violation(format!(
                    "node {}: unrecoverable corruption at index {index}, with a copy elsewhere",
                    id.0
                ));
                if let Some(live) = self.live(id) {
                    live.halted = true;
                }
            }
            Action::Diverged(divergence) => self.checker.violation(format!(
                "I2: node {} reports divergence after entry {}: {:?}",
                id.0, divergence.index, divergence
            )),
        }
        Vec::new()
    }

    fn request_sync(&mut self, id: NodeId) {
        let incarnation = self.node(id).incarnation;
        if !self.node(id).disk.begin_sync() {
            return;
        }
        let slow = self.rng.chance(1, 20);
        let after = 1 + self.rng.below(if slow { 200 } else { 20 });
        self.schedule(
            after,
            SimEvent::Synced {
                node: id,
                incarnation,
            },
        );
    }

    /// An fsync completed: what it covered is durable, its acknowledgements go out.
    fn synced(&mut self, id: NodeId) {
        let Some(synced) = self.node(id).disk.finish_sync() else {
            return;
        };
        if let Some((index, term)) = synced.persisted {
            self.step(id, Event::Persisted { index, term });
        }
        for (to, message) in synced.acks {
            self.send_peer(id, to, message);
        }
        if synced.more {
            self.request_sync(id);
        }
        self.deferred(id);
    }

    fn send_peer(&mut self, from: NodeId, to: NodeId, message: PeerMessage) {
        if self.links.cut.contains(&(from, to)) || self.rng.below(1000) < self.links.loss {
            return;
        }
        let incarnation = self.node(to).incarnation;
        let mut delay = 1 + self.rng.below(10);
        if self.links.clogged.contains(&(from, to)) {
            delay *= 20;
        }
        if self.rng.below(1000) < self.links.duplication {
            let again = delay + self.rng.below(30);
            self.schedule(
                again,
                SimEvent::Peer {
                    to,
                    from,
                    incarnation,
                    message: message.clone(),
                },
            );
        }
        self.schedule(
            delay,
            SimEvent::Peer {
                to,
                from,
                incarnation,
                message,
            },
        );
    }

    /// Work a node does when it has a moment: the leader simulates what it proposed, a
    /// follower applies what committed.
    fn deferred(&mut self, id: NodeId) {
        let simulate_now = self.rng.chance(1, 2);
        let apply_now = self.rng.chance(1, 2);
        let Some(live) = self.live(id) else { return };
        if simulate_now && live.core.role() == Role::Leader {
            for index in std::mem::take(&mut live.unsimulated) {
                if index <= live.machine.applied_index() {
                    continue;
                }
                if let Some(entry) = live.core.entry(index).cloned() {
                    live.machine.simulate(&entry);
                }
            }
        }
        if apply_now
            && live.core.role() != Role::Leader
            && live.commit_to > live.machine.applied_index()
        {
            let to = live.commit_to;
            let out = self.apply_committed(id, to);
            self.carry_out(id, out);
        }
        self.snapshot_work(id);
    }

    /// Starts a snapshot when the applied index crossed a multiple of the interval, or scans
    /// a slice of the one in progress; a finished one is written (durable after a delay).
    fn snapshot_work(&mut self, id: NodeId) {
        let every = self.snapshot_every;
        let write_delay = 1 + self.rng.below(100);
        let incarnation = self.node(id).incarnation;
        let Some(live) = self.live(id) else { return };
        if every == 0 {
            return;
        }
        let applied = live.machine.applied_index();
        if !live.machine.snapshotting() {
            if applied.0 / every > live.snapshot_started.0 / every
                && live.machine.begin_snapshot().is_some()
            {
                live.snapshot_started = applied;
                live.snapshot_bytes.clear();
            }
            return;
        }
        match live
            .machine
            .snapshot_step(SIM_SNAPSHOT_SLICE_SLOTS, &mut live.snapshot_bytes)
        {
            ScanProgress::Idle | ScanProgress::More => {}
            ScanProgress::Void => live.snapshot_bytes.clear(),
            ScanProgress::Done(meta) => {
                let mut bytes = std::mem::take(&mut live.snapshot_bytes);
                let digest = blake3::hash(&bytes);
                bytes.extend_from_slice(digest.as_bytes());
                self.schedule(
                    write_delay,
                    SimEvent::SnapshotDurable {
                        node: id,
                        incarnation,
                        meta,
                        bytes,
                    },
                );
            }
        }
    }

    /// A snapshot is durable: the log behind the snapshot before it goes (what a lagging
    /// follower still needs excepted), as the driver does.
    fn snapshot_durable(&mut self, id: NodeId, meta: SnapshotMeta, bytes: Vec<u8>) {
        self.report.snapshots += 1;
        let node = self.node(id);
        let previous = node.disk.snapshots.last().map(|(m, _)| m.index);
        if previous.is_some_and(|p| p >= meta.index) {
            return;
        }
        node.disk.keep_snapshot(meta, bytes);
        let (Some(previous), Some(live)) = (previous, node.live.as_mut()) else {
            return;
        };
        let through = live.core.compactable(previous);
        if through > live.core.log_base().index {
            live.core.compact(through);
            node.disk.compact(through.0);
        }
    }

    /// Leader: sends `peer` the newest durable snapshot, in chunks over one connection (in
    /// order; a lost chunk makes the follower drop the snapshot until it is sent again).
    fn send_snapshot(&mut self, id: NodeId, peer: NodeId) -> Vec<Action> {
        let node = self.node(id);
        let Some((meta, bytes)) = node.disk.snapshots.last().cloned() else {
            let mut out = Vec::new();
            if let Some(live) = node.live.as_mut() {
                live.core.step(Event::SnapshotAborted { peer }, &mut out);
            }
            return out;
        };
        let term = node.live.as_ref().expect("leading").core.term();
        let total = bytes.len() as u64;
        let incarnation = self.node(peer).incarnation;
        let mut at = 1 + self.rng.below(10);
        for (k, data) in bytes.chunks(SIM_SNAPSHOT_CHUNK_BYTES).enumerate() {
            if self.links.cut.contains(&(id, peer)) || self.rng.below(1000) < self.links.loss {
                continue;
            }
            let chunk = SnapshotChunk {
                term,
                leader: id,
                index: meta.index,
                offset: (k * SIM_SNAPSHOT_CHUNK_BYTES) as u64,
                total,
                data: data.to_vec(),
            };
            at += 1;
            self.schedule(
                at,
                SimEvent::Peer {
                    to: peer,
                    from: id,
                    incarnation,
                    message: PeerMessage::Snapshot(chunk),
                },
            );
        }
        Vec::new()
    }

    /// Follower: keeps a chunk; once the snapshot is whole and verifies, installs it in place
    /// of the state and the log, as the driver does.
    fn store_snapshot_chunk(&mut self, id: NodeId, chunk: SnapshotChunk) -> Vec<Action> {
        let Some(live) = self.live(id) else {
            return Vec::new();
        };
        if chunk.offset == 0 {
            live.incoming = Some((chunk.index, chunk.total, Vec::new()));
        }
        let Some((index, total, bytes)) = live.incoming.as_mut() else {
            return Vec::new();
        };
        if *index != chunk.index || *total != chunk.total || bytes.len() as u64 != chunk.offset {
            live.incoming = None;
            return Vec::new();
        }
        bytes.extend_from_slice(&chunk.data);
        if (bytes.len() as u64) < *total {
            return Vec::new();
        }
        let (_, _, bytes) = live.incoming.take().expect("just used");
        let snapshot = match parse_snapshot(&bytes) {
            Ok(snapshot) => snapshot,
            Err(reason) => {
                let message = format!(
                    "node {}: a leader's snapshot does not verify: {reason}",
                    id.0
                );
                self.checker.violation(message);
                return Vec::new();
            }
        };
        let meta = snapshot.meta.clone();
        if meta.index <= live.core.commit_index() {
            return Vec::new();
        }
        live.machine.abort_snapshot();
        live.snapshot_bytes.clear();
        if let Err(reason) = live.machine.install(snapshot) {
            live.halted = true;
            let message = format!(
                "node {}: the leader's snapshot does not install: {reason}",
                id.0
            );
            self.checker.violation(message);
            return Vec::new();
        }
        let base = LogBase {
            index: meta.index,
            term: meta.term,
            hash: meta.entry_hash,
        };
        let holds = live.core.holds(base);
        live.snapshot_started = meta.index;
        live.commit_to = live.commit_to.max(meta.index);
        let applied = AppliedHash {
            index: meta.index,
            hash: meta.state_hash,
        };
        let node = self.node(id);
        if holds {
            node.disk.compact(meta.index.0);
        } else {
            node.disk.reset(base);
        }
        node.disk.keep_snapshot(meta, bytes);
        self.report.installs += 1;
        self.checker.node_applied(id, applied.index, applied.hash);
        let mut out = Vec::new();
        let live = self.live(id).expect("installed");
        live.core.step(Event::Installed { base, applied }, &mut out);
        out
    }

    fn apply_committed(&mut self, id: NodeId, index: EntryIndex) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(live) = self.live(id) {
            if live.machine.applied_index() >= index {
                break;
            }
            let next = live.machine.applied_index().next();
            let Some(entry) = live.core.entry(next).cloned() else {
                let message = format!("node {}: entry {next} is committed but not in memory", id.0);
                live.halted = true;
                self.checker.violation(message);
                break;
            };
            match live.machine.apply(&entry) {
                Ok(applied) => {
                    let hash = AppliedHash {
                        index: applied.index,
                        hash: applied.state_hash,
                    };
                    live.core.step(Event::Applied(hash), &mut out);
                    let mut answers = Vec::new();
                    for reply in applied.replies {
                        if let Some(client) = live.waiters.remove(&(reply.client, reply.request)) {
                            let answer = match reply.status {
                                ReplyStatus::Results(results) => SimReply::Results {
                                    request: reply.request,
                                    results,
                                },
                                ReplyStatus::Stale => SimReply::Stale {
                                    request: reply.request,
                                },
                                ReplyStatus::Expired => SimReply::Expired {
                                    request: reply.request,
                                },
                            };
                            answers.push((client, answer));
                        }
                    }
                    self.checker
                        .node_applied(id, applied.index, applied.state_hash);
                    for (client, answer) in answers {
                        self.reply(client, answer);
                    }
                }
                Err(error) => {
                    live.halted = true;
                    self.checker
                        .violation(format!("node {}: apply stopped: {error}", id.0));
                }
            }
        }
        out
    }

    fn propose(&mut self, id: NodeId) {
        let now = self.now;
        loop {
            let Some(live) = self.live(id) else { return };
            if live.core.role() != Role::Leader
                || live.core.uncommitted() >= SIM_PIPELINE_ENTRIES_MAX
            {
                return;
            }
            let Some((payload, count)) = live.batcher.next_entry(now / 10) else {
                return;
            };
            let mut out = Vec::new();
            let index = live
                .core
                .propose(EntryKind::Commands, count, payload, &mut out)
                .expect("the leader proposes");
            live.unsimulated.push(index);
            self.carry_out(id, out);
        }
    }

    /// A client request reaches a node: the driver's admission, step for step.
    fn on_request(&mut self, id: NodeId, client: usize, request: RequestNumber) {
        let Some((number, count, bytes)) = self.clients[client].current.clone() else {
            return;
        };
        if number != request {
            return;
        }
        let client_id = self.clients[client].id;
        let Some(live) = self.node(id).live.as_mut() else {
            return; // nobody listens: the client times out
        };
        let answer = if live.halted {
            Some(SimReply::Refused)
        } else if live.core.role() != Role::Leader {
            Some(SimReply::NotLeader {
                leader: live.core.leader(),
            })
        } else {
            match command_ends::<W::H>(&bytes, count) {
                Err(_) => Some(SimReply::Refused),
                Ok(ends) => {
                    let committed = live.machine.committed_answer(client_id, request);
                    if committed == CommittedAnswer::Stale {
                        Some(SimReply::Stale { request })
                    } else if committed == CommittedAnswer::Expired {
                        Some(SimReply::Expired { request })
                    } else if let CommittedAnswer::Finished(_, results) = committed {
                        Some(SimReply::Results { request, results })
                    } else if let Some(waiter) = live.waiters.get_mut(&(client_id, request)) {
                        *waiter = client;
                        None
                    } else {
                        let queued = Queued {
                            client: client_id,
                            request,
                            commands: Bytes::from(bytes),
                            ends,
                        };
                        if live.batcher.push(queued).is_err() {
                            Some(SimReply::Refused)
                        } else {
                            live.waiters.insert((client_id, request), client);
                            None
                        }
                    }
                }
            }
        };
        match answer {
            Some(answer) => self.reply(client, answer),
            None => self.propose(id),
        }
    }

    // ----- clients -----

    fn reply(&mut self, client: usize, reply: SimReply) {
        if self.rng.below(1000) < self.links.loss {
            return;
        }
        let delay = 1 + self.rng.below(10);
        self.schedule(delay, SimEvent::Reply { client, reply });
    }

    fn next_request(&mut self, client: usize) {
        let c = &self.clients[client];
        if c.sent >= self.options.requests {
            return;
        }
        let commands = self.workload.next_request(&mut self.rng);
        let bytes = encode_commands(&commands);
        let count = commands.len() as u32;
        let c = &mut self.clients[client];
        let number = c.next;
        c.next = RequestNumber(number.0 + 1);
        c.sent += 1;
        self.checker.requested(c.id, number, commands);
        c.current = Some((number, count, bytes));
        self.send_request(client);
    }

    fn send_request(&mut self, client: usize) {
        let c = &mut self.clients[client];
        let Some((request, _, _)) = &c.current else {
            return;
        };
        let request = *request;
        c.attempt += 1;
        let (node, attempt) = (c.target, c.attempt);
        if self.rng.below(1000) >= self.links.loss {
            let delay = 1 + self.rng.below(10);
            self.schedule(
                delay,
                SimEvent::Request {
                    node,
                    client,
                    request,
                },
            );
        }
        self.schedule(
            CLIENT_TIMEOUT_UNITS,
            SimEvent::ClientTimeout { client, attempt },
        );
    }

    fn on_reply(&mut self, client: usize, reply: SimReply) {
        let c = &mut self.clients[client];
        let Some((current, _, _)) = &c.current else {
            return;
        };
        let current = *current;
        match reply {
            SimReply::Results { request, results } => {
                if request != current {
                    return;
                }
                let id = c.id;
                c.current = None;
                self.report.acknowledged += 1;
                self.checker.acknowledged(id, request, results);
                self.next_request(client);
            }
            SimReply::NotLeader { leader } => {
                c.target = leader.unwrap_or(NodeId(1 + c.target.0 % SIM_NODES));
                let attempt = c.attempt;
                let after = 5 + self.rng.below(50);
                self.schedule(after, SimEvent::ClientRetry { client, attempt });
            }
            SimReply::Stale { request } => {
                if request == current {
                    let id = c.id;
                    self.checker.violation(format!(
                        "client {} request {}: answered stale, but the client never moved past it",
                        id.0, request.0
                    ));
                }
            }
            SimReply::Expired { request } => {
                // Fewer clients than sessions are kept: a session never expires here.
                let id = c.id;
                self.checker.violation(format!(
                    "client {} request {}: answered that its session expired",
                    id.0, request.0
                ));
            }
            SimReply::Refused => {
                let attempt = c.attempt;
                let after = 50 + self.rng.below(200);
                self.schedule(after, SimEvent::ClientRetry { client, attempt });
            }
        }
    }

    /// Compares what each live node committed and applied with the reference.
    fn check_nodes(&mut self) {
        for node in &self.nodes {
            if let Some(live) = &node.live {
                self.checker
                    .committed_on(node.id, live.core.commit_index(), &node.disk);
            }
        }
        self.checker.advance(&mut self.workload);
    }
}
