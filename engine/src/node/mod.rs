//! The IO shell of a node, on tokio: the only place that reads the clock and does IO. The
//! driver owns a [`crate::replica::Replica`] (the whole protocol, sans-IO) and the
//! connections, feeds it what arrives (ticks, peers' messages, clients' requests, the WAL's and
//! the snapshot writer's reports) and carries out the IO it returns: sends, WAL work (on the
//! WAL's own thread, or inline on tmpfs), snapshot files, answers. Recovery at start is
//! `recovery`; every durable byte goes through `crate::storage`.

mod changes;
pub mod config;
mod connections;
mod driver;
mod http;
mod install;
pub mod local;
pub mod metrics;
pub mod probe;
pub mod process;
pub mod recovery;
pub mod rehearsal;

mod wal_io;
mod wal_prepare;
mod wal_thread;

/// The operator's files under the path programs were first written against; they live in
/// [`crate::operator`], which builds on this module (the node's code uses none of them).
#[doc(hidden)]
pub use crate::operator::{
    ClientFile, ClientNode, ClusterFile, ClusterFileError, ModeSetting, NodeEntry,
};
pub use connections::{
    CLIENT_CONNECTIONS_MAX, CLIENT_REPLIES_QUEUED_MAX, HANDSHAKE_TIMEOUT_MS,
    PEER_QUEUE_MESSAGES_MAX, RECONNECT_BACKOFF_MS_MAX, RECONNECT_BACKOFF_MS_MIN,
    SOCKET_BUFFER_BYTES,
};
/// The keys a cluster's nodes, applications and operators prove in every handshake, for
/// [`NodeConfig`].
pub use net::auth::{Credentials, Key, KeyRing, OperatorKey};
pub use wal_io::WalIo;

use crate::address::Address;
use crate::apply::ApplyError;
use crate::core::{ELECTION_TICKS_MIN_DEFAULT, HEARTBEAT_TICKS_DEFAULT};
use crate::entry::ENTRY_COMMANDS_MAX;
use crate::handler::Handler;
use crate::ids::NodeId;
use crate::state::{CapacityTooSmall, STATE_BYTES_DEFAULT};
use crate::storage::data_dir;
use crate::storage::hard_state::{HARD_STATE_DAMAGED_REASON, HardStateError};
use crate::wal::WalError;
use net::message::{ClientReply, ClientRequest, PeerMessage};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::thread::JoinHandle;
use tokio::sync::mpsc;
use wal_thread::WalEvent;

/// Milliseconds per tick of the consensus clock.
pub const TICK_MS_DEFAULT: u64 = 10;
/// Inputs (messages, requests, WAL events) a node queues before its connections wait.
pub const INBOX_INPUTS_MAX: usize = 4096;
/// Entries a leader keeps in flight (appended, not yet committed) when none is configured.
pub const PIPELINE_ENTRIES_DEFAULT: u64 = 8;

/// Where one node of the cluster listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddress {
    /// The node.
    pub id: NodeId,
    /// Address the other nodes reach it at (a name is resolved at every connection).
    pub peer_address: Address,
    /// Address clients reach it at.
    pub client_address: Address,
}

/// A node's configuration.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node.
    pub id: NodeId,
    /// The cluster's id: connections from other clusters are refused.
    pub cluster_id: u64,
    /// The keys the node accepts: the one nodes prove to each other (the same on every node;
    /// this node proves it too), the one applications prove (`None` when they need not
    /// authenticate) and the one operators prove.
    pub credentials: net::auth::Credentials,
    /// Keys the node recognizes on its client port and never admits: the client and peer
    /// secrets made into operator keys, each with whose secret it is (see
    /// [`crate::handshake::MisusedKeys`]). A handshake proving one is refused naming that
    /// role. The cluster file fills it; empty, such a proof is refused as unauthenticated (or
    /// taken for an application's where no client secret is set), as before.
    pub misused_keys: crate::handshake::MisusedKeys,
    /// TLS on every connection (peers, clients, the WAL thread's acknowledgements), set up
    /// from the cluster file's `tls_ca_file` and the node's `tls_cert_file` and
    /// `tls_key_file`; `None` for connections in clear.
    pub tls: Option<net::tls::Tls>,
    /// Every node of the cluster, this one included.
    pub nodes: Vec<NodeAddress>,
    /// Where this node keeps its WAL and hard state.
    pub data_dir: PathBuf,
    /// Most commands per entry (16 to 1,024).
    pub entry_commands_max: u32,
    /// State capacity in bytes.
    pub capacity_bytes: u64,
    /// Live client sessions the state keeps (the same on every node).
    pub sessions_max: usize,
    /// Seconds a client session is kept inactive, by the state clock (the same on every node).
    pub session_retention_s: u64,
    /// Milliseconds per tick.
    pub tick_ms: u64,
    /// Minimum election timeout in ticks.
    pub election_ticks_min: u32,
    /// Ticks between heartbeats.
    pub heartbeat_ticks: u32,
    /// Entries a leader keeps in flight.
    pub pipeline_entries_max: u64,
    /// Seed of the election timeouts.
    pub seed: u64,
    /// What this node does with its simulations when it leads.
    pub mode: crate::apply::Mode,
    /// Entries between captures of the committed state for snapshots (0: no snapshots).
    pub snapshot_every: u64,
    /// Least time a persisted snapshot is kept before a newer one replaces it.
    pub snapshot_retain_ms: u64,
    /// Snapshots may be deltas over the last one (`notes/decisions/snapshot-deltas.md`).
    pub snapshot_deltas: bool,
    /// Entries behind a durable snapshot a leader keeps for a lagging follower.
    pub lagging_entries_max: u64,
    /// Entries behind the last applied one the log (and with it the change stream) keeps at
    /// least, snapshots or not (0: only what recovery and lagging followers need).
    pub changes_retain_entries: u64,
    /// Followers keep each command that ran with its outcome for the change stream (the
    /// default); false keeps the outcomes' fingerprints only, and the stream is refused.
    pub change_stream: bool,
    /// Bytes after which the WAL starts a new segment (the unit in which a durable snapshot
    /// lets the log go).
    pub wal_segment_bytes: u64,
    /// Milliseconds added after every WAL fsync: emulates a slow disk, to show what one slow
    /// replica costs the others (0, the default, adds nothing).
    pub fsync_delay_ms: u64,
    /// Where the WAL's writes and fsyncs run: its own thread, or the node's (see [`WalIo`]).
    pub wal_io: WalIo,
    /// The operator's explicit order to start empty and take the state from the leader (the
    /// data is moved to quarantine, never deleted; see `node::recovery`). Off by default.
    pub rebuild_from_leader: bool,
    /// Join a running cluster: no member until a members entry names it (`runner member
    /// add`), whatever the cluster file lists. Kept in the data directory at the first start
    /// ([`data_dir::JOIN_FILE`]). Off by default: the cluster file's nodes are the first
    /// members.
    pub join: bool,
    /// Where the node serves its Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics_address: Option<SocketAddr>,
    /// Where the node listens for peers, when not where it is reached (`peer_address`
    /// resolved): a wildcard, or the machine's own address behind a NAT or a name.
    pub peer_bind_address: Option<SocketAddr>,
    /// Where the node listens for clients, when not at `client_address` resolved.
    pub client_bind_address: Option<SocketAddr>,
}

impl NodeConfig {
    /// A configuration with the defaults for everything but identity, place and the key the
    /// cluster's nodes share.
    pub fn new(
        id: NodeId,
        nodes: Vec<NodeAddress>,
        data_dir: PathBuf,
        peer_key: net::auth::Key,
    ) -> Self {
        NodeConfig {
            id,
            cluster_id: 1,
            credentials: net::auth::Credentials::of_peer_key(peer_key),
            misused_keys: Vec::new(),
            tls: None,
            nodes,
            data_dir,
            entry_commands_max: ENTRY_COMMANDS_MAX,
            capacity_bytes: STATE_BYTES_DEFAULT,
            sessions_max: crate::apply::SESSIONS_MAX_DEFAULT,
            session_retention_s: crate::apply::SESSION_RETENTION_S_DEFAULT,
            tick_ms: TICK_MS_DEFAULT,
            election_ticks_min: ELECTION_TICKS_MIN_DEFAULT,
            heartbeat_ticks: HEARTBEAT_TICKS_DEFAULT,
            pipeline_entries_max: PIPELINE_ENTRIES_DEFAULT,
            seed: 1,
            mode: crate::apply::Mode::default(),
            snapshot_every: crate::snapshot::SNAPSHOT_EVERY_DEFAULT,
            snapshot_retain_ms: crate::snapshot::SNAPSHOT_RETAIN_MS_DEFAULT,
            snapshot_deltas: false,
            lagging_entries_max: crate::core::LAGGING_FOLLOWER_ENTRIES_MAX,
            changes_retain_entries: 0,
            change_stream: true,
            wal_segment_bytes: crate::wal::WAL_SEGMENT_BYTES_DEFAULT,
            fsync_delay_ms: 0,
            wal_io: WalIo::Auto,
            rebuild_from_leader: false,
            join: false,
            metrics_address: None,
            peer_bind_address: None,
            client_bind_address: None,
        }
    }

    /// How this node recovers from its data directory.
    pub fn recovery_options(&self) -> recovery::RecoveryOptions {
        recovery::RecoveryOptions {
            capacity_bytes: self.capacity_bytes,
            sessions_max: self.sessions_max,
            session_retention_s: self.session_retention_s,
            wal_segment_bytes: self.wal_segment_bytes,
            owner: Some(recovery::Owner {
                cluster_id: self.cluster_id,
                node: self.id,
            }),
            rebuild_from_leader: self.rebuild_from_leader,
            keep_outcomes_after: None,
        }
    }

    /// Who may connect to this node.
    pub(crate) fn access(&self) -> connections::Access {
        connections::Access {
            me: self.id,
            cluster: self.cluster_id,
            // Any node of the cluster (it proves the peer key): members change through the log.
            nodes: (1..=u8::MAX)
                .map(NodeId)
                .filter(|&n| n != self.id)
                .collect(),
            keys: self.credentials.clone(),
            misused: std::sync::Arc::new(self.misused_keys.clone()),
            tls: self.tls.clone(),
        }
    }

    fn address(&self, id: NodeId) -> Option<&NodeAddress> {
        self.nodes.iter().find(|n| n.id == id)
    }
}

/// Why a node could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// A file or socket operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file, directory or address.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is damaged.
    #[error("{path}: damaged ({reason})")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The WAL failed.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// Replaying the log failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The configuration is invalid: every error found.
    #[error("configuration: {}", join(.0))]
    Config(Vec<config::ConfigError>),
    /// Recovery refused to start the node: nothing on disk was changed.
    #[error("refused: {0}")]
    Refused(#[from] recovery::Refusal),
    /// `--join` for a data directory that holds a first member's data.
    #[error(
        "{}: holds the data of one of the cluster's first members; start it without --join",
        .0.display()
    )]
    JoinHoldsData(PathBuf),
    /// The node's own address gives nothing to listen on.
    #[error("{key}: {source}; set {key}_bind_address (the address to listen on) or fix the name")]
    Bind {
        /// `peer` or `client`.
        key: &'static str,
        /// Why.
        source: crate::address::ResolveError,
    },
    /// The node thread ended before it listened.
    #[error("the node thread ended before it listened")]
    Thread,
    /// The state capacity cannot hold the handler's empty tables.
    #[error("capacity_bytes: {0}")]
    Capacity(#[from] CapacityTooSmall),
}

impl From<HardStateError> for NodeError {
    fn from(error: HardStateError) -> Self {
        match error {
            HardStateError::Io { path, source } => NodeError::Io { path, source },
            HardStateError::Damaged { path } => NodeError::Corrupt {
                path,
                reason: HARD_STATE_DAMAGED_REASON.into(),
            },
        }
    }
}

impl From<&NodeError> for crate::storage::IoFault {
    fn from(error: &NodeError) -> Self {
        let kind = match error {
            NodeError::Io { source, .. } => Some(source.kind()),
            NodeError::Wal(wal) => return wal.into(),
            NodeError::Corrupt { .. }
            | NodeError::Apply(_)
            | NodeError::Config(_)
            | NodeError::Refused(_)
            | NodeError::JoinHoldsData(_)
            | NodeError::Bind { .. }
            | NodeError::Thread
            | NodeError::Capacity(_) => None,
        };
        crate::storage::IoFault::new(kind, error)
    }
}

fn join(errors: &[config::ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Everything that reaches a node's event loop.
pub(crate) enum Input {
    Peer {
        from: NodeId,
        message: PeerMessage,
    },
    /// A peer connected to this node speaking this protocol version.
    PeerVersion {
        peer: NodeId,
        version: u16,
    },
    Client {
        request: ClientRequest,
        /// The role the connection's handshake proved, which permits the request.
        role: net::message::ClientRole,
        reply: mpsc::Sender<ClientReply>,
    },
    Wal(WalEvent),
    /// The snapshot writer made a snapshot durable, or failed to.
    Snapshot(Result<crate::snapshot::Durable, crate::snapshot::SnapshotError>),
    /// Sending a snapshot to a follower failed.
    SnapshotAborted(NodeId),
}

/// Longest a stop waits, after the node's thread ended, for its WAL thread and snapshot writer
/// to finish what they were given and release the data directory.
pub const STOP_RELEASE_WAIT_MS: u64 = 10_000;

/// A running node: stop it with [`NodeHandle::stop`] (or drop it).
pub struct NodeHandle {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    failed: Option<tokio::sync::oneshot::Receiver<String>>,
    /// Hears when the data directory's lock is released.
    released: Option<std::sync::mpsc::Receiver<()>>,
}

impl NodeHandle {
    /// Waits until the node stops for good on its own (its WAL failed: an fsync error) and
    /// returns why; never returns while it runs, or after it was stopped.
    pub async fn failure(&mut self) -> String {
        if let Some(failed) = self.failed.as_mut()
            && let Ok(reason) = failed.await
        {
            self.failed = None;
            return reason;
        }
        self.failed = None;
        std::future::pending().await
    }

    /// Stops the node and waits for its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            notify_supervisor(sd_notify::NotifyState::Stopping, "stopping");
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // The directory is free for another start once the last thread writing in it ended.
        if let Some(released) = self.released.take() {
            let _ = released.recv_timeout(std::time::Duration::from_millis(STOP_RELEASE_WAIT_MS));
        }
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Tells systemd (a `Type=notify` unit) that the node is `state`; nothing happens where no
/// supervisor listens (`NOTIFY_SOCKET` unset).
fn notify_supervisor(state: sd_notify::NotifyState<'_>, what: &str) {
    if let Err(error) = sd_notify::notify(false, &[state]) {
        tracing::warn!(%error, what, "could not notify systemd");
    }
}

/// Whether the node of `config` joins a running cluster: it was started with `--join` before
/// (its data directory says so), or is now, on its first start (then its data directory
/// keeps it). A first member's data directory is refused `--join`.
fn joins(config: &NodeConfig, first_start: bool) -> Result<bool, NodeError> {
    let dir = &config.data_dir;
    if data_dir::joined(dir) {
        return Ok(true);
    }
    if !config.join {
        return Ok(false);
    }
    if !first_start {
        return Err(NodeError::JoinHoldsData(dir.clone()));
    }
    data_dir::write_joined(dir).map_err(recovery::Refusal::from)?;
    Ok(true)
}

/// Where the node listens: the bind addresses it is given, or else where it is reached (a name
/// resolved now, its first address).
fn bind_addresses(config: &NodeConfig) -> Result<(SocketAddr, SocketAddr), NodeError> {
    let me = config.address(config.id).expect("validated: listed");
    let bind = |given: Option<SocketAddr>, reached: &Address, key| match given {
        Some(address) => Ok(address),
        None => reached
            .resolve_blocking()
            .map(|found| found[0])
            .map_err(|source| NodeError::Bind { key, source }),
    };
    Ok((
        bind(config.peer_bind_address, &me.peer_address, "peer")?,
        bind(config.client_bind_address, &me.client_address, "client")?,
    ))
}

/// The mode an operator set with `mode` (kept in the data directory) wins over the cluster
/// file's.
fn keep_mode_set(config: &mut NodeConfig) -> Result<(), NodeError> {
    let set = data_dir::read_mode(&config.data_dir).map_err(recovery::Refusal::from)?;
    if let Some(mode) = set.filter(|&mode| mode != config.mode) {
        tracing::info!(
            mode = format!("{mode:?}").to_lowercase(),
            file = %config.data_dir.join(data_dir::MODE_FILE).display(),
            "mode as set by `mode`, not the cluster file's"
        );
        config.mode = mode;
    }
    Ok(())
}

/// Logs what recovery found, when there is something to say.
fn log_recovery(config: &NodeConfig, report: &recovery::RecoveryReport) {
    if report.is_notable() || report.first_start {
        tracing::info!(data_dir = %config.data_dir.display(), "recovered: {report}");
    }
    if let Some(damage) = &report.damage {
        tracing::warn!(%damage, "repair: damaged WAL entries wait for the leader");
    }
}

/// What the node's thread shares with [`start`] and the handle.
struct NodeChannels {
    inbox: mpsc::Sender<Input>,
    inputs: mpsc::Receiver<Input>,
    /// Told once the node listens, or why it cannot.
    ready: std::sync::mpsc::Sender<Result<(), NodeError>>,
    stopped: tokio::sync::oneshot::Receiver<()>,
    /// Told why the node stopped for good.
    fail: tokio::sync::oneshot::Sender<String>,
}

/// The node's thread: its own runtime, its listeners at `addresses`, then the driver until
/// it stops.
fn node_thread<H: Handler>(
    config: NodeConfig,
    restored: recovery::Restored<H>,
    (peer_address, client_address): (SocketAddr, SocketAddr),
    channels: NodeChannels,
) {
    let NodeChannels {
        inbox,
        inputs,
        ready,
        stopped,
        fail,
    } = channels;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(source) => {
            let _ = ready.send(Err(NodeError::Io {
                path: PathBuf::from("tokio runtime"),
                source,
            }));
            return;
        }
    };
    runtime.block_on(async move {
        let metrics_address = config.metrics_address;
        let listeners = match driver::bind(peer_address, client_address, metrics_address).await {
            Ok(listeners) => {
                let _ = ready.send(Ok(()));
                listeners
            }
            Err(error) => {
                let _ = ready.send(Err(error));
                return;
            }
        };
        if let Some(reason) = driver::run(config, restored, listeners, inbox, inputs, stopped).await
        {
            tracing::error!(%reason, "stopped for good");
            let _ = fail.send(reason);
        }
    });
}

/// Recovers the node from its data directory and starts it on a thread of its own (a
/// single-threaded tokio runtime; the WAL has another thread). Returns once it listens.
pub fn start<H: Handler>(config: NodeConfig, handler: H) -> Result<NodeHandle, NodeError> {
    let mut errors = config.validate();
    if let Err(refused) = CapacityTooSmall::check(&handler.schema(), config.capacity_bytes) {
        errors.push(refused.into());
    }
    if !errors.is_empty() {
        return Err(NodeError::Config(errors));
    }
    // Every line the node logs, on any of its threads, is inside this span.
    let span = tracing::info_span!("node", id = config.id.0);
    let _entered = span.enter();
    tracing::info!(
        engine = env!("CARGO_PKG_VERSION"),
        formats = %crate::formats::describe(),
        "node starting"
    );
    let (peer_address, client_address) = bind_addresses(&config)?;
    let mut restored = recovery::restore(&config.data_dir, handler, &config.recovery_options())?;
    let mut config = config;
    keep_mode_set(&mut config)?;
    config.join = joins(&config, restored.report.first_start)?;
    let released = restored.lock.on_release();
    log_recovery(&config, &restored.report);
    let (inbox, inputs) = mpsc::channel(INBOX_INPUTS_MAX);
    let (ready, started) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let (fail, failed) = tokio::sync::oneshot::channel();
    let node_span = span.clone();
    let channels = NodeChannels {
        inbox,
        inputs,
        ready,
        stopped,
        fail,
    };
    let addresses = (peer_address, client_address);
    let thread = std::thread::Builder::new()
        .name(format!("node-{}", config.id))
        .spawn(move || {
            let _entered = node_span.entered();
            node_thread(config, restored, addresses, channels);
        })
        .map_err(|source| NodeError::Io {
            path: PathBuf::from("node thread"),
            source,
        })?;
    match started.recv() {
        Ok(Ok(())) => {
            notify_supervisor(sd_notify::NotifyState::Ready, "recovered and listening");
            Ok(NodeHandle {
                stop: Some(stop),
                thread: Some(thread),
                failed: Some(failed),
                released: Some(released),
            })
        }
        Ok(Err(error)) => {
            // The thread gives up the directory as it ends: wait, so that a retry finds it free.
            let _ = thread.join();
            let _ = released.recv_timeout(std::time::Duration::from_millis(STOP_RELEASE_WAIT_MS));
            Err(error)
        }
        Err(_) => Err(NodeError::Thread),
    }
}
