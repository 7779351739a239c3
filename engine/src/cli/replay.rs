//! `replay --data-dir D`: re-executes a stopped node's committed log with this build's handler
//! and reports the first entry and command whose outcome or state hash differs from what the
//! node recorded, or that there is no difference (`engine::node::rehearsal`). Writes nothing;
//! exits 1 on a difference.

use super::recover::StoppedNode;
use crate::handler::Handler;
use crate::node::rehearsal::{Difference, Rehearsal, RehearsalOptions, rehearse};
use crate::state::STATE_BYTES_DEFAULT;
use anyhow::Context;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options of `replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The node.
    #[command(flatten)]
    pub node: StoppedNode,
    /// Start from the log's first entry, not from the oldest usable snapshot (the log must
    /// start at entry 1).
    #[arg(long)]
    pub from_start: bool,
    /// The lines, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// `replay` found a difference.
#[derive(Debug, thiserror::Error)]
#[error("this build differs from the recorded history: {0}")]
pub struct Differs(pub Difference);

/// Runs `replay` with `handler`.
pub fn replay<H: Handler>(args: ReplayArgs, handler: H) -> anyhow::Result<()> {
    let (dir, options) = target(&args)?;
    let mut said = Instant::now();
    let progress = |done: u64, total: u64| {
        if said.elapsed() >= Duration::from_secs(1) {
            tracing::info!(done, total, "replay: {done} of {total} entries");
            said = Instant::now();
        }
    };
    let rehearsal = rehearse(&dir, handler, &options, progress)
        .with_context(|| format!("replaying {}", dir.display()))?;
    args.output
        .emit(&as_json(&dir, &rehearsal), || print(&rehearsal))?;
    match rehearsal.difference {
        Some(difference) => Err(Differs(difference).into()),
        None => Ok(()),
    }
}

fn target(args: &ReplayArgs) -> anyhow::Result<(PathBuf, RehearsalOptions)> {
    let (dir, config) = args.node.resolve()?;
    let mut options = RehearsalOptions {
        capacity_bytes: STATE_BYTES_DEFAULT,
        sessions_max: crate::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: crate::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: crate::wal::WAL_SEGMENT_BYTES_DEFAULT,
        from_start: args.from_start,
    };
    if let Some(config) = config {
        options.capacity_bytes = config.capacity_bytes;
        options.sessions_max = config.sessions_max;
        options.session_retention_s = config.session_retention_s;
        options.wal_segment_bytes = config.wal_segment_bytes;
    }
    if let Some(capacity) = args.node.capacity_bytes {
        options.capacity_bytes = capacity;
    }
    Ok((dir, options))
}

fn print(rehearsal: &Rehearsal) {
    let from = rehearsal
        .from_snapshot
        .map_or("the start of the log".to_string(), |i| {
            format!("the snapshot of entry {i}")
        });
    crate::outln!(
        "replayed {} entries ({} commands) from {from} through entry {} in {:.2} s",
        rehearsal.entries,
        rehearsal.commands,
        rehearsal.through,
        rehearsal.took.as_secs_f64()
    );
    crate::outln!(
        "compared with {} journal records and {} snapshots",
        rehearsal.journaled,
        rehearsal.snapshots
    );
    for passed in &rehearsal.passed_over {
        crate::outln!("passed over: {passed}");
    }
    match &rehearsal.difference {
        Some(difference) => crate::outln!("difference: {difference}"),
        None => crate::outln!("no difference"),
    }
}

fn as_json(dir: &std::path::Path, rehearsal: &Rehearsal) -> serde_json::Value {
    let difference = rehearsal.difference.as_ref().map(|d| {
        let (index, command) = match d {
            Difference::Outcome { index, command, .. } => (*index, Some(*command)),
            Difference::StateHash { index, .. } | Difference::Stops { index, .. } => (*index, None),
        };
        json!({ "entry": index.0, "command": command, "what": d.to_string() })
    });
    json!({
        "data_dir": dir.display().to_string(),
        "from_snapshot": rehearsal.from_snapshot.map(|i| i.0),
        "through": rehearsal.through.0,
        "entries": rehearsal.entries,
        "commands": rehearsal.commands,
        "journal_records_compared": rehearsal.journaled,
        "snapshots_compared": rehearsal.snapshots,
        "passed_over": rehearsal.passed_over,
        "seconds": rehearsal.took.as_secs_f64(),
        "difference": difference,
    })
}
