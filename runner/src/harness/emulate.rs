//! `runner emulate`: three machines on one, emulated. Three `runner node` processes whose peer
//! links go through delay lines adding a one-way delay (a placement group: 25-50 us), and the
//! benchmark run against them; beside it, the same with the nodes dialing each other directly
//! and through delay lines of 0 us, so that the cost of the added round trips shows on its own.
//!
//! With one request in flight a request waits for one round trip to the quorum (the leader's
//! entry to a follower and the follower's acknowledgement back): the delay adds two one-way
//! delays to each request, and the expected throughput is the 0 us run's scaled by its latency
//! over that latency plus the two delays.

use crate::delay_line::{DelayLines, DelayRange};
use crate::faults::{Addresses, Processes, leader_of, statuses, write_cluster_files};
use anyhow::Context;
use engine::Mode;
use engine::client::ClientConfig;
use runner::product::bench::{self, BenchOptions};
use runner::product::commands::ModeArg;
use runner::product::report::Run;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Time the nodes get to elect a leader.
const LEADER_WAIT_SECS: u64 = 20;

/// Options of `runner emulate`.
#[derive(clap::Args, Debug)]
pub struct EmulateArgs {
    /// One-way delay of every peer link, in microseconds: `40` or a range such as `25-50`.
    #[arg(long, default_value = "25-50")]
    link_delay_us: DelayRange,
    /// Execution mode (default performance).
    #[arg(long, value_enum, default_value_t = ModeArg::Performance)]
    mode: ModeArg,
    /// Where the run directories go (default /dev/shm).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The benchmark (its `--json` gets the three configurations' runs and the comparison).
    #[command(flatten)]
    bench: BenchOptions,
}

/// One configuration's runs.
struct Measured {
    name: String,
    runs: Vec<Run>,
}

impl Measured {
    fn median(&self, value: impl Fn(&Run) -> f64) -> f64 {
        let mut values: Vec<f64> = self.runs.iter().map(value).collect();
        values.sort_by(f64::total_cmp);
        match values.len() {
            0 => 0.0,
            n if n % 2 == 1 => values[n / 2],
            n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        }
    }
}

/// The configurations' medians, a row each.
fn print_table(measured: &[Measured]) {
    engine::outln!();
    engine::outln!(
        "{:<26} {:>14} {:>9} {:>9} {:>12}",
        "links",
        "commands/s",
        "p50 ms",
        "p99 ms",
        "quorum us"
    );
    for m in measured {
        engine::outln!(
            "{:<26} {:>14.0} {:>9.3} {:>9.3} {:>12.1}",
            m.name,
            m.median(|r| r.commands_per_s),
            m.median(|r| r.latency_ms.p50),
            m.median(|r| r.latency_ms.p99),
            m.median(|r| r.stages.quorum_us),
        );
    }
}

/// Runs the three configurations and prints them with the expected cost of the delay.
pub fn run(args: EmulateArgs) -> anyhow::Result<()> {
    let zero = DelayRange {
        min_us: 0,
        max_us: 0,
    };
    let configurations = [
        ("loopback, direct".to_string(), None),
        ("delay lines, 0 us".to_string(), Some(zero)),
        (
            format!("delay lines, {}", args.link_delay_us),
            Some(args.link_delay_us),
        ),
    ];
    let mut measured = Vec::new();
    for (name, delay) in configurations {
        eprintln!("== {name}");
        let runs = one(&args, delay)?;
        measured.push(Measured { name, runs });
    }
    print_table(&measured);
    let (lines, delayed) = (&measured[1], &measured[2]);
    let added_us = 2.0 * args.link_delay_us.mean_us();
    let p50_us = lines.median(|r| r.latency_ms.p50) * 1e3;
    let expected = lines.median(|r| r.commands_per_s) * p50_us / (p50_us + added_us);
    let measured_rate = delayed.median(|r| r.commands_per_s);
    let quorum_added =
        delayed.median(|r| r.stages.quorum_us) - lines.median(|r| r.stages.quorum_us);
    engine::outln!();
    engine::outln!(
        "added per request: one round trip to the quorum = 2 x {:.1} us = {added_us:.0} us",
        args.link_delay_us.mean_us()
    );
    engine::outln!(
        "quorum stage: {quorum_added:+.0} us per entry against the 0 us lines (expected about {added_us:.0})"
    );
    engine::outln!(
        "throughput: expected {expected:.0} commands/s from the 0 us lines' latency plus the round trip, measured {measured_rate:.0} ({:+.1}%)",
        (measured_rate / expected - 1.0) * 100.0
    );
    if let Some(path) = &args.bench.json {
        let json: Vec<_> = measured
            .iter()
            .map(|m| serde_json::json!({ "links": m.name, "runs": m.runs }))
            .collect();
        let summary = serde_json::json!({
            "link_delay_us": { "min": args.link_delay_us.min_us, "max": args.link_delay_us.max_us },
            "configurations": json,
            "expected_commands_per_s": expected,
            "measured_commands_per_s": measured_rate,
            "added_round_trip_us": added_us,
            "quorum_added_us": quorum_added,
        });
        std::fs::write(path, serde_json::to_string_pretty(&summary)? + "\n")?;
    }
    Ok(())
}

/// Three node processes, their links direct or through delay lines, and the benchmark.
fn one(args: &EmulateArgs, delay: Option<DelayRange>) -> anyhow::Result<Vec<Run>> {
    let run_dir = runner::run_dir(args.dir.clone())?;
    let dir = run_dir.path();
    let (addresses, relays) = Addresses::with_relays()?;
    let lines = delay
        .map(|d| DelayLines::start(&addresses.peers, relays, d, args.bench.seed))
        .transpose()?;
    let via = lines.as_ref().map(|l| move |from, to| l.address(from, to));
    let files = write_cluster_files(
        dir,
        &addresses,
        via.as_ref().map(|f| f as _),
        engine::node::WalIo::Auto,
    )?;
    let mut config = addresses.client_config();
    config.give_up_after = Some(Duration::from_secs(30));
    let processes = Processes::start_all(dir, files)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mode: Mode = args.mode.into();
    let runs = runtime.block_on(async {
        wait_for_leader(&config).await?;
        // Each configuration's runs go into the one summary, not a file each.
        let options = BenchOptions {
            json: None,
            ..args.bench.clone()
        };
        let operator = addresses.operator_config();
        bench::benchmark(&config, Some(&operator), &options, &[Some(mode)]).await
    });
    drop(processes);
    runs
}

async fn wait_for_leader(config: &ClientConfig) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let all = statuses(config).await;
        if all.len() == 3 && leader_of(&all).is_some() {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(LEADER_WAIT_SECS) {
            return Err(anyhow::anyhow!("no leader: {all:?}")).context("starting the nodes");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
