//! `runner publish` against a real RabbitMQ started by the test and real node processes: the
//! broker gets every committed command at least once, in commit order, with no gap and
//! nothing uncommitted, while the publisher and the leader are killed with SIGKILL; a
//! command published twice carries the same position and body.

mod common;

use bank::{AccountId, Bank, BankCommand};
use common::rabbit::{Queue, Rabbit, Received};
use common::{leader_of, runtime, start_cluster, statuses, three_up_with_a_leader};
use engine::client::Client;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Requests of deposits the kill test sends.
const REQUESTS: u64 = 90;
/// Deposits in each (every one of a unique amount, so that each is found again).
const PER_REQUEST: u64 = 8;
/// Accounts the deposits go to.
const ACCOUNTS: u64 = 10;

/// A `runner publish` process; killed when dropped.
struct Publisher {
    child: Child,
}

impl Publisher {
    fn start(dir: &Path, cluster_file: &Path, url: &str, per: &str) -> Publisher {
        let starts = std::fs::read_dir(dir).unwrap().count();
        let log = std::fs::File::create(dir.join(format!("publisher.{starts}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["publish", "--cluster"])
            .arg(cluster_file)
            .args([
                "--amqp",
                url,
                "--exchange",
                "ledger",
                "--per",
                per,
                "--progress",
            ])
            .arg(progress_file(dir))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("runner publish starts");
        Publisher { child }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn progress_file(dir: &Path) -> PathBuf {
    dir.join("ledger.position")
}

/// The lines `runner changes --json` prints from entry 1: the committed history.
fn committed(cluster_file: &Path) -> Vec<Value> {
    let output: Output = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["changes", "--from", "1", "--json", "--cluster"])
        .arg(cluster_file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A line's position.
fn position(line: &Value) -> (u64, u64) {
    (
        line["index"].as_u64().unwrap(),
        line["position"].as_u64().unwrap(),
    )
}

/// Deposits of the amounts `first..first + PER_REQUEST` (each amount unique).
fn deposits(first: u64) -> Vec<BankCommand> {
    (first..first + PER_REQUEST)
        .map(|amount| BankCommand::Deposit {
            id: AccountId(amount % ACCOUNTS + 1),
            amount,
        })
        .collect()
}

/// The amount of a published deposit line.
fn amount(line: &Value) -> Option<u64> {
    line["command"]["Deposit"]["amount"].as_u64()
}

/// Reads the queue until every amount in `wanted` was published (a message's wait is
/// [`common::WAIT`]).
async fn read_until(queue: &mut Queue, wanted: &BTreeSet<u64>) -> Vec<Received> {
    let mut received = Vec::new();
    let mut missing = wanted.clone();
    while !missing.is_empty() {
        let (id, line) = queue.next().await;
        if let Some(amount) = amount(&line) {
            missing.remove(&amount);
        }
        received.push((id, line));
    }
    received
}

/// Opens the accounts, then sends the deposits, killing the publisher after a third of them
/// (and starting it again) and the leader after two thirds; the amounts acknowledged.
async fn load(
    client: &mut Client,
    (nodes, config): (&mut common::Nodes, &engine::client::ClientConfig),
    restart_publisher: impl Fn(),
) -> BTreeSet<u64> {
    let opens: Vec<BankCommand> = (1..=ACCOUNTS)
        .map(|id| BankCommand::Open {
            id: AccountId(id),
            balance: 0,
            flags: 0,
        })
        .collect();
    client.submit::<Bank>(&opens).await.unwrap();
    let mut acknowledged = BTreeSet::new();
    for request in 0..REQUESTS {
        let batch = deposits(1 + request * PER_REQUEST);
        client.submit::<Bank>(&batch).await.expect("acknowledged");
        acknowledged.extend(1 + request * PER_REQUEST..1 + (request + 1) * PER_REQUEST);
        if request == REQUESTS / 3 {
            restart_publisher();
        }
        if request == 2 * REQUESTS / 3 {
            let leader = leader_of(&statuses(config).await).expect("a leader");
            nodes.kill(leader.0);
            nodes.start(leader.0);
        }
    }
    acknowledged
}

/// Proves the broker gets every committed command at least once, in commit order, through a
/// publisher killed and restarted and a leader killed and restarted: the distinct messages
/// are exactly the committed history (`runner changes`), each first seen in order, every
/// acknowledged deposit among them, and a message seen twice has the same id and body.
#[test]
fn the_broker_gets_every_committed_command_through_kills() {
    let dir = tempfile::tempdir().unwrap();
    let rabbit = Rabbit::start(dir.path(), 26100);
    let (mut nodes, config) = start_cluster(dir.path(), |_| {});
    let cluster_file = nodes.cluster_file.clone();
    let publisher = std::cell::RefCell::new(None::<Publisher>);
    let received = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut queue = Queue::bind(&rabbit.url, "ledger", "seen").await;
        let start = || Publisher::start(dir.path(), &cluster_file, &rabbit.url, "command");
        *publisher.borrow_mut() = Some(start());
        let restart = || {
            publisher.borrow_mut().take().expect("running").kill();
            *publisher.borrow_mut() = Some(start());
        };
        let mut client = Client::register(config.clone()).await.unwrap();
        let acknowledged = load(&mut client, (&mut nodes, &config), restart).await;
        read_until(&mut queue, &acknowledged).await
    });
    let history = committed(&cluster_file);
    let mut first: BTreeMap<String, &Value> = BTreeMap::new();
    let mut distinct = Vec::new();
    for (id, line) in &received {
        let (index, at) = position(line);
        assert_eq!(
            *id,
            format!("{index}.{at}"),
            "the message is named by its position"
        );
        match first.get(id) {
            Some(earlier) => assert_eq!(*earlier, line, "a duplicate is the same message"),
            None => {
                first.insert(id.clone(), line);
                distinct.push(line.clone());
            }
        }
    }
    let positions: Vec<(u64, u64)> = distinct.iter().map(position).collect();
    assert!(
        positions.windows(2).all(|p| p[0] < p[1]),
        "first seen in commit order"
    );
    assert_eq!(distinct, history, "exactly the committed history, no gap");
    assert!(received.len() >= distinct.len());
}

/// Proves `--per entry` publishes one message per entry, named by its index, whose changes
/// are the entry's lines of the committed history, in order.
#[test]
fn one_message_per_entry_holds_the_entrys_changes() {
    let dir = tempfile::tempdir().unwrap();
    let rabbit = Rabbit::start(dir.path(), 26200);
    let (nodes, config) = start_cluster(dir.path(), |_| {});
    let received = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut queue = Queue::bind(&rabbit.url, "ledger", "entries").await;
        let _publisher = Publisher::start(dir.path(), &nodes.cluster_file, &rabbit.url, "entry");
        let mut client = Client::register(config.clone()).await.unwrap();
        let mut wanted = BTreeSet::new();
        for request in 0..10 {
            let batch = deposits(1 + request * PER_REQUEST);
            client.submit::<Bank>(&batch).await.unwrap();
            wanted.extend(1 + request * PER_REQUEST..1 + (request + 1) * PER_REQUEST);
        }
        let mut received = Vec::new();
        while !wanted.is_empty() {
            let (id, entry) = queue.next().await;
            for line in entry["changes"].as_array().unwrap() {
                if let Some(amount) = amount(line) {
                    wanted.remove(&amount);
                }
            }
            received.push((id, entry));
        }
        received
    });
    let history = committed(&nodes.cluster_file);
    let mut flattened = Vec::new();
    for (id, entry) in &received {
        assert_eq!(*id, entry["index"].to_string());
        for line in entry["changes"].as_array().unwrap() {
            assert_eq!(line["index"], entry["index"]);
            flattened.push(line.clone());
        }
    }
    assert_eq!(flattened, history);
    assert_eq!(received[0].1["version"], json!(1));
}
