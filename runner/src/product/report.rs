//! Results of benchmark runs: a table for people, JSON for programs.

use serde::Serialize;
use std::path::Path;

/// Latency percentiles of one run, in milliseconds (the engine's `bench` reports the same).
pub use engine::cli::LatencyMs;
/// Where an entry's time went over a run (the engine's `bench` and `local` report the same).
pub use engine::cli::StageAverages;

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
    /// Callers of one command each (`--callers`), latency then counted per call.
    pub callers: Option<u32>,
    /// The shared clients those callers used (`--connections`).
    pub connections: Option<u32>,
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
    engine::outln!(
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
        engine::outln!(
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

/// A run's load: requests in flight, the open loop's offered rate (`@N/s`), or the callers
/// over their shared clients (`256c/64`).
fn load(run: &Run) -> String {
    let callers = run.callers.zip(run.connections);
    engine::cli::run_load(run.inflight, run.offered_requests_per_s, callers)
}

/// Prints where an entry's time went in each run (the engine's stage table).
pub fn print_stages(runs: &[Run]) {
    engine::cli::print_stage_table(runs.iter().map(|run| (run.mode.as_str(), &run.stages)));
}

/// Prints, per mode and commands per request, the median and range over runs, side by side
/// like the reference table (the engine's summary).
pub fn print_summary(runs: &[Run]) {
    let rows: Vec<engine::cli::RunSummaryRow<'_>> = runs
        .iter()
        .map(|run| engine::cli::RunSummaryRow {
            mode: &run.mode,
            batch: run.batch,
            load: load(run),
            commands_per_s: run.commands_per_s,
            p99_ms: run.latency_ms.p99,
        })
        .collect();
    engine::cli::print_run_summary(&engine::cli::summarize_runs(&rows));
}
