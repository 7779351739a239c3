//! `runner sim`: the deterministic cluster simulator (`engine::sim`) driving the Bank, over
//! many seeds; each failing seed is printed and replays with `--seed S --seeds 1`.

use crate::sim_oracle::{BankOracle, OracleError};
use bank::workload::account_id;
use bank::{ACCOUNTS, AccountId, Bank, BankCommand, BankError, BankOutput};
use engine::Outcome;
use engine::cli::SimArgs;
use engine::rng::Rng;
#[cfg(test)]
use engine::sim::SimOptions;
use engine::sim::Workload;
use engine::sim::check::Logged;
use engine::state::State;

/// Accounts the simulated clients use: few, so that their commands contend.
pub const SIM_ACCOUNTS: u64 = 8;
/// Commands in one simulated request, at most.
pub const SIM_REQUEST_COMMANDS_MAX: u64 = 8;
/// Amounts the simulated commands move, at most.
pub const SIM_AMOUNT_MAX: u64 = 2_000;
/// Requests of only `Get`s, in percent: sent off the log as reads, which the real-time check
/// (I12) holds to a committed state between their sending and their answer.
pub const SIM_READ_REQUEST_PERCENT: u64 = 20;

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

/// What the Bank's simulation checks find wrong.
#[derive(Debug, thiserror::Error)]
pub enum BankBroken {
    /// Money was made or lost (I3).
    #[error("balances sum to {total}, deposits and withdrawals to {expected}")]
    Total {
        /// What the balances sum to.
        total: u128,
        /// What the outcomes say they must.
        expected: u128,
    },
    /// The reference replica parts from the oracle.
    #[error(transparent)]
    Oracle(#[from] OracleError),
}

impl Workload for BankWorkload {
    type H = Bank;
    type Error = BankBroken;

    fn handler(&self) -> Bank {
        Bank
    }

    fn next_request(&mut self, rng: &mut Rng) -> Vec<BankCommand> {
        let count = 1 + rng.below(SIM_REQUEST_COMMANDS_MAX);
        if rng.below(100) < SIM_READ_REQUEST_PERCENT {
            let get = |rng: &mut Rng| BankCommand::Get {
                id: account_id(rng.below(SIM_ACCOUNTS)),
            };
            return (0..count).map(|_| get(rng)).collect();
        }
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

    fn check(&self, state: &State) -> Result<(), BankBroken> {
        let total: u128 = state
            .iter_unordered(&ACCOUNTS)
            .map(|(_, account)| u128::from(account.balance))
            .sum();
        if total != self.expected_total {
            return Err(BankBroken::Total {
                total,
                expected: self.expected_total,
            });
        }
        Ok(())
    }

    fn logged(&mut self, logged: Logged<'_, Bank>) -> Result<(), BankBroken> {
        Ok(self.oracle.logged(logged)?)
    }

    fn check_model(&self, state: &State) -> Result<(), BankBroken> {
        Ok(self.oracle.check_state(state)?)
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

/// Runs the simulator with the Bank's workload (see [`engine::cli::sim`]).
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    engine::cli::sim(args, BankWorkload::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeds the oracle test runs.
    const ORACLE_SEEDS: u64 = 20;

    /// Proves standard simulated runs over twenty seeds pass every check, the oracle's
    /// comparison of every answer and of the committed state included, and that they
    /// exercised callers' keys: keyed runs and keys alone were sent, and some keyed commands
    /// were answered from a key another copy ran, some "reused" (their key had other commands).
    #[test]
    fn simulated_runs_agree_with_the_oracle() {
        let mut totals = engine::sim::SimReport::default();
        for seed in 0..ORACLE_SEEDS {
            let report = engine::sim::run(BankWorkload::default(), SimOptions::new(seed));
            assert!(report.committed > 0, "seed {seed} committed nothing");
            assert_eq!(report.violations, Vec::new(), "seed {seed}");
            totals.absorb(&report);
        }
        let keyed = (
            totals.keyed_runs,
            totals.keys_alone,
            totals.keyed_repeats,
            totals.keyed_reused,
        );
        eprintln!("{ORACLE_SEEDS} seeds: keyed runs, keys alone, repeats, reused {keyed:?}");
        assert!(keyed.0 > 0, "no keyed run was sent: {keyed:?}");
        assert!(keyed.1 > 0, "no key was sent alone: {keyed:?}");
        assert!(
            keyed.2 > 0,
            "no key was answered from a run before: {keyed:?}"
        );
        assert!(keyed.3 > 0, "no key was answered reused: {keyed:?}");
    }
}
