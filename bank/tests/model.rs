//! The Bank against a plain BTreeMap bank over generated command sequences, with its invariants.

use bank::Bank;
use bank::{ACCOUNTS, Account, AccountId, BankCommand, BankError, BankOutput};
use engine::{Outcome, Sandbox};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The reference model: the Bank's rules written as plainly as possible.
#[derive(Default)]
struct Model {
    accounts: BTreeMap<u64, Account>,
}

impl Model {
    fn find(&self, id: AccountId) -> Result<Account, BankError> {
        if id.0 == 0 {
            return Err(BankError::InvalidId);
        }
        self.accounts
            .get(&id.0)
            .copied()
            .ok_or(BankError::AccountNotFound(id))
    }

    fn apply(&mut self, command: &BankCommand) -> Result<BankOutput, BankError> {
        match *command {
            BankCommand::Open { id, balance, flags } => self.open(id, balance, flags),
            BankCommand::Deposit { id, amount } => {
                let mut a = self.find(id)?;
                if amount == 0 {
                    return Err(BankError::ZeroAmount);
                }
                a.balance = a.balance.checked_add(amount).ok_or(BankError::Overflow)?;
                a.version += 1;
                self.accounts.insert(id.0, a);
                Ok(BankOutput::Account(a))
            }
            BankCommand::Withdraw { id, amount } => {
                let mut a = self.find(id)?;
                if amount == 0 {
                    return Err(BankError::ZeroAmount);
                }
                if a.balance < amount {
                    return Err(BankError::InsufficientFunds {
                        balance: a.balance,
                        amount,
                    });
                }
                a.balance -= amount;
                a.version += 1;
                self.accounts.insert(id.0, a);
                Ok(BankOutput::Account(a))
            }
            BankCommand::Transfer { from, to, amount } => self.transfer(from, to, amount),
            BankCommand::Get { id } => self.find(id).map(BankOutput::Account),
            BankCommand::Audit => Ok(BankOutput::Audit {
                accounts: self.accounts.len() as u64,
                total: self.accounts.values().map(|a| u128::from(a.balance)).sum(),
            }),
        }
    }

    fn open(&mut self, id: AccountId, balance: u64, flags: u32) -> Result<BankOutput, BankError> {
        if id.0 == 0 {
            return Err(BankError::InvalidId);
        }
        if self.accounts.contains_key(&id.0) {
            return Err(BankError::AccountExists(id));
        }
        let account = Account {
            balance,
            version: 1,
            flags,
        };
        self.accounts.insert(id.0, account);
        Ok(BankOutput::Account(account))
    }

    fn transfer(
        &mut self,
        from: AccountId,
        to: AccountId,
        amount: u64,
    ) -> Result<BankOutput, BankError> {
        if from == to {
            return Err(BankError::SameAccount);
        }
        let (mut f, mut t) = (self.find(from)?, self.find(to)?);
        if amount == 0 {
            return Err(BankError::ZeroAmount);
        }
        if f.balance < amount {
            return Err(BankError::InsufficientFunds {
                balance: f.balance,
                amount,
            });
        }
        t.balance = t.balance.checked_add(amount).ok_or(BankError::Overflow)?;
        f.balance -= amount;
        f.version += 1;
        t.version += 1;
        self.accounts.insert(from.0, f);
        self.accounts.insert(to.0, t);
        Ok(BankOutput::Transferred {
            from_balance: f.balance,
            to_balance: t.balance,
        })
    }

    fn total(&self) -> u128 {
        self.accounts.values().map(|a| u128::from(a.balance)).sum()
    }
}

fn id() -> impl Strategy<Value = AccountId> {
    (0u64..6).prop_map(AccountId)
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        6 => 1u64..200,
        1 => (0u64..3).prop_map(|d| u64::MAX - d),
    ]
}

fn command() -> impl Strategy<Value = BankCommand> {
    prop_oneof![
        2 => (id(), amount(), any::<u32>()).prop_map(|(id, balance, flags)| BankCommand::Open { id, balance, flags }),
        2 => (id(), amount()).prop_map(|(id, amount)| BankCommand::Deposit { id, amount }),
        2 => (id(), amount()).prop_map(|(id, amount)| BankCommand::Withdraw { id, amount }),
        4 => (id(), id(), amount()).prop_map(|(from, to, amount)| BankCommand::Transfer { from, to, amount }),
        1 => id().prop_map(|id| BankCommand::Get { id }),
        1 => Just(BankCommand::Audit),
    ]
}

/// The engine's accounts as a sorted map.
fn engine_accounts(sandbox: &Sandbox<Bank>) -> BTreeMap<u64, Account> {
    sandbox
        .state()
        .iter_unordered(&ACCOUNTS)
        .map(|(id, a)| (id.0, *a))
        .collect()
}

/// How much a successful command moves the bank's total: opens and deposits add, withdrawals
/// take; transfers, gets and audits move nothing.
fn total_change(command: &BankCommand) -> i128 {
    match *command {
        BankCommand::Open { balance, .. } => i128::from(balance),
        BankCommand::Deposit { amount, .. } => i128::from(amount),
        BankCommand::Withdraw { amount, .. } => -i128::from(amount),
        BankCommand::Transfer { .. } | BankCommand::Get { .. } | BankCommand::Audit => 0,
    }
}

/// The accounts a command writes when it succeeds.
fn touched(command: &BankCommand) -> Vec<u64> {
    match *command {
        BankCommand::Deposit { id, .. } | BankCommand::Withdraw { id, .. } => vec![id.0],
        BankCommand::Transfer { from, to, .. } => vec![from.0, to.0],
        BankCommand::Open { .. } | BankCommand::Get { .. } | BankCommand::Audit => vec![],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Proves every outcome matches the model, the total changes only by opens, deposits and
    /// withdrawals, every change bumps each touched account's version by one, and a failed
    /// command changes nothing; entries of 1 to 5 commands each.
    #[test]
    fn bank_matches_the_model(commands in proptest::collection::vec(command(), 1..40), cut in 1usize..6) {
        let mut sandbox = Sandbox::new(Bank, 1 << 20);
        let mut model = Model::default();
        let mut expected_total: i128 = 0;
        for chunk in commands.chunks(cut) {
            let before = engine_accounts(&sandbox);
            let outcomes = sandbox.run(chunk).unwrap();
            let mut after_each = before.clone();
            for (command, outcome) in chunk.iter().zip(&outcomes) {
                let expected = match model.apply(command) {
                    Ok(output) => Outcome::Done(output),
                    Err(error) => Outcome::Failed(error),
                };
                prop_assert_eq!(outcome, &expected, "command {:?}", command);
                if let Outcome::Done(_) = outcome {
                    expected_total += total_change(command);
                    for id in touched(command) {
                        prop_assert_eq!(model.accounts[&id].version, after_each[&id].version + 1);
                    }
                }
                // A failed command leaves the model (and so, by the check below, the engine)
                // exactly as it was.
                if let Outcome::Failed(_) = outcome {
                    prop_assert_eq!(&model.accounts, &after_each);
                }
                after_each = model.accounts.clone();
            }
            prop_assert_eq!(engine_accounts(&sandbox), model.accounts.clone());
            prop_assert_eq!(i128::try_from(model.total()).unwrap(), expected_total);
        }
    }
}
