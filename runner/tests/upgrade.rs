//! A handler upgrade with real processes: three `runner node` processes under a load of
//! transfers; `runner upgrade --handler-version 2` commits the Bank's version 2 (a fee on
//! transfers) through the log while the load runs. Every node switches at the same entry (one
//! state hash), the audit's total is unchanged (fees move money, they do not make it), and
//! transfers after it pay the fee. Every wait is on an event (a process exit, a status).

mod common;

use bank::{AccountId, Bank, BankCommand, BankOutput, FEE_ACCOUNT, TRANSFER_FEE};
use common::{
    ACCOUNTS, Model, OPENING_BALANCE, converged, open_account, runtime, start_cluster,
    three_up_with_a_leader, transfers,
};
use engine::Outcome;
use engine::client::{Client, ClientConfig, node_versions};
use engine::rng::Rng;
use std::cell::Cell;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn upgrade(cluster: &Path, version: u32) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args([
            "upgrade",
            "--handler-version",
            &version.to_string(),
            "--cluster",
        ])
        .arg(cluster)
        .output()
        .expect("runner upgrade runs")
}

/// Runs requests of transfers until `upgrade` ends; returns its output and the requests sent.
async fn load_while(
    client: &mut Client,
    upgrade: std::thread::JoinHandle<Output>,
) -> (Output, usize) {
    let (mut rng, mut model) = (Rng::new(3), Model::open(client).await);
    let acknowledged = Cell::new(0);
    while !upgrade.is_finished() {
        transfers(client, &mut rng, &mut model, 1, &acknowledged).await;
    }
    // A few more, surely after the switch: the fee account exists by then.
    transfers(client, &mut rng, &mut model, 3, &acknowledged).await;
    (upgrade.join().unwrap(), acknowledged.get())
}

/// Every node's handler version in force.
async fn versions_in_force(config: &ClientConfig) -> Vec<u32> {
    let mut all = Vec::new();
    for address in &config.nodes {
        let versions = node_versions(config, address, Duration::from_secs(2)).await;
        all.push(versions.expect("every node answers").in_force);
    }
    all
}

/// The Bank's audit: accounts and total.
async fn audit(client: &mut Client) -> (u64, u128) {
    let outcomes = client.submit::<Bank>(&[BankCommand::Audit]).await.unwrap();
    match &outcomes[..] {
        [Outcome::Done(BankOutput::Audit { accounts, total })] => (*accounts, *total),
        other => panic!("audit: {other:?}"),
    }
}

/// Proves an upgrade committed under load switches every node at one entry, keeps the audit's
/// total, makes transfers pay the fee, and that a version no build runs is refused.
#[test]
fn an_upgrade_under_load_switches_every_node_at_one_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = start_cluster(dir.path(), |_| {});
    let runtime = runtime();
    runtime.block_on(async {
        three_up_with_a_leader(&config).await;
        let mut client = Client::register(config.clone()).await.unwrap();
        let cluster = nodes.cluster_file.clone();
        let running = std::thread::spawn(move || upgrade(&cluster, 2));
        let (output, requests) = load_while(&mut client, running).await;
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{output:?}");
        assert_eq!(
            stdout.matches("handler version 2 in force").count(),
            3,
            "{stdout}"
        );
        assert!(requests > 3, "the load ran through the upgrade");
        // Asked again with --json: already in force, and one JSON document says so per node.
        let again = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["upgrade", "--handler-version", "2", "--json", "--cluster"])
            .arg(&nodes.cluster_file)
            .output()
            .unwrap();
        assert!(again.status.success(), "{again:?}");
        let json: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        let in_force: Vec<_> = (json["nodes"].as_array().unwrap().iter())
            .map(|n| n["in_force"].as_u64())
            .collect();
        assert_eq!(in_force, [Some(2); 3], "{json}");
        converged(&config).await;
        assert_eq!(versions_in_force(&config).await, [2, 2, 2]);
        let (accounts, total) = audit(&mut client).await;
        assert_eq!(accounts, ACCOUNTS + 1, "the accounts and the fee account");
        assert_eq!(total, u128::from(ACCOUNTS) * u128::from(OPENING_BALANCE));
        open_account(&mut client, AccountId(1 << 40), 1_000).await;
        open_account(&mut client, AccountId((1 << 40) + 1), 0).await;
        let transfer = BankCommand::Transfer {
            from: AccountId(1 << 40),
            to: AccountId((1 << 40) + 1),
            amount: 10,
        };
        let outcome = client.submit::<Bank>(&[transfer]).await.unwrap();
        let paid = BankOutput::Transferred {
            from_balance: 1_000 - 10 - TRANSFER_FEE,
            to_balance: 10,
        };
        assert_eq!(outcome, [Outcome::Done(paid)]);
        let reserved = BankCommand::Open {
            id: FEE_ACCOUNT,
            balance: 0,
            flags: 0,
        };
        let refused = client.submit::<Bank>(&[reserved]).await.unwrap();
        assert!(matches!(refused[..], [Outcome::Failed(_)]), "{refused:?}");
    });
    the_stream_shows_the_upgrade(&nodes.cluster_file);
    let beyond = upgrade(&nodes.cluster_file, 3);
    let stderr = String::from_utf8_lossy(&beyond.stderr);
    assert!(!beyond.status.success());
    assert!(
        stderr.contains("runs handler versions 1 to 2, not 3"),
        "{stderr}"
    );
    replays_without_difference(nodes);
}

/// Proves the change stream shows the upgrade: one line names it (from version 1 to 2), the
/// commands before it ran under version 1 and those after it under version 2.
fn the_stream_shows_the_upgrade(cluster_file: &std::path::Path) {
    let output = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["changes", "--from", "1", "--json", "--cluster"])
        .arg(cluster_file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<serde_json::Value> = (String::from_utf8(output.stdout).unwrap().lines())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let upgrades: Vec<usize> = (0..lines.len())
        .filter(|&at| lines[at].get("upgrade").is_some())
        .collect();
    let [at] = upgrades[..] else {
        panic!("one upgrade line, not {upgrades:?}")
    };
    assert_eq!(
        lines[at]["upgrade"],
        serde_json::json!({"from": 1, "to": 2})
    );
    assert!(lines[..at].iter().all(|line| line["version"] == 1));
    assert!(lines[at + 1..].iter().all(|line| line["version"] == 2));
    assert!(
        at > 0 && at + 1 < lines.len(),
        "commands on both sides of it"
    );
}

/// Stops the nodes and replays each one's history, across the upgrade, with `runner replay`:
/// no difference from its journal and snapshots.
fn replays_without_difference(mut nodes: common::Nodes) {
    (1..=3).for_each(|id| nodes.kill(id));
    for id in 1..=3 {
        let output = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["replay", "--json", "--data-dir"])
            .arg(nodes.data_dir(id))
            .output()
            .unwrap();
        assert!(output.status.success(), "node {id}: {output:?}");
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(json["difference"], serde_json::Value::Null, "{json}");
        assert!(
            json["journal_records_compared"].as_u64() > Some(0),
            "{json}"
        );
    }
}
