//! Forming and reading entries of 256 and 1,024 transfers: the leader encodes the commands,
//! builds the payload and seals it (crc32 and chained blake3); a follower verifies the entry,
//! parses the payload and decodes every command.

use bank::workload::Transfers;
use bank::{Bank, BankCommand};
use benches::Feeder;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use engine::Handler;
use engine::internals::entry::{EntryHash, encode_commands, parse_payload};

fn commands(count: usize) -> Vec<BankCommand> {
    let mut transfers = Transfers::new(3, 2_000_000);
    (0..count).map(|_| transfers.next_command()).collect()
}

fn encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("entry_encode");
    for count in [256usize, 1024] {
        let commands = commands(count);
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(format!("{count}_commands"), |b| {
            let mut feeder = Feeder::new();
            b.iter(|| feeder.entry(&commands))
        });
    }
    group.finish();
}

fn decode(c: &mut Criterion) {
    let mut group = c.benchmark_group("entry_decode");
    for count in [256usize, 1024] {
        let entry = Feeder::new().entry(&commands(count));
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(format!("{count}_commands"), |b| {
            b.iter_batched_ref(
                || Vec::with_capacity(count),
                |decoded: &mut Vec<<Bank as Handler>::Command>| {
                    entry.verify(&EntryHash::default()).expect("entry verifies");
                    let (_, fragments) = parse_payload(&entry.payload).expect("payload parses");
                    for (_, mut bytes) in fragments {
                        while !bytes.is_empty() {
                            let (command, used) =
                                engine::codec::decode_prefix::<BankCommand>(bytes)
                                    .expect("decodes");
                            decoded.push(command);
                            bytes = &bytes[used..];
                        }
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

fn encode_only(c: &mut Criterion) {
    let mut group = c.benchmark_group("commands_encode");
    for count in [256usize, 1024] {
        let commands = commands(count);
        group.throughput(Throughput::Elements(count as u64));
        group.bench_function(format!("{count}_commands"), |b| {
            b.iter(|| encode_commands(&commands))
        });
    }
    group.finish();
}

criterion_group!(benches, encode, encode_only, decode);
criterion_main!(benches);
