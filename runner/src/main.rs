//! The runner: the engine with the Bank handler, from the command line.
//!
//! - `runner local`: three nodes in this process over loopback TCP (data under /dev/shm), a
//!   prefill, then the benchmark; the README's main job.
//! - `runner node --cluster FILE --id N`: one node of a cluster, in its own process.
//! - `runner bench --cluster FILE`: the benchmark against a running cluster.
//! - `runner client --cluster FILE <command>`: one Bank command, JSON out (FILE a cluster
//!   file or a client file).
//! - `runner client-file --cluster FILE --out CLIENT`: what a client host needs, no peer
//!   secret.
//! - `runner status --cluster FILE [--json]`: every node's role, term, indexes, state hash.
//! - `runner completions SHELL`, `runner man --out DIR`: shell completions and man pages.
//! - `runner single`: the Bank on one node without replication (a ceiling to compare with).
//!
//! Forwarded to `runner-harness` (the test harnesses, a binary of their own):
//! - `runner local --matrix|--floor|--rate-sweep`: the notes generator's reports.
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

#![warn(clippy::disallowed_macros)]

use runner::product::{commands, single};

use bank::Bank;
use clap::{CommandFactory, Parser, Subcommand};
use engine::cli::with_exit_codes;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;

/// The commands of the harness binary, which this one forwards to it unchanged.
const HARNESS_COMMANDS: [&str; 6] = ["sim", "chaos", "partition", "hostile", "emulate", "rolling"];
/// What `--version` prints: the crate's version, the commit it was built from, and the
/// versions of the protocol and of every file format.
static LONG_VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{} (commit {}; {})",
        env!("CARGO_PKG_VERSION"),
        env!("RUNNER_GIT_COMMIT"),
        engine::formats::describe()
    )
});

/// The options of `local` that run a report of the notes generator (in the harness binary).
const NOTES_OPTIONS: [&str; 3] = ["--matrix", "--floor", "--rate-sweep"];

/// The engine with the Bank handler: nodes, a client, benchmarks. The test harnesses live in
/// the binary `runner-harness` beside this one: `runner sim`, `chaos`, `partition`,
/// `hostile`, `emulate`, `rolling` and `local --matrix|--floor|--rate-sweep` are forwarded to
/// it with their arguments (`runner-harness --help` lists their options).
#[derive(Parser, Debug)]
#[command(version, long_version = LONG_VERSION.as_str())]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: engine::cli::logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Three nodes in this process, prefill, then the transfer benchmark. With --matrix,
    /// --floor or --rate-sweep, forwarded to runner-harness (the notes generator's reports).
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
    /// Checks a cluster file: what each node would run with, or every error (exit 3, usage).
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
    /// The cluster over HTTP with JSON, for callers in any language: batches concurrent
    /// callers' commands, exactly once across retries by Idempotency-Key.
    Gateway(engine::cli::GatewayArgs),
    /// Every committed command and its outcome, in commit order, from a position on (with
    /// --follow, and every later commit), read from a follower.
    Changes(engine::cli::ChangesArgs),
    /// The change stream to a RabbitMQ exchange (AMQP 0.9.1) with publisher confirms, at
    /// least once and in order, going on after a restart where the broker confirmed.
    Publish(engine::cli::PublishArgs),
    /// Prints a shell's completion script for runner (bash, zsh, fish, elvish, powershell).
    Completions(engine::cli::CompletionsArgs),
    /// Writes runner's man pages (one per command) into a directory.
    Man(engine::cli::ManArgs),
    /// Forwarded to runner-harness: the deterministic cluster simulator on many seeds.
    Sim(Forwarded),
    /// Forwarded to runner-harness: node processes killed, restarted and paused at random.
    Chaos(Forwarded),
    /// Forwarded to runner-harness: partition scenarios through a loopback proxy.
    Partition(Forwarded),
    /// Forwarded to runner-harness: hostile clients and garbage beside normal clients.
    Hostile(Forwarded),
    /// Forwarded to runner-harness: three node processes over links with an added delay.
    Emulate(Forwarded),
    /// Forwarded to runner-harness: a rolling upgrade from an earlier build to this one.
    Rolling(Forwarded),
}

/// The arguments of a command this binary forwards to `runner-harness`, unread here.
#[derive(clap::Args, Debug)]
struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// True when the command line is one the harness binary runs.
fn for_the_harness(args: &[OsString]) -> bool {
    let Some(command) = args.get(1).and_then(|c| c.to_str()) else {
        return false;
    };
    let report = |a: &OsString| {
        let a = a.to_string_lossy();
        NOTES_OPTIONS
            .iter()
            .any(|o| a == *o || a.starts_with(&format!("{o}=")))
    };
    HARNESS_COMMANDS.contains(&command) || command == "local" && args.iter().any(report)
}

/// Replaces this process with the harness binary beside it, the arguments unchanged; it
/// must come from the same build.
fn forward(args: &[OsString]) -> anyhow::Error {
    let harness = match runner::sibling_binary(runner::HARNESS_BINARY) {
        Ok(path) => path,
        Err(error) => return error,
    };
    let error = std::process::Command::new(&harness)
        .args(&args[1..])
        .env(runner::FORWARDED_BUILD_VARIABLE, runner::BUILD_ID)
        .exec();
    anyhow::anyhow!("cannot run {}: {error}", harness.display())
}

/// Runs the command; an error is logged on one line (its causes joined, no backtrace: the
/// messages name what went wrong) and the process exits with the code of the table in
/// `notes/operations.md` (`engine::cli::Exit`; a bad command line exits 3).
fn main() -> std::process::ExitCode {
    engine::formats::set_binary(env!("CARGO_PKG_VERSION"), env!("RUNNER_GIT_COMMIT"));
    let args: Vec<OsString> = std::env::args_os().collect();
    if for_the_harness(&args) {
        return engine::cli::exit_code(Err(forward(&args)));
    }
    let cli = match engine::cli::parse_command_line::<Cli>() {
        Ok(cli) => cli,
        Err(exit) => return exit,
    };
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
        Command::Gateway(args) => {
            engine::cli::gateway_publishing::<Bank>(args, engine::cli::publish_all::<Bank>())
        }
        Command::Changes(args) => {
            engine::cli::changes::<Bank>(args, engine::cli::publish_all::<Bank>())
        }
        Command::Publish(args) => {
            engine::cli::publish::<Bank>(args, engine::cli::publish_all::<Bank>())
        }
        Command::Completions(args) => {
            engine::cli::completions(args, with_exit_codes(Cli::command()))
        }
        Command::Man(args) => engine::cli::man(args, with_exit_codes(Cli::command())),
        Command::Sim(_)
        | Command::Chaos(_)
        | Command::Partition(_)
        | Command::Hostile(_)
        | Command::Emulate(_)
        | Command::Rolling(_) => unreachable!("forwarded before parsing"),
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
