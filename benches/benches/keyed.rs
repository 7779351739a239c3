//! Executing entries of one-command callers with keys of their own (a gateway's requests
//! with new Idempotency-Keys), against the same entries without keys: what a key costs a
//! replica, with the sessions full (each new key evicts the least recently active one and
//! forgets the oldest expired mark), as a follower applies, as a Performance leader
//! simulates and then reuses, and as a Verify leader simulates, undoes and executes again.

use bank::{AccountId, BankCommand};
use benches::prefilled;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::{ClientId, Mode};
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 2_000;
/// Callers a request carries, as the gateway formed them (67-70 a request measured).
const PER_ENTRY: usize = 64;

/// The next entry's deposits, spread over the accounts by a stride prime to their count.
fn deposits(next: &mut u64) -> Vec<BankCommand> {
    (0..PER_ENTRY)
        .map(|_| {
            *next = (*next + 7_919) % ACCOUNTS;
            BankCommand::Deposit {
                id: AccountId(*next),
                amount: 1,
            }
        })
        .collect()
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("execute_keyed");
    group.throughput(Throughput::Elements(PER_ENTRY as u64));
    for (name, with_keys, leader) in [
        ("apply_unkeyed", false, None),
        ("apply_keyed", true, None),
        ("performance_leader_unkeyed", false, Some(Mode::Performance)),
        ("performance_leader_keyed", true, Some(Mode::Performance)),
        ("verify_leader_unkeyed", false, Some(Mode::Verify)),
        ("verify_leader_keyed", true, Some(Mode::Verify)),
    ] {
        let (mut machine, mut feeder) = prefilled(ACCOUNTS);
        if let Some(mode) = leader {
            machine.set_mode(mode);
        }
        let mut next_account = 0;
        let mut next_key = 1u128 << 64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let entries: Vec<_> = (0..iters)
                    .map(|_| {
                        let commands = deposits(&mut next_account);
                        match with_keys {
                            true => {
                                let keys: Vec<ClientId> = (0..PER_ENTRY)
                                    .map(|_| {
                                        next_key += 1;
                                        ClientId(next_key)
                                    })
                                    .collect();
                                feeder.keyed_entry(&commands, &keys)
                            }
                            false => feeder.entry(&commands),
                        }
                    })
                    .collect();
                let started = Instant::now();
                for entry in &entries {
                    if leader.is_some() {
                        machine.simulate(entry);
                    }
                    machine.apply(entry).expect("deposits apply");
                }
                started.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).sample_size(30);
    targets = keyed
}
criterion_main!(benches);
