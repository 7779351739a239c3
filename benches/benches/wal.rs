//! A WAL append and fdatasync of one entry of 256 or 1,024 transfers, on /dev/shm (tmpfs: the
//! sync is nearly free, the copy is the cost) or, with `WAL_BENCH_DIR`, anywhere else.

use bank::workload::Transfers;
use benches::Feeder;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::internals::entry::Entry;
use engine::internals::wal::Wal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn bench_dir() -> PathBuf {
    std::env::var_os("WAL_BENCH_DIR").map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

/// Entries chained after index `after` with hash `prev`, `count` of them.
fn entries(feeder: &mut Feeder, count: usize, per_entry: usize) -> Vec<Entry> {
    feeder.transfers(&mut Transfers::new(5, 2_000_000), count, per_entry)
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("wal_append_fdatasync");
    for per_entry in [256usize, 1024] {
        group.throughput(Throughput::Elements(per_entry as u64));
        group.bench_function(format!("{per_entry}_commands"), |b| {
            let dir = tempfile::tempdir_in(bench_dir()).expect("bench dir is writable");
            let (mut wal, _) = Wal::open(dir.path()).expect("wal opens");
            let mut feeder = Feeder::new();
            b.iter_custom(|iters| {
                let batch = entries(&mut feeder, iters as usize, per_entry);
                let started = Instant::now();
                for entry in &batch {
                    wal.append(entry).expect("append");
                }
                started.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4));
    targets = append
}
criterion_main!(benches);
