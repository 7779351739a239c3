//! The Bank engine: accounts keyed by a nonzero id, with deposits, withdrawals, transfers,
//! linearizable reads and audits. Written only against `engine`'s public API, as any handler
//! author would write one.
//!
//! Business errors (an unknown account, insufficient funds, ...) are results, not failures: the
//! command changes nothing and its client learns why.

pub mod workload;

use engine::codec::{Decode, Encode};
use engine::{Handler, Prefetch, Schema, StateError, Table, Tx};

/// An account's id; zero is not a valid id.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Encode,
    Decode,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct AccountId(pub u64);

/// One account.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize)]
pub struct Account {
    /// The balance, in the smallest unit of the currency.
    pub balance: u64,
    /// Starts at 1 when the account opens; every change to the account adds one.
    pub version: u64,
    /// Flags the client set when it opened the account; the Bank stores them as they are.
    pub flags: u32,
}

/// The Bank's only table.
pub const ACCOUNTS: Table<AccountId, Account> = Table::new(0, "accounts");

/// The Bank's first handler version: transfers are free.
pub const VERSION_FREE_TRANSFERS: u32 = 1;
/// From this handler version on, a transfer also moves [`TRANSFER_FEE`] from the debited
/// account to [`FEE_ACCOUNT`] (`runner upgrade --handler-version 2` puts it in force).
pub const VERSION_TRANSFER_FEE: u32 = 2;
/// The fee on a transfer from [`VERSION_TRANSFER_FEE`] on, in the smallest unit.
pub const TRANSFER_FEE: u64 = 1;
/// Where fees go: opened by the first fee; clients cannot open it from
/// [`VERSION_TRANSFER_FEE`] on.
pub const FEE_ACCOUNT: AccountId = AccountId(u64::MAX);

/// A Bank command.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize, serde::Deserialize)]
pub enum BankCommand {
    /// Opens an account; a nonzero `balance` counts as a first deposit.
    Open {
        /// The new account's id.
        id: AccountId,
        /// Its opening balance.
        balance: u64,
        /// Its flags.
        flags: u32,
    },
    /// Adds `amount` to an account.
    Deposit {
        /// The account.
        id: AccountId,
        /// The amount, above zero.
        amount: u64,
    },
    /// Takes `amount` from an account.
    Withdraw {
        /// The account.
        id: AccountId,
        /// The amount, above zero.
        amount: u64,
    },
    /// Moves `amount` from one account to another, distinct, account.
    Transfer {
        /// The account debited.
        from: AccountId,
        /// The account credited.
        to: AccountId,
        /// The amount, above zero.
        amount: u64,
    },
    /// Reads an account (through the log, so the read is linearizable).
    Get {
        /// The account.
        id: AccountId,
    },
    /// Counts the accounts and sums their balances.
    Audit,
}

/// What a command that applied returns.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, serde::Serialize)]
pub enum BankOutput {
    /// The account as it stands after an open, deposit or withdrawal, or as read by a get.
    Account(Account),
    /// Both balances after a transfer (each account's version rose by one).
    Transferred {
        /// The debited account's balance.
        from_balance: u64,
        /// The credited account's balance.
        to_balance: u64,
    },
    /// The audit's figures.
    Audit {
        /// Accounts open.
        accounts: u64,
        /// The sum of all balances.
        total: u128,
    },
}

/// Why a command was refused. It changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, thiserror::Error, serde::Serialize)]
pub enum BankError {
    /// Account id zero.
    #[error("account id 0 is not valid")]
    InvalidId,
    /// No account has this id.
    #[error("account {0:?} not found")]
    AccountNotFound(AccountId),
    /// An account with this id is already open.
    #[error("account {0:?} exists")]
    AccountExists(AccountId),
    /// A transfer from an account to itself.
    #[error("transfer from an account to itself")]
    SameAccount,
    /// The debited account holds less than the amount.
    #[error("insufficient funds: balance {balance}, amount {amount}")]
    InsufficientFunds {
        /// The account's balance.
        balance: u64,
        /// The amount asked for.
        amount: u64,
    },
    /// An amount of zero.
    #[error("amount is zero")]
    ZeroAmount,
    /// The credited balance would pass `u64::MAX`.
    #[error("balance would overflow")]
    Overflow,
    /// The state has no room for another account.
    #[error("state capacity exhausted")]
    CapacityExhausted,
}

impl From<StateError> for BankError {
    fn from(_: StateError) -> Self {
        BankError::CapacityExhausted
    }
}

/// The Bank handler.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bank;

impl Handler for Bank {
    type Command = BankCommand;
    type Output = BankOutput;
    type Error = BankError;

    const VERSIONS: std::ops::RangeInclusive<u32> = VERSION_FREE_TRANSFERS..=VERSION_TRANSFER_FEE;

    fn schema(&self) -> Schema {
        Schema::new().table(&ACCOUNTS)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &BankCommand) -> Result<BankOutput, BankError> {
        match *command {
            BankCommand::Open { id, balance, flags } => open(tx, id, balance, flags),
            BankCommand::Deposit { id, amount } => deposit(tx, id, amount),
            BankCommand::Withdraw { id, amount } => withdraw(tx, id, amount),
            BankCommand::Transfer { from, to, amount } => transfer(tx, from, to, amount),
            BankCommand::Get { id } => Ok(BankOutput::Account(account(tx, id)?)),
            BankCommand::Audit => Ok(audit(tx)),
        }
    }

    fn read_only(command: &BankCommand) -> bool {
        matches!(command, BankCommand::Get { .. } | BankCommand::Audit)
    }

    fn prefetch(&self, command: &BankCommand, keys: &mut Prefetch<'_>) {
        match command {
            BankCommand::Open { id, .. }
            | BankCommand::Deposit { id, .. }
            | BankCommand::Withdraw { id, .. }
            | BankCommand::Get { id } => keys.key(&ACCOUNTS, id),
            BankCommand::Transfer { from, to, .. } => {
                keys.key(&ACCOUNTS, from);
                keys.key(&ACCOUNTS, to);
            }
            BankCommand::Audit => {}
        }
    }
}

fn account(tx: &mut Tx<'_>, id: AccountId) -> Result<Account, BankError> {
    if id.0 == 0 {
        return Err(BankError::InvalidId);
    }
    tx.get(&ACCOUNTS, &id).ok_or(BankError::AccountNotFound(id))
}

fn open(tx: &mut Tx<'_>, id: AccountId, balance: u64, flags: u32) -> Result<BankOutput, BankError> {
    let reserved = id == FEE_ACCOUNT && tx.handler_version() >= VERSION_TRANSFER_FEE;
    if id.0 == 0 || reserved {
        return Err(BankError::InvalidId);
    }
    if tx.contains(&ACCOUNTS, &id) {
        return Err(BankError::AccountExists(id));
    }
    let account = Account {
        balance,
        version: 1,
        flags,
    };
    tx.put(&ACCOUNTS, id, account)?;
    Ok(BankOutput::Account(account))
}

fn deposit(tx: &mut Tx<'_>, id: AccountId, amount: u64) -> Result<BankOutput, BankError> {
    let mut account = account(tx, id)?;
    if amount == 0 {
        return Err(BankError::ZeroAmount);
    }
    account.balance = account
        .balance
        .checked_add(amount)
        .ok_or(BankError::Overflow)?;
    account.version += 1;
    tx.put(&ACCOUNTS, id, account)?;
    Ok(BankOutput::Account(account))
}

fn withdraw(tx: &mut Tx<'_>, id: AccountId, amount: u64) -> Result<BankOutput, BankError> {
    let mut account = account(tx, id)?;
    if amount == 0 {
        return Err(BankError::ZeroAmount);
    }
    account.balance = debit(account.balance, amount)?;
    account.version += 1;
    tx.put(&ACCOUNTS, id, account)?;
    Ok(BankOutput::Account(account))
}

fn transfer(
    tx: &mut Tx<'_>,
    from: AccountId,
    to: AccountId,
    amount: u64,
) -> Result<BankOutput, BankError> {
    if from == to {
        return Err(BankError::SameAccount);
    }
    let mut debited = account(tx, from)?;
    let mut credited = account(tx, to)?;
    if amount == 0 {
        return Err(BankError::ZeroAmount);
    }
    let fee = if tx.handler_version() >= VERSION_TRANSFER_FEE {
        TRANSFER_FEE
    } else {
        0
    };
    let charged = amount.checked_add(fee).ok_or(BankError::Overflow)?;
    debited.balance = debit(debited.balance, charged)?;
    credited.balance = credited
        .balance
        .checked_add(amount)
        .ok_or(BankError::Overflow)?;
    debited.version += 1;
    credited.version += 1;
    tx.put(&ACCOUNTS, from, debited)?;
    tx.put(&ACCOUNTS, to, credited)?;
    if fee > 0 {
        collect_fee(tx, fee)?;
    }
    Ok(BankOutput::Transferred {
        from_balance: debited.balance,
        to_balance: credited.balance,
    })
}

/// Credits `fee` to [`FEE_ACCOUNT`], opening it with the first fee.
fn collect_fee(tx: &mut Tx<'_>, fee: u64) -> Result<(), BankError> {
    let mut fees = tx.get(&ACCOUNTS, &FEE_ACCOUNT).unwrap_or(Account {
        balance: 0,
        version: 0,
        flags: 0,
    });
    fees.balance = fees.balance.checked_add(fee).ok_or(BankError::Overflow)?;
    fees.version += 1;
    tx.put(&ACCOUNTS, FEE_ACCOUNT, fees)?;
    Ok(())
}

fn debit(balance: u64, amount: u64) -> Result<u64, BankError> {
    balance
        .checked_sub(amount)
        .ok_or(BankError::InsufficientFunds { balance, amount })
}

fn audit(tx: &mut Tx<'_>) -> BankOutput {
    let (mut accounts, mut total) = (0u64, 0u128);
    tx.for_each_unordered(&ACCOUNTS, |_, account| {
        accounts += 1;
        total += u128::from(account.balance);
    });
    BankOutput::Audit { accounts, total }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
