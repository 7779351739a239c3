//! What the real-process fault runs (`runner chaos`, `runner partition`) share: the node
//! processes, the cluster files (optionally through our proxy), a Bank workload whose clients
//! never give up, and the checks of I1-I7 at the end, with the history of every operation
//! checked for linearizability against a sequential Bank ([`crate::linearize`]).

use crate::linearize::{self, BankModel, NotLinearizable, Operation};
use anyhow::Context;
use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use engine::client::{Client, ClientConfig, OperatorConfig, node_status};
use engine::node::local::free_loopback_addresses;
use engine::node::{ClusterFile, Key, NodeEntry, OperatorKey, WalIo};
use engine::rng::Rng;
use engine::{ClientId, EntryIndex, Outcome, RequestNumber};
use net::message::{NodeStatus, Role};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Accounts the clients move money between.
pub const FAULT_ACCOUNTS: u64 = 100;
/// The secret the nodes of a fault run share.
pub const FAULT_SECRET: &str = "the nodes of a fault run share this";
/// Each account's opening balance.
pub const FAULT_OPENING_BALANCE: u64 = 1_000_000;
/// Commands per request: one, so that the history is checked for linearizability command by
/// command (a request split between entries is not atomic).
pub const FAULT_COMMANDS_PER_REQUEST: usize = 1;
/// Percent of the clients' commands that read an account (`Get`); the others are transfers.
/// The reads are what makes a lost, doubled or stale transfer visible in the history.
pub const FAULT_GET_PERCENT: u64 = 25;
/// Time the healed cluster gets for the clients to finish and the nodes to converge.
pub const SETTLE_SECS: u64 = 60;
/// Time one status query may take.
pub const STATUS_TIMEOUT_MS: u64 = 300;
/// Time between two polls of every node's status (leaders per term, divergence).
pub const STATUS_POLL_MS: u64 = 50;
/// The fault runs' cluster id.
pub const CLUSTER_ID: u64 = 77;
/// The client that reads the final balances.
const CHECKER_CLIENT: ClientId = ClientId(1_000_000);

/// Options every fault run takes.
#[derive(clap::Args, Debug)]
pub struct FaultArgs {
    /// Writes the run's JSON summary here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where the run directories go (default /dev/shm).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seed of the fault schedule and the workload (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    pub clients: u64,
    /// Milliseconds after which a client's attempt also goes to a second node (0: never;
    /// default: the client library's, for comparisons).
    #[arg(long)]
    pub hedge_after_ms: Option<u64>,
    /// Where the nodes' WAL writes and fsyncs run (the cluster file's `wal_io`).
    #[arg(long, value_enum, default_value_t = WalIo::Auto)]
    pub wal_io: WalIo,
}

impl FaultArgs {
    /// The clients' configuration for `addresses`, with the hedge delay asked for.
    pub fn client_config(&self, addresses: &Addresses) -> ClientConfig {
        let mut config = addresses.client_config();
        if let Some(ms) = self.hedge_after_ms {
            config.hedge_after = (ms > 0).then(|| Duration::from_millis(ms));
        }
        config
    }
}

/// A seed from the clock, when none is given.
pub fn seed_or_clock(seed: Option<u64>) -> u64 {
    seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    })
}

/// The three node processes.
pub struct Processes {
    exe: PathBuf,
    /// Nodes that run another binary than this one (a rolling upgrade's builds).
    binaries: BTreeMap<u8, PathBuf>,
    /// Each node's cluster file (they differ only in the peer addresses a node dials).
    cluster_files: BTreeMap<u8, PathBuf>,
    dir: PathBuf,
    children: BTreeMap<u8, Child>,
    pub paused: BTreeSet<u8>,
    starts: BTreeMap<u8, usize>,
}

impl Processes {
    /// Starts the three nodes.
    pub fn start_all(dir: &Path, cluster_files: BTreeMap<u8, PathBuf>) -> anyhow::Result<Self> {
        Processes::start_all_from(dir, cluster_files, None)
    }

    /// Starts the three nodes from `binary` (this one when `None`).
    pub fn start_all_from(
        dir: &Path,
        cluster_files: BTreeMap<u8, PathBuf>,
        binary: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let binaries = match binary {
            Some(binary) => (1..=3).map(|id| (id, binary.to_path_buf())).collect(),
            None => BTreeMap::new(),
        };
        let mut processes = Processes {
            exe: runner::sibling_binary(runner::PRODUCT_BINARY)?,
            binaries,
            cluster_files,
            dir: dir.to_path_buf(),
            children: BTreeMap::new(),
            paused: BTreeSet::new(),
            starts: BTreeMap::new(),
        };
        for id in 1..=3 {
            processes.start(id)?;
        }
        Ok(processes)
    }

    pub fn start(&mut self, id: u8) -> anyhow::Result<()> {
        let start = self.starts.entry(id).or_default();
        *start += 1;
        let log = std::fs::File::create(self.dir.join(format!("node{id}.{start}.log")))?;
        let exe = self.binaries.get(&id).unwrap_or(&self.exe);
        let child = Command::new(exe)
            .args(["node", "--cluster"])
            .arg(&self.cluster_files[&id])
            .args(["--id", &id.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting runner node")?;
        self.children.insert(id, child);
        Ok(())
    }

    pub fn kill(&mut self, id: u8) {
        if let Some(mut child) = self.children.remove(&id) {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused.remove(&id);
    }

    /// Sends `signal` to node `id`'s process. std has no portable way to stop and continue a
    /// child process, hence kill(2).
    #[allow(unsafe_code)]
    fn signal(&mut self, id: u8, signal: libc::c_int) {
        if let Some(child) = self.children.get(&id) {
            let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
            // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is
            // our own child's, which we have not waited for, so it names no other process.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// Runs node `id` from `binary` at its next start.
    pub fn use_binary(&mut self, id: u8, binary: &Path) {
        self.binaries.insert(id, binary.to_path_buf());
    }

    /// Stops node `id` as an operator would (SIGTERM) and waits for its process to end.
    pub fn stop(&mut self, id: u8) {
        self.signal(id, libc::SIGTERM);
        if let Some(mut child) = self.children.remove(&id) {
            let _ = child.wait();
        }
    }

    pub fn pause(&mut self, id: u8) {
        self.signal(id, libc::SIGSTOP);
        self.paused.insert(id);
    }

    pub fn resume(&mut self, id: u8) {
        self.signal(id, libc::SIGCONT);
        self.paused.remove(&id);
    }

    /// Node `id`'s cluster file.
    pub fn cluster_file(&self, id: u8) -> &Path {
        &self.cluster_files[&id]
    }

    /// Node `id`'s process id, while it runs.
    pub fn pid(&self, id: u8) -> Option<u32> {
        self.children.get(&id).map(Child::id)
    }

    pub fn up(&self, id: u8) -> bool {
        self.children.contains_key(&id)
    }

    /// Every node running and none paused.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        for id in 1..=3 {
            if !self.up(id) {
                self.start(id)?;
            }
            if self.paused.contains(&id) {
                self.resume(id);
            }
        }
        Ok(())
    }

    pub fn kill_all(&mut self) {
        for id in 1..=3 {
            self.kill(id);
        }
    }

    /// The nodes whose process ended without being killed by us, each with its exit status
    /// and the end of its log (a node never exits by itself: a crash is a finding).
    pub fn crashed(&mut self) -> Vec<String> {
        let ended: Vec<(u8, std::process::ExitStatus)> = self
            .children
            .iter_mut()
            .filter_map(|(id, child)| Some((*id, child.try_wait().ok()??)))
            .collect();
        let mut found = Vec::new();
        for (id, status) in ended {
            self.children.remove(&id);
            let start = self.starts.get(&id).copied().unwrap_or(0);
            let log = self.dir.join(format!("node{id}.{start}.log"));
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(CRASH_LOG_LINES)..].join("\n    ");
            found.push(format!(
                "node {id} exited by itself ({status}); the end of {}:\n    {tail}",
                log.display()
            ));
        }
        found
    }
}

/// Lines of a crashed node's log that a finding quotes.
pub const CRASH_LOG_LINES: usize = 20;

impl Drop for Processes {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A bound listener for each directed link `(from, to)` between two nodes.
pub type RelayListeners = BTreeMap<(u8, u8), std::net::TcpListener>;

/// The real addresses of a three-node cluster.
pub struct Addresses {
    pub peers: BTreeMap<u8, SocketAddr>,
    pub clients: BTreeMap<u8, SocketAddr>,
}

impl Addresses {
    pub fn free() -> anyhow::Result<Self> {
        let all = free_loopback_addresses(3)?;
        Ok(Addresses {
            peers: all
                .iter()
                .map(|a| (a.id.0, numeric(&a.peer_address)))
                .collect(),
            clients: all
                .iter()
                .map(|a| (a.id.0, numeric(&a.client_address)))
                .collect(),
        })
    }

    /// Free addresses, and a listener for each directed link between two nodes, bound before
    /// the addresses were picked: a relay between the nodes (the proxy, delay lines) serves on
    /// them, and none of them can be a node's port (picking the relays' ports after the
    /// nodes', the kernel could hand a relay the port it had just given back for a node,
    /// which then cannot bind it).
    pub fn with_relays() -> anyhow::Result<(Self, RelayListeners)> {
        let mut relays = BTreeMap::new();
        for from in 1..=3u8 {
            for to in (1..=3u8).filter(|&to| to != from) {
                relays.insert((from, to), std::net::TcpListener::bind("127.0.0.1:0")?);
            }
        }
        Ok((Self::free()?, relays))
    }

    /// A client configuration that never gives up.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(CLUSTER_ID, self.clients.values().copied());
        config.give_up_after = None;
        config
    }

    /// The operator's configuration: the cluster files set no operator secret, so the
    /// operator key is the peer key's.
    pub fn operator_config(&self) -> OperatorConfig {
        let key = Addresses::operator_key();
        OperatorConfig::new(CLUSTER_ID, self.clients.values().copied(), key)
    }

    /// The operator key of a fault run's cluster (the peer key's).
    pub fn operator_key() -> OperatorKey {
        let peer = Key::peer(FAULT_SECRET.as_bytes()).expect("a long secret");
        OperatorKey::of_peer_key(&peer)
    }
}

/// Writes each node's cluster file under `dir`: its own peer address is the real one (it
/// binds it); the others are reached at `via(me, other)` when given (a proxy, delay lines).
pub fn write_cluster_files(
    dir: &Path,
    addresses: &Addresses,
    via: Option<&dyn Fn(u8, u8) -> SocketAddr>,
    wal_io: WalIo,
) -> anyhow::Result<BTreeMap<u8, PathBuf>> {
    let mut files = BTreeMap::new();
    for me in 1..=3u8 {
        let node = |id: u8| {
            let peer = match via {
                Some(via) if id != me => via(me, id),
                _ => addresses.peers[&id],
            };
            NodeEntry::new(
                id,
                peer,
                addresses.clients[&id],
                dir.join(format!("node{id}")),
            )
        };
        let mut file = ClusterFile::new(FAULT_SECRET, (1..=3u8).map(node).collect());
        file.cluster_id = CLUSTER_ID;
        file.wal_io = wal_io;
        let path = dir.join(format!("cluster.node{me}.toml"));
        file.write(&path)?;
        files.insert(me, path);
    }
    Ok(files)
}

/// Every reachable node's status.
pub async fn statuses(config: &ClientConfig) -> Vec<NodeStatus> {
    // All at once: one slow node costs a poll at most one timeout, not one per node.
    let timeout = Duration::from_millis(STATUS_TIMEOUT_MS);
    let polls = config
        .nodes
        .iter()
        .map(|address| node_status(config, address, timeout));
    futures::future::join_all(polls)
        .await
        .into_iter()
        .filter_map(Result::ok)
        .collect()
}

/// The leader among `all`, if one says so.
pub fn leader_of(all: &[NodeStatus]) -> Option<u8> {
    all.iter()
        .find(|s| s.role == Role::Leader)
        .map(|s| s.node.0)
}

/// What a run counts and finds.
#[derive(Default)]
pub struct Findings {
    pub kills: u64,
    pub pauses: u64,
    pub violations: Vec<String>,
    /// The leader seen in each term.
    pub leaders: BTreeMap<u64, u8>,
    /// The highest commit index any node reported.
    pub highest_commit: u64,
    /// Nodes restarted or resumed that have not caught up yet.
    pub rejoining: BTreeMap<u8, Rejoining>,
    /// How long each restarted or resumed node took to apply what was committed when it came
    /// back (to the status poll's resolution), the node, and the fault it came back from.
    pub rejoins: Vec<Rejoin>,
    /// Every fault, when it began.
    pub faults: Vec<(Instant, String)>,
    /// When each fault of `faults` ended (its nodes restarted or resumed), in the same order.
    pub fault_ends: Vec<Instant>,
    /// What the linearizability check of the clients' history found, once it ran.
    pub linearizability: Option<Linearizability>,
}

impl Findings {
    /// I7 and I2 from a round of statuses: one leader per term, no divergence, no halt.
    pub fn observe(&mut self, statuses: &[NodeStatus]) {
        for (node, rejoining) in &mut self.rejoining {
            let status = statuses.iter().find(|s| s.node.0 == *node);
            rejoining.seen(status);
        }
        for status in statuses {
            self.highest_commit = self.highest_commit.max(status.commit_index.0);
            let node = status.node.0;
            if self
                .rejoining
                .get(&node)
                .is_some_and(|r| status.applied_index.0 >= r.target)
                && let Some(back) = self.rejoining.remove(&node)
            {
                self.rejoins.push(Rejoin {
                    node,
                    took: back.since.elapsed(),
                    fault: back.fault,
                    timeline: back.timeline,
                    disturbed: back.disturbed,
                });
            }
            if status.role == Role::Leader {
                let term = status.term.0;
                match self.leaders.get(&term) {
                    Some(&other) if other != status.node.0 => self.violations.push(format!(
                        "I7: nodes {other} and {} both led term {term}",
                        status.node.0
                    )),
                    _ => {
                        self.leaders.insert(term, status.node.0);
                    }
                }
            }
            if let Some(divergence) = &status.divergence {
                self.violations
                    .push(format!("I2: node {} reports {divergence:?}", status.node.0));
            }
            if let Some(reason) = &status.halted {
                self.violations
                    .push(format!("node {} halted: {reason}", status.node.0));
            }
        }
        self.violations.dedup();
    }

    /// Node `node` is back (restarted or resumed): it rejoins once it applied what any node
    /// had committed by now.
    pub fn back(&mut self, node: u8) {
        let fault = self
            .faults
            .last()
            .map_or_else(String::new, |(_, what)| what.clone());
        let rejoining = Rejoining {
            since: Instant::now(),
            target: self.highest_commit,
            fault,
            timeline: Vec::new(),
            disturbed: false,
        };
        self.rejoining.insert(node, rejoining);
    }

    /// A fault begins now: `what` names it. A node still rejoining is disturbed by it.
    pub fn fault(&mut self, what: String) {
        self.faults.push((Instant::now(), what));
        for rejoining in self.rejoining.values_mut() {
            rejoining.disturbed = true;
        }
    }

    /// The median, 99th percentile and longest of the rejoins `which` selects, in
    /// milliseconds (zeros without any).
    pub fn rejoin_ms(&self, which: impl Fn(&Rejoin) -> bool) -> (f64, f64, f64) {
        let mut all: Vec<f64> = self
            .rejoins
            .iter()
            .filter(|r| which(r))
            .map(|r| r.took.as_secs_f64() * 1e3)
            .collect();
        all.sort_by(f64::total_cmp);
        let at = |q: f64| {
            all.get(((all.len() as f64 * q).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        (at(0.5), at(0.99), all.last().copied().unwrap_or(0.0))
    }
}

/// A node on its way back after a fault.
pub struct Rejoining {
    /// When it was restarted or resumed.
    pub since: Instant,
    /// The commit index it must apply to count as rejoined.
    pub target: u64,
    /// The fault it comes back from.
    pub fault: String,
    /// What each status poll saw of it meanwhile.
    pub timeline: Vec<String>,
    /// Another fault began meanwhile.
    pub disturbed: bool,
}

impl Rejoining {
    /// Notes what one status poll saw of the node (`None`: it did not answer).
    fn seen(&mut self, status: Option<&NodeStatus>) {
        let ms = self.since.elapsed().as_millis();
        self.timeline.push(match status {
            None => format!("{ms} ms: silent"),
            Some(s) => format!(
                "{ms} ms: {:?} term {} leader {:?} last {} commit {} applied {} (target {})",
                s.role,
                s.term.0,
                s.leader.map(|l| l.0),
                s.last_index.0,
                s.commit_index.0,
                s.applied_index.0,
                self.target
            ),
        });
    }
}

/// One node's return after a fault.
#[derive(Clone, Debug)]
pub struct Rejoin {
    /// The node.
    pub node: u8,
    /// From its restart or resumption until it applied what was committed then.
    pub took: Duration,
    /// The fault it came back from (`kill leader 2`, `pause follower 3`, ...).
    pub fault: String,
    /// What each status poll saw of it on the way (see [`Rejoining::timeline`]).
    pub timeline: Vec<String>,
    /// Another fault began before it rejoined.
    pub disturbed: bool,
}

impl Rejoin {
    /// Whether the fault struck this node alone (the others kept a majority meanwhile) and
    /// no other fault began before it rejoined.
    pub fn single(&self) -> bool {
        !self.fault.contains(" and ") && !self.disturbed
    }
}

/// Polls every node's status into `findings` until `watching` is cleared.
pub async fn watch(config: &ClientConfig, findings: &RefCell<Findings>, watching: &Cell<bool>) {
    while watching.get() {
        let all = statuses(config).await;
        findings.borrow_mut().observe(&all);
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
}

/// Clients sending transfers until stopped, never giving up on a request, and their model of
/// the accounts built from acknowledged outcomes only.
pub struct Workload {
    ledger: Rc<RefCell<Ledger>>,
    /// Every operation: its command, when it was invoked and completed (nanoseconds since
    /// the clients started), and its outcome.
    history: Rc<RefCell<History>>,
    pub acknowledged: Rc<Cell<u64>>,
    /// When each acknowledged request was answered, and how long it took.
    pub latencies: Rc<RefCell<Vec<(Instant, Duration)>>>,
    stop: Rc<Cell<bool>>,
    clients: Vec<tokio::task::JoinHandle<Result<(), ClientFailed>>>,
}

/// Why a client of the workload stopped before it was told to: clients never give up, so a
/// request that fails is a violation.
#[derive(Debug, thiserror::Error)]
pub enum ClientFailed {
    /// A request failed.
    #[error("client {client}: a request failed: {error}")]
    Request {
        /// The client's id.
        client: u128,
        /// Why.
        error: engine::client::ClientError,
    },
}

impl Workload {
    /// Opens the accounts, then starts `clients` clients (inside a `LocalSet`).
    pub async fn start(config: &ClientConfig, clients: u64, seed: u64) -> anyhow::Result<Self> {
        let ledger = Rc::new(RefCell::new(open_accounts(config).await?));
        let acknowledged = Rc::new(Cell::new(0u64));
        let latencies = Rc::new(RefCell::new(Vec::new()));
        let stop = Rc::new(Cell::new(false));
        let history = Rc::new(RefCell::new(History::default()));
        let mut handles = Vec::new();
        for k in 0..clients {
            let (ledger, acknowledged, stop) = (ledger.clone(), acknowledged.clone(), stop.clone());
            let (latencies, history) = (latencies.clone(), history.clone());
            let mut client = Client::new(
                config.clone(),
                ClientId(u128::from(10 + k)),
                RequestNumber(1),
            );
            let mut rng = Rng::new(seed ^ (k + 1).wrapping_mul(0x9E37_79B9));
            handles.push(tokio::task::spawn_local(async move {
                while !stop.get() {
                    let batch = commands(&mut rng);
                    let sent = Instant::now();
                    let slot = history.borrow_mut().invoked(k, &batch);
                    let outcomes = client.submit::<Bank>(&batch).await.map_err(|error| {
                        ClientFailed::Request {
                            client: client.id().0,
                            error,
                        }
                    })?;
                    history.borrow_mut().completed(slot, &outcomes);
                    latencies
                        .borrow_mut()
                        .push((Instant::now(), sent.elapsed()));
                    ledger.borrow_mut().record(&batch, &outcomes);
                    acknowledged.set(acknowledged.get() + 1);
                }
                Ok(())
            }));
        }
        Ok(Workload {
            ledger,
            history,
            acknowledged,
            latencies,
            stop,
            clients: handles,
        })
    }

    /// Stops the clients after their current request; returns the model's balance and version
    /// of every account, and how many clients could not finish their request within
    /// [`SETTLE_SECS`] (requests of unknown outcome), recording failures. The history is
    /// then complete for [`Workload::check_linearizable`].
    pub async fn finish(
        &mut self,
        findings: &RefCell<Findings>,
    ) -> (BTreeMap<u64, (u64, u64)>, u64) {
        self.stop.set(true);
        let settle = Instant::now() + Duration::from_secs(SETTLE_SECS);
        let mut unknown = 0;
        for client in std::mem::take(&mut self.clients) {
            match tokio::time::timeout_at(settle.into(), client).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(failure))) => findings.borrow_mut().violations.push(failure.to_string()),
                Ok(Err(panic)) => findings
                    .borrow_mut()
                    .violations
                    .push(format!("a client panicked: {panic}")),
                Err(_) => unknown += 1,
            }
        }
        if unknown > 0 {
            findings.borrow_mut().violations.push(format!(
                "I6: {unknown} requests without an outcome {SETTLE_SECS} s after healing"
            ));
        }
        let expected = self.ledger.borrow().accounts.clone();
        (expected, unknown)
    }
}

impl Workload {
    /// The stretches between `from` and `to` of at least `least` in which no request was
    /// answered, longest first.
    pub fn stalls(&self, from: Instant, to: Instant, least: Duration) -> Vec<(Instant, Instant)> {
        let mut answered: Vec<Instant> = self
            .latencies
            .borrow()
            .iter()
            .map(|(at, _)| *at)
            .filter(|at| (from..=to).contains(at))
            .collect();
        answered.sort();
        let mut previous = from;
        let mut stalls = Vec::new();
        for at in answered.into_iter().chain([to]) {
            if at.saturating_duration_since(previous) >= least {
                stalls.push((previous, at));
            }
            previous = at;
        }
        stalls.sort_by_key(|(start, end)| std::cmp::Reverse(*end - *start));
        stalls
    }

    /// The median and 99th percentile of the latencies of requests answered since `from`, in
    /// milliseconds (zeros when none were).
    pub fn latency_since(&self, from: Instant) -> (f64, f64) {
        let mut window: Vec<Duration> = self
            .latencies
            .borrow()
            .iter()
            .filter(|(at, _)| *at >= from)
            .map(|(_, took)| *took)
            .collect();
        if window.is_empty() {
            return (0.0, 0.0);
        }
        window.sort_unstable();
        let at = |q: f64| {
            let k = ((window.len() as f64 * q).ceil() as usize).clamp(1, window.len()) - 1;
            window[k].as_secs_f64() * 1e3
        };
        (at(0.50), at(0.99))
    }
}

/// Waits until the three nodes applied everything committed with one state hash (I2).
pub async fn converge(config: &ClientConfig, findings: &RefCell<Findings>) {
    let deadline = Instant::now() + Duration::from_secs(SETTLE_SECS);
    loop {
        let all = statuses(config).await;
        let converged = all.len() == 3
            && all.iter().all(|s| {
                s.applied_index == all[0].applied_index
                    && s.state_hash == all[0].state_hash
                    && s.applied_index >= s.commit_index
            });
        if converged {
            findings.borrow_mut().observe(&all);
            return;
        }
        if Instant::now() > deadline {
            let silent: Vec<u8> = (1..=3u8)
                .filter(|id| all.iter().all(|s| s.node.0 != *id))
                .collect();
            findings.borrow_mut().violations.push(format!(
                "I2: the nodes did not converge {SETTLE_SECS} s after healing (silent: {silent:?}): {all:?}"
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The clients' operations, for the linearizability check.
#[derive(Default)]
pub struct History {
    /// When the clients started.
    epoch: Option<Instant>,
    /// Every operation, in the order invoked.
    operations: Vec<Operation<BankCommand, Outcome<BankOutput, bank::BankError>>>,
}

impl History {
    /// Client `client` invokes `batch` now: one operation per command; returns the first.
    fn invoked(&mut self, client: u64, batch: &[BankCommand]) -> usize {
        let epoch = *self.epoch.get_or_insert_with(Instant::now);
        let invoked = epoch.elapsed().as_nanos() as u64;
        let slot = self.operations.len();
        self.operations
            .extend(batch.iter().map(|command| Operation {
                client,
                invoked,
                completed: None,
                input: command.clone(),
                output: None,
            }));
        slot
    }

    /// The operations from `slot` completed now with `outcomes`.
    fn completed(&mut self, slot: usize, outcomes: &[Outcome<BankOutput, bank::BankError>]) {
        let epoch = self.epoch.expect("invoked first");
        let completed = epoch.elapsed().as_nanos() as u64;
        for (operation, outcome) in self.operations[slot..].iter_mut().zip(outcomes) {
            operation.completed = Some(completed);
            operation.output = Some(outcome.clone());
        }
    }
}

/// What the linearizability check of a run's history found.
pub struct Linearizability {
    /// Operations checked (those of unknown outcome included).
    pub operations: u64,
    /// Whether a linearization was found (`None`: the search gave up, inconclusive).
    pub linearizable: Option<bool>,
    /// How long the check took, in milliseconds.
    pub took_ms: f64,
}

impl Workload {
    /// Checks every operation's outcome against a sequential Bank in some order consistent
    /// with real time (`linearize::check`), into `findings`; a history with no such order is
    /// a violation that names the first window that cannot be explained. It takes a while
    /// (about 0.4 ms per thousand operations) and holds the thread: run it after the
    /// measurements.
    pub fn check_linearizable(&self, findings: &RefCell<Findings>) {
        let checked = self.linearizability(findings);
        findings.borrow_mut().linearizability = Some(checked);
    }

    fn linearizability(&self, findings: &RefCell<Findings>) -> Linearizability {
        let history = self.history.borrow();
        let started = Instant::now();
        let model = BankModel::new(FAULT_ACCOUNTS, FAULT_OPENING_BALANCE);
        let result = linearize::check(&model, &history.operations);
        let took_ms = started.elapsed().as_secs_f64() * 1e3;
        let operations = history.operations.len() as u64;
        let linearizable = match result {
            Ok(_) => Some(true),
            Err(NotLinearizable::Inconclusive { .. }) => None,
            Err(
                NotLinearizable::Violation(_)
                | NotLinearizable::CompletedBeforeInvoked { .. }
                | NotLinearizable::HalfKnownOutcome { .. },
            ) => Some(false),
        };
        if let Err(error) = result {
            findings
                .borrow_mut()
                .violations
                .push(format!("linearizability: {error}"));
        }
        Linearizability {
            operations,
            linearizable,
            took_ms,
        }
    }
}

/// The clients' model of the accounts: balance and version, from acknowledged outcomes only.
struct Ledger {
    accounts: BTreeMap<u64, (u64, u64)>,
}

impl Ledger {
    fn record(&mut self, batch: &[BankCommand], outcomes: &[Outcome<BankOutput, bank::BankError>]) {
        for (command, outcome) in batch.iter().zip(outcomes) {
            if let (BankCommand::Transfer { from, to, amount }, Outcome::Done(_)) =
                (command, outcome)
            {
                let debit = self.accounts.get_mut(&from.0).expect("a workload account");
                // Clients' answers arrive in their own order, not the log's, so a debit may be
                // recorded before the credit that paid for it: the sums wrap meanwhile and come
                // out exact once every outcome is in (addition commutes modulo 2^64).
                debit.0 = debit.0.wrapping_sub(*amount);
                debit.1 += 1;
                let credit = self.accounts.get_mut(&to.0).expect("a workload account");
                credit.0 = credit.0.wrapping_add(*amount);
                credit.1 += 1;
            }
        }
    }
}

async fn open_accounts(config: &ClientConfig) -> anyhow::Result<Ledger> {
    let mut client = Client::new(config.clone(), ClientId(1), RequestNumber(1));
    let opens: Vec<BankCommand> = (0..FAULT_ACCOUNTS)
        .map(|n| BankCommand::Open {
            id: account_id(n),
            balance: FAULT_OPENING_BALANCE,
            flags: 0,
        })
        .collect();
    let outcomes = client.submit::<Bank>(&opens).await?;
    anyhow::ensure!(
        outcomes.iter().all(|o| matches!(o, Outcome::Done(_))),
        "opening the accounts failed: {outcomes:?}"
    );
    Ok(Ledger {
        accounts: (0..FAULT_ACCOUNTS)
            .map(|n| (account_id(n).0, (FAULT_OPENING_BALANCE, 1)))
            .collect(),
    })
}

fn commands(rng: &mut Rng) -> Vec<BankCommand> {
    (0..FAULT_COMMANDS_PER_REQUEST)
        .map(|_| {
            if rng.below(100) < FAULT_GET_PERCENT {
                return BankCommand::Get {
                    id: account_id(rng.below(FAULT_ACCOUNTS)),
                };
            }
            let from = rng.below(FAULT_ACCOUNTS);
            let to = (from + 1 + rng.below(FAULT_ACCOUNTS - 1)) % FAULT_ACCOUNTS;
            BankCommand::Transfer {
                from: account_id(from),
                to: account_id(to),
                amount: 1 + rng.below(50_000),
            }
        })
        .collect()
}

/// I1, I3, I5: reads every account and the audit through the log and compares them with
/// the model.
pub async fn check_accounts(
    config: &ClientConfig,
    expected: &BTreeMap<u64, (u64, u64)>,
    findings: &RefCell<Findings>,
) {
    let mut client = Client::new(config.clone(), CHECKER_CLIENT, RequestNumber(1));
    let mut reads: Vec<BankCommand> = (0..FAULT_ACCOUNTS)
        .map(|n| BankCommand::Get { id: account_id(n) })
        .collect();
    reads.push(BankCommand::Audit);
    let answers = match tokio::time::timeout(
        Duration::from_secs(SETTLE_SECS),
        client.submit::<Bank>(&reads),
    )
    .await
    {
        Ok(Ok(answers)) => answers,
        Ok(Err(error)) => {
            findings
                .borrow_mut()
                .violations
                .push(format!("the final read failed: {error}"));
            return;
        }
        Err(_) => {
            findings
                .borrow_mut()
                .violations
                .push("I6: the final read got no answer".into());
            return;
        }
    };
    let mut findings = findings.borrow_mut();
    for (n, answer) in answers[..FAULT_ACCOUNTS as usize].iter().enumerate() {
        let expected = expected[&account_id(n as u64).0];
        let actual = match answer {
            Outcome::Done(BankOutput::Account(account)) => Some((account.balance, account.version)),
            Outcome::Done(_) | Outcome::Failed(_) | Outcome::Invalid => None,
        };
        if actual != Some(expected) {
            findings.violations.push(format!(
                "I1/I5: account {n} is {answer:?}, acknowledged outcomes give (balance, version) {expected:?}"
            ));
        }
    }
    let total = u128::from(FAULT_ACCOUNTS) * u128::from(FAULT_OPENING_BALANCE);
    match answers.last() {
        Some(Outcome::Done(BankOutput::Audit { accounts, total: t }))
            if *accounts == FAULT_ACCOUNTS && *t == total => {}
        other => findings.violations.push(format!(
            "I3: the audit gives {other:?}, expected {FAULT_ACCOUNTS} accounts holding {total}"
        )),
    }
}

/// I4: the nodes' WALs (nodes stopped) hold the same entry at every index they all hold.
pub fn compare_wals(dir: &Path, findings: &mut Findings) {
    let mut wals = Vec::new();
    for id in 1..=3 {
        let path = dir
            .join(format!("node{id}"))
            .join(engine::internals::storage::hard_state::WAL_DIR);
        // Read-only: the checker looks at the evidence and changes none of it.
        let segment_bytes = engine::internals::wal::WAL_SEGMENT_BYTES_DEFAULT;
        match engine::internals::wal::Wal::scan_repairing(
            &path,
            segment_bytes,
            engine::internals::wal::Access::ReadOnly,
        ) {
            Ok((_, recovery)) if recovery.damage.is_some() => findings.violations.push(format!(
                "node {id}: its WAL is damaged: {:?}",
                recovery.damage
            )),
            Ok((wal, _)) => wals.push(wal),
            Err(error) => findings
                .violations
                .push(format!("node {id}: its WAL does not open: {error}")),
        }
    }
    let (Some(first), Some(last)) = (
        wals.iter().map(|w| w.first_index()).max(),
        wals.iter().map(|w| w.last_index()).min(),
    ) else {
        return;
    };
    for index in first.0..=last.0 {
        let hashes: Vec<_> = wals
            .iter()
            .filter_map(|w| w.hash_at(EntryIndex(index)))
            .collect();
        if hashes.iter().any(|h| *h != hashes[0]) {
            findings
                .violations
                .push(format!("I4: the WALs differ at entry {index}"));
            return;
        }
    }
}

/// A loopback address handed out by `free_loopback_addresses`, as the socket address the
/// proxies and fault tools use.
fn numeric(address: &engine::Address) -> SocketAddr {
    address
        .socket_addr()
        .expect("free loopback addresses are numeric")
}
