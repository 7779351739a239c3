//! `runner-harness`: the test harnesses, apart from the product binary. The simulator over
//! many seeds with its independent oracle; real-process runs under kill -9 and pauses,
//! partitions through our proxy, hostile clients, emulated link delays and rolling upgrades;
//! and the notes generator (the benchmark matrix, the floor report, the rate sweep). The
//! product binary `runner` forwards `sim`, `chaos`, `partition`, `hostile`, `emulate`,
//! `rolling` and `local --matrix|--floor|--rate-sweep` here, arguments unchanged.

#![warn(clippy::disallowed_macros)]

mod chaos;
mod delay_line;
mod emulate;
mod faults;
mod hostile;
#[allow(dead_code)] // until `runner chaos` checks its histories with it
mod linearize;
mod notes;
mod partition;
mod proxy;
mod rolling;
mod sim;
mod sim_oracle;

use clap::{Parser, Subcommand};

/// The runner's test harnesses: the simulator, fault and load runs, the notes generator.
#[derive(Parser, Debug)]
#[command(name = "runner-harness", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: engine::cli::logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
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
    /// The notes generator: the benchmark matrix (--matrix), the floor report (--floor) or
    /// the rate sweep (--rate-sweep), written into notes/.
    Local(notes::NotesArgs),
}

/// Runs the command; an error is printed on one line and the process exits with the code of
/// the table in `notes/operations.md` (`engine::cli::Exit`).
fn main() -> std::process::ExitCode {
    let cli = match engine::cli::parse_command_line::<Cli>() {
        Ok(cli) => cli,
        Err(exit) => return exit,
    };
    let default = match matches!(cli.command, Command::Sim(_)) {
        true => engine::cli::logging::SIM_LOG_FILTER_DEFAULT,
        false => engine::cli::logging::LOG_FILTER_DEFAULT,
    };
    engine::cli::logging::init_with(cli.log.log_format, default);
    if let Err(error) = runner::check_forwarded_build() {
        return engine::cli::exit_code(Err(error));
    }
    engine::cli::exit_code(run(cli.command))
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Sim(args) => sim::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Partition(args) => partition::run(args),
        Command::Hostile(args) => hostile::run(args),
        Command::Emulate(args) => emulate::run(args),
        Command::Rolling(args) => rolling::run(args),
        Command::Local(args) => notes::run(&args),
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Proves the command line is well formed for clap.
    #[test]
    fn the_command_line_passes_clap_debug_assertions() {
        Cli::command().debug_assert();
    }
}
