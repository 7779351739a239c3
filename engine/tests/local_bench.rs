//! `local` and `bench --mode` of `engine::cli`, run in this process with the tests' ledger and
//! a benchmark workload of moves: three nodes with both modes alternated, every figure of the
//! report taken from real runs, the verdict's exit code, and `--mode` without the operator's
//! credential refused before anything is sent.

#![cfg(feature = "cli")]

mod common;

use clap::{Args, FromArgMatches};
use common::{Command, Ledger, Refused};
use engine::Outcome;
use engine::cli::{BenchArgs, BenchWorkload, Exit};
use engine::node::local::{LocalCluster, free_loopback_addresses};
use engine::node::{ClusterFile, NodeEntry};
use engine::rng::Rng;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;

/// Accounts the prefill sets.
const ACCOUNTS: u32 = 16;
/// Each account's balance after the prefill.
const BALANCE: i64 = 1_000;

/// Moves of small amounts between distinct accounts; its check is the ledger's invariant, the
/// total the prefill set (or, when `broken`, a total no run can give).
#[derive(Default)]
struct Moves {
    broken: bool,
}

/// What the check of [`Moves`] finds: the outcomes of the final read, not the total expected.
#[derive(Debug, thiserror::Error)]
#[error("the total is {outcomes}, not {expected}")]
struct WrongTotal {
    outcomes: String,
    expected: i64,
}

impl BenchWorkload for Moves {
    type H = Ledger;
    type Error = WrongTotal;

    fn prefill(&mut self) -> Vec<Vec<Command>> {
        let set = |account| Command::Set {
            account,
            balance: BALANCE,
        };
        vec![(0..ACCOUNTS).map(set).collect()]
    }

    fn next_request(&mut self, _client: u32, rng: &mut Rng, commands: u32) -> Vec<Command> {
        let accounts = u64::from(ACCOUNTS);
        let mut next = || {
            let from = rng.below(accounts);
            let to = (from + 1 + rng.below(accounts - 1)) % accounts;
            let amount = 1 + rng.below(5) as i64;
            let (from, to) = (from as u32, to as u32);
            Command::Move { from, to, amount }
        };
        (0..commands).map(|_| next()).collect()
    }

    fn final_request(&mut self) -> Vec<Command> {
        vec![Command::Total]
    }

    fn check(&self, outcomes: &[Outcome<i64, Refused>]) -> Result<(), WrongTotal> {
        let expected = match self.broken {
            true => -1,
            false => i64::from(ACCOUNTS) * BALANCE,
        };
        match outcomes {
            [Outcome::Done(total)] if *total == expected => Ok(()),
            other => Err(WrongTotal {
                outcomes: format!("{other:?}"),
                expected,
            }),
        }
    }
}

/// `line` parsed as the options of the command `name`, as a binary's command line parses them.
fn parse<A: Args + FromArgMatches>(name: &str, line: &[&str]) -> A {
    let command = A::augment_args(clap::Command::new(name.to_string()));
    let line = std::iter::once(name).chain(line.iter().copied());
    A::from_arg_matches(&command.try_get_matches_from(line).unwrap()).unwrap()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs `local` with `options`, its data under `data` in a fresh directory and its JSON
/// report in a file beside: the directory, what `local` returned and the report.
fn run_local(options: &[&str], workload: Moves) -> (TempDir, anyhow::Result<()>, Value) {
    let base = tempfile::tempdir().unwrap();
    let (data, json) = (base.path().join("data"), base.path().join("local.json"));
    let mut line = vec!["--dir", text(&data), "--warmup", "0", "--json", text(&json)];
    line.extend_from_slice(options);
    let result = engine::cli::local(parse("local", &line), || Ledger, workload);
    let report = read_json(&json);
    (base, result, report)
}

/// The modes of the report's runs, in the order run.
fn modes(report: &Value) -> Vec<String> {
    let runs = report["runs"].as_array().unwrap();
    runs.iter()
        .map(|run| run["mode"].as_str().unwrap().to_string())
        .collect()
}

/// A run's leader counts: commands simulated, executed, reused and verified.
fn leader_commands(run: &Value) -> [u64; 4] {
    let counts = run["stages"]["leader_commands"].as_array().unwrap();
    std::array::from_fn(|i| counts[i].as_u64().unwrap())
}

/// Asserts what a run of `mode` did on the leader: Verify executes every command again and
/// compares; Performance reuses every simulation.
fn assert_mode_worked(run: &Value, mode: &str) {
    let [simulated, executed, reused, verified] = leader_commands(run);
    assert!(simulated > 0, "{run}");
    match mode {
        "verify" => assert!(executed > 0 && verified > 0 && reused == 0, "{run}"),
        "performance" => assert!(reused > 0 && verified == 0, "{run}"),
        other => panic!("a run in mode {other}"),
    }
}

/// Proves `local` without `--mode` runs both modes on one cluster of three in-process nodes,
/// alternated run by run, and reports real figures: each run's answered commands (at least
/// `--commands`), the CPU per million commands, the nodes' stage averages (the leader
/// verifying in Verify and reusing in Performance, as switched by the operator's credential),
/// a summary per mode with the ratio, the workload's check passed and the replicas
/// converged; and that the data directory is removed after.
#[test]
fn local_alternates_both_modes_on_three_nodes() {
    let line = ["--commands", "300", "--batch", "8", "--inflight", "2"];
    let (base, result, report) = run_local(&line, Moves::default());
    result.unwrap();
    assert_eq!(
        modes(&report),
        ["verify", "performance", "verify", "performance"]
    );
    for run in report["runs"].as_array().unwrap() {
        assert!(run["commands"].as_u64().unwrap() >= 300, "{run}");
        assert!(run["cpu_s_per_million"].as_f64().unwrap() > 0.0, "{run}");
        let stages = &run["stages"];
        assert!(stages["entries"].as_u64().unwrap() > 0, "{run}");
        assert!(stages["quorum_us"].as_f64().unwrap() > 0.0, "{run}");
        assert!(stages["follower_wal_us"].as_f64().unwrap() > 0.0, "{run}");
        assert_mode_worked(run, run["mode"].as_str().unwrap());
    }
    let summary = report["summary"].as_array().unwrap();
    let summarized: Vec<(&str, u64)> = summary
        .iter()
        .map(|s| (s["mode"].as_str().unwrap(), s["runs"].as_u64().unwrap()))
        .collect();
    assert_eq!(summarized, [("verify", 2), ("performance", 2)]);
    assert!(report["performance_over_verify"].as_f64().unwrap() > 0.0);
    assert_eq!(report["prefill"]["commands"], u64::from(ACCOUNTS));
    assert_eq!(
        (report["errors"].as_u64(), report["unknown"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(report["check"], "ok");
    assert_eq!(report["replicas_converged"], true);
    let hashes = report["state_hashes"].as_array().unwrap();
    assert!(hashes.len() == 3 && hashes.iter().all(|h| *h == hashes[0]));
    assert_eq!(report["data_kept"], false);
    let left = std::fs::read_dir(base.path().join("data")).unwrap().count();
    assert_eq!(left, 0, "the run's data directory was not removed");
}

/// Proves `local --mode performance` runs that mode only, and that a failed check of the
/// workload fails the command with exit 1 (negative) after the report is written, and
/// `--keep` keeps the nodes' data where the report says.
#[test]
fn local_with_one_mode_fails_on_a_failed_check() {
    let line = [
        "--mode",
        "performance",
        "--runs",
        "1",
        "--commands",
        "100",
        "--batch",
        "4",
    ];
    let line = [&line[..], &["--keep"]].concat();
    let (base, result, report) = run_local(&line, Moves { broken: true });
    let error = result.unwrap_err();
    assert_eq!(Exit::of(&error), Exit::Negative, "{error:#}");
    assert!(
        format!("{error}").contains("the workload's check failed"),
        "{error:#}"
    );

    assert_eq!(modes(&report), ["performance"]);
    assert_mode_worked(&report["runs"][0], "performance");
    assert_eq!(report["check_passed"], false);
    assert_eq!(report["performance_over_verify"], Value::Null);
    let kept = Path::new(report["data_dir"].as_str().unwrap());
    let data = base.path().join("data");
    assert!(
        kept.starts_with(&data) && kept.join("node1").is_dir(),
        "{kept:?}"
    );
}

/// A cluster file for three nodes on free loopback ports, their data under `dir`.
fn cluster_file(dir: &Path) -> ClusterFile {
    let nodes = free_loopback_addresses(3).unwrap().into_iter().map(|a| {
        let data = dir.join(format!("node{}", a.id));
        NodeEntry::new(a.id.0, a.peer_address, a.client_address, data)
    });
    ClusterFile::new("the ledger's nodes share this", nodes.collect())
}

/// Proves `bench --mode` refuses a client file (which holds no operator credential) with a
/// usage error (exit 3) that names what to give, before sending anything: no node runs.
#[test]
fn bench_mode_with_a_client_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.toml");
    let file = cluster_file(dir.path()).client_file().unwrap();
    file.write(&path, false).unwrap();
    let args: BenchArgs = parse("bench", &["--cluster", text(&path), "--mode", "verify"]);
    let error = engine::cli::bench(args, Moves::default()).unwrap_err();
    assert_eq!(Exit::of(&error), Exit::Usage, "{error:#}");
    let message = format!("{error:#}");
    assert!(message.contains("operator credential"), "{message}");
    assert!(
        message.contains("give --cluster the cluster file"),
        "{message}"
    );
}

/// Proves `bench --mode performance` with the cluster file switches every node (they start
/// in Verify, the file's default) before the runs, and the runs table says so; a later
/// `bench` with the client file leaves the mode as the nodes have it.
#[test]
fn bench_mode_sets_every_node_before_the_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster_file(dir.path());
    let (cluster_path, client_path) = (dir.path().join("c.toml"), dir.path().join("k.toml"));
    file.write(&cluster_path).unwrap();
    file.client_file()
        .unwrap()
        .write(&client_path, false)
        .unwrap();
    let tune = |config: &mut engine::node::NodeConfig| {
        *config = file.node_config(config.id.0).unwrap();
    };
    let cluster = LocalCluster::start_at(dir.path(), file.addresses(), || Ledger, tune).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let leader = runtime.block_on(cluster.wait_for_leader(Duration::from_secs(10)));
    assert!(leader.is_some(), "no leader");

    let bench = |file: &Path, mode: &[&str]| {
        let json = dir.path().join("bench.json");
        let line = ["--cluster", text(file), "--commands", "100", "--runs", "1"];
        let line = [&line[..], &["--warmup", "0", "--json", text(&json)], mode].concat();
        engine::cli::bench(parse("bench", &line), Moves::default()).unwrap();
        read_json(&json)
    };
    let switched = bench(&cluster_path, &["--mode", "performance"]);
    assert_eq!(modes(&switched), ["performance"]);
    assert_mode_worked(&switched["runs"][0], "performance");
    let left = bench(&client_path, &[]);
    assert_eq!(modes(&left), ["performance"]);
    assert!(left["runs"][0]["cpu_s_per_million"].as_f64().unwrap() > 0.0);
}
