//! Results of benchmark runs: a table for people, JSON for programs.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::path::Path;

/// Latency percentiles of one run, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl LatencyMs {
    /// Percentiles of a histogram recorded in microseconds.
    pub fn from_us(histogram: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        LatencyMs {
            p50: ms(histogram.value_at_quantile(0.50)),
            p99: ms(histogram.value_at_quantile(0.99)),
            max: ms(histogram.max()),
        }
    }
}

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
        "{:<12} {:>6} {:>8} {:>11} {:>8} {:>13} {:>9} {:>9} {:>9} {:>7} {:>8}",
        "mode",
        "batch",
        "inflight",
        "commands",
        "seconds",
        "commands/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "failed",
        "unknown"
    );
    for run in runs {
        println!(
            "{:<12} {:>6} {:>8} {:>11} {:>8.2} {:>13.0} {:>9.3} {:>9.3} {:>9.3} {:>7} {:>8}",
            run.mode,
            run.batch,
            run.inflight,
            run.commands,
            run.seconds,
            run.commands_per_s,
            run.latency_ms.p50,
            run.latency_ms.p99,
            run.latency_ms.max,
            run.failed,
            run.unknown
        );
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

/// Prints, per mode and commands per request, the median and range over runs, side by side
/// like the reference table.
pub fn print_summary(runs: &[Run]) {
    let mut shapes: Vec<(String, u32, u32)> = Vec::new();
    for run in runs {
        let shape = (run.mode.clone(), run.batch, run.inflight);
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
            .filter(|r| r.mode == mode && r.batch == batch && r.inflight == inflight)
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
