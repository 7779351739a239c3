//! `runner chaos`: three `runner node` processes, Bank clients sending transfers, and a
//! controller that kills (SIGKILL) the leader, a follower, two nodes or all three at random
//! moments and restarts them, and pauses nodes (SIGSTOP longer than an election timeout, then
//! SIGCONT). At the end it heals everything, lets the clients finish, and checks:
//!
//! - I1, I3, I5: every account's balance and version equal the clients' model built from
//!   acknowledged outcomes only (an acknowledged transfer lost, or applied twice, shows), and
//!   the audit total is the opening total;
//! - I2: the three nodes converge on one state hash; none reported a divergence or halted;
//! - I4: the three WALs hold the same entry at every index they all hold;
//! - I6: no client request is left without an outcome;
//! - I7: no two nodes were seen leading the same term.

use crate::faults::{
    Addresses, FaultArgs, Findings, Processes, Workload, check_accounts, compare_wals, converge,
    leader_of, seed_or_clock, statuses, watch, write_cluster_files,
};
use engine::client::ClientConfig;
use engine::rng::Rng;
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// Least and most time between two faults, in milliseconds.
pub const FAULT_INTERVAL_MS: (u64, u64) = (300, 2_500);
/// Least and most time a killed node stays down, in milliseconds.
pub const DOWN_MS: (u64, u64) = (50, 2_000);
/// Least and most time a paused node stays stopped, in milliseconds (the election timeout is
/// 150-300 ms: a pause always outlasts it).
pub const PAUSE_MS: (u64, u64) = (400, 2_000);

/// Options of `runner chaos`.
#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Seconds of faults.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// `--json FILE` gets `{"acknowledged": A, "kills": K, "violations": V, "unknown": U, ...}`.
    #[command(flatten)]
    common: FaultArgs,
    /// Keeps the run directory (node logs, data) instead of removing it.
    #[arg(long)]
    keep: bool,
}

/// Runs the chaos test; prints a table and writes the JSON summary.
pub fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let seed = seed_or_clock(args.common.seed);
    let run_dir = crate::run_dir(args.common.dir.clone())?;
    let dir = run_dir.path().to_path_buf();
    eprintln!(
        "chaos: {} s of faults, seed {seed}, {} clients, in {}",
        args.duration,
        args.common.clients,
        dir.display()
    );
    let addresses = Addresses::free()?;
    let files = write_cluster_files(&dir, &addresses, None)?;
    let config = addresses.client_config();
    let processes = RefCell::new(Processes::start_all(&dir, files)?);
    let findings = RefCell::new(Findings::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let (acknowledged, unknown) = runtime.block_on(
        tokio::task::LocalSet::new().run_until(chaos(&args, seed, &config, &processes, &findings)),
    )?;
    processes.borrow_mut().kill_all();
    let mut findings = findings.into_inner();
    compare_wals(&dir, &mut findings);
    println!(
        "{:>8} {:>13} {:>6} {:>7} {:>6} {:>11} {:>8}",
        "seconds", "acknowledged", "kills", "pauses", "terms", "violations", "unknown"
    );
    println!(
        "{:>8.0} {:>13} {:>6} {:>7} {:>6} {:>11} {:>8}",
        started.elapsed().as_secs_f64(),
        acknowledged,
        findings.kills,
        findings.pauses,
        findings.leaders.len(),
        findings.violations.len(),
        unknown
    );
    for violation in &findings.violations {
        println!("violation: {violation}");
    }
    if let Some(path) = &args.common.json {
        let json = serde_json::json!({
            "acknowledged": acknowledged,
            "kills": findings.kills,
            "pauses": findings.pauses,
            "violations": findings.violations.len(),
            "unknown": unknown,
            "seed": seed,
            "duration_s": args.duration,
            "terms": findings.leaders.len(),
            "violation_list": findings.violations,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")?;
    }
    if args.keep {
        eprintln!("kept {}", run_dir.keep().display());
    }
    anyhow::ensure!(
        findings.violations.is_empty() && unknown == 0,
        "{} violations, {unknown} unknown outcomes",
        findings.violations.len()
    );
    Ok(())
}

/// The faults and the workload; returns the acknowledged requests and the unknown outcomes.
async fn chaos(
    args: &ChaosArgs,
    seed: u64,
    config: &ClientConfig,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) -> anyhow::Result<(u64, u64)> {
    let started = Instant::now();
    let workload = Workload::start(config, args.common.clients, seed).await?;
    let acknowledged = workload.acknowledged.clone();
    let watching = Cell::new(true);
    let faults = async {
        let mut rng = Rng::new(seed);
        let end = Instant::now() + Duration::from_secs(args.duration);
        let mut last_report = Instant::now();
        while Instant::now() < end {
            let wait = between(&mut rng, FAULT_INTERVAL_MS);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            inject(&mut rng, config, processes, findings).await;
            if last_report.elapsed() >= Duration::from_secs(5) {
                last_report = Instant::now();
                let f = findings.borrow();
                eprintln!(
                    "  {:>4.0} s: {} acknowledged, {} kills, {} pauses, {} violations",
                    started.elapsed().as_secs_f64(),
                    acknowledged.get(),
                    f.kills,
                    f.pauses,
                    f.violations.len()
                );
            }
        }
        processes.borrow_mut().heal()?;
        eprintln!("healed; letting the clients finish");
        let (expected, unknown) = workload.finish(findings).await;
        converge(config, findings).await;
        watching.set(false);
        check_accounts(config, &expected, findings).await;
        Ok::<u64, anyhow::Error>(unknown)
    };
    let (unknown, ()) = futures::join!(faults, watch(config, findings, &watching));
    Ok((acknowledged.get(), unknown?))
}

fn between(rng: &mut Rng, (low, high): (u64, u64)) -> u64 {
    low + rng.below(high - low + 1)
}

/// One fault: kill the leader, a follower, two nodes or all three (each restarted after a
/// while), or pause one node.
async fn inject(
    rng: &mut Rng,
    config: &ClientConfig,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) {
    let leader = leader_of(&statuses(config).await);
    let random = 1 + rng.below(3) as u8;
    let follower = (1..=3u8)
        .filter(|&n| Some(n) != leader)
        .nth(rng.below(2) as usize)
        .unwrap_or(random);
    let victims: Vec<u8> = match rng.below(10) {
        0..=2 => vec![leader.unwrap_or(random)],
        3..=4 => vec![follower],
        5 => vec![random, 1 + random % 3],
        6 => vec![1, 2, 3],
        _ => {
            let id = leader.filter(|_| rng.chance(1, 2)).unwrap_or(random);
            if processes.borrow().up(id) && !processes.borrow().paused.contains(&id) {
                processes.borrow_mut().pause(id);
                findings.borrow_mut().pauses += 1;
                let pause = between(rng, PAUSE_MS);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                processes.borrow_mut().resume(id);
            }
            return;
        }
    };
    for &id in &victims {
        if processes.borrow().up(id) {
            processes.borrow_mut().kill(id);
            findings.borrow_mut().kills += 1;
        }
    }
    let down = between(rng, DOWN_MS);
    tokio::time::sleep(Duration::from_millis(down)).await;
    for id in victims {
        if !processes.borrow().up(id) && processes.borrow_mut().start(id).is_err() {
            findings
                .borrow_mut()
                .violations
                .push(format!("node {id} could not be restarted"));
        }
    }
}
