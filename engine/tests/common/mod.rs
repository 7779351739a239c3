//! Shared by the engine's tests: a small ledger handler (with a deliberately nondeterministic
//! command) and a former of chained entries.

#![allow(dead_code)]

pub mod tables;

use engine::codec::{Decode, Encode};
use engine::internals::entry::{Entry, EntryHash, Request, encode_commands, whole_requests_entry};
use engine::rng::Rng;
use engine::{ClientId, EntryIndex, Handler, RequestNumber, Schema, StateError, Table, Term, Tx};
use std::sync::atomic::{AtomicI64, Ordering};

pub const BALANCES: Table<u32, i64> = Table::new(1, "balances");
pub static NOISE: AtomicI64 = AtomicI64::new(0);

#[derive(Debug, Clone, Encode, Decode)]
pub enum Command {
    Set {
        account: u32,
        balance: i64,
    },
    Move {
        from: u32,
        to: u32,
        amount: i64,
    },
    Total,
    /// Not deterministic: returns a process-wide counter that every execution moves.
    Noise,
}

#[derive(Debug, Clone, PartialEq, Encode, Decode)]
pub enum Refused {
    Missing,
    Short,
    Full,
}

impl From<StateError> for Refused {
    fn from(_: StateError) -> Self {
        Refused::Full
    }
}

pub struct Ledger;

impl Handler for Ledger {
    type Command = Command;
    type Output = i64;
    type Error = Refused;

    fn schema(&self) -> Schema {
        Schema::new().table(&BALANCES)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<i64, Refused> {
        match *command {
            Command::Set { account, balance } => {
                tx.put(&BALANCES, account, balance)?;
                Ok(balance)
            }
            Command::Move { from, to, amount } => {
                let debited = tx.get(&BALANCES, &from).ok_or(Refused::Missing)?;
                let credited = tx.get(&BALANCES, &to).ok_or(Refused::Missing)?;
                if debited < amount {
                    return Err(Refused::Short);
                }
                tx.put(&BALANCES, from, debited - amount)?;
                tx.put(&BALANCES, to, credited + amount)?;
                Ok(debited - amount)
            }
            Command::Total => {
                let mut total = 0;
                tx.for_each_unordered(&BALANCES, |_, balance| total += balance);
                Ok(total)
            }
            Command::Noise => Ok(NOISE.fetch_add(1, Ordering::Relaxed)),
        }
    }
}

/// Forms chained entries of whole requests.
pub struct Former {
    pub prev: EntryHash,
    pub next: u64,
    pub term: Term,
}

impl Former {
    pub fn new(term: u64) -> Self {
        Former {
            prev: EntryHash::default(),
            next: 1,
            term: Term(term),
        }
    }

    pub fn entry(&mut self, requests: &[(u128, u64, Vec<Command>)]) -> Entry {
        let encoded: Vec<Vec<u8>> = requests
            .iter()
            .map(|(_, _, c)| encode_commands(c))
            .collect();
        let requests: Vec<Request<'_>> = requests
            .iter()
            .zip(&encoded)
            .map(|((client, number, commands), bytes)| Request {
                client: ClientId(*client),
                number: RequestNumber(*number),
                command_count: commands.len() as u32,
                commands: bytes,
            })
            .collect();
        let entry =
            whole_requests_entry(EntryIndex(self.next), self.term, &self.prev, 5, &requests);
        self.prev = entry.header.hash;
        self.next += 1;
        entry
    }
}

/// A seeded stream of entries (two requests of eight commands each), with refusals and scans.
pub fn entries(seed: u64, count: usize) -> Vec<Entry> {
    let mut rng = Rng::new(seed);
    let mut former = Former::new(1);
    let mut numbers = [0u64; 3];
    (0..count)
        .map(|n| {
            let requests: Vec<(u128, u64, Vec<Command>)> = (0..2)
                .map(|r| {
                    let client = (n * 2 + r) % 3;
                    numbers[client] += 1;
                    let commands = (0..8)
                        .map(|_| match (n, rng.below(20)) {
                            (0, _) => Command::Set {
                                account: rng.below(24) as u32,
                                balance: 1_000,
                            },
                            (_, 0) => Command::Total,
                            (_, 1) => Command::Set {
                                account: rng.below(24) as u32,
                                balance: rng.below(500) as i64,
                            },
                            _ => Command::Move {
                                from: rng.below(24) as u32,
                                to: rng.below(24) as u32,
                                amount: rng.below(400) as i64,
                            },
                        })
                        .collect();
                    (client as u128 + 1, numbers[client], commands)
                })
                .collect();
            former.entry(&requests)
        })
        .collect()
}
