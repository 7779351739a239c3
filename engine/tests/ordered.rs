//! Ordered tables: reads in key order (first, last, ranges both ways) against a `BTreeMap`
//! model through transactions that commit and that roll back, the same state hash as a hashed
//! table given the same writes, snapshots, discarded simulations, and the capacity account.

use engine::codec::{Decode, Encode};
use engine::internals::entry::{Entry, EntryHash, Request, encode_commands, whole_requests_entry};
use engine::internals::snapshot::{read_snapshot, write_snapshot};
use engine::rng::Rng;
use engine::{
    ClientId, EntryIndex, Handler, Mode, OrderedTable, Outcome, RequestNumber, Sandbox, Schema,
    StateError, StateMachine, Table, Term, Tx,
};
use std::collections::BTreeMap;

/// The table, ordered or hashed (the same id: the same write stream).
const SORTED: OrderedTable<u32, u64> = Table::ordered(1, "sorted");
const HASHED: Table<u32, u64> = Table::new(1, "hashed");

/// Keys the random streams use: few enough that puts replace and deletes find records.
const KEYS: u64 = 2_000;
/// Operations per command at most in the random streams.
const COMMAND_OPS_MAX: u64 = 12;
/// A capacity no test here reaches, in bytes.
const ROOMY_BYTES: u64 = 1 << 30;

#[derive(Clone, Debug, Encode, Decode)]
enum Op {
    Put(u32, u64),
    Delete(u32),
    First,
    Last,
    /// `from..to`, ascending, at most `limit`.
    Range {
        from: u32,
        to: u32,
        limit: u32,
    },
    /// `from..=to`, descending, at most `limit`.
    RangeRev {
        from: u32,
        to: u32,
        limit: u32,
    },
}

#[derive(Clone, Debug, Encode, Decode)]
struct Command {
    ops: Vec<Op>,
    /// Fail after the ops: everything is rolled back.
    fail: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
enum Refused {
    Failed,
    Capacity { needed_bytes: u64 },
    State,
}

impl From<StateError> for Refused {
    fn from(error: StateError) -> Self {
        match error {
            StateError::CapacityExhausted { needed_bytes, .. } => {
                Refused::Capacity { needed_bytes }
            }
            StateError::MemoryExhausted | StateError::Unencodable(_) | StateError::ReadOnly => {
                Refused::State
            }
        }
    }
}

/// What each op saw: records read (or the record a delete removed), in the op's order.
type Seen = Vec<Vec<(u32, u64)>>;

/// A key-value handler over one table, ordered or hashed. The hashed one answers the ordered
/// reads by sorting a full scan: a second model, run by the engine.
struct Kv {
    ordered: bool,
}

impl Handler for Kv {
    type Command = Command;
    type Output = Seen;
    type Error = Refused;

    fn schema(&self) -> Schema {
        if self.ordered {
            Schema::new().table(&SORTED)
        } else {
            Schema::new().table(&HASHED)
        }
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<Seen, Refused> {
        let mut seen = Vec::new();
        for op in &command.ops {
            seen.push(if self.ordered {
                ordered_op(tx, op)?
            } else {
                hashed_op(tx, op)?
            });
        }
        if command.fail {
            return Err(Refused::Failed);
        }
        Ok(seen)
    }
}

fn ordered_op(tx: &mut Tx<'_>, op: &Op) -> Result<Vec<(u32, u64)>, Refused> {
    Ok(match *op {
        Op::Put(key, value) => {
            tx.put(&SORTED, key, value)?;
            vec![]
        }
        Op::Delete(key) => tx
            .delete(&SORTED, &key)?
            .map(|v| (key, v))
            .into_iter()
            .collect(),
        Op::First => tx.first(&SORTED).into_iter().collect(),
        Op::Last => tx.last(&SORTED).into_iter().collect(),
        Op::Range { from, to, limit } => tx.range(&SORTED, from..to, limit as usize),
        Op::RangeRev { from, to, limit } => tx.range_rev(&SORTED, from..=to, limit as usize),
    })
}

fn hashed_op(tx: &mut Tx<'_>, op: &Op) -> Result<Vec<(u32, u64)>, Refused> {
    let mut all = Vec::new();
    tx.for_each_unordered(&HASHED, |k, v| all.push((*k, *v)));
    all.sort_unstable();
    Ok(match *op {
        Op::Put(key, value) => {
            tx.put(&HASHED, key, value)?;
            vec![]
        }
        Op::Delete(key) => tx
            .delete(&HASHED, &key)?
            .map(|v| (key, v))
            .into_iter()
            .collect(),
        Op::First => all.first().copied().into_iter().collect(),
        Op::Last => all.last().copied().into_iter().collect(),
        Op::Range { from, to, limit } => {
            let within = all.into_iter().filter(|(k, _)| (from..to).contains(k));
            within.take(limit as usize).collect()
        }
        Op::RangeRev { from, to, limit } => {
            let within = all
                .into_iter()
                .rev()
                .filter(|(k, _)| (from..=to).contains(k));
            within.take(limit as usize).collect()
        }
    })
}

/// The model's answer to `command`; its writes kept only when it does not fail.
fn model_run(model: &mut BTreeMap<u32, u64>, command: &Command) -> Outcome<Seen, Refused> {
    let mut scratch = model.clone();
    let mut seen = Vec::new();
    for op in &command.ops {
        seen.push(match *op {
            Op::Put(key, value) => {
                scratch.insert(key, value);
                vec![]
            }
            Op::Delete(key) => scratch.remove(&key).map(|v| (key, v)).into_iter().collect(),
            Op::First => scratch
                .first_key_value()
                .map(|(k, v)| (*k, *v))
                .into_iter()
                .collect(),
            Op::Last => scratch
                .last_key_value()
                .map(|(k, v)| (*k, *v))
                .into_iter()
                .collect(),
            Op::Range { from, to, limit } => {
                let within = scratch.iter().filter(|(k, _)| (from..to).contains(*k));
                within.take(limit as usize).map(|(k, v)| (*k, *v)).collect()
            }
            Op::RangeRev { from, to, limit } => {
                let within = scratch
                    .iter()
                    .rev()
                    .filter(|(k, _)| (from..=to).contains(*k));
                within.take(limit as usize).map(|(k, v)| (*k, *v)).collect()
            }
        });
    }
    if command.fail {
        return Outcome::Failed(Refused::Failed);
    }
    *model = scratch;
    Outcome::Done(seen)
}

/// A random command: mostly puts and deletes, reads between them (of the command's own
/// writes), ranges that are sometimes empty or reversed; one in five fails.
fn command(rng: &mut Rng) -> Command {
    let key = |rng: &mut Rng| rng.below(KEYS) as u32;
    let ops = (0..1 + rng.below(COMMAND_OPS_MAX))
        .map(|_| match rng.below(10) {
            0..=3 => Op::Put(key(rng), rng.below(1 << 40)),
            4..=5 => Op::Delete(key(rng)),
            6 => Op::First,
            7 => Op::Last,
            8 => Op::Range {
                from: key(rng),
                to: key(rng),
                limit: rng.below(40) as u32,
            },
            _ => Op::RangeRev {
                from: key(rng),
                to: key(rng),
                limit: rng.below(40) as u32,
            },
        })
        .collect();
    Command {
        ops,
        fail: rng.chance(1, 5),
    }
}

/// Requests of 1 to 8 random commands, `count` commands in all.
fn requests(seed: u64, count: usize) -> Vec<Vec<Command>> {
    let mut rng = Rng::new(seed);
    let mut all = Vec::new();
    let mut made = 0;
    while made < count {
        let size = (1 + rng.below(8) as usize).min(count - made);
        all.push((0..size).map(|_| command(&mut rng)).collect());
        made += size;
    }
    all
}

/// The ordered table's records, in key order, as the state holds them.
fn ordered_records(machine: &StateMachine<Kv>) -> Vec<(u32, u64)> {
    let records = machine.state().iter_ordered(&SORTED, ..);
    records.map(|(k, v)| (*k, *v)).collect()
}

/// Proves ordered reads (first, last, ranges both ways, with limits, empty and reversed ranges)
/// equal a `BTreeMap`'s through thousands of puts and deletes in transactions that commit or
/// roll back, reads of a transaction's own writes included; that a hashed table answering by a
/// sorted scan agrees; and that both states hash alike (same writes, same stream).
#[test]
fn ordered_reads_match_a_btreemap_through_commits_and_rollbacks() {
    let mut ordered = Sandbox::new(Kv { ordered: true }, ROOMY_BYTES);
    let mut hashed = Sandbox::new(Kv { ordered: false }, ROOMY_BYTES);
    let mut model = BTreeMap::new();
    let (mut writes, mut failed) = (0, 0);
    for request in requests(41, 3_000) {
        let expected: Vec<_> = request.iter().map(|c| model_run(&mut model, c)).collect();
        for command in &request {
            let ops = command
                .ops
                .iter()
                .filter(|op| matches!(op, Op::Put(..) | Op::Delete(_)));
            writes += ops.count();
            failed += usize::from(command.fail);
        }
        assert_eq!(ordered.run(&request).unwrap(), expected);
        assert_eq!(hashed.run(&request).unwrap(), expected);
    }
    assert!(
        writes > 10_000 && failed > 500,
        "{writes} writes, {failed} failed"
    );
    let state = ordered.state();
    let all: Vec<(u32, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(ordered_records(ordered.machine()), all);
    let between: Vec<_> = state.iter_ordered(&SORTED, 500..700).rev().collect();
    let expected: Vec<_> = model.range(500..700).rev().collect();
    assert_eq!(between, expected);
    // A reversed range (which BTreeMap::range refuses with a panic) is empty.
    let (high, low) = (700, 500);
    assert_eq!(state.iter_ordered(&SORTED, high..low).count(), 0);
    assert_eq!(state.len(&SORTED), model.len());
    assert_eq!(
        ordered.machine().state_hash(),
        hashed.machine().state_hash()
    );
}

/// Forms entries of whole requests, one client, chained.
struct Former {
    prev: EntryHash,
    next: u64,
    term: Term,
    /// Requests numbered so far (the client's id is the term).
    numbered: u64,
}

impl Former {
    fn new(term: u64) -> Self {
        Former {
            prev: EntryHash::default(),
            next: 1,
            term: Term(term),
            numbered: 0,
        }
    }

    fn entries(&mut self, requests: &[Vec<Command>], per_entry: usize) -> Vec<Entry> {
        let numbered: Vec<(u64, Vec<u8>, u32)> = requests
            .iter()
            .enumerate()
            .map(|(n, r)| {
                (
                    self.numbered + n as u64 + 1,
                    encode_commands(r),
                    r.len() as u32,
                )
            })
            .collect();
        self.numbered += requests.len() as u64;
        numbered
            .chunks(per_entry)
            .map(|chunk| {
                let requests: Vec<Request<'_>> = chunk
                    .iter()
                    .map(|(number, bytes, count)| Request {
                        client: ClientId(self.term.0.into()),
                        number: RequestNumber(*number),
                        command_count: *count,
                        commands: bytes,
                    })
                    .collect();
                let index = EntryIndex(self.next);
                let entry = whole_requests_entry(index, self.term, &self.prev, 5, &requests);
                self.prev = entry.header.hash;
                self.next += 1;
                entry
            })
            .collect()
    }
}

/// Proves a snapshot of an ordered table, written and restored, gives the same ordered reads
/// and hash, and the same results for every later entry.
#[test]
fn a_snapshot_restores_the_same_ordered_reads() {
    let entries = Former::new(1).entries(&requests(42, 1_200), 4);
    let (before, after) = entries.split_at(entries.len() / 2);
    let mut machine = StateMachine::new(Kv { ordered: true }, ROOMY_BYTES);
    for entry in before {
        machine.apply(entry).unwrap();
    }
    let (meta, bytes) = machine.snapshot_file().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_snapshot(dir.path(), meta.index, &bytes).unwrap();
    let snapshot = read_snapshot(&path).unwrap();
    let mut restored = StateMachine::restore(Kv { ordered: true }, ROOMY_BYTES, snapshot).unwrap();
    assert!(!ordered_records(&machine).is_empty());
    assert_eq!(ordered_records(&restored), ordered_records(&machine));
    assert_eq!(restored.state_hash(), machine.state_hash());
    assert_eq!(restored.state().bytes_used(), machine.state().bytes_used());
    for entry in after {
        assert_eq!(
            restored.apply(entry).unwrap(),
            machine.apply(entry).unwrap()
        );
    }
    assert_eq!(ordered_records(&restored), ordered_records(&machine));
}

/// Proves a leader's simulations, in either mode, leave the ordered index exactly as it was
/// when they are discarded (and when another leader's entries commit instead), and that
/// simulated entries that commit end as a follower's.
#[test]
fn a_discarded_simulation_leaves_the_index_as_it_was() {
    let requests = requests(43, 600);
    let mine = Former::new(1).entries(&requests, 3);
    let settled = 10;
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Kv { ordered: true }, ROOMY_BYTES);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Kv { ordered: true }, ROOMY_BYTES);
        for entry in &mine[..settled] {
            leader.simulate(entry);
            assert_eq!(leader.apply(entry).unwrap(), follower.apply(entry).unwrap());
        }
        let (records, hash, bytes) = (
            ordered_records(&leader),
            leader.state_hash(),
            leader.state().bytes_used(),
        );
        for entry in &mine[settled..settled + 4] {
            leader.simulate(entry);
        }
        if mode == Mode::Performance {
            assert_ne!(ordered_records(&leader), records, "simulated in place");
        }
        leader.discard_simulations();
        assert_eq!(ordered_records(&leader), records, "{mode:?}");
        assert_eq!(leader.state().bytes_used(), bytes, "{mode:?}");
        for entry in &mine[settled..settled + 4] {
            leader.simulate(entry);
        }
        // Another leader's entries commit instead of the simulated ones.
        let mut former = Former::new(2);
        former.prev = mine[settled - 1].header.hash;
        former.next = mine[settled].index().0;
        for entry in &former.entries(&self::requests(44, 60), 3) {
            assert_eq!(leader.apply(entry).unwrap(), follower.apply(entry).unwrap());
            assert_eq!(ordered_records(&leader), ordered_records(&follower));
        }
        assert_eq!(leader.pending_simulations(), 0);
        assert_ne!(leader.state_hash(), hash);
    }
}

/// The bytes the account charges the ordered index for a `u32` key (see
/// `notes/decisions/state-store.md`): 16 + 2 x 4.
const INDEX_KEY_BYTES: u64 = 24;

fn puts(keys: std::ops::Range<u32>) -> Command {
    Command {
        ops: keys.map(|k| Op::Put(k, u64::from(k))).collect(),
        fail: false,
    }
}

/// Runs `command` on `machine` as the next entry of `former`; returns its outcome.
fn run_one(
    machine: &mut StateMachine<Kv>,
    former: &mut Former,
    command: &Command,
) -> Outcome<Seen, Refused> {
    former.next = machine.applied_index().next().0;
    let entry = former.entries(&[vec![command.clone()]], 1).remove(0);
    let reply = machine.apply(&entry).unwrap().replies.pop().unwrap();
    let engine::ReplyStatus::Results(results) = reply.status else {
        panic!("a fresh request has results");
    };
    engine::decode_outcomes::<Kv>(&results, 1)
        .unwrap()
        .remove(0)
}

/// `machine`'s state restored into a machine whose capacity is `capacity_bytes` (loading
/// reserves the table's slots at once: no growth, which holds two arrays, to fit first).
fn restored(
    machine: &mut StateMachine<Kv>,
    ordered: bool,
    capacity_bytes: u64,
) -> StateMachine<Kv> {
    let (meta, bytes) = machine.snapshot_file().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_snapshot(dir.path(), meta.index, &bytes).unwrap();
    let snapshot = read_snapshot(&path).unwrap();
    StateMachine::restore(Kv { ordered }, capacity_bytes, snapshot).unwrap()
}

/// Proves the account charges each key of an ordered table its index bytes (and a hashed table
/// nothing), gives them back on delete and rollback, counts them alike after a restore, and
/// refuses a put of a new key whose index bytes would pass the capacity while a replacing put,
/// or the same put into a hashed table, still fits.
#[test]
fn capacity_counts_the_index() {
    let records = 1_000;
    let mut ordered = StateMachine::new(Kv { ordered: true }, ROOMY_BYTES);
    let mut hashed = StateMachine::new(Kv { ordered: false }, ROOMY_BYTES);
    let mut former = Former::new(1);
    for (machine, former) in [
        (&mut hashed, &mut Former::new(1)),
        (&mut ordered, &mut former),
    ] {
        let outcome = run_one(machine, former, &puts(0..records));
        assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    }
    let (full, slots) = (ordered.state().bytes_used(), hashed.state().bytes_used());
    assert_eq!(full - slots, u64::from(records) * INDEX_KEY_BYTES);
    let failing = Command {
        fail: true,
        ..puts(records..records + 100)
    };
    run_one(&mut ordered, &mut former, &failing);
    assert_eq!(
        ordered.state().bytes_used(),
        full,
        "a rollback gives the index bytes back"
    );

    // Exactly full: one more key's index bytes do not fit (no growth: 1,001 records fit 2,048
    // slots). The sessions count too: the restored ones, and the new client's (term 3).
    let sessions = ordered.sessions().bytes() + engine::apply::SESSION_BYTES_FIXED;
    let capacity_bytes = full + sessions + INDEX_KEY_BYTES - 1;
    let mut tight = restored(&mut ordered, true, capacity_bytes);
    let mut loose = restored(&mut hashed, false, capacity_bytes);
    assert_eq!(
        tight.state().bytes_used(),
        full,
        "a restore counts the index"
    );
    let (mut former, mut other) = (Former::new(3), Former::new(3));
    let new_key = puts(records..records + 1);
    let refused = Refused::Capacity {
        needed_bytes: full + sessions + INDEX_KEY_BYTES,
    };
    assert_eq!(
        run_one(&mut tight, &mut former, &new_key),
        Outcome::Failed(refused)
    );
    let outcome = run_one(&mut loose, &mut other, &new_key);
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    // Each next step on a state restored afresh, its client new: the sessions hold what they
    // held for the refused put (a client's finished requests stay in its session's window).
    let mut tight = restored(&mut ordered, true, capacity_bytes);
    let outcome = run_one(&mut tight, &mut Former::new(3), &puts(5..6));
    assert!(
        matches!(outcome, Outcome::Done(_)),
        "a replacing put: {outcome:?}"
    );
    let delete_then_put = Command {
        ops: vec![Op::Delete(7), Op::Put(records, 1)],
        fail: false,
    };
    let mut tight = restored(&mut ordered, true, capacity_bytes);
    let outcome = run_one(&mut tight, &mut Former::new(3), &delete_then_put);
    assert!(matches!(outcome, Outcome::Done(_)), "{outcome:?}");
    assert_eq!(tight.state().bytes_used(), full);
    let last = tight.state().iter_ordered(&SORTED, ..).next_back();
    assert_eq!(last, Some((&records, &1)));
}
