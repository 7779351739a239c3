//! What `bench` and `local` found: tables for people (the runs, where an entry's time went,
//! a summary per mode), JSON for programs, and the verdict.

use super::cost::{StageAverages, print_stage_table};
use super::{Load, Measured};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Latency percentiles of one run's requests, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl LatencyMs {
    /// The percentiles of a histogram recorded in microseconds.
    pub fn from_us(histogram: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        LatencyMs {
            p50: ms(histogram.value_at_quantile(0.50)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }
}

/// One measured run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The run's number, from 1, in the order run (`local` alternates the modes).
    pub run: u32,
    /// The mode the nodes reported before the run (the leader's): `verify` or
    /// `performance`; `-` when no node answered.
    pub mode: String,
    /// Commands per request.
    pub batch: u32,
    /// Requests in flight (closed loop).
    pub inflight: u32,
    /// Requests per second offered (open loop, `--rate`): latency then counts from each
    /// request's due time.
    pub offered_requests_per_s: Option<f64>,
    /// Callers of one command each (`--callers`), latency then counted per call.
    pub callers: Option<u32>,
    /// The shared clients those callers used (`--connections`).
    pub connections: Option<u32>,
    /// Commands answered in the measured window (done or refused by the business).
    pub commands: u64,
    /// Measured seconds: the first measured request's start to the last one's answer.
    pub seconds: f64,
    /// Answered commands per second.
    pub commands_per_s: f64,
    /// Completion latency per request.
    pub latency_ms: LatencyMs,
    /// CPU seconds this process used per million answered commands, the warm-up left out
    /// (what the process holds: [`BenchReport`]'s `cpu_covers`).
    pub cpu_s_per_million: f64,
    /// Commands the business refused (results, not errors).
    pub refused: u64,
    /// Commands that failed: invalid ones, and those of requests the cluster did not take.
    pub errors: u64,
    /// Commands of requests that went unanswered: their outcome is unknown.
    pub unknown: u64,
    /// Where an entry's time went during the run, from the nodes' own counters.
    pub stages: StageAverages,
}

/// What surrounded one measured run: the mode the nodes reported before it, the CPU this
/// process used during it, and the nodes' stage averages over it.
#[derive(Debug, Clone)]
pub struct Around {
    /// The mode's name ([`crate::cli::mode_name`]), or `-`.
    pub mode: String,
    /// CPU seconds this process used, warm-up included.
    pub cpu_s: f64,
    /// The nodes' stage averages over the run.
    pub stages: StageAverages,
}

impl Run {
    /// Run number `number` (from 1) of `load`, from what it measured and what surrounded it.
    pub fn new(load: &Load, number: u32, measured: &Measured, around: Around) -> Self {
        let cpu_s_per_million = super::cost::cpu_s_per_million(
            around.cpu_s,
            measured.seconds,
            load.warmup_s,
            measured.commands,
        );
        Run {
            run: number,
            mode: around.mode,
            batch: load.batch,
            inflight: load.inflight,
            offered_requests_per_s: load.rate,
            callers: load.callers.map(|c| c.callers),
            connections: load.callers.map(|c| c.clients),
            commands: measured.commands,
            seconds: measured.seconds,
            commands_per_s: measured.commands_per_s(),
            latency_ms: LatencyMs::from_us(&measured.latency_us),
            cpu_s_per_million,
            refused: measured.refused,
            errors: measured.errors,
            unknown: measured.unknown,
            stages: around.stages,
        }
    }

    /// Requests in flight, the open loop's offered rate (`@N/s`), or the callers over
    /// their shared clients (`256c/64`).
    fn load(&self) -> String {
        let callers = self.callers.zip(self.connections);
        run_load(self.inflight, self.offered_requests_per_s, callers)
    }
}

/// A run's load as the tables show it: requests in flight, the open loop's offered rate, or
/// callers over shared clients.
pub fn run_load(inflight: u32, rate: Option<f64>, callers: Option<(u32, u32)>) -> String {
    match (rate, callers) {
        (Some(rate), _) => format!("@{rate:.0}/s"),
        (None, Some((callers, clients))) => format!("{callers}c/{clients}"),
        (None, None) => inflight.to_string(),
    }
}

/// The prefill: what was sent and how long it took.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Prefill {
    /// Requests sent.
    pub requests: u64,
    /// Commands sent.
    pub commands: u64,
    /// Commands the business refused.
    pub refused: u64,
    /// Seconds it took.
    pub seconds: f64,
}

/// The replicas at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Convergence {
    /// Every node answered, had applied what it knew committed, and all had applied the same
    /// entry with the same state hash.
    pub converged: bool,
    /// Each answering node's state hash, in hex.
    pub state_hashes: Vec<String>,
}

/// One run as the summary groups it: by mode and shape.
#[derive(Debug, Clone)]
pub struct SummaryRow<'a> {
    /// The mode's name.
    pub mode: &'a str,
    /// Commands per request.
    pub batch: u32,
    /// Requests in flight, or the open loop's offered rate (`@N/s`).
    pub load: String,
    /// Answered commands per second.
    pub commands_per_s: f64,
    /// The run's 99th percentile latency, in milliseconds.
    pub p99_ms: f64,
}

/// The runs of one mode and shape: the median and range of their throughput, and the range
/// of their p99 latency.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The mode's name.
    pub mode: String,
    /// Commands per request.
    pub batch: u32,
    /// Requests in flight, or the open loop's offered rate (`@N/s`).
    pub load: String,
    /// Runs of this mode and shape.
    pub runs: usize,
    /// The median of their commands per second.
    pub commands_per_s_median: f64,
    /// The lowest.
    pub commands_per_s_min: f64,
    /// The highest.
    pub commands_per_s_max: f64,
    /// The lowest p99 latency, in milliseconds.
    pub p99_ms_min: f64,
    /// The highest.
    pub p99_ms_max: f64,
}

/// A summary per mode and shape, in the order each first ran.
pub fn summarize(rows: &[SummaryRow<'_>]) -> Vec<Summary> {
    let mut summaries: Vec<Summary> = Vec::new();
    for row in rows {
        let same = |s: &Summary| s.mode == row.mode && s.batch == row.batch && s.load == row.load;
        if summaries.iter().any(same) {
            continue;
        }
        let alike = rows
            .iter()
            .filter(|r| r.mode == row.mode && r.batch == row.batch && r.load == row.load);
        let mut rates: Vec<f64> = alike.clone().map(|r| r.commands_per_s).collect();
        let mut p99: Vec<f64> = alike.map(|r| r.p99_ms).collect();
        let median = median(&mut rates);
        p99.sort_by(f64::total_cmp);
        summaries.push(Summary {
            mode: row.mode.to_string(),
            batch: row.batch,
            load: row.load.clone(),
            runs: rates.len(),
            commands_per_s_median: median,
            commands_per_s_min: rates[0],
            commands_per_s_max: rates[rates.len() - 1],
            p99_ms_min: p99[0],
            p99_ms_max: p99[p99.len() - 1],
        });
    }
    summaries
}

/// The median of `values` (sorted in place; at least one).
fn median(values: &mut [f64]) -> f64 {
    assert!(!values.is_empty(), "the median of no value");
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// Prints the summary: per mode and shape, the median and range of commands per second over
/// the runs, and the range of their p99 latency.
pub fn print_summary(summaries: &[Summary]) {
    crate::outln!();
    crate::outln!(
        "{:<12} {:>12} {:>9} {:>5} {:>38} {:>20}",
        "mode",
        "per request",
        "in flight",
        "runs",
        "completed commands/s median (range)",
        "p99 ms (range)"
    );
    for s in summaries {
        let rates = format!(
            "{:.0} ({:.0}-{:.0})",
            s.commands_per_s_median, s.commands_per_s_min, s.commands_per_s_max
        );
        let p99 = format!("{:.3}-{:.3}", s.p99_ms_min, s.p99_ms_max);
        let (mode, batch, load, runs) = (&s.mode, s.batch, &s.load, s.runs);
        crate::outln!("{mode:<12} {batch:>12} {load:>9} {runs:>5} {rates:>38} {p99:>20}");
    }
}

/// Performance's median commands per second over Verify's, when both ran (one shape).
fn performance_over_verify(summaries: &[Summary]) -> Option<f64> {
    let median = |mode: crate::apply::Mode| {
        let name = crate::cli::mode_name(mode);
        let summary = summaries.iter().find(|s| s.mode == name)?;
        Some(summary.commands_per_s_median)
    };
    let performance = median(crate::apply::Mode::Performance)?;
    let verify = median(crate::apply::Mode::Verify)?;
    (verify > 0.0).then(|| performance / verify)
}

/// What the CPU figures of a `local` run cover: the whole cluster is in the process.
pub const CPU_OF_CLIENT_AND_NODES: &str = "this process: the load client and the three nodes";
/// What the CPU figures of a `bench` run cover: the nodes run elsewhere.
pub const CPU_OF_CLIENT: &str = "this process: the load client only (the nodes run elsewhere)";

/// Everything `bench` and `local` report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    seed: u64,
    /// What `cpu_s_per_million` covers.
    cpu_covers: &'static str,
    /// `local`: where the nodes' data was, and whether it was kept.
    data_dir: Option<PathBuf>,
    data_kept: bool,
    prefill: Prefill,
    runs: Vec<Run>,
    /// Per mode: the median and range of commands per second, the range of p99 latency.
    summary: Vec<Summary>,
    /// Performance's median commands per second over Verify's, when both ran.
    performance_over_verify: Option<f64>,
    /// Commands answered over all runs.
    commands: u64,
    /// Errors over all runs.
    errors: u64,
    /// Unknown outcomes over all runs.
    unknown: u64,
    /// The workload's check: "ok" or what it found.
    check: String,
    check_passed: bool,
    replicas_converged: bool,
    state_hashes: Vec<String>,
}

/// The workload's final check failed: its own error, shared so that what a benchmark found
/// can be cloned.
#[derive(Clone, Debug, thiserror::Error)]
#[error(transparent)]
pub struct CheckFailed(Arc<dyn std::error::Error + Send + Sync>);

impl CheckFailed {
    /// The workload's `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        CheckFailed(Arc::new(error))
    }
}

/// What a benchmark found, before it is reported.
#[derive(Debug, Clone)]
pub struct Found {
    /// The prefill.
    pub prefill: Prefill,
    /// The runs, in the order run.
    pub runs: Vec<Run>,
    /// The workload's check.
    pub check: Result<(), CheckFailed>,
    /// The replicas at the end.
    pub convergence: Convergence,
}

impl BenchReport {
    /// The report of what a benchmark with seed `seed` found; the CPU figures cover
    /// `cpu_covers` ([`CPU_OF_CLIENT`] or [`CPU_OF_CLIENT_AND_NODES`]).
    pub fn new(seed: u64, cpu_covers: &'static str, found: Found) -> Self {
        let rows: Vec<SummaryRow<'_>> = found
            .runs
            .iter()
            .map(|r| SummaryRow {
                mode: &r.mode,
                batch: r.batch,
                load: r.load(),
                commands_per_s: r.commands_per_s,
                p99_ms: r.latency_ms.p99,
            })
            .collect();
        let summary = summarize(&rows);
        let runs = &found.runs;
        BenchReport {
            seed,
            cpu_covers,
            data_dir: None,
            data_kept: false,
            prefill: found.prefill,
            performance_over_verify: performance_over_verify(&summary),
            summary,
            commands: runs.iter().map(|r| r.commands).sum(),
            errors: runs.iter().map(|r| r.errors).sum(),
            unknown: runs.iter().map(|r| r.unknown).sum(),
            runs: found.runs,
            check_passed: found.check.is_ok(),
            check: (found.check.err()).map_or_else(|| "ok".into(), |e| e.to_string()),
            replicas_converged: found.convergence.converged,
            state_hashes: found.convergence.state_hashes,
        }
    }

    /// The report with the data directory the nodes used, and whether it was kept.
    pub fn with_data_dir(mut self, dir: PathBuf, kept: bool) -> Self {
        (self.data_dir, self.data_kept) = (Some(dir), kept);
        self
    }

    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
    }

    /// Prints the prefill, the runs, where an entry's time went, the summary and the end's
    /// checks.
    pub fn print(&self) {
        let p = &self.prefill;
        crate::outln!(
            "prefill: {} requests, {} commands ({} refused) in {:.2} s",
            p.requests,
            p.commands,
            p.refused,
            p.seconds
        );
        print_runs(&self.runs);
        print_stage_table(self.runs.iter().map(|r| (r.mode.as_str(), &r.stages)));
        print_summary(&self.summary);
        if let Some(ratio) = self.performance_over_verify {
            crate::outln!("performance/verify: {ratio:.2} (median commands/s)");
        }
        crate::outln!();
        crate::outln!(
            "cpu s/M: CPU seconds per million commands of {}",
            self.cpu_covers
        );
        if let Some(dir) = &self.data_dir {
            let fate = if self.data_kept { "kept" } else { "removed" };
            crate::outln!("data directory: {} ({fate})", dir.display());
        }
        let hash = self.state_hashes.first().map_or("-", String::as_str);
        crate::outln!(
            "check: {}; replicas {} (state hash {hash})",
            self.check,
            if self.replicas_converged {
                "converged"
            } else {
                "DID NOT CONVERGE"
            }
        );
    }

    /// Ok when every run answered commands with no error or unknown outcome, the workload's
    /// check passed and the replicas converged; else [`BenchFailed`], saying what went wrong.
    pub fn verdict(&self) -> Result<(), BenchFailed> {
        let mut wrong = Vec::new();
        if let Some(run) = self.runs.iter().find(|r| r.commands == 0) {
            wrong.push(format!("run {} answered no command", run.run));
        }
        if self.errors > 0 || self.unknown > 0 {
            let (errors, unknown) = (self.errors, self.unknown);
            wrong.push(format!(
                "{errors} commands failed and {unknown} went unanswered"
            ));
        }
        if !self.check_passed {
            wrong.push(format!("the workload's check failed: {}", self.check));
        }
        if !self.replicas_converged {
            wrong.push("the replicas did not converge".into());
        }
        if wrong.is_empty() {
            return Ok(());
        }
        Err(BenchFailed(wrong))
    }
}

/// A benchmark ran to its end and the answer is no: a command failed or went unanswered, a
/// run answered nothing, the workload's check failed, or the replicas differ.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct BenchFailed(pub Vec<String>);

/// Prints a line per run.
fn print_runs(runs: &[Run]) {
    crate::outln!(
        "{:>4} {:<12} {:>6} {:>8} {:>11} {:>8} {:>13} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7} {:>8}",
        "run",
        "mode",
        "batch",
        "inflight",
        "commands",
        "seconds",
        "commands/s",
        "p50 ms",
        "p99 ms",
        "p999 ms",
        "max ms",
        "cpu s/M",
        "refused",
        "errors",
        "unknown"
    );
    for r in runs {
        let l = &r.latency_ms;
        crate::outln!(
            "{:>4} {:<12} {:>6} {:>8} {:>11} {:>8.2} {:>13.0} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.2} {:>9} {:>7} {:>8}",
            r.run,
            r.mode,
            r.batch,
            r.load(),
            r.commands,
            r.seconds,
            r.commands_per_s,
            l.p50,
            l.p99,
            l.p999,
            l.max,
            r.cpu_s_per_million,
            r.refused,
            r.errors,
            r.unknown
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: &str, commands_per_s: f64, p99_ms: f64) -> SummaryRow<'_> {
        let load = "1".into();
        SummaryRow {
            mode,
            batch: 8,
            load,
            commands_per_s,
            p99_ms,
        }
    }

    /// Proves the summary groups alternated runs by mode, in the order each first ran, with
    /// the median and range of each, and that the ratio is Performance's median over
    /// Verify's.
    #[test]
    fn the_summary_groups_alternated_runs_by_mode() {
        let rows = [
            row("verify", 100.0, 2.0),
            row("performance", 300.0, 1.0),
            row("verify", 200.0, 4.0),
            row("performance", 100.0, 3.0),
            row("verify", 600.0, 3.0),
        ];
        let summary = summarize(&rows);
        let modes: Vec<&str> = summary.iter().map(|s| s.mode.as_str()).collect();
        assert_eq!(modes, ["verify", "performance"]);
        let verify = &summary[0];
        assert_eq!(verify.runs, 3);
        assert_eq!(verify.commands_per_s_median, 200.0);
        assert_eq!(
            (verify.commands_per_s_min, verify.commands_per_s_max),
            (100.0, 600.0)
        );
        assert_eq!((verify.p99_ms_min, verify.p99_ms_max), (2.0, 4.0));
        assert_eq!(summary[1].commands_per_s_median, 200.0);
        assert_eq!(performance_over_verify(&summary), Some(1.0));
        assert_eq!(performance_over_verify(&summary[..1]), None);
    }
}
