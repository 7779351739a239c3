//! `runner partition`: partitions between three `runner node` processes through our proxy
//! (every peer link goes through it), under a Bank workload. Each scenario starts a fresh
//! cluster, finds the leader, cuts links as it says, checks that the majority side keeps
//! committing and that an isolated leader steps down, heals, and checks I1-I7 as
//! `runner chaos` does.

use crate::faults::{
    Addresses, FaultArgs, Findings, Processes, Workload, check_accounts, compare_wals, converge,
    leader_of, seed_or_clock, statuses, watch, write_cluster_files,
};
use crate::proxy::{LinkMode, Proxy};
use engine::client::ClientConfig;
use engine::node::ClusterFile;
use engine::rng::Rng;
use net::message::Role;
use std::cell::{Cell, RefCell};
use std::path::Path;
use std::time::{Duration, Instant};

/// Time the cluster runs before a partition, and after healing before the checks.
pub const CALM_MS: u64 = 1_000;
/// Time an isolated leader has to notice and step down (the check-quorum window is the
/// minimum election timeout, 150 ms; a paused scheduler on this machine takes longer).
pub const STEP_DOWN_MS_MAX: u64 = 2_000;
/// Delay a slow link adds to everything it carries.
pub const SLOW_LINK_DELAY_MS: u64 = 20;
/// Least and most time between two flaps of a flapping link, in milliseconds.
pub const FLAP_MS: (u64, u64) = (1_000, 5_000);
/// Time a slow follower's disk adds to every fsync.
pub const SLOW_FSYNC_MS: u64 = 30;

/// The partition scenarios.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// The leader's links to and from both followers are cut.
    LeaderIsolated,
    /// What the leader sends is lost; it still hears the others.
    LeaderCannotSend,
    /// What is sent to the leader is lost; it still reaches the others.
    LeaderCannotHear,
    /// Everything to and from the leader disappears into a black hole (accepted, never
    /// delivered).
    LeaderBlackholed,
    /// A follower reaches only the other follower, not the leader.
    FollowerReachesOnePeer,
    /// The links of a follower are slow.
    SlowFollower,
    /// The current leader is isolated and reconnected every 1-5 s.
    Flapping,
    /// A follower's fsyncs take 30 ms longer (it restarts on a slow disk): commit latency,
    /// which needs the fastest majority only, should stay near the healthy cluster's.
    SlowFsync,
}

impl Scenario {
    const ALL: [Scenario; 8] = [
        Scenario::LeaderIsolated,
        Scenario::LeaderCannotSend,
        Scenario::LeaderCannotHear,
        Scenario::LeaderBlackholed,
        Scenario::FollowerReachesOnePeer,
        Scenario::SlowFollower,
        Scenario::Flapping,
        Scenario::SlowFsync,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::LeaderIsolated => "leader-isolated",
            Scenario::LeaderCannotSend => "leader-cannot-send",
            Scenario::LeaderCannotHear => "leader-cannot-hear",
            Scenario::LeaderBlackholed => "leader-blackholed",
            Scenario::FollowerReachesOnePeer => "follower-reaches-one-peer",
            Scenario::SlowFollower => "slow-follower",
            Scenario::Flapping => "flapping",
            Scenario::SlowFsync => "slow-fsync",
        }
    }

    /// Whether the leader loses its majority, and so must step down.
    fn isolates_leader(self) -> bool {
        match self {
            Scenario::LeaderIsolated
            | Scenario::LeaderCannotSend
            | Scenario::LeaderCannotHear
            | Scenario::LeaderBlackholed => true,
            // Flapping isolates whichever node leads, again and again: the terms count it.
            Scenario::FollowerReachesOnePeer
            | Scenario::SlowFollower
            | Scenario::Flapping
            | Scenario::SlowFsync => false,
        }
    }
}

/// Options of `runner partition`.
#[derive(clap::Args, Debug)]
pub struct PartitionArgs {
    /// One scenario (default: every one, in turn).
    #[arg(long, value_enum)]
    scenario: Option<Scenario>,
    /// Seconds each partition lasts (flapping runs four times as long).
    #[arg(long, default_value_t = 5, alias = "seconds")]
    duration: u64,
    /// `--json FILE` gets `{"scenarios": [...], "violations": V}`.
    #[command(flatten)]
    common: FaultArgs,
}

/// What one scenario showed.
struct Outcome {
    scenario: Scenario,
    /// Requests acknowledged while the partition held (after the first second of it).
    acknowledged_during: u64,
    acknowledged: u64,
    /// Whether the isolated leader stepped down, and how long it took.
    stepped_down_ms: Option<u64>,
    /// The terms seen.
    terms: usize,
    /// Request latency (p50, p99, in ms) before and during a slow follower's fsyncs.
    latency: Option<((f64, f64), (f64, f64))>,
    violations: Vec<String>,
}

/// Runs the scenarios; prints a table and writes the JSON summary.
pub fn run(args: PartitionArgs) -> anyhow::Result<()> {
    let seed = seed_or_clock(args.common.seed);
    let scenarios: Vec<Scenario> = args
        .scenario
        .map_or_else(|| Scenario::ALL.to_vec(), |s| vec![s]);
    eprintln!(
        "partitions: {} scenarios of {} s, seed {seed}",
        scenarios.len(),
        args.duration
    );
    let mut outcomes = Vec::new();
    for scenario in scenarios {
        let run_dir = runner::run_dir(args.common.dir.clone())?;
        eprintln!("{} in {}", scenario.name(), run_dir.path().display());
        let outcome = run_scenario(&args, scenario, seed, run_dir.path())?;
        for violation in &outcome.violations {
            eprintln!("  violation: {violation}");
        }
        if !outcome.violations.is_empty() {
            // The node logs and data are the evidence: a failing scenario keeps them.
            eprintln!("  kept {}", run_dir.keep().display());
        }
        outcomes.push(outcome);
    }
    print_outcomes(&outcomes);
    let violations: usize = outcomes.iter().map(|o| o.violations.len()).sum();
    if let Some(path) = &args.common.json {
        let scenarios: Vec<serde_json::Value> = outcomes.iter().map(Outcome::json).collect();
        let json = serde_json::json!({
            "seed": seed,
            "seconds": args.duration,
            "scenarios": scenarios,
            "violations": violations,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")?;
    }
    anyhow::ensure!(violations == 0, "{violations} violations");
    Ok(())
}

impl Outcome {
    /// The scenario's entry in the JSON summary.
    fn json(&self) -> serde_json::Value {
        let latency = self.latency.map(|((p50, p99), (slow50, slow99))| {
            serde_json::json!({
                "healthy": {"p50": p50, "p99": p99},
                "slow_follower_fsync": {"p50": slow50, "p99": slow99},
            })
        });
        serde_json::json!({
            "scenario": self.scenario.name(),
            "acknowledged": self.acknowledged,
            "acknowledged_during_partition": self.acknowledged_during,
            "leader_stepped_down_ms": self.stepped_down_ms,
            "terms": self.terms,
            "latency_ms": latency,
            "violations": self.violations,
        })
    }
}

/// The scenarios' table, then the latency each slow-follower scenario saw.
fn print_outcomes(outcomes: &[Outcome]) {
    engine::outln!(
        "{:<26} {:>13} {:>13} {:>14} {:>6} {:>11}",
        "scenario",
        "acknowledged",
        "during cut",
        "stepped down",
        "terms",
        "violations"
    );
    for o in outcomes {
        let stepped = match (o.scenario.isolates_leader(), o.stepped_down_ms) {
            (false, _) => "n/a".to_string(),
            (true, Some(ms)) => format!("after {ms} ms"),
            (true, None) => "NO".to_string(),
        };
        engine::outln!(
            "{:<26} {:>13} {:>13} {:>14} {:>6} {:>11}",
            o.scenario.name(),
            o.acknowledged,
            o.acknowledged_during,
            stepped,
            o.terms,
            o.violations.len()
        );
    }
    for o in outcomes {
        if let Some(((p50, p99), (slow50, slow99))) = o.latency {
            engine::outln!(
                "{}: request latency p50 {p50:.2} ms, p99 {p99:.2} ms healthy; p50 {slow50:.2} ms, p99 {slow99:.2} ms with one follower's fsync {SLOW_FSYNC_MS} ms slower",
                o.scenario.name()
            );
        }
    }
}

fn run_scenario(
    args: &PartitionArgs,
    scenario: Scenario,
    seed: u64,
    dir: &Path,
) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let (addresses, relays) = Addresses::with_relays()?;
        let proxy = Proxy::start(&addresses.peers, relays)?;
        let via = |from, to| proxy.address(from, to);
        let files = write_cluster_files(dir, &addresses, Some(&via), args.common.wal_io)?;
        let config = addresses.client_config();
        let processes = RefCell::new(Processes::start_all(dir, files)?);
        let findings = RefCell::new(Findings::default());
        let watching = Cell::new(true);
        let (outcome, ()) = futures::join!(
            async {
                let outcome =
                    partitioned(args, scenario, seed, &config, &proxy, &processes, &findings).await;
                watching.set(false);
                outcome
            },
            watch(&config, &findings, &watching)
        );
        let mut outcome = outcome?;
        outcome.violations.extend(processes.borrow_mut().crashed());
        processes.borrow_mut().kill_all();
        let mut findings = findings.into_inner();
        compare_wals(dir, &mut findings);
        outcome.terms = findings.leaders.len();
        outcome.violations.append(&mut findings.violations);
        Ok(outcome)
    })
}

/// The workload, the partition, the healing and the checks of one scenario.
async fn partitioned(
    args: &PartitionArgs,
    scenario: Scenario,
    seed: u64,
    config: &ClientConfig,
    proxy: &Proxy,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) -> anyhow::Result<Outcome> {
    let mut workload = Workload::start(config, args.common.clients, seed).await?;
    tokio::time::sleep(Duration::from_millis(CALM_MS)).await;
    let leader = wait_for_leader(config).await?;
    let length = Duration::from_secs(args.duration);
    let during = match scenario {
        Scenario::SlowFsync => slow_fsync(config, processes, &workload, (leader, length)).await?,
        Scenario::Flapping => flapping(config, proxy, &workload, (leader, length), seed).await,
        Scenario::LeaderIsolated
        | Scenario::LeaderBlackholed
        | Scenario::LeaderCannotSend
        | Scenario::LeaderCannotHear
        | Scenario::FollowerReachesOnePeer
        | Scenario::SlowFollower => {
            cut(scenario, proxy, leader);
            cut_off(scenario, config, &workload, (leader, length)).await
        }
    };
    proxy.heal();
    tokio::time::sleep(Duration::from_millis(CALM_MS)).await;
    let total = workload.acknowledged.clone();
    let (expected, _unknown) = workload.finish(findings).await;
    converge(config, findings).await;
    workload.check_linearizable(findings);
    check_accounts(config, &expected, findings).await;
    Ok(Outcome {
        scenario,
        acknowledged_during: during.acknowledged,
        acknowledged: total.get(),
        stepped_down_ms: during.stepped_down_ms,
        terms: 0,
        latency: during.latency,
        violations: during.violations,
    })
}

/// What a scenario saw while its fault lasted.
#[derive(Default)]
struct During {
    /// Requests acknowledged meanwhile (for a cut, from a second into it).
    acknowledged: u64,
    stepped_down_ms: Option<u64>,
    /// Request latency (p50, p99, in ms) before and during a slow follower's fsyncs.
    latency: Option<((f64, f64), (f64, f64))>,
    violations: Vec<String>,
}

/// The two nodes that do not lead.
fn followers_of(leader: u8) -> Vec<u8> {
    (1..=3).filter(|&n| n != leader).collect()
}

/// Latency for `length` healthy, then for `length` with one follower restarted with a slow
/// fsync.
async fn slow_fsync(
    config: &ClientConfig,
    processes: &RefCell<Processes>,
    workload: &Workload,
    (leader, length): (u8, Duration),
) -> anyhow::Result<During> {
    let healthy_from = Instant::now();
    tokio::time::sleep(length).await;
    let healthy = workload.latency_since(healthy_from);
    let slow = followers_of(leader)[0];
    let file = processes.borrow().cluster_file(slow).to_path_buf();
    let mut slowed = ClusterFile::parse(&file)?;
    slowed.fsync_delay_ms = SLOW_FSYNC_MS;
    slowed.write(&file)?;
    processes.borrow_mut().kill(slow);
    processes.borrow_mut().start(slow)?;
    wait_caught_up(config, slow).await?;
    let slow_from = Instant::now();
    let before = workload.acknowledged.get();
    tokio::time::sleep(length).await;
    Ok(During {
        acknowledged: workload.acknowledged.get() - before,
        latency: Some((healthy, workload.latency_since(slow_from))),
        ..During::default()
    })
}

/// The current leader isolated and healed over and over, for four times `length`.
async fn flapping(
    config: &ClientConfig,
    proxy: &Proxy,
    workload: &Workload,
    (leader, length): (u8, Duration),
    seed: u64,
) -> During {
    let mut rng = Rng::new(seed);
    let end = Instant::now() + length * 4;
    let mut isolated = None;
    while Instant::now() < end {
        match isolated.take() {
            Some(_) => proxy.heal(),
            None => {
                let current = leader_of(&statuses(config).await).unwrap_or(leader);
                isolate(proxy, current, LinkMode::Drop);
                isolated = Some(current);
            }
        }
        let wait = FLAP_MS.0 + rng.below(FLAP_MS.1 - FLAP_MS.0 + 1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    During {
        acknowledged: workload.acknowledged.get(),
        ..During::default()
    }
}

/// Cuts the links `scenario` names around `leader`.
fn cut(scenario: Scenario, proxy: &Proxy, leader: u8) {
    let followers = followers_of(leader);
    match scenario {
        Scenario::LeaderIsolated => isolate(proxy, leader, LinkMode::Drop),
        Scenario::LeaderBlackholed => isolate(proxy, leader, LinkMode::Blackhole),
        Scenario::LeaderCannotSend => {
            for &f in &followers {
                proxy.set(leader, f, LinkMode::Drop);
            }
        }
        Scenario::LeaderCannotHear => {
            for &f in &followers {
                proxy.set(f, leader, LinkMode::Drop);
            }
        }
        Scenario::FollowerReachesOnePeer => {
            proxy.set_both(followers[0], leader, LinkMode::Drop);
        }
        Scenario::SlowFollower => {
            let delay = LinkMode::Delay(Duration::from_millis(SLOW_LINK_DELAY_MS));
            proxy.set_both(followers[0], leader, delay);
            proxy.set_both(followers[0], followers[1], delay);
        }
        Scenario::Flapping | Scenario::SlowFsync => unreachable!("not a cut of links"),
    }
}

/// Watches a cut for `length`: when the old leader steps down, and what the majority side
/// commits; a leader that does not step down in time, or a majority that commits nothing, is
/// a violation.
async fn cut_off(
    scenario: Scenario,
    config: &ClientConfig,
    workload: &Workload,
    (leader, length): (u8, Duration),
) -> During {
    let cut_at = Instant::now();
    let mut stepped_down_ms = None;
    let mut counted_from = None;
    while cut_at.elapsed() < length {
        let elapsed = cut_at.elapsed();
        if stepped_down_ms.is_none()
            && let Some(status) = statuses(config)
                .await
                .into_iter()
                .find(|s| s.node.0 == leader)
            && status.role != Role::Leader
        {
            stepped_down_ms = Some(elapsed.as_millis() as u64);
        }
        // The majority side gets a second to elect a leader; then it must commit.
        if counted_from.is_none() && elapsed >= Duration::from_secs(1) {
            counted_from = Some(workload.acknowledged.get());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let acknowledged = workload.acknowledged.get() - counted_from.unwrap_or(0);
    let mut violations = Vec::new();
    if scenario.isolates_leader() && stepped_down_ms.is_none_or(|ms| ms > STEP_DOWN_MS_MAX) {
        violations.push(format!(
            "the isolated leader (node {leader}) did not step down within {STEP_DOWN_MS_MAX} ms ({stepped_down_ms:?})"
        ));
    }
    if acknowledged == 0 {
        violations.push("the majority side committed nothing during the partition".into());
    }
    During {
        acknowledged,
        stepped_down_ms,
        latency: None,
        violations,
    }
}

/// Waits until node `id` answers and has applied what the cluster had committed when it
/// restarted (under load a slow follower may stay behind after that: the others commit).
async fn wait_caught_up(config: &ClientConfig, id: u8) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(crate::faults::SETTLE_SECS);
    let commit = statuses(config).await.iter().map(|s| s.commit_index).max();
    loop {
        let all = statuses(config).await;
        if all
            .iter()
            .any(|s| s.node.0 == id && Some(s.applied_index) >= commit)
        {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "node {id} did not catch up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Cuts every link to and from `node` in `mode`.
fn isolate(proxy: &Proxy, node: u8, mode: LinkMode) {
    for other in (1..=3).filter(|&n| n != node) {
        proxy.set_both(node, other, mode);
    }
}

async fn wait_for_leader(config: &ClientConfig) -> anyhow::Result<u8> {
    let deadline = Instant::now() + Duration::from_secs(crate::faults::SETTLE_SECS);
    loop {
        if let Some(leader) = leader_of(&statuses(config).await) {
            return Ok(leader);
        }
        anyhow::ensure!(Instant::now() < deadline, "no leader was elected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
