//! A node's Prometheus metrics: one `prometheus-client` registry per node, served as text at
//! `GET /metrics` on the node's `metrics_address` by a minimal HTTP/1.1 responder.
//!
//! The hot path pays next to nothing new: what the node keeps anyway (its status: role, term,
//! indexes, the cumulative [`Stages`], commands executed or reused; each stage's per-entry
//! [`Latencies`]; its sessions) is read once per scrape, through the driver's inbox
//! (`Input::Scrape`), and copied into the registry then. Per entry the replica adds one
//! bucket count per stage to the sums it kept already; per fsync the WAL thread one
//! uncontended lock ([`WalCounters`]). Rare events (a refusal, a snapshot installed or
//! written, a role change, a connection, a repair) bump a counter where they happen.

use super::Input;
use crate::replica::{Latencies, StageLatencies};
use net::message::{NodeStatus, Refusal, Rejection, Role, Stages};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Most bytes of a scrape's request head read before it is answered (or refused).
pub const METRICS_REQUEST_BYTES_MAX: usize = 8 * 1024;

/// Longest a scrape connection may take to send its request head, in milliseconds.
pub const METRICS_REQUEST_TIMEOUT_MS: u64 = 2_000;

/// Longest a scrape waits for the driver's status, in milliseconds.
pub const METRICS_STATUS_TIMEOUT_MS: u64 = 2_000;

/// A label with one value, `reason` or `kind` or `stage`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Stage {
    stage: &'static str,
}

/// A histogram whose buckets are a [`Latencies`]' (powers of two of microseconds), exported
/// in seconds. Set whole from a copy at scrape time, or added to where it is kept.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram(Arc<std::sync::Mutex<Latencies>>);

impl LatencyHistogram {
    /// Replaces what it holds with `latencies`.
    fn set(&self, latencies: &Latencies) {
        latencies.clone_into(&mut self.lock());
    }

    /// Counts one time of `us` microseconds.
    pub fn record(&self, us: u64) {
        self.lock().record(us);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Latencies> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let latencies = self.lock().clone();
        let buckets: Vec<(f64, u64)> = (latencies.buckets.iter().enumerate())
            .map(|(i, &count)| {
                let upper = Latencies::upper_us(i).map_or(f64::INFINITY, |us| us as f64 / 1e6);
                (upper, count)
            })
            .collect();
        let sum = latencies.sum_us as f64 / 1e6;
        encoder.encode_histogram::<NoLabelSet>(sum, latencies.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// What the WAL thread counts as it goes: bytes written and each fsync's time.
#[derive(Clone, Debug, Default)]
pub struct WalCounters {
    bytes: Counter,
    fsyncs: LatencyHistogram,
}

impl WalCounters {
    /// The log has had `total` bytes written to it since the node started.
    pub fn written(&self, total: u64) {
        set(&self.bytes, total);
    }

    /// An fsync took `us` microseconds.
    pub fn synced(&self, us: u64) {
        self.fsyncs.record(us);
    }

    /// The fsyncs counted so far.
    #[cfg(test)]
    pub(crate) fn fsyncs(&self) -> u64 {
        self.fsyncs.lock().count
    }
}

/// What a scrape copies from the driver.
pub(crate) struct Scrape {
    pub(crate) status: NodeStatus,
    pub(crate) latencies: StageLatencies,
    /// Live client sessions, and the bytes they count in the state's capacity.
    pub(crate) sessions: (u64, u64),
}

/// Every metric of one node. Cloning shares the counters.
#[derive(Clone)]
pub struct NodeMetrics {
    registry: Arc<std::sync::Mutex<Registry>>,
    role: Gauge,
    term: Gauge,
    last_index: Gauge,
    commit_index: Gauge,
    applied_index: Gauge,
    storage_full: Gauge,
    halted: Gauge,
    entries_committed: Counter,
    entries_applied: Counter,
    commands: Family<Kind, Counter>,
    stage_seconds: Family<Stage, Counter<f64>>,
    stage_entries: Family<Stage, Counter>,
    stage_latency: Family<Stage, LatencyHistogram>,
    wal: WalCounters,
    sessions: Gauge,
    session_bytes: Gauge,
    snapshot_duration: LatencyHistogram,
    refusals: Family<Reason, Counter>,
    connections: Family<Kind, Counter>,
    role_changes: Family<Kind, Counter>,
    snapshots_installed: Counter,
    snapshot_installed_bytes: Counter,
    snapshots_written: Counter,
    snapshot_written_bytes: Counter,
    repairs: Counter,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// A registry with every metric at zero, under the prefix `engine`.
    pub fn new() -> Self {
        let metrics = NodeMetrics {
            registry: Arc::new(std::sync::Mutex::new(Registry::with_prefix("engine"))),
            role: Gauge::default(),
            term: Gauge::default(),
            last_index: Gauge::default(),
            commit_index: Gauge::default(),
            applied_index: Gauge::default(),
            storage_full: Gauge::default(),
            halted: Gauge::default(),
            entries_committed: Counter::default(),
            entries_applied: Counter::default(),
            commands: Family::default(),
            stage_seconds: Family::default(),
            stage_entries: Family::default(),
            stage_latency: Family::default(),
            wal: WalCounters::default(),
            sessions: Gauge::default(),
            session_bytes: Gauge::default(),
            snapshot_duration: LatencyHistogram::default(),
            refusals: Family::default(),
            connections: Family::default(),
            role_changes: Family::default(),
            snapshots_installed: Counter::default(),
            snapshot_installed_bytes: Counter::default(),
            snapshots_written: Counter::default(),
            snapshot_written_bytes: Counter::default(),
            repairs: Counter::default(),
        };
        metrics.register();
        metrics
    }

    fn register(&self) {
        let mut r = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let gauges = [
            ("role", "0 follower, 1 candidate, 2 leader", &self.role),
            ("term", "the current term", &self.term),
            ("last_index", "the last log index", &self.last_index),
            ("commit_index", "the commit index", &self.commit_index),
            (
                "applied_index",
                "the last entry applied",
                &self.applied_index,
            ),
            (
                "storage_full",
                "1 while the disk is full",
                &self.storage_full,
            ),
            ("halted", "1 once the node stopped applying", &self.halted),
            ("sessions", "live client sessions", &self.sessions),
        ];
        for (name, help, gauge) in gauges {
            r.register(name, help, gauge.clone());
        }
        self.register_data_path(&mut r);
        self.register_events(&mut r);
    }

    /// The entries, commands and bytes along the data path, and each stage's time.
    fn register_data_path(&self, r: &mut Registry) {
        r.register(
            "entries_committed",
            "entries committed since start",
            self.entries_committed.clone(),
        );
        r.register(
            "entries_applied",
            "entries applied since start",
            self.entries_applied.clone(),
        );
        r.register(
            "commands",
            "commands by kind: simulated, executed, reused, verified",
            self.commands.clone(),
        );
        r.register_with_unit(
            "stage",
            "time entries spent in each stage of the data path, summed",
            Unit::Seconds,
            self.stage_seconds.clone(),
        );
        r.register(
            "stage_entries",
            "entries each stage's sum covers",
            self.stage_entries.clone(),
        );
        r.register_with_unit(
            "stage_latency",
            "per-entry time of each stage of the data path",
            Unit::Seconds,
            self.stage_latency.clone(),
        );
        r.register_with_unit(
            "session",
            "bytes the live sessions count in the state's capacity",
            Unit::Bytes,
            self.session_bytes.clone(),
        );
        r.register_with_unit(
            "wal_written",
            "bytes written to the WAL since start",
            Unit::Bytes,
            self.wal.bytes.clone(),
        );
        r.register_with_unit(
            "wal_fsync",
            "time of each WAL fsync (the count is the fsyncs)",
            Unit::Seconds,
            self.wal.fsyncs.clone(),
        );
        r.register_with_unit(
            "snapshot_write",
            "time to write each snapshot, from its scan's start to its rename",
            Unit::Seconds,
            self.snapshot_duration.clone(),
        );
    }

    /// What happened to the node: refusals, connections, role changes, snapshots, repairs.
    fn register_events(&self, r: &mut Registry) {
        r.register(
            "refusals",
            "requests and connections refused, by reason",
            self.refusals.clone(),
        );
        r.register(
            "connections",
            "connections accepted, by kind",
            self.connections.clone(),
        );
        r.register(
            "role_changes",
            "role changes, by the role taken",
            self.role_changes.clone(),
        );
        r.register(
            "snapshots_installed",
            "leader snapshots installed",
            self.snapshots_installed.clone(),
        );
        r.register_with_unit(
            "snapshot_installed",
            "bytes of the leader snapshots installed",
            Unit::Bytes,
            self.snapshot_installed_bytes.clone(),
        );
        r.register(
            "snapshots_written",
            "snapshots made durable",
            self.snapshots_written.clone(),
        );
        r.register_with_unit(
            "snapshot_written",
            "bytes of the snapshots made durable",
            Unit::Bytes,
            self.snapshot_written_bytes.clone(),
        );
        r.register(
            "repairs",
            "repairs of damaged WAL entries finished (the leader's copies durable)",
            self.repairs.clone(),
        );
    }

    /// Counts a client request refused with `reason`.
    pub fn refused(&self, reason: &Rejection) {
        let reason = match reason {
            Rejection::Empty => "empty",
            Rejection::TooManyCommands { .. } => "too_many_commands",
            Rejection::Malformed { .. } => "malformed",
            Rejection::Halted => "halted",
            Rejection::Busy => "busy",
            Rejection::StorageFull => "storage_full",
            Rejection::NotReadOnly { .. } => "not_read_only",
        };
        self.refused_for(reason);
    }

    /// Counts a refusal for `reason` (a client [`Rejection`]'s or a refused connection's,
    /// [`refusal_reason`]).
    pub fn refused_for(&self, reason: &'static str) {
        self.refusals.get_or_create(&Reason { reason }).inc();
    }

    /// Counts a connection refused with `refusal`.
    pub fn connection_refused(&self, refusal: &Refusal) {
        self.refused_for(refusal_reason(refusal));
    }

    /// Counts a connection of `kind` (`peer` or `client`) accepted.
    pub fn connected(&self, kind: &'static str) {
        self.connections.get_or_create(&Kind { kind }).inc();
    }

    /// Counts a role change to `role`.
    pub fn role_changed(&self, role: Role) {
        self.role_changes
            .get_or_create(&Kind {
                kind: role_name(role),
            })
            .inc();
    }

    /// Counts a leader snapshot of `bytes` installed.
    pub fn installed(&self, bytes: u64) {
        self.snapshots_installed.inc();
        self.snapshot_installed_bytes.inc_by(bytes);
    }

    /// Counts a snapshot of `bytes` made durable, written in `took`.
    pub fn snapshot_written(&self, bytes: u64, took: Duration) {
        self.snapshots_written.inc();
        self.snapshot_written_bytes.inc_by(bytes);
        self.snapshot_duration.record(took.as_micros() as u64);
    }

    /// The counters the WAL thread adds to.
    pub fn wal(&self) -> WalCounters {
        self.wal.clone()
    }

    /// Copies what a scrape took from the driver into the registry.
    pub(crate) fn observe_scrape(&self, scrape: &Scrape) {
        self.observe(&scrape.status);
        let l = &scrape.latencies;
        let stages = [
            ("batch_wait", &l.batch_wait),
            ("wal", &l.wal),
            ("quorum", &l.quorum),
            ("simulate", &l.simulate),
            ("apply", &l.apply),
            ("follower_wal", &l.follower_wal),
        ];
        for (stage, latencies) in stages {
            self.stage_latency
                .get_or_create(&Stage { stage })
                .set(latencies);
        }
        let (sessions, bytes) = scrape.sessions;
        self.sessions.set(sessions as i64);
        self.session_bytes.set(bytes as i64);
    }

    /// Counts `count` damaged entries repaired.
    pub fn repaired(&self, count: u64) {
        self.repairs.inc_by(count);
    }

    /// Copies what `status` holds into the registry.
    pub fn observe(&self, status: &NodeStatus) {
        let role = match status.role {
            Role::Follower => 0,
            Role::Candidate => 1,
            Role::Leader => 2,
        };
        self.role.set(role);
        self.term.set(status.term.0 as i64);
        self.last_index.set(status.last_index.0 as i64);
        self.commit_index.set(status.commit_index.0 as i64);
        self.applied_index.set(status.applied_index.0 as i64);
        self.storage_full.set(i64::from(status.storage_full));
        self.halted.set(i64::from(status.halted.is_some()));
        // Counters that the status keeps cumulatively: copied, never counted twice.
        set(&self.entries_committed, status.commit_index.0);
        set(&self.entries_applied, status.stages.applied);
        self.observe_stages(&status.stages);
    }

    fn observe_stages(&self, stages: &Stages) {
        let commands = [
            ("simulated", stages.simulated_commands),
            ("executed", stages.executed_commands),
            ("reused", stages.reused_commands),
            ("verified", stages.verified_commands),
        ];
        for (kind, count) in commands {
            set(&self.commands.get_or_create(&Kind { kind }), count);
        }
        let times = [
            ("batch_wait", stages.batch_wait_us, stages.proposed),
            ("wal", stages.wal_us, stages.proposed),
            ("quorum", stages.quorum_us, stages.proposed),
            ("simulate", stages.simulate_us, stages.proposed),
            ("apply", stages.apply_us, stages.applied),
            ("follower_wal", stages.follower_wal_us, stages.received),
        ];
        for (stage, us, entries) in times {
            let seconds = self.stage_seconds.get_or_create(&Stage { stage });
            seconds
                .inner()
                .store((us as f64 / 1e6).to_bits(), Ordering::Relaxed);
            set(&self.stage_entries.get_or_create(&Stage { stage }), entries);
        }
    }

    /// The registry as Prometheus (OpenMetrics) text.
    pub fn text(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        prometheus_client::encoding::text::encode(&mut text, &registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// Sets a counter to a cumulative value its source keeps (the source only grows).
fn set(counter: &Counter, value: u64) {
    counter.inner().store(value, Ordering::Relaxed);
}

/// A refused connection's label value.
pub fn refusal_reason(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Version { .. } => "version",
        Refusal::WrongCluster { .. } => "wrong_cluster",
        Refusal::NotAPeer { .. } => "not_a_peer",
        Refusal::NodeOnClientPort => "node_on_client_port",
        Refusal::Unauthenticated => "unauthenticated",
        Refusal::Forbidden { .. } => "forbidden",
        Refusal::TooManyConnections { .. } => "too_many_connections",
        Refusal::HandshakeTimeout => "handshake_timeout",
        Refusal::ReadTimeout => "read_timeout",
        Refusal::IdleTimeout => "idle_timeout",
        Refusal::EmptyFrame => "empty_frame",
        Refusal::FrameTooLarge { .. } => "frame_too_large",
        Refusal::BadCrc => "bad_crc",
        Refusal::Undecodable => "undecodable",
    }
}

/// A role's label value.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Follower => "follower",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
    }
}

/// Serves `GET /metrics` on `listener` until the node stops: each scrape asks the driver for
/// its status through `inbox`, copies it into `metrics` and answers the text.
pub(super) async fn serve(listener: TcpListener, metrics: NodeMetrics, inbox: mpsc::Sender<Input>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (metrics, inbox) = (metrics.clone(), inbox.clone());
        tokio::spawn(async move {
            if let Err(error) = answer(stream, &metrics, &inbox).await {
                tracing::debug!(%error, "metrics scrape failed");
            }
        });
    }
}

/// Reads one request head and answers it.
async fn answer(
    mut stream: TcpStream,
    metrics: &NodeMetrics,
    inbox: &mpsc::Sender<Input>,
) -> std::io::Result<()> {
    let timeout = Duration::from_millis(METRICS_REQUEST_TIMEOUT_MS);
    let head = tokio::time::timeout(timeout, read_head(&mut stream))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    let response = if head.starts_with(b"GET /metrics ") || head.starts_with(b"GET /metrics?") {
        match scrape(inbox).await {
            Some(scrape) => metrics.observe_scrape(&scrape),
            None => tracing::debug!("metrics: no status from the driver; serving the last"),
        }
        let body = metrics.text();
        let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
        response("200 OK", kind, &body)
    } else {
        response(
            "404 Not Found",
            "text/plain",
            "only GET /metrics is served\n",
        )
    };
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The request head, up to the blank line (or [`METRICS_REQUEST_BYTES_MAX`] bytes).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < METRICS_REQUEST_BYTES_MAX {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    Ok(head)
}

fn response(status: &str, kind: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// What the driver keeps, asked through its inbox.
async fn scrape(inbox: &mpsc::Sender<Input>) -> Option<Scrape> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    inbox.send(Input::Scrape(reply)).await.ok()?;
    let timeout = Duration::from_millis(METRICS_STATUS_TIMEOUT_MS);
    tokio::time::timeout(timeout, answer).await.ok()?.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::ids::{EntryIndex, NodeId, Term};

    /// Proves the text names every metric with the node's values, counters copied from the
    /// status (not added up over scrapes), refusals by reason.
    #[test]
    fn text_holds_the_status_and_the_counters() {
        let metrics = NodeMetrics::new();
        let mut status = NodeStatus {
            node: NodeId(2),
            role: Role::Leader,
            term: Term(7),
            leader: Some(NodeId(2)),
            last_index: EntryIndex(12),
            commit_index: EntryIndex(11),
            applied_index: EntryIndex(10),
            state_hash: Default::default(),
            divergence: None,
            halted: None,
            storage_full: false,
            mode: Default::default(),
            stages: Stages {
                proposed: 4,
                wal_us: 2_500_000,
                ..Stages::default()
            },
            members: vec![NodeId(1), NodeId(2), NodeId(3)],
            members_pending: false,
        };
        metrics.observe(&status);
        status.commit_index = EntryIndex(20);
        metrics.observe(&status);
        metrics.refused(&Rejection::Busy);
        metrics.refused(&Rejection::Busy);
        metrics.connected("client");
        let text = metrics.text();
        for line in [
            "engine_role 2",
            "engine_term 7",
            "engine_commit_index 20",
            "engine_applied_index 10",
            "engine_entries_committed_total 20",
            "engine_refusals_total{reason=\"busy\"} 2",
            "engine_connections_total{kind=\"client\"} 1",
            "engine_stage_seconds_total{stage=\"wal\"} 2.5",
            "engine_stage_entries_total{stage=\"wal\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    /// Proves the histograms (a stage's per-entry times, the WAL's fsyncs, snapshot writes)
    /// come out in seconds with cumulative buckets, and the WAL bytes, sessions and connection
    /// refusals with them.
    #[test]
    fn histograms_and_wal_counters_are_exported() {
        let metrics = NodeMetrics::new();
        let mut latencies = StageLatencies::default();
        for us in [3, 3, 700] {
            latencies.quorum.record(us);
        }
        let status = NodeStatus {
            node: NodeId(1),
            role: Role::Follower,
            term: Term(1),
            leader: None,
            last_index: EntryIndex(0),
            commit_index: EntryIndex(0),
            applied_index: EntryIndex(0),
            state_hash: Default::default(),
            divergence: None,
            halted: None,
            storage_full: false,
            mode: Default::default(),
            stages: Stages::default(),
            members: vec![],
            members_pending: false,
        };
        let scrape = Scrape {
            status,
            latencies,
            sessions: (5, 640),
        };
        metrics.observe_scrape(&scrape);
        let wal = metrics.wal();
        wal.synced(40);
        wal.written(16_384);
        metrics.snapshot_written(1 << 20, Duration::from_millis(3));
        metrics.connection_refused(&Refusal::Unauthenticated);
        let text = metrics.text();
        for line in [
            "engine_stage_latency_seconds_bucket{le=\"0.000002\",stage=\"quorum\"} 0",
            "engine_stage_latency_seconds_bucket{le=\"0.000004\",stage=\"quorum\"} 2",
            "engine_stage_latency_seconds_bucket{le=\"0.001024\",stage=\"quorum\"} 3",
            "engine_stage_latency_seconds_count{stage=\"quorum\"} 3",
            "engine_stage_latency_seconds_sum{stage=\"quorum\"} 0.000706",
            "engine_wal_fsync_seconds_count 1",
            "engine_wal_written_bytes_total 16384",
            "engine_snapshot_write_seconds_count 1",
            "engine_sessions 5",
            "engine_session_bytes 640",
            "engine_refusals_total{reason=\"unauthenticated\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
