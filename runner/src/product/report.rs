//! Results of benchmark runs: a table for people, JSON for programs.

use serde::Serialize;
use std::path::Path;

/// Latency percentiles of one run, in milliseconds (the engine's `bench` reports the same).
pub use engine::cli::LatencyMs;

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Execution mode.
    pub mode: String,
    /// Commands per request.
    pub batch: u32,
    /// Requests in flight.
    pub inflight: u32,
    /// Accounts prefilled.
    pub accounts: u64,
    /// Commands completed in the measured time.
    pub commands: u64,
    /// Measured seconds.
    pub seconds: f64,
    /// Completed commands per second.
    pub commands_per_s: f64,
    /// CPU seconds this process used per million completed commands. Under `runner local`
    /// the process holds the three nodes and the client; under `runner bench`, only the client.
    pub cpu_s_per_million: f64,
    /// Percent of the commands that were reads.
    pub reads_percent: u64,
    /// Requests per second offered in an open-loop run (`--rate`), latency then counted from
    /// each request's due time; `None` for a closed loop of `inflight` clients.
    pub offered_requests_per_s: Option<f64>,
    /// Open loop: how late after their due times the client sent its requests (its own timer
    /// and event loop; this delay is inside `latency_ms`).
    pub send_late_ms: Option<LatencyMs>,
    /// Completion latency per request.
    pub latency_ms: LatencyMs,
    /// Commands the system could not complete.
    pub failed: u64,
    /// Commands whose outcome the client never learned.
    pub unknown: u64,
    /// All replicas' state hashes equal at the end.
    pub replicas_converged: bool,
    /// Each replica's state hash at the end, in hex.
    pub state_hashes: Vec<String>,
    /// Where an entry's time went during the run, from the nodes' own counters.
    pub stages: StageAverages,
}

/// Average microseconds per entry in each stage over a run: the leader's entries (batcher wait,
/// own WAL fsync, replication round trip to a quorum, simulation, apply) and the followers'.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageAverages {
    /// Entries the leader proposed in the run.
    pub entries: u64,
    /// Commands per entry on average.
    pub commands_per_entry: f64,
    /// Waiting in the leader's batcher.
    pub batch_wait_us: f64,
    /// Proposal to the leader's own fsync.
    pub wal_us: f64,
    /// Proposal to commit.
    pub quorum_us: f64,
    /// Simulation on the leader.
    pub simulate_us: f64,
    /// Apply on the leader (execution or reuse, replies included).
    pub apply_us: f64,
    /// Arrival to fsync on a follower.
    pub follower_wal_us: f64,
    /// Apply on a follower.
    pub follower_apply_us: f64,
    /// Commands the leader simulated, executed, reused and verified during the run.
    pub leader_commands: [u64; 4],
}

impl StageAverages {
    /// The averages over the interval between two snapshots of every node's counters.
    pub fn between(before: &[net::message::Stages], after: &[net::message::Stages]) -> Self {
        let delta = |f: fn(&net::message::Stages) -> u64, leader: bool| -> (u64, u64) {
            before
                .iter()
                .zip(after)
                .filter(|(b, a)| (a.proposed > b.proposed) == leader)
                .map(|(b, a)| (f(a).saturating_sub(f(b)), 1))
                .fold((0, 0), |(s, n), (v, c)| (s + v, n + c))
        };
        let (entries, _) = delta(|s| s.proposed, true);
        let (applied, _) = delta(|s| s.applied, true);
        let per = |(sum, _): (u64, u64), count: u64| {
            if count == 0 {
                0.0
            } else {
                sum as f64 / count as f64
            }
        };
        let (received, _) = delta(|s| s.received, false);
        let (follower_applied, _) = delta(|s| s.applied, false);
        StageAverages {
            entries,
            commands_per_entry: 0.0,
            batch_wait_us: per(delta(|s| s.batch_wait_us, true), entries),
            wal_us: per(delta(|s| s.wal_us, true), entries),
            quorum_us: per(delta(|s| s.quorum_us, true), entries),
            simulate_us: per(delta(|s| s.simulate_us, true), entries),
            apply_us: per(delta(|s| s.apply_us, true), applied),
            follower_wal_us: per(delta(|s| s.follower_wal_us, false), received),
            follower_apply_us: per(delta(|s| s.apply_us, false), follower_applied),
            leader_commands: [
                delta(|s| s.simulated_commands, true).0,
                delta(|s| s.executed_commands, true).0,
                delta(|s| s.reused_commands, true).0,
                delta(|s| s.verified_commands, true).0,
            ],
        }
    }
}

#[derive(Serialize)]
struct Runs<'a> {
    runs: &'a [Run],
}

/// Writes `{"runs": [...]}` to `path`.
pub fn write_json(path: &Path, runs: &[Run]) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(&Runs { runs })? + "\n")?;
    Ok(())
}

/// Prints runs as a table.
pub fn print_table(runs: &[Run]) {
    println!(
        "{:<12} {:>6} {:>8} {:>11} {:>8} {:>13} {:>9} {:>9} {:>9} {:>8} {:>7} {:>8}",
        "mode",
        "batch",
        "inflight",
        "commands",
        "seconds",
        "commands/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "cpu s/M",
        "failed",
        "unknown"
    );
    for run in runs {
        println!(
            "{:<12} {:>6} {:>8} {:>11} {:>8.2} {:>13.0} {:>9.3} {:>9.3} {:>9.3} {:>8.2} {:>7} {:>8}",
            run.mode,
            run.batch,
            load(run),
            run.commands,
            run.seconds,
            run.commands_per_s,
            run.latency_ms.p50,
            run.latency_ms.p99,
            run.latency_ms.max,
            run.cpu_s_per_million,
            run.failed,
            run.unknown
        );
    }
}

/// A run's load: requests in flight, or the open loop's offered rate (`@N/s`).
fn load(run: &Run) -> String {
    match run.offered_requests_per_s {
        Some(rate) => format!("@{rate:.0}/s"),
        None => run.inflight.to_string(),
    }
}

/// The median of `values` (sorted in place).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Prints where an entry's time went in each run.
pub fn print_stages(runs: &[Run]) {
    println!();
    println!(
        "where an entry's time goes (us per entry; leader: batcher wait, own fsync, quorum, simulate, apply; followers: fsync, apply)"
    );
    println!(
        "{:<12} {:>8} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8} {:>30}",
        "mode",
        "entries",
        "batcher",
        "wal",
        "quorum",
        "simulate",
        "apply",
        "f.wal",
        "f.apply",
        "leader: simulated/executed/reused/verified"
    );
    for run in runs {
        let s = &run.stages;
        println!(
            "{:<12} {:>8} {:>8.1} {:>7.1} {:>7.1} {:>8.1} {:>7.1} {:>7.1} {:>8.1} {:>30}",
            run.mode,
            s.entries,
            s.batch_wait_us,
            s.wal_us,
            s.quorum_us,
            s.simulate_us,
            s.apply_us,
            s.follower_wal_us,
            s.follower_apply_us,
            s.leader_commands.map(|c| c.to_string()).join("/")
        );
    }
}

/// Prints, per mode and commands per request, the median and range over runs, side by side
/// like the reference table.
pub fn print_summary(runs: &[Run]) {
    let mut shapes: Vec<(String, u32, String)> = Vec::new();
    for run in runs {
        let shape = (run.mode.clone(), run.batch, load(run));
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    println!();
    println!(
        "{:<12} {:>12} {:>9} {:>5} {:>38} {:>20}",
        "mode",
        "per request",
        "in flight",
        "runs",
        "completed commands/s median (range)",
        "p99 ms (range)"
    );
    for (mode, batch, inflight) in shapes {
        let same: Vec<&Run> = runs
            .iter()
            .filter(|r| r.mode == mode && r.batch == batch && load(r) == inflight)
            .collect();
        let mut rates: Vec<f64> = same.iter().map(|r| r.commands_per_s).collect();
        let mut p99: Vec<f64> = same.iter().map(|r| r.latency_ms.p99).collect();
        let rate = median(&mut rates);
        median(&mut p99);
        let rates_text = format!(
            "{:.0} ({:.0}-{:.0})",
            rate,
            rates[0],
            rates[rates.len() - 1]
        );
        let p99_text = format!("{:.3}-{:.3}", p99[0], p99[p99.len() - 1]);
        println!(
            "{mode:<12} {batch:>12} {inflight:>9} {:>5} {rates_text:>38} {p99_text:>20}",
            same.len()
        );
    }
}
