//! Verify and Performance modes at the state machine: a leader that simulates entries before
//! they commit ends with exactly what a follower that only executes ends with, reuses what it
//! may, executes what it must, and catches a handler that is not deterministic.

use engine::codec::{Decode, Encode};
use engine::entry::{Entry, EntryHash, Request, encode_commands, whole_requests_entry};
use engine::rng::Rng;
use engine::{
    ApplyError, ClientId, EntryIndex, Handler, Mode, RequestNumber, Schema, StateError,
    StateMachine, Table, Term, Tx,
};
use std::sync::atomic::{AtomicI64, Ordering};

const BALANCES: Table<u32, i64> = Table::new(1, "balances");
static NOISE: AtomicI64 = AtomicI64::new(0);

#[derive(Debug, Clone, Encode, Decode)]
#[bincode(crate = "engine::codec::bincode")]
enum Command {
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
#[bincode(crate = "engine::codec::bincode")]
enum Refused {
    Missing,
    Short,
    Full,
}

impl From<StateError> for Refused {
    fn from(_: StateError) -> Self {
        Refused::Full
    }
}

struct Ledger;

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
struct Former {
    prev: EntryHash,
    next: u64,
    term: Term,
}

impl Former {
    fn new(term: u64) -> Self {
        Former {
            prev: EntryHash::default(),
            next: 1,
            term: Term(term),
        }
    }

    fn entry(&mut self, requests: &[(u64, u64, Vec<Command>)]) -> Entry {
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
fn entries(seed: u64, count: usize) -> Vec<Entry> {
    let mut rng = Rng::new(seed);
    let mut former = Former::new(1);
    let mut numbers = [0u64; 3];
    (0..count)
        .map(|n| {
            let requests: Vec<(u64, u64, Vec<Command>)> = (0..2)
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
                    (client as u64 + 1, numbers[client], commands)
                })
                .collect();
            former.entry(&requests)
        })
        .collect()
}

/// Proves a leader that simulates up to four entries ahead of commit, in either mode, ends every
/// entry with the same replies and state hash as a follower; Performance reuses every command
/// (the chain of simulations stays exact) and Verify executes and confirms every one.
#[test]
fn simulating_leader_matches_executing_follower() {
    let entries = entries(3, 200);
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Ledger, 1 << 20);
        for chunk in entries.chunks(4) {
            for entry in chunk {
                leader.simulate(entry);
            }
            for entry in chunk {
                assert_eq!(
                    leader.apply(entry).unwrap(),
                    follower.apply(entry).unwrap(),
                    "{mode:?} entry {}",
                    entry.index()
                );
            }
        }
        let counters = leader.counters();
        let commands = 200 * 16;
        assert_eq!(counters.simulated, commands);
        match mode {
            Mode::Performance => assert_eq!((counters.reused, counters.executed), (commands, 0)),
            Mode::Verify => {
                assert_eq!((counters.verified, counters.executed), (commands, commands))
            }
        }
    }
}

/// Proves a leader change between simulation and commit fails verification: from the first entry
/// that is another leader's, the simulations are discarded and every command executes; the
/// results are a follower's.
#[test]
fn leader_change_between_simulation_and_commit_executes() {
    let mine = entries(5, 6);
    let committed = {
        let mut theirs = entries(5, 3);
        let mut former = Former::new(2);
        for entry in &theirs {
            former.prev = entry.header.hash;
            former.next += 1;
        }
        theirs.push(former.entry(&[(
            9,
            1,
            vec![
                Command::Set {
                    account: 1,
                    balance: 7,
                },
                Command::Total,
            ],
        )]));
        theirs.push(former.entry(&[(
            9,
            2,
            vec![Command::Move {
                from: 1,
                to: 2,
                amount: 3,
            }],
        )]));
        theirs
    };
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Ledger, 1 << 20);
        for entry in &mine {
            leader.simulate(entry);
        }
        for entry in &committed {
            assert_eq!(leader.apply(entry).unwrap(), follower.apply(entry).unwrap());
        }
        assert_eq!(
            leader.pending_simulations(),
            0,
            "simulations of replaced entries are gone"
        );
        // Entries 1-3 are the ones this leader simulated; 4 and 5 are another leader's.
        let counters = leader.counters();
        let (replaced, kept) = (3, 3 * 16);
        match mode {
            Mode::Performance => assert_eq!((counters.executed, counters.reused), (replaced, kept)),
            Mode::Verify => assert_eq!(
                (counters.executed, counters.verified),
                (kept + replaced, kept)
            ),
        }
    }
}

/// Proves a retried request inside a simulated entry is a duplicate for the simulation exactly
/// as for the commit: the speculation stays exact and every command of it is reused.
#[test]
fn retried_requests_are_simulated_as_they_apply() {
    let mut former = Former::new(1);
    let setup = former.entry(&[(
        1,
        1,
        (0..6)
            .map(|a| Command::Set {
                account: a,
                balance: 100,
            })
            .collect(),
    )]);
    let first = former.entry(&[(
        2,
        1,
        vec![Command::Move {
            from: 0,
            to: 1,
            amount: 10,
        }],
    )]);
    // The same request again (a retry): a duplicate, applied once.
    let retry = former.entry(&[(
        2,
        1,
        vec![Command::Move {
            from: 0,
            to: 1,
            amount: 10,
        }],
    )]);
    let next = former.entry(&[(
        3,
        1,
        vec![
            Command::Move {
                from: 0,
                to: 2,
                amount: 5,
            },
            Command::Move {
                from: 3,
                to: 4,
                amount: 1,
            },
        ],
    )]);
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Ledger, 1 << 20);
        for entry in [&setup, &first, &retry, &next] {
            leader.simulate(entry);
        }
        for entry in [&setup, &first, &retry, &next] {
            assert_eq!(
                leader.apply(entry).unwrap(),
                follower.apply(entry).unwrap(),
                "{mode:?}"
            );
        }
        let counters = leader.counters();
        assert_eq!(
            counters.simulated,
            6 + 1 + 2,
            "{mode:?}: the duplicate was not run"
        );
        match mode {
            Mode::Performance => assert_eq!((counters.reused, counters.executed), (9, 0)),
            Mode::Verify => assert_eq!((counters.verified, counters.executed), (9, 9)),
        }
    }
}

/// Proves Verify mode stops at the first command whose execution differs from its simulation,
/// names the entry and the command, and releases none of the entry's results.
#[test]
fn verify_mode_catches_a_nondeterministic_handler() {
    let mut former = Former::new(1);
    let entry = former.entry(&[(
        1,
        1,
        vec![
            Command::Set {
                account: 1,
                balance: 5,
            },
            Command::Noise,
            Command::Total,
        ],
    )]);
    let mut leader = StateMachine::new(Ledger, 1 << 20);
    leader.set_mode(Mode::Verify);
    leader.simulate(&entry);
    match leader.apply(&entry) {
        Err(ApplyError::Nondeterministic {
            index,
            command,
            simulated,
            executed,
            writes,
        }) => {
            assert_eq!((index, command), (EntryIndex(1), 1));
            assert_ne!(simulated, executed);
            assert_eq!(writes, "the same");
        }
        other => panic!("expected the divergence to be caught, got {other:?}"),
    }
    assert_eq!(
        leader.applied_index(),
        EntryIndex(0),
        "nothing of the entry counts as applied"
    );
}
