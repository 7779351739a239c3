//! The runner: command-line entry points for the engine with the Bank handler.
//!
//! `runner local` runs the main job: prefill accounts, then the transfer benchmark, printing a
//! table (and JSON with `--json`).

mod report;
mod single;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The replicated Bank engine: local runs and benchmarks.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Prefill accounts and run the transfer benchmark on a local node, data under /dev/shm.
    Local(single::LocalArgs),
}

/// Where data goes when `--dir` is not given: tmpfs, as the reference runs do.
pub const DATA_DIR_DEFAULT: &str = "/dev/shm";

/// Turns a `--dir` value into a fresh run directory under it.
pub fn run_dir(base: Option<PathBuf>) -> anyhow::Result<tempfile::TempDir> {
    let base = base.unwrap_or_else(|| PathBuf::from(DATA_DIR_DEFAULT));
    std::fs::create_dir_all(&base)?;
    Ok(tempfile::Builder::new()
        .prefix("replicated-bank-")
        .tempdir_in(base)?)
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Local(args) => single::run(args),
    }
}
