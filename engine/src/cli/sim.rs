//! `sim`: the deterministic cluster simulator over many seeds, with a workload of the
//! handler author's (`engine::sim::Workload`: the handler, random requests, and the checks of
//! the committed state and answers); each failing seed is printed with the command that
//! replays it.

use crate::sim::{SimOptions, SimReport, Workload};
use std::path::PathBuf;
use std::time::Instant;

/// Options of `sim`.
#[derive(clap::Args, Debug)]
pub struct SimArgs {
    /// Seeds to run.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// The first seed (the others follow it); without it, one drawn from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Requests each of the three clients sends per seed.
    #[arg(long, default_value_t = 100)]
    pub requests: u32,
    /// Writes `{"seeds": N, "violations": V, "failing_seeds": [...], "violations_by_invariant": {"I8": n, ...}}` here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Prints a line per seed.
    #[arg(long)]
    pub verbose: bool,
}

/// Runs the simulator on `args.seeds` seeds from the first, each with a fresh workload from
/// `make`; prints failures (each with the command that replays it) and a summary; fails when
/// a seed violated an invariant.
pub fn sim<W: Workload>(args: SimArgs, make: impl Fn() -> W) -> anyhow::Result<()> {
    let first = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!(
        "simulating {} seeds from {first} ({} requests per client)",
        args.seeds, args.requests
    );
    let started = Instant::now();
    let mut failing = Vec::new();
    // How many violations of each invariant the failing seeds found.
    let mut broken: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut totals = SimReport::default();
    let mut last_progress = Instant::now();
    for n in 0..args.seeds {
        let seed = first.wrapping_add(n);
        let mut options = SimOptions::new(seed);
        options.requests = args.requests;
        let report = crate::sim::run(make(), options);
        if args.verbose {
            print_seed(seed, &report);
        }
        if !report.violations.is_empty() {
            print_failure(seed, &report, &mut broken);
            failing.push(seed);
        }
        totals.absorb(&report);
        if last_progress.elapsed().as_secs() >= 5 {
            last_progress = Instant::now();
            eprintln!(
                "  {} of {} seeds, {} failing",
                n + 1,
                args.seeds,
                failing.len()
            );
        }
    }
    print_totals(
        &totals,
        args.seeds,
        failing.len(),
        started.elapsed().as_secs_f64(),
    );
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "seeds": args.seeds,
            "first_seed": first,
            "violations": failing.len(),
            "failing_seeds": failing,
            "violations_by_invariant": broken,
        });
        crate::storage::files::write_durably(
            path,
            (serde_json::to_string_pretty(&json)? + "\n").as_bytes(),
        )?;
    }
    if failing.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} of {} seeds violated an invariant",
            failing.len(),
            args.seeds
        )
    }
}

/// One seed's counts, for `--verbose`.
fn print_seed(seed: u64, report: &SimReport) {
    eprintln!(
        "seed {seed}: {}; {} snapshots taken, {} installed, {} damaged restarts, {} disks full, {} acknowledged, {} committed, {} crashes, {} partitions, {} leaders, {} events, {:.1} s simulated",
        report.swarm,
        report.snapshots,
        report.installs,
        report.damaged,
        report.disks_full,
        report.acknowledged,
        report.committed,
        report.crashes,
        report.partitions,
        report.leaders,
        report.events,
        report.time as f64 / 10_000.0
    );
}

/// A failing seed's violations and the command that replays it; counts them in `broken`.
fn print_failure(
    seed: u64,
    report: &SimReport,
    broken: &mut std::collections::BTreeMap<&'static str, u64>,
) {
    eprintln!("seed {seed} FAILED ({}):", report.swarm);
    for violation in &report.violations {
        eprintln!("  {violation}");
        *broken.entry(violation.invariant.code()).or_default() += 1;
    }
    let binary = super::binary_name();
    eprintln!("  replay: {binary} sim --seed {seed} --seeds 1 --verbose");
    eprintln!("  step by step: RUST_LOG=engine::sim=trace {binary} sim --seed {seed} --seeds 1");
}

/// The summary table: the seeds' counts summed.
fn print_totals(totals: &SimReport, seeds: u64, failing: usize, seconds: f64) {
    crate::outln!(
        "{:>8} {:>10} {:>12} {:>8} {:>10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>10} {:>7} {:>9} {:>8} {:>7} {:>14} {:>12} {:>17} {:>8} {:>19} {:>16} {:>11} {:>20} {:>10} {:>10} {:>13} {:>12} {:>12} {:>8}",
        "seeds",
        "failing",
        "acknowledged",
        "reads",
        "committed",
        "crashes",
        "partitions",
        "snapshots",
        "installs",
        "damaged",
        "disks_full",
        "stalls",
        "acks_down",
        "hedges",
        "not_yet",
        "member_changes",
        "fsync_errors",
        "snapshots_damaged",
        "rebuilds",
        "hard_states_damaged",
        "damaged_together",
        "copies_lost",
        "rewritten_after_loss",
        "keyed_runs",
        "keys_alone",
        "keyed_repeats",
        "keyed_reused",
        "events",
        "seconds"
    );
    crate::outln!(
        "{:>8} {:>10} {:>12} {:>8} {:>10} {:>9} {:>11} {:>10} {:>9} {:>8} {:>10} {:>7} {:>9} {:>8} {:>7} {:>14} {:>12} {:>17} {:>8} {:>19} {:>16} {:>11} {:>20} {:>10} {:>10} {:>13} {:>12} {:>12} {:>8.1}",
        seeds,
        failing,
        totals.acknowledged,
        totals.reads,
        totals.committed,
        totals.crashes,
        totals.partitions,
        totals.snapshots,
        totals.installs,
        totals.damaged,
        totals.disks_full,
        totals.stalls,
        totals.acks_down,
        totals.hedges,
        totals.not_yet,
        totals.member_changes,
        totals.fsync_errors,
        totals.snapshots_damaged,
        totals.rebuilds,
        totals.hard_states_damaged,
        totals.damaged_together,
        totals.copies_lost,
        totals.rewritten_after_loss,
        totals.keyed_runs,
        totals.keys_alone,
        totals.keyed_repeats,
        totals.keyed_reused,
        totals.events,
        seconds
    );
}
