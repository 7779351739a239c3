//! `runner sim`: the deterministic cluster simulator (`engine::sim`) driving the Bank, over
//! many seeds; each failing seed is printed and replays with `--seed S --seeds 1`.

use crate::harness::sim_oracle::BankOracle;
use bank::workload::account_id;
use bank::{ACCOUNTS, AccountId, Bank, BankCommand, BankError, BankOutput};
use engine::Outcome;
use engine::rng::Rng;
use engine::sim::check::Logged;
use engine::sim::{SimOptions, SimReport, Workload};
use engine::state::State;
use std::path::PathBuf;
use std::time::Instant;

/// Accounts the simulated clients use: few, so that their commands contend.
pub const SIM_ACCOUNTS: u64 = 8;
/// Commands in one simulated request, at most.
pub const SIM_REQUEST_COMMANDS_MAX: u64 = 8;
/// Amounts the simulated commands move, at most.
pub const SIM_AMOUNT_MAX: u64 = 2_000;

/// Options of `runner sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed (the others follow it); without it, one drawn from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Requests each of the three clients sends per seed.
    #[arg(long, default_value_t = 100)]
    requests: u32,
    /// Writes `{"seeds": N, "violations": V, "failing_seeds": [...], "violations_by_invariant": {"I8": n, ...}}` here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Prints a line per seed.
    #[arg(long)]
    verbose: bool,
}

/// The Bank under simulation: random commands of every kind over a few accounts, the
/// money it must hold (I3): opening balances and deposits in, withdrawals out, transfers
/// moving money without creating or destroying any; and the Bank by hand ([`BankOracle`])
/// that every answer and the committed state are compared with.
#[derive(Debug, Default)]
pub struct BankWorkload {
    /// The total every balance must sum to, from the outcomes in the committed order.
    expected_total: u128,
    /// The independent oracle, fed the committed log.
    oracle: BankOracle,
}

impl Workload for BankWorkload {
    type H = Bank;

    fn handler(&self) -> Bank {
        Bank
    }

    fn next_request(&mut self, rng: &mut Rng) -> Vec<BankCommand> {
        let count = 1 + rng.below(SIM_REQUEST_COMMANDS_MAX);
        (0..count).map(|_| random_command(rng)).collect()
    }

    fn observe(&mut self, command: &BankCommand, outcome: &Outcome<BankOutput, BankError>) {
        if let Outcome::Done(_) = outcome {
            match *command {
                BankCommand::Open { balance, .. } => self.expected_total += u128::from(balance),
                BankCommand::Deposit { amount, .. } => self.expected_total += u128::from(amount),
                BankCommand::Withdraw { amount, .. } => self.expected_total -= u128::from(amount),
                BankCommand::Transfer { .. } | BankCommand::Get { .. } | BankCommand::Audit => {}
            }
        }
    }

    fn check(&self, state: &State) -> Result<(), String> {
        let total: u128 = state
            .iter_unordered(&ACCOUNTS)
            .map(|(_, account)| u128::from(account.balance))
            .sum();
        if total != self.expected_total {
            return Err(format!(
                "balances sum to {total}, deposits and withdrawals to {}",
                self.expected_total
            ));
        }
        Ok(())
    }

    fn logged(&mut self, logged: Logged<'_, Bank>) -> Result<(), String> {
        self.oracle.logged(logged)
    }

    fn check_model(&self, state: &State) -> Result<(), String> {
        self.oracle.check_state(state)
    }
}

fn random_command(rng: &mut Rng) -> BankCommand {
    let id = |rng: &mut Rng| account_id(rng.below(SIM_ACCOUNTS));
    let amount = 1 + rng.below(SIM_AMOUNT_MAX);
    match rng.below(20) {
        0..=2 => BankCommand::Open {
            id: id(rng),
            balance: amount,
            flags: 0,
        },
        3..=5 => BankCommand::Deposit {
            id: id(rng),
            amount,
        },
        6..=8 => BankCommand::Withdraw {
            id: id(rng),
            amount,
        },
        9..=16 => BankCommand::Transfer {
            from: id(rng),
            to: id(rng),
            amount,
        },
        17..=18 => BankCommand::Get { id: id(rng) },
        _ => {
            if rng.chance(1, 2) {
                BankCommand::Audit
            } else {
                BankCommand::Get { id: AccountId(0) }
            }
        }
    }
}

/// Runs the simulator on `args.seeds` seeds from the first; prints failures and a summary.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let first = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!(
        "simulating {} seeds from {first} ({} requests per client)",
        args.seeds, args.requests
    );
    let started = Instant::now();
    let mut failing = Vec::new();
    // How many violations of each invariant the failing seeds found.
    let mut broken: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut totals = SimReport::default();
    let mut last_progress = Instant::now();
    for n in 0..args.seeds {
        let seed = first.wrapping_add(n);
        let mut options = SimOptions::new(seed);
        options.requests = args.requests;
        let report = engine::sim::run(BankWorkload::default(), options);
        if args.verbose {
            eprintln!(
                "seed {seed}: {}; {} snapshots taken, {} installed, {} damaged restarts, {} disks full, {} acknowledged, {} committed, {} crashes, {} partitions, {} leaders, {} events, {:.1} s simulated",
                report.swarm,
                report.snapshots,
                report.installs,
                report.damaged,
                report.disks_full,
                report.acknowledged,
                report.committed,
                report.crashes,
                report.partitions,
                report.leaders,
                report.events,
                report.time as f64 / 10_000.0
            );
        }
        if !report.violations.is_empty() {
            eprintln!("seed {seed} FAILED ({}):", report.swarm);
            for violation in &report.violations {
                eprintln!("  {violation}");
                *broken.entry(violation.invariant.code()).or_default() += 1;
            }
            eprintln!("  replay: runner sim --seed {seed} --seeds 1 --verbose");
            failing.push(seed);
        }
        totals.acknowledged += report.acknowledged;
        totals.committed += report.committed;
        totals.crashes += report.crashes;
        totals.partitions += report.partitions;
        totals.events += report.events;
        totals.snapshots += report.snapshots;
        totals.installs += report.installs;
        totals.damaged += report.damaged;
        totals.disks_full += report.disks_full;
        totals.stalls += report.stalls;
        totals.acks_down += report.acks_down;
        totals.fsync_errors += report.fsync_errors;
        totals.hedges += report.hedges;
        totals.snapshots_damaged += report.snapshots_damaged;
        totals.rebuilds += report.rebuilds;
        totals.hard_states_damaged += report.hard_states_damaged;
        totals.damaged_together += report.damaged_together;
        totals.copies_lost += report.copies_lost;
        totals.rewritten_after_loss += report.rewritten_after_loss;
        if last_progress.elapsed().as_secs() >= 5 {
            last_progress = Instant::now();
            eprintln!(
                "  {} of {} seeds, {} failing",
                n + 1,
                args.seeds,
                failing.len()
            );
        }
    }
    println!(
        "{:>8} {:>10} {:>12} {:>10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>10} {:>7} {:>9} {:>8} {:>12} {:>17} {:>8} {:>19} {:>16} {:>11} {:>20} {:>12} {:>8}",
        "seeds",
        "failing",
        "acknowledged",
        "committed",
        "crashes",
        "partitions",
        "snapshots",
        "installs",
        "damaged",
        "disks_full",
        "stalls",
        "acks_down",
        "hedges",
        "fsync_errors",
        "snapshots_damaged",
        "rebuilds",
        "hard_states_damaged",
        "damaged_together",
        "copies_lost",
        "rewritten_after_loss",
        "events",
        "seconds"
    );
    println!(
        "{:>8} {:>10} {:>12} {:>10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>10} {:>7} {:>9} {:>8} {:>12} {:>17} {:>8} {:>19} {:>16} {:>11} {:>20} {:>12} {:>8.1}",
        args.seeds,
        failing.len(),
        totals.acknowledged,
        totals.committed,
        totals.crashes,
        totals.partitions,
        totals.snapshots,
        totals.installs,
        totals.damaged,
        totals.disks_full,
        totals.stalls,
        totals.acks_down,
        totals.hedges,
        totals.fsync_errors,
        totals.snapshots_damaged,
        totals.rebuilds,
        totals.hard_states_damaged,
        totals.damaged_together,
        totals.copies_lost,
        totals.rewritten_after_loss,
        totals.events,
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "seeds": args.seeds,
            "first_seed": first,
            "violations": failing.len(),
            "failing_seeds": failing,
            "violations_by_invariant": broken,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")?;
    }
    if failing.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} of {} seeds violated an invariant",
            failing.len(),
            args.seeds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds the oracle test runs.
    const ORACLE_SEEDS: u64 = 20;

    /// Proves standard simulated runs over twenty seeds pass every check, the oracle's
    /// comparison of every answer and of the committed state included.
    #[test]
    fn simulated_runs_agree_with_the_oracle() {
        for seed in 0..ORACLE_SEEDS {
            let report = engine::sim::run(BankWorkload::default(), SimOptions::new(seed));
            assert!(report.committed > 0, "seed {seed} committed nothing");
            assert_eq!(report.violations, Vec::new(), "seed {seed}");
        }
    }
}
