//! Membership changes with real processes: a dead node replaced by a new one with
//! `member replace`, as the runbook says.

mod common;

use common::{runtime, statuses, three_up_with_a_leader, wait_for};
use engine::NodeId;
use engine::node::local::free_loopback_addresses;
use engine::node::{ClusterFile, NodeEntry};
use std::process::Command;

/// Proves `member replace` of a dead node finishes: node 3 killed, node 4 added to the file
/// and started with `--join`, `replace --old 3 --new 4` removes 3 first (it does not answer)
/// and then adds 4, and with `--json` says so in one JSON document; the members become
/// [1, 2, 4] on every live node and a leader leads them.
/// Adding 4 first, beside the dead 3, is what the leader refuses (four members with two
/// live voters and a newcomer), so the old order would wait until it gave up.
#[test]
fn a_dead_node_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config) = common::start_cluster(dir.path(), |_| {});
    runtime().block_on(three_up_with_a_leader(&config));
    nodes.kill(3);
    let mut file = ClusterFile::parse(&nodes.cluster_file).unwrap();
    let fourth = &free_loopback_addresses(1).unwrap()[0];
    file.nodes.push(NodeEntry::new(
        4,
        fourth.peer_address.clone(),
        fourth.client_address.clone(),
        dir.path().join("node4"),
    ));
    file.write(&nodes.cluster_file).unwrap();
    nodes.start_with(4, &["--join"]);
    let replaced = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args([
            "member", "replace", "--old", "3", "--new", "4", "--wait", "60", "--json",
        ])
        .arg("--cluster")
        .arg(&nodes.cluster_file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&replaced.stderr);
    assert!(replaced.status.success(), "{replaced:?}");
    assert!(
        said.contains("node 3 does not answer: removing it first"),
        "{said}"
    );
    // With --json, standard output is one JSON document: both changes, in order, and the
    // members after them.
    let done: serde_json::Value = serde_json::from_slice(&replaced.stdout).unwrap();
    let changes: Vec<&str> = (done["changes"].as_array().unwrap().iter())
        .map(|c| c["change"].as_str().unwrap())
        .collect();
    assert_eq!(changes, ["remove node 3", "add node 4"], "{done}");
    assert_eq!(done["members"], serde_json::json!([1, 2, 4]), "{done}");
    let mut config = config;
    config.nodes.push(fourth.client_address.clone());
    let expected = vec![NodeId(1), NodeId(2), NodeId(4)];
    runtime().block_on(wait_for(
        &config,
        "members 1, 2 and 4 under one leader",
        |all| {
            all.len() == 3
                && all.iter().all(|s| s.members == expected)
                && common::leader_of(all).is_some()
        },
    ));
    let all = runtime().block_on(statuses(&config));
    assert!(all.iter().all(|s| s.node != NodeId(3)), "{all:?}");
}
