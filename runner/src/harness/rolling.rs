//! `runner rolling --from OLD`: a rolling upgrade with real processes. Three `runner node`
//! processes of an earlier build (`OLD`, a `runner` binary built from an earlier commit) run a
//! Bank workload; each node in turn is stopped as an operator would (SIGTERM) and started on
//! this build over the same data directory, the cluster healthy again before the next. Then
//! the load stops and every acknowledged outcome is checked (nothing lost, no client error,
//! the audit unchanged). Then this build's `upgrade` commits a newer handler version through
//! the log under a second load; every node must switch (one state hash), and the audit's total
//! must be unchanged. The nodes' WALs are compared at the end, as `runner chaos` does.

use crate::faults::{
    Addresses, CLUSTER_ID, FAULT_ACCOUNTS, FAULT_OPENING_BALANCE, FaultArgs, Findings, Processes,
    Workload, check_accounts, compare_wals, converge, leader_of, seed_or_clock, statuses, watch,
    write_cluster_files,
};
use bank::{Bank, BankCommand, BankOutput};
use engine::client::{Client, ClientConfig, node_versions};
use engine::{ClientId, Outcome, RequestNumber};
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Time a node has to rejoin a healthy cluster after its restart on the new build.
pub const REJOIN_WAIT_S: u64 = 60;
/// The client of the load after the handler upgrade.
const AFTER_CLIENT: ClientId = ClientId(2_000_000);

/// Options of `runner rolling`.
#[derive(clap::Args, Debug)]
pub struct RollingArgs {
    /// The build the cluster starts on: a `runner` binary of an earlier commit.
    #[arg(long)]
    from: PathBuf,
    /// The build it is upgraded to (default: this binary).
    #[arg(long)]
    to: Option<PathBuf>,
    /// Seconds of load before the first upgrade and after each.
    #[arg(long, default_value_t = 3)]
    pause: u64,
    /// The handler version to commit once every node runs the new build (0: none).
    #[arg(long, default_value_t = bank::VERSION_TRANSFER_FEE)]
    handler_version: u32,
    #[command(flatten)]
    common: FaultArgs,
}

/// What the run showed.
#[derive(Default)]
struct Report {
    acknowledged: u64,
    /// Requests answered after the handler upgrade.
    after_upgrade: u64,
    /// Each node's restart on the new build: seconds until the cluster was healthy again.
    rejoined_s: Vec<f64>,
    versions: Vec<u32>,
    violations: Vec<String>,
}

/// Runs the rolling upgrade; prints what happened and writes the JSON summary.
pub fn run(args: RollingArgs) -> anyhow::Result<()> {
    if !args.common.wal_io.is_auto() {
        anyhow::bail!(
            "--wal-io cannot be used with rolling: a build from before the setting refuses a \
             cluster file that names it"
        );
    }
    let seed = seed_or_clock(args.common.seed);
    let to = match &args.to {
        Some(path) => path.clone(),
        None => runner::sibling_binary(runner::PRODUCT_BINARY)?,
    };
    let run_dir = runner::run_dir(args.common.dir.clone())?;
    eprintln!(
        "rolling upgrade in {}, seed {seed}",
        run_dir.path().display()
    );
    let report = rolled(&args, &to, seed, run_dir.path())?;
    print(&report);
    if let Some(path) = &args.common.json {
        let json = serde_json::json!({
            "from": args.from.display().to_string(),
            "to": to.display().to_string(),
            "seed": seed,
            "acknowledged": report.acknowledged,
            "acknowledged_after_handler_upgrade": report.after_upgrade,
            "rejoined_s": report.rejoined_s,
            "handler_versions": report.versions,
            "violations": report.violations,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")?;
    }
    if !report.violations.is_empty() {
        eprintln!("kept {}", run_dir.keep().display());
    }
    anyhow::ensure!(
        report.violations.is_empty(),
        "{} violations",
        report.violations.len()
    );
    Ok(())
}

fn print(report: &Report) {
    engine::outln!(
        "acknowledged {} requests through the rolling upgrade, {} after the handler upgrade",
        report.acknowledged,
        report.after_upgrade
    );
    for (n, seconds) in report.rejoined_s.iter().enumerate() {
        engine::outln!(
            "node {}: on the new build, cluster healthy again after {seconds:.2} s",
            n + 1
        );
    }
    engine::outln!("handler versions in force: {:?}", report.versions);
    for violation in &report.violations {
        engine::outln!("violation: {violation}");
    }
    if report.violations.is_empty() {
        engine::outln!("no violation");
    }
}

/// The cluster, the watch, the upgrade and the checks.
fn rolled(args: &RollingArgs, to: &Path, seed: u64, dir: &Path) -> anyhow::Result<Report> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let addresses = Addresses::free()?;
        let files = write_cluster_files(dir, &addresses, None, args.common.wal_io)?;
        let cluster_file = files[&1].clone();
        let config = args.common.client_config(&addresses);
        let processes = RefCell::new(Processes::start_all_from(dir, files, Some(&args.from))?);
        let findings = RefCell::new(Findings::default());
        let watching = Cell::new(true);
        let (report, ()) = futures::join!(
            async {
                let report = upgrade(
                    args,
                    to,
                    seed,
                    &config,
                    &cluster_file,
                    &processes,
                    &findings,
                );
                let report = report.await;
                watching.set(false);
                report
            },
            watch(&config, &findings, &watching)
        );
        let mut report = report?;
        report.violations.extend(processes.borrow_mut().crashed());
        processes.borrow_mut().kill_all();
        let mut findings = findings.into_inner();
        compare_wals(dir, &mut findings);
        report.violations.append(&mut findings.violations);
        Ok(report)
    })
}

/// The load through each node's restart on the new build, the checks, the handler upgrade.
async fn upgrade(
    args: &RollingArgs,
    to: &Path,
    seed: u64,
    config: &ClientConfig,
    cluster_file: &Path,
    processes: &RefCell<Processes>,
    findings: &RefCell<Findings>,
) -> anyhow::Result<Report> {
    let mut report = Report::default();
    let pause = Duration::from_secs(args.pause);
    healthy(config).await?;
    let mut workload = Workload::start(config, args.common.clients, seed).await?;
    tokio::time::sleep(pause).await;
    for id in 1..=3 {
        processes.borrow_mut().stop(id);
        processes.borrow_mut().use_binary(id, to);
        let restarted = Instant::now();
        processes.borrow_mut().start(id)?;
        healthy(config).await?;
        report.rejoined_s.push(restarted.elapsed().as_secs_f64());
        tokio::time::sleep(pause).await;
    }
    let (expected, _) = workload.finish(findings).await;
    report.acknowledged = workload.acknowledged.get();
    converge(config, findings).await;
    check_accounts(config, &expected, findings).await;
    if args.handler_version > 0 {
        handler_upgrade(args, to, config, cluster_file, &mut report).await?;
        converge(config, findings).await;
    }
    Ok(report)
}

/// Commits the handler version with the new build's `upgrade` while a client sends
/// transfers, then checks every node has it in force and the audit's total is unchanged.
async fn handler_upgrade(
    args: &RollingArgs,
    to: &Path,
    config: &ClientConfig,
    cluster_file: &Path,
    report: &mut Report,
) -> anyhow::Result<()> {
    let version = args.handler_version.to_string();
    let mut command = std::process::Command::new(to);
    command.args(["upgrade", "--handler-version", &version, "--cluster"]);
    command.arg(cluster_file);
    let running = tokio::task::spawn_blocking(move || command.output());
    let mut client = Client::new(config.clone(), AFTER_CLIENT, RequestNumber(1));
    let load = async {
        let ends = Instant::now() + Duration::from_secs(args.pause * 2);
        let mut answered = 0;
        while Instant::now() < ends {
            let transfer = bank_transfer(answered);
            match client.submit::<Bank>(&[transfer]).await {
                Ok(_) => answered += 1,
                Err(error) => return Err(format!("a request after the upgrade failed: {error}")),
            }
        }
        Ok(answered)
    };
    let (output, answered) = futures::join!(running, load);
    let output = output??;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        report.violations.push(format!("upgrade failed: {stderr}"));
    }
    match answered {
        Ok(answered) => report.after_upgrade = answered,
        Err(failure) => report.violations.push(failure),
    }
    for address in &config.nodes {
        let versions = node_versions(config, address, Duration::from_secs(2)).await;
        report.versions.push(versions.map_or(0, |v| v.in_force));
    }
    if report.versions.iter().any(|&v| v != args.handler_version) {
        report
            .violations
            .push(format!("versions in force {:?}", report.versions));
    }
    audit_unchanged(&mut client, report).await;
    Ok(())
}

/// A transfer of 1 between two of the workload's accounts.
fn bank_transfer(n: u64) -> BankCommand {
    let from = n % FAULT_ACCOUNTS;
    BankCommand::Transfer {
        from: bank::workload::account_id(from),
        to: bank::workload::account_id((from + 1) % FAULT_ACCOUNTS),
        amount: 1,
    }
}

/// The audit's total is the opening balances' (fees move money between accounts).
async fn audit_unchanged(client: &mut Client, report: &mut Report) {
    let expected = u128::from(FAULT_ACCOUNTS) * u128::from(FAULT_OPENING_BALANCE);
    match client
        .submit::<Bank>(&[BankCommand::Audit])
        .await
        .as_deref()
    {
        Ok([Outcome::Done(BankOutput::Audit { total, .. })]) if *total == expected => {}
        other => report.violations.push(format!(
            "the audit after the upgrade gave {other:?}, total {expected} expected"
        )),
    }
}

/// Waits until all three nodes answer and a leader is named.
async fn healthy(config: &ClientConfig) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(REJOIN_WAIT_S);
    while Instant::now() < deadline {
        let all = statuses(config).await;
        let caught_up = all
            .iter()
            .all(|s| s.applied_index >= all[0].commit_index.min(s.commit_index));
        if all.len() == 3 && leader_of(&all).is_some() && caught_up {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the cluster (id {CLUSTER_ID}) was not healthy within {REJOIN_WAIT_S} s")
}
