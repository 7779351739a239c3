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
//!   state and its log, replaying the entries its log shows committed.
//!
//! Not simulated yet: snapshots (the simulated nodes never compact their logs), corrupted or
//! misdirected sectors (protocol-aware repair is not built), disk full.

pub mod check;

use crate::apply::{Mode, ReplyStatus, StateMachine};
use crate::batcher::{Batcher, Queued, command_ends};
use crate::core::{
    APPEND_BYTES_MAX, Action, Core, CoreConfig, ELECTION_TICKS_MIN_DEFAULT, Event,
    HEARTBEAT_TICKS_DEFAULT, LAGGING_FOLLOWER_ENTRIES_MAX, LogBase, Recovered,
};
use crate::entry::{Entry, EntryKind, encode_commands};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber};
use crate::rng::Rng;
use crate::state::State;
use bytes::Bytes;
use check::Checker;
use net::message::{AppliedHash, PeerMessage, Role};
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
    Refused,
}

/// A node's disk: survives crashes.
#[derive(Default)]
struct Disk {
    hard: crate::core::HardState,
    /// The log from index 1 (no compaction in the simulator).
    entries: Vec<Entry>,
    /// Entries durable (a prefix of `entries`).
    synced: usize,
    /// An fsync in flight: the entries and acknowledgements it covers.
    syncing: Option<(usize, usize)>,
    /// Acknowledgements waiting for an fsync, in order.
    acks: Vec<(NodeId, PeerMessage)>,
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
            if self.clients_done() {
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
        if unknown > 0 {
            self.report.violations.push(format!(
                "I6: {unknown} clients still have a request with no outcome after healing"
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
        // What was written but not yet durable: a random prefix survives (a torn last write
        // is cut by recovery, which keeps only whole entries).
        let disk = &mut node.disk;
        let unsynced = disk.entries.len() - disk.synced;
        let kept = (keep_draw % (unsynced as u64 + 1)) as usize;
        disk.entries.truncate(disk.synced + kept);
        disk.synced = disk.entries.len();
        disk.syncing = None;
        disk.acks.clear();
        self.report.crashes += 1;
        self.checker.crashed(id);
    }

    /// Starts node `id` from its disk, as `node::storage::restore` recovers a real one.
    fn restart(&mut self, id: NodeId) {
        let seed = self.rng.next_u64();
        let handler = self.workload.handler();
        let mode = self.mode;
        let node = &mut self.nodes[usize::from(id.0 - 1)];
        node.incarnation += 1;
        let entries = &node.disk.entries;
        let last = entries.len() as u64;
        let committed = entries
            .iter()
            .map(|e| e.header.commit.0)
            .max()
            .unwrap_or(0)
            .min(last);
        let mut machine = StateMachine::new(handler, SIM_STATE_BYTES);
        machine.set_mode(mode);
        machine.set_replying(false);
        let mut applied = None;
        let mut hashes = Vec::new();
        for entry in &entries[..committed as usize] {
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
        let recovered = Recovered {
            hard_state: node.disk.hard,
            base: LogBase::default(),
            terms: entries.iter().map(Entry::term).collect(),
            hashes: entries.iter().map(|e| e.header.hash).collect(),
            window: entries[committed as usize..].to_vec(),
            applied,
        };
        let config = CoreConfig {
            id,
            nodes: (1..=SIM_NODES).map(NodeId).collect(),
            election_ticks_min: ELECTION_TICKS_MIN_DEFAULT,
            heartbeat_ticks: HEARTBEAT_TICKS_DEFAULT,
            seed,
            lagging_entries_max: LAGGING_FOLLOWER_ENTRIES_MAX,
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
                let disk = &mut self.node(id).disk;
                for entry in entries {
                    if entry.index().0 != disk.entries.len() as u64 + 1 {
                        let message = format!(
                            "node {}: entry {} persisted after {}",
                            id.0,
                            entry.index(),
                            disk.entries.len()
                        );
                        self.checker.violation(message);
                        return Vec::new();
                    }
                    disk.entries.push(entry);
                }
                self.request_sync(id);
            }
            Action::AckWhenDurable { to, reply } => {
                self.node(id)
                    .disk
                    .acks
                    .push((to, PeerMessage::AppendReply(reply)));
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
                let disk = &mut self.node(id).disk;
                let keep = (from.0 - 1) as usize;
                disk.entries.truncate(keep);
                disk.synced = disk.synced.min(keep);
                if let Some((entries, _)) = &mut disk.syncing {
                    *entries = (*entries).min(keep);
                }
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
                for index in from.0..=to.0.min(disk.entries.len() as u64) {
                    let entry = disk.entries[index as usize - 1].clone();
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
            Action::SendSnapshot { .. } | Action::StoreSnapshotChunk(_) => {
                self.checker.violation(format!(
                    "node {}: a snapshot action, but the simulated logs are never compacted",
                    id.0
                ));
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
        let disk = &mut self.node(id).disk;
        if disk.syncing.is_some() {
            return;
        }
        disk.syncing = Some((disk.entries.len(), disk.acks.len()));
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
        let disk = &mut self.node(id).disk;
        let Some((entries, acks)) = disk.syncing.take() else {
            return;
        };
        disk.synced = disk.synced.max(entries.min(disk.entries.len()));
        let acks: Vec<(NodeId, PeerMessage)> = disk.acks.drain(..acks).collect();
        let durable = disk.synced.checked_sub(1).map(|k| &disk.entries[k]);
        let persisted = durable.map(|e| (e.index(), e.term()));
        let more = disk.entries.len() > disk.synced || !disk.acks.is_empty();
        if let Some((index, term)) = persisted {
            self.step(id, Event::Persisted { index, term });
        }
        for (to, message) in acks {
            self.send_peer(id, to, message);
        }
        if more {
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
                    let sessions = live.machine.sessions();
                    if sessions
                        .last_request(client_id)
                        .is_some_and(|last| request < last)
                    {
                        Some(SimReply::Stale { request })
                    } else if let Some((_, results)) = sessions.finished_results(client_id, request)
                    {
                        Some(SimReply::Results {
                            request,
                            results: results.to_vec(),
                        })
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
                    .committed_on(node.id, live.core.commit_index(), &node.disk.entries);
            }
        }
        self.checker.advance(&mut self.workload);
    }
}
