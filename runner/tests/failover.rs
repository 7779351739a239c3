//! Real processes: three `runner node` processes, a client sending transfers, the leader killed
//! with SIGKILL mid-run. A new leader is elected, the client's retries complete, no acknowledged
//! command is lost or applied twice, the audit total is unchanged, and once the killed node is
//! back all three state hashes are equal. Every wait is on an event (a status, a reply).

use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use engine::client::{Client, ClientConfig, node_status};
use engine::node::local::free_loopback_addresses;
use engine::rng::Rng;
use engine::{ClientId, NodeId, Outcome, RequestNumber};
use net::message::{NodeStatus, Role};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 100;
const OPENING_BALANCE: u64 = 1_000_000;
const TRANSFERS_PER_REQUEST: usize = 16;
const WAIT: Duration = Duration::from_secs(30);

/// The three node processes; killed when dropped.
struct Nodes {
    cluster_file: PathBuf,
    children: BTreeMap<u8, Child>,
    logs: PathBuf,
}

impl Nodes {
    fn start(&mut self, id: u8) {
        let log = std::fs::File::create(self.logs.join(format!("node{id}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["node", "--cluster"])
            .arg(&self.cluster_file)
            .args(["--id", &id.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("runner node starts");
        self.children.insert(id, child);
    }

    fn kill(&mut self, id: u8) {
        let mut child = self.children.remove(&id).expect("running");
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn write_cluster_file(dir: &Path) -> (PathBuf, ClientConfig) {
    let addresses = free_loopback_addresses(3).unwrap();
    let mut text = String::from("cluster_id = 9\n");
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
    std::fs::write(&path, text).unwrap();
    let mut config = ClientConfig::new(9, addresses.iter().map(|a| a.client_address).collect());
    config.give_up_after = Some(WAIT);
    (path, config)
}

async fn statuses(config: &ClientConfig) -> Vec<NodeStatus> {
    let mut all = Vec::new();
    for address in &config.nodes {
        if let Ok(status) =
            node_status(config.cluster_id, *address, Duration::from_millis(500)).await
        {
            all.push(status);
        }
    }
    all
}

/// Waits until `check` holds for the reachable nodes' statuses.
async fn wait_for(
    config: &ClientConfig,
    what: &str,
    check: impl Fn(&[NodeStatus]) -> bool,
) -> Vec<NodeStatus> {
    let started = Instant::now();
    loop {
        let all = statuses(config).await;
        if check(&all) {
            return all;
        }
        assert!(
            started.elapsed() < WAIT,
            "timed out waiting for {what}: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn leader_of(all: &[NodeStatus]) -> Option<NodeId> {
    all.iter().find(|s| s.role == Role::Leader).map(|s| s.node)
}

/// The client's model of the accounts, built only from acknowledged outcomes.
struct Model {
    balances: BTreeMap<u64, (u64, u64)>,
}

impl Model {
    fn record(&mut self, command: &BankCommand, outcome: &Outcome<BankOutput, bank::BankError>) {
        let (BankCommand::Transfer { from, to, amount }, Outcome::Done(_)) = (command, outcome)
        else {
            return;
        };
        let debit = self.balances.get_mut(&from.0).expect("known account");
        debit.0 -= amount;
        debit.1 += 1;
        let credit = self.balances.get_mut(&to.0).expect("known account");
        credit.0 += amount;
        credit.1 += 1;
    }
}

/// Sends `requests` requests of transfers, recording each acknowledged outcome in the model and
/// counting acknowledged requests in `acknowledged`.
async fn transfers(
    client: &mut Client,
    rng: &mut Rng,
    model: &mut Model,
    requests: usize,
    acknowledged: &Cell<usize>,
) {
    for _ in 0..requests {
        let batch: Vec<BankCommand> = (0..TRANSFERS_PER_REQUEST)
            .map(|_| {
                let from = rng.below(ACCOUNTS);
                let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                BankCommand::Transfer {
                    from: account_id(from),
                    to: account_id(to),
                    amount: 1 + rng.below(50_000),
                }
            })
            .collect();
        let outcomes = client
            .submit::<Bank>(&batch)
            .await
            .expect("every request completes");
        for (command, outcome) in batch.iter().zip(&outcomes) {
            model.record(command, outcome);
        }
        acknowledged.set(acknowledged.get() + 1);
    }
}

/// Waits (polling) until `counter` reaches `target`.
async fn reaches(counter: &Cell<usize>, target: usize) {
    while counter.get() < target {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Proves failover with real processes and SIGKILL loses no acknowledged command.
#[test]
fn leader_killed_mid_run_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster_file, config) = write_cluster_file(dir.path());
    let mut nodes = Nodes {
        cluster_file,
        children: BTreeMap::new(),
        logs: dir.path().to_path_buf(),
    };
    for id in 1..=3 {
        nodes.start(id);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let all = wait_for(&config, "a leader", |all| {
            all.len() == 3 && leader_of(all).is_some()
        })
        .await;
        let all = all.clone();
        let first_leader = leader_of(&all).unwrap();

        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let opens: Vec<BankCommand> = (0..ACCOUNTS)
            .map(|n| BankCommand::Open {
                id: account_id(n),
                balance: OPENING_BALANCE,
                flags: 0,
            })
            .collect();
        let opened = client.submit::<Bank>(&opens).await.unwrap();
        assert!(opened.iter().all(|o| matches!(o, Outcome::Done(_))));
        let mut model = Model {
            balances: (0..ACCOUNTS)
                .map(|n| (account_id(n).0, (OPENING_BALANCE, 1)))
                .collect(),
        };
        let mut rng = Rng::new(11);

        // The client sends 300 requests without pause; the leader is killed while request 101
        // is in flight and restarted after request 200. The client's request times out,
        // retries, and lands on the new leader.
        let acknowledged = Cell::new(0);
        let nodes = std::cell::RefCell::new(nodes);
        let client_side = transfers(&mut client, &mut rng, &mut model, 300, &acknowledged);
        let fault_side = async {
            reaches(&acknowledged, 100).await;
            nodes.borrow_mut().kill(first_leader.0);
            let all = wait_for(&config, "a new leader", |all| {
                leader_of(all).is_some_and(|l| l != first_leader)
            })
            .await;
            assert!(all.iter().all(|s| s.node != first_leader));
            reaches(&acknowledged, 200).await;
            nodes.borrow_mut().start(first_leader.0);
        };
        futures::join!(client_side, fault_side);
        let converged = wait_for(&config, "three equal state hashes", |all| {
            all.len() == 3
                && all.iter().all(|s| {
                    s.applied_index == all[0].applied_index && s.state_hash == all[0].state_hash
                })
                && all.iter().all(|s| {
                    s.applied_index >= s.commit_index && s.commit_index == all[0].commit_index
                })
        })
        .await;
        assert!(
            converged
                .iter()
                .all(|s| s.divergence.is_none() && s.halted.is_none())
        );
        assert!(converged[0].term > all[0].term, "a new term began");

        let mut checker = Client::new(config.clone(), ClientId(6), RequestNumber(1));
        let mut reads: Vec<BankCommand> = (0..ACCOUNTS)
            .map(|n| BankCommand::Get { id: account_id(n) })
            .collect();
        reads.push(BankCommand::Audit);
        let answers = checker.submit::<Bank>(&reads).await.unwrap();
        for (n, answer) in answers[..ACCOUNTS as usize].iter().enumerate() {
            let Outcome::Done(BankOutput::Account(account)) = answer else {
                panic!("get {n}: {answer:?}")
            };
            let (balance, version) = model.balances[&account_id(n as u64).0];
            assert_eq!(
                (account.balance, account.version),
                (balance, version),
                "account {n}"
            );
        }
        let Outcome::Done(BankOutput::Audit { accounts, total }) = &answers[ACCOUNTS as usize]
        else {
            panic!("audit: {:?}", answers.last())
        };
        assert_eq!(
            (*accounts, *total),
            (ACCOUNTS, u128::from(ACCOUNTS) * u128::from(OPENING_BALANCE))
        );
    });
}
