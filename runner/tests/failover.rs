//! Real processes: three `runner node` processes, a client sending transfers, the leader killed
//! with SIGKILL mid-run. A new leader is elected, the client's retries complete, no acknowledged
//! command is lost or applied twice, the audit total is unchanged, and once the killed node is
//! back all three state hashes are equal. Every wait is on an event (a status, a reply).

mod common;

use common::{Nodes, converged, leader_of, reaches, runtime, transfers, wait_for};
use engine::client::Client;
use engine::rng::Rng;
use engine::{ClientId, RequestNumber};
use std::cell::{Cell, RefCell};

/// Proves failover with real processes and SIGKILL loses no acknowledged command.
#[test]
fn leader_killed_mid_run_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster_file, config) = common::write_cluster_file(dir.path(), |_| {});
    let mut nodes = Nodes::new(dir.path(), cluster_file);
    for id in 1..=3 {
        nodes.start(id);
    }
    runtime().block_on(async {
        let all = wait_for(&config, "a leader", |all| {
            all.len() == 3 && leader_of(all).is_some()
        })
        .await;
        let first_leader = leader_of(&all).unwrap();
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = common::Model::open(&mut client).await;
        let mut rng = Rng::new(11);

        // The client sends 300 requests without pause; the leader is killed while request 101
        // is in flight and restarted after request 200. The client's request times out,
        // retries, and lands on the new leader.
        let acknowledged = Cell::new(0);
        let nodes = RefCell::new(nodes);
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
        let converged = converged(&config).await;
        assert!(converged[0].term > all[0].term, "a new term began");
        model.check(&config, ClientId(6)).await;
    });
}
