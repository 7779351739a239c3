//! Seeded Bank workloads: the prefill of accounts and the reference transfer stream.

use crate::{AccountId, BankCommand};
use engine::rng::Rng;

/// Each prefilled account opens with this balance.
pub const PREFILL_BALANCE: u64 = 1_000_000;
/// Transfers move between 1 and this amount.
pub const TRANSFER_AMOUNT_MAX: u64 = 1_000;

/// The id of the `n`th account (from 0): scattered over the whole `u64` range, never zero, so
/// that the state sees ids as a real bank would, not a dense array index.
pub fn account_id(n: u64) -> AccountId {
    // Multiplying by an odd constant is a bijection on u64 that maps only 0 to 0; n + 1 is
    // never 0 for the account counts we use.
    AccountId((n + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The command that opens the `n`th account.
pub fn open_command(n: u64) -> BankCommand {
    BankCommand::Open {
        id: account_id(n),
        balance: PREFILL_BALANCE,
        flags: 0,
    }
}

/// The mix of the transfer stream, without its generator: random transfers between
/// `accounts` prefilled accounts, and as many single-account reads as asked. A load client
/// that owns its generator (the engine's benchmark hands each its own) draws from it.
#[derive(Clone, Copy, Debug)]
pub struct TransferMix {
    accounts: u64,
    reads_percent: u64,
}

impl TransferMix {
    /// Transfers only, over the accounts `0..accounts` (at least two).
    pub fn new(accounts: u64) -> Self {
        assert!(accounts >= 2, "transfers need two accounts");
        TransferMix {
            accounts,
            reads_percent: 0,
        }
    }

    /// The same mix with `percent` of its commands (0 to 100) single-account reads instead
    /// of transfers (a contended mix: few accounts, half reads). With 0 it is the plain
    /// stream, command for command.
    pub fn with_reads(mut self, percent: u64) -> Self {
        self.reads_percent = percent.min(100);
        self
    }

    /// The next command drawn from `rng`: a read of a random account (as often as asked), or
    /// a transfer between two distinct random accounts of a random amount.
    pub fn command(&self, rng: &mut Rng) -> BankCommand {
        if self.reads_percent > 0 && rng.below(100) < self.reads_percent {
            return self.read(rng);
        }
        self.transfer(rng)
    }

    /// The next request of `commands` commands drawn from `rng` into `out`: with reads asked
    /// for, reads only (as often as asked, per request) or transfers only, as a client
    /// reading balances sends its reads on their own (a request of reads only is answered off
    /// the log); with none, `commands` transfers, as [`TransferMix::command`] gives them.
    pub fn request(&self, rng: &mut Rng, commands: u32, out: &mut Vec<BankCommand>) {
        let reads = self.reads_percent > 0 && rng.below(100) < self.reads_percent;
        for _ in 0..commands {
            out.push(if reads {
                self.read(rng)
            } else {
                self.transfer(rng)
            });
        }
    }

    fn read(&self, rng: &mut Rng) -> BankCommand {
        BankCommand::Get {
            id: account_id(rng.below(self.accounts)),
        }
    }

    fn transfer(&self, rng: &mut Rng) -> BankCommand {
        let from = rng.below(self.accounts);
        let mut to = rng.below(self.accounts - 1);
        if to >= from {
            to += 1;
        }
        let amount = 1 + rng.below(TRANSFER_AMOUNT_MAX);
        BankCommand::Transfer {
            from: account_id(from),
            to: account_id(to),
            amount,
        }
    }
}

/// The reference transfer stream: a [`TransferMix`] with a generator of its own, from a seed.
#[derive(Clone, Debug)]
pub struct Transfers {
    rng: Rng,
    mix: TransferMix,
}

impl Transfers {
    /// A stream over the accounts `0..accounts` (at least two).
    pub fn new(seed: u64, accounts: u64) -> Self {
        Transfers {
            rng: Rng::new(seed),
            mix: TransferMix::new(accounts),
        }
    }

    /// The same stream with `percent` of its commands reads ([`TransferMix::with_reads`]).
    pub fn with_reads(mut self, percent: u64) -> Self {
        self.mix = self.mix.with_reads(percent);
        self
    }

    /// The next command ([`TransferMix::command`]).
    pub fn next_command(&mut self) -> BankCommand {
        self.mix.command(&mut self.rng)
    }

    /// The next request of `commands` commands into `out` ([`TransferMix::request`]).
    pub fn next_request(&mut self, commands: u32, out: &mut Vec<BankCommand>) {
        self.mix.request(&mut self.rng, commands, out);
    }
}

/// A stream of every kind of command, valid and invalid: opens (some repeated), deposits,
/// withdrawals and transfers with amounts that sometimes overdraw, unknown ids, same-account
/// transfers, zero amounts, gets and a few audits. The first `accounts` commands open accounts
/// `0..accounts`; ids go up to 50 past them. For determinism tests.
pub fn mixed_stream(seed: u64, commands: usize, accounts: u64) -> Vec<BankCommand> {
    let mut rng = Rng::new(seed);
    let id = |rng: &mut Rng| account_id(rng.below(accounts + 50));
    (0..commands)
        .map(|n| {
            if n < accounts as usize {
                return BankCommand::Open {
                    id: account_id(n as u64),
                    balance: rng.below(5_000),
                    flags: 0,
                };
            }
            let amount = if rng.chance(1, 50) {
                0
            } else {
                rng.below(3_000)
            };
            match rng.below(100) {
                0..=4 => BankCommand::Open {
                    id: id(&mut rng),
                    balance: amount,
                    flags: 1,
                },
                5..=19 => BankCommand::Deposit {
                    id: id(&mut rng),
                    amount,
                },
                20..=34 => BankCommand::Withdraw {
                    id: id(&mut rng),
                    amount,
                },
                35..=89 => {
                    let from = id(&mut rng);
                    let to = if rng.chance(1, 40) {
                        from
                    } else {
                        id(&mut rng)
                    };
                    BankCommand::Transfer { from, to, amount }
                }
                90..=98 => BankCommand::Get { id: id(&mut rng) },
                _ => BankCommand::Audit,
            }
        })
        .collect()
}
