//! The order book beside the Bank in the reports: the `orderbook` package (a handler
//! whose commands cost several times a transfer) built in release and run through its own
//! `local` (three nodes in its process, both modes alternated run by run), its JSON read into
//! the same per-run figures as the Bank's.

use anyhow::{Context, anyhow, bail};
use engine::Mode;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The order book's package and binary (`examples/orderbook`).
const BOOK_PACKAGE: &str = "orderbook";

/// One measured run of either workload, as the reports show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EngineRun {
    /// The mode it ran in.
    pub mode: String,
    /// Completed commands per second.
    pub commands_per_s: f64,
    /// 99th percentile round trip of a request, in milliseconds.
    pub p99_ms: f64,
    /// The slowest request, in milliseconds.
    pub max_ms: f64,
    /// CPU seconds of the process (client and three nodes) per million commands.
    pub cpu_s_per_million: f64,
}

impl From<&runner::product::report::Run> for EngineRun {
    fn from(run: &runner::product::report::Run) -> Self {
        EngineRun {
            mode: run.mode.clone(),
            commands_per_s: run.commands_per_s,
            p99_ms: run.latency_ms.p99,
            max_ms: run.latency_ms.max,
            cpu_s_per_million: run.cpu_s_per_million,
        }
    }
}

/// Builds the order book's binary (release, in this workspace's target directory); returns
/// its path. Run from the workspace's root, as the floor probe's build is.
pub fn build() -> anyhow::Result<PathBuf> {
    let args: [&std::ffi::OsStr; 2] = ["-p".as_ref(), BOOK_PACKAGE.as_ref()];
    super::cargo_release(&args, None, "the order book")?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| "target".into(), PathBuf::from);
    Ok(target.join("release").join(BOOK_PACKAGE))
}

/// How the order book runs: where its data goes, and each run's length.
pub struct BookRun<'a> {
    /// Its binary, from [`build`].
    pub binary: &'a Path,
    /// The base directory its `local` makes its data directory under.
    pub dir: &'a Path,
    /// Commands per request.
    pub batch: u32,
    /// Requests in flight.
    pub inflight: u32,
    /// Measured seconds per run.
    pub duration: f64,
    /// Warm-up seconds before each run.
    pub warmup: f64,
    /// The workload's seed.
    pub seed: u64,
}

impl BookRun<'_> {
    /// One verify run and one performance run, alternated on one fresh cluster (`local`'s
    /// `--runs` counts the runs of each mode).
    pub fn both_modes(&self) -> anyhow::Result<Vec<EngineRun>> {
        let json = self
            .dir
            .join(format!("book-{}x{}.json", self.batch, self.inflight));
        let output = Command::new(self.binary)
            .arg("local")
            .arg("--dir")
            .arg(self.dir)
            .args(["--runs", "1"])
            .args(["--batch", &self.batch.to_string()])
            .args(["--inflight", &self.inflight.to_string()])
            .args(["--duration", &self.duration.to_string()])
            .args(["--warmup", &self.warmup.to_string()])
            .args(["--seed", &self.seed.to_string()])
            .arg("--json")
            .arg(&json)
            .output()
            .with_context(|| format!("running {}", self.binary.display()))?;
        if !output.status.success() {
            bail!(
                "the order book's local failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let text = std::fs::read_to_string(&json)
            .with_context(|| format!("reading {}", json.display()))?;
        std::fs::remove_file(&json).with_context(|| format!("removing {}", json.display()))?;
        let runs = parse_runs(&text)?;
        for run in &runs {
            engine::outln!(
                "order book {:<12} {}x{} {:>8.1}K commands/s  p99 {:.3} ms",
                run.mode,
                self.batch,
                self.inflight,
                run.commands_per_s / 1e3,
                run.p99_ms
            );
        }
        Ok(runs)
    }
}

/// Reads the runs of a `local --json` document.
pub fn parse_runs(text: &str) -> anyhow::Result<Vec<EngineRun>> {
    let document: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
    let runs = document["runs"]
        .as_array()
        .ok_or_else(|| anyhow!("no runs in the document"))?;
    let number = |run: &serde_json::Value, path: &[&str]| {
        path.iter()
            .fold(run, |value, key| &value[*key])
            .as_f64()
            .ok_or_else(|| anyhow!("a run without {}", path.join(".")))
    };
    let runs: Vec<EngineRun> = runs
        .iter()
        .map(|run| {
            let mode = run["mode"]
                .as_str()
                .ok_or_else(|| anyhow!("a run without mode"))?;
            mode.parse::<Mode>().map_err(|e| anyhow!("{e}"))?;
            Ok(EngineRun {
                mode: mode.to_string(),
                commands_per_s: number(run, &["commands_per_s"])?,
                p99_ms: number(run, &["latency_ms", "p99"])?,
                max_ms: number(run, &["latency_ms", "max"])?,
                cpu_s_per_million: number(run, &["cpu_s_per_million"])?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    if runs.is_empty() {
        bail!("the document holds no run");
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runs_of_a_local_document_are_read() {
        let text = r#"{"runs": [
            {"mode": "verify", "commands_per_s": 469000.5, "cpu_s_per_million": 3.88,
             "latency_ms": {"p50": 0.5, "p99": 1.04, "p999": 2.0, "max": 35.4}},
            {"mode": "performance", "commands_per_s": 487000.0, "cpu_s_per_million": 3.34,
             "latency_ms": {"p50": 0.5, "p99": 1.12, "p999": 2.0, "max": 11.9}}]}"#;
        let runs = parse_runs(text).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].mode, "verify");
        assert!((runs[0].commands_per_s - 469_000.5).abs() < 1e-9);
        assert!((runs[1].p99_ms - 1.12).abs() < 1e-12);
        assert!((runs[1].max_ms - 11.9).abs() < 1e-12);
        assert!((runs[1].cpu_s_per_million - 3.34).abs() < 1e-12);
        assert!(parse_runs(r#"{"runs": []}"#).is_err());
        assert!(parse_runs(r#"{"runs": [{"mode": "fast"}]}"#).is_err());
        let no_p99 = r#"{"runs": [{"mode": "verify", "commands_per_s": 1.0,
            "cpu_s_per_million": 1.0, "latency_ms": {"max": 1.0}}]}"#;
        let error = parse_runs(no_p99).unwrap_err().to_string();
        assert!(error.contains("latency_ms.p99"), "{error}");
    }
}
