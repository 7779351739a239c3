//! The codec comparison: the commands of an entry (256 and 1,024 Bank-like
//! commands, mostly transfers) encoded into one buffer and decoded back, with the project's
//! codec (`net::codec`: once bincode 2.0.1, now code of its own writing the same
//! bytes) and the candidates: wincode (bincode's layout), borsh, postcard (varints) and rkyv
//! (zero-copy archive, validated). The engine's own path (each command appended and decoded
//! one at a time) is measured beside.

use bank::workload::Transfers;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

/// The Bank's command, mirrored with every candidate's derives.
#[derive(
    Clone,
    Debug,
    PartialEq,
    net::codec::Encode,
    net::codec::Decode,
    serde::Serialize,
    serde::Deserialize,
    borsh::BorshSerialize,
    borsh::BorshDeserialize,
    wincode::SchemaWrite,
    wincode::SchemaRead,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]

enum Command {
    Open { id: u64, balance: u64, flags: u32 },
    Deposit { id: u64, amount: u64 },
    Withdraw { id: u64, amount: u64 },
    Transfer { from: u64, to: u64, amount: u64 },
    Get { id: u64 },
    Audit,
}

fn commands(count: usize) -> (Vec<bank::BankCommand>, Vec<Command>) {
    let mut transfers = Transfers::new(3, 2_000_000);
    let bank: Vec<bank::BankCommand> = (0..count).map(|_| transfers.next_command()).collect();
    let mirrored = bank.iter().map(mirror).collect();
    (bank, mirrored)
}

fn mirror(command: &bank::BankCommand) -> Command {
    use bank::BankCommand as B;
    match *command {
        B::Open { id, balance, flags } => Command::Open {
            id: id.0,
            balance,
            flags,
        },
        B::Deposit { id, amount } => Command::Deposit { id: id.0, amount },
        B::Withdraw { id, amount } => Command::Withdraw { id: id.0, amount },
        B::Transfer { from, to, amount } => Command::Transfer {
            from: from.0,
            to: to.0,
            amount,
        },
        B::Get { id } => Command::Get { id: id.0 },
        B::Audit => Command::Audit,
    }
}

type Encoder = fn(&Vec<Command>) -> Vec<u8>;
type Decoder = fn(&[u8]) -> Vec<Command>;

fn candidates() -> Vec<(&'static str, Encoder, Decoder)> {
    vec![
        (
            "owned_net_codec",
            |c| net::codec::encode_to_vec(c).unwrap(),
            |b| net::codec::decode(b).unwrap(),
        ),
        (
            "wincode",
            |c| wincode::serialize(c).unwrap(),
            |b| wincode::deserialize(b).unwrap(),
        ),
        (
            "borsh",
            |c| borsh::to_vec(c).unwrap(),
            |b| borsh::from_slice(b).unwrap(),
        ),
        (
            "postcard",
            |c| postcard::to_allocvec(c).unwrap(),
            |b| postcard::from_bytes(b).unwrap(),
        ),
        (
            "rkyv_validated",
            |c| rkyv::to_bytes::<rkyv::rancor::Error>(c).unwrap().to_vec(),
            |b| {
                let mut aligned = rkyv::util::AlignedVec::<16>::new();
                aligned.extend_from_slice(b);
                rkyv::from_bytes::<Vec<Command>, rkyv::rancor::Error>(&aligned).unwrap()
            },
        ),
    ]
}

fn compare(c: &mut Criterion) {
    for count in [256usize, 1024] {
        let (bank, mirrored) = commands(count);
        let mut group = c.benchmark_group(format!("codec_{count}"));
        group.throughput(Throughput::Elements(count as u64));
        for (name, encode, decode) in candidates() {
            let bytes = encode(&mirrored);
            assert_eq!(decode(&bytes), mirrored, "{name} round-trips");
            eprintln!("{name}: {count} commands in {} bytes", bytes.len());
            group.bench_function(format!("{name}/encode"), |b| {
                b.iter(|| encode(black_box(&mirrored)))
            });
            group.bench_function(format!("{name}/decode"), |b| {
                b.iter(|| decode(black_box(&bytes)))
            });
        }
        group.bench_function("engine_per_command/encode", |b| {
            b.iter(|| engine::internals::entry::encode_commands(black_box(&bank)))
        });
        let bytes = engine::internals::entry::encode_commands(&bank);
        group.bench_function("engine_per_command/decode", |b| {
            b.iter_batched_ref(
                || Vec::with_capacity(count),
                |decoded: &mut Vec<bank::BankCommand>| {
                    let mut rest: &[u8] = &bytes;
                    while !rest.is_empty() {
                        let (command, used) =
                            engine::codec::decode_prefix::<bank::BankCommand>(rest).unwrap();
                        decoded.push(command);
                        rest = &rest[used..];
                    }
                },
                BatchSize::SmallInput,
            )
        });
        group.finish();
    }
}

criterion_group!(benches, compare);
criterion_main!(benches);
