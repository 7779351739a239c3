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
    // MODE=verify|performance: simulate each entry first, as a leader does, timing both halves.
    let mode = std::env::var("MODE").ok();
    match mode.as_deref() {
        Some("verify") => machine.set_mode(engine::Mode::Verify),
        Some("performance") => machine.set_mode(engine::Mode::Performance),
        _ => {}
    }
    let (mut simulate, mut apply) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    for entry in &entries {
        if mode.is_some() {
            let started = Instant::now();
            machine.simulate(entry);
            simulate += started.elapsed();
        }
        let started = Instant::now();
        machine.apply(entry).expect("applies");
        apply += started.elapsed();
    }
    let per = |d: std::time::Duration| d.as_nanos() as f64 / (count * per_entry) as f64;
    eprintln!(
        "{:.1} ns per command over {count} entries of {per_entry} (simulate {:.1}, apply {:.1}; {:?})",
        per(simulate + apply),
        per(simulate),
        per(apply),
        machine.counters()
    );
}
