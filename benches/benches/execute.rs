//! Executing entries of random transfers among 2,000,000 prefilled accounts: decode, prefetch,
//! per-command transactions, sessions and the state hash, as the apply loop runs them.

use bank::workload::Transfers;
use benches::prefilled;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 2_000_000;

fn execute(c: &mut Criterion) {
    let started = Instant::now();
    let (mut machine, mut feeder) = prefilled(ACCOUNTS);
    eprintln!(
        "prefilled {ACCOUNTS} accounts in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    let mut transfers = Transfers::new(1, ACCOUNTS);
    let mut group = c.benchmark_group("execute_transfers");
    for per_entry in [256usize, 1024] {
        group.throughput(Throughput::Elements(per_entry as u64));
        group.bench_function(format!("{per_entry}_per_entry"), |b| {
            b.iter_custom(|iters| {
                let entries = feeder.transfers(&mut transfers, iters as usize, per_entry);
                let started = Instant::now();
                for entry in &entries {
                    machine.apply(entry).expect("transfers apply");
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
    targets = execute
}
criterion_main!(benches);
