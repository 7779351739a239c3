//! The node's event loop: inputs in, each handed to the replica, and the IO it returns carried
//! out in order (a failed one halts the replica by its rule, `Replica::io_failed`); idle work
//! (`Replica::idle_work`) once the inputs that arrived together are handled.

use super::changes::ChangeSource;
use super::connections::{PeerAddresses, PeerWakes, accept_clients, accept_peers, connect_peer};
use super::install::{SnapshotSend, stream_snapshot};
use super::recovery::Restored;
use super::wal_io::WalWorker;
use super::wal_thread::{Acker, DiskSetup, InlineWal, WalEvent, WalThread};
use super::{Input, NodeConfig, NodeError};
use crate::address::Address;
use crate::core::CoreConfig;
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId};
use crate::members::Members;
use crate::replica::{Halt, Io, Note, Replica, ReplicaConfig, SnapshotWrite};
use crate::snapshot::{
    Intake, SNAPSHOT_LOG_PERCENT, SNAPSHOT_SLICE_INTERVAL_MS, SNAPSHOT_SLICE_SLOTS,
    SNAPSHOT_WRITE_BYTES, SnapshotWriter, snapshot_path,
};
use crate::storage::Files;
use crate::storage::data_dir::{self, DirLock};
use crate::storage::hard_state::{self, SNAPSHOT_DIR};
use crate::storage::members_file;
use net::message::{ClientReply, ClientRequest, PeerMessage, Role, SnapshotChunk};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The node's listening sockets.
pub(super) struct Listeners {
    peer: TcpListener,
    client: TcpListener,
    /// Where Prometheus scrapes, when the node serves metrics.
    metrics: Option<TcpListener>,
}

pub(super) async fn bind(
    peer: SocketAddr,
    client: SocketAddr,
    metrics: Option<SocketAddr>,
) -> Result<Listeners, NodeError> {
    let listen = |address: SocketAddr| async move {
        TcpListener::bind(address)
            .await
            .map_err(|source| NodeError::Io {
                path: PathBuf::from(address.to_string()),
                source,
            })
    };
    let metrics = match metrics {
        Some(address) => Some(listen(address).await?),
        None => None,
    };
    Ok(Listeners {
        peer: listen(peer).await?,
        client: listen(client).await?,
        metrics,
    })
}

/// The `handler` label of the node's metrics: the handler type's name, in lower case
/// (`bank::Bank` gives `bank`).
fn handler_label<H>() -> String {
    let name = std::any::type_name::<H>();
    let name = name.split('<').next().unwrap_or(name);
    let name = name.rsplit("::").next().unwrap_or(name);
    name.to_lowercase()
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
    let wakes = PeerWakes::new(
        config
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&id| id != config.id),
    );
    let metrics = super::metrics::NodeMetrics::new(&handler_label::<H>());
    let board = super::probe::Board::default();
    listen(listeners, &config, (&inbox, &wakes), (&metrics, &board));
    let mut driver = Driver::new(config, restored, inbox, wakes, (metrics, board))?;
    driver.publish();
    let mut ticker = tokio::time::interval(Duration::from_millis(driver.config.tick_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // A failed fsync may surface in any step below (with the WAL on this thread, in a
        // tick, a snapshot slice or a proposal too): the node stops before the next one.
        if let Some(reason) = driver.fatal.take() {
            return Some(reason);
        }
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
            () = std::future::ready(()), if driver.replica.snapshotting() => {
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
        driver.publish_if_due();
        // Release builds check what a round can have changed, at a cost that does not grow with
        // the log or the state; debug builds walk everything.
        match cfg!(debug_assertions) {
            true => driver.replica.check_invariants(),
            false => driver.replica.check_recent_invariants(),
        }
        if driver.replica.has_deferred_work() || driver.snapshot_slice_due() {
            // Let the connection tasks send what was queued first (appends, acknowledgements,
            // replies): simulation, a follower's apply and a busy node's snapshot slice then
            // run while those travel.
            tokio::task::yield_now().await;
            driver.idle_work();
        }
    }
}

/// Serves the node's listeners, each on tasks of its own: peers, clients and (when it has
/// one) the metrics address's HTTP endpoints.
fn listen(
    listeners: Listeners,
    config: &NodeConfig,
    (inbox, wakes): (&mpsc::Sender<Input>, &PeerWakes),
    (metrics, board): (&super::metrics::NodeMetrics, &super::probe::Board),
) {
    tokio::spawn(accept_peers(
        listeners.peer,
        config.access(),
        (inbox.clone(), metrics.clone()),
        wakes.clone(),
    ));
    tokio::spawn(accept_clients(
        listeners.client,
        config.access(),
        (inbox.clone(), metrics.clone()),
    ));
    if let Some(listener) = listeners.metrics {
        let endpoints = super::http::Endpoints {
            board: board.clone(),
            metrics: metrics.clone(),
            data_dir: config.data_dir.clone(),
        };
        tokio::spawn(super::http::serve(listener, endpoints));
    }
}

/// The WAL where `config.wal_io` puts it: on this thread, or on a thread of its own that
/// reports through `inbox` and acknowledges on connections of its own to the peers `found`.
fn start_wal(
    config: &NodeConfig,
    mut wal: crate::wal::Wal,
    disk: DiskSetup,
    (inbox, found): (&mpsc::Sender<Input>, &PeerAddresses),
) -> Option<WalWorker> {
    wal.set_zero_ahead(super::wal_io::zero_ahead_for(wal.dir()));
    let worker = if config.wal_io.inline_for(wal.dir(), config.fsync_delay_ms) {
        WalWorker::Inline(Box::new(InlineWal::new(wal, disk)))
    } else {
        let inbox = inbox.clone();
        let report = move |event| inbox.blocking_send(Input::Wal(event)).is_ok();
        let acker = Acker::new(config.access(), found.clone());
        let name = format!("wal-{}", config.id);
        match WalThread::spawn(wal, acker, name, disk, report) {
            Ok(thread) => WalWorker::Thread(thread),
            Err(error) => {
                tracing::error!(%error, "cannot start the WAL thread");
                return None;
            }
        }
    };
    let setting = config.wal_io.as_str();
    tracing::info!(setting, "WAL writes and fsyncs run on {}", worker.place());
    Some(worker)
}

/// Who waits for a client's answer: the channel to its connection.
type Waiter = mpsc::Sender<ClientReply>;

/// The replica's configuration from the node's.
fn replica_config(config: &NodeConfig) -> ReplicaConfig {
    ReplicaConfig {
        core: CoreConfig {
            id: config.id,
            // A node that joins is no member until a members entry names it.
            nodes: match config.join {
                true => Vec::new(),
                false => config.nodes.iter().map(|n| n.id).collect(),
            },
            election_ticks_min: config.election_ticks_min,
            heartbeat_ticks: config.heartbeat_ticks,
            seed: config.seed,
            lagging_entries_max: config.lagging_entries_max,
            pre_vote: true,
        },
        entry_commands_max: config.entry_commands_max,
        pipeline_entries_max: config.pipeline_entries_max,
        snapshot_every: config.snapshot_every,
        snapshot_retain_ticks: config.snapshot_retain_ms.div_ceil(config.tick_ms.max(1)),
        changes_retain_entries: config.changes_retain_entries,
        change_stream: config.change_stream,
        snapshot_deltas: config.snapshot_deltas,
        snapshot_turns: true,
        snapshot_log_percent: SNAPSHOT_LOG_PERCENT,
        snapshot_slice_slots: SNAPSHOT_SLICE_SLOTS,
        snapshot_write_bytes: SNAPSHOT_WRITE_BYTES,
        client_addresses: config
            .nodes
            .iter()
            .map(|n| (n.id, n.client_address.to_string()))
            .collect(),
    }
}

/// Carries out a [`Replica`]'s IO on tokio, the WAL thread and the snapshot writer.
struct Driver<H: Handler> {
    config: NodeConfig,
    replica: Replica<H, Waiter>,
    wal: WalWorker,
    peers: BTreeMap<NodeId, mpsc::Sender<PeerMessage>>,
    /// Leader: the number of the latest snapshot transfer to each follower (a newer one stops
    /// the one before).
    snapshot_sends: BTreeMap<NodeId, Arc<AtomicU64>>,
    /// Why the node must stop for good (a failed fsync): the event loop ends with it.
    fatal: Option<String>,
    /// For the snapshot writer and the tasks that send snapshots.
    inbox: mpsc::Sender<Input>,
    /// The background snapshot writer (none when snapshots are off).
    snapshots: Option<SnapshotWriter>,
    /// When the last slice of a snapshot ran.
    last_slice: Instant,
    /// Follower: the snapshots arriving from the leader.
    intake: Intake<Files>,
    /// The data directory's lock (the WAL thread and the snapshot writer hold it too).
    lock: Arc<DirLock>,
    /// Wake-ups of the connections to peers.
    wakes: PeerWakes,
    /// Where each peer was last reached (for the WAL thread's acknowledgements).
    found: PeerAddresses,
    /// The hard state holds a repair (damaged entries wait for a leader's copies).
    repairing: bool,
    /// What `GET /metrics` serves (the rare events are counted here).
    metrics: super::metrics::NodeMetrics,
    /// Where the figures the HTTP endpoints read are published, and when they last were.
    board: (super::probe::Board, Instant),
    /// When the last snapshot became durable (or the node started).
    snapshot_at: Instant,
    /// The WAL's queued work is being carried out on this thread (see `flush_wal`).
    flushing: bool,
    /// What the change stream serves from.
    changes: Arc<ChangeSource>,
}

impl<H: Handler> Driver<H> {
    fn new(
        config: NodeConfig,
        restored: Restored<H>,
        inbox: mpsc::Sender<Input>,
        wakes: PeerWakes,
        (metrics, board): (super::metrics::NodeMetrics, super::probe::Board),
    ) -> Option<Self> {
        // The data directory stays locked until the last thread that writes in it ends: the
        // WAL's and the snapshot writer's hold it beside this one.
        let lock = Arc::new(restored.lock);
        let found = PeerAddresses::default();
        let fsync_delay = Duration::from_millis(config.fsync_delay_ms);
        let (journaled, journal_watch) = tokio::sync::watch::channel(EntryIndex::ZERO);
        let disk = DiskSetup {
            slow: fsync_delay,
            lock: Arc::clone(&lock),
            counters: metrics.wal(),
            journaled,
        };
        let wal = start_wal(&config, restored.wal, disk, (&inbox, &found))?;
        let changes = Arc::new(ChangeSource::new(
            (config.id, config.change_stream),
            &config.data_dir,
            journal_watch,
        ));
        let peers = config
            .nodes
            .iter()
            .filter(|n| n.id != config.id)
            .map(|n| {
                let links = (wakes.clone(), found.clone());
                let address = n.peer_address.clone();
                let queue = connect_peer(config.access(), n.id, address, links, inbox.clone());
                (n.id, queue)
            })
            .collect();
        let repairing = restored.core.hard_state.repair.is_some();
        let mut machine = restored.machine;
        machine.set_mode(config.mode);
        // Each applied entry's state hash and outcomes go to the apply journal, which `replay`
        // compares a build with and the change stream serves.
        machine.set_journaling(true);
        let latest = restored.snapshot.map(|s| (s.meta.index, s.bytes));
        let replica = Replica::new(replica_config(&config), restored.core, machine, latest);
        let mut driver = Driver {
            replica,
            wal,
            peers,
            snapshot_sends: BTreeMap::new(),
            fatal: None,
            inbox,
            snapshots: None,
            last_slice: Instant::now(),
            intake: Intake::new(Files, config.data_dir.join(SNAPSHOT_DIR)),
            lock,
            wakes,
            found,
            repairing,
            metrics,
            board: (board, Instant::now()),
            snapshot_at: Instant::now(),
            flushing: false,
            changes,
            config,
        };
        driver.snapshots = driver.spawn_snapshot_writer(Arc::clone(&driver.lock));
        if driver.snapshots.is_none() {
            driver.replica.snapshots_off();
        }
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
                tracing::error!(%error, "no snapshots: cannot start the writer");
                None
            }
        }
    }

    /// True when a snapshot is in progress and no slice of it ran for
    /// [`SNAPSHOT_SLICE_INTERVAL_MS`] (the node was never idle).
    fn snapshot_slice_due(&self) -> bool {
        self.replica.snapshotting()
            && self.last_slice.elapsed() >= Duration::from_millis(SNAPSHOT_SLICE_INTERVAL_MS)
    }

    fn snapshot_slice(&mut self) {
        self.last_slice = Instant::now();
        let mut out = Vec::new();
        self.replica.snapshot_slice(&mut out);
        self.carry_out(out);
    }

    fn handle(&mut self, input: Input) {
        let mut out = Vec::new();
        let replica = &mut self.replica;
        match input {
            Input::Peer { from, message } => replica.receive(from, message, &mut out),
            Input::PeerVersion { peer, version } => replica.peer_protocol(peer, version),
            Input::Client {
                request,
                role,
                reply,
            } => {
                assert!(role.permits(&request), "the connection checks the role");
                self.on_client(request, reply, &mut out);
            }
            Input::Wal(WalEvent::Persisted { index, term }) => {
                replica.persisted(index, term, &mut out)
            }
            Input::Wal(WalEvent::Loaded { peer, entries }) => {
                replica.loaded(peer, entries, &mut out)
            }
            Input::Wal(WalEvent::AckFailed) => replica.ack_failed(&mut out),
            Input::Wal(WalEvent::Failed(failure)) => {
                // After a failed fsync the page cache's state is unknown: the node stops for
                // good (its process exits) rather than go on from a log it cannot trust.
                let halt = Halt::WalFailed(failure);
                self.fatal = Some(halt.to_string());
                replica.halt(halt, &mut out);
            }
            Input::Wal(WalEvent::Full(reason)) => {
                tracing::error!(%reason, "storage full: refusing new requests, retrying the append");
                replica.set_storage_full(true);
            }
            Input::Wal(WalEvent::SpaceBack) => {
                tracing::info!("storage has room again");
                replica.set_storage_full(false);
            }
            Input::Snapshot(Ok(durable)) => {
                let (index, bytes, took) = (durable.meta.index, durable.bytes, durable.took);
                let ms = took.as_secs_f64() * 1e3;
                let delta = durable.delta;
                tracing::debug!(index = index.0, bytes, ms, delta, "snapshot written");
                self.metrics.snapshot_written(bytes, took);
                self.snapshot_at = Instant::now();
                replica.snapshot_durable(&durable, &mut out)
            }
            Input::Snapshot(Err(error)) => {
                tracing::warn!(%error, "a snapshot failed");
                replica.snapshot_failed();
            }
            Input::SnapshotAborted(peer) => replica.snapshot_send_aborted(peer, &mut out),
        }
        self.carry_out(out);
    }

    fn tick(&mut self) {
        let mut out = Vec::new();
        self.replica.tick(now_ms(), &mut out);
        self.carry_out(out);
        self.publish_if_due();
    }

    /// Publishes when the last publication is [`PUBLISH_INTERVAL_MS`] old: from ticks, and
    /// from the input loop too, since a busy inbox can hold ticks back.
    ///
    /// [`PUBLISH_INTERVAL_MS`]: super::probe::PUBLISH_INTERVAL_MS
    fn publish_if_due(&mut self) {
        if self.board.1.elapsed() >= Duration::from_millis(super::probe::PUBLISH_INTERVAL_MS) {
            self.publish();
        }
    }

    fn propose(&mut self) {
        let mut out = Vec::new();
        self.replica.propose(now_ms(), &mut out);
        self.carry_out(out);
    }

    fn idle_work(&mut self) {
        let slice_due = self.snapshot_slice_due();
        if slice_due {
            self.last_slice = Instant::now();
        }
        let mut out = Vec::new();
        self.replica.idle_work(slice_due, &mut out);
        self.carry_out(out);
    }

    /// Carries out IO in order. When one fails the replica halts and nothing after it in this
    /// batch is carried out (a vote must not leave after its persistence failed) but answers
    /// to clients (taken from the waiters already: "not the leader", or results of committed
    /// entries) and what the halt asks for.
    fn carry_out(&mut self, ios: Vec<Io<Waiter>>) {
        let mut queue = VecDeque::from(ios);
        while let Some(io) = queue.pop_front() {
            let mut more = Vec::new();
            if let Err(halt) = self.execute(io, &mut more) {
                self.replica.io_failed(halt, &mut queue, &mut more);
            }
            queue.extend(more);
        }
        self.flush_wal();
    }

    /// Carries out the WAL work queued on this thread, when the WAL runs on it (`wal_io`), and
    /// takes what it reports as the WAL thread's reports are taken, in order: work that taking
    /// a report queues waits for the next round of this loop, never runs inside it.
    fn flush_wal(&mut self) {
        if self.flushing {
            return;
        }
        self.flushing = true;
        while let WalWorker::Inline(inline) = &mut self.wal {
            let mut acks = Vec::new();
            let mut events = inline.flush(&mut acks);
            for (to, message) in acks {
                // A full queue drops it, as the WAL thread's own connection would fail it.
                let queued = self.peers.get(&to).map(|queue| queue.try_send(message));
                if !matches!(queued, Some(Ok(()))) {
                    events.push(WalEvent::AckFailed);
                }
            }
            if events.is_empty() {
                break;
            }
            for event in events {
                self.handle(Input::Wal(event));
            }
        }
        self.flushing = false;
    }

    /// Carries out one IO; what the replica asks for meanwhile goes to `more`.
    fn execute(&mut self, io: Io<Waiter>, more: &mut Vec<Io<Waiter>>) -> Result<(), Halt> {
        match io {
            Io::Send { to, message } => {
                if let Some(queue) = self.peers.get(&to) {
                    // A full queue drops the message: consensus resends what matters.
                    let _ = queue.try_send(message);
                }
            }
            Io::PersistHardState(state) => {
                hard_state::write_hard_state(&self.config.data_dir, state)
                    .map_err(|error| Halt::HardState((&NodeError::from(error)).into()))?;
                self.repair_noted(state.repair.is_some());
            }
            Io::PersistKnownMembers(known) => {
                members_file::write_known_members(&self.config.data_dir, &known)
                    .map_err(|error| Halt::KnownMembers((&error).into()))?;
            }
            Io::Wal(op) => {
                if !self.wal.send(op) {
                    return Err(Halt::WalStopped);
                }
            }
            Io::Answer { to, reply } => {
                if let ClientReply::Rejected { request, reason } = &reply {
                    tracing::warn!(request = request.0, ?reason, "request refused");
                    self.metrics.refused(reason);
                }
                let _ = to.try_send(reply);
            }
            Io::SendSnapshot { peer, index, term } => self.send_snapshot(peer, index, term, more),
            Io::Snapshot(write) => self.write_snapshot(write),
            Io::StoreSnapshotChunk(chunk) => self.store_snapshot_chunk(chunk, more),
            Io::Note(Note::Members(members)) => {
                self.connect_members(&members);
                self.log(Note::Members(members));
            }
            Io::Note(note) => self.log(note),
        }
        Ok(())
    }

    /// Opens a connection to every member this node has none to. A node its cluster file
    /// lists is reached at the file's address; another at the address its members entry gives.
    /// Connections to nodes that left stay: the core sends them nothing.
    fn connect_members(&mut self, members: &Members) {
        for member in members.list() {
            if member.id == self.config.id || self.peers.contains_key(&member.id) {
                continue;
            }
            let listed = self.config.nodes.iter().find(|n| n.id == member.id);
            let address = match listed {
                Some(node) => node.peer_address.clone(),
                None => match member.peer_address.parse::<Address>() {
                    Ok(address) => address,
                    Err(error) => {
                        tracing::error!(member = member.id.0, %error, "member has no usable peer address");
                        continue;
                    }
                },
            };
            let links = (self.wakes.clone(), self.found.clone());
            let (access, inbox) = (self.config.access(), self.inbox.clone());
            let queue = connect_peer(access, member.id, address, links, inbox);
            self.peers.insert(member.id, queue);
        }
    }

    /// Logs what the replica noted (once each, with its fields), and counts it.
    fn log(&self, note: Note) {
        match note {
            Note::Applied(_) => {}
            Note::RoleChanged { role, term, leader } => {
                self.metrics.role_changed(role);
                let leader = leader.map(|l| l.0);
                match role {
                    Role::Candidate => tracing::info!(term = term.0, "election: campaigning"),
                    Role::Leader => tracing::info!(term = term.0, "leading"),
                    Role::Follower => tracing::info!(term = term.0, ?leader, "following"),
                }
            }
            Note::Installed { index, bytes } => {
                self.metrics.installed(bytes);
                tracing::info!(index = index.0, bytes, "installed the leader's snapshot");
            }
            Note::Diverged(divergence) => tracing::error!(
                index = divergence.index.0,
                local_node = divergence.local.0.0,
                local_hash = %divergence.local.1,
                remote_node = divergence.remote.0.0,
                remote_hash = %divergence.remote.1,
                "DIVERGENCE: state hashes differ after the same entry"
            ),
            Note::Halted(reason) => tracing::error!(%reason, "halted"),
            Note::Members(members) => {
                let members: Vec<u8> = members.ids().map(|n| n.0).collect();
                tracing::info!(?members, "members changed");
            }
        }
    }

    /// Hands snapshot bytes to the writer; a writer that stopped turns snapshots off.
    fn write_snapshot(&mut self, write: SnapshotWrite) {
        let Some(writer) = &self.snapshots else {
            self.replica.snapshots_off();
            return;
        };
        let sent = match write {
            SnapshotWrite::Begin(index) => writer.begin(index),
            SnapshotWrite::Bytes(bytes) => writer.bytes(bytes),
            SnapshotWrite::Finish(meta) => writer.finish(meta),
            SnapshotWrite::Abort => writer.abort(),
        };
        if !sent {
            tracing::error!("the snapshot writer stopped: no more snapshots");
            self.snapshots = None;
            self.replica.snapshots_off();
        }
    }

    /// Leader: streams the durable snapshot of `index` to `peer`.
    fn send_snapshot(
        &mut self,
        peer: NodeId,
        index: crate::ids::EntryIndex,
        term: crate::ids::Term,
        more: &mut Vec<Io<Waiter>>,
    ) {
        let Some(queue) = self.peers.get(&peer) else {
            self.replica.snapshot_send_aborted(peer, more);
            return;
        };
        let path = snapshot_path(&self.snapshot_dir(), index);
        let send = SnapshotSend::next(self.snapshot_sends.entry(peer).or_default());
        let about = (index, term, self.config.id);
        let stream = stream_snapshot(path, about, queue.clone(), send);
        let inbox = self.inbox.clone();
        tokio::spawn(async move {
            if let Err(error) = stream.await {
                tracing::warn!(peer = peer.0, %error, "sending a snapshot failed");
                let _ = inbox.send(Input::SnapshotAborted(peer)).await;
            }
        });
    }

    /// Follower: keeps a chunk of the leader's snapshot; once it is whole, verified and
    /// durable, hands it to the replica to install.
    fn store_snapshot_chunk(&mut self, chunk: SnapshotChunk, more: &mut Vec<Io<Waiter>>) {
        match self.intake.take(&chunk) {
            Ok(Some((snapshot, bytes))) => self.replica.snapshot_received(snapshot, bytes, more),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error),
        }
    }

    /// Switches to `mode` once it is kept in the data directory, so that it outlasts a
    /// restart; returns the mode in force (the old one when it could not be kept).
    fn set_mode(&mut self, mode: crate::apply::Mode) -> crate::apply::Mode {
        let name = format!("{mode:?}").to_lowercase();
        match data_dir::write_mode(&self.config.data_dir, mode) {
            Ok(()) => {
                self.replica.set_mode(mode);
                tracing::info!(mode = name, "mode set");
                mode
            }
            Err(error) => {
                tracing::error!(mode = name, %error, "mode not changed: it could not be kept");
                self.replica.machine().mode()
            }
        }
    }

    /// Publishes what the HTTP endpoints answer from.
    fn publish(&mut self) {
        let machine = self.replica.machine();
        let sessions = machine.sessions();
        let state = machine.state();
        let figures = super::probe::Figures {
            at: Instant::now(),
            status: self.replica.status(),
            latencies: self.replica.latencies().clone(),
            sessions: (
                sessions.len() as u64,
                sessions.bytes(),
                sessions.limit() as u64,
            ),
            state: (state.bytes_used(), state.capacity_bytes()),
            handler_version: machine.handler_version(),
            peers: self.replica.peer_lags(),
            snapshot_age: self.snapshot_at.elapsed(),
            leader_commit: self.replica.core().leader_commit(),
            changes: (self.changes).figures(machine.applied_index(), Instant::now()),
        };
        self.board.0.publish(figures);
        self.board.1 = Instant::now();
    }

    /// Logs and counts a repair's end: the hard state no longer holds one.
    fn repair_noted(&mut self, repairing: bool) {
        if self.repairing && !repairing {
            tracing::info!("repair finished: the damaged entries are whole again");
            self.metrics.repaired(1);
        }
        self.repairing = repairing;
    }

    fn on_client(&mut self, request: ClientRequest, reply: Waiter, out: &mut Vec<Io<Waiter>>) {
        match request {
            ClientRequest::Status => {
                let _ = reply.try_send(ClientReply::Status(Box::new(self.replica.status())));
            }
            ClientRequest::SetMode(mode) => {
                let _ = reply.try_send(ClientReply::ModeSet(self.set_mode(mode)));
            }
            ClientRequest::Submit(submit) => self.replica.admit(submit, reply, out),
            ClientRequest::SubmitKeyed(keyed) => self.replica.admit_keyed(keyed, reply, out),
            ClientRequest::Read(read) => self.replica.read(read, reply, out),
            ClientRequest::Resume(client) => self.replica.resume(client, reply, out),
            ClientRequest::ChangeMembers(change) => {
                let answer = self.replica.change_members(&change, out);
                let _ = reply.try_send(answer);
            }
            ClientRequest::Upgrade(version) => {
                let answer = self.replica.upgrade(version, out);
                if let ClientReply::Upgrading { index } = &answer {
                    tracing::info!(version, index = index.0, "handler upgrade proposed");
                }
                let _ = reply.try_send(answer);
            }
            ClientRequest::Versions => {
                let _ = reply.try_send(ClientReply::Versions(self.replica.versions()));
            }
            ClientRequest::Build => {
                let (version, commit) = crate::formats::binary();
                let _ = reply.try_send(ClientReply::Build(net::message::BuildInfo {
                    version: version.to_string(),
                    commit: commit.to_string(),
                    formats: crate::formats::describe(),
                }));
            }
            ClientRequest::Changes(request) => {
                let applied = self.replica.machine().applied_index();
                let source = Arc::clone(&self.changes);
                tokio::spawn(async move {
                    let answer = match source.answer(request, applied).await {
                        Ok(batch) => ClientReply::Changes(batch),
                        Err(refusal) => ClientReply::NoChanges(refusal),
                    };
                    let _ = reply.send(answer).await;
                });
            }
            ClientRequest::Backup(request) => {
                // Read off the event loop; the connection gets one piece per request.
                let who = (self.config.id, self.replica.machine().mode());
                let serve = super::install::serve_backup(self.snapshot_dir(), who, request, reply);
                tokio::spawn(serve);
            }
        }
    }
}
