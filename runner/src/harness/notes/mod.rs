//! The notes generator: `runner local --matrix` runs the benchmark matrix and writes it, with
//! its plots, into `notes/`; `runner local --floor` measures the engine against the
//! bare path; `runner local --rate-sweep` writes latency against throughput.

use anyhow::{Context, bail};
use runner::product::commands::LocalArgs;

pub mod book;
pub mod floor;
pub mod matrix;
pub mod rates;

/// `runner local` with the notes generator's options.
#[derive(clap::Args, Debug)]
pub struct NotesArgs {
    /// The main job's options, which every report runs with.
    #[command(flatten)]
    pub local: LocalArgs,
    /// The benchmark matrix.
    #[command(flatten)]
    pub matrix: matrix::MatrixOptions,
    /// The floor report.
    #[command(flatten)]
    pub floor: floor::FloorOptions,
    /// The open-loop rate sweep.
    #[command(flatten)]
    pub rates: rates::RateOptions,
}

impl std::ops::Deref for NotesArgs {
    type Target = LocalArgs;

    fn deref(&self) -> &LocalArgs {
        &self.local
    }
}

/// Runs the report the options ask for.
pub fn run(args: &NotesArgs) -> anyhow::Result<()> {
    runner::product::commands::check_local(&args.local)?;
    if args.matrix.matrix {
        return matrix::run(args);
    }
    if args.floor.floor {
        return floor::run(args);
    }
    if !args.rates.rate_sweep.is_empty() {
        return rates::run(args);
    }
    anyhow::bail!("runner-harness local runs a report: --matrix, --floor or --rate-sweep")
}

/// Runs `cargo build --release --quiet` with `args` (and `target_dir` as its target directory,
/// if given), with the cargo that runs the reports; `what` names the build in the messages.
pub(crate) fn cargo_release(
    args: &[&std::ffi::OsStr],
    target_dir: Option<&str>,
    what: &str,
) -> anyhow::Result<()> {
    engine::outln!("building {what}");
    let mut command =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.args(["build", "--release", "--quiet"]).args(args);
    if let Some(dir) = target_dir {
        command.env("CARGO_TARGET_DIR", dir);
    }
    let status = command
        .status()
        .with_context(|| format!("running cargo to build {what}"))?;
    if !status.success() {
        bail!("building {what} failed ({status})");
    }
    Ok(())
}
