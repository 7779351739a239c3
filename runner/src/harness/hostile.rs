//! `runner hostile`: hostile clients against three `runner node` processes while normal
//! clients send transfers, then a node fed garbage for a while with its memory watched.
//!
//! Every hostile case expects its specific answer (a rejection, a refusal that names the
//! fault) or a closed connection. The normal clients' throughput under attack is compared with
//! their throughput alone (before and after), and at the end the Bank audit, every account
//! against the clients' model, the replicas' state hashes and their WALs are checked: nothing
//! but the valid commands changed anything.

use crate::faults::{
    Addresses, CLUSTER_ID, FAULT_COMMANDS_PER_REQUEST, FaultArgs, Findings, Processes, Workload,
    check_accounts, compare_wals, converge, seed_or_clock, write_cluster_files,
};
use bank::workload::account_id;
use bank::{AccountId, Bank, BankCommand};
use bytes::BufMut;
use engine::client::{Client, ClientConfig, ClientError};
use engine::internals::entry::{ENTRY_COMMANDS_MAX, encode_commands};
use engine::rng::Rng;
use engine::{ClientId, Outcome, RequestNumber};
use futures::StreamExt;
use net::frame::{FRAME_HEADER_BYTES, FrameCodec};
use net::message::{
    Admission, BackupRequest, ClientReply, ClientRequest, ClientRole, Hello, MemberChange, Mode,
    PROTOCOL_VERSION, Proof, Refusal, Rejection, Submit,
};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// Time one hostile case may take for its answer.
const ANSWER_TIMEOUT_MS: u64 = 3_000;
/// Time between two bytes of a trickling connection.
const TRICKLE_INTERVAL_MS: u64 = 2_000;
/// Time a trickling connection may stay open before the node counts as not defending itself:
/// the handshake timeout and a frame's read timeout are 5 s.
const TRICKLE_CLOSED_WITHIN_MS: u64 = 12_000;
/// Connections that trickle a request after a good handshake (the rest trickle their hello).
const TRICKLE_AFTER_HANDSHAKE: usize = 20;
/// Garbage connections opened per second at most while memory is watched.
const GARBAGE_CONNECTIONS_PER_SECOND: u64 = 200;
/// Garbage fed before the first memory reading (buffers and pools settle).
const GARBAGE_WARMUP_SECS: u64 = 5;
/// Largest growth of the node's resident memory under garbage that passes, in KiB.
const MEMORY_GROWTH_KIB_MAX: u64 = 1024;
/// Least share of their throughput alone the normal clients keep under attack.
const THROUGHPUT_SHARE_MIN: f64 = 0.8;
/// A client id far from the normal clients' and the checker's.
const HOSTILE_CLIENT_BASE: u64 = 500_000;

/// Options of `runner hostile`.
#[derive(clap::Args, Debug)]
pub struct HostileArgs {
    /// Seconds of each throughput window (alone, under attack, alone again).
    #[arg(long, default_value_t = 10, alias = "seconds")]
    duration: u64,
    /// Seconds node 1 is fed garbage while its memory is watched.
    #[arg(long, default_value_t = 60, alias = "garbage-seconds")]
    garbage_duration: u64,
    /// Connections that trickle one byte every two seconds.
    #[arg(long, default_value_t = 500)]
    trickle: usize,
    /// `--json FILE` gets `{"cases": [...], "throughput": {...}, "memory": {...}, ...}`.
    #[command(flatten)]
    common: FaultArgs,
}

/// One hostile case and what came of it.
struct Case {
    name: &'static str,
    expected: &'static str,
    got: String,
    passed: bool,
}

/// Runs the suite; prints tables and writes the JSON summary.
pub fn run(args: HostileArgs) -> anyhow::Result<()> {
    let seed = seed_or_clock(args.common.seed);
    let run_dir = runner::run_dir(args.common.dir.clone())?;
    let dir = run_dir.path().to_path_buf();
    eprintln!(
        "hostile: windows of {} s, {} trickling connections, {} s of garbage, seed {seed}, in {}",
        args.duration,
        args.trickle,
        args.garbage_duration,
        dir.display()
    );
    let addresses = Addresses::free()?;
    let files = write_cluster_files(&dir, &addresses, None, args.common.wal_io)?;
    let config = addresses.client_config();
    let processes = Processes::start_all(&dir, files)?;
    let findings = RefCell::new(Findings::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(tokio::task::LocalSet::new().run_until(suite(
        &args, seed, &config, &addresses, &processes, &findings,
    )))?;
    drop(processes);
    let mut findings = findings.into_inner();
    compare_wals(&dir, &mut findings);
    panics_in_logs(&dir, &mut findings);
    print_report(&report, &findings);
    if let Some(path) = &args.common.json {
        std::fs::write(
            path,
            serde_json::to_string_pretty(&json(&report, &findings))? + "\n",
        )?;
    }
    let failed = report.cases.iter().filter(|c| !c.passed).count();
    anyhow::ensure!(
        failed == 0 && findings.violations.is_empty(),
        "{failed} cases failed, {} violations",
        findings.violations.len()
    );
    anyhow::ensure!(
        report.share >= THROUGHPUT_SHARE_MIN,
        "the normal clients kept {:.0}% of their throughput under attack, below {:.0}%",
        report.share * 100.0,
        THROUGHPUT_SHARE_MIN * 100.0
    );
    anyhow::ensure!(
        report.memory.growth_kib() <= MEMORY_GROWTH_KIB_MAX,
        "node 1 grew by {} KiB under garbage",
        report.memory.growth_kib()
    );
    Ok(())
}

/// Resident memory of the node fed garbage.
struct Memory {
    seconds: u64,
    before_kib: u64,
    after_kib: u64,
    peak_kib: u64,
    connections: u64,
}

impl Memory {
    fn growth_kib(&self) -> u64 {
        self.after_kib.saturating_sub(self.before_kib)
    }
}

struct Report {
    cases: Vec<Case>,
    /// Commands per second acknowledged to the normal clients: alone, under attack, alone.
    windows: [f64; 3],
    share: f64,
    memory: Memory,
}

async fn suite(
    args: &HostileArgs,
    seed: u64,
    config: &ClientConfig,
    addresses: &Addresses,
    processes: &Processes,
    findings: &RefCell<Findings>,
) -> anyhow::Result<Report> {
    let mut workload = Workload::start(config, args.common.clients, seed).await?;
    let window = Duration::from_secs(args.duration);
    let alone = throughput(&workload, window).await;
    eprintln!("  alone: {alone:.0} commands/s");
    if let Some(pid) = processes.pid(1) {
        eprintln!(
            "  node 1 before the attack: {} KiB resident",
            resident_kib(pid)?
        );
    }
    let client_port = addresses.clients[&1];
    let peer_port = addresses.peers[&1];
    // The attackers run on a thread of their own, as they would on a machine of their own:
    // the normal clients' thread is not theirs to slow.
    let attack = {
        let (config, trickling) = (config.clone(), args.trickle);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let cases = runtime.block_on(tokio::task::LocalSet::new().run_until(async move {
                let (mut cases, trickled) = tokio::join!(
                    cases(&config, client_port, peer_port, seed),
                    trickle(client_port, trickling)
                );
                cases.push(trickled);
                cases
            }));
            anyhow::Ok(cases)
        })
    };
    let started = Instant::now();
    let before = workload.acknowledged.get();
    while !attack.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cases = attack
        .join()
        .map_err(|_| anyhow::anyhow!("the attackers' thread panicked"))??;
    // The window lasts at least as long as the others, and as long as the attack.
    if started.elapsed() < window {
        tokio::time::sleep(window - started.elapsed()).await;
    }
    let under_attack = commands_per_second(workload.acknowledged.get() - before, started);
    eprintln!("  under attack: {under_attack:.0} commands/s");
    let again = throughput(&workload, window).await;
    eprintln!("  alone again: {again:.0} commands/s");
    let share = under_attack / ((alone + again) / 2.0).max(1.0);
    let (expected, _unknown) = workload.finish(findings).await;
    converge(config, findings).await;
    workload.check_linearizable(findings);
    check_accounts(config, &expected, findings).await;
    unchanged_by_operator_requests(config, findings).await;
    if let Some(pid) = processes.pid(1) {
        eprintln!(
            "  node 1 after the attack: {} KiB resident",
            resident_kib(pid)?
        );
    }
    let memory = garbage(args, processes, client_port, peer_port, seed).await?;
    // Garbage changed nothing: the accounts and the replicas are as the clients left them.
    converge(config, findings).await;
    check_accounts(config, &expected, findings).await;
    Ok(Report {
        cases,
        windows: [alone, under_attack, again],
        share,
        memory,
    })
}

async fn throughput(workload: &Workload, window: Duration) -> f64 {
    let started = Instant::now();
    let before = workload.acknowledged.get();
    tokio::time::sleep(window).await;
    commands_per_second(workload.acknowledged.get() - before, started)
}

fn commands_per_second(requests: u64, since: Instant) -> f64 {
    (requests * FAULT_COMMANDS_PER_REQUEST as u64) as f64 / since.elapsed().as_secs_f64()
}

/// What a connection heard before it closed.
#[derive(Debug)]
enum Heard {
    /// A handshake answer.
    Admission(Admission),
    /// A reply.
    Reply(Box<ClientReply>),
    /// Nothing: the connection closed.
    Closed,
    /// Nothing within the time allowed.
    Silence,
}

impl std::fmt::Display for Heard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Heard::Admission(Admission::Refused(r)) => write!(f, "refused: {r}"),
            Heard::Admission(Admission::Accepted) => f.write_str("admitted"),
            Heard::Reply(reply) => {
                if let Some(refusal) = reply.refusal() {
                    write!(f, "refused: {refusal}")
                } else if let Some((count, _)) = reply.outcomes() {
                    write!(f, "results of {count}")
                } else if let ClientReply::Rejected { reason, .. } = reply.as_ref() {
                    write!(f, "rejected: {reason:?}")
                } else {
                    f.write_str(reply.name())
                }
            }
            Heard::Closed => f.write_str("closed"),
            Heard::Silence => f.write_str("no answer"),
        }
    }
}

/// A connection of this cluster's frames, not yet introduced.
async fn raw(address: SocketAddr) -> anyhow::Result<Framed<TcpStream, FrameCodec>> {
    let stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    Ok(Framed::new(stream, FrameCodec::new(CLUSTER_ID)))
}

/// A client connection past a good handshake (an application's: the cluster sets no client
/// secret).
async fn introduced(address: SocketAddr) -> anyhow::Result<Framed<TcpStream, FrameCodec>> {
    introduced_with(address, None).await
}

/// A client connection past a handshake proving `key`.
async fn introduced_with(
    address: SocketAddr,
    key: Option<&net::auth::Key>,
) -> anyhow::Result<Framed<TcpStream, FrameCodec>> {
    let mut frames = raw(address).await?;
    engine::internals::handshake::introduce(&mut frames, &client_hello(), None, key).await?;
    Ok(frames)
}

fn client_hello() -> Hello {
    Hello {
        version: PROTOCOL_VERSION,
        cluster: CLUSTER_ID,
        node: None,
    }
}

/// Writes raw bytes on a connection.
async fn send_raw(frames: &mut Framed<TcpStream, FrameCodec>, bytes: &[u8]) -> anyhow::Result<()> {
    frames.get_mut().write_all(bytes).await?;
    Ok(())
}

/// The first frame the node sends (as a handshake answer while `handshaking`), or how the
/// connection ended.
async fn hear(frames: &mut Framed<TcpStream, FrameCodec>, handshaking: bool) -> Heard {
    let wait = Duration::from_millis(ANSWER_TIMEOUT_MS);
    match tokio::time::timeout(wait, frames.next()).await {
        Err(_) => Heard::Silence,
        Ok(None | Some(Err(_))) => Heard::Closed,
        Ok(Some(Ok(frame))) if handshaking => match net::codec::decode::<Admission>(&frame) {
            Ok(admission) => Heard::Admission(admission),
            Err(_) => Heard::Closed,
        },
        Ok(Some(Ok(frame))) => match net::codec::decode::<ClientReply>(&frame) {
            Ok(reply) => Heard::Reply(Box::new(reply)),
            Err(_) => Heard::Closed,
        },
    }
}

/// After a refusal the node closes: true when the connection ends within the answer time.
async fn closes(frames: &mut Framed<TcpStream, FrameCodec>) -> bool {
    let wait = Duration::from_millis(ANSWER_TIMEOUT_MS);
    matches!(
        tokio::time::timeout(wait, frames.next()).await,
        Ok(None | Some(Err(_)))
    )
}

/// A frame header of this cluster: length, cluster id, crc (of whatever).
fn header(length: u32, crc: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES);
    out.put_u32_le(length);
    out.put_u64_le(CLUSTER_ID);
    out.put_u32_le(crc);
    out
}

fn frame_of<T: net::codec::Encode>(cluster: u64, message: &T) -> Vec<u8> {
    FrameCodec::new(cluster)
        .frame(message)
        .expect("a small message frames")
        .to_vec()
}

fn submit(client: u64, commands: &[BankCommand]) -> ClientRequest {
    ClientRequest::Submit(Submit {
        client: ClientId(u128::from(client)),
        request: RequestNumber(1),
        oldest_pending: RequestNumber(1),
        command_count: commands.len() as u32,
        commands: encode_commands(commands),
    })
}

/// Sends `bytes` after a good handshake and expects a refusal `expected`, then a close.
async fn after_handshake(address: SocketAddr, bytes: &[u8], expected: &Refusal) -> (String, bool) {
    after_handshake_with(address, None, bytes, expected).await
}

/// [`after_handshake`], on a connection proving `key`.
async fn after_handshake_with(
    address: SocketAddr,
    key: Option<&net::auth::Key>,
    bytes: &[u8],
    expected: &Refusal,
) -> (String, bool) {
    let outcome = async {
        let mut frames = introduced_with(address, key).await?;
        send_raw(&mut frames, bytes).await?;
        let heard = hear(&mut frames, false).await;
        let refused = matches!(&heard, Heard::Reply(r) if matches!(r.as_ref(), ClientReply::Refused(got) if same_kind(got, expected)));
        let closed = closes(&mut frames).await;
        anyhow::Ok((
            format!("{heard}, then {}", closed_text(closed)),
            refused && closed,
        ))
    };
    outcome
        .await
        .unwrap_or_else(|e| (format!("error: {e}"), false))
}

/// Sends `bytes` in place of a handshake and expects a refusal that `check` accepts (or, when
/// `closing_is_enough`, just a close).
async fn instead_of_handshake(
    address: SocketAddr,
    bytes: &[u8],
    check: impl Fn(&Refusal) -> bool,
    closing_is_enough: bool,
) -> (String, bool) {
    let outcome = async {
        let mut frames = raw(address).await?;
        send_raw(&mut frames, bytes).await?;
        let heard = hear(&mut frames, true).await;
        let passed = match &heard {
            Heard::Admission(Admission::Refused(r)) => check(r) && closes(&mut frames).await,
            Heard::Closed => closing_is_enough,
            Heard::Admission(Admission::Accepted) | Heard::Reply(_) | Heard::Silence => false,
        };
        anyhow::Ok((heard.to_string(), passed))
    };
    outcome
        .await
        .unwrap_or_else(|e| (format!("error: {e}"), false))
}

fn closed_text(closed: bool) -> &'static str {
    if closed { "closed" } else { "left open" }
}

fn same_kind(a: &Refusal, b: &Refusal) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The hostile cases, one after the other, against node 1.
async fn cases(
    config: &ClientConfig,
    client_port: SocketAddr,
    peer_port: SocketAddr,
    seed: u64,
) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut case = |name, expected, (got, passed): (String, bool)| {
        cases.push(Case {
            name,
            expected,
            got,
            passed,
        });
    };
    frame_cases(client_port, &mut case).await;
    handshake_cases(client_port, peer_port, seed, &mut case).await;
    request_cases(config, client_port, &mut case).await;
    role_cases(client_port, &mut case).await;
    cases
}

/// What one case reports: its name, what it expects, and what it got and whether that passes.
type CaseSink<'a> = &'a mut dyn FnMut(&'static str, &'static str, (String, bool));

/// Frames that break the protocol after a good handshake: each refused with its reason, then
/// closed.
async fn frame_cases(client_port: SocketAddr, case: CaseSink<'_>) {
    case(
        "length 0",
        "refused: empty frame, closed",
        after_handshake(client_port, &header(0, 0), &Refusal::EmptyFrame).await,
    );
    case(
        "length u32::MAX",
        "refused: frame too large, closed",
        after_handshake(
            client_port,
            &header(u32::MAX, 0),
            &Refusal::FrameTooLarge { bytes: 0, limit: 0 },
        )
        .await,
    );
    let mut bad_crc = frame_of(CLUSTER_ID, &ClientRequest::Status);
    bad_crc[12] ^= 0x5a;
    case(
        "bad crc",
        "refused: crc mismatch, closed",
        after_handshake(client_port, &bad_crc, &Refusal::BadCrc).await,
    );
    case(
        "unknown message type",
        "refused: not a message, closed",
        after_handshake(
            client_port,
            &frame_of(CLUSTER_ID, &200u32),
            &Refusal::Undecodable,
        )
        .await,
    );
}

/// Hellos a node must refuse, and bytes that are no handshake at all.
async fn handshake_cases(
    client_port: SocketAddr,
    peer_port: SocketAddr,
    seed: u64,
    case: CaseSink<'_>,
) {
    let old = Hello {
        version: PROTOCOL_VERSION + 1,
        ..client_hello()
    };
    case(
        "unknown protocol version",
        "refused: version, closed",
        instead_of_handshake(
            client_port,
            &frame_of(CLUSTER_ID, &old),
            |r| matches!(r, Refusal::Version { .. }),
            false,
        )
        .await,
    );
    let stranger = Hello {
        cluster: CLUSTER_ID + 1,
        ..client_hello()
    };
    case(
        "another cluster",
        "refused: cluster, closed",
        instead_of_handshake(
            client_port,
            &frame_of(CLUSTER_ID + 1, &stranger),
            |r| matches!(r, Refusal::WrongCluster { theirs, .. } if *theirs == CLUSTER_ID + 1),
            false,
        )
        .await,
    );
    case(
        "a stranger on the peer port",
        "refused: unauthenticated, closed",
        stranger_on_peer_port(peer_port).await,
    );
    let mut rng = Rng::new(seed);
    let random: Vec<u8> = (0..64 * 1024).map(|_| rng.below(256) as u8).collect();
    case(
        "64 KiB of random bytes",
        "refused or closed",
        instead_of_handshake(client_port, &random, |_| true, true).await,
    );
}

/// Requests that a connection may send but the cluster refuses, or serves only in part.
async fn request_cases(config: &ClientConfig, client_port: SocketAddr, case: CaseSink<'_>) {
    case(
        "request of 0 commands",
        "rejected: empty",
        raw_request(client_port, &submit(HOSTILE_CLIENT_BASE, &[]), |r| {
            matches!(
                r,
                ClientReply::Rejected {
                    reason: Rejection::Empty,
                    ..
                }
            )
        })
        .await,
    );
    case(
        "request of 1,024 commands",
        "results of 1,024",
        sized_request(config, ENTRY_COMMANDS_MAX as usize, 1).await,
    );
    case(
        "request of 1,025 commands",
        "rejected: too many commands",
        sized_request(config, ENTRY_COMMANDS_MAX as usize + 1, 2).await,
    );
    case(
        "half a frame, then close",
        "nothing applied, node serving",
        half_frame(client_port, config, false).await,
    );
    case(
        "half a frame, then reset",
        "nothing applied, node serving",
        half_frame(client_port, config, true).await,
    );
    case(
        "a valid frame of invalid transfers",
        "every transfer failed",
        invalid_transfers(config).await,
    );
}

/// The operator requests refused above changed nothing: every node still runs Verify mode,
/// with members 1 to 3 and handler version 1.
async fn unchanged_by_operator_requests(config: &ClientConfig, findings: &RefCell<Findings>) {
    let timeout = Duration::from_millis(ANSWER_TIMEOUT_MS);
    for address in &config.nodes {
        let status = engine::client::node_status(config, address, timeout).await;
        let versions = engine::client::node_versions(config, address, timeout).await;
        let unchanged = match (&status, &versions) {
            (Ok(status), Ok(versions)) => {
                let members: Vec<u8> = status.members.iter().map(|n| n.0).collect();
                status.mode == Mode::Verify && members == [1, 2, 3] && versions.in_force == 1
            }
            (Err(_), _) | (_, Err(_)) => false,
        };
        if !unchanged {
            findings.borrow_mut().violations.push(format!(
                "an operator request from an application changed {address}: {status:?} {versions:?}"
            ));
        }
    }
}

/// Requests a connection's role does not permit: every operator request from an
/// application's connection, and a business request from an operator's. Each is refused as
/// forbidden and the connection closed; the final checks find nothing changed.
async fn role_cases(client_port: SocketAddr, case: CaseSink<'_>) {
    let application = Refusal::Forbidden {
        role: ClientRole::Application,
    };
    let operator_requests = [
        (
            "mode from an application",
            ClientRequest::SetMode(Mode::Performance),
        ),
        ("upgrade from an application", ClientRequest::Upgrade(2)),
        (
            "member removal from an application",
            ClientRequest::ChangeMembers(MemberChange::Remove(engine::NodeId(3))),
        ),
        (
            "backup from an application",
            ClientRequest::Backup(BackupRequest {
                index: None,
                offset: 0,
            }),
        ),
    ];
    for (name, request) in operator_requests {
        let bytes = frame_of(CLUSTER_ID, &request);
        let got = after_handshake(client_port, &bytes, &application).await;
        case(name, "refused: forbidden, closed", got);
    }
    let operator = Addresses::operator_key();
    let transfer = submit(
        HOSTILE_CLIENT_BASE + 1,
        &[BankCommand::Deposit {
            id: account_id(0),
            amount: 1,
        }],
    );
    let forbidden = Refusal::Forbidden {
        role: ClientRole::Operator,
    };
    let bytes = frame_of(CLUSTER_ID, &transfer);
    case(
        "a deposit from an operator",
        "refused: forbidden, closed",
        after_handshake_with(client_port, Some(operator.key()), &bytes, &forbidden).await,
    );
}

/// A handshake on the peer port that claims to be node 2 without the key.
async fn stranger_on_peer_port(peer_port: SocketAddr) -> (String, bool) {
    let outcome = async {
        let mut frames = raw(peer_port).await?;
        let hello = Hello {
            node: Some(engine::NodeId(2)),
            ..client_hello()
        };
        send_raw(&mut frames, &frame_of(CLUSTER_ID, &hello)).await?;
        // The challenge, answered with a guess.
        let _challenge = frames.next().await;
        let guess = Proof { mac: [7; 32] };
        send_raw(&mut frames, &frame_of(CLUSTER_ID, &guess)).await?;
        let heard = hear(&mut frames, true).await;
        let passed = matches!(
            &heard,
            Heard::Admission(Admission::Refused(Refusal::Unauthenticated))
        ) && closes(&mut frames).await;
        anyhow::Ok((heard.to_string(), passed))
    };
    outcome
        .await
        .unwrap_or_else(|e| (format!("error: {e}"), false))
}

/// One request on a connection of its own, answered as `check` expects.
async fn raw_request(
    address: SocketAddr,
    request: &ClientRequest,
    check: impl Fn(&ClientReply) -> bool,
) -> (String, bool) {
    let outcome = async {
        let mut frames = introduced(address).await?;
        send_raw(&mut frames, &frame_of(CLUSTER_ID, request)).await?;
        loop {
            match hear(&mut frames, false).await {
                // A follower sends the client on; the case is about the leader's answer.
                Heard::Reply(reply) if matches!(reply.as_ref(), ClientReply::NotLeader { .. }) => {
                    let ClientReply::NotLeader {
                        address: Some(leader),
                        ..
                    } = *reply
                    else {
                        anyhow::bail!("no leader known");
                    };
                    frames = introduced(leader.parse()?).await?;
                    send_raw(&mut frames, &frame_of(CLUSTER_ID, request)).await?;
                }
                heard
                @ (Heard::Admission(_) | Heard::Reply(_) | Heard::Closed | Heard::Silence) => {
                    let passed = matches!(&heard, Heard::Reply(r) if check(r));
                    return anyhow::Ok((heard.to_string(), passed));
                }
            }
        }
    };
    outcome
        .await
        .unwrap_or_else(|e| (format!("error: {e}"), false))
}

/// A request of `count` reads through the client library: all answered up to the limit,
/// rejected beyond it.
async fn sized_request(config: &ClientConfig, count: usize, client: u64) -> (String, bool) {
    let reads: Vec<BankCommand> = (0..count)
        .map(|n| BankCommand::Get {
            id: account_id(n as u64 % 100),
        })
        .collect();
    let mut client = Client::new(
        config.clone(),
        ClientId(u128::from(HOSTILE_CLIENT_BASE + client)),
        RequestNumber(1),
    );
    match client.submit::<Bank>(&reads).await {
        Ok(outcomes) => (
            format!("results of {}", outcomes.len()),
            count <= ENTRY_COMMANDS_MAX as usize
                && outcomes.len() == count
                && outcomes.iter().all(|o| matches!(o, Outcome::Done(_))),
        ),
        Err(ClientError::Rejected(reason)) => (
            format!("rejected: {reason:?}"),
            count > ENTRY_COMMANDS_MAX as usize
                && reason
                    == Rejection::TooManyCommands {
                        count: count as u32,
                    },
        ),
        Err(error) => (format!("error: {error}"), false),
    }
}

/// Half of a valid transfer request, then a close or a reset; afterwards the same client's
/// request number 1 is still unused: a read with that number gets its own results.
async fn half_frame(address: SocketAddr, config: &ClientConfig, reset: bool) -> (String, bool) {
    let client = HOSTILE_CLIENT_BASE + 10 + u64::from(reset);
    let outcome = async {
        let transfer = BankCommand::Transfer {
            from: account_id(0),
            to: account_id(1),
            amount: 1,
        };
        let whole = frame_of(CLUSTER_ID, &submit(client, &[transfer]));
        let mut frames = introduced(address).await?;
        send_raw(&mut frames, &whole[..whole.len() / 2]).await?;
        let stream = frames.into_inner();
        if reset {
            socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO))?;
        }
        drop(stream);
        // Request 1 of that client was never applied: a read numbered 1 is answered as a read.
        let mut reader = Client::new(
            config.clone(),
            ClientId(u128::from(client)),
            RequestNumber(1),
        );
        let answers = reader
            .submit::<Bank>(&[BankCommand::Get { id: account_id(0) }])
            .await?;
        let read = matches!(
            answers.as_slice(),
            [Outcome::Done(bank::BankOutput::Account(_))]
        );
        anyhow::Ok((
            format!(
                "closed; request 1 then answered as {}",
                if read { "the read" } else { "something else" }
            ),
            read,
        ))
    };
    outcome
        .await
        .unwrap_or_else(|e| (format!("error: {e}"), false))
}

/// A well-formed request whose transfers are all invalid: each fails, nothing changes.
async fn invalid_transfers(config: &ClientConfig) -> (String, bool) {
    let nobody = AccountId(u64::MAX - 7);
    let transfers = vec![
        BankCommand::Transfer {
            from: nobody,
            to: account_id(1),
            amount: 5,
        },
        BankCommand::Transfer {
            from: account_id(1),
            to: nobody,
            amount: 5,
        },
        BankCommand::Transfer {
            from: account_id(2),
            to: account_id(2),
            amount: 5,
        },
        BankCommand::Transfer {
            from: account_id(3),
            to: account_id(4),
            amount: 0,
        },
        BankCommand::Transfer {
            from: account_id(3),
            to: account_id(4),
            amount: u64::MAX,
        },
        BankCommand::Withdraw {
            id: account_id(5),
            amount: u64::MAX,
        },
        BankCommand::Deposit {
            id: nobody,
            amount: 1,
        },
    ];
    let mut client = Client::new(
        config.clone(),
        ClientId(u128::from(HOSTILE_CLIENT_BASE + 20)),
        RequestNumber(1),
    );
    match client.submit::<Bank>(&transfers).await {
        Ok(outcomes) => {
            let failed = outcomes
                .iter()
                .filter(|o| matches!(o, Outcome::Failed(_)))
                .count();
            (
                format!("{failed} of {} failed", outcomes.len()),
                failed == transfers.len(),
            )
        }
        Err(error) => (format!("error: {error}"), false),
    }
}

/// `count` connections that send one byte every two seconds: most trickle their hello, some
/// a request after a good handshake. Every one must be closed by the node, with a refusal.
async fn trickle(address: SocketAddr, count: usize) -> Case {
    let started = Instant::now();
    let tasks: Vec<_> = (0..count)
        .map(|k| {
            tokio::task::spawn_local(async move {
                let after_handshake = k < TRICKLE_AFTER_HANDSHAKE.min(count);
                let connected = if after_handshake {
                    introduced(address).await
                } else {
                    raw(address).await
                };
                let Ok(frames) = connected else {
                    return None;
                };
                let bytes = if after_handshake {
                    frame_of(CLUSTER_ID, &submit(HOSTILE_CLIENT_BASE + 100, &[]))
                } else {
                    frame_of(CLUSTER_ID, &client_hello())
                };
                let mut stream = frames.into_inner();
                let deadline = Instant::now() + Duration::from_millis(TRICKLE_CLOSED_WITHIN_MS);
                let mut heard = Vec::new();
                for byte in bytes.iter().cycle() {
                    if Instant::now() > deadline || stream.write_all(&[*byte]).await.is_err() {
                        break;
                    }
                    let wait = Duration::from_millis(TRICKLE_INTERVAL_MS);
                    let mut buffer = [0u8; 256];
                    match tokio::time::timeout(wait, stream.read(&mut buffer)).await {
                        Ok(Ok(0) | Err(_)) => break,
                        Ok(Ok(n)) => heard.extend_from_slice(&buffer[..n]),
                        Err(_) => {}
                    }
                }
                let closed_after = started.elapsed();
                let closed = closed_after < Duration::from_millis(TRICKLE_CLOSED_WITHIN_MS);
                // The refusal frame, if it arrived whole.
                let refusal = decode_refusal(&heard, after_handshake);
                Some((closed, closed_after, refusal))
            })
        })
        .collect();
    let mut closed = 0;
    let mut refused = 0;
    let mut latest = Duration::ZERO;
    for task in tasks {
        if let Ok(Some((was_closed, after, refusal))) = task.await {
            closed += usize::from(was_closed);
            refused +=
                usize::from(refusal.is_some_and(|r| {
                    matches!(r, Refusal::HandshakeTimeout | Refusal::ReadTimeout)
                }));
            latest = latest.max(after);
        }
    }
    Case {
        name: "trickling connections",
        expected: "every one closed with a timeout",
        got: format!(
            "{closed} of {count} closed ({refused} told why), the last after {:.1} s",
            latest.as_secs_f64()
        ),
        passed: closed == count && refused == count,
    }
}

fn decode_refusal(bytes: &[u8], after_handshake: bool) -> Option<Refusal> {
    let mut buffer = bytes::BytesMut::from(bytes);
    let mut codec = FrameCodec::new(CLUSTER_ID);
    let mut last = None;
    while let Ok(Some(frame)) = tokio_util::codec::Decoder::decode(&mut codec, &mut buffer) {
        last = Some(frame);
    }
    let frame = last?;
    if after_handshake {
        net::codec::decode::<ClientReply>(&frame)
            .ok()?
            .refusal()
            .cloned()
    } else {
        match net::codec::decode::<Admission>(&frame).ok()? {
            Admission::Refused(r) => Some(r),
            Admission::Accepted => None,
        }
    }
}

/// One connection's garbage: random bytes, a plausible header with a random body, a
/// well-framed body that is no message, or a header that claims much and then nothing.
fn garbage_bytes(rng: &mut Rng) -> Vec<u8> {
    let random = |rng: &mut Rng, count: u64| -> Vec<u8> {
        (0..count).map(|_| rng.below(256) as u8).collect()
    };
    match rng.below(4) {
        0 => {
            let count = rng.below(64 * 1024) + 1;
            random(rng, count)
        }
        1 => {
            let length = rng.below(4096) + 1;
            let mut out = header(length as u32, rng.below(u64::from(u32::MAX)) as u32);
            out.extend(random(rng, length));
            out
        }
        2 => {
            let count = rng.below(512) + 1;
            frame_of(CLUSTER_ID, &random(rng, count))
        }
        _ => header(1 << 20, 0),
    }
}

/// Feeds node 1 garbage on both ports and watches its resident memory.
async fn garbage(
    args: &HostileArgs,
    processes: &Processes,
    client_port: SocketAddr,
    peer_port: SocketAddr,
    seed: u64,
) -> anyhow::Result<Memory> {
    let pid = processes
        .pid(1)
        .ok_or_else(|| anyhow::anyhow!("node 1 is not running"))?;
    let mut rng = Rng::new(seed ^ 0x6a09_e667);
    let mut connections = 0u64;
    let interval = Duration::from_micros(1_000_000 / GARBAGE_CONNECTIONS_PER_SECOND);
    let warmup_end = Instant::now() + Duration::from_secs(GARBAGE_WARMUP_SECS);
    let end = warmup_end + Duration::from_secs(args.garbage_duration);
    let mut before_kib = None;
    let mut peak_kib = 0;
    let mut last_report = Instant::now();
    while Instant::now() < end {
        if before_kib.is_none() && Instant::now() >= warmup_end {
            before_kib = Some(resident_kib(pid)?);
            eprintln!(
                "  garbage: {} KiB resident after the warm-up",
                before_kib.unwrap_or(0)
            );
        }
        let address = if rng.below(2) == 0 {
            client_port
        } else {
            peer_port
        };
        let bytes = garbage_bytes(&mut rng);
        if let Ok(mut stream) = TcpStream::connect(address).await {
            let _ = stream.write_all(&bytes).await;
            connections += 1;
        }
        if before_kib.is_some() {
            peak_kib = peak_kib.max(resident_kib(pid)?);
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "  garbage: {connections} connections, {} KiB resident",
                resident_kib(pid)?
            );
        }
        tokio::time::sleep(interval).await;
    }
    // Let the node close what is still open before the last reading.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after_kib = resident_kib(pid)?;
    let before_kib = before_kib.unwrap_or(after_kib);
    Ok(Memory {
        seconds: args.garbage_duration,
        before_kib,
        after_kib,
        peak_kib: peak_kib.max(after_kib),
        connections,
    })
}

/// A panic in a node (a connection task's, say, which the node survives) is a violation: the
/// nodes' logs must have none.
fn panics_in_logs(dir: &std::path::Path, findings: &mut Findings) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(line) = log.lines().find(|l| l.contains("panicked at")) {
                findings
                    .violations
                    .push(format!("{}: {line}", path.display()));
            }
        }
    }
}

/// A process's resident memory in KiB, from /proc.
fn resident_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmRSS in /proc/{pid}/status"))
}

fn print_report(report: &Report, findings: &Findings) {
    engine::outln!("{:<36} {:<34} {:<6} got", "case", "expected", "result");
    for case in &report.cases {
        let verdict = if case.passed { "ok" } else { "FAILED" };
        engine::outln!(
            "{:<36} {:<34} {verdict:<6} {}",
            case.name,
            case.expected,
            case.got
        );
    }
    let [alone, attack, again] = report.windows;
    engine::outln!();
    engine::outln!(
        "normal clients: {alone:.0} commands/s alone, {attack:.0} under attack, {again:.0} alone again: {:.0}% kept",
        report.share * 100.0
    );
    let m = &report.memory;
    engine::outln!(
        "node 1 fed {} garbage connections for {} s: resident {} KiB -> {} KiB (growth {} KiB, peak {} KiB)",
        m.connections,
        m.seconds,
        m.before_kib,
        m.after_kib,
        m.growth_kib(),
        m.peak_kib
    );
    for violation in &findings.violations {
        engine::outln!("violation: {violation}");
    }
}

fn json(report: &Report, findings: &Findings) -> serde_json::Value {
    let [alone, attack, again] = report.windows;
    let m = &report.memory;
    serde_json::json!({
        "cases": report.cases.iter().map(|c| serde_json::json!({
            "name": c.name,
            "expected": c.expected,
            "got": c.got,
            "passed": c.passed,
        })).collect::<Vec<_>>(),
        "failed": report.cases.iter().filter(|c| !c.passed).count(),
        "throughput": {
            "alone": alone,
            "under_attack": attack,
            "alone_again": again,
            "share": report.share,
        },
        "memory": {
            "node": 1,
            "seconds": m.seconds,
            "connections": m.connections,
            "before_kib": m.before_kib,
            "after_kib": m.after_kib,
            "growth_kib": m.growth_kib(),
            "peak_kib": m.peak_kib,
        },
        "violations": findings.violations,
    })
}
