//! Who may connect, against real node processes: a node with the wrong secret or of another
//! cluster cannot join, vote or append; a recorded handshake does not open a second
//! connection; clients must prove the client secret when the cluster sets one.

mod common;

use common::*;
use engine::client::{Client, ClientError};
use engine::node::ClusterFile;
use engine::{ClientId, RequestNumber};
use net::auth::Key;
use net::frame::FrameCodec;
use net::message::{Admission, Challenge, Hello, PROTOCOL_VERSION, Proof, Refusal, Role};
use std::cell::Cell;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// The peer addresses a cluster file lists, in node order.
fn peer_addresses(cluster_file: &Path) -> Vec<SocketAddr> {
    let file = ClusterFile::parse(cluster_file).unwrap();
    let numeric = |n: &engine::node::NodeEntry| n.peer_address.socket_addr().expect("numeric");
    file.nodes.iter().map(numeric).collect()
}

/// The stray node 3 asks for (pre-)votes, in vain: it leads nothing and holds nothing, and
/// nodes 1 and 2 are still in `term`.
async fn stray_got_nothing(
    config: &engine::client::ClientConfig,
    what: &str,
    term: net::ids::Term,
) {
    let mut stray_config = config.clone();
    stray_config.nodes = vec![config.nodes[2].clone()];
    if what == "cluster" {
        stray_config.cluster_id = 10;
    }
    let stray_status = wait_for(&stray_config, "node 3 answering", |all| all.len() == 1).await;
    assert_eq!(
        stray_status[0].last_index.0, 0,
        "{what}: node 3 got entries"
    );
    assert_ne!(stray_status[0].role, Role::Leader);
    let all = statuses(config).await;
    let leading: Vec<_> = all.iter().filter(|s| s.node.0 <= 2).collect();
    assert_eq!(leading.len(), 2, "{all:?}");
    assert!(
        leading.iter().all(|s| s.term == term),
        "{what}: the term moved: {all:?}"
    );
    if let Some(three) = all.iter().find(|s| s.node.0 == 3) {
        assert_eq!(
            three.last_index.0, 0,
            "{what}: node 3 got entries: {three:?}"
        );
        assert_ne!(three.role, Role::Leader, "{three:?}");
    }
}

/// Proves a third node started with the wrong secret, or with another cluster id, is refused
/// by the other two: their term does not move however often it asks for votes (its requests
/// never arrive), it receives no entry, the refusals are logged with its address, and the same node
/// started with the right file then joins and catches up (after its directory, stamped as
/// the other cluster's, is moved away).
#[test]
fn a_node_with_the_wrong_secret_or_cluster_cannot_join_vote_or_append() {
    for (what, logged) in [
        ("secret", "the key proves no role of this cluster"),
        ("cluster", "cluster 10, this node belongs to cluster 9"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (good_file, config) = write_cluster_file(dir.path(), |_| {});
        let mut bad = ClusterFile::parse(&good_file).unwrap();
        match what {
            "secret" => bad.secret = Some("a stray process guessing the secret".into()),
            _ => bad.cluster_id = 10,
        }
        let bad_file = dir.path().join("cluster.bad.toml");
        bad.write(&bad_file).unwrap();
        let mut good = Nodes::new(dir.path(), good_file);
        let mut stray = Nodes::new(dir.path(), bad_file);
        good.start(1);
        good.start(2);
        stray.start(3);
        runtime().block_on(async {
            let led = wait_for(&config, "a leader among nodes 1 and 2", |all| {
                all.iter().any(|s| s.node.0 <= 2 && s.role == Role::Leader)
            })
            .await;
            let term = led.iter().find(|s| s.role == Role::Leader).unwrap().term;
            let mut client = Client::new(config.clone(), ClientId(1), RequestNumber(1));
            let mut model = Model::open(&mut client).await;
            let mut rng = engine::rng::Rng::new(5);
            transfers(&mut client, &mut rng, &mut model, 20, &Cell::new(0)).await;
            // The stray node keeps knocking: wait for refusals of its messages at both nodes.
            let stray_port = peer_addresses(&good.cluster_file)[2];
            let refused = |id: u8| {
                good.log(id)
                    .lines()
                    .filter(|l| l.contains(logged) && l.contains(&stray_port.ip().to_string()))
                    .count()
            };
            until(&format!("{what}: refusals logged by nodes 1 and 2"), || {
                refused(1) >= 2 && refused(2) >= 2
            })
            .await;
            stray_got_nothing(&config, what, term).await;
            // Started with the right file, the same node joins and catches up. Its directory
            // was stamped by its first start: as another cluster's, it is refused until the
            // operator moves it away.
            stray.kill(3);
            if what == "cluster" {
                good.start(3);
                let status = good.wait_exit(3);
                assert!(!status.success(), "started in cluster 10's directory");
                let log = good.log(3);
                assert!(
                    log.contains("belongs to cluster 10, not to cluster 9"),
                    "{log}"
                );
                let data = good.data_dir(3);
                std::fs::rename(&data, data.with_extension("cluster10")).unwrap();
            }
            good.start(3);
            converged(&config).await;
            model.check(&config, ClientId(99)).await;
        });
    }
}

fn frame<T: net::codec::Encode>(message: &T) -> Vec<u8> {
    FrameCodec::new(CLUSTER_ID).frame(message).unwrap().to_vec()
}

fn read<T: net::codec::Decode<()>>(stream: &mut TcpStream) -> T {
    let body = FrameCodec::new(CLUSTER_ID).read_frame(stream).unwrap();
    net::codec::decode(&body).unwrap()
}

/// Proves a handshake made with the real key is admitted, and the same hello and proof
/// replayed on a new connection (whose challenge differs) are refused, then closed, as is a
/// proof for the right challenge meant for another node (a relay).
#[test]
fn a_replayed_handshake_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = start_cluster(dir.path(), |_| {});
    runtime().block_on(wait_for(&config, "a leader", |all| {
        all.iter().any(|s| s.role == Role::Leader)
    }));
    let node1 = peer_addresses(&nodes.cluster_file)[0];
    let key = Key::peer(TEST_SECRET.as_bytes()).unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        cluster: CLUSTER_ID,
        node: Some(engine::NodeId(2)),
    };
    let connect = || {
        let stream = TcpStream::connect(node1).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
    };
    // The real handshake, recorded.
    let mut first = connect();
    first.write_all(&frame(&hello)).unwrap();
    let challenge: Challenge = read(&mut first);
    let node_one = Some(engine::NodeId(1));
    let proof = key.prove(
        (CLUSTER_ID, hello.version),
        hello.node,
        node_one,
        &challenge.nonce,
    );
    first.write_all(&frame(&proof)).unwrap();
    assert_eq!(read::<Admission>(&mut first), Admission::Accepted);
    drop(first);
    // Replayed, answering the new challenge with the old proof.
    let mut second = connect();
    second.write_all(&frame(&hello)).unwrap();
    let fresh: Challenge = read(&mut second);
    assert_ne!(fresh.nonce, challenge.nonce);
    second.write_all(&frame(&proof)).unwrap();
    assert_eq!(
        read::<Admission>(&mut second),
        Admission::Refused(Refusal::Unauthenticated)
    );
    assert!(
        FrameCodec::new(CLUSTER_ID).read_frame(&mut second).is_err(),
        "closed"
    );
    // Replayed blind: hello and proof back to back.
    let mut third = connect();
    let mut both = frame(&hello);
    both.extend(frame(&Proof { mac: proof.mac }));
    third.write_all(&both).unwrap();
    let _challenge: Challenge = read(&mut third);
    assert_eq!(
        read::<Admission>(&mut third),
        Admission::Refused(Refusal::Unauthenticated)
    );
    // Relayed: a proof made with the real key for this very challenge, but by a node that
    // meant to reach node 3 (a relay between node 2's connection to node 3 and node 1).
    let mut relayed = connect();
    relayed.write_all(&frame(&hello)).unwrap();
    let challenge: Challenge = read(&mut relayed);
    let node_three = Some(engine::NodeId(3));
    let meant_for_three = key.prove(
        (CLUSTER_ID, hello.version),
        hello.node,
        node_three,
        &challenge.nonce,
    );
    relayed.write_all(&frame(&meant_for_three)).unwrap();
    assert_eq!(
        read::<Admission>(&mut relayed),
        Admission::Refused(Refusal::Unauthenticated)
    );
}

/// Proves that when the cluster sets a client secret, a client without it or with a wrong
/// one is refused (its request never applied) and a client with it is served.
#[test]
fn clients_must_prove_the_client_secret_when_the_cluster_sets_one() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "the clients of this cluster know this";
    let (_nodes, config) =
        start_cluster(dir.path(), |file| file.client_secret = Some(secret.into()));
    let mut keyed = config.clone();
    keyed.key = Some(Key::client(secret.as_bytes()).unwrap());
    let mut wrong = config.clone();
    wrong.key = Some(Key::client(b"a guess at the clients' secret").unwrap());
    runtime().block_on(async {
        wait_for(&keyed, "a leader", |all| {
            all.iter().any(|s| s.role == Role::Leader)
        })
        .await;
        assert!(statuses(&config).await.is_empty(), "status without the key");
        let open = [bank::BankCommand::Open {
            id: bank::workload::account_id(1),
            balance: 5,
            flags: 0,
        }];
        for (config, client) in [(&config, 1), (&wrong, 2)] {
            let mut stranger = Client::new(config.clone(), ClientId(client), RequestNumber(1));
            match stranger.submit::<bank::Bank>(&open).await {
                Err(ClientError::Refused(Refusal::Unauthenticated)) => {}
                other => panic!("client {client}: {other:?}"),
            }
        }
        let mut member = Client::new(keyed.clone(), ClientId(3), RequestNumber(1));
        let outcomes = member.submit::<bank::Bank>(&open).await.unwrap();
        assert!(
            matches!(outcomes[0], engine::Outcome::Done(_)),
            "{outcomes:?}"
        );
        // Only the member's open applied: one account.
        let audit = member
            .submit::<bank::Bank>(&[bank::BankCommand::Audit])
            .await
            .unwrap();
        assert!(
            matches!(
                &audit[0],
                engine::Outcome::Done(bank::BankOutput::Audit { accounts: 1, .. })
            ),
            "{audit:?}"
        );
    });
}

/// Proves a client of another cluster is told so (not left retrying): every node refuses it
/// with the cluster it belongs to, and the client gives up with that refusal.
#[test]
fn a_client_of_another_cluster_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = start_cluster(dir.path(), |_| {});
    let mut stranger = config.clone();
    stranger.cluster_id = CLUSTER_ID + 1;
    runtime().block_on(async {
        wait_for(&config, "a leader", |all| {
            all.iter().any(|s| s.role == Role::Leader)
        })
        .await;
        let mut client = Client::new(stranger, ClientId(1), RequestNumber(1));
        match client
            .submit::<bank::Bank>(&[bank::BankCommand::Audit])
            .await
        {
            Err(ClientError::Refused(Refusal::WrongCluster { theirs, ours })) => {
                assert_eq!((theirs, ours), (CLUSTER_ID + 1, CLUSTER_ID));
            }
            other => panic!("{other:?}"),
        }
    });
}
