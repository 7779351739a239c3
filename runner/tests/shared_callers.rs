//! Many concurrent callers sharing ONE `engine::client::SharedClient<Bank>` against three real
//! `runner node` processes, with a fault in the middle of their run: the leader killed
//! (SIGKILL), or a follower cut off from both peers and then healed, through a TCP relay on
//! every peer link as `runner partition` does (its proxy lives in the harness binary, which a
//! test cannot link, so the few lines of it needed here are below). Every caller gets exactly its own outcomes (each deposit answers the caller's own
//! running sum; each too-large withdrawal is refused for that caller alone), every deposit
//! applies exactly once, the audit's total is the sum of the deposits, and the replicas
//! converge on one state hash.

mod common;

use bank::{Account, AccountId, Bank, BankCommand, BankError, BankOutput};
use common::{Nodes, WAIT, converged, leader_of, wait_for};
use engine::Outcome;
use engine::client::{ClientConfig, SharedClient, SharedOptions};
use engine::node::ClusterFile;
use futures::FutureExt;
use net::message::{NodeStatus, Role};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Concurrent callers, each a tokio task with an account of its own.
const CALLERS: u64 = 96;
/// Deposits each caller makes, one command per call.
const DEPOSITS: u64 = 24;
/// Caller `c` deposits `c * DEPOSIT_UNITS` (currency units) every time.
const DEPOSIT_UNITS: u64 = 1_000;
/// After every this many of its deposits, a caller asks to withdraw one unit more than it has.
const REFUSE_EVERY_DEPOSITS: u64 = 4;
/// Deposits answered, over all callers, before the fault is made: it lands mid-run.
const FAULT_AFTER_DEPOSITS: u64 = CALLERS * DEPOSITS / 4;
/// The deposit no caller submits before the fault is in place: the fault comes before any
/// caller is half done, and every later deposit runs through it.
const FAULT_GATE_DEPOSIT: u64 = DEPOSITS / 2;
/// The deposit no caller submits before a partition heals: every deposit from
/// [`FAULT_GATE_DEPOSIT`] to this one's predecessor commits while the follower is cut off.
const HEAL_GATE_DEPOSIT: u64 = DEPOSITS * 3 / 4;
/// Commands per engine request at most.
const BATCH_MAX_COMMANDS: usize = 256;
/// Engine requests the shared client keeps in flight at most.
const INFLIGHT_REQUESTS: usize = 4;
/// Bytes a relay forwards per read.
const RELAY_BUFFER_BYTES: usize = 256 * 1024;
/// Worker threads of the callers' runtime (the machine has two cores).
const WORKER_THREADS: usize = 2;

/// The stage of a run before its fault (the test announces each stage to the callers).
const STAGE_CALM: u8 = 0;
/// The fault is in place: the leader killed, or the follower cut off.
const STAGE_FAULTED: u8 = 1;
/// The cut-off follower's links forward again.
const STAGE_HEALED: u8 = 2;

/// Where callers wait: before deposit `.0`, until the stage is at least `.1`.
type Gates = &'static [(u64, u8)];

/// What caller `caller` deposits each time.
fn amount(caller: u64) -> u64 {
    caller * DEPOSIT_UNITS
}

/// Caller `caller`'s account after `deposits` of its deposits (and any refusals).
fn account_after(caller: u64, deposits: u64) -> Account {
    Account {
        balance: deposits * amount(caller),
        version: 1 + deposits,
        flags: 0,
    }
}

/// A multi-thread runtime for the callers (and the relays).
fn callers_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build()
        .unwrap()
}

/// What the callers have done so far, as the test sees it.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    deposits: u64,
    failed_callers: u64,
}

/// The callers' tasks, the client they share and the channels between them and the test.
struct Callers {
    client: SharedClient<Bank>,
    progress: watch::Receiver<Progress>,
    stage: watch::Sender<u8>,
    tasks: Vec<JoinHandle<()>>,
}

impl Callers {
    /// Starts [`CALLERS`] tasks sharing one client, waiting at `gates`. Call in the runtime.
    fn start(config: &ClientConfig, gates: Gates) -> Callers {
        let options = SharedOptions {
            inflight: INFLIGHT_REQUESTS,
            ..SharedOptions::new(BATCH_MAX_COMMANDS)
        };
        let client = SharedClient::<Bank>::start(config.clone(), options);
        let (reporter, progress) = watch::channel(Progress::default());
        let reporter = Arc::new(reporter);
        let (stage, stage_seen) = watch::channel(STAGE_CALM);
        let tasks = (1..=CALLERS)
            .map(|caller| {
                let run = call(
                    client.clone(),
                    caller,
                    gates,
                    stage_seen.clone(),
                    reporter.clone(),
                );
                let reporter = reporter.clone();
                tokio::spawn(async move {
                    if let Err(panic) = AssertUnwindSafe(run).catch_unwind().await {
                        reporter.send_modify(|p| p.failed_callers += 1);
                        std::panic::resume_unwind(panic);
                    }
                })
            })
            .collect();
        Callers {
            client,
            progress,
            stage,
            tasks,
        }
    }

    /// Waits until the callers have had `deposits` deposits answered; fails at once if a
    /// caller failed, and after [`WAIT`].
    async fn reached(&mut self, deposits: u64, what: &str) {
        let enough = |p: &Progress| p.failed_callers > 0 || p.deposits >= deposits;
        let waited = tokio::time::timeout(WAIT, self.progress.wait_for(enough)).await;
        let progress = *waited
            .unwrap_or_else(|_| panic!("timed out waiting for {deposits} deposits ({what})"))
            .expect("the callers report until they finish");
        assert_eq!(
            progress.failed_callers, 0,
            "a caller failed (its panic is above) before {what}: {progress:?}"
        );
    }

    /// Deposits answered so far.
    fn answered(&self) -> u64 {
        self.progress.borrow().deposits
    }

    /// Lets the callers waiting for `stage` go on.
    fn announce(&self, stage: u8) {
        self.stage.send_replace(stage);
    }

    /// Waits for every caller to finish (each checked its own outcomes) and returns their
    /// client; a caller's panic is the test's.
    async fn finish(self) -> SharedClient<Bank> {
        for task in self.tasks {
            let joined = tokio::time::timeout(WAIT, task).await;
            match joined.expect("every caller finishes") {
                Ok(()) => {}
                Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                Err(error) => panic!("a caller did not finish: {error}"),
            }
        }
        self.client
    }
}

/// One caller: opens its account, then deposits one command per call (waiting at `gates`),
/// checking each answer is its own account after exactly its own deposits; every
/// [`REFUSE_EVERY_DEPOSITS`] deposits it asks for too much and must be refused alone.
async fn call(
    client: SharedClient<Bank>,
    caller: u64,
    gates: Gates,
    mut stage: watch::Receiver<u8>,
    reporter: Arc<watch::Sender<Progress>>,
) {
    let id = AccountId(caller);
    let open = BankCommand::Open {
        id,
        balance: 0,
        flags: 0,
    };
    let opened = client.submit_one(open).await;
    let expected = Outcome::Done(BankOutput::Account(account_after(caller, 0)));
    assert!(
        matches!(&opened, Ok(outcome) if *outcome == expected),
        "caller {caller}: its open: {opened:?}"
    );
    for deposit in 1..=DEPOSITS {
        for &(_, needed) in gates.iter().filter(|(at, _)| *at == deposit) {
            let announced = stage.wait_for(|s| *s >= needed).await;
            announced.expect("the test announces every stage");
        }
        let balance = deposit_once(&client, caller, deposit).await;
        reporter.send_modify(|p| p.deposits += 1);
        if deposit % REFUSE_EVERY_DEPOSITS == 0 {
            refused_withdrawal(&client, caller, balance).await;
        }
    }
}

/// Caller `caller`'s deposit number `deposit`: answered with its own account after exactly
/// `deposit` deposits (balance and version). Returns the balance.
async fn deposit_once(client: &SharedClient<Bank>, caller: u64, deposit: u64) -> u64 {
    let command = BankCommand::Deposit {
        id: AccountId(caller),
        amount: amount(caller),
    };
    let outcome = client.submit_one(command).await;
    let expected = account_after(caller, deposit);
    match outcome {
        Ok(Outcome::Done(BankOutput::Account(account))) => assert_eq!(
            account, expected,
            "caller {caller}, deposit {deposit}: not its own running sum (applied twice, lost, \
             or another caller's outcome)"
        ),
        other => panic!("caller {caller}, deposit {deposit}: {other:?}"),
    }
    expected.balance
}

/// Caller `caller` asks to withdraw one unit more than its `balance`: refused, with its own
/// balance in the refusal.
async fn refused_withdrawal(client: &SharedClient<Bank>, caller: u64, balance: u64) {
    let too_much = BankCommand::Withdraw {
        id: AccountId(caller),
        amount: balance + 1,
    };
    let refused = client.submit_one(too_much).await;
    let expected = BankError::InsufficientFunds {
        balance,
        amount: balance + 1,
    };
    assert!(
        matches!(&refused, Ok(Outcome::Failed(error)) if *error == expected),
        "caller {caller}: a withdrawal of more than its balance {balance}: {refused:?}"
    );
}

/// Reads every caller's account and the audit through the shared client: each account holds
/// exactly its caller's deposits (each applied once), and the audit's total is their sum.
async fn check_balances_and_audit(client: &SharedClient<Bank>) {
    let reads: Vec<BankCommand> = (1..=CALLERS)
        .map(|caller| BankCommand::Get {
            id: AccountId(caller),
        })
        .chain([BankCommand::Audit])
        .collect();
    let read = client.submit(reads).await.expect("the final reads");
    for (caller, outcome) in (1..=CALLERS).zip(&read) {
        let expected = Outcome::Done(BankOutput::Account(account_after(caller, DEPOSITS)));
        assert_eq!(outcome, &expected, "caller {caller}: every deposit once");
    }
    let total: u128 = (1..=CALLERS)
        .map(|caller| u128::from(DEPOSITS * amount(caller)))
        .sum();
    let audit = BankOutput::Audit {
        accounts: CALLERS,
        total,
    };
    assert_eq!(
        read[CALLERS as usize],
        Outcome::Done(audit),
        "the audit: every deposit counted once, nothing else"
    );
}

/// The node leading now, once all three answer and one leads.
async fn current_leader(config: &ClientConfig) -> u8 {
    let all = wait_for(config, "three nodes up with a leader", |all| {
        all.len() == 3 && leader_of(all).is_some()
    })
    .await;
    leader_of(&all).expect("a leader").0
}

/// True when exactly `count` nodes answer, none of them `absent`, one leads, and all have
/// applied everything committed with one state hash.
fn agree(all: &[NodeStatus], count: usize, absent: u8) -> bool {
    all.len() == count
        && all.iter().all(|s| s.node.0 != absent)
        && leader_of(all).is_some()
        && all.iter().all(|s| {
            s.applied_index == all[0].applied_index
                && s.commit_index == all[0].commit_index
                && s.applied_index >= s.commit_index
                && s.state_hash == all[0].state_hash
        })
}

/// Proves callers sharing one client, with the leader process killed (SIGKILL) mid-run, each
/// get exactly their own outcomes, every deposit applies once, the audit holds, the two
/// remaining replicas elect a new leader and agree, and the killed node catches up on restart.
#[test]
fn shared_callers_get_their_own_outcomes_once_through_a_leader_kill() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config) = common::start_cluster(dir.path(), |_| {});
    callers_runtime().block_on(async {
        current_leader(&config).await;
        let mut callers = Callers::start(&config, &[(FAULT_GATE_DEPOSIT, STAGE_FAULTED)]);
        callers
            .reached(FAULT_AFTER_DEPOSITS, "the leader's kill")
            .await;
        let killed = current_leader(&config).await;
        nodes.kill(killed);
        eprintln!(
            "killed leader {killed} after {} deposits",
            callers.answered()
        );
        callers.announce(STAGE_FAULTED);
        let client = callers.finish().await;
        check_balances_and_audit(&client).await;
        let survivors = wait_for(
            &config,
            "the two survivors to agree under a new leader",
            |all| agree(all, 2, killed),
        )
        .await;
        assert!(
            survivors
                .iter()
                .all(|s| s.divergence.is_none() && s.halted.is_none()),
            "{survivors:?}"
        );
        nodes.start(killed);
        converged(&config).await;
    });
    eprintln!("leader kill: {:.1} s", started.elapsed().as_secs_f64());
}

/// A listener for each directed link between two nodes, keyed `(from, to)`.
type RelayListeners = BTreeMap<(u8, u8), std::net::TcpListener>;

/// A relay on every directed link between the nodes, forwarding to the destination's real
/// peer address; a cut link closes its connections and refuses new ones (the harness proxy's
/// `LinkMode::Drop`). A node's connection to another carries what it says one way only, so
/// the link `(a, b)` is what `a` says to `b`.
struct Relays {
    cut: BTreeMap<(u8, u8), watch::Sender<bool>>,
    addresses: BTreeMap<(u8, u8), SocketAddr>,
}

impl Relays {
    /// Serves each link `(from, to)` on `listeners[&(from, to)]`, forwarding to `peers[&to]`.
    /// Call in the runtime.
    fn start(peers: &BTreeMap<u8, SocketAddr>, listeners: RelayListeners) -> Relays {
        let mut relays = Relays {
            cut: BTreeMap::new(),
            addresses: BTreeMap::new(),
        };
        for (link, listener) in listeners {
            listener.set_nonblocking(true).unwrap();
            let listener = TcpListener::from_std(listener).unwrap();
            relays
                .addresses
                .insert(link, listener.local_addr().unwrap());
            let (cut, cut_seen) = watch::channel(false);
            relays.cut.insert(link, cut);
            tokio::spawn(relay(listener, peers[&link.1], cut_seen));
        }
        relays
    }

    /// The address node `from` dials to reach node `to`.
    fn address(&self, from: u8, to: u8) -> SocketAddr {
        self.addresses[&(from, to)]
    }

    /// Cuts every link to and from `node`.
    fn cut_off(&self, node: u8) {
        for ((from, to), cut) in &self.cut {
            if *from == node || *to == node {
                cut.send_replace(true);
            }
        }
    }

    /// Every link forwards again.
    fn heal(&self) {
        for cut in self.cut.values() {
            cut.send_replace(false);
        }
    }
}

/// One link: each connection accepted while the link is not cut is forwarded to `target`.
async fn relay(listener: TcpListener, target: SocketAddr, cut: watch::Receiver<bool>) {
    while let Ok((inbound, _)) = listener.accept().await {
        if *cut.borrow() {
            // Refused: closed at once.
            continue;
        }
        let cut = cut.clone();
        tokio::spawn(async move {
            if let Ok(outbound) = TcpStream::connect(target).await {
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                forward(inbound, outbound, cut).await;
            }
        });
    }
}

/// Carries bytes from `inbound` to `outbound` (and back) until either side closes or the link
/// is cut; the cut is checked after every read, so nothing read after it is forwarded.
async fn forward(inbound: TcpStream, outbound: TcpStream, mut cut: watch::Receiver<bool>) {
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut out_read, &mut in_write).await;
    });
    let mut buffer = vec![0u8; RELAY_BUFFER_BYTES];
    loop {
        let read = tokio::select! {
            read = in_read.read(&mut buffer) => read,
            _ = cut.wait_for(|cut| *cut) => break,
        };
        let Ok(length @ 1..) = read else { break };
        if *cut.borrow() || out_write.write_all(&buffer[..length]).await.is_err() {
            break;
        }
    }
    back.abort();
}

/// A listener for each directed link between the three nodes, bound before the nodes'
/// addresses are picked (so that none is a node's port).
fn relay_listeners() -> RelayListeners {
    let links = (1..=3u8).flat_map(|from| {
        (1..=3u8)
            .filter(move |&to| to != from)
            .map(move |to| (from, to))
    });
    links
        .map(|link| (link, std::net::TcpListener::bind("127.0.0.1:0").unwrap()))
        .collect()
}

/// Starts three nodes whose peer links all go through [`Relays`], as `runner partition` does:
/// each node's own cluster file names its own real peer address and the relay of its link to
/// each other node. Call in the runtime.
fn start_relayed_cluster(dir: &Path) -> (Nodes, ClientConfig, Relays) {
    let listeners = relay_listeners();
    let mut written = None;
    let (shared_file, config) =
        common::write_cluster_file(dir, |file| written = Some(file.clone()));
    let file: ClusterFile = written.expect("the cluster file was written");
    let peers: BTreeMap<u8, SocketAddr> = file
        .nodes
        .iter()
        .map(|n| {
            (
                n.id,
                n.peer_address.socket_addr().expect("a loopback address"),
            )
        })
        .collect();
    let relays = Relays::start(&peers, listeners);
    let mut nodes = Nodes::new(dir, shared_file.clone());
    for me in 1..=3u8 {
        let mut mine = file.clone();
        for node in mine.nodes.iter_mut().filter(|n| n.id != me) {
            node.peer_address = relays.address(me, node.id).into();
        }
        nodes.cluster_file = dir.join(format!("cluster.node{me}.toml"));
        mine.write(&nodes.cluster_file).unwrap();
        nodes.start(me);
    }
    nodes.cluster_file = shared_file;
    (nodes, config, relays)
}

/// Cuts a follower off from both other nodes (every link to and from it drops its
/// connections and refuses new ones); returns it.
async fn cut_off_a_follower(config: &ClientConfig, relays: &Relays) -> u8 {
    let leader = current_leader(config).await;
    let follower = (1..=3u8).find(|&n| n != leader).expect("two followers");
    relays.cut_off(follower);
    follower
}

/// Waits until the two nodes other than the cut-off `follower` agree (one leads, both applied
/// everything committed, one state hash), then checks the follower is behind them: the
/// majority committed without it.
async fn check_left_behind(config: &ClientConfig, follower: u8) {
    let all = wait_for(config, "the majority side to agree", |all| {
        let majority: Vec<NodeStatus> = all
            .iter()
            .filter(|s| s.node.0 != follower)
            .cloned()
            .collect();
        all.len() == 3 && agree(&majority, 2, follower)
    })
    .await;
    let cut = all.iter().find(|s| s.node.0 == follower).expect("answered");
    let majority = all.iter().find(|s| s.node.0 != follower).expect("answered");
    assert!(
        cut.role != Role::Leader && cut.commit_index < majority.commit_index,
        "the cut-off follower {follower} should be behind the majority: {all:?}"
    );
}

/// Proves callers sharing one client, with a follower cut off from both peers (through the
/// relays) mid-run and then healed, each get exactly their own outcomes, every deposit applies
/// once, the majority commits while the follower is cut off, the audit holds, and all three
/// replicas converge on one state hash after healing.
#[test]
fn shared_callers_get_their_own_outcomes_once_through_a_follower_partition() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    callers_runtime().block_on(async {
        let (nodes, config, relays) = start_relayed_cluster(dir.path());
        current_leader(&config).await;
        let gates = &[
            (FAULT_GATE_DEPOSIT, STAGE_FAULTED),
            (HEAL_GATE_DEPOSIT, STAGE_HEALED),
        ];
        let mut callers = Callers::start(&config, gates);
        callers
            .reached(FAULT_AFTER_DEPOSITS, "the follower's cut")
            .await;
        let follower = cut_off_a_follower(&config, &relays).await;
        eprintln!(
            "cut follower {follower} off after {} deposits",
            callers.answered()
        );
        callers.announce(STAGE_FAULTED);
        let at_heal_gate = CALLERS * (HEAL_GATE_DEPOSIT - 1);
        callers
            .reached(
                at_heal_gate,
                "every caller at the heal gate, the follower cut off",
            )
            .await;
        check_left_behind(&config, follower).await;
        relays.heal();
        callers.announce(STAGE_HEALED);
        let client = callers.finish().await;
        check_balances_and_audit(&client).await;
        converged(&config).await;
        drop(nodes);
    });
    eprintln!(
        "follower partition: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
