//! Who may do what, against real node processes: an application host that holds only its
//! client file cannot act as an operator, whatever file it writes for itself; the operator's
//! file can; an application connection that asks an operator request is refused with its
//! own reason, logged with its address and counted; the cluster is unchanged throughout. Every
//! file or key handed to the wrong command is refused by name, with what to use instead: exit
//! 3 where the command itself can tell (a client file), 4 where the node refuses.

mod common;

use common::*;
use engine::client::{Client, ClientConfig, node_status, node_versions};
use engine::node::{ClientFile, ClusterFile, NodeEntry};
use engine::operator::secrets::SecretText;
use net::auth::Key;
use net::frame::FrameCodec;
use net::message::{
    Admission, Challenge, ClientReply, ClientRequest, ClientRole, Hello, Mode, NodeStatus,
    PROTOCOL_VERSION, Refusal, Role,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The operators' own secret in these clusters.
const OPERATOR_SECRET: &str = "only the operators of this cluster hold this";
/// The applications' secret, where a cluster sets one.
const CLIENT_SECRET: &str = "the applications of this cluster hold this";

fn runner(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_runner"));
    command.args(args);
    command
}

fn run(args: &[&str], file: &Path, more: &[&str]) -> Output {
    runner(args)
        .arg("--cluster")
        .arg(file)
        .args(more)
        .output()
        .unwrap()
}

/// What an application host could write from its client file alone: a "cluster file" with
/// the client secret, made-up peer addresses and data directories, and a made-up peer secret.
fn forge(client_file: &Path, out: &Path) {
    let client = ClientFile::read(client_file).unwrap();
    let nodes = client
        .nodes
        .iter()
        .map(|n| {
            let made_up = format!("127.0.0.1:{}", 20_000 + u16::from(n.id));
            let peer: engine::Address = made_up.parse().unwrap();
            let dir = format!("/nonexistent/forged/node{}", n.id);
            NodeEntry::new(n.id, peer, n.client_address.clone(), dir)
        })
        .collect();
    let mut forged = ClusterFile::new("a peer secret the host made up", nodes);
    forged.cluster_id = client.cluster_id;
    forged.client_secret = client.client_secret;
    forged.write(out).unwrap();
}

/// Fails unless `output` is a failure whose error says the node refused it.
fn refused(what: &str, output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{what} succeeded: {stderr}");
    assert!(
        stderr.contains("refused") || stderr.contains("may not make this request"),
        "{what}: {stderr}"
    );
}

/// Every node's status, asked as an application.
async fn all_statuses(config: &ClientConfig) -> Vec<NodeStatus> {
    let timeout = Duration::from_secs(5);
    let mut all = Vec::new();
    for address in &config.nodes {
        all.push(node_status(config, address, timeout).await.unwrap());
    }
    all
}

/// The cluster as the forgery must leave it: Verify mode, members 1 to 3, handler version 1
/// in force on every node.
async fn unchanged(config: &ClientConfig) {
    for status in all_statuses(config).await {
        assert_eq!(status.mode, Mode::Verify, "{status:?}");
        let members: Vec<u8> = status.members.iter().map(|n| n.0).collect();
        assert_eq!(members, vec![1, 2, 3], "{status:?}");
    }
    for address in &config.nodes {
        let versions = node_versions(config, address, Duration::from_secs(5)).await;
        assert_eq!(versions.unwrap().in_force, 1);
    }
}

/// An application connection (proving `key`, or nothing) that asks node `address` to switch
/// modes: the node's one answer, read before it closes the connection.
fn ask_mode_as_application(address: std::net::SocketAddr, key: Option<&Key>) -> ClientReply {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let codec = FrameCodec::new(CLUSTER_ID);
    let send = |stream: &mut TcpStream, frame: bytes::BytesMut| stream.write_all(&frame).unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        cluster: CLUSTER_ID,
        node: None,
    };
    send(&mut stream, codec.frame(&hello).unwrap());
    let read = |stream: &mut TcpStream| codec.read_frame(stream).unwrap();
    let challenge: Challenge = net::codec::decode(&read(&mut stream)).unwrap();
    let proof = net::auth::answer(key, &hello, None, &challenge);
    send(&mut stream, codec.frame(&proof).unwrap());
    let admitted: Admission = net::codec::decode(&read(&mut stream)).unwrap();
    assert_eq!(admitted, Admission::Accepted);
    let request = ClientRequest::SetMode(Mode::Performance);
    send(&mut stream, codec.frame(&request).unwrap());
    let reply = net::codec::decode(&read(&mut stream)).unwrap();
    let mut rest = Vec::new();
    let closed = stream.read_to_end(&mut rest);
    assert!(matches!(closed, Ok(0)), "the node closes the connection");
    reply
}

/// Node 1's Prometheus text.
fn scrape(address: std::net::SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The count of refusals for `reason` in a scrape.
fn refusals(text: &str, reason: &str) -> u64 {
    let label = format!("reason=\"{reason}\"");
    text.lines()
        .filter(|l| l.contains("refusals") && l.contains(&label) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Proves, with and without a client secret: from its client file alone an application
/// host that writes itself a cluster file is refused `mode`, `upgrade`, `member remove` and
/// `backup` (nothing written, the cluster unchanged); an application connection that asks
/// to switch modes is refused as `Forbidden`, logged with its address and counted; and the
/// operator's file, which holds neither the peer nor the client secret, does switch modes and
/// take a backup.
#[test]
fn a_client_file_made_into_a_cluster_file_is_no_operator() {
    for client_secret in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        let metrics = free_port_address();
        let (nodes, mut config) = start_cluster(dir, |file| {
            file.operator_secret = Some(OPERATOR_SECRET.into());
            file.client_secret = client_secret.then(|| CLIENT_SECRET.into());
            file.snapshot_every = 4;
            file.nodes[0].metrics_address = Some(metrics);
        });
        let key = client_secret.then(|| Key::client(CLIENT_SECRET.as_bytes()).unwrap());
        config.key = key.clone();
        let cluster = nodes.cluster_file.clone();
        let (client_file, forged) = (dir.join("client.toml"), dir.join("forged.toml"));
        let made = runner(&["client-file", "--cluster"])
            .arg(&cluster)
            .arg("--out")
            .arg(&client_file)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        assert_owner_only(&client_file);
        let text = std::fs::read_to_string(&client_file).unwrap();
        assert!(
            !text.contains(OPERATOR_SECRET) && !text.contains(TEST_SECRET),
            "{text}"
        );
        forge(&client_file, &forged);
        runtime().block_on(async {
            three_up_with_a_leader(&config).await;
            let mut client = Client::register(config.clone()).await.unwrap();
            let mut model = Model::open(&mut client).await;
            // Entries enough for snapshots (one every 4), which a backup copies.
            let mut rng = engine::rng::Rng::new(7);
            let done = std::cell::Cell::new(0);
            transfers(&mut client, &mut rng, &mut model, 40, &done).await;
        });
        forgery_refused(&forged, dir, &config);
        // With a client secret the forged file's proofs match no key; without one they make
        // application connections, whose operator requests are forbidden.
        let logged_mode = || {
            let line = |l: &&str| l.contains("request refused") && l.contains("set mode");
            nodes.log(1).lines().filter(line).count()
        };
        let text = scrape(metrics);
        let (forbidden, unauthenticated) = (
            refusals(&text, "forbidden"),
            refusals(&text, "unauthenticated"),
        );
        match client_secret {
            true => assert!(forbidden == 0 && unauthenticated >= 4, "{text}"),
            false => assert!(forbidden >= 4 && unauthenticated == 0, "{text}"),
        }
        let before = logged_mode();
        let node1 = config.nodes[0].socket_addr().expect("numeric");
        let reply = ask_mode_as_application(node1, key.as_ref());
        let role = ClientRole::Application;
        assert_eq!(reply, ClientReply::Refused(Refusal::Forbidden { role }));
        // Logged and counted once the connection's task has ended.
        let once = || logged_mode() == before + 1;
        runtime().block_on(until("the refusal logged once", once));
        assert_eq!(refusals(&scrape(metrics), "forbidden"), forbidden + 1);
        runtime().block_on(unchanged(&config));
        operator_file_works(&cluster, dir, &config);
        operator_requests_logged(&nodes);
    }
}

/// Every operator command with the forged file fails, and writes nothing.
fn forgery_refused(forged: &Path, dir: &Path, config: &ClientConfig) {
    refused("mode", &run(&["mode"], forged, &["performance"]));
    let upgrade = run(
        &["upgrade"],
        forged,
        &["--handler-version", "2", "--wait", "30"],
    );
    refused("upgrade", &upgrade);
    let remove = run(
        &["member", "remove"],
        forged,
        &["--id", "3", "--wait", "30"],
    );
    refused("member remove", &remove);
    let out = dir.join("stolen.backup");
    let backup = run(&["backup"], forged, &["--out", out.to_str().unwrap()]);
    refused("backup", &backup);
    assert!(!out.exists(), "a backup was written");
    runtime().block_on(unchanged(config));
}

/// Each operator request is in some node's log with the address it came from.
fn operator_requests_logged(nodes: &common::Nodes) {
    let logs: String = (1..=3).map(|id| nodes.log(id)).collect();
    for request in ["set mode", "backup"] {
        let logged = |l: &&str| {
            l.contains("operator request")
                && l.contains("caller=127.0.0.1:")
                && l.contains(&format!("request=\"{request}\""))
        };
        assert!(
            logs.lines().any(|l| logged(&l)),
            "{request} not logged:\n{logs}"
        );
    }
}

/// The operator's file: no peer or client secret in it; it switches the mode and takes a
/// backup.
fn operator_file_works(cluster: &Path, dir: &Path, config: &ClientConfig) {
    let operator = dir.join("operator.toml");
    let made = runner(&["client-file", "--operator", "--cluster"])
        .arg(cluster)
        .arg("--out")
        .arg(&operator)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    assert_owner_only(&operator);
    let text = std::fs::read_to_string(&operator).unwrap();
    assert!(text.contains(OPERATOR_SECRET), "{text}");
    assert!(
        !text.contains(TEST_SECRET) && !text.contains(CLIENT_SECRET),
        "{text}"
    );
    let node = run(&["node"], &operator, &["--id", "1"]);
    assert!(
        !node.status.success(),
        "a node started without the peer secret"
    );
    let set = run(&["mode"], &operator, &["performance"]);
    assert!(set.status.success(), "{set:?}");
    let out: PathBuf = dir.join("operator.backup");
    let backup = run(&["backup"], &operator, &["--out", out.to_str().unwrap()]);
    assert!(backup.status.success(), "{backup:?}");
    assert_owner_only(&out);
    let status = run(&["status"], &operator, &[]);
    assert!(status.status.success(), "{status:?}");
    runtime().block_on(async {
        for status in all_statuses(config).await {
            assert_eq!(status.mode, Mode::Performance, "{status:?}");
            assert_ne!(status.role, Role::Candidate);
        }
    });
}

/// A loopback address with a port free now, handed out to nothing else in this process.
fn free_port_address() -> std::net::SocketAddr {
    let addresses = engine::node::local::free_loopback_addresses(1).unwrap();
    addresses[0].peer_address.socket_addr().expect("numeric")
}

/// Proves the peer secret rotates without a stop: each node in turn restarts with the new
/// secret and the old one as `previous_secret` (it proves the new one and falls back to the
/// old toward nodes not restarted yet, logging so), then each in turn drops the old one; the
/// cluster serves throughout and ends with every acknowledged outcome in place. (And that a
/// node started on a data directory others may enter warns with its path.)
#[test]
fn the_peer_secret_rotates_one_node_at_a_time() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    // Node 1's data directory made by hand, open to others: the node warns with its path.
    let opened = dir.join("node1");
    std::fs::create_dir(&opened).unwrap();
    let wide = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&opened, wide).unwrap();
    let (mut old, config) = start_cluster(dir, |_| {});
    let new_secret = "the nodes' secret from now on";
    let with = |previous: Option<&str>, name: &str| {
        let mut file = ClusterFile::parse(&old.cluster_file).unwrap();
        file.secret = Some(new_secret.into());
        file.previous_secret = previous.map(SecretText::from);
        let path = dir.join(name);
        file.write(&path).unwrap();
        let logs = dir.join(name.trim_end_matches(".toml"));
        std::fs::create_dir(&logs).unwrap();
        Nodes::new(&logs, path)
    };
    let mut rotating = with(Some(TEST_SECRET), "rotating.toml");
    let mut rotated = with(None, "rotated.toml");
    runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let warned = old.log(1);
        let line = "the data directory is open to other users";
        assert!(warned.contains(line) && warned.contains(&opened.display().to_string()));
        let mut client = Client::register(config.clone()).await.unwrap();
        let mut model = Model::open(&mut client).await;
        let mut rng = engine::rng::Rng::new(11);
        let done = std::cell::Cell::new(0);
        for phase in 0..2 {
            for id in 1..=3 {
                match phase {
                    0 => old.kill(id),
                    _ => rotating.kill(id),
                }
                match phase {
                    0 => rotating.start(id),
                    _ => rotated.start(id),
                }
                transfers(&mut client, &mut rng, &mut model, 10, &done).await;
                converged(&config).await;
                // An operator with the new file reaches every node, restarted or not: its
                // key (the peer key's) falls back to the old one where the new is unknown.
                let file = match phase {
                    0 => &rotating.cluster_file,
                    _ => &rotated.cluster_file,
                };
                let set = run(&["mode"], file, &["verify"]);
                assert!(set.status.success(), "phase {phase}, node {id}: {set:?}");
            }
        }
        let fell_back = rotating
            .log(1)
            .contains("connecting again with the previous one");
        assert!(fell_back, "{}", rotating.log(1));
        model.check(&config, engine::ClientId(99)).await;
    });
}

/// Fails unless `output` exited with `code` and its standard error says each of `texts`;
/// prints what it said (for the record of the exact messages).
fn says(what: &str, output: &Output, code: i32, texts: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{what}: exit {:?}: {}", output.status.code(), stderr.trim());
    assert_eq!(output.status.code(), Some(code), "{what}: {stderr}");
    for text in texts {
        assert!(stderr.contains(text), "{what}: no {text:?} in: {stderr}");
    }
}

/// Each operator command, run with `file`: its name and what it exited with. Nothing of them
/// may take effect (a backup file is checked for by the caller).
fn operator_commands(file: &Path, backup: &Path) -> Vec<(&'static str, Output)> {
    let out = backup.to_str().unwrap();
    vec![
        ("mode", run(&["mode"], file, &["performance"])),
        (
            "member remove",
            run(&["member", "remove"], file, &["--id", "3", "--wait", "10"]),
        ),
        ("backup", run(&["backup"], file, &["--out", out])),
        (
            "upgrade",
            run(
                &["upgrade"],
                file,
                &["--handler-version", "2", "--wait", "10"],
            ),
        ),
    ]
}

/// The files a user may hand to the wrong command, made from the cluster file `cluster`: the
/// client file, the operator file, an operator file whose operator secret is the client
/// secret, one whose operator secret is wrong, and the cluster file without its operator
/// secret (what an operator host kept from before the cluster set one).
struct Misfiles {
    client: PathBuf,
    operator: PathBuf,
    client_as_operator: PathBuf,
    wrong: PathBuf,
    peer_only: PathBuf,
}

impl Misfiles {
    fn write(dir: &Path, cluster: &Path) -> Misfiles {
        let made = |operator: bool, out: &Path| {
            let mut command = runner(&["client-file", "--cluster"]);
            command.arg(cluster).arg("--out").arg(out);
            if operator {
                command.arg("--operator");
            }
            let made = command.output().unwrap();
            assert!(made.status.success(), "{made:?}");
        };
        let files = Misfiles {
            client: dir.join("client.toml"),
            operator: dir.join("operator.toml"),
            client_as_operator: dir.join("client-as-operator.toml"),
            wrong: dir.join("wrong.toml"),
            peer_only: dir.join("peer-only.toml"),
        };
        made(false, &files.client);
        made(true, &files.operator);
        let with_operator_secret = |secret: &str, path: &Path| {
            let mut file = ClusterFile::parse(&files.operator).unwrap();
            file.operator_secret = Some(secret.into());
            file.write(path).unwrap();
        };
        with_operator_secret(CLIENT_SECRET, &files.client_as_operator);
        with_operator_secret("a secret this cluster never had", &files.wrong);
        let mut peer_only = ClusterFile::parse(cluster).unwrap();
        peer_only.operator_secret = None;
        peer_only.write(&files.peer_only).unwrap();
        files
    }
}

/// Proves every misuse of a credential is refused by name, with and without a client secret:
/// the client file given to `mode`, `member`, `backup` or `upgrade` is a local mistake (exit
/// 3) that names the operator file; those commands proving the client secret, a wrong secret
/// or the peer secret (where the cluster sets an operator secret) are refused by the nodes
/// with what the key is and what they need (exit 4); the operator file given to a business
/// command (`client` transfer, get) is refused naming the operator credential (exit 4). No
/// backup is written and the cluster is unchanged.
#[test]
fn a_misused_credential_is_refused_by_name() {
    for client_secret in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        let (nodes, mut config) = start_cluster(dir, |file| {
            file.operator_secret = Some(OPERATOR_SECRET.into());
            file.client_secret = client_secret.then(|| CLIENT_SECRET.into());
        });
        config.key = client_secret.then(|| Key::client(CLIENT_SECRET.as_bytes()).unwrap());
        let files = Misfiles::write(dir, &nodes.cluster_file);
        runtime().block_on(three_up_with_a_leader(&config));
        let backup = dir.join("misused.backup");
        let operator_needed = "mode, member, backup and upgrade need the operator credential";
        let client_file = ["is an application's client file", "client-file --operator"];
        for (what, output) in operator_commands(&files.client, &backup) {
            says(
                &format!("{what} with the client file"),
                &output,
                3,
                &client_file,
            );
        }
        let mut misused = vec![
            (&files.peer_only, "this key is the nodes' (peer) credential"),
            (
                &files.wrong,
                match client_secret {
                    true => "the key proves no role of this cluster",
                    false => "this key is not the operator credential",
                },
            ),
        ];
        if client_secret {
            let client_key = "this key is the application (client) credential";
            misused.push((&files.client_as_operator, client_key));
        }
        for (file, named) in misused {
            for (what, output) in operator_commands(file, &backup) {
                let what = format!("{what} with {}", file.display());
                says(
                    &what,
                    &output,
                    4,
                    &[named, operator_needed, "client-file --operator"],
                );
            }
        }
        assert!(!backup.exists(), "a backup was written");
        let business = [
            "the operator credential may not submit or read business commands",
            "client file",
        ];
        for command in [&["transfer", "1", "2", "3"][..], &["get", "1"]] {
            let mut args = vec!["--timeout", "10"];
            args.extend_from_slice(command);
            let output = run(&["client"], &files.operator, &args);
            says(
                &format!("client {command:?} with the operator file"),
                &output,
                4,
                &business,
            );
        }
        runtime().block_on(unchanged(&config));
    }
}
