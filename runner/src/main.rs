//! The runner: the engine with the Bank handler, from the command line.
//!
//! - `runner local`: three nodes in this process over loopback TCP (data under /dev/shm), a
//!   prefill, then the benchmark; the README's main job. `--matrix` runs the benchmark matrix
//!   and writes it into the notes.
//! - `runner node --cluster FILE --id N`: one node of a cluster, in its own process.
//! - `runner bench --cluster FILE`: the benchmark against a running cluster.
//! - `runner client --cluster FILE <command>`: one Bank command, JSON out (FILE a cluster
//!   file or a client file).
//! - `runner client-file --cluster FILE --out CLIENT`: what a client host needs, no peer
//!   secret.
//! - `runner status --cluster FILE [--json]`: every node's role, term, indexes, state hash.
//! - `runner single`: the Bank on one node without replication (a ceiling to compare with).
//! - `runner sim --seeds N [--seed S] --json FILE`: the deterministic cluster simulator.
//! - `runner chaos --duration SECS --json FILE`: kill -9 and pause chaos on real processes.
//! - `runner partition [--scenario NAME] --json FILE`: partitions through our TCP proxy.
//! - `runner hostile --json FILE`: hostile clients and garbage beside normal clients.
//! - `runner emulate --link-delay-us 25-50`: three node processes whose peer links add a
//!   one-way delay, with the benchmark.
//! - `runner recover --data-dir DIR` (or `--cluster FILE --id N`): what a start of a stopped
//!   node's data directory would do (snapshot, log replay, what it would refuse), timed,
//!   writing nothing.
//! - `runner backup --cluster FILE --out BACKUP`: a running cluster's newest durable snapshot
//!   to a backup file; `runner restore --from BACKUP --cluster NEW` seeds a new cluster.
//! - `runner check --cluster FILE`: what each node would run with, or every error in the file.
//! - `runner rolling --from OLD_RUNNER`: a rolling upgrade from an earlier build to this one,
//!   under load, then a handler upgrade through the log.

mod harness;
mod notes;
mod product;

use harness::{chaos, emulate, hostile, partition, rolling, sim};
use product::{commands, single};

use bank::Bank;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// The engine with the Bank handler: nodes, a client, benchmarks, and the fault and load tools.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: engine::cli::logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Three nodes in this process, prefill, then the transfer benchmark.
    Local(commands::LocalArgs),
    /// One node of a cluster described by a cluster file.
    Node(engine::cli::NodeArgs),
    /// The transfer benchmark against a running cluster.
    Bench(commands::BenchArgs),
    /// One Bank command against a running cluster; prints JSON.
    Client(commands::ClientArgs),
    /// Writes the client file of a cluster file: what a client host needs, no peer secret.
    ClientFile(engine::cli::ClientFileArgs),
    /// Every node's role, term, commit and applied index, and state hash.
    Status(engine::cli::StatusArgs),
    /// The Bank on one node without replication, WAL under /dev/shm.
    Single(single::LocalArgs),
    /// What a start of a stopped node's data directory would do (or refuse), timed; writes
    /// nothing.
    Recover(engine::cli::RecoverArgs),
    /// Checks a cluster file: what each node would run with, or every error (exit 1).
    Check(engine::cli::CheckArgs),
    /// Switches every node to Verify or Performance; each keeps it across restarts.
    Mode(engine::cli::ModeArgs),
    /// Changes the members of a running cluster one node at a time: add, remove, replace.
    Member(engine::cli::MemberArgs),
    /// Writes a running cluster's newest durable snapshot to a backup file.
    Backup(engine::cli::BackupArgs),
    /// Seeds the data directories of a new cluster from a backup file.
    Restore(engine::cli::RestoreArgs),
    /// Puts a newer Bank version in force through the log (version 2: a fee on transfers);
    /// every node switches at the same entry.
    Upgrade(engine::cli::UpgradeArgs),
    /// Re-executes a stopped node's committed log with this build's Bank and reports the first
    /// entry and command that differ from what the node recorded; writes nothing.
    Replay(engine::cli::ReplayArgs),
    /// The deterministic cluster simulator on many seeds (faults, crashes, invariant checks).
    Sim(engine::cli::SimArgs),
    /// Three node processes killed, restarted and paused at random under a Bank workload.
    Chaos(chaos::ChaosArgs),
    /// Partition scenarios between three node processes, through our loopback proxy.
    Partition(partition::PartitionArgs),
    /// Hostile clients and garbage against three node processes, with normal clients beside.
    Hostile(hostile::HostileArgs),
    /// Three node processes whose peer links add a one-way delay (three machines, emulated),
    /// with the benchmark, beside the same without the delay.
    Emulate(emulate::EmulateArgs),
    /// A rolling upgrade: three node processes of an earlier build (--from) restarted one at a
    /// time on this one under load, checked, then a handler upgrade through the log.
    Rolling(rolling::RollingArgs),
}

/// Where data goes when `--dir` is not given: tmpfs, as the reference runs do.
pub const DATA_DIR_DEFAULT: &str = "/dev/shm";

/// A fresh run directory under `base` (or under [`DATA_DIR_DEFAULT`]), removed when dropped.
pub fn run_dir(base: Option<PathBuf>) -> anyhow::Result<tempfile::TempDir> {
    let base = base.unwrap_or_else(|| PathBuf::from(DATA_DIR_DEFAULT));
    std::fs::create_dir_all(&base)?;
    Ok(tempfile::Builder::new()
        .prefix("replicated-bank-")
        .tempdir_in(base)?)
}

/// Runs the command; an error is printed on one line (its causes joined, no backtrace: the
/// messages name what went wrong) and the process exits 1.
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    engine::cli::logging::init(cli.log.log_format);
    engine::cli::exit_code(run(cli.command))
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Local(args) => commands::local(args),
        Command::Node(args) => engine::cli::node(args, Bank),
        Command::Bench(args) => commands::bench(args),
        Command::Client(args) => commands::client(args),
        Command::ClientFile(args) => engine::cli::client_file(args),
        Command::Status(args) => engine::cli::status(args),
        Command::Single(args) => single::run(args),
        Command::Recover(args) => engine::cli::recover(args, Bank),
        Command::Check(args) => engine::cli::check(args),
        Command::Mode(args) => engine::cli::mode(args),
        Command::Member(args) => engine::cli::member(args),
        Command::Backup(args) => engine::cli::backup(args),
        Command::Restore(args) => engine::cli::restore(args, Bank),
        Command::Upgrade(args) => engine::cli::upgrade(args),
        Command::Replay(args) => engine::cli::replay(args, Bank),
        Command::Sim(args) => sim::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Partition(args) => partition::run(args),
        Command::Hostile(args) => hostile::run(args),
        Command::Emulate(args) => emulate::run(args),
        Command::Rolling(args) => rolling::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Proves the command line is well formed for clap (no option declared twice, as `--json`
    /// once was in `runner emulate`: a debug build panicked on `--help`).
    #[test]
    fn the_command_line_passes_clap_debug_assertions() {
        Cli::command().debug_assert();
    }
}
