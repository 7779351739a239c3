//! Backup and restore with real processes: three `runner node` processes under a load of
//! transfers and deposits; `runner backup` taken while the load runs; `runner restore` seeds a
//! second cluster (another cluster id, fresh directories), which starts from the backup's
//! snapshot with the state hash the backup recorded, audits to a total the source had at that
//! index, and runs new commands on top. Every wait is on an event (a process exit, a status).

mod common;

use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use common::{
    ACCOUNTS, Model, Nodes, OPENING_BALANCE, converged, random_transfer, runtime, wait_for,
};
use engine::Outcome;
use engine::client::{Client, ClientConfig};
use engine::internals::snapshot::{list_snapshots, read_snapshot};
use engine::node::ClusterFile;
use engine::rng::Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Snapshots every 4 entries, each kept at least 20 ms: the newest durable snapshot changes
/// many times a second under the load, so the backup races real replacement.
fn snapshots_often(file: &mut ClusterFile) {
    file.snapshot_every = 4;
    file.snapshot_retain_ms = 20;
}

fn runner(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
    command.args(args);
    command
}

/// Every account's balance and version, by account id.
type Accounts = BTreeMap<u64, (u64, u64)>;

/// Runs `runner backup` in the background while requests of 15 transfers and one deposit of 1
/// run; returns its output and the accounts after each acknowledged request (the first entry:
/// after the opening, before any request; the client's one request at a time makes that the
/// log's order).
async fn backup_under_load(
    client: &mut Client,
    cluster: &Path,
    out: &Path,
) -> (Output, Vec<Accounts>) {
    let opened: Accounts = (0..ACCOUNTS)
        .map(|n| (account_id(n).0, (OPENING_BALANCE, 1)))
        .collect();
    let mut deposits = vec![opened];
    let deposits = &mut deposits;
    let mut rng = Rng::new(5);
    // A few hundred requests first: the nodes have durable snapshots by then.
    for _ in 0..200 {
        one_request(client, &mut rng, deposits).await;
    }
    let mut child = runner(&["backup", "--json", "--cluster"])
        .arg(cluster)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < common::WAIT, "backup did not finish");
        one_request(client, &mut rng, deposits).await;
    }
    let during = deposits.len();
    for _ in 0..50 {
        one_request(client, &mut rng, deposits).await;
    }
    let output = child.wait_with_output().unwrap();
    assert!(during > 200, "the load ran while the backup did");
    (output, std::mem::take(deposits))
}

/// Sends one request and records its outcomes in a copy of the latest accounts.
async fn one_request(client: &mut Client, rng: &mut Rng, history: &mut Vec<Accounts>) {
    let mut batch: Vec<BankCommand> = (0..15).map(|_| random_transfer(rng)).collect();
    batch.push(BankCommand::Deposit {
        id: account_id(rng.below(ACCOUNTS)),
        amount: 1,
    });
    let outcomes = client.submit::<Bank>(&batch).await.unwrap();
    assert!(matches!(outcomes.last(), Some(Outcome::Done(_))));
    let mut accounts = history.last().expect("the opening").clone();
    for (command, outcome) in batch.iter().zip(&outcomes) {
        let changes = if !matches!(outcome, Outcome::Done(_)) {
            Vec::new()
        } else if let BankCommand::Transfer { from, to, amount } = command {
            vec![(from.0, 0u64.wrapping_sub(*amount)), (to.0, *amount)]
        } else if let BankCommand::Deposit { id, amount } = command {
            vec![(id.0, *amount)]
        } else {
            Vec::new()
        };
        for (id, delta) in changes {
            let account = accounts.get_mut(&id).expect("an opened account");
            account.0 = account.0.wrapping_add(delta);
            account.1 += 1;
        }
    }
    history.push(accounts);
}

/// Every account as the cluster has it, read through the log.
async fn accounts(client: &mut Client) -> Accounts {
    let gets: Vec<BankCommand> = (0..ACCOUNTS)
        .map(|n| BankCommand::Get { id: account_id(n) })
        .collect();
    let outcomes = client.submit::<Bank>(&gets).await.unwrap();
    (0..ACCOUNTS)
        .zip(outcomes)
        .map(|(n, outcome)| {
            let Outcome::Done(BankOutput::Account(a)) = outcome else {
                panic!("account {n}: {outcome:?}")
            };
            (account_id(n).0, (a.balance, a.version))
        })
        .collect()
}

async fn audit(client: &mut Client) -> (u64, u128) {
    let outcomes = client.submit::<Bank>(&[BankCommand::Audit]).await.unwrap();
    match &outcomes[..] {
        [Outcome::Done(BankOutput::Audit { accounts, total })] => (*accounts, *total),
        other => panic!("an audit: {other:?}"),
    }
}

fn json_of(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"))
}

/// Proves a backup taken from a cluster under load restores into a new cluster that starts
/// from exactly that state (state hash at the backup's index, audit total a total the source
/// had) and goes on; that `backup` refuses an existing `--out`, and `restore` a cluster whose
/// data directories hold data; and that every file either cluster or the backup wrote is its
/// owner's alone.
#[test]
fn a_backup_under_load_restores_into_a_new_cluster() {
    let root = tempfile::tempdir().unwrap();
    let source_dir = root.path().join("source");
    std::fs::create_dir(&source_dir).unwrap();
    let (mut source, config) = common::start_cluster(&source_dir, snapshots_often);
    let out = root.path().join("cluster.backup");
    let rt = runtime();
    let (output, history) = rt.block_on(async {
        let mut client = Client::register(config.clone()).await.unwrap();
        Model::open(&mut client).await;
        backup_under_load(&mut client, &source.cluster_file, &out).await
    });
    let backup = json_of(&output);
    eprintln!(
        "backup: {backup}, {} requests acknowledged",
        history.len() - 1
    );
    let index = backup["index"].as_u64().unwrap();
    let hash = backup["state_hash"].as_str().unwrap().to_string();
    assert_eq!(backup["cluster_id"], common::CLUSTER_ID);
    assert!(
        index > 0 && backup["bytes"].as_u64().unwrap() > 0,
        "{backup}"
    );
    let source_final = rt.block_on(converged(&config));
    assert!(
        source_final[0].applied_index.0 > index,
        "the load went on past the backup"
    );
    source_snapshots_agree(&source, index, &hash);
    refusals(&source.cluster_file, &out);
    source.children.values_mut().for_each(|c| {
        let _ = c.kill();
    });
    // Balances and sessions are their owner's alone: the backup, the cluster file, and every
    // directory and file a node made (WAL, snapshots, journal, identity, hard state).
    common::assert_owner_only(&out);
    common::assert_owner_only(&source.cluster_file);
    for id in 1..=3 {
        let checked = common::assert_owner_only(&source.data_dir(id));
        assert!(checked >= 4, "node {id}: {checked} files");
    }

    let new_dir = root.path().join("restored");
    std::fs::create_dir(&new_dir).unwrap();
    let (new_cluster, mut new_config) = common::write_cluster_file(&new_dir, |file| {
        snapshots_often(file);
        file.cluster_id = 77;
    });
    new_config.cluster_id = 77;
    restore_and_recover(&out, &new_cluster, index, &hash);
    let mut nodes = Nodes::new(&new_dir, new_cluster);
    for id in 1..=3 {
        nodes.start(id);
    }
    rt.block_on(restored_cluster_serves(
        &nodes,
        &new_config,
        index,
        &history,
    ));
    for id in 1..=3 {
        common::assert_owner_only(&nodes.data_dir(id));
    }
}

/// Any source node's own durable snapshot of entry `index` has the state hash `hash`.
fn source_snapshots_agree(source: &Nodes, index: u64, hash: &str) {
    // Any source node's own durable snapshot of that entry has the same state hash.
    for id in 1..=3 {
        let snapshots = list_snapshots(&source.data_dir(id).join("snapshots")).unwrap();
        for (at, path) in snapshots.into_iter().filter(|(at, _)| at.0 == index) {
            if let Ok(snapshot) = read_snapshot(&path) {
                assert_eq!(
                    snapshot.meta.state_hash.to_string(),
                    hash,
                    "node {id} at {at}"
                );
            }
        }
    }
}

/// A second backup onto `out` is refused (no `--force`), and so is a restore into the
/// source's own data directories, which hold data.
fn refusals(cluster_file: &Path, out: &Path) {
    let again = runner(&["backup", "--cluster"])
        .arg(cluster_file)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(!again.status.success(), "an existing --out is refused");
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let restore_into_source = runner(&["restore", "--from"])
        .arg(out)
        .arg("--cluster")
        .arg(cluster_file)
        .output()
        .unwrap();
    assert!(!restore_into_source.status.success());
    assert!(String::from_utf8_lossy(&restore_into_source.stderr).contains("already holds data"));
}

/// Restores `out` into the cluster of `new_cluster` and checks that each seeded directory
/// would start at entry `index` with state hash `hash`.
fn restore_and_recover(out: &Path, new_cluster: &Path, index: u64, hash: &str) {
    let restored = runner(&["restore", "--json", "--from"])
        .arg(out)
        .arg("--cluster")
        .arg(new_cluster)
        .output()
        .unwrap();
    let restored = json_of(&restored);
    assert_eq!(
        (
            restored["index"].as_u64(),
            restored["restored_cluster_id"].as_u64()
        ),
        (Some(index), Some(77))
    );
    for id in 1..=3 {
        let recover = runner(&["recover", "--json", "--cluster"])
            .arg(new_cluster)
            .args(["--id", &id.to_string()])
            .output()
            .unwrap();
        let recover = json_of(&recover);
        assert_eq!(recover["applied_index"].as_u64(), Some(index), "{recover}");
        assert_eq!(recover["state_hash"].as_str(), Some(hash), "{recover}");
    }
}

/// The restored cluster started from entry `index`, holds every account as the source had
/// it after the request that entry holds (one of `history`), and runs new commands.
async fn restored_cluster_serves(
    nodes: &Nodes,
    new_config: &ClientConfig,
    index: u64,
    history: &[Accounts],
) {
    let all = converged(new_config).await;
    assert!(all.iter().all(|s| s.applied_index.0 >= index), "{all:?}");
    for id in 1..=3 {
        assert!(
            nodes
                .log(id)
                .contains(&format!("snapshot at entry {index}")),
            "{}",
            nodes.log(id)
        );
    }
    let mut client = Client::register(new_config.clone()).await.unwrap();
    let (count, total) = audit(&mut client).await;
    assert_eq!(count, ACCOUNTS);
    let opening = u128::from(ACCOUNTS * OPENING_BALANCE);
    // One deposit of 1 per request: the total says how many of the source's requests the
    // backup's index holds, and every account must be as the source had it then.
    let applied = usize::try_from(total - opening).unwrap();
    assert!(
        applied > 0 && applied < history.len(),
        "{applied} of {}",
        history.len()
    );
    let restored = accounts(&mut client).await;
    assert_eq!(restored, history[applied], "as after request {applied}");
    let more = client
        .submit::<Bank>(&[BankCommand::Deposit {
            id: account_id(0),
            amount: 5,
        }])
        .await
        .unwrap();
    assert!(matches!(more[..], [Outcome::Done(_)]));
    assert_eq!(audit(&mut client).await, (ACCOUNTS, total + 5));
    wait_for(new_config, "three equal hashes again", |all| all.len() == 3).await;
    converged(new_config).await;
}
