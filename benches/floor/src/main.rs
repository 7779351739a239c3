//! `floor`: the bare data path of a three-node replicated log on this machine, with none of the
//! engine's logic. A client sends a batch of transfers to a leader, which appends it to its WAL
//! (fdatasync) while sending it to two followers that append, sync and acknowledge; at a
//! majority the leader decodes and executes the batch and replies; the followers execute it
//! too. One batch in flight. The engine's throughput is reported as a ratio to this floor
//! (`runner local --floor`, `notes/decisions/measurement.md`); `benches/floor/README.md` says
//! how to run it.
//!
//! Output, per layout: a latency line `e2e LAYOUT batch=.. entry=..B dir=.. n=.. p50=..us ..
//! p99=..us ..` and a rate line `-> N.NK cmds/s, N batches/s`, which the floor report parses.

mod layout;
mod ledger;
mod options;
mod path;
mod stats;
mod wal;
mod wire;

use options::Options;
use path::{Measured, Plan};
use std::process::ExitCode;

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("floor: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Plan {
        batch: options.batch,
        batches: options.batches,
        pad: options.pad,
        accounts: ledger::ACCOUNTS,
    };
    for &layout in &options.layouts {
        match layout::run(layout, &options.dir, plan) {
            Ok(measured) => print_run(layout.name(), &options, &measured),
            Err(e) => {
                eprintln!("floor: layout {}: {e}", layout.name());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// A frame's bytes for a batch of the given shape, as the WAL and the wire see it.
fn entry_bytes(options: &Options) -> usize {
    let command = wire::COMMAND_BYTES + options.pad as usize;
    wire::FRAME_HEADER_BYTES + wire::BATCH_HEADER_BYTES + options.batch as usize * command
}

/// Prints one layout's two lines.
fn print_run(layout: &str, options: &Options, measured: &Measured) {
    let s = measured.latencies.summary();
    println!(
        "e2e {layout} batch={} entry={}B dir={} n={} p50={:>9.2}us p90={:>9.2}us \
         p99={:>9.2}us p99.9={:>9.2}us max={:>9.1}us mean={:>9.2}us",
        options.batch,
        entry_bytes(options),
        options.dir.display(),
        s.count,
        s.p50_us,
        s.p90_us,
        s.p99_us,
        s.p999_us,
        s.max_us,
        s.mean_us,
    );
    let rate = measured.commands_per_s;
    println!(
        "    -> {:.1}K cmds/s, {:.0} batches/s",
        rate / 1e3,
        rate / f64::from(options.batch)
    );
}
