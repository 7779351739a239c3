//! The order book against its reference ([`crate::reference`]), packed into entries two ways,
//! in both modes on a three-node cluster, and as three processes of this example's binary
//! driven through its `client` command.

mod reference;

use crate::reference::Reference;
use engine::client::Client;
use engine::node::local::LocalCluster;
use engine::rng::Rng;
use engine::testing::check_determinism;
use engine::{ClientId, Mode, Outcome, RequestNumber, Sandbox};
use orderbook::book::{BookCommand, BookError, BookOutput, OrderBook};
use orderbook::workload::{BookWorkload, random_command};
use std::time::Duration;

/// Commands per request at most in the streams.
const REQUEST_COMMANDS_MAX: u64 = 16;

/// `count` random commands from `seed`, cut into requests of 1 to 16.
fn requests(seed: u64, count: usize) -> Vec<Vec<BookCommand>> {
    let mut rng = Rng::new(seed);
    let mut all = Vec::new();
    let mut made = 0;
    while made < count {
        let size = (1 + rng.below(REQUEST_COMMANDS_MAX) as usize).min(count - made);
        let request = (0..size)
            .map(|k| random_command(&mut rng, (made + k) as u64))
            .collect();
        all.push(request);
        made += size;
    }
    all
}

/// The reference's outcome of each command, in order.
fn expected(requests: &[Vec<BookCommand>]) -> Vec<Outcome<BookOutput, BookError>> {
    let mut reference = Reference::default();
    let outcomes = requests.iter().flatten().map(|c| match reference.run(c) {
        Ok(output) => Outcome::Done(output),
        Err(error) => Outcome::Failed(error),
    });
    outcomes.collect()
}

/// Proves the handler's outcome of every command of a 12,000-command stream equals the
/// reference book's, fills, cancels, refusals and reads alike.
#[test]
fn outcomes_match_the_reference_book() {
    let requests = requests(7, 12_000);
    let mut sandbox = Sandbox::new(OrderBook, 1 << 30);
    let mut outcomes = Vec::new();
    for request in &requests {
        outcomes.extend(sandbox.run(request).unwrap());
    }
    let expected = expected(&requests);
    let first_wrong = outcomes.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "the handler and the reference differ");
    assert_eq!(outcomes.len(), expected.len());
    let fills = expected
        .iter()
        .filter(
            |o| matches!(o, Outcome::Done(BookOutput::Placed { fills, .. }) if !fills.is_empty()),
        )
        .count();
    let refused = expected
        .iter()
        .filter(|o| matches!(o, Outcome::Failed(_)))
        .count();
    assert!(
        fills > 1_000 && refused > 100,
        "the stream trades and refuses: {fills} {refused}"
    );
}

/// Proves the book is deterministic as a cluster runs it: packed into entries of at most 16
/// and of at most 1,024 commands, in both modes, through a leader that simulates before
/// commit and a follower that executes, every outcome and state hash agree; the outcomes are
/// the reference book's, and another stream ends in another state.
#[test]
fn packing_and_modes_do_not_change_results_or_hash() {
    let requests = requests(11, 20_000);
    let checked = check_determinism(OrderBook, &requests, &[16, 1024])
        .unwrap_or_else(|difference| panic!("{difference}"));
    let outcomes: Vec<_> = checked.outcomes.into_iter().flatten().collect();
    assert!(
        outcomes == expected(&requests),
        "the book and the reference differ"
    );
    let other = check_determinism(OrderBook, &self::requests(12, 20_000), &[16]).unwrap();
    assert_ne!(
        checked.state_hash, other.state_hash,
        "another stream gives another state"
    );
}

/// Sends `requests` through one client; returns every outcome.
async fn send(
    client: &mut Client,
    requests: &[Vec<BookCommand>],
) -> Vec<Outcome<BookOutput, BookError>> {
    let mut outcomes = Vec::new();
    for request in requests {
        outcomes.extend(client.submit::<OrderBook>(request).await.unwrap());
    }
    outcomes
}

/// Proves a three-node cluster in Verify and in Performance mode answers every command as the
/// reference book does (so both modes answer alike), and its replicas converge.
#[test]
fn both_modes_on_three_nodes_answer_as_the_reference() {
    let requests = requests(13, 3_000);
    let expected = expected(&requests);
    for mode in [Mode::Verify, Mode::Performance] {
        let dir = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(dir.path(), 3, OrderBook, |c| c.mode = mode).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let leader = cluster.wait_for_leader(Duration::from_secs(20)).await;
            assert!(leader.is_some(), "{mode:?}: no leader");
            let mut client = Client::new(cluster.client_config(), ClientId(1), RequestNumber(1));
            let outcomes = send(&mut client, &requests).await;
            let first_wrong = outcomes.iter().zip(&expected).position(|(a, b)| a != b);
            assert_eq!(
                first_wrong, None,
                "{mode:?}: the cluster and the reference differ"
            );
            assert_eq!(outcomes.len(), expected.len());
            let statuses = cluster.statuses().await;
            let commit = statuses
                .iter()
                .flatten()
                .map(|s| s.commit_index)
                .max()
                .unwrap();
            let converged = cluster
                .wait_for_convergence(commit, Duration::from_secs(20))
                .await;
            assert!(
                converged.is_some(),
                "{mode:?}: the replicas did not converge"
            );
        });
    }
}

/// The package's node binary, which cargo builds for its tests.
fn example_binary() -> std::path::PathBuf {
    env!("CARGO_BIN_EXE_orderbook").into()
}

/// Node processes of the example's binary, killed when dropped.
struct Processes {
    binary: std::path::PathBuf,
    cluster: std::path::PathBuf,
    dir: std::path::PathBuf,
    children: std::collections::BTreeMap<u8, std::process::Child>,
}

impl Processes {
    fn start(&mut self, id: u8) {
        let log = std::fs::File::create(self.dir.join(format!("node{id}.log"))).unwrap();
        let child = std::process::Command::new(&self.binary)
            .args(["node", "--cluster", self.cluster.to_str().unwrap()])
            .args(["--id", &id.to_string()])
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.insert(id, child);
    }

    fn kill(&mut self, id: u8) {
        let mut child = self.children.remove(&id).expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Runs the binary's `status --json` with `extra` options; returns whether it exited 0
    /// (a healthy cluster) and its JSON.
    fn status(&self, extra: &[&str]) -> (bool, serde_json::Value) {
        let output = std::process::Command::new(&self.binary)
            .args([
                "status",
                "--cluster",
                self.cluster.to_str().unwrap(),
                "--json",
            ])
            .args(extra)
            .output()
            .unwrap();
        let json = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("status printed no JSON ({error}): {:?}", output));
        (output.status.success(), json)
    }

    /// Runs the binary's `mode MODE`; returns whether it exited 0.
    fn mode(&self, mode: &str) -> bool {
        std::process::Command::new(&self.binary)
            .args(["mode", "--cluster", self.cluster.to_str().unwrap(), mode])
            .status()
            .unwrap()
            .success()
    }

    /// Runs the binary's `client` with one request per line of `requests`; returns each
    /// request's outcomes as the command prints them.
    fn client(&self, requests: &[Vec<BookCommand>]) -> Vec<serde_json::Value> {
        run_client(&self.binary, &self.cluster, requests).expect("the client command failed")
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls every node's status until all three have applied the same entry with the same
/// state hash.
fn converged(config: &engine::client::ClientConfig) -> bool {
    converged_on(config, &[1, 2, 3])
}

/// A cluster file in a fresh directory and three `node` processes of the example's binary
/// started from it (the directory holds their data and logs: keep it while they run).
/// The cluster file's table of the node at `a`, its data under `dir`.
fn node_entry(a: &engine::node::NodeAddress, dir: &std::path::Path) -> engine::node::NodeEntry {
    let data_dir = dir.join(format!("node{}", a.id));
    engine::node::NodeEntry::new(
        a.id.0,
        a.peer_address.clone(),
        a.client_address.clone(),
        data_dir,
    )
}

fn three_node_processes() -> (tempfile::TempDir, engine::node::ClusterFile, Processes) {
    let binary = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let addresses = engine::node::local::free_loopback_addresses(3).unwrap();
    let nodes = addresses
        .iter()
        .map(|a| node_entry(a, dir.path()))
        .collect();
    let file = engine::node::ClusterFile::new("the order book's nodes share this", nodes);
    let cluster = dir.path().join("cluster.toml");
    file.write(&cluster).unwrap();
    let mut processes = Processes {
        binary,
        cluster,
        dir: dir.path().to_path_buf(),
        children: Default::default(),
    };
    for id in 1..=3 {
        processes.start(id);
    }
    (dir, file, processes)
}

/// Proves the example's own binary runs a cluster: three `node` processes from one cluster
/// file (written with `engine::node::ClusterFile`), driven by its `client` command (commands as
/// JSON on standard input, outcomes as JSON), one node killed (SIGKILL) and restarted between
/// batches; every outcome equals the reference book's, and the replicas converge.
#[test]
fn three_node_processes_driven_by_the_client_command() {
    let (_dir, file, mut processes) = three_node_processes();
    let requests = requests(17, 1_500);
    let expected: Vec<serde_json::Value> = expected(&requests)
        .iter()
        .map(engine::cli::outcome_json::<OrderBook>)
        .collect();
    let (first, rest) = requests.split_at(requests.len() / 3);
    let (second, third) = rest.split_at(rest.len() / 2);
    let mut answers = processes.client(first);
    processes.kill(1);
    answers.extend(processes.client(second));
    processes.start(1);
    answers.extend(processes.client(third));
    let first_wrong = answers.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "the cluster and the reference differ");
    assert_eq!(answers.len(), expected.len());
    assert!(
        converged(&file.client_config().unwrap()),
        "the replicas did not converge"
    );
}

/// Proves `status` tells a script whether the cluster is healthy: `--wait` returns 0 once
/// three fresh node processes have a leader that all follow; with one node killed (SIGKILL)
/// it exits 1 and its JSON names the unreachable node (the other two still lead and follow);
/// after a restart `--wait` returns 0 again.
#[test]
fn status_says_whether_the_cluster_is_healthy() {
    let (_dir, _file, mut processes) = three_node_processes();
    let (healthy, json) = processes.status(&["--wait", "60"]);
    assert!(healthy && json["healthy"] == true, "{json}");
    assert_eq!(json["problems"], serde_json::json!([]), "{json}");
    processes.kill(2);
    let (healthy, json) = processes.status(&[]);
    assert!(!healthy && json["healthy"] == false, "{json}");
    let problems = json["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p == "node 2 is unreachable"),
        "{json}"
    );
    assert_eq!(json["nodes"][1]["reachable"], false, "{json}");
    processes.start(2);
    let (healthy, json) = processes.status(&["--wait", "60"]);
    assert!(healthy, "{json}");
}

/// Proves `mode` switches every node and that the choice outlasts a restart: three node
/// processes of a cluster file that says Verify are set to Performance; each reports it in
/// `status`; node 1, killed (SIGKILL) and started again from the same file, still runs
/// Performance; setting Verify then switches them back.
#[test]
fn mode_switches_every_node_and_outlasts_a_restart() {
    let (_dir, _file, mut processes) = three_node_processes();
    let modes = |processes: &Processes| -> Vec<serde_json::Value> {
        let (healthy, json) = processes.status(&["--wait", "60"]);
        assert!(healthy, "{json}");
        let nodes = json["nodes"].as_array().unwrap();
        nodes.iter().map(|n| n["mode"].clone()).collect()
    };
    assert_eq!(modes(&processes), vec!["verify"; 3]);
    assert!(processes.mode("performance"), "mode performance");
    assert_eq!(modes(&processes), vec!["performance"; 3]);
    processes.kill(1);
    processes.start(1);
    assert_eq!(modes(&processes), vec!["performance"; 3], "after a restart");
    assert!(processes.mode("verify"), "mode verify");
    assert_eq!(modes(&processes), vec!["verify"; 3]);
}

/// Proves the example's `bench` command (the book's `BookBench` through `engine::cli::App`)
/// benchmarks three node processes of its binary: from its JSON, the prefill went in, the
/// run answered commands with no error and no unknown outcome, the book's final check
/// passed (positions sum to zero, the book is not crossed), and the three replicas
/// converged on one state hash, the one the nodes report afterwards.
#[test]
fn bench_command_against_three_node_processes() {
    let (dir, file, processes) = three_node_processes();
    let json = dir.path().join("bench.json");
    let status = std::process::Command::new(&processes.binary)
        .args(["bench", "--cluster", processes.cluster.to_str().unwrap()])
        .args(["--duration", "1", "--runs", "1", "--warmup", "0.2"])
        .args([
            "--batch",
            "32",
            "--inflight",
            "2",
            "--json",
            json.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    assert!(status.success(), "bench failed ({status}): {text}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["prefill"]["commands"], 80, "{text}");
    let run = &report["runs"][0];
    assert!(run["commands"].as_u64().unwrap() > 0, "{text}");
    assert!(run["commands_per_s"].as_f64().unwrap() > 0.0, "{text}");
    assert!(run["latency_ms"]["p50"].as_f64().unwrap() > 0.0, "{text}");
    assert_eq!(
        (&run["errors"], &run["unknown"]),
        (&0.into(), &0.into()),
        "{text}"
    );
    assert_eq!(report["check"], "ok", "{text}");
    assert_eq!(report["replicas_converged"], true, "{text}");
    let hashes = report["state_hashes"].as_array().unwrap();
    assert!(
        hashes.len() == 3 && hashes.iter().all(|h| h == &hashes[0]),
        "{text}"
    );
    let config = file.client_config().unwrap();
    let now = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(engine::client::node_status(
            &config,
            &config.nodes[0],
            Duration::from_secs(2),
        ))
        .unwrap();
    assert_eq!(
        hashes[0],
        now.state_hash.to_hex().as_str(),
        "the hash is the nodes'"
    );
}

/// Proves the deterministic simulator runs the order book (crashes, partitions, damaged disks,
/// leader changes) with no violation over its seeds, the book's invariants checked after every
/// entry (`book::check_invariants`).
#[test]
fn the_simulator_finds_no_violation() {
    for seed in 0..SIM_SEEDS {
        let report = engine::sim::run(BookWorkload, engine::sim::SimOptions::new(seed));
        assert!(report.committed > 0, "seed {seed} committed nothing");
        assert_eq!(report.violations, Vec::new(), "seed {seed}");
    }
}

/// Seeds [`the_simulator_finds_no_violation`] runs.
const SIM_SEEDS: u64 = 20;

/// Runs the binary's `client` for `requests` (one line each) against the cluster file
/// `cluster`; every request's outcomes as printed, or `None` when the command failed.
fn run_client(
    binary: &std::path::Path,
    cluster: &std::path::Path,
    requests: &[Vec<BookCommand>],
) -> Option<Vec<serde_json::Value>> {
    use std::io::Write;
    let mut child = std::process::Command::new(binary)
        // The stream refuses some orders on purpose: their outcomes are checked, not the
        // exit code (1 for a refused command without the flag).
        .args([
            "client",
            "--allow-refused",
            "--cluster",
            cluster.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for request in requests {
        writeln!(stdin, "{}", serde_json::to_string(request).unwrap()).unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    if !output.status.success() {
        return None;
    }
    let lines = String::from_utf8(output.stdout).unwrap();
    let mut answers = Vec::new();
    for line in lines.lines() {
        let outcomes: Vec<serde_json::Value> = serde_json::from_str(line).unwrap();
        answers.extend(outcomes);
    }
    Some(answers)
}

/// Load for a membership test: the `client` command over consecutive slices of `requests`
/// until `stop` is set (or the requests run out); every outcome, in order, and whether every
/// `client` run succeeded.
fn load_until(
    binary: std::path::PathBuf,
    cluster: std::path::PathBuf,
    requests: Vec<Vec<BookCommand>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(Vec<serde_json::Value>, usize, bool)> {
    std::thread::spawn(move || {
        let mut answers = Vec::new();
        let mut sent = 0;
        for slice in requests.chunks(50) {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            match run_client(&binary, &cluster, slice) {
                Some(more) => answers.extend(more),
                None => return (answers, sent, false),
            }
            sent += slice.len();
        }
        (answers, sent, true)
    })
}

/// A cluster of three node processes of the example's binary in a fresh directory, started
/// from a cluster file of three nodes (the first members), which is then rewritten to list
/// `count` nodes, as an operator does before adding nodes (not started).
fn cluster_of(count: usize) -> (tempfile::TempDir, engine::node::ClusterFile, Processes) {
    let binary = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let addresses = engine::node::local::free_loopback_addresses(count).unwrap();
    let nodes = addresses
        .iter()
        .map(|a| node_entry(a, dir.path()))
        .collect();
    let file = engine::node::ClusterFile::new("the order book's nodes share this", nodes);
    let mut first = file.clone();
    first.nodes.truncate(3);
    let cluster = dir.path().join("cluster.toml");
    first.write(&cluster).unwrap();
    let mut processes = Processes {
        binary,
        cluster,
        dir: dir.path().to_path_buf(),
        children: Default::default(),
    };
    for id in 1..=3 {
        processes.start(id);
    }
    let (healthy, json) = processes.status(&["--wait", "60"]);
    assert!(healthy, "{json}");
    file.write(&processes.cluster).unwrap();
    (dir, file, processes)
}

impl Processes {
    /// Starts node `id` to join the running cluster (`node --join`).
    fn join(&mut self, id: u8) {
        let log = std::fs::File::create(self.dir.join(format!("node{id}.log"))).unwrap();
        let child = std::process::Command::new(&self.binary)
            .args(["node", "--cluster", self.cluster.to_str().unwrap()])
            .args(["--id", &id.to_string(), "--join"])
            .stderr(log)
            .spawn()
            .unwrap();
        self.children.insert(id, child);
    }

    /// Runs the binary's `member ARGS...`; the members it reports after the change.
    fn member(&self, args: &[&str]) -> Vec<u64> {
        let output = std::process::Command::new(&self.binary)
            .arg("member")
            .arg(args[0])
            .args(["--cluster", self.cluster.to_str().unwrap()])
            .args(&args[1..])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "member {args:?}: {output:?}");
        let last = text.lines().last().unwrap_or_default();
        let list = last.rsplit_once("members now ").expect("the members").1;
        serde_json::from_str(list).unwrap()
    }
}

/// Polls the nodes at `addresses` until all have applied the same committed entry with the
/// same state hash.
fn converged_on(config: &engine::client::ClientConfig, ids: &[u8]) -> bool {
    let mut config = config.clone();
    config.nodes = ids
        .iter()
        .map(|&id| config.nodes[usize::from(id - 1)].clone())
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let mut statuses = Vec::new();
            for address in &config.nodes {
                let timeout = Duration::from_millis(500);
                if let Ok(s) = engine::client::node_status(&config, address, timeout).await {
                    statuses.push((s.applied_index, s.state_hash, s.commit_index));
                }
            }
            let same = statuses
                .windows(2)
                .all(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1);
            if statuses.len() == ids.len() && same && statuses[0].0 == statuses[0].2 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    })
}

/// Checks a membership test's load: every `client` run succeeded, at least one request went
/// through, and every outcome equals the reference book's for the requests sent.
fn load_was_right(
    load: std::thread::JoinHandle<(Vec<serde_json::Value>, usize, bool)>,
    requests: &[Vec<BookCommand>],
) {
    let (answers, sent, ok) = load.join().unwrap();
    assert!(ok, "a client run failed during the membership changes");
    assert!(sent > 0, "no load ran");
    let expected: Vec<serde_json::Value> = expected(&requests[..sent])
        .iter()
        .map(engine::cli::outcome_json::<OrderBook>)
        .collect();
    assert_eq!(answers.len(), expected.len(), "an outcome is missing");
    let first_wrong = answers.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "the cluster and the reference differ");
}

/// Proves a three-node cluster of processes grows to five and shrinks back to three under
/// load, through `member add` and `member remove`: nodes 4 and 5 start with `--join`, each
/// change is committed (and a new node caught up) before the next, and the load's every
/// outcome equals the reference book's (nothing acknowledged lost, no client error); the
/// three members left converge on one state hash.
#[test]
fn a_cluster_grows_to_five_and_shrinks_back_to_three_under_load() {
    let (_dir, file, mut processes) = cluster_of(5);
    let requests = requests(29, 400_000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = load_until(
        processes.binary.clone(),
        processes.cluster.clone(),
        requests.clone(),
        stop.clone(),
    );
    processes.join(4);
    processes.join(5);
    assert_eq!(processes.member(&["add", "--id", "4"]), [1, 2, 3, 4]);
    assert_eq!(processes.member(&["add", "--id", "5"]), [1, 2, 3, 4, 5]);
    assert_eq!(processes.member(&["remove", "--id", "4"]), [1, 2, 3, 5]);
    assert_eq!(processes.member(&["remove", "--id", "5"]), [1, 2, 3]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load_was_right(load, &requests);
    let config = file.client_config().unwrap();
    assert!(
        converged_on(&config, &[1, 2, 3]),
        "the members did not converge"
    );
}

/// Proves a dead machine is replaced by a fresh one with a new id and a new address under
/// load: node 2 is killed (SIGKILL) for good, node 4 starts empty with `--join`, and `member
/// replace --old 2 --new 4` adds it, waits until it caught up and removes node 2; the load's
/// every outcome equals the reference book's, and nodes 1, 3 and 4 converge.
#[test]
fn a_dead_machine_is_replaced_by_a_fresh_one_under_load() {
    let (_dir, file, mut processes) = cluster_of(4);
    let requests = requests(31, 400_000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = load_until(
        processes.binary.clone(),
        processes.cluster.clone(),
        requests.clone(),
        stop.clone(),
    );
    processes.kill(2);
    processes.join(4);
    let members = processes.member(&["replace", "--old", "2", "--new", "4"]);
    assert_eq!(members, [1, 3, 4]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load_was_right(load, &requests);
    let config = file.client_config().unwrap();
    assert!(
        converged_on(&config, &[1, 3, 4]),
        "the members did not converge"
    );
}

/// `GET /metrics` of the node at `address`: the Prometheus text, or `None` if it did not
/// answer 200.
fn scrape(address: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of the metric line `name` (no labels) in a scrape's text.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Proves a real node process serves Prometheus text at its `metrics_address` (the
/// cluster-file key): scraped before and after a load of requests through the `client`
/// command, its commit index, committed-entry count, WAL fsyncs and bytes and its apply
/// stage's histogram have risen, and it names its role; every series carries the handler's
/// label, `handler="orderbook"`.
#[test]
fn a_node_serves_metrics_and_its_commit_index_rises_under_load() {
    let binary = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let addresses = engine::node::local::free_loopback_addresses(4).unwrap();
    let metrics_address = addresses[3].peer_address.socket_addr().expect("numeric");
    let nodes = addresses[..3]
        .iter()
        .map(|a| engine::node::NodeEntry {
            metrics_address: (a.id.0 == 1).then_some(metrics_address),
            ..node_entry(a, dir.path())
        })
        .collect();
    let file = engine::node::ClusterFile::new("the order book's nodes share this", nodes);
    let cluster = dir.path().join("cluster.toml");
    file.write(&cluster).unwrap();
    let mut processes = Processes {
        binary,
        cluster,
        dir: dir.path().to_path_buf(),
        children: Default::default(),
    };
    for id in 1..=3 {
        processes.start(id);
    }
    let (healthy, json) = processes.status(&["--wait", "60"]);
    assert!(healthy, "{json}");
    let before = scrape(metrics_address).expect("node 1 serves its metrics");
    let commit_before =
        metric(&before, "engine_commit_index{handler=\"orderbook\"}").expect("commit index");
    assert!(
        metric(&before, "engine_role{handler=\"orderbook\"}").is_some(),
        "{before}"
    );
    processes.client(&requests(41, 2_000));
    let after = scrape(metrics_address).expect("node 1 serves its metrics");
    let commit_after = metric(&after, "engine_commit_index{handler=\"orderbook\"}").unwrap();
    assert!(
        commit_after > commit_before,
        "{commit_before} then {commit_after}"
    );
    let committed = metric(
        &after,
        "engine_entries_committed_total{handler=\"orderbook\"}",
    )
    .unwrap();
    assert!(committed >= commit_after, "{after}");
    assert!(after.ends_with("# EOF\n"), "{after}");
    // Node 1 wrote and fsynced entries and applied them, whatever its role: the WAL counters
    // and the apply stage's histogram rose with the load.
    for rising in [
        "engine_wal_fsync_seconds_count{handler=\"orderbook\"}",
        "engine_wal_written_bytes_total{handler=\"orderbook\"}",
        "engine_stage_latency_seconds_count{handler=\"orderbook\",stage=\"apply\"}",
    ] {
        let (was, is) = (metric(&before, rising), metric(&after, rising));
        assert!(
            is.unwrap_or(0.0) > was.unwrap_or(0.0),
            "{rising}: {was:?} then {is:?}"
        );
    }
}
