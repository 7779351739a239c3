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
//! - I7: no two nodes were seen leading the same term;
//! - linearizability: every client operation (one command per request, a quarter of them
//!   reads), with its invocation and completion times and its outcome, fits a sequential Bank
//!   in an order consistent with real time (`linearize::check`); the first window that does
//!   not is reported.

use crate::faults::{
    Addresses, FaultArgs, Findings, Processes, Rejoin, Workload, check_accounts, compare_wals,
    converge, leader_of, seed_or_clock, statuses, watch, write_cluster_files,
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
    let run_dir = runner::run_dir(args.common.dir.clone())?;
    let dir = run_dir.path().to_path_buf();
    eprintln!(
        "chaos: {} s of faults, seed {seed}, {} clients, in {}",
        args.duration,
        args.common.clients,
        dir.display()
    );
    let addresses = Addresses::free()?;
    let files = write_cluster_files(&dir, &addresses, None, args.common.wal_io)?;
    let config = args.common.client_config(&addresses);
    let processes = RefCell::new(Processes::start_all(&dir, files)?);
    let findings = RefCell::new(Findings::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let measured = runtime.block_on(
        tokio::task::LocalSet::new().run_until(chaos(&args, seed, &config, &processes, &findings)),
    )?;
    let Measured {
        acknowledged,
        unknown,
        stalls,
        longest_stall_ms,
        after_one_fault,
    } = measured;
    let crashed = processes.borrow_mut().crashed();
    findings.borrow_mut().violations.extend(crashed);
    processes.borrow_mut().kill_all();
    let mut findings = findings.into_inner();
    compare_wals(&dir, &mut findings);
    let (rejoin_p50, rejoin_p99, rejoin_max) = findings.rejoin_ms(|_| true);
    let (_, single_p99, single_max) = findings.rejoin_ms(Rejoin::single);
    let (while_stale, alone): (Vec<&OneFault>, Vec<&OneFault>) = after_one_fault
        .iter()
        .partition(|s| s.what.contains(WHILE_STALE));
    let summary = Summary {
        seconds: started.elapsed().as_secs_f64(),
        acknowledged,
        unknown,
        longest_stall_ms,
        rejoin_ms: [rejoin_p50, rejoin_p99, rejoin_max],
        one_fault_stall_max_ms: alone.iter().map(|s| s.stall_ms).fold(0.0, f64::max),
        one_faults: alone.len(),
        while_stale: while_stale.len(),
        while_stale_stall_max_ms: while_stale.iter().map(|s| s.stall_ms).fold(0.0, f64::max),
    };
    summary.print(&findings);
    print_stalls(&stalls, &findings.faults, started);
    print_after_one_fault(&after_one_fault);
    print_slowest_rejoins(&findings.rejoins, single_p99, single_max);
    if let Some(path) = &args.common.json {
        let mut json = summary.json(&findings);
        json["seed"] = serde_json::json!(seed);
        json["duration_s"] = serde_json::json!(args.duration);
        json["single_fault_rejoin_p99_ms"] = serde_json::json!(single_p99);
        json["single_fault_rejoin_max_ms"] = serde_json::json!(single_max);
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

/// What a chaos run ends with, for the table and the JSON summary.
struct Summary {
    seconds: f64,
    acknowledged: u64,
    unknown: u64,
    longest_stall_ms: f64,
    /// Rejoin times: p50, p99, max.
    rejoin_ms: [f64; 3],
    one_fault_stall_max_ms: f64,
    one_faults: usize,
    while_stale: usize,
    while_stale_stall_max_ms: f64,
}

impl Summary {
    /// The table, every violation, and the linearizability check.
    fn print(&self, findings: &Findings) {
        engine::outln!(
            "{:>8} {:>13} {:>6} {:>7} {:>6} {:>11} {:>8} {:>9} {:>8} {:>12} {:>12} {:>12}",
            "seconds",
            "acknowledged",
            "kills",
            "pauses",
            "terms",
            "violations",
            "unknown",
            "stall_ms",
            "rejoins",
            "rejoin_p50",
            "rejoin_p99",
            "rejoin_max"
        );
        let [p50, p99, max] = self.rejoin_ms;
        engine::outln!(
            "{:>8.0} {:>13} {:>6} {:>7} {:>6} {:>11} {:>8} {:>9.0} {:>8} {:>12.0} {:>12.0} {:>12.0}",
            self.seconds,
            self.acknowledged,
            findings.kills,
            findings.pauses,
            findings.leaders.len(),
            findings.violations.len(),
            self.unknown,
            self.longest_stall_ms,
            findings.rejoins.len(),
            p50,
            p99,
            max
        );
        for violation in &findings.violations {
            engine::outln!("violation: {violation}");
        }
        if let Some(checked) = &findings.linearizability {
            let verdict = match checked.linearizable {
                Some(true) => "linearizable",
                Some(false) => "NOT linearizable",
                None => "inconclusive",
            };
            engine::outln!(
                "linearizability: {} operations checked in {:.0} ms: {verdict}",
                checked.operations,
                checked.took_ms
            );
        }
    }

    /// The JSON summary's keys from the run and its findings.
    fn json(&self, findings: &Findings) -> serde_json::Value {
        let [p50, p99, max] = self.rejoin_ms;
        let checked = findings.linearizability.as_ref();
        serde_json::json!({
            "acknowledged": self.acknowledged,
            "kills": findings.kills,
            "pauses": findings.pauses,
            "violations": findings.violations.len(),
            "unknown": self.unknown,
            "terms": findings.leaders.len(),
            "longest_stall_ms": self.longest_stall_ms,
            "one_fault_stall_max_ms": self.one_fault_stall_max_ms,
            "one_faults": self.one_faults,
            "second_faults_while_stale": self.while_stale,
            "while_stale_stall_max_ms": self.while_stale_stall_max_ms,
            "history_operations": checked.map(|l| l.operations),
            "linearizable": checked.and_then(|l| l.linearizable),
            "linearizability_ms": checked.map(|l| l.took_ms),
            "rejoins": findings.rejoins.len(),
            "rejoin_p50_ms": p50,
            "rejoin_p99_ms": p99,
            "rejoin_max_ms": max,
            "not_rejoined": findings.rejoining.len(),
            "violation_list": findings.violations,
        })
    }
}

/// Stretches without an answer at least this long are listed with the faults before them.
pub const STALL_REPORTED_MS: u64 = 1_000;
/// How far before a stall a fault is listed as its likely cause.
pub const STALL_CAUSE_MS: u64 = 3_000;

/// What a run measured beside its findings.
struct Measured {
    acknowledged: u64,
    unknown: u64,
    /// The stretches during the faults of at least [`STALL_REPORTED_MS`] with no request
    /// answered, longest first, and the longest of all, in milliseconds.
    stalls: Vec<(Instant, Instant)>,
    /// The longest stall after each fault that struck one node alone.
    after_one_fault: Vec<OneFault>,
    longest_stall_ms: f64,
}

/// The faults and the workload; returns what was measured.
async fn chaos(
    args: &ChaosArgs,
    seed: u64,
    config: &ClientConfig,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) -> anyhow::Result<Measured> {
    let started = Instant::now();
    let mut workload = Workload::start(config, args.common.clients, seed).await?;
    let acknowledged = workload.acknowledged.clone();
    let watching = Cell::new(true);
    let faults_began = Instant::now();
    let faults = async {
        let mut rng = Rng::new(seed);
        let end = Instant::now() + Duration::from_secs(args.duration);
        let mut last_report = Instant::now();
        while Instant::now() < end {
            let wait = between(&mut rng, FAULT_INTERVAL_MS);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let crashed = processes.borrow_mut().crashed();
            findings.borrow_mut().violations.extend(crashed);
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
        let now = Instant::now();
        eprintln!("healed; letting the clients finish");
        let (expected, unknown) = workload.finish(findings).await;
        converge(config, findings).await;
        watching.set(false);
        // The work that holds the thread comes after the watcher stopped: a node restarted by
        // the last fault is still timed while it rejoins.
        let longest = workload.stalls(faults_began, now, Duration::ZERO);
        let longest_stall_ms = longest
            .first()
            .map_or(0.0, |(a, b)| (*b - *a).as_secs_f64() * 1e3);
        let stalls = workload.stalls(faults_began, now, Duration::from_millis(STALL_REPORTED_MS));
        let after_one_fault = {
            let f = findings.borrow();
            one_fault_stalls(&workload, &f.faults, &f.fault_ends, now)
        };
        workload.check_linearizable(findings);
        check_accounts(config, &expected, findings).await;
        Ok::<_, anyhow::Error>((unknown, stalls, longest_stall_ms, after_one_fault))
    };
    let (measured, ()) = futures::join!(faults, watch(config, findings, &watching));
    let (unknown, stalls, longest_stall_ms, after_one_fault) = measured?;
    Ok(Measured {
        acknowledged: acknowledged.get(),
        unknown,
        stalls,
        longest_stall_ms,
        after_one_fault,
    })
}

/// How long before a fault on one node the previous fault must have ended (its nodes
/// restarted or resumed) for the stall after it to count as that fault's alone, in
/// milliseconds (a rejoin takes 100-400 ms).
pub const ONE_FAULT_QUIET_MS: u64 = 500;

/// The longest stretch without an answer after a fault that struck one node alone.
struct OneFault {
    /// The fault, as the fault list names it.
    what: String,
    /// The longest stretch without an answer after it, from the last answer before it, cut
    /// at the next fault or after [`STALL_CAUSE_MS`].
    stall_ms: f64,
}

/// For each fault on one node alone that began at least [`ONE_FAULT_QUIET_MS`] after the one
/// before it ended, and each second fault while a node was stale ([`second_fault`]), the
/// longest stretch without an answer in the time after it, from the
/// last answer before it (cut at the next fault, after [`STALL_CAUSE_MS`], or at `until`).
fn one_fault_stalls(
    workload: &Workload,
    faults: &[(Instant, String)],
    ends: &[Instant],
    until: Instant,
) -> Vec<OneFault> {
    let quiet = Duration::from_millis(ONE_FAULT_QUIET_MS);
    let cause = Duration::from_millis(STALL_CAUSE_MS);
    let mut answered: Vec<Instant> = workload
        .latencies
        .borrow()
        .iter()
        .map(|(at, _)| *at)
        .collect();
    answered.sort_unstable();
    let mut found = Vec::new();
    for (k, (at, what)) in faults.iter().enumerate() {
        let after_previous = k == 0 || ends.get(k - 1).is_some_and(|end| *end + quiet <= *at);
        // A second fault while a node is stale is one fault on a cluster that still has a
        // working majority: measured the same way.
        let second = what.contains(WHILE_STALE);
        // A fault cut short by a second one at once is not measured alone.
        let cut_short = faults
            .get(k + 1)
            .is_some_and(|(_, next)| next.contains(WHILE_STALE));
        if what.contains(" and ") || !(after_previous || second) || cut_short {
            continue;
        }
        let next = faults.get(k + 1).map_or(until, |(next, _)| *next);
        let window_end = (*at + cause).min(next).min(until);
        // The answers around the window: the gaps between them that reach into it.
        let first = answered.partition_point(|a| a < at).saturating_sub(1);
        let last = answered.partition_point(|a| *a <= window_end);
        let stall = answered[first..(last + 1).min(answered.len())]
            .windows(2)
            .map(|pair| pair[1].min(window_end).saturating_duration_since(pair[0]))
            .max()
            .unwrap_or(window_end.saturating_duration_since(*at));
        found.push(OneFault {
            what: what.clone(),
            stall_ms: stall.as_secs_f64() * 1e3,
        });
    }
    found
}

/// The longest stall after faults on one node alone, by kind of fault.
fn print_after_one_fault(after: &[OneFault]) {
    if after.is_empty() {
        return;
    }
    let mut kinds: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for one in after {
        // "kill leader 2" -> "kill leader"; "pause leader 1 while stale: 3" -> "pause leader
        // while stale"
        let mut kind: Vec<&str> = one.what.split(' ').take(2).collect();
        if one.what.contains(WHILE_STALE) {
            kind.push("while stale");
        }
        kinds.entry(kind.join(" ")).or_default().push(one.stall_ms);
    }
    engine::outln!(
        "{:>28} {:>6} {:>15} {:>15}",
        "one fault",
        "count",
        "stall_p50_ms",
        "stall_max_ms"
    );
    for (kind, mut stalls) in kinds {
        stalls.sort_by(f64::total_cmp);
        engine::outln!(
            "{:>28} {:>6} {:>15.0} {:>15.0}",
            kind,
            stalls.len(),
            stalls[stalls.len() / 2],
            stalls[stalls.len() - 1]
        );
    }
}

/// Each stall of at least [`STALL_REPORTED_MS`], with the faults that began up to
/// [`STALL_CAUSE_MS`] before it or during it.
fn print_stalls(stalls: &[(Instant, Instant)], faults: &[(Instant, String)], started: Instant) {
    if stalls.is_empty() {
        return;
    }
    engine::outln!("{:>10} {:>9}  faults before and during", "at_s", "stall_ms");
    let cause = Duration::from_millis(STALL_CAUSE_MS);
    for &(begin, end) in stalls {
        let during: Vec<&str> = faults
            .iter()
            .filter(|(at, _)| *at + cause >= begin && *at <= end)
            .map(|(_, what)| what.as_str())
            .collect();
        engine::outln!(
            "{:>10.1} {:>9.0}  {}",
            (begin - started).as_secs_f64(),
            (end - begin).as_secs_f64() * 1e3,
            during.join(", ")
        );
    }
}

/// The slowest rejoins and the fault each came back from, and the rejoins after a fault that
/// struck one node alone.
fn print_slowest_rejoins(rejoins: &[Rejoin], single_p99: f64, single_max: f64) {
    if rejoins.is_empty() {
        return;
    }
    engine::outln!(
        "after a fault on one node: rejoin p99 {single_p99:.0} ms, max {single_max:.0} ms"
    );
    let mut slowest = rejoins.to_vec();
    slowest.sort_by_key(|r| std::cmp::Reverse(r.took));
    engine::outln!("{:>10} {:>5}  fault", "rejoin_ms", "node");
    for r in slowest.iter().take(SLOWEST_REJOINS_SHOWN) {
        let ms = r.took.as_secs_f64() * 1e3;
        let then = if r.disturbed {
            " (another fault began before it rejoined)"
        } else {
            ""
        };
        engine::outln!("{ms:>10.0} {:>5}  {}{then}", r.node, r.fault);
    }
    if let Some(r) = slowest.first() {
        eprintln!(
            "the slowest rejoin, node {} after {}, as the status polls saw it:",
            r.node, r.fault
        );
        for line in &r.timeline {
            eprintln!("  {line}");
        }
    }
}

/// Rejoins listed after a run, slowest first.
pub const SLOWEST_REJOINS_SHOWN: usize = 5;

fn between(rng: &mut Rng, (low, high): (u64, u64)) -> u64 {
    low + rng.below(high - low + 1)
}

/// Pauses node `id` (SIGSTOP) for a while, when it runs and is not paused already.
async fn pause(
    rng: &mut Rng,
    (id, role): (u8, &str),
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) {
    if !processes.borrow().up(id) || processes.borrow().paused.contains(&id) {
        return;
    }
    findings.borrow_mut().fault(format!("pause {role} {id}"));
    processes.borrow_mut().pause(id);
    findings.borrow_mut().pauses += 1;
    let pause = between(rng, PAUSE_MS);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    processes.borrow_mut().resume(id);
    findings.borrow_mut().back(id);
    findings.borrow_mut().fault_ends.push(Instant::now());
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
            let role = if leader == Some(id) {
                "leader"
            } else {
                "follower"
            };
            return pause(rng, (id, role), processes, findings).await;
        }
    };
    let roles: Vec<String> = victims
        .iter()
        .map(|&id| {
            let role = if leader == Some(id) {
                "leader"
            } else {
                "follower"
            };
            format!("{role} {id}")
        })
        .collect();
    let what = format!("kill {}", roles.join(" and "));
    findings.borrow_mut().fault(what);
    for &id in &victims {
        if processes.borrow().up(id) {
            processes.borrow_mut().kill(id);
            findings.borrow_mut().kills += 1;
        }
    }
    let down = between(rng, DOWN_MS);
    tokio::time::sleep(Duration::from_millis(down)).await;
    for &id in &victims {
        if processes.borrow().up(id) {
            continue;
        }
        if processes.borrow_mut().start(id).is_err() {
            findings
                .borrow_mut()
                .violations
                .push(format!("node {id} could not be restarted"));
        } else {
            findings.borrow_mut().back(id);
        }
    }
    findings.borrow_mut().fault_ends.push(Instant::now());
    if let [stale] = victims[..]
        && leader != Some(stale)
        && rng.chance(1, SECOND_FAULT_ONE_IN)
    {
        second_fault(rng, config, processes, findings, stale).await;
    }
}

/// One follower kill in this many is followed at once by a second fault (see
/// [`second_fault`]).
pub const SECOND_FAULT_ONE_IN: u64 = 2;

/// A second fault while node `stale` has just restarted and not caught up yet: the leader is
/// killed or paused, which leaves the stale node and the other follower, a majority that
/// must elect a leader and answer again.
async fn second_fault(
    rng: &mut Rng,
    config: &ClientConfig,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
    stale: u8,
) {
    let Some(leader) = leader_of(&statuses(config).await).filter(|&l| l != stale) else {
        return;
    };
    if !findings.borrow().rejoining.contains_key(&stale) || !processes.borrow().up(leader) {
        return;
    }
    let pause = rng.chance(1, 2);
    let what = format!(
        "{} leader {leader} {WHILE_STALE} {stale}",
        if pause { "pause" } else { "kill" }
    );
    findings.borrow_mut().fault(what);
    if pause {
        processes.borrow_mut().pause(leader);
        findings.borrow_mut().pauses += 1;
        tokio::time::sleep(Duration::from_millis(between(rng, PAUSE_MS))).await;
        processes.borrow_mut().resume(leader);
        findings.borrow_mut().back(leader);
    } else {
        processes.borrow_mut().kill(leader);
        findings.borrow_mut().kills += 1;
        tokio::time::sleep(Duration::from_millis(between(rng, DOWN_MS))).await;
        match processes.borrow_mut().start(leader) {
            Ok(()) => findings.borrow_mut().back(leader),
            Err(_) => findings
                .borrow_mut()
                .violations
                .push(format!("node {leader} could not be restarted")),
        }
    }
    findings.borrow_mut().fault_ends.push(Instant::now());
}

/// How a second fault's name says that it struck while another node was stale.
const WHILE_STALE: &str = "while stale:";
