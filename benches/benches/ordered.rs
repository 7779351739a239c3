//! An ordered table of 1,000,000 records beside a hashed one of the same size: insert, delete,
//! point read and a 100-record range scan on the ordered table, point read and insert on the
//! hashed one. Each measured entry is one command doing `OPS_PER_COMMAND` operations through
//! the real apply path (transaction, write stream, state hash), so the entry's own cost is
//! spread over them; the time reported is per operation (per scan of 100 records).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::codec::{Decode, Encode};
use engine::internals::entry::{Entry, EntryHash, Request, encode_commands, whole_requests_entry};
use engine::{
    ClientId, EntryIndex, Handler, OrderedTable, RequestNumber, Schema, StateError, StateMachine,
    Table, Term, Tx,
};
use std::time::{Duration, Instant};

/// Records each table holds before timing.
const RECORDS: u64 = 1_000_000;
/// Operations one measured command does.
const OPS_PER_COMMAND: u32 = 1_000;
/// Records a range scan reads.
const SCAN_RECORDS: usize = 100;
/// Records one prefill command puts.
const PREFILL_COMMAND_RECORDS: u32 = 10_000;

const SORTED: OrderedTable<u64, u64> = Table::ordered(0, "sorted");
const PLAIN: Table<u64, u64> = Table::new(1, "plain");

#[derive(Clone, Copy, Debug, Encode, Decode)]
enum Op {
    Insert,
    Delete,
    Get,
    Scan,
}

/// `op` on keys number `first..first + count` (puts and deletes) or at scattered numbers below
/// [`RECORDS`] drawn from `first` (reads), in the ordered table or the hashed one.
#[derive(Clone, Copy, Debug, Encode, Decode)]
struct Command {
    ordered: bool,
    op: Op,
    first: u64,
    count: u32,
}

struct Shelves;

/// A refused write (the benchmark's state never fills).
#[derive(Debug, Encode, Decode)]
struct Full;

impl From<StateError> for Full {
    fn from(_: StateError) -> Self {
        Full
    }
}

impl Handler for Shelves {
    type Command = Command;
    type Output = u64;
    type Error = Full;

    fn schema(&self) -> Schema {
        Schema::new().table(&SORTED).table(&PLAIN)
    }

    fn execute(&self, tx: &mut Tx<'_>, c: &Command) -> Result<u64, Full> {
        let numbers = c.first..c.first + u64::from(c.count);
        let mut sum = 0u64;
        for n in numbers {
            let key = scatter(n);
            let read = scatter(n) % RECORDS;
            sum = sum.wrapping_add(match (c.op, c.ordered) {
                (Op::Insert, true) => put(tx.put(&SORTED, key, n))?,
                (Op::Insert, false) => put(tx.put(&PLAIN, key, n))?,
                (Op::Delete, true) => tx.delete(&SORTED, &key).map_err(Full::from)?.unwrap_or(0),
                (Op::Delete, false) => tx.delete(&PLAIN, &key).map_err(Full::from)?.unwrap_or(0),
                (Op::Get, true) => tx.get(&SORTED, &scatter(read)).unwrap_or(0),
                (Op::Get, false) => tx.get(&PLAIN, &scatter(read)).unwrap_or(0),
                (Op::Scan, true | false) => {
                    let found = tx.range(&SORTED, scatter(read).., SCAN_RECORDS);
                    found.iter().fold(0u64, |s, (_, v)| s.wrapping_add(*v))
                }
            });
        }
        Ok(sum)
    }
}

fn put(result: Result<(), StateError>) -> Result<u64, Full> {
    result.map(|()| 1).map_err(Full::from)
}

/// Key number `n`, scattered over the u64s (splitmix64's finalizer: a bijection).
fn scatter(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Forms chained entries of one command each, from one client.
struct Feeder {
    prev: EntryHash,
    next: u64,
}

impl Feeder {
    fn entry(&mut self, command: Command) -> Entry {
        let bytes = encode_commands(&[command]);
        let request = Request {
            client: ClientId(1),
            number: RequestNumber(self.next),
            command_count: 1,
            commands: &bytes,
        };
        let entry = whole_requests_entry(EntryIndex(self.next), Term(1), &self.prev, 0, &[request]);
        self.prev = entry.header.hash;
        self.next += 1;
        entry
    }
}

fn prefilled() -> (StateMachine<Shelves>, Feeder) {
    let mut machine = StateMachine::new(Shelves, engine::state::STATE_BYTES_DEFAULT);
    let mut feeder = Feeder {
        prev: EntryHash::default(),
        next: 1,
    };
    for ordered in [true, false] {
        for first in (0..RECORDS).step_by(PREFILL_COMMAND_RECORDS as usize) {
            let op = Op::Insert;
            let command = Command {
                ordered,
                op,
                first,
                count: PREFILL_COMMAND_RECORDS,
            };
            machine
                .apply(&feeder.entry(command))
                .expect("prefill applies");
        }
    }
    (machine, feeder)
}

/// Times `op`, undoing its writes after each measured entry (untimed) so that every iteration
/// sees a table of [`RECORDS`] records.
fn timed(
    machine: &mut StateMachine<Shelves>,
    feeder: &mut Feeder,
    (ordered, op, undo): (bool, Op, Option<Op>),
    iters: u64,
    next: &mut u64,
) -> Duration {
    let mut spent = Duration::ZERO;
    for _ in 0..iters {
        // Inserts take fresh numbers (above the prefilled ones); deletes prefilled numbers.
        let first = match op {
            Op::Insert => RECORDS + *next,
            Op::Delete | Op::Get | Op::Scan => *next % (RECORDS - u64::from(OPS_PER_COMMAND)),
        };
        *next += u64::from(OPS_PER_COMMAND);
        let count = OPS_PER_COMMAND;
        let entry = feeder.entry(Command {
            ordered,
            op,
            first,
            count,
        });
        let started = Instant::now();
        machine.apply(&entry).expect("applies");
        spent += started.elapsed();
        if let Some(op) = undo {
            let entry = feeder.entry(Command {
                ordered,
                op,
                first,
                count,
            });
            machine.apply(&entry).expect("undo applies");
        }
    }
    spent
}

fn ordered(c: &mut Criterion) {
    let started = Instant::now();
    let (mut machine, mut feeder) = prefilled();
    eprintln!(
        "prefilled 2 x {RECORDS} records in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let mut group = c.benchmark_group("tables_1m");
    group.throughput(Throughput::Elements(u64::from(OPS_PER_COMMAND)));
    let cases = [
        ("ordered_insert", (true, Op::Insert, Some(Op::Delete))),
        ("ordered_delete", (true, Op::Delete, Some(Op::Insert))),
        ("ordered_get", (true, Op::Get, None)),
        ("ordered_scan_100", (true, Op::Scan, None)),
        ("hashed_get", (false, Op::Get, None)),
        ("hashed_insert", (false, Op::Insert, Some(Op::Delete))),
    ];
    let mut next = 0;
    for (name, case) in cases {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| timed(&mut machine, &mut feeder, case, iters, &mut next))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).sample_size(20);
    targets = ordered
}
criterion_main!(benches);
