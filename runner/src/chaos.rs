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

use crate::cluster_file::ClusterFile;
use anyhow::Context;
use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use engine::client::{Client, ClientConfig, node_status};
use engine::node::local::free_loopback_addresses;
use engine::rng::Rng;
use engine::{ClientId, EntryIndex, Outcome, RequestNumber};
use net::message::{NodeStatus, Role};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Accounts the chaos clients move money between.
pub const CHAOS_ACCOUNTS: u64 = 100;
/// Each account's opening balance.
pub const CHAOS_OPENING_BALANCE: u64 = 1_000_000;
/// Transfers per request.
pub const CHAOS_TRANSFERS_PER_REQUEST: usize = 8;
/// Least and most time between two faults, in milliseconds.
pub const FAULT_INTERVAL_MS: (u64, u64) = (300, 2_500);
/// Least and most time a killed node stays down, in milliseconds.
pub const DOWN_MS: (u64, u64) = (50, 2_000);
/// Least and most time a paused node stays stopped, in milliseconds (the election timeout is
/// 150-300 ms: a pause always outlasts it).
pub const PAUSE_MS: (u64, u64) = (400, 2_000);
/// Time the healed cluster gets for the clients to finish and the nodes to converge.
pub const SETTLE_SECS: u64 = 60;
/// Time one status query may take.
pub const STATUS_TIMEOUT_MS: u64 = 300;
/// Time between two polls of every node's status (leaders per term, divergence).
pub const STATUS_POLL_MS: u64 = 50;
/// The chaos cluster's id.
const CLUSTER_ID: u64 = 77;
/// The client that reads the final balances.
const CHECKER_CLIENT: ClientId = ClientId(1_000_000);

/// Options of `runner chaos`.
#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Seconds of faults.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Writes `{"acknowledged": A, "kills": K, "violations": V, "unknown": U, ...}` here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where the run directory goes (default /dev/shm).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Seed of the fault schedule and the workload (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    clients: u64,
    /// Keeps the run directory (node logs, data) instead of removing it.
    #[arg(long)]
    keep: bool,
}

/// The three node processes.
struct Processes {
    exe: PathBuf,
    cluster_file: PathBuf,
    dir: PathBuf,
    children: BTreeMap<u8, Child>,
    paused: BTreeSet<u8>,
    starts: BTreeMap<u8, usize>,
}

impl Processes {
    fn start(&mut self, id: u8) -> anyhow::Result<()> {
        let start = self.starts.entry(id).or_default();
        *start += 1;
        let log = std::fs::File::create(self.dir.join(format!("node{id}.{start}.log")))?;
        let child = Command::new(&self.exe)
            .args(["node", "--cluster"])
            .arg(&self.cluster_file)
            .args(["--id", &id.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting runner node")?;
        self.children.insert(id, child);
        Ok(())
    }

    fn kill(&mut self, id: u8) {
        if let Some(mut child) = self.children.remove(&id) {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused.remove(&id);
    }

    /// Sends `signal` to node `id`'s process. std has no portable way to stop and continue a
    /// child process, hence kill(2).
    #[allow(unsafe_code)]
    fn signal(&mut self, id: u8, signal: libc::c_int) {
        if let Some(child) = self.children.get(&id) {
            let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
            // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is
            // our own child's, which we have not waited for, so it names no other process.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    fn pause(&mut self, id: u8) {
        self.signal(id, libc::SIGSTOP);
        self.paused.insert(id);
    }

    fn resume(&mut self, id: u8) {
        self.signal(id, libc::SIGCONT);
        self.paused.remove(&id);
    }

    fn up(&self, id: u8) -> bool {
        self.children.contains_key(&id)
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        let ids: Vec<u8> = self.children.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}

/// What the run counts and finds.
#[derive(Default)]
struct Findings {
    kills: u64,
    pauses: u64,
    violations: Vec<String>,
    leaders: BTreeMap<u64, u8>,
}

impl Findings {
    fn observe(&mut self, statuses: &[NodeStatus]) {
        for status in statuses {
            if status.role == Role::Leader {
                let term = status.term.0;
                match self.leaders.get(&term) {
                    Some(&other) if other != status.node.0 => self.violations.push(format!(
                        "I7: nodes {other} and {} both led term {term}",
                        status.node.0
                    )),
                    _ => {
                        self.leaders.insert(term, status.node.0);
                    }
                }
            }
            if let Some(divergence) = &status.divergence {
                self.violations
                    .push(format!("I2: node {} reports {divergence:?}", status.node.0));
            }
            if let Some(reason) = &status.halted {
                self.violations
                    .push(format!("node {} halted: {reason}", status.node.0));
            }
        }
        self.violations.dedup();
    }
}

/// Runs the chaos test; prints a table and writes the JSON summary.
pub fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let run_dir = crate::run_dir(args.dir.clone())?;
    let dir = run_dir.path().to_path_buf();
    eprintln!(
        "chaos: {} s of faults, seed {seed}, {} clients, in {}",
        args.duration,
        args.clients,
        dir.display()
    );
    let cluster_file = write_cluster_file(&dir)?;
    let config = ClusterFile::read(&cluster_file)?;
    let mut client_config = ClientConfig::new(
        CLUSTER_ID,
        config.nodes.iter().map(|n| n.client_address).collect(),
    );
    client_config.give_up_after = None;
    let mut processes = Processes {
        exe: std::env::current_exe()?,
        cluster_file,
        dir: dir.clone(),
        children: BTreeMap::new(),
        paused: BTreeSet::new(),
        starts: BTreeMap::new(),
    };
    for id in 1..=3 {
        processes.start(id)?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let processes = RefCell::new(processes);
    let findings = RefCell::new(Findings::default());
    let summary = runtime.block_on(tokio::task::LocalSet::new().run_until(chaos(
        &args,
        seed,
        &client_config,
        &processes,
        &findings,
    )))?;
    let mut processes = processes.into_inner();
    for id in 1..=3 {
        processes.kill(id);
    }
    let mut findings = findings.into_inner();
    compare_wals(&dir, &mut findings);
    print_summary(&summary, &findings);
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "acknowledged": summary.acknowledged,
            "kills": findings.kills,
            "pauses": findings.pauses,
            "violations": findings.violations.len(),
            "unknown": summary.unknown,
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
    if findings.violations.is_empty() && summary.unknown == 0 {
        Ok(())
    } else {
        anyhow::bail!(
            "{} violations, {} unknown outcomes",
            findings.violations.len(),
            summary.unknown
        )
    }
}

struct Summary {
    acknowledged: u64,
    unknown: u64,
    seconds: f64,
}

fn write_cluster_file(dir: &Path) -> anyhow::Result<PathBuf> {
    let addresses = free_loopback_addresses(3)?;
    let mut text = format!("cluster_id = {CLUSTER_ID}\n");
    for a in &addresses {
        text += &format!(
            "[[nodes]]\nid = {}\npeer_address = \"{}\"\nclient_address = \"{}\"\ndata_dir = \"{}\"\n",
            a.id,
            a.peer_address,
            a.client_address,
            dir.join(format!("node{}", a.id)).display()
        );
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn statuses(config: &ClientConfig) -> Vec<NodeStatus> {
    let mut all = Vec::new();
    for address in &config.nodes {
        let timeout = Duration::from_millis(STATUS_TIMEOUT_MS);
        if let Ok(status) = node_status(config.cluster_id, *address, timeout).await {
            all.push(status);
        }
    }
    all
}

async fn chaos(
    args: &ChaosArgs,
    seed: u64,
    config: &ClientConfig,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let ledger = Rc::new(RefCell::new(open_accounts(config).await?));
    let acknowledged = Rc::new(Cell::new(0u64));
    let stop = Rc::new(Cell::new(false));
    let mut clients = Vec::new();
    for k in 0..args.clients {
        let (ledger, acknowledged, stop) = (ledger.clone(), acknowledged.clone(), stop.clone());
        let mut client = Client::new(config.clone(), ClientId(10 + k), RequestNumber(1));
        let mut rng = Rng::new(seed ^ (k + 1).wrapping_mul(0x9E37_79B9));
        clients.push(tokio::task::spawn_local(async move {
            while !stop.get() {
                let batch = transfers(&mut rng);
                let outcomes = client
                    .submit::<Bank>(&batch)
                    .await
                    .map_err(|e| format!("client {}: a request failed: {e}", client.id().0))?;
                ledger.borrow_mut().record(&batch, &outcomes);
                acknowledged.set(acknowledged.get() + 1);
            }
            Ok::<(), String>(())
        }));
    }
    let watching = Rc::new(Cell::new(true));
    let watcher = {
        let (config, watching) = (config.clone(), watching.clone());
        async move {
            while watching.get() {
                let all = statuses(&config).await;
                findings.borrow_mut().observe(&all);
                tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
            }
        }
    };
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
        heal(processes)?;
        eprintln!("healed; letting the clients finish");
        stop.set(true);
        let settle = Instant::now() + Duration::from_secs(SETTLE_SECS);
        let mut unknown = 0;
        for client in clients {
            match tokio::time::timeout_at(settle.into(), client).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(failure))) => findings.borrow_mut().violations.push(failure),
                Ok(Err(panic)) => findings
                    .borrow_mut()
                    .violations
                    .push(format!("a client panicked: {panic}")),
                Err(_) => unknown += 1,
            }
        }
        if unknown > 0 {
            findings.borrow_mut().violations.push(format!(
                "I6: {unknown} requests without an outcome {SETTLE_SECS} s after healing"
            ));
        }
        converge(config, findings).await;
        watching.set(false);
        let expected = ledger.borrow().accounts.clone();
        check_accounts(config, &expected, findings).await;
        Ok::<u64, anyhow::Error>(unknown)
    };
    let (unknown, ()) = futures::join!(faults, watcher);
    Ok(Summary {
        acknowledged: acknowledged.get(),
        unknown: unknown?,
        seconds: started.elapsed().as_secs_f64(),
    })
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
    let all = statuses(config).await;
    let leader = all
        .iter()
        .find(|s| s.role == Role::Leader)
        .map(|s| s.node.0);
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

/// Every node running and none paused.
fn heal(processes: &RefCell<Processes>) -> anyhow::Result<()> {
    let mut processes = processes.borrow_mut();
    for id in 1..=3 {
        if !processes.up(id) {
            processes.start(id)?;
        }
        if processes.paused.contains(&id) {
            processes.resume(id);
        }
    }
    Ok(())
}

/// Waits until the three nodes applied everything committed with one state hash (I2).
async fn converge(config: &ClientConfig, findings: &RefCell<Findings>) {
    let deadline = Instant::now() + Duration::from_secs(SETTLE_SECS);
    loop {
        let all = statuses(config).await;
        let converged = all.len() == 3
            && all.iter().all(|s| {
                s.applied_index == all[0].applied_index
                    && s.state_hash == all[0].state_hash
                    && s.applied_index >= s.commit_index
            });
        if converged {
            findings.borrow_mut().observe(&all);
            return;
        }
        if Instant::now() > deadline {
            findings.borrow_mut().violations.push(format!(
                "I2: the nodes did not converge {SETTLE_SECS} s after healing: {all:?}"
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The clients' model of the accounts: balance and version, from acknowledged outcomes only.
struct Ledger {
    accounts: BTreeMap<u64, (u64, u64)>,
}

impl Ledger {
    fn record(&mut self, batch: &[BankCommand], outcomes: &[Outcome<BankOutput, bank::BankError>]) {
        for (command, outcome) in batch.iter().zip(outcomes) {
            if let (BankCommand::Transfer { from, to, amount }, Outcome::Done(_)) =
                (command, outcome)
            {
                let debit = self.accounts.get_mut(&from.0).expect("a chaos account");
                debit.0 -= amount;
                debit.1 += 1;
                let credit = self.accounts.get_mut(&to.0).expect("a chaos account");
                credit.0 += amount;
                credit.1 += 1;
            }
        }
    }
}

async fn open_accounts(config: &ClientConfig) -> anyhow::Result<Ledger> {
    let mut client = Client::new(config.clone(), ClientId(1), RequestNumber(1));
    let opens: Vec<BankCommand> = (0..CHAOS_ACCOUNTS)
        .map(|n| BankCommand::Open {
            id: account_id(n),
            balance: CHAOS_OPENING_BALANCE,
            flags: 0,
        })
        .collect();
    let outcomes = client.submit::<Bank>(&opens).await?;
    anyhow::ensure!(
        outcomes.iter().all(|o| matches!(o, Outcome::Done(_))),
        "opening the accounts failed: {outcomes:?}"
    );
    Ok(Ledger {
        accounts: (0..CHAOS_ACCOUNTS)
            .map(|n| (account_id(n).0, (CHAOS_OPENING_BALANCE, 1)))
            .collect(),
    })
}

fn transfers(rng: &mut Rng) -> Vec<BankCommand> {
    (0..CHAOS_TRANSFERS_PER_REQUEST)
        .map(|_| {
            let from = rng.below(CHAOS_ACCOUNTS);
            let to = (from + 1 + rng.below(CHAOS_ACCOUNTS - 1)) % CHAOS_ACCOUNTS;
            BankCommand::Transfer {
                from: account_id(from),
                to: account_id(to),
                amount: 1 + rng.below(50_000),
            }
        })
        .collect()
}

/// I1, I3, I5: reads every account and the audit through the log and compares them with
/// the ledger.
async fn check_accounts(
    config: &ClientConfig,
    expected: &BTreeMap<u64, (u64, u64)>,
    findings: &RefCell<Findings>,
) {
    let mut client = Client::new(config.clone(), CHECKER_CLIENT, RequestNumber(1));
    let mut reads: Vec<BankCommand> = (0..CHAOS_ACCOUNTS)
        .map(|n| BankCommand::Get { id: account_id(n) })
        .collect();
    reads.push(BankCommand::Audit);
    let answers = match tokio::time::timeout(
        Duration::from_secs(SETTLE_SECS),
        client.submit::<Bank>(&reads),
    )
    .await
    {
        Ok(Ok(answers)) => answers,
        Ok(Err(error)) => {
            findings
                .borrow_mut()
                .violations
                .push(format!("the final read failed: {error}"));
            return;
        }
        Err(_) => {
            findings
                .borrow_mut()
                .violations
                .push("I6: the final read got no answer".into());
            return;
        }
    };
    let mut findings = findings.borrow_mut();
    for (n, answer) in answers[..CHAOS_ACCOUNTS as usize].iter().enumerate() {
        let expected = expected[&account_id(n as u64).0];
        let actual = match answer {
            Outcome::Done(BankOutput::Account(account)) => Some((account.balance, account.version)),
            Outcome::Done(_) | Outcome::Failed(_) | Outcome::Invalid => None,
        };
        if actual != Some(expected) {
            findings.violations.push(format!(
                "I1/I5: account {n} is {answer:?}, acknowledged outcomes give (balance, version) {expected:?}"
            ));
        }
    }
    let total = u128::from(CHAOS_ACCOUNTS) * u128::from(CHAOS_OPENING_BALANCE);
    match answers.last() {
        Some(Outcome::Done(BankOutput::Audit { accounts, total: t }))
            if *accounts == CHAOS_ACCOUNTS && *t == total => {}
        other => findings.violations.push(format!(
            "I3: the audit gives {other:?}, expected {CHAOS_ACCOUNTS} accounts holding {total}"
        )),
    }
}

/// I4: the nodes' WALs hold the same entry at every index they all hold.
fn compare_wals(dir: &Path, findings: &mut Findings) {
    let mut wals = Vec::new();
    for id in 1..=3 {
        let path = dir
            .join(format!("node{id}"))
            .join(engine::node::storage::WAL_DIR);
        match engine::wal::Wal::open(&path) {
            Ok((wal, _)) => wals.push((id, wal)),
            Err(error) => findings
                .violations
                .push(format!("node {id}: its WAL does not open: {error}")),
        }
    }
    let (Some(first), Some(last)) = (
        wals.iter().map(|(_, w)| w.first_index()).max(),
        wals.iter().map(|(_, w)| w.last_index()).min(),
    ) else {
        return;
    };
    for index in first.0..=last.0 {
        let hashes: Vec<_> = wals
            .iter()
            .filter_map(|(_, w)| w.hash_at(EntryIndex(index)))
            .collect();
        if hashes.iter().any(|h| *h != hashes[0]) {
            findings
                .violations
                .push(format!("I4: the WALs differ at entry {index}"));
            return;
        }
    }
}

fn print_summary(summary: &Summary, findings: &Findings) {
    println!(
        "{:>8} {:>13} {:>6} {:>7} {:>6} {:>11} {:>8}",
        "seconds", "acknowledged", "kills", "pauses", "terms", "violations", "unknown"
    );
    println!(
        "{:>8.0} {:>13} {:>6} {:>7} {:>6} {:>11} {:>8}",
        summary.seconds,
        summary.acknowledged,
        findings.kills,
        findings.pauses,
        findings.leaders.len(),
        findings.violations.len(),
        summary.unknown
    );
    for violation in &findings.violations {
        println!("violation: {violation}");
    }
}
