//! A node's Prometheus metrics: one `prometheus-client` registry per node, served as text at
//! `GET /metrics` on the node's metrics address (`node::http`).
//!
//! The hot path pays next to nothing new: what the node keeps anyway (its status: role, term,
//! indexes, commands executed or reused; each stage's per-entry [`Latencies`]; its sessions;
//! each follower's lag) is published by the driver every
//! [`PUBLISH_INTERVAL_MS`](super::probe::PUBLISH_INTERVAL_MS) and copied into the registry at
//! each scrape. Per entry the replica adds one bucket count per stage to the sums it kept
//! already; per fsync the WAL thread one uncontended lock ([`WalCounters`]). Rare events (a
//! refusal, a snapshot installed or written, a role change, a connection, a repair) bump a
//! counter where they happen. Every series carries the label `handler`, which the binary
//! names.

use super::probe::Figures;
use super::process::ProcessFigures;
use crate::replica::{Latencies, PeerLag};
use net::message::{NodeStatus, Refusal, Rejection, Role, Stages};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
                // prometheus-client writes `le="+Inf"` for f64::MAX only (infinity would
                // come out as `inf`, which no query for `+Inf` finds).
                let upper = Latencies::upper_us(i).map_or(f64::MAX, |us| us as f64 / 1e6);
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

/// A follower, on the leader's per-peer series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Peer {
    peer: String,
}

/// The build that serves the metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Build {
    version: String,
    commit: String,
    protocol: String,
}

/// The node's gauges of its status, set from each publication.
#[derive(Clone, Default)]
struct StatusGauges {
    role: Gauge,
    leader_known: Gauge,
    term: Gauge,
    last_index: Gauge,
    commit_index: Gauge,
    applied_index: Gauge,
    storage_full: Gauge,
    halted: Gauge,
    diverged: Gauge,
    ready: Gauge,
    handler_version: Gauge,
}

/// What the operator watches fill up: the state, the sessions, the disk, the snapshots.
#[derive(Clone, Default)]
struct Room {
    state_bytes: Gauge,
    state_capacity_bytes: Gauge,
    sessions: Gauge,
    sessions_max: Gauge,
    session_bytes: Gauge,
    disk_free_bytes: Gauge,
    disk_size_bytes: Gauge,
    snapshot_age: Gauge<f64, AtomicU64>,
}

/// On the leader, each follower's replication.
#[derive(Clone, Default)]
struct PeerFamilies {
    lag_entries: Family<Peer, Gauge>,
    lag_seconds: Family<Peer, Gauge<f64, AtomicU64>>,
    round_trip_seconds: Family<Peer, Gauge<f64, AtomicU64>>,
}

/// The change stream: how far the journal has written and how far behind its readers are.
#[derive(Clone, Default)]
struct ChangeGauges {
    journaled_index: Gauge,
    readers: Gauge,
    reader_lag_entries: Gauge,
    reader_lag_seconds: Gauge<f64, AtomicU64>,
}

/// The process: CPU, memory, descriptors (the conventional `process_` names).
#[derive(Clone, Default)]
struct ProcessGauges {
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
}

/// Every metric of one node. Cloning shares the counters.
#[derive(Clone)]
pub struct NodeMetrics {
    registry: Arc<std::sync::Mutex<Registry>>,
    status: StatusGauges,
    room: Room,
    peers: PeerFamilies,
    changes: ChangeGauges,
    process: ProcessGauges,
    build: Family<Build, Gauge>,
    entries_committed: Counter,
    entries_applied: Counter,
    commands: Family<Kind, Counter>,
    stage_latency: Family<Stage, LatencyHistogram>,
    wal: WalCounters,
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

impl NodeMetrics {
    /// A registry with every metric at zero, the series labelled `handler="<handler>"`:
    /// `engine_*` for the node, `process_*` for its process.
    pub fn new(handler: &str) -> Self {
        let label = [("handler".into(), handler.to_string().into())];
        let metrics = NodeMetrics {
            registry: Arc::new(std::sync::Mutex::new(Registry::with_labels(
                label.into_iter(),
            ))),
            status: StatusGauges::default(),
            room: Room::default(),
            peers: PeerFamilies::default(),
            changes: ChangeGauges::default(),
            process: ProcessGauges::default(),
            build: Family::default(),
            entries_committed: Counter::default(),
            entries_applied: Counter::default(),
            commands: Family::default(),
            stage_latency: Family::default(),
            wal: WalCounters::default(),
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
        let (version, commit) = crate::formats::binary();
        let build = Build {
            version: version.to_string(),
            commit: commit.to_string(),
            protocol: crate::formats::PROTOCOL.to_string(),
        };
        metrics.build.get_or_create(&build).set(1);
        metrics.register();
        metrics
    }

    fn register(&self) {
        let mut root = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let r = root.sub_registry_with_prefix("engine");
        r.register(
            "build_info",
            "1, labelled with the binary's version and commit and the protocol it speaks",
            self.build.clone(),
        );
        self.register_status(r);
        self.register_room(r);
        self.register_peers(r);
        self.register_changes(r);
        self.register_data_path(r);
        self.register_events(r);
        let p = root.sub_registry_with_prefix("process");
        let process = &self.process;
        p.register_with_unit(
            "cpu",
            "user and system CPU time",
            Unit::Seconds,
            process.cpu_seconds.clone(),
        );
        p.register_with_unit(
            "resident_memory",
            "resident memory",
            Unit::Bytes,
            process.resident_bytes.clone(),
        );
        p.register("open_fds", "open descriptors", process.open_fds.clone());
        p.register(
            "max_fds",
            "the open-descriptor limit",
            process.max_fds.clone(),
        );
    }

    fn register_status(&self, r: &mut Registry) {
        let g = &self.status;
        let gauges = [
            ("role", "0 follower, 1 candidate, 2 leader", &g.role),
            (
                "leader_known",
                "1 while the node knows a leader",
                &g.leader_known,
            ),
            ("term", "the current term", &g.term),
            ("last_index", "the last log index", &g.last_index),
            ("commit_index", "the commit index", &g.commit_index),
            ("applied_index", "the last entry applied", &g.applied_index),
            ("storage_full", "1 while the disk is full", &g.storage_full),
            ("halted", "1 once the node stopped applying", &g.halted),
            (
                "diverged",
                "1 when its state differs from the leader's",
                &g.diverged,
            ),
            ("ready", "1 while /readyz answers 200", &g.ready),
            (
                "handler_version",
                "the handler version in force",
                &g.handler_version,
            ),
        ];
        for (name, help, gauge) in gauges {
            r.register(name, help, gauge.clone());
        }
    }

    fn register_room(&self, r: &mut Registry) {
        let room = &self.room;
        let bytes = [
            ("state", "bytes the state uses", &room.state_bytes),
            (
                "state_capacity",
                "the state's capacity",
                &room.state_capacity_bytes,
            ),
            (
                "session",
                "bytes the live sessions count",
                &room.session_bytes,
            ),
            (
                "disk_free",
                "bytes free on the data directory's disk",
                &room.disk_free_bytes,
            ),
            (
                "disk_size",
                "the data directory's disk",
                &room.disk_size_bytes,
            ),
        ];
        for (name, help, gauge) in bytes {
            r.register_with_unit(name, help, Unit::Bytes, gauge.clone());
        }
        r.register("sessions", "live client sessions", room.sessions.clone());
        r.register(
            "sessions_max",
            "the sessions kept at most",
            room.sessions_max.clone(),
        );
        r.register_with_unit(
            "snapshot_age",
            "since the last durable snapshot (since the start, before the first)",
            Unit::Seconds,
            room.snapshot_age.clone(),
        );
    }

    fn register_peers(&self, r: &mut Registry) {
        let peers = &self.peers;
        r.register(
            "peer_lag_entries",
            "on the leader: entries a follower has not acknowledged",
            peers.lag_entries.clone(),
        );
        r.register_with_unit(
            "peer_lag",
            "on the leader: how long the oldest entry a follower lacks has waited",
            Unit::Seconds,
            peers.lag_seconds.clone(),
        );
        r.register_with_unit(
            "peer_round_trip",
            "on the leader: proposal to a follower's durable acknowledgement, last entry",
            Unit::Seconds,
            peers.round_trip_seconds.clone(),
        );
    }

    fn register_changes(&self, r: &mut Registry) {
        let changes = &self.changes;
        r.register(
            "changes_journaled_index",
            "the last entry whose changes the apply journal has written",
            changes.journaled_index.clone(),
        );
        r.register(
            "changes_readers",
            "change-stream readers answered in the last minute",
            changes.readers.clone(),
        );
        r.register(
            "changes_reader_lag_entries",
            "applied entries the furthest-behind recent reader has not been sent",
            changes.reader_lag_entries.clone(),
        );
        r.register_with_unit(
            "changes_reader_lag",
            "how long the furthest-behind recent reader has lacked applied entries",
            Unit::Seconds,
            changes.reader_lag_seconds.clone(),
        );
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
            "stage_latency",
            "per-entry time of each stage of the data path",
            Unit::Seconds,
            self.stage_latency.clone(),
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
            Rejection::OlderMembers => "older_members",
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

    /// Counts `count` damaged entries repaired.
    pub fn repaired(&self, count: u64) {
        self.repairs.inc_by(count);
    }

    /// Copies the driver's last publication, the node's readiness and the process's figures
    /// into the registry (at each scrape).
    pub(crate) fn observe_published(
        &self,
        figures: Option<&Figures>,
        ready: bool,
        process: &ProcessFigures,
    ) {
        self.status.ready.set(i64::from(ready));
        self.observe_process(process);
        let Some(figures) = figures else {
            return;
        };
        self.observe(&figures.status);
        let l = &figures.latencies;
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
        let room = &self.room;
        let (sessions, bytes, max) = figures.sessions;
        room.sessions.set(sessions as i64);
        room.session_bytes.set(bytes as i64);
        room.sessions_max.set(max as i64);
        room.state_bytes.set(figures.state.0 as i64);
        room.state_capacity_bytes.set(figures.state.1 as i64);
        room.snapshot_age.set(figures.snapshot_age.as_secs_f64());
        (self.status.handler_version).set(i64::from(figures.handler_version));
        self.observe_peers(&figures.peers);
        let changes = &self.changes;
        let stream = &figures.changes;
        changes.journaled_index.set(stream.journaled.0 as i64);
        changes.readers.set(stream.readers as i64);
        changes.reader_lag_entries.set(stream.behind_entries as i64);
        changes.reader_lag_seconds.set(stream.behind_seconds);
    }

    /// Sets the per-peer series to `lags`; a follower no longer reported (this node stopped
    /// leading) has its series removed rather than frozen.
    fn observe_peers(&self, lags: &[PeerLag]) {
        let peers = &self.peers;
        peers.lag_entries.clear();
        peers.lag_seconds.clear();
        peers.round_trip_seconds.clear();
        for lag in lags {
            let peer = Peer {
                peer: lag.peer.0.to_string(),
            };
            peers
                .lag_entries
                .get_or_create(&peer)
                .set(lag.entries as i64);
            (peers.lag_seconds.get_or_create(&peer)).set(lag.us as f64 / 1e6);
            if let Some(us) = lag.round_trip_us {
                (peers.round_trip_seconds.get_or_create(&peer)).set(us as f64 / 1e6);
            }
        }
    }

    fn observe_process(&self, figures: &ProcessFigures) {
        let process = &self.process;
        if let Some(seconds) = figures.cpu_seconds {
            (process.cpu_seconds.inner()).store(seconds.to_bits(), Ordering::Relaxed);
        }
        let gauges = [
            (&process.resident_bytes, figures.resident_bytes),
            (&process.open_fds, figures.open_fds),
            (&process.max_fds, figures.max_fds),
            (
                &self.room.disk_free_bytes,
                figures.disk.map(|(free, _)| free),
            ),
            (
                &self.room.disk_size_bytes,
                figures.disk.map(|(_, size)| size),
            ),
        ];
        for (gauge, value) in gauges {
            if let Some(value) = value {
                gauge.set(value as i64);
            }
        }
    }

    /// Copies what `status` holds into the registry.
    pub fn observe(&self, status: &NodeStatus) {
        let g = &self.status;
        let role = match status.role {
            Role::Follower => 0,
            Role::Candidate => 1,
            Role::Leader => 2,
        };
        g.role.set(role);
        g.leader_known.set(i64::from(status.leader.is_some()));
        g.term.set(status.term.0 as i64);
        g.last_index.set(status.last_index.0 as i64);
        g.commit_index.set(status.commit_index.0 as i64);
        g.applied_index.set(status.applied_index.0 as i64);
        g.storage_full.set(i64::from(status.storage_full));
        g.halted.set(i64::from(status.halted.is_some()));
        g.diverged.set(i64::from(status.divergence.is_some()));
        // Counters that the status keeps cumulatively: copied, never counted twice.
        set(&self.entries_committed, status.commit_index.0);
        set(&self.entries_applied, status.stages.applied);
        self.observe_commands(&status.stages);
    }

    fn observe_commands(&self, stages: &Stages) {
        let commands = [
            ("simulated", stages.simulated_commands),
            ("executed", stages.executed_commands),
            ("reused", stages.reused_commands),
            ("verified", stages.verified_commands),
        ];
        for (kind, count) in commands {
            set(&self.commands.get_or_create(&Kind { kind }), count);
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
    refusal.label()
}

/// A role's label value.
pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Follower => "follower",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::StageLatencies;
    use net::ids::{EntryIndex, NodeId, Term};
    use std::time::Instant;

    fn status() -> NodeStatus {
        NodeStatus {
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
            stages: Stages::default(),
            members: vec![NodeId(1), NodeId(2), NodeId(3)],
            members_pending: false,
        }
    }

    /// Checks that every `engine_*` or `process_*` series the alert rules and the dashboard
    /// (`deploy/`) query is in `text`, a scrape with every family filled: a misspelt name is
    /// an alert that never fires. (A family with no series yet, no refusal so far, is left
    /// out of a scrape altogether.)
    fn the_rules_name_only_served_series(text: &str) {
        let served: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split(['{', ' ']).next())
            .collect();
        let rules = [
            (
                "alerts.yml",
                include_str!("../../../deploy/prometheus/alerts.yml"),
            ),
            (
                "engine.json",
                include_str!("../../../deploy/grafana/engine.json"),
            ),
        ];
        for (file, queries) in rules {
            let names = queries
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("engine_") || word.starts_with("process_"));
            for name in names {
                assert!(served.contains(name), "{file} queries {name}, not served");
            }
        }
    }

    fn figures(latencies: StageLatencies) -> Figures {
        let lag = PeerLag {
            peer: NodeId(3),
            entries: 4,
            us: 1_500,
            round_trip_us: Some(250),
        };
        Figures {
            at: Instant::now(),
            status: status(),
            latencies,
            sessions: (5, 640, 4096),
            state: (1_000, 8_000),
            handler_version: 3,
            peers: vec![lag],
            snapshot_age: Duration::from_millis(2_500),
            leader_commit: status().commit_index,
            changes: crate::node::changes::ChangeFigures {
                journaled: EntryIndex(9),
                readers: 2,
                behind_entries: 7,
                behind_seconds: 0.25,
            },
        }
    }

    fn process() -> ProcessFigures {
        ProcessFigures {
            cpu_seconds: Some(1.5),
            resident_bytes: Some(4096),
            open_fds: Some(12),
            max_fds: Some(65_536),
            disk: Some((10, 100)),
        }
    }

    fn assert_lines(text: &str, lines: &[&str]) {
        for line in lines {
            assert!(text.lines().any(|l| l == *line), "{line} not in\n{text}");
        }
    }

    /// Proves the text names every metric with the node's values and the handler's label,
    /// counters copied from the status (not added up over scrapes), refusals by reason, and
    /// the build.
    #[test]
    fn text_holds_the_status_and_the_counters() {
        let metrics = NodeMetrics::new("bank");
        let mut status = status();
        metrics.observe(&status);
        status.commit_index = EntryIndex(20);
        metrics.observe(&status);
        metrics.refused(&Rejection::Busy);
        metrics.refused(&Rejection::Busy);
        metrics.connected("client");
        let text = metrics.text();
        let (version, commit) = crate::formats::binary();
        let build = format!(
            "engine_build_info{{handler=\"bank\",version=\"{version}\",commit=\"{commit}\",\
             protocol=\"{}\"}} 1",
            crate::formats::PROTOCOL
        );
        assert_lines(
            &text,
            &[
                "engine_role{handler=\"bank\"} 2",
                "engine_leader_known{handler=\"bank\"} 1",
                "engine_term{handler=\"bank\"} 7",
                "engine_commit_index{handler=\"bank\"} 20",
                "engine_applied_index{handler=\"bank\"} 10",
                "engine_entries_committed_total{handler=\"bank\"} 20",
                "engine_refusals_total{handler=\"bank\",reason=\"busy\"} 2",
                "engine_connections_total{handler=\"bank\",kind=\"client\"} 1",
                &build,
            ],
        );
        assert!(text.ends_with("# EOF\n"));
        // The stage sums live in the histograms alone: no family repeats their _sum/_count.
        assert!(!text.contains("engine_stage_seconds") && !text.contains("stage_entries"));
    }

    /// Proves a publication's figures land in their series: the histograms (a stage's
    /// per-entry times, the WAL's fsyncs, snapshot writes) in seconds with cumulative
    /// buckets, the state, sessions, disk and process figures, each follower's lag, and that
    /// a follower no longer reported loses its series.
    #[test]
    fn a_publication_and_the_process_figures_are_exported() {
        let metrics = NodeMetrics::new("bank");
        let mut latencies = StageLatencies::default();
        for us in [3, 3, 700] {
            latencies.quorum.record(us);
        }
        let mut figures = figures(latencies);
        let process = process();
        metrics.observe_published(Some(&figures), true, &process);
        let wal = metrics.wal();
        wal.synced(40);
        wal.written(16_384);
        metrics.snapshot_written(1 << 20, Duration::from_millis(3));
        metrics.connection_refused(&Refusal::Unauthenticated);
        let h = "handler=\"bank\"";
        let text = metrics.text();
        let expected = [
            format!(
                "engine_stage_latency_seconds_bucket{{{h},le=\"0.000002\",stage=\"quorum\"}} 0"
            ),
            format!(
                "engine_stage_latency_seconds_bucket{{{h},le=\"0.000004\",stage=\"quorum\"}} 2"
            ),
            format!("engine_stage_latency_seconds_bucket{{{h},le=\"+Inf\",stage=\"quorum\"}} 3"),
            format!("engine_stage_latency_seconds_count{{{h},stage=\"quorum\"}} 3"),
            format!("engine_stage_latency_seconds_sum{{{h},stage=\"quorum\"}} 0.000706"),
            format!("engine_wal_fsync_seconds_count{{{h}}} 1"),
            format!("engine_wal_written_bytes_total{{{h}}} 16384"),
            format!("engine_snapshot_write_seconds_count{{{h}}} 1"),
            format!("engine_sessions{{{h}}} 5"),
            format!("engine_sessions_max{{{h}}} 4096"),
            format!("engine_session_bytes{{{h}}} 640"),
            format!("engine_state_bytes{{{h}}} 1000"),
            format!("engine_state_capacity_bytes{{{h}}} 8000"),
            format!("engine_handler_version{{{h}}} 3"),
            format!("engine_ready{{{h}}} 1"),
            format!("engine_snapshot_age_seconds{{{h}}} 2.5"),
            format!("engine_disk_free_bytes{{{h}}} 10"),
            format!("engine_disk_size_bytes{{{h}}} 100"),
            format!("engine_peer_lag_entries{{{h},peer=\"3\"}} 4"),
            format!("engine_changes_journaled_index{{{h}}} 9"),
            format!("engine_changes_readers{{{h}}} 2"),
            format!("engine_changes_reader_lag_entries{{{h}}} 7"),
            format!("engine_changes_reader_lag_seconds{{{h}}} 0.25"),
            format!("engine_peer_lag_seconds{{{h},peer=\"3\"}} 0.0015"),
            format!("engine_peer_round_trip_seconds{{{h},peer=\"3\"}} 0.00025"),
            format!("engine_refusals_total{{{h},reason=\"unauthenticated\"}} 1"),
            format!("process_cpu_seconds_total{{{h}}} 1.5"),
            format!("process_resident_memory_bytes{{{h}}} 4096"),
            format!("process_open_fds{{{h}}} 12"),
            format!("process_max_fds{{{h}}} 65536"),
        ];
        assert_lines(
            &text,
            &expected.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        the_rules_name_only_served_series(&text);
        figures.peers.clear();
        metrics.observe_published(Some(&figures), false, &process);
        let text = metrics.text();
        assert!(!text.contains("peer=\"3\""), "{text}");
        assert_lines(&text, &[&format!("engine_ready{{{h}}} 0")]);
    }
}
