//! Applies transfer entries in a loop for profiling (`perf record --delay` past the prefill):
//! `cargo run --release -p benches --example profile_execute -- [per_entry] [entries]`.

use bank::workload::Transfers;
use benches::prefilled;
use std::time::Instant;

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let per_entry = args.next().unwrap_or(256);
    let count = args.next().unwrap_or(20_000);
    let accounts: u64 =
        std::env::var("ACCOUNTS").map_or(2_000_000, |v| v.parse().expect("a number"));
    let started = Instant::now();
    let (mut machine, mut feeder) = prefilled(accounts);
    let entries = feeder.transfers(&mut Transfers::new(1, accounts), count, per_entry);
    eprintln!("ready in {:.2} s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    for entry in &entries {
        machine.apply(entry).expect("applies");
    }
    let ns = started.elapsed().as_nanos() as f64 / (count * per_entry) as f64;
    eprintln!("{ns:.1} ns per command over {count} entries of {per_entry}");
}
