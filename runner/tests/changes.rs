//! The change stream on real node processes: `runner changes` prints every committed command
//! with its outcome, in commit order, each once, from any position, and names the oldest
//! position served when asked for one no node keeps.

mod common;

use bank::{AccountId, Bank, BankCommand};
use common::gateway::{Gateway, TOKEN, exchange};
use common::probe::poll;
use common::{ACCOUNTS, OPENING_BALANCE, runtime, start_cluster, three_up_with_a_leader};
use engine::Outcome;
use engine::client::Client;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Requests of transfers the stream tests send.
const REQUESTS: u64 = 40;
/// Transfers in each.
const PER_REQUEST: u64 = 5;
/// Rounds of history written at most until every node has let entry 1's changes go.
const GONE_ROUNDS_MAX: usize = 40;

/// Runs `runner changes` with `args` against the cluster file in `dir`.
fn changes(cluster_file: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .arg("changes")
        .arg("--cluster")
        .arg(cluster_file)
        .args(args)
        .output()
        .expect("runner changes runs")
}

/// The JSON lines of a successful `runner changes --json`.
fn lines(output: &Output) -> Vec<Value> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "runner changes failed: {stderr}");
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Commands sent, each with the outcome the client got, in the order sent.
type Sent = Vec<(BankCommand, Outcome<bank::BankOutput, bank::BankError>)>;

/// The opens, then transfers with the outcomes the client got, in the order sent.
async fn history(client: &mut Client) -> Sent {
    let mut sent = Vec::new();
    let opens: Vec<BankCommand> = (1..=ACCOUNTS)
        .map(|id| BankCommand::Open {
            id: AccountId(id),
            balance: OPENING_BALANCE,
            flags: 0,
        })
        .collect();
    let outcomes = client.submit::<Bank>(&opens).await.unwrap();
    sent.extend(opens.into_iter().zip(outcomes));
    for n in 0..REQUESTS {
        let transfers: Vec<BankCommand> = (0..PER_REQUEST)
            .map(|k| BankCommand::Transfer {
                from: AccountId((n + k) % ACCOUNTS + 1),
                to: AccountId((n * 7 + k + 1) % ACCOUNTS + 1),
                amount: k + 1,
            })
            .collect();
        let outcomes = client.submit::<Bank>(&transfers).await.unwrap();
        sent.extend(transfers.into_iter().zip(outcomes));
    }
    sent
}

/// Three nodes under `dir` (`settings` on the cluster file), once they have a leader and the
/// [`history`] applied: the nodes and what was sent, with the outcomes.
fn with_history(
    dir: &Path,
    settings: impl FnOnce(&mut engine::node::ClusterFile),
) -> (common::Nodes, Sent) {
    let (nodes, config) = start_cluster(dir, settings);
    let sent = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut client = Client::register(config.clone()).await.unwrap();
        history(&mut client).await
    });
    (nodes, sent)
}

/// The position of a line, to compare and order.
fn position(line: &Value) -> (u64, u64) {
    (
        line["index"].as_u64().unwrap(),
        line["position"].as_u64().unwrap(),
    )
}

/// Proves `runner changes --json` from entry 1 prints every command the client sent, each once,
/// in the order they committed, with the outcome the client got; that a stream resumed from
/// a line's position starts at exactly that line.
#[test]
fn the_stream_holds_every_committed_command_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, sent) = with_history(dir.path(), |_| {});
    let all = lines(&changes(&nodes.cluster_file, &["--from", "1", "--json"]));
    assert_eq!(all.len(), sent.len(), "one line per command sent");
    for (line, (command, outcome)) in all.iter().zip(&sent) {
        let expected_command = serde_json::to_value(command).unwrap();
        let expected_outcome = engine::cli::outcome_json::<Bank>(outcome);
        assert_eq!(line["command"], expected_command, "{line}");
        assert_eq!(line["outcome"], expected_outcome, "{line}");
        assert_eq!(line["version"], 1, "{line}");
    }
    let positions: Vec<(u64, u64)> = all.iter().map(position).collect();
    assert!(
        positions.windows(2).all(|p| p[0] < p[1]),
        "in commit order, each once"
    );
    let middle = &all[all.len() / 2];
    let (index, at) = position(middle);
    let from = format!("{index}.{at}");
    let resumed = lines(&changes(&nodes.cluster_file, &["--from", &from, "--json"]));
    assert_eq!(
        resumed[0], *middle,
        "a resumed stream starts at the position named"
    );
    assert_eq!(resumed[..], all[all.len() / 2..]);
}

/// Runs `runner changes --json` from entry 1 on node `node` only.
fn from_node(cluster_file: &Path, node: u8) -> Vec<Value> {
    let node = node.to_string();
    lines(&changes(
        cluster_file,
        &["--from", "1", "--json", "--node", &node],
    ))
}

/// Proves a restart journals again the entries a crash kept from the journal: a follower
/// loses its journal's last records (as a crash loses what the WAL thread had not written
/// yet), restarts, and serves the whole stream from entry 1 with no gap, as the other
/// follower does; and that the leader, which keeps no changes, refuses to serve them.
#[test]
fn a_restart_journals_what_a_crash_kept_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    // No snapshot: the restart replays the whole log.
    let (mut nodes, config) = start_cluster(dir.path(), |file| file.snapshot_every = 0);
    let (sent, leader) = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut client = Client::register(config.clone()).await.unwrap();
        let sent = history(&mut client).await;
        let leader = common::leader_of(&common::converged(&config).await).expect("a leader");
        (sent, leader.0)
    });
    let followers: Vec<u8> = (1..=3).filter(|&id| id != leader).collect();
    let (one, two) = (followers[0], followers[1]);
    let whole = from_node(&nodes.cluster_file, one);
    assert_eq!(whole.len(), sent.len());
    let asked = ["--from", "1", "--json", "--node", &leader.to_string()];
    let from_leader = changes(&nodes.cluster_file, &asked);
    let stderr = String::from_utf8_lossy(&from_leader.stderr);
    assert_eq!(
        from_leader.status.code(),
        Some(4),
        "the leader keeps none: {stderr}"
    );
    assert!(stderr.contains("led then"), "{stderr}");
    nodes.kill(two);
    let journal = nodes.data_dir(two).join("journal");
    let mut files: Vec<_> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    files.sort();
    let newest = files.last().expect("the follower journaled");
    let bytes = std::fs::read(newest).unwrap();
    std::fs::write(newest, &bytes[..bytes.len() / 2]).unwrap();
    nodes.start(two);
    runtime().block_on(common::converged(&config));
    let again = from_node(&nodes.cluster_file, two);
    assert_eq!(again, whole, "the follower serves every change again");
}

/// Whole snapshots every few entries, kept briefly, and small segments: the log, and the
/// journal with it, let go of their start within a few hundred requests.
fn snapshots_often(file: &mut engine::node::ClusterFile) {
    file.snapshot_every = 4;
    file.snapshot_retain_ms = 20;
    file.lagging_entries_max = 16;
    file.wal_segment_bytes = 4096;
}

/// Proves a position older than every node keeps is refused, naming the oldest position
/// served (exit 4), and that reading from that position works and starts there: no change
/// is skipped silently.
#[test]
fn a_position_no_node_keeps_is_refused_naming_the_oldest() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = start_cluster(dir.path(), snapshots_often);
    let runtime = runtime();
    let mut client = runtime.block_on(async {
        three_up_with_a_leader(&config).await;
        Client::register(config.clone()).await.unwrap()
    });
    // Each node lets entry 1's changes go when its log is compacted past it, after a snapshot;
    // until every node has, one answers that it holds no changes there (it led then, or a
    // snapshot skipped it), so history is written until the refusal is "gone" everywhere.
    let refused = (0..GONE_ROUNDS_MAX)
        .map(|_| {
            runtime.block_on(async {
                history(&mut client).await;
                common::converged(&config).await;
            });
            changes(&nodes.cluster_file, &["--from", "1", "--json"])
        })
        .find(|refused| String::from_utf8_lossy(&refused.stderr).contains("no node holds entry 1"))
        .expect("every node compacts past entry 1 within the rounds");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(4), "{stderr}");
    let oldest: u64 = stderr
        .split("the oldest any node serves is entry ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the refusal names the oldest entry: {stderr}"));
    assert!(oldest > 1, "{stderr}");
    let from = lines(&changes(
        &nodes.cluster_file,
        &["--from", &oldest.to_string(), "--json"],
    ));
    assert!(!from.is_empty());
    assert!(from.iter().all(|line| position(line).0 >= oldest));
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let (status, body) = get_with_token(&gateway, "/v1/changes?after=0");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (status, &body["error"]),
        (410, &json!("changes_gone")),
        "{body}"
    );
    assert!(
        body["oldest"].as_u64().is_some_and(|o| o >= oldest),
        "{body}"
    );
}

/// Proves `changes_retain_entries` keeps the stream whole past the snapshots that would let
/// the log go: with the same snapshots as the test above, every command sent is served from
/// entry 1.
#[test]
fn a_retention_keeps_the_stream_past_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = start_cluster(dir.path(), |file| {
        snapshots_often(file);
        file.changes_retain_entries = 100_000;
    });
    let sent = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut client = Client::register(config.clone()).await.unwrap();
        let mut sent = Vec::new();
        for _ in 0..8 {
            sent.extend(history(&mut client).await);
        }
        common::converged(&config).await;
        sent
    });
    let snapshots = nodes.data_dir(1).join("snapshots");
    let taken = std::fs::read_dir(&snapshots).map_or(0, |files| files.count());
    assert!(taken > 0, "snapshots were taken");
    let all = lines(&changes(&nodes.cluster_file, &["--from", "1", "--json"]));
    assert_eq!(all.len(), sent.len(), "every command, from entry 1");
}

/// Proves a cluster that keeps no changes (`change_stream = false`) refuses the stream, naming
/// the setting (exit 4), rather than serving nothing.
#[test]
fn a_cluster_without_the_stream_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = with_history(dir.path(), |file| file.change_stream = false);
    let refused = changes(&nodes.cluster_file, &["--from", "1", "--json"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("change_stream = false"), "{stderr}");
}

/// The value of the series `name` (no labels but the handler's) in a scrape.
fn series(text: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{handler=\"bank\"}} ");
    let line = text.lines().find(|l| l.starts_with(&prefix))?;
    line[prefix.len()..].parse().ok()
}

/// Proves a follower's metrics show the stream from its side: its journal's last entry up with
/// its applied entries, the reader it answered lacking nothing after reading to the end, and
/// lacking the entries committed after its last answer.
#[test]
fn a_follower_shows_its_readers_in_its_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let metrics: Vec<std::net::SocketAddr> = engine::node::local::free_loopback_addresses(3)
        .unwrap()
        .iter()
        .map(|a| a.peer_address.socket_addr().expect("numeric"))
        .collect();
    let addresses = metrics.clone();
    let (nodes, config) = start_cluster(dir.path(), move |file| {
        for (node, address) in file.nodes.iter_mut().zip(&addresses) {
            node.metrics_address = Some(*address);
        }
    });
    let (mut client, all) = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut client = Client::register(config.clone()).await.unwrap();
        history(&mut client).await;
        let all = common::wait_for(&config, "all applied", |all| {
            all.len() == 3 && all.iter().all(|s| s.applied_index == all[0].applied_index)
        });
        (client, all.await)
    });
    let leader = common::leader_of(&all).expect("a leader");
    let follower = all.iter().find(|s| s.node != leader).unwrap();
    let (node, applied) = (follower.node.0, follower.applied_index.0 as f64);
    let address = metrics[usize::from(node) - 1];
    from_node(&nodes.cluster_file, node);
    poll(address, "/metrics", |status, text| {
        status == 200
            && series(text, "engine_changes_readers") == Some(1.0)
            && series(text, "engine_changes_journaled_index") >= Some(applied)
            && series(text, "engine_changes_reader_lag_entries") == Some(0.0)
            && series(text, "engine_changes_reader_lag_seconds") == Some(0.0)
    });
    let transfer = BankCommand::Transfer {
        from: AccountId(1),
        to: AccountId(2),
        amount: 1,
    };
    runtime()
        .block_on(client.submit::<Bank>(&[transfer]))
        .unwrap();
    poll(address, "/metrics", |_, text| {
        series(text, "engine_changes_reader_lag_entries").is_some_and(|lag| lag > 0.0)
            && series(text, "engine_changes_reader_lag_seconds").is_some_and(|s| s > 0.0)
    });
}

/// `GET path` on `gateway` with the callers' token: status and body.
fn get_with_token(gateway: &Gateway, path: &str) -> (u16, String) {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\n\r\n"
    );
    exchange(&gateway.address, request.as_bytes()).unwrap()
}

/// A `curl` following `GET /v1/changes?after=AFTER` on `gateway`: its lines as they come.
struct Follower {
    curl: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Follower {
    fn start(gateway: &Gateway, after: &str) -> Follower {
        let url = format!("http://{}/v1/changes?after={after}", gateway.address);
        let mut curl = Command::new("curl")
            .args(["--silent", "--show-error", "--no-buffer", "--fail", "-H"])
            .arg(format!("Authorization: Bearer {TOKEN}"))
            .arg(url)
            .stdout(Stdio::piped())
            .spawn()
            .expect("curl runs (CI installs it)");
        let lines = BufReader::new(curl.stdout.take().unwrap()).lines();
        Follower { curl, lines }
    }

    /// The next `count` lines, as JSON.
    fn take(&mut self, count: usize) -> Vec<Value> {
        (0..count)
            .map(|_| {
                let line = self.lines.next().expect("the stream goes on").unwrap();
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.curl.kill();
        let _ = self.curl.wait();
    }
}

/// Proves the gateway's `GET /v1/changes` serves the lines `runner changes --json` prints, from
/// the command after the position named, then follows new commits as they come; and that it
/// wants the callers' token and a position.
#[test]
fn the_gateway_streams_the_changes_and_follows_new_commits() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, sent) = with_history(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    assert_eq!(
        gateway.get("/v1/changes?after=0").0,
        401,
        "the token is needed"
    );
    let (status, body) = get_with_token(&gateway, "/v1/changes?after=x");
    assert_eq!(status, 400, "{body}");
    let printed = lines(&changes(&nodes.cluster_file, &["--from", "1", "--json"]));
    let mut follower = Follower::start(&gateway, "0");
    assert_eq!(follower.take(sent.len()), printed);
    let (index, at) = position(&printed[9]);
    let mut resumed = Follower::start(&gateway, &format!("{index}.{at}"));
    assert_eq!(
        resumed.take(1)[0],
        printed[10],
        "after a position: the next command"
    );
    let more = r#"[{"Deposit": {"id": 1, "amount": 5}}, {"Deposit": {"id": 2, "amount": 6}}]"#;
    gateway.commands(more, &[]);
    let new = follower.take(2);
    assert_eq!(
        new[0]["command"],
        json!({"Deposit": {"id": 1, "amount": 5}})
    );
    assert_eq!(
        new[1]["command"],
        json!({"Deposit": {"id": 2, "amount": 6}})
    );
    assert!(position(&new[0]) > position(&printed[printed.len() - 1]));
}
