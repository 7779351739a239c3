//! What `bench` found: a table for people, JSON for programs, and the verdict.

use super::BenchArgs;
use hdrhistogram::Histogram;
use serde::Serialize;

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
    /// The run's number, from 1.
    pub run: u32,
    /// Commands per request.
    pub batch: u32,
    /// Requests in flight (closed loop).
    pub inflight: u32,
    /// Requests per second offered (open loop, `--rate`): latency then counts from each
    /// request's due time.
    pub offered_requests_per_s: Option<f64>,
    /// Commands answered in the measured window (done or refused by the business).
    pub commands: u64,
    /// Measured seconds: the first measured request's start to the last one's answer.
    pub seconds: f64,
    /// Answered commands per second.
    pub commands_per_s: f64,
    /// Completion latency per request.
    pub latency_ms: LatencyMs,
    /// Commands the business refused (results, not errors).
    pub refused: u64,
    /// Commands that failed: invalid ones, and those of requests the cluster did not take.
    pub errors: u64,
    /// Commands of requests that went unanswered: their outcome is unknown.
    pub unknown: u64,
}

impl Run {
    /// Run `run` (from 0) of `load`, from what it measured.
    pub fn new(load: &super::Load, run: u32, measured: &super::Measured) -> Self {
        Run {
            run: run + 1,
            batch: load.batch,
            inflight: load.inflight,
            offered_requests_per_s: load.rate,
            commands: measured.commands,
            seconds: measured.seconds,
            commands_per_s: measured.commands_per_s(),
            latency_ms: LatencyMs::from_us(&measured.latency_us),
            refused: measured.refused,
            errors: measured.errors,
            unknown: measured.unknown,
        }
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

/// Everything `bench` reports.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    seed: u64,
    prefill: Prefill,
    runs: Vec<Run>,
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

impl BenchReport {
    /// The report of a benchmark's parts.
    pub fn new(
        args: &BenchArgs,
        prefill: Prefill,
        runs: Vec<Run>,
        check: Result<(), String>,
        convergence: Convergence,
    ) -> Self {
        BenchReport {
            seed: args.seed,
            prefill,
            commands: runs.iter().map(|r| r.commands).sum(),
            errors: runs.iter().map(|r| r.errors).sum(),
            unknown: runs.iter().map(|r| r.unknown).sum(),
            runs,
            check_passed: check.is_ok(),
            check: check.err().unwrap_or_else(|| "ok".into()),
            replicas_converged: convergence.converged,
            state_hashes: convergence.state_hashes,
        }
    }

    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|e| serde_json::json!({ "error": e.to_string() }))
    }

    /// Prints the prefill, a line per run and the end's checks.
    pub fn print(&self) {
        let p = &self.prefill;
        println!(
            "prefill: {} requests, {} commands ({} refused) in {:.2} s",
            p.requests, p.commands, p.refused, p.seconds
        );
        println!(
            "{:>4} {:>6} {:>8} {:>11} {:>8} {:>13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}",
            "run",
            "batch",
            "inflight",
            "commands",
            "seconds",
            "commands/s",
            "p50 ms",
            "p99 ms",
            "p999 ms",
            "max ms",
            "refused",
            "errors",
            "unknown"
        );
        for r in &self.runs {
            let l = &r.latency_ms;
            println!(
                "{:>4} {:>6} {:>8} {:>11} {:>8.2} {:>13.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9} {:>7} {:>8}",
                r.run,
                r.batch,
                r.offered_requests_per_s
                    .map_or_else(|| r.inflight.to_string(), |rate| format!("@{rate:.0}/s")),
                r.commands,
                r.seconds,
                r.commands_per_s,
                l.p50,
                l.p99,
                l.p999,
                l.max,
                r.refused,
                r.errors,
                r.unknown
            );
        }
        let hash = self.state_hashes.first().map_or("-", String::as_str);
        println!(
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
    /// check passed and the replicas converged; else what went wrong.
    pub fn verdict(&self) -> anyhow::Result<()> {
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
        anyhow::bail!("{}", wrong.join("; "))
    }
}
