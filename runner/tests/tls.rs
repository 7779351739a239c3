//! TLS against real node processes, with certificates made by the runbook's own openssl
//! script: a cluster whose every link is TLS serves the benchmark through its client file; a
//! plaintext client is refused; a node whose certificate another CA signed cannot join; a
//! relay that flips one byte inside a TLS stream costs a reconnection and a retried request,
//! never a wrong answer.

mod common;

use common::*;
use engine::client::{Client, ClientConfig};
use net::auth::Key;
use net::frame::FrameCodec;
use net::message::{Hello, PROTOCOL_VERSION, Role};
use net::tls::{Tls, TlsFiles};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The applications' secret of these clusters (TLS does not replace it).
const CLIENT_SECRET: &str = "the applications of this cluster hold this";

/// A client's TLS: the CA of `dir`.
fn client_tls(dir: &Path) -> Tls {
    let files = TlsFiles {
        ca: dir.join("ca.pem"),
        cert: None,
        key: None,
        require_client_cert: false,
    };
    Tls::load(&files).unwrap()
}

/// Three nodes under `dir` with TLS on every link (certificates in `dir/tls`) and a client
/// secret; the client configuration proves both.
fn tls_cluster(dir: &Path) -> (Nodes, ClientConfig) {
    let tls = dir.join("tls");
    for id in 1..=3 {
        certificate(&tls, &format!("node{id}"), &["127.0.0.1"]);
    }
    let (nodes, mut config) = start_cluster(dir, |file| {
        file.tls_ca_file = Some(tls.join("ca.pem"));
        file.client_secret = Some(CLIENT_SECRET.into());
        for node in &mut file.nodes {
            node.tls_cert_file = Some(tls.join(format!("node{}.pem", node.id)));
            node.tls_key_file = Some(tls.join(format!("node{}.key", node.id)));
        }
    });
    config.tls = Some(client_tls(&tls));
    config.key = Some(Key::client(CLIENT_SECRET.as_bytes()).unwrap());
    (nodes, config)
}

fn runner(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
    command.args(args);
    command
}

/// Proves a three-node cluster with TLS on every link runs the benchmark through the client
/// file `client-file` writes (the audit unchanged, the replicas converged); that `check`
/// reads each node's certificate; and that a plaintext caller is refused, with the refusal
/// logged, while the TLS clients go on.
#[test]
fn a_tls_cluster_serves_the_benchmark_and_refuses_plaintext() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let (nodes, config) = tls_cluster(dir);
    runtime().block_on(three_up_with_a_leader(&config));
    let checked = runner(&["check", "--cluster"])
        .arg(&nodes.cluster_file)
        .output()
        .unwrap();
    let checked_text = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{checked:?}");
    assert_eq!(checked_text.matches("TLS certificate CN=node").count(), 3);
    let client_file = dir.join("client.toml");
    let made = runner(&["client-file", "--cluster"])
        .arg(&nodes.cluster_file)
        .arg("--out")
        .arg(&client_file)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    assert!(
        std::fs::read_to_string(&client_file)
            .unwrap()
            .contains("tls_ca_file")
    );
    let bench = runner(&[
        "bench",
        "--accounts",
        "2000",
        "--duration",
        "1",
        "--runs",
        "1",
    ])
    .args(["--warmup", "0.2", "--cluster"])
    .arg(&client_file)
    .output()
    .unwrap();
    let out = String::from_utf8_lossy(&bench.stdout);
    assert!(bench.status.success(), "{bench:?}");
    assert!(
        out.contains("(unchanged)") && out.contains("replicas converged"),
        "{out}"
    );
    // A caller in clear: its hello is not TLS, so the node closes without a word.
    let node1 = config.nodes[0].socket_addr().expect("numeric");
    let mut plain = TcpStream::connect(node1).unwrap();
    plain.set_read_timeout(Some(WAIT)).unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        cluster: CLUSTER_ID,
        node: None,
    };
    plain
        .write_all(&FrameCodec::new(CLUSTER_ID).frame(&hello).unwrap())
        .unwrap();
    assert!(FrameCodec::new(CLUSTER_ID).read_frame(&mut plain).is_err());
    let refused = || nodes.log(1).contains("connection refused: TLS failed");
    runtime().block_on(until("the plaintext caller's refusal logged", refused));
    // The client library in clear gives up; with TLS it is served.
    runtime().block_on(async {
        let mut clear = config.clone();
        clear.tls = None;
        clear.give_up_after = Some(Duration::from_secs(2));
        assert!(Client::register(clear).await.is_err());
        assert!(Client::register(config.clone()).await.is_ok());
    });
}

/// Proves a node whose certificate another CA signed is caught by `check` and cannot join: the
/// two others refuse its connections (logged), it gets no entry while they serve, and started
/// again with a certificate of the cluster's CA it catches up.
#[test]
fn a_node_of_another_ca_cannot_join() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let tls = dir.join("tls");
    for id in 1..=3 {
        certificate(&tls, &format!("node{id}"), &["127.0.0.1"]);
    }
    let rogue_ca = dir.join("rogue");
    certificate(&rogue_ca, "node3", &["127.0.0.1"]);
    let (good_file, mut config) = write_cluster_file(dir, |file| {
        file.tls_ca_file = Some(tls.join("ca.pem"));
        for node in &mut file.nodes {
            node.tls_cert_file = Some(tls.join(format!("node{}.pem", node.id)));
            node.tls_key_file = Some(tls.join(format!("node{}.key", node.id)));
        }
    });
    config.tls = Some(client_tls(&tls));
    let mut rogue = engine::node::ClusterFile::parse(&good_file).unwrap();
    rogue.nodes[2].tls_cert_file = Some(rogue_ca.join("node3.pem"));
    rogue.nodes[2].tls_key_file = Some(rogue_ca.join("node3.key"));
    let rogue_file = dir.join("cluster.rogue.toml");
    rogue.write(&rogue_file).unwrap();
    // `check` catches it before any node starts: the certificate is not the CA's.
    let checked = runner(&["check", "--cluster"])
        .arg(&rogue_file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(!checked.status.success(), "{text}");
    assert!(
        text.contains("node 3: TLS") && text.contains("refused as"),
        "{text}"
    );
    let mut good = Nodes::new(dir, good_file.clone());
    let mut stray = Nodes::new(dir, rogue_file.clone());
    good.start(1);
    good.start(2);
    stray.start(3);
    runtime().block_on(async {
        let mut two = config.clone();
        two.nodes.truncate(2);
        wait_for(&two, "a leader among nodes 1 and 2", |all| {
            all.iter().any(|s| s.role == Role::Leader)
        })
        .await;
        let mut client = Client::register(two.clone()).await.unwrap();
        let mut model = Model::open(&mut client).await;
        let mut rng = engine::rng::Rng::new(5);
        transfers(&mut client, &mut rng, &mut model, 20, &Cell::new(0)).await;
        let refused = |id| {
            let line = |l: &&str| l.contains("TLS failed") && l.contains("kind=\"peer\"");
            good.log(id).lines().filter(line).count() >= 1
        };
        until("nodes 1 and 2 refusing node 3", || refused(1) && refused(2)).await;
        stray.kill(3);
        let recover = runner(&["recover", "--json", "--id", "3", "--cluster"])
            .arg(&rogue_file)
            .output()
            .unwrap();
        assert!(recover.status.success(), "{recover:?}");
        let found: serde_json::Value = serde_json::from_slice(&recover.stdout).unwrap();
        assert_eq!(found["applied_index"], 0, "node 3 got entries: {found}");
        good.start(3);
        converged(&config).await;
        model.check(&config, engine::ClientId(99)).await;
    });
}

/// A relay to one address that flips one byte at a given offset of a connection's stream:
/// the `n`th connection's entry in `flips` says which direction (true: toward the node) and
/// where; later connections pass untouched.
struct Relay {
    address: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Relay {
    fn start(target: SocketAddr, flips: Vec<(bool, usize)>) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for (n, caller) in listener.incoming().enumerate() {
                let Ok(caller) = caller else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(node) = TcpStream::connect(target) else {
                    continue;
                };
                let flip = flips.get(n).copied();
                let at = |toward: bool| flip.filter(|(d, _)| *d == toward).map(|(_, at)| at);
                let (to_node, to_caller) = (at(true), at(false));
                let (c, d) = (caller.try_clone().unwrap(), node.try_clone().unwrap());
                std::thread::spawn(move || pump(caller, node, to_node));
                std::thread::spawn(move || pump(d, c, to_caller));
            }
        });
        Relay {
            address,
            connections,
        }
    }
}

/// Copies `from` to `to`, flipping the lowest bit of the byte at offset `flip`, until either
/// side ends; then ends both.
fn pump(mut from: TcpStream, mut to: TcpStream, flip: Option<usize>) {
    let mut buffer = [0u8; 16 * 1024];
    let mut offset = 0;
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(at) = flip
            && (offset..offset + n).contains(&at)
        {
            buffer[at - offset] ^= 1;
        }
        offset += n;
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// Proves a byte flipped inside the TLS stream (one connection toward the leader, the next
/// toward the client) is caught by TLS: the connection ends, the client reconnects and
/// retries its request under the same number, and every acknowledged outcome and the final
/// state agree with a model of the Bank.
#[test]
fn a_flipped_byte_inside_tls_costs_a_reconnection_never_a_wrong_answer() {
    let root = tempfile::tempdir().unwrap();
    let (_nodes, config) = tls_cluster(root.path());
    let leader = runtime().block_on(async {
        let all = wait_for(&config, "a leader", |all| {
            all.iter().any(|s| s.role == Role::Leader)
        })
        .await;
        leader_of(&all).expect("a leader")
    });
    let target = config.nodes[usize::from(leader.0) - 1]
        .socket_addr()
        .expect("numeric");
    // Past the TLS handshakes, inside the requests and the replies.
    let relay = Relay::start(target, vec![(true, 3_000), (false, 6_000)]);
    let mut through = config.clone();
    through.nodes = vec![relay.address.into()];
    runtime().block_on(async {
        let mut client = Client::register(through.clone()).await.unwrap();
        let mut model = Model::open(&mut client).await;
        let mut rng = engine::rng::Rng::new(9);
        transfers(&mut client, &mut rng, &mut model, 60, &Cell::new(0)).await;
        model.check(&config, engine::ClientId(99)).await;
    });
    let connections = relay.connections.load(Ordering::SeqCst);
    assert!(
        connections >= 3,
        "{connections} connections: no reconnection"
    );
}

/// Proves `tls_require_client_cert`: a client without a certificate of the CA is refused in
/// the TLS handshake even with the client secret, and one given a client certificate
/// (`client-file --tls-cert`, made by the script without host names) is served.
#[test]
fn a_cluster_can_require_client_certificates() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let tls = dir.join("tls");
    for id in 1..=3 {
        certificate(&tls, &format!("node{id}"), &["127.0.0.1"]);
    }
    certificate(&tls, "app", &[]);
    let (nodes, mut config) = start_cluster(dir, |file| {
        file.tls_ca_file = Some(tls.join("ca.pem"));
        file.tls_require_client_cert = true;
        for node in &mut file.nodes {
            node.tls_cert_file = Some(tls.join(format!("node{}.pem", node.id)));
            node.tls_key_file = Some(tls.join(format!("node{}.key", node.id)));
        }
    });
    config.tls = Some(client_tls(&tls));
    config.give_up_after = Some(Duration::from_secs(2));
    let client_file = dir.join("client.toml");
    let made = runner(&["client-file", "--cluster"])
        .arg(&nodes.cluster_file)
        .arg("--out")
        .arg(&client_file)
        .arg("--tls-cert")
        .arg(tls.join("app.pem"))
        .arg("--tls-key")
        .arg(tls.join("app.key"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let mut with_certificate = engine::node::ClientFile::read(&client_file)
        .unwrap()
        .client_config()
        .unwrap();
    with_certificate.give_up_after = Some(WAIT);
    runtime().block_on(async {
        three_up_with_a_leader(&with_certificate).await;
        assert!(Client::register(config.clone()).await.is_err());
        let mut client = Client::register(with_certificate.clone()).await.unwrap();
        let mut model = Model::open(&mut client).await;
        let mut rng = engine::rng::Rng::new(13);
        transfers(&mut client, &mut rng, &mut model, 5, &Cell::new(0)).await;
        model.check(&with_certificate, engine::ClientId(99)).await;
    });
    let refused = || nodes.log(1).contains("connection refused: TLS failed");
    runtime().block_on(until("a client without a certificate refused", refused));
}
