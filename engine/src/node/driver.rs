//! The node's event loop: inputs in, core steps, actions carried out.

use super::connections::{accept_clients, accept_peers, connect_peer};
use super::data_dir::DirLock;
use super::install::{Incoming, stream_snapshot};
use super::recovery::Restored;
use super::storage::{self, SNAPSHOT_DIR};
use super::timing::Timing;
use super::wal_thread::{Acker, WalEvent, WalOp, WalThread};
use super::{Input, NodeConfig, NodeError};
use crate::apply::{CommittedAnswer, Reply, ReplyStatus, StateMachine};
use crate::batcher::{Batcher, Queued, command_ends};

use crate::core::{Action, Core, CoreConfig, Event, LogBase};
use crate::entry::EntryKind;
use crate::handler::Handler;
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber};
use crate::snapshot::{
    Durable, SNAPSHOT_LOG_PERCENT, SNAPSHOT_SLICE_INTERVAL_MS, SNAPSHOT_SLICE_SLOTS,
    SNAPSHOT_WRITE_BYTES, ScanProgress, SnapshotWriter,
};
use bytes::Bytes;
use net::message::SnapshotChunk;
use net::message::{
    AppliedHash, ClientReply, ClientRequest, NodeStatus, PeerMessage, Rejection, Role, Submit,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The node's listening sockets.
pub(super) struct Listeners {
    peer: TcpListener,
    client: TcpListener,
}

pub(super) async fn bind(peer: SocketAddr, client: SocketAddr) -> Result<Listeners, NodeError> {
    let listen = |address: SocketAddr| async move {
        TcpListener::bind(address)
            .await
            .map_err(|source| NodeError::Io {
                path: PathBuf::from(address.to_string()),
                source,
            })
    };
    Ok(Listeners {
        peer: listen(peer).await?,
        client: listen(client).await?,
    })
}

/// The wall clock, read only here: it stamps entries for handlers (`Tx::now_ms`).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(super) async fn run<H: Handler>(
    config: NodeConfig,
    restored: Restored<H>,
    listeners: Listeners,
    inbox: mpsc::Sender<Input>,
    mut inputs: mpsc::Receiver<Input>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> Option<String> {
    tokio::spawn(accept_peers(listeners.peer, config.access(), inbox.clone()));
    tokio::spawn(accept_clients(
        listeners.client,
        config.access(),
        inbox.clone(),
    ));
    let mut driver = Driver::new(config, restored, inbox)?;
    let mut ticker = tokio::time::interval(Duration::from_millis(driver.config.tick_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let input = tokio::select! {
            biased;
            _ = &mut stopped => return None,
            input = inputs.recv() => input,
            _ = ticker.tick() => {
                driver.tick();
                continue;
            }
            // Only when nothing else is ready: a slice of the snapshot in progress, then the
            // connection tasks get their turn.
            () = std::future::ready(()), if driver.machine.snapshotting() => {
                driver.snapshot_slice();
                tokio::task::yield_now().await;
                continue;
            }
        };
        let input = input?;
        driver.handle(input);
        // Take whatever else is waiting first, so that requests that arrived together share
        // an entry.
        while let Ok(input) = inputs.try_recv() {
            driver.handle(input);
        }
        if let Some(reason) = driver.fatal.take() {
            return Some(reason);
        }
        driver.propose();
        if driver.has_deferred_work() || driver.snapshot_slice_due() {
            // Let the connection tasks send what was queued first (appends, acknowledgements,
            // replies): simulation, a follower's apply and a busy node's snapshot slice then
            // run while those travel.
            tokio::task::yield_now().await;
            driver.simulate();
            driver.catch_up();
            if driver.snapshot_slice_due() {
                driver.snapshot_slice();
            }
        }
    }
}

/// Committed entries a follower leaves unapplied at most while its WAL is busy.
pub const FOLLOWER_APPLY_LAG_ENTRIES_MAX: u64 = 64;

/// What decides when a node starts its next snapshot.
struct SnapshotPolicy {
    /// The applied index at the last start.
    last_start: EntryIndex,
    /// When the newest snapshot became durable.
    durable_at: Option<Instant>,
    /// Its size.
    durable_bytes: u64,
    /// The machine's applied payload bytes at the last start.
    log_bytes_at_start: u64,
}

struct Driver<H: Handler> {
    config: NodeConfig,
    core: Core,
    machine: StateMachine<H>,
    batcher: Batcher,
    waiters: HashMap<(ClientId, RequestNumber), mpsc::Sender<ClientReply>>,
    wal: WalThread,
    peers: BTreeMap<NodeId, mpsc::Sender<PeerMessage>>,
    halted: Option<String>,
    /// Why the node must stop for good (a failed fsync): the event loop ends with it.
    fatal: Option<String>,
    /// The WAL found the file system full and retries its append.
    storage_full: bool,
    /// Entries this leader proposed and has not simulated yet.
    unsimulated: Vec<EntryIndex>,
    /// Follower: the commit index to apply up to once nothing waits for the WAL.
    commit_to: EntryIndex,
    timing: Timing,
    /// For the snapshot writer and the tasks that send snapshots.
    inbox: mpsc::Sender<Input>,
    /// The background snapshot writer (none when snapshots are off).
    snapshots: Option<SnapshotWriter>,
    /// The newest durable snapshot, the one sent to followers.
    latest_snapshot: Option<Durable>,
    /// When to start the next snapshot.
    policy: SnapshotPolicy,
    /// Bytes of the snapshot in progress not handed to the writer yet.
    snapshot_bytes: Vec<u8>,
    /// When the last slice of a snapshot ran.
    last_slice: Instant,
    /// Follower: a snapshot arriving from the leader.
    incoming: Option<Incoming>,
    /// The data directory's lock (the WAL thread and the snapshot writer hold it too).
    lock: Arc<DirLock>,
}

impl<H: Handler> Driver<H> {
    fn new(config: NodeConfig, restored: Restored<H>, inbox: mpsc::Sender<Input>) -> Option<Self> {
        // The data directory stays locked until the last thread that writes in it ends: the
        // WAL's and the snapshot writer's hold it beside this one.
        let lock = Arc::new(restored.lock);
        let wal_inbox = inbox.clone();
        let report = move |event| wal_inbox.blocking_send(Input::Wal(event)).is_ok();
        let peers = config
            .nodes
            .iter()
            .filter(|n| n.id != config.id)
            .map(|n| (n.id, n.peer_address))
            .collect();
        let acker = Acker::new(config.access(), peers);
        let fsync_delay = Duration::from_millis(config.fsync_delay_ms);
        let name = format!("wal-{}", config.id);
        let wal_lock = Arc::clone(&lock);
        let spawned = WalThread::spawn(restored.wal, acker, name, fsync_delay, wal_lock, report);
        let wal = match spawned {
            Ok(wal) => wal,
            Err(error) => {
                eprintln!("node {}: cannot start the WAL thread: {error}", config.id);
                return None;
            }
        };
        let peers = config
            .nodes
            .iter()
            .filter(|n| n.id != config.id)
            .map(|n| (n.id, connect_peer(config.access(), n.id, n.peer_address)))
            .collect();
        let core_config = CoreConfig {
            id: config.id,
            nodes: config.nodes.iter().map(|n| n.id).collect(),
            election_ticks_min: config.election_ticks_min,
            heartbeat_ticks: config.heartbeat_ticks,
            seed: config.seed,
            lagging_entries_max: config.lagging_entries_max,
            pre_vote: true,
        };
        let mut machine = restored.machine;
        machine.set_mode(config.mode);
        machine.set_replying(false);
        let policy = SnapshotPolicy {
            last_start: machine.applied_index(),
            durable_at: restored.snapshot.as_ref().map(|_| Instant::now()),
            durable_bytes: restored.snapshot.as_ref().map_or(0, |s| s.bytes),
            log_bytes_at_start: 0,
        };
        let mut driver = Driver {
            core: Core::new(core_config, restored.core),
            machine,
            batcher: Batcher::new(config.entry_commands_max),
            waiters: HashMap::new(),
            wal,
            peers,
            halted: None,
            fatal: None,
            storage_full: false,
            unsimulated: Vec::new(),
            commit_to: EntryIndex::ZERO,
            timing: Timing::default(),
            inbox,
            snapshots: None,
            latest_snapshot: restored.snapshot,
            policy,
            snapshot_bytes: Vec::new(),
            last_slice: Instant::now(),
            incoming: None,
            lock,
            config,
        };
        driver.snapshots = driver.spawn_snapshot_writer(Arc::clone(&driver.lock));
        Some(driver)
    }

    fn snapshot_dir(&self) -> PathBuf {
        self.config.data_dir.join(SNAPSHOT_DIR)
    }

    /// The snapshot writer, unless snapshots are off.
    fn spawn_snapshot_writer(&self, lock: Arc<DirLock>) -> Option<SnapshotWriter> {
        if self.config.snapshot_every == 0 {
            return None;
        }
        let inbox = self.inbox.clone();
        let spawned = SnapshotWriter::spawn(self.snapshot_dir(), move |outcome| {
            let _held = &lock;
            inbox.blocking_send(Input::Snapshot(outcome)).is_ok()
        });
        match spawned {
            Ok(writer) => Some(writer),
            Err(error) => {
                eprintln!(
                    "node {}: no snapshots: cannot start the writer: {error}",
                    self.config.id
                );
                None
            }
        }
    }

    /// Starts a snapshot when the applied index crossed a multiple of the snapshot interval
    /// since the last start, the newest durable snapshot has been kept the retention period,
    /// and the log applied since the last start is at least [`SNAPSHOT_LOG_PERCENT`] of the
    /// newest snapshot's size.
    fn maybe_start_snapshot(&mut self) {
        let every = self.config.snapshot_every;
        let applied = self.machine.applied_index();
        let policy = &self.policy;
        let retain = Duration::from_millis(self.config.snapshot_retain_ms);
        let log = self.machine.applied_bytes() - policy.log_bytes_at_start;
        if every == 0
            || self.machine.snapshotting()
            || applied.0 / every <= policy.last_start.0 / every
            || policy.durable_at.is_some_and(|at| at.elapsed() < retain)
            || log * 100 < policy.durable_bytes * SNAPSHOT_LOG_PERCENT
        {
            return;
        }
        let Some(writer) = &self.snapshots else {
            return;
        };
        // `None`: a pending speculation is in the way; the next applied entry tries again.
        if let Some(meta) = self.machine.begin_snapshot() {
            self.policy.last_start = applied;
            self.policy.log_bytes_at_start = self.machine.applied_bytes();
            if !writer.begin(meta.index) {
                self.machine.abort_snapshot();
                eprintln!("node {}: the snapshot writer stopped", self.config.id);
                self.snapshots = None;
            }
        }
    }

    /// True when a snapshot is in progress and no slice of it ran for
    /// [`SNAPSHOT_SLICE_INTERVAL_MS`] (the node was never idle).
    fn snapshot_slice_due(&self) -> bool {
        self.machine.snapshotting()
            && self.last_slice.elapsed() >= Duration::from_millis(SNAPSHOT_SLICE_INTERVAL_MS)
    }

    /// A slice of the snapshot in progress; its bytes go to the writer a megabyte at a time.
    fn snapshot_slice(&mut self) {
        self.last_slice = Instant::now();
        let Some(writer) = &self.snapshots else {
            self.machine.abort_snapshot();
            return;
        };
        let bytes = &mut self.snapshot_bytes;
        match self.machine.snapshot_step(SNAPSHOT_SLICE_SLOTS, bytes) {
            ScanProgress::Idle => {}
            ScanProgress::More => {
                if bytes.len() >= SNAPSHOT_WRITE_BYTES {
                    writer.bytes(std::mem::take(bytes));
                }
            }
            ScanProgress::Done(meta) => {
                writer.bytes(std::mem::take(bytes));
                writer.finish(meta);
            }
            ScanProgress::Void => {
                bytes.clear();
                writer.abort();
            }
        }
    }

    /// Abandons the snapshot in progress (the state is about to be replaced).
    fn abort_snapshot(&mut self) {
        if self.machine.snapshotting() {
            self.machine.abort_snapshot();
            self.snapshot_bytes.clear();
            if let Some(writer) = &self.snapshots {
                writer.abort();
            }
        }
    }

    /// A snapshot is durable: the log behind the one before it can go (what followers still
    /// need excepted).
    fn on_snapshot_durable(&mut self, durable: Durable) {
        self.policy.durable_at = Some(Instant::now());
        self.policy.durable_bytes = durable.bytes;
        if self
            .latest_snapshot
            .as_ref()
            .is_some_and(|l| l.meta.index >= durable.meta.index)
        {
            return;
        }
        // The log is kept from the snapshot before this one: should this one turn out damaged
        // after a crash, recovery falls back to that one and replays the log after it.
        if let Some(previous) = self.latest_snapshot.take() {
            let through = self.core.compactable(previous.meta.index);
            if through > self.core.log_base().index {
                self.core.compact(through);
                self.queue_wal(WalOp::Compact(through));
            }
        }
        self.latest_snapshot = Some(durable);
    }

    /// Leader: streams the newest durable snapshot to `peer`.
    fn send_snapshot(&mut self, peer: NodeId) -> Vec<Action> {
        let (Some(latest), Some(queue)) = (&self.latest_snapshot, self.peers.get(&peer)) else {
            let mut out = Vec::new();
            self.core.step(Event::SnapshotAborted { peer }, &mut out);
            return out;
        };
        let stream = stream_snapshot(
            latest.path.clone(),
            latest.meta.index,
            self.core.term(),
            self.config.id,
            queue.clone(),
        );
        let inbox = self.inbox.clone();
        let me = self.config.id;
        tokio::spawn(async move {
            if let Err(error) = stream.await {
                eprintln!("node {me}: sending a snapshot to node {peer} failed: {error}");
                let _ = inbox.send(Input::SnapshotAborted(peer)).await;
            }
        });
        Vec::new()
    }

    /// Follower: keeps a chunk of the leader's snapshot; once it is whole, verified and
    /// durable, installs it in place of the state and the log.
    fn store_snapshot_chunk(&mut self, chunk: SnapshotChunk) -> Vec<Action> {
        let dir = self.snapshot_dir();
        if chunk.offset == 0 {
            self.incoming = Incoming::start(&dir, &chunk)
                .map_err(|e| eprintln!("node {}: snapshot refused: {e}", self.config.id))
                .ok();
        }
        let Some(incoming) = self.incoming.as_mut() else {
            return Vec::new();
        };
        match incoming.take(&chunk) {
            Ok(false) => return Vec::new(),
            Ok(true) => {}
            Err(error) => {
                eprintln!("node {}: snapshot dropped: {error}", self.config.id);
                self.incoming = None;
                return Vec::new();
            }
        }
        let incoming = self.incoming.take().expect("just used");
        let (snapshot, path, bytes) = match incoming.finish(&dir) {
            Ok(done) => done,
            Err(error) => {
                eprintln!("node {}: snapshot refused: {error}", self.config.id);
                return Vec::new();
            }
        };
        let meta = snapshot.meta.clone();
        if meta.index <= self.core.commit_index() {
            // The log caught up meanwhile: it has everything the snapshot holds.
            return Vec::new();
        }
        let started = Instant::now();
        self.abort_snapshot();
        if let Err(reason) = self.machine.install(snapshot) {
            self.halt(format!(
                "the leader's snapshot of entry {} does not verify: {reason}",
                meta.index
            ));
            return Vec::new();
        }
        let base = LogBase {
            index: meta.index,
            term: meta.term,
            hash: meta.entry_hash,
        };
        self.queue_wal(if self.core.holds(base) {
            WalOp::Compact(meta.index)
        } else {
            WalOp::Reset {
                base: meta.index,
                hash: meta.entry_hash,
            }
        });
        eprintln!(
            "node {}: installed the leader's snapshot of entry {} ({:.1} MiB) in {:.0} ms",
            self.config.id,
            meta.index,
            bytes as f64 / (1024.0 * 1024.0),
            started.elapsed().as_secs_f64() * 1e3
        );
        let applied = AppliedHash {
            index: meta.index,
            hash: meta.state_hash,
        };
        self.latest_snapshot = Some(Durable {
            meta,
            path,
            bytes,
            took: started.elapsed(),
        });
        self.policy = SnapshotPolicy {
            last_start: applied.index,
            durable_at: Some(Instant::now()),
            durable_bytes: bytes,
            log_bytes_at_start: self.machine.applied_bytes(),
        };
        self.commit_to = self.commit_to.max(applied.index);
        let mut out = Vec::new();
        self.core.step(Event::Installed { base, applied }, &mut out);
        out
    }

    fn handle(&mut self, input: Input) {
        match input {
            Input::Peer { from, message } => {
                if let PeerMessage::Append(append) = &message {
                    for entry in &append.entries {
                        self.timing.received(entry.index());
                    }
                }
                self.step(Event::Message { from, message })
            }
            Input::Client { request, reply } => self.on_client(request, &reply),
            Input::Wal(WalEvent::Persisted { index, term }) => {
                self.timing.persisted(index);
                self.step(Event::Persisted { index, term })
            }
            Input::Wal(WalEvent::Loaded { peer, entries }) => {
                self.step(Event::Loaded { peer, entries })
            }
            Input::Wal(WalEvent::AckFailed) => self.step(Event::AckFailed),
            Input::Wal(WalEvent::Failed(reason)) => {
                // After a failed fsync the page cache's state is unknown: the node stops for
                // good (its process exits) rather than go on from a log it cannot trust.
                let reason = format!("the WAL failed: {reason}");
                self.halt(reason.clone());
                self.fatal = Some(reason);
            }
            Input::Wal(WalEvent::Full(reason)) => {
                eprintln!(
                    "node {}: storage full, refusing new requests and retrying the append: {reason}",
                    self.config.id
                );
                self.storage_full = true;
            }
            Input::Wal(WalEvent::SpaceBack) => {
                eprintln!("node {}: storage has room again", self.config.id);
                self.storage_full = false;
            }
            Input::Snapshot(Ok(durable)) => self.on_snapshot_durable(durable),
            Input::Snapshot(Err(error)) => {
                eprintln!("node {}: a snapshot failed: {error}", self.config.id)
            }
            Input::SnapshotAborted(peer) => self.step(Event::SnapshotAborted { peer }),
        }
    }

    fn tick(&mut self) {
        self.step(Event::Tick);
        self.propose();
    }

    /// Steps the core, unless the node halted: a halted node takes no part in consensus, so
    /// that the others elect a leader that can serve.
    fn step(&mut self, event: Event) {
        if self.halted.is_some() {
            return;
        }
        let mut out = Vec::new();
        self.core.step(event, &mut out);
        self.carry_out(out);
    }

    /// Carries out actions in order. Once the node halts, nothing more is carried out: an
    /// action after a failed one (a vote after its persistence failed) must not happen.
    fn carry_out(&mut self, actions: Vec<Action>) {
        let mut queue = VecDeque::from(actions);
        while let Some(action) = queue.pop_front() {
            if self.halted.is_some() {
                return;
            }
            queue.extend(self.execute(action));
        }
    }

    /// Carries out one action; returns the actions the core asked for meanwhile.
    fn execute(&mut self, action: Action) -> Vec<Action> {
        match action {
            Action::Send { to, message } => {
                if let Some(queue) = self.peers.get(&to) {
                    // A full queue drops the message: consensus resends what matters.
                    let _ = queue.try_send(message);
                }
            }
            Action::PersistHardState(state) => {
                if let Err(error) = storage::write_hard_state(&self.config.data_dir, state) {
                    self.halt(format!("cannot persist the hard state: {error}"));
                }
            }
            Action::Persist(entries) => self.queue_wal(WalOp::Append(entries)),
            Action::AckWhenDurable { to, reply } => self.queue_wal(WalOp::Ack {
                to,
                message: PeerMessage::AppendReply(reply),
            }),
            Action::Truncate(from) => self.queue_wal(WalOp::Truncate(from)),
            Action::Load { peer, from, to } => self.queue_wal(WalOp::Load { peer, from, to }),
            Action::Commit(index) => {
                self.timing.committed(index);
                if self.core.role() == Role::Leader {
                    return self.apply_committed(index);
                }
                // A follower applies once its acknowledgements are out (see `catch_up`).
                self.commit_to = self.commit_to.max(index);
            }
            Action::RoleChanged { role, .. } => {
                self.machine.set_replying(role == Role::Leader);
                if role != Role::Leader {
                    self.abandon_waiters();
                    self.unsimulated.clear();
                    self.machine.discard_simulations();
                    self.timing.forget();
                }
            }
            Action::SendSnapshot { peer } => return self.send_snapshot(peer),
            Action::StoreSnapshotChunk(chunk) => return self.store_snapshot_chunk(chunk),
            Action::Unrecoverable(index) => {
                self.halt(format!(
                    "unrecoverable corruption at index {index}: every copy of this committed entry is damaged or lost"
                ));
            }
            Action::Diverged(divergence) => eprintln!(
                "node {}: DIVERGENCE after entry {}: node {} has state hash {}, node {} has {}",
                self.config.id,
                divergence.index,
                divergence.local.0,
                divergence.local.1,
                divergence.remote.0,
                divergence.remote.1
            ),
        }
        Vec::new()
    }

    fn queue_wal(&mut self, op: WalOp) {
        if !self.wal.send(op) {
            self.halt("the WAL thread stopped".into());
        }
    }

    /// Applies committed entries in order, answers the requests they finish, and tells the
    /// core each state hash.
    fn apply_committed(&mut self, index: EntryIndex) -> Vec<Action> {
        let mut out = Vec::new();
        while self.halted.is_none() && self.machine.applied_index() < index {
            let next = self.machine.applied_index().next();
            let Some(entry) = self.core.entry(next).cloned() else {
                self.halt(format!("entry {next} is committed but not in memory"));
                break;
            };
            let started = Instant::now();
            match self.machine.apply(&entry) {
                Ok(applied) => {
                    for reply in applied.replies {
                        self.answer(reply);
                    }
                    self.timing.applied(started);
                    let hash = AppliedHash {
                        index: applied.index,
                        hash: applied.state_hash,
                    };
                    self.core.step(Event::Applied(hash), &mut out);
                    self.maybe_start_snapshot();
                }
                Err(error) => self.halt(format!("apply stopped: {error}")),
            }
        }
        out
    }

    fn answer(&mut self, reply: Reply) {
        let Some(waiter) = self.waiters.remove(&(reply.client, reply.request)) else {
            return;
        };
        let message = match reply.status {
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
        };
        let _ = waiter.try_send(message);
    }

    fn not_leader(&self) -> ClientReply {
        let leader = self.core.leader().filter(|&l| l != self.config.id);
        let address = leader
            .and_then(|l| self.config.address(l))
            .map(|a| a.client_address.to_string());
        ClientReply::NotLeader { leader, address }
    }

    /// Answers every waiting client "not the leader" (they retry at the new leader; sessions
    /// make the retry exactly-once).
    fn abandon_waiters(&mut self) {
        self.batcher.drain();
        let answer = self.not_leader();
        for (_, waiter) in self.waiters.drain() {
            let _ = waiter.try_send(answer.clone());
        }
    }

    fn halt(&mut self, reason: String) {
        if self.halted.is_none() {
            eprintln!("node {}: halted: {reason}", self.config.id);
            self.halted = Some(reason);
            // Requests in flight may still commit through the other nodes: their clients are
            // told to ask elsewhere, never that nothing was applied.
            self.batcher.drain();
            let elsewhere = ClientReply::NotLeader {
                leader: None,
                address: None,
            };
            for (_, waiter) in self.waiters.drain() {
                let _ = waiter.try_send(elsewhere.clone());
            }
        }
    }

    fn on_client(&mut self, request: ClientRequest, reply: &mpsc::Sender<ClientReply>) {
        let answer = match request {
            ClientRequest::Status => Some(ClientReply::Status(Box::new(self.status()))),
            ClientRequest::SetMode(mode) => {
                self.machine.set_mode(mode);
                Some(ClientReply::ModeSet(mode))
            }
            ClientRequest::Submit(submit) => self.admit(submit, reply),
        };
        if let Some(answer) = answer {
            let _ = reply.try_send(answer);
        }
    }

    /// Takes a request into the batcher, or answers it at once (refused, not the leader, or
    /// already applied).
    fn admit(&mut self, submit: Submit, reply: &mpsc::Sender<ClientReply>) -> Option<ClientReply> {
        let request = submit.request;
        let reject = |reason| Some(ClientReply::Rejected { request, reason });
        if self.halted.is_some() {
            return reject(Rejection::Halted);
        }
        if self.core.role() != Role::Leader {
            return Some(self.not_leader());
        }
        let ends = match command_ends::<H>(&submit.commands, submit.command_count) {
            Ok(ends) => ends,
            Err(reason) => return reject(reason),
        };
        // From committed state only: a retry is never answered with what a simulation left.
        match self.machine.committed_answer(submit.client, request) {
            CommittedAnswer::Stale => return Some(ClientReply::Stale { request }),
            CommittedAnswer::Expired => return Some(ClientReply::Expired { request }),
            CommittedAnswer::Finished(command_count, results) => {
                return Some(ClientReply::Results {
                    client: submit.client,
                    request,
                    command_count,
                    results,
                });
            }
            CommittedAnswer::Unknown => {}
        }
        let key = (submit.client, request);
        if let Some(waiter) = self.waiters.get_mut(&key) {
            // A retry of a request in flight: answer on the newest connection.
            *waiter = reply.clone();
            return None;
        }
        // Only a request the sessions and the log do not know of is refused for a full disk:
        // one they know is answered (or waited for) as any retry is.
        if self.storage_full {
            return reject(Rejection::StorageFull);
        }
        let queued = Queued {
            client: submit.client,
            request,
            commands: Bytes::from(submit.commands),
            ends,
        };
        if self.batcher.push(queued).is_err() {
            return reject(Rejection::Busy);
        }
        self.timing.request_queued();
        self.waiters.insert(key, reply.clone());
        None
    }

    /// Forms entries from waiting requests while the pipeline has room.
    fn propose(&mut self) {
        while self.halted.is_none()
            && self.core.role() == Role::Leader
            && self.core.uncommitted() < self.config.pipeline_entries_max
        {
            let Some((payload, count)) = self.batcher.next_entry(now_ms()) else {
                return;
            };
            let mut out = Vec::new();
            let index = self
                .core
                .propose(EntryKind::Commands, count, payload, &mut out)
                .expect("the leader proposes");
            self.timing.proposed(index, !self.batcher.is_empty());
            self.unsimulated.push(index);
            self.carry_out(out);
        }
    }

    /// A follower applies committed entries when its WAL has nothing in flight: its
    /// acknowledgement (on the leader's critical path) goes out first, the apply (not on it)
    /// after. A follower whose WAL is never idle (a slow disk under steady load) applies
    /// anyway once it is [`FOLLOWER_APPLY_LAG_ENTRIES_MAX`] entries behind.
    fn catch_up(&mut self) {
        let idle =
            self.core.durable_index() == self.core.last_index() || self.core.role() == Role::Leader;
        let behind = self
            .commit_to
            .0
            .saturating_sub(self.machine.applied_index().0);
        if (idle || behind >= FOLLOWER_APPLY_LAG_ENTRIES_MAX) && behind > 0 {
            let out = self.apply_committed(self.commit_to);
            self.carry_out(out);
        }
    }

    /// Work kept off the critical path: simulations to run, committed entries to apply.
    fn has_deferred_work(&self) -> bool {
        !self.unsimulated.is_empty() || self.commit_to > self.machine.applied_index()
    }

    /// Simulates the entries proposed since the last call, in order (only while still leading
    /// and not yet applied: an entry applied first has nothing left to gain).
    fn simulate(&mut self) {
        for index in std::mem::take(&mut self.unsimulated) {
            if self.core.role() != Role::Leader || index <= self.machine.applied_index() {
                continue;
            }
            if let Some(entry) = self.core.entry(index).cloned() {
                let started = Instant::now();
                self.machine.simulate(&entry);
                self.timing.simulated(started);
            }
        }
    }

    fn status(&self) -> NodeStatus {
        NodeStatus {
            node: self.config.id,
            role: self.core.role(),
            term: self.core.term(),
            leader: self.core.leader(),
            last_index: self.core.last_index(),
            commit_index: self.core.commit_index(),
            applied_index: self.machine.applied_index(),
            state_hash: self.machine.state_hash(),
            divergence: self.core.divergence().cloned(),
            halted: self.halted.clone(),
            storage_full: self.storage_full,
            mode: self.machine.mode(),
            stages: {
                let counters = self.machine.counters();
                let mut stages = self.timing.stages;
                stages.simulated_commands = counters.simulated;
                stages.executed_commands = counters.executed;
                stages.reused_commands = counters.reused;
                stages.verified_commands = counters.verified;
                stages
            },
        }
    }
}
