//! `recover`: what a start of a stopped node's data directory would do, worked out
//! without writing a byte (the log is opened read-only and replayed in memory, under a shared
//! lock that a running node refuses), and timed.

use crate::handler::Handler;
use crate::node::ClusterFile;
use crate::node::NodeError;
use crate::node::recovery::{Inspection, Owner, RecoveryOptions, RecoveryReport, inspect};
use crate::state::STATE_BYTES_DEFAULT;
use crate::storage::data_dir::read_identity;
use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Which stopped node's data directory a command reads, and as which node: `--data-dir`, or
/// `--cluster F --id N` (its directory and settings from the cluster file). `recover` and
/// `replay` take these.
#[derive(Args, Debug)]
pub struct StoppedNode {
    /// The node's data directory (the node must be stopped); with --cluster, the file's.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The cluster file: as node --id is configured there (its directory, capacity, sessions,
    /// segment size, and the cluster and node its directory must belong to).
    #[arg(long, requires = "id")]
    pub cluster: Option<PathBuf>,
    /// The node's id in the cluster file.
    #[arg(long, requires = "cluster")]
    pub id: Option<u8>,
    /// State capacity, in bytes (default: the cluster file's, or 2 GiB).
    #[arg(long)]
    pub capacity_bytes: Option<u64>,
}

impl StoppedNode {
    /// The directory, and the node's configuration when a cluster file names it.
    pub fn resolve(&self) -> anyhow::Result<(PathBuf, Option<crate::node::NodeConfig>)> {
        let config = match (&self.cluster, self.id) {
            (Some(path), Some(id)) => Some(ClusterFile::read(path)?.node_config(id)?),
            _ => None,
        };
        let dir = self.data_dir.clone();
        let dir = dir.or_else(|| config.as_ref().map(|c| c.data_dir.clone()));
        let dir = dir.context("give --data-dir, or --cluster and --id")?;
        Ok((dir, config))
    }
}

/// Options of `recover`.
#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// The node.
    #[command(flatten)]
    pub node: StoppedNode,
    /// The table, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Where and how to recover, from the arguments.
fn target(args: &RecoverArgs) -> anyhow::Result<(PathBuf, RecoveryOptions)> {
    let (dir, config) = args.node.resolve()?;
    let mut options = match config {
        Some(config) => config.recovery_options(),
        None => RecoveryOptions {
            capacity_bytes: STATE_BYTES_DEFAULT,
            sessions_max: crate::apply::SESSIONS_MAX_DEFAULT,
            session_retention_s: crate::apply::SESSION_RETENTION_S_DEFAULT,
            wal_segment_bytes: crate::wal::WAL_SEGMENT_BYTES_DEFAULT,
            owner: None,
            rebuild_from_leader: false,
            keep_outcomes_after: None,
        },
    };
    if let Some(capacity) = args.node.capacity_bytes {
        options.capacity_bytes = capacity;
    }
    Ok((dir, options))
}

/// Reports what a start of the directory would do, or what it would refuse (then exits 1);
/// writes nothing.
pub fn recover<H: Handler>(args: RecoverArgs, handler: H) -> anyhow::Result<()> {
    let (dir, options) = target(&args)?;
    let identity = match read_identity(&dir) {
        Ok(Some(i)) => {
            let tables: Vec<String> = i
                .tables
                .iter()
                .map(|(id, name)| format!("{id} {name}"))
                .collect();
            let tables = tables.join(", ");
            format!(
                "cluster {}, node {}, tables: {tables}",
                i.cluster_id, i.node
            )
        }
        Ok(None) => "none stamped".into(),
        Err(error) => error.to_string(),
    };
    let inspected = inspect(&dir, handler, &options);
    let json = as_json(&dir, &identity, &inspected);
    args.output
        .emit(&json, || print_table(&identity, &inspected, options.owner))?;
    match inspected {
        // The refusal is printed above; the exit code tells scripts.
        Err(error) => Err(super::coded(
            super::Exit::Negative,
            anyhow::anyhow!("a start would refuse: {}", refusal(&error)),
        )),
        Ok(_) => Ok(()),
    }
}

/// The refusal itself, without the "refused:" a node's error puts before it.
fn refusal(error: &NodeError) -> String {
    if let NodeError::Refused(refusal) = error {
        return refusal.to_string();
    }
    error.to_string()
}

fn as_json<H: Handler>(
    dir: &std::path::Path,
    identity: &str,
    inspected: &Result<Inspection<H>, NodeError>,
) -> Value {
    let mut value = json!({
        "data_dir": dir.display().to_string(),
        "identity": identity,
        "written": false,
    });
    match inspected {
        Ok(Inspection { machine, report }) => {
            let fields = json!({
                "would_refuse": Value::Null,
                "recovery_ms": report.took.as_secs_f64() * 1e3,
                "first_start": report.first_start,
                "snapshot_index": report.snapshot.map_or(0, |(index, _)| index.0),
                "snapshot_bytes": report.snapshot.map_or(0, |(_, bytes)| bytes),
                "delta_entries": report.deltas,
                "replayed_entries": report.replayed,
                "discarded_entries": report.discarded,
                "torn_tail_bytes": report.torn_tail_bytes,
                "refused_snapshots": report.passed_over,
                "would_quarantine": report.quarantined.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "damage": report.damage,
                "would_stamp": report.stamped,
                "applied_index": machine.applied_index().0,
                "state_hash": machine.state_hash().to_string(),
                "state_bytes": machine.state().bytes_used(),
            });
            merge(&mut value, fields);
        }
        Err(error) => merge(&mut value, json!({ "would_refuse": refusal(error) })),
    }
    value
}

fn merge(into: &mut Value, from: Value) {
    if let (Value::Object(into), Value::Object(from)) = (into, from) {
        into.extend(from);
    }
}

fn print_table<H: Handler>(
    identity: &str,
    inspected: &Result<Inspection<H>, NodeError>,
    owner: Option<Owner>,
) {
    crate::outln!("identity: {identity}");
    if owner.is_none() {
        crate::outln!("(give --cluster and --id to check it against the node's configuration)");
    }
    match inspected {
        Ok(Inspection { machine, report }) => {
            crate::outln!(
                "{:>12} {:>14} {:>10} {:>10} {:>12} {:>10}  state hash",
                "recovery ms",
                "snapshot at",
                "MiB",
                "replayed",
                "applied",
                "state MiB"
            );
            crate::outln!(
                "{:>12.0} {:>14} {:>10.1} {:>10} {:>12} {:>10.1}  {}",
                report.took.as_secs_f64() * 1e3,
                report.snapshot.map_or(0, |(index, _)| index.0),
                report.snapshot.map_or(0, |(_, bytes)| bytes) as f64 / (1024.0 * 1024.0),
                report.replayed,
                machine.applied_index().0,
                machine.state().bytes_used() as f64 / (1024.0 * 1024.0),
                machine.state_hash()
            );
            for line in would_do(report) {
                crate::outln!("a start would {line}");
            }
        }
        Err(error) => crate::outln!("a start would refuse: {}", refusal(error)),
    }
    crate::outln!("nothing was written");
}

/// What a start would change on disk, one line each (or that it changes nothing).
fn would_do(report: &RecoveryReport) -> Vec<String> {
    let mut lines = Vec::new();
    if report.first_start {
        lines.push("be a first start (the directory holds no data)".into());
    }
    if report.torn_tail_bytes > 0 {
        lines.push(format!(
            "cut a torn tail of {} bytes off the WAL",
            report.torn_tail_bytes
        ));
    }
    if let Some(damage) = &report.damage {
        lines.push(format!("repair: {damage}"));
    }
    if report.deltas > 0 {
        lines.push(format!(
            "load the deltas over the snapshot, {} entries past it",
            report.deltas
        ));
    }
    for passed in &report.passed_over {
        lines.push(format!("pass over {passed}"));
    }
    for path in &report.quarantined {
        lines.push(format!("move {} to quarantine/", path.display()));
    }
    if report.discarded > 0 {
        lines.push(format!(
            "remove {} WAL entries behind or conflicting with the snapshot",
            report.discarded
        ));
    }
    if report.stamped {
        lines.push("stamp the directory's identity".into());
    }
    if lines.is_empty() {
        lines.push("change nothing on disk".into());
    }
    lines
}
