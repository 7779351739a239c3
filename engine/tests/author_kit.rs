//! The handler author's public test helpers, as an author outside the engine uses them: the
//! determinism check passes a deterministic handler and names where a handler that is not
//! deterministic (in three different ways) first differs; a capacity too small for the empty
//! tables is refused when the state is made, with both numbers.

use engine::codec::{Decode, Encode};
use engine::testing::{Disagreement, NotDeterministic, Run, check_determinism};
use engine::{CapacityTooSmall, Handler, Mode, Outcome, Sandbox, Schema, StateError, Table, Tx};
use std::sync::atomic::{AtomicU64, Ordering};

const SUMS: Table<u64, u64> = Table::new(1, "sums");
const LAST: Table<u64, u64> = Table::new(2, "last");
const SEEN: Table<u64, u64> = Table::new(3, "seen");
const SPARE: Table<u64, u64> = Table::new(4, "spare");

#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
enum Command {
    Add { key: u64, amount: u64 },
    Get { key: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Encode, Decode)]
struct Full;

impl From<StateError> for Full {
    fn from(_: StateError) -> Self {
        Full
    }
}

/// How the handler breaks determinism, if it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flaw {
    None,
    /// Reads a counter every copy of the handler shares and every execution bumps: a
    /// simulation and the execution after it differ.
    SharedCounter,
    /// Writes what it read from a counter of its own copy (each replica has one): the
    /// replicas' states differ, the outcomes do not.
    OwnCounterWritten,
    /// Writes a number fixed for each copy of the handler (as a per-process setting would
    /// be): the leader's simulation and its execution agree, the follower does not.
    CopyWritten,
}

/// Sums per key, in four tables; `flaw` decides how it breaks determinism.
struct Sums {
    flaw: Flaw,
    own: AtomicU64,
    /// Drawn once per copy.
    copy: u64,
}

static SHARED: AtomicU64 = AtomicU64::new(0);
static COPIES: AtomicU64 = AtomicU64::new(0);

impl Sums {
    fn new(flaw: Flaw) -> Self {
        Sums {
            flaw,
            own: AtomicU64::new(0),
            copy: COPIES.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Clone for Sums {
    fn clone(&self) -> Self {
        Sums::new(self.flaw)
    }
}

impl Handler for Sums {
    type Command = Command;
    type Output = u64;
    type Error = Full;

    fn schema(&self) -> Schema {
        Schema::new()
            .table(&SUMS)
            .table(&LAST)
            .table(&SEEN)
            .table(&SPARE)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<u64, Full> {
        match *command {
            Command::Add { key, amount } => {
                let sum = tx.get(&SUMS, &key).unwrap_or(0) + amount;
                tx.put(&SUMS, key, sum)?;
                tx.put(&LAST, key, amount)?;
                match self.flaw {
                    Flaw::None => Ok(sum),
                    Flaw::SharedCounter => Ok(sum + SHARED.fetch_add(1, Ordering::Relaxed)),
                    Flaw::OwnCounterWritten => {
                        tx.put(&SEEN, key, self.own.fetch_add(1, Ordering::Relaxed))?;
                        Ok(sum)
                    }
                    Flaw::CopyWritten => {
                        tx.put(&SEEN, key, self.copy)?;
                        Ok(sum)
                    }
                }
            }
            Command::Get { key } => Ok(tx.get(&SUMS, &key).unwrap_or(0)),
        }
    }
}

/// 300 requests of 1 to 9 commands over 20 keys.
fn stream() -> Vec<Vec<Command>> {
    (0..300u64)
        .map(|n| {
            (0..1 + n % 9)
                .map(|k| match (n + k) % 4 {
                    0 => Command::Get {
                        key: (n * 7 + k) % 20,
                    },
                    _ => Command::Add {
                        key: (n * 3 + k) % 20,
                        amount: n + k,
                    },
                })
                .collect()
        })
        .collect()
}

/// Proves a deterministic handler passes, packed four ways in both modes, with the outcomes a
/// sandbox gives for the same requests (the check's clients take turns, as a sandbox's one
/// client would number them: the outcomes of each request are its own either way).
#[test]
fn a_deterministic_handler_passes_with_the_sandboxs_outcomes() {
    let requests = stream();
    let checked = check_determinism(Sums::new(Flaw::None), &requests, &[1, 16, 100, 1024])
        .expect("deterministic");
    let mut sandbox = Sandbox::new(Sums::new(Flaw::None), 1 << 30);
    let expected: Vec<Vec<Outcome<u64, Full>>> =
        requests.iter().map(|r| sandbox.run(r).unwrap()).collect();
    assert_eq!(checked.outcomes, expected);
    assert_ne!(
        checked.state_hash,
        sandbox.machine().state_hash(),
        "sessions are in the hash"
    );
}

/// Proves a handler whose outcome depends on a counter outside the state is caught in Verify
/// mode, at the first entry, naming the command's difference.
#[test]
fn a_shared_counter_fails_verification() {
    let error = check_determinism(Sums::new(Flaw::SharedCounter), &stream(), &[16])
        .expect_err("not deterministic");
    let NotDeterministic::Apply { run, index, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(
        *run,
        Run {
            entry_commands: 16,
            mode: Mode::Verify
        }
    );
    assert_eq!(index.0, 1, "{error}");
    assert!(error.to_string().contains("in verify mode"), "{error}");
}

/// Proves a handler that writes what differs between replicas (with equal outcomes) is caught
/// by the state hashes of a leader and a follower.
#[test]
fn replicas_that_write_otherwise_are_caught_by_their_hashes() {
    let error = check_determinism(Sums::new(Flaw::OwnCounterWritten), &stream(), &[16, 1024])
        .expect_err("not deterministic");
    let text = error.to_string();
    let caught = matches!(
        &error,
        NotDeterministic::Replicas {
            what: Disagreement::StateHash,
            ..
        } | NotDeterministic::Apply { .. }
    );
    assert!(caught, "{text}");
}

/// Proves a handler whose copies differ (a simulation and an execution on one copy agree)
/// is caught by the follower's state hash at the first entry, in verify mode already.
#[test]
fn copies_that_write_otherwise_are_caught_by_the_followers_hash() {
    let error = check_determinism(Sums::new(Flaw::CopyWritten), &stream(), &[16, 1024])
        .expect_err("not deterministic");
    let NotDeterministic::Replicas { run, index, what } = &error else {
        panic!("{error}")
    };
    assert_eq!(
        (run.mode, index.0, *what),
        (Mode::Verify, 1, Disagreement::StateHash)
    );
    assert!(
        error.to_string().contains("ended with other state hashes"),
        "{error}"
    );
}

/// Proves requests and entry sizes the engine never forms are refused, not run.
#[test]
fn impossible_streams_are_refused() {
    let handler = Sums::new(Flaw::None);
    let empty = check_determinism(handler.clone(), &[vec![]], &[16]).unwrap_err();
    assert!(
        matches!(
            empty,
            NotDeterministic::RequestSize {
                request: 0,
                commands: 0
            }
        ),
        "{empty}"
    );
    let none = check_determinism(handler.clone(), &stream(), &[]).unwrap_err();
    assert!(matches!(none, NotDeterministic::NoEntrySizes), "{none}");
    let zero = check_determinism(handler.clone(), &stream(), &[0]).unwrap_err();
    assert!(matches!(zero, NotDeterministic::EntrySize(0)), "{zero}");
    let big = check_determinism(handler, &stream(), &[1025]).unwrap_err();
    assert!(
        big.to_string().contains("an entry holds 1 to 1024"),
        "{big}"
    );
}

/// Proves a capacity below the empty tables is refused when the sandbox is made, with both
/// numbers and the table count, and that the empty tables' own size is enough to start.
#[test]
fn a_capacity_below_the_empty_tables_is_refused_with_both_numbers() {
    let empty_bytes = Sums::new(Flaw::None).schema().empty_bytes();
    assert!(
        empty_bytes > 4_000,
        "four empty tables take {empty_bytes} bytes"
    );
    let refused = Sandbox::try_new(Sums::new(Flaw::None), 4_000)
        .err()
        .expect("refused");
    assert_eq!(
        refused,
        CapacityTooSmall {
            capacity_bytes: 4_000,
            empty_bytes,
            tables: 4
        }
    );
    let message = refused.to_string();
    assert!(
        message.contains("4000 bytes") && message.contains(&format!("{empty_bytes} bytes")),
        "{message}"
    );
    assert!(Sandbox::try_new(Sums::new(Flaw::None), empty_bytes).is_ok());
    let check = check_determinism_refuses_too(empty_bytes - 1);
    assert!(matches!(check, NotDeterministic::Capacity(_)), "{check}");
}

fn check_determinism_refuses_too(capacity_bytes: u64) -> NotDeterministic {
    engine::testing::check_determinism_within(
        Sums::new(Flaw::None),
        &stream(),
        &[16],
        capacity_bytes,
    )
    .unwrap_err()
}

/// Proves `Sandbox::new`, the constructor tests use, stops at once with the message rather
/// than refusing every command later.
#[test]
#[should_panic(expected = "is below the")]
fn sandbox_new_panics_on_a_capacity_below_the_empty_tables() {
    let _ = Sandbox::new(Sums::new(Flaw::None), 4_000);
}
