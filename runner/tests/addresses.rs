//! Addresses as an operator writes them, with real processes: nodes reached by name
//! (`localhost:PORT`), one listening on a wildcard it does not advertise, a third listed under
//! a name that does not resolve yet; clients that hold only the client file. Every wait is on
//! an event (a process exit, a status).

mod common;

use common::{CLUSTER_ID, Nodes, TEST_SECRET};
use engine::node::local::free_loopback_addresses;
use engine::node::{ClusterFile, NodeEntry};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The client secret of the cluster under test.
const CLIENT_SECRET: &str = "clients of the named cluster prove this";

fn runner(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(args)
        .arg(file)
        .output()
        .expect("runner runs")
}

/// A three-node file whose nodes are reached at `localhost:PORT`; node 1 listens for peers on
/// the wildcard address and for clients on 127.0.0.1; node 3 is listed under `node3_host`.
fn named_cluster(dir: &Path, node3_host: &str) -> PathBuf {
    let addresses = free_loopback_addresses(3).unwrap();
    let nodes = addresses
        .iter()
        .map(|a| {
            let host = if a.id.0 == 3 { node3_host } else { "localhost" };
            let name = |port: u16| format!("{host}:{port}").parse::<engine::Address>().unwrap();
            let (peer, client) = (a.peer_address.port(), a.client_address.port());
            let mut node = NodeEntry::new(
                a.id.0,
                name(peer),
                name(client),
                dir.join(format!("node{}", a.id)),
            );
            if a.id.0 == 1 {
                node.peer_bind_address = Some(format!("0.0.0.0:{peer}").parse().unwrap());
                node.client_bind_address = Some(format!("127.0.0.1:{client}").parse().unwrap());
            }
            node
        })
        .collect();
    let mut file = ClusterFile::new(TEST_SECRET, nodes);
    file.cluster_id = CLUSTER_ID;
    file.client_secret = Some(CLIENT_SECRET.into());
    let path = dir.join("cluster.toml");
    file.write(&path).unwrap();
    path
}

/// `runner client-file`: the client file holds the cluster id, the client addresses by name
/// and the client secret, never the peer secret; it is refused over an existing file.
fn client_file(dir: &Path, cluster: &Path) -> PathBuf {
    let out = dir.join("client.toml");
    let made = runner(
        &["client-file", "--out", out.to_str().unwrap(), "--cluster"],
        cluster,
    );
    assert!(made.status.success(), "{made:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        !text.contains(TEST_SECRET),
        "the peer secret leaked: {text}"
    );
    assert!(
        text.contains(CLIENT_SECRET) && text.contains("\"localhost:"),
        "{text}"
    );
    let again = runner(
        &["client-file", "--out", out.to_str().unwrap(), "--cluster"],
        cluster,
    );
    assert!(
        !again.status.success(),
        "an existing client file was replaced"
    );
    out
}

/// One Bank command through `runner client` with the client file; its JSON outcome.
fn bank(client: &Path, command: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["client", "--client-file"])
        .arg(client)
        .args(command)
        .output()
        .expect("runner runs");
    assert!(output.status.success(), "{command:?}: {output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Waits (with `runner status --wait`, from the client file) until the cluster is healthy.
fn healthy(client: &Path) {
    let status = runner(&["status", "--wait", "60", "--json", "--cluster"], client);
    assert!(status.status.success(), "{status:?}");
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["healthy"], true, "{json}");
}

/// Proves a cluster whose nodes are reached by name and listen where they are told works end
/// to end from a host that holds only the client file, through a leader's SIGKILL and restart.
#[test]
fn named_nodes_with_bind_addresses_serve_clients_that_hold_only_the_client_file() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = named_cluster(dir.path(), "localhost");
    let check = runner(&["check", "--cluster"], &cluster);
    assert!(check.status.success(), "{check:?}");
    let mut nodes = Nodes::new(dir.path(), cluster.clone());
    (1..=3).for_each(|id| nodes.start(id));
    let client = client_file(dir.path(), &cluster);
    healthy(&client);
    let opened = bank(&client, &["open", "42", "--balance", "100"]);
    assert_eq!(opened["outcome"], "done", "{opened}");
    bank(&client, &["open", "43"]);
    let moved = bank(&client, &["transfer", "42", "43", "30"]);
    assert_eq!(moved["output"]["to_balance"], 30, "{moved}");
    // Node 1 (on the wildcard) and then node 2 go down and come back: names are looked up again.
    for id in [1, 2] {
        nodes.kill(id);
        let deposit = bank(&client, &["deposit", "43", "1"]);
        assert_eq!(deposit["outcome"], "done", "{deposit}");
        nodes.start(id);
        healthy(&client);
    }
    let read = bank(&client, &["get", "43"]);
    assert_eq!(read["output"]["balance"], 32, "{read}");
}

/// Proves a node listed under a name that does not resolve holds nobody up: the file is
/// accepted (the name is looked up at connect time, not at start), the two others elect a
/// leader and commit, and the unresolvable peer is logged by name.
#[test]
fn a_peer_whose_name_does_not_resolve_is_tried_again_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = named_cluster(dir.path(), "node3.invalid");
    let mut nodes = Nodes::new(dir.path(), cluster.clone());
    nodes.start(1);
    nodes.start(2);
    let client = client_file(dir.path(), &cluster);
    let opened = bank(&client, &["open", "7", "--balance", "5"]);
    assert_eq!(opened["outcome"], "done", "{opened}");
    let logs = nodes.log(1) + &nodes.log(2);
    assert!(logs.contains("node3.invalid"), "{logs}");
    // Node 3 itself cannot listen at a name that does not resolve: refused with the key to set.
    nodes.start(3);
    assert!(!nodes.wait_exit(3).success());
    let refused = nodes.log(3);
    assert!(refused.contains("peer_bind_address"), "{refused}");
}
