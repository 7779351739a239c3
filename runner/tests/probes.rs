//! The HTTP endpoints of real node processes on their metrics addresses, as a supervisor or a
//! load balancer probes them: `/livez` and `/readyz` (GET and HEAD) through a leader killed
//! and restarted, and through a halt (every copy of a committed entry damaged), where the
//! nodes stay live but are not ready, and say why.

mod common;

use common::probe::{poll, request};
use common::{Model, Nodes, leader_of, runtime, three_up_with_a_leader, transfers, wait_for};
use engine::client::Client;
use engine::internals::storage::hard_state::WAL_DIR;
use engine::node::ClusterFile;
use engine::node::local::free_loopback_addresses;
use engine::rng::Rng;
use engine::{ClientId, RequestNumber};
use std::cell::Cell;
use std::net::SocketAddr;

/// No snapshots and small WAL segments (as the repair tests), each node's metrics address
/// set.
fn cluster(dir: &std::path::Path) -> (Nodes, engine::client::ClientConfig, Vec<SocketAddr>) {
    let metrics: Vec<SocketAddr> = free_loopback_addresses(3)
        .unwrap()
        .iter()
        .map(|a| a.peer_address.socket_addr().expect("numeric"))
        .collect();
    let addresses = metrics.clone();
    let (nodes, config) = common::start_cluster(dir, move |file: &mut ClusterFile| {
        file.snapshot_every = 0;
        file.wal_segment_bytes = 16 << 10;
        for (node, address) in file.nodes.iter_mut().zip(&addresses) {
            node.metrics_address = Some(*address);
        }
    });
    (nodes, config, metrics)
}

/// Proves: all three nodes answer `/livez` and `/readyz` 200 once a leader is known, `HEAD`
/// gives the head without a body, an unknown path 404 and a `POST` 405; when the leader is
/// killed the two others become ready again under a new leader and the killed node's address
/// stops answering; restarted, it is ready again; `/metrics` shows the build and the
/// readiness.
#[test]
fn probes_follow_a_leader_kill_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config, metrics) = cluster(dir.path());
    let all = runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        common::statuses(&config).await
    });
    for &address in &metrics {
        poll(address, "/readyz", |status, _| status == 200);
        assert_eq!(request(address, "GET", "/livez").unwrap().0, 200);
    }
    let (status, body) = request(metrics[0], "HEAD", "/readyz").unwrap();
    assert_eq!((status, body.as_str()), (200, ""));
    assert_eq!(request(metrics[0], "GET", "/health").unwrap().0, 404);
    assert_eq!(request(metrics[0], "POST", "/readyz").unwrap().0, 405);
    let text = request(metrics[0], "GET", "/metrics").unwrap().1;
    assert!(
        text.contains("engine_build_info{handler=\"bank\",version=\""),
        "{text}"
    );
    assert!(text.contains("engine_ready{handler=\"bank\"} 1"), "{text}");

    let leader = leader_of(&all).unwrap().0;
    nodes.kill(leader);
    let killed = metrics[usize::from(leader) - 1];
    assert!(
        request(killed, "GET", "/livez").is_none(),
        "a killed node answers"
    );
    let others: Vec<_> = (1..=3u8).filter(|&id| id != leader).collect();
    runtime().block_on(wait_for(&config, "a new leader", |all| {
        leader_of(all).is_some_and(|new| new.0 != leader)
    }));
    for &id in &others {
        poll(metrics[usize::from(id) - 1], "/readyz", |status, _| {
            status == 200
        });
    }
    nodes.start(leader);
    poll(killed, "/readyz", |status, _| status == 200);
}

/// Proves a halted node is live but not ready: every copy of a committed entry damaged, the
/// three nodes halt, `/livez` answers 200 and `/readyz` 503 with the halt's reason, and the
/// metrics say `engine_halted 1` and `engine_ready 0`.
#[test]
fn a_halted_node_is_live_and_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config, metrics) = cluster(dir.path());
    runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let acknowledged = Cell::new(0);
        transfers(
            &mut client,
            &mut Rng::new(43),
            &mut model,
            300,
            &acknowledged,
        )
        .await;
        common::converged(&config).await;
    });
    for id in 1..=3 {
        nodes.kill(id);
        let segments = common::wal_segments(&nodes.data_dir(id).join(WAL_DIR));
        assert!(segments.len() >= 3, "several segments: {segments:?}");
        let mut bytes = std::fs::read(&segments[0]).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x40;
        std::fs::write(&segments[0], bytes).unwrap();
    }
    for id in 1..=3 {
        nodes.start(id);
    }
    for &address in &metrics {
        let (_, reason) = poll(address, "/readyz", |status, body| {
            status == 503 && body.starts_with("halted: ")
        });
        assert!(reason.contains("unrecoverable corruption"), "{reason}");
        assert_eq!(request(address, "GET", "/livez").unwrap().0, 200);
        let lines = [
            "engine_halted{handler=\"bank\"} 1",
            "engine_ready{handler=\"bank\"} 0",
        ];
        poll(address, "/metrics", |status, text| {
            status == 200 && lines.iter().all(|line| text.lines().any(|l| l == *line))
        });
    }
}
