//! What the real-process cluster tests share: the node processes, the cluster file, status
//! polling, and a client-side model of the Bank built only from acknowledged outcomes.

#![allow(dead_code)]

pub mod gateway;
pub mod probe;
pub mod rabbit;

use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use engine::client::{Client, ClientConfig, node_status};
use engine::node::local::free_loopback_addresses;
use engine::node::{ClusterFile, NodeEntry};
use engine::rng::Rng;
use engine::{NodeId, Outcome};
use net::message::{NodeStatus, Role};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ACCOUNTS: u64 = 100;
pub const OPENING_BALANCE: u64 = 1_000_000;
pub const TRANSFERS_PER_REQUEST: usize = 16;
pub const WAIT: Duration = Duration::from_secs(60);
pub const CLUSTER_ID: u64 = 9;
/// The secret the test clusters' nodes share.
pub const TEST_SECRET: &str = "the nodes of a test cluster share this";

/// The node processes; killed when dropped.
pub struct Nodes {
    pub cluster_file: PathBuf,
    pub children: BTreeMap<u8, Child>,
    pub dir: PathBuf,
    /// How many times each node was started (each start logs to its own file).
    pub starts: BTreeMap<u8, usize>,
}

impl Nodes {
    pub fn new(dir: &Path, cluster_file: PathBuf) -> Self {
        Nodes {
            cluster_file,
            children: BTreeMap::new(),
            dir: dir.to_path_buf(),
            starts: BTreeMap::new(),
        }
    }

    pub fn start(&mut self, id: u8) {
        self.start_with(id, &[]);
    }

    /// Starts node `id` with `extra` arguments after the usual ones.
    pub fn start_with(&mut self, id: u8, extra: &[&str]) {
        let start = self.starts.entry(id).or_default();
        *start += 1;
        let log_path = self.dir.join(format!("node{id}.{start}.log"));
        let log = std::fs::File::create(log_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_runner"))
            .args(["node", "--cluster"])
            .arg(&self.cluster_file)
            .args(["--id", &id.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("runner node starts");
        self.children.insert(id, child);
    }

    pub fn kill(&mut self, id: u8) {
        let mut child = self.children.remove(&id).expect("running");
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
    }

    /// Waits for node `id`'s process to exit on its own (a refused start) and returns how it
    /// ended; fails the test after [`WAIT`].
    pub fn wait_exit(&mut self, id: u8) -> std::process::ExitStatus {
        let mut child = self.children.remove(&id).expect("started");
        let pid = child.id();
        let (done, exited) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(child.wait().unwrap()));
        exited.recv_timeout(WAIT).unwrap_or_else(|_| {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("node {id} did not exit")
        })
    }

    /// What node `id` printed during its latest start.
    pub fn log(&self, id: u8) -> String {
        let start = self.starts.get(&id).copied().unwrap_or(1);
        std::fs::read_to_string(self.dir.join(format!("node{id}.{start}.log"))).unwrap_or_default()
    }

    /// Node `id`'s data directory.
    pub fn data_dir(&self, id: u8) -> PathBuf {
        self.dir.join(format!("node{id}"))
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Writes a three-node cluster file under `dir` (`settings` changes it from the defaults) and
/// returns its path and a client configuration for it.
pub fn write_cluster_file(
    dir: &Path,
    settings: impl FnOnce(&mut ClusterFile),
) -> (PathBuf, ClientConfig) {
    let addresses = free_loopback_addresses(3).unwrap();
    let nodes = addresses
        .iter()
        .map(|a| {
            let data_dir = dir.join(format!("node{}", a.id));
            NodeEntry::new(
                a.id.0,
                a.peer_address.clone(),
                a.client_address.clone(),
                data_dir,
            )
        })
        .collect();
    let mut file = ClusterFile::new(TEST_SECRET, nodes);
    file.cluster_id = CLUSTER_ID;
    settings(&mut file);
    let path = dir.join("cluster.toml");
    file.write(&path).unwrap();
    let mut config = ClientConfig::new(
        CLUSTER_ID,
        addresses.iter().map(|a| a.client_address.clone()),
    );
    config.give_up_after = Some(WAIT);
    (path, config)
}

pub async fn statuses(config: &ClientConfig) -> Vec<NodeStatus> {
    let mut all = Vec::new();
    for address in &config.nodes {
        if let Ok(status) = node_status(config, address, Duration::from_millis(500)).await {
            all.push(status);
        }
    }
    all
}

/// Waits until `check` holds for the reachable nodes' statuses.
pub async fn wait_for(
    config: &ClientConfig,
    what: &str,
    check: impl Fn(&[NodeStatus]) -> bool,
) -> Vec<NodeStatus> {
    let started = Instant::now();
    loop {
        let all = statuses(config).await;
        if check(&all) {
            return all;
        }
        assert!(
            started.elapsed() < WAIT,
            "timed out waiting for {what}: {all:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until all three nodes answer and one of them leads.
pub async fn three_up_with_a_leader(config: &ClientConfig) {
    wait_for(config, "a leader", |all| {
        all.len() == 3 && leader_of(all).is_some()
    })
    .await;
}

/// Opens account `id` with `balance` through `client`; panics unless it opened.
pub async fn open_account(client: &mut Client, id: bank::AccountId, balance: u64) {
    let open = BankCommand::Open {
        id,
        balance,
        flags: 0,
    };
    let opened = client.submit::<Bank>(&[open]).await;
    assert!(
        matches!(opened.as_deref(), Ok([Outcome::Done(_)])),
        "open {id:?}: {opened:?}"
    );
}

/// The balance and version of account `id`, read through the log by `client`.
pub async fn balance_and_version(client: &mut Client, id: bank::AccountId) -> (u64, u64) {
    let get = client.submit::<Bank>(&[BankCommand::Get { id }]).await;
    match get.as_deref() {
        Ok([Outcome::Done(BankOutput::Account(account))]) => (account.balance, account.version),
        other => panic!("account {id:?}: {other:?}"),
    }
}

pub fn leader_of(all: &[NodeStatus]) -> Option<NodeId> {
    all.iter().find(|s| s.role == Role::Leader).map(|s| s.node)
}

/// Waits until all three nodes answer, have applied everything committed, and agree on the
/// state hash; checks none diverged or halted.
pub async fn converged(config: &ClientConfig) -> Vec<NodeStatus> {
    let all = wait_for(config, "three equal state hashes", |all| {
        all.len() == 3
            && all.iter().all(|s| {
                s.applied_index == all[0].applied_index && s.state_hash == all[0].state_hash
            })
            && all
                .iter()
                .all(|s| s.applied_index >= s.commit_index && s.commit_index == all[0].commit_index)
    })
    .await;
    assert!(
        all.iter()
            .all(|s| s.divergence.is_none() && s.halted.is_none()),
        "{all:?}"
    );
    all
}

/// The client's model of the accounts, built only from acknowledged outcomes.
pub struct Model {
    pub balances: BTreeMap<u64, (u64, u64)>,
}

impl Model {
    /// Opens the accounts through `client`; the model of them.
    pub async fn open(client: &mut Client) -> Model {
        let opens: Vec<BankCommand> = (0..ACCOUNTS)
            .map(|n| BankCommand::Open {
                id: account_id(n),
                balance: OPENING_BALANCE,
                flags: 0,
            })
            .collect();
        let opened = client.submit::<Bank>(&opens).await.unwrap();
        assert!(opened.iter().all(|o| matches!(o, Outcome::Done(_))));
        Model {
            balances: (0..ACCOUNTS)
                .map(|n| (account_id(n).0, (OPENING_BALANCE, 1)))
                .collect(),
        }
    }

    pub fn record(
        &mut self,
        command: &BankCommand,
        outcome: &Outcome<BankOutput, bank::BankError>,
    ) {
        let (BankCommand::Transfer { from, to, amount }, Outcome::Done(_)) = (command, outcome)
        else {
            return;
        };
        let debit = self.balances.get_mut(&from.0).expect("known account");
        // Clients' answers arrive in their own order, not the log's, so a debit may be
        // recorded before the credit that paid for it: the sums wrap meanwhile and come
        // out exact once every outcome is in (addition commutes modulo 2^64).
        debit.0 = debit.0.wrapping_sub(*amount);
        debit.1 += 1;
        let credit = self.balances.get_mut(&to.0).expect("known account");
        credit.0 = credit.0.wrapping_add(*amount);
        credit.1 += 1;
    }

    /// Reads every account and the audit through a fresh client and checks them against the
    /// model: no acknowledged transfer lost or applied twice, the total unchanged.
    pub async fn check(&self, config: &ClientConfig, client: engine::ClientId) {
        self.check_beside(config, client, (0, 0)).await;
    }

    /// Checks as [`Model::check`] does, in a state that also holds `others`: that many other
    /// accounts, with that total.
    pub async fn check_beside(
        &self,
        config: &ClientConfig,
        client: engine::ClientId,
        others: (u64, u128),
    ) {
        let mut checker = Client::new(config.clone(), client, engine::RequestNumber(1));
        let mut reads: Vec<BankCommand> = (0..ACCOUNTS)
            .map(|n| BankCommand::Get { id: account_id(n) })
            .collect();
        reads.push(BankCommand::Audit);
        let answers = checker.submit::<Bank>(&reads).await.unwrap();
        for (n, answer) in answers[..ACCOUNTS as usize].iter().enumerate() {
            let Outcome::Done(BankOutput::Account(account)) = answer else {
                panic!("get {n}: {answer:?}")
            };
            let (balance, version) = self.balances[&account_id(n as u64).0];
            assert_eq!(
                (account.balance, account.version),
                (balance, version),
                "account {n}"
            );
        }
        let Outcome::Done(BankOutput::Audit { accounts, total }) = &answers[ACCOUNTS as usize]
        else {
            panic!("audit: {:?}", answers.last())
        };
        assert_eq!(
            (*accounts, *total),
            (
                ACCOUNTS + others.0,
                u128::from(ACCOUNTS) * u128::from(OPENING_BALANCE) + others.1
            )
        );
    }
}

/// A transfer between two distinct random accounts of [`ACCOUNTS`].
pub fn random_transfer(rng: &mut Rng) -> BankCommand {
    let from = rng.below(ACCOUNTS);
    let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
    BankCommand::Transfer {
        from: account_id(from),
        to: account_id(to),
        amount: 1 + rng.below(50_000),
    }
}

/// Sends `requests` requests of transfers, recording each acknowledged outcome in the model and
/// counting acknowledged requests in `acknowledged`.
pub async fn transfers(
    client: &mut Client,
    rng: &mut Rng,
    model: &mut Model,
    requests: usize,
    acknowledged: &Cell<usize>,
) {
    for _ in 0..requests {
        let batch: Vec<BankCommand> = (0..TRANSFERS_PER_REQUEST)
            .map(|_| random_transfer(rng))
            .collect();
        let outcomes = client
            .submit::<Bank>(&batch)
            .await
            .expect("every request completes");
        for (command, outcome) in batch.iter().zip(&outcomes) {
            model.record(command, outcome);
        }
        acknowledged.set(acknowledged.get() + 1);
    }
}

/// Sends requests of transfers as [`transfers`] does until `stop` is set.
pub async fn transfers_until(
    client: &mut Client,
    rng: &mut Rng,
    model: &mut Model,
    acknowledged: &Cell<usize>,
    stop: &Cell<bool>,
) {
    while !stop.get() {
        transfers(client, rng, model, 1, acknowledged).await;
    }
}

/// Waits (polling every millisecond) until `check` holds; fails the test after [`WAIT`].
pub async fn until(what: &str, check: impl Fn() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until `counter` reaches `target`.
pub async fn reaches(counter: &Cell<usize>, target: usize) {
    until(&format!("{target} acknowledged requests"), || {
        counter.get() >= target
    })
    .await;
}

/// A single-threaded tokio runtime for a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A tmpfs of a given size mounted for one test, so that a node's file system really fills
/// up (ENOSPC). Mounting needs root (or CAP_SYS_ADMIN): tests that need it are
/// `#[ignore = "needs root"]`, which `.ci/run` runs as root.
pub struct SmallDisk {
    pub path: PathBuf,
}

impl SmallDisk {
    /// Mounts the disk for a test that cannot run without it: failing to is the test's
    /// failure, with the reason.
    pub fn mount_as_root(path: &Path, bytes: u64) -> SmallDisk {
        SmallDisk::mount(path, bytes).unwrap_or_else(|| {
            panic!(
                "cannot mount a tmpfs at {}: this test needs root (it is ignored unless asked: \
                 `cargo test -- --ignored` as root)",
                path.display()
            )
        })
    }

    /// Mounts the disk, or says why not and returns `None` (for a part of a larger test that
    /// reports it as not run).
    pub fn mount(path: &Path, bytes: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !status.success() {
            eprintln!("NOT RUN: cannot mount a small tmpfs here (needs root)");
            return None;
        }
        Some(SmallDisk {
            path: path.to_path_buf(),
        })
    }

    fn ballast(&self) -> PathBuf {
        self.path.join("ballast")
    }

    /// Writes a ballast file until the file system is full.
    pub fn fill(&self) {
        use std::io::Write;
        let mut file = std::fs::File::create(self.ballast()).unwrap();
        for chunk in [1 << 20, 4096, 64] {
            let bytes = vec![0u8; chunk];
            while file.write_all(&bytes).is_ok() {}
        }
        let _ = file.sync_all();
    }

    /// Removes the ballast: space returns.
    pub fn free(&self) {
        std::fs::remove_file(self.ballast()).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Starts three nodes from a cluster file under `dir` with `settings` on top.
pub fn start_cluster(dir: &Path, settings: impl FnOnce(&mut ClusterFile)) -> (Nodes, ClientConfig) {
    let (cluster_file, config) = write_cluster_file(dir, settings);
    let mut nodes = Nodes::new(dir, cluster_file);
    for id in 1..=3 {
        nodes.start(id);
    }
    (nodes, config)
}

/// Runs `runner` with `args`, `--json` and `--dir` in `dir`; checks it succeeded and returns
/// the JSON summary it wrote.
pub fn run_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let json = dir.join("summary.json");
    let output = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// The segment files of the WAL in `wal`, oldest first.
pub fn wal_segments(wal: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    paths.sort();
    paths
}

/// The last segment of the WAL in `wal` and where its whole records end. On a disk the file
/// goes on past them, with zeros written ahead of the appends.
pub fn wal_records_end(wal: &Path) -> (PathBuf, u64) {
    use engine::internals::wal::{Access, WAL_SEGMENT_BYTES_DEFAULT, Wal};
    let (log, _) = Wal::scan_repairing(wal, WAL_SEGMENT_BYTES_DEFAULT, Access::ReadOnly).unwrap();
    let mut paths = wal_segments(wal);
    let last = paths.pop().expect("a segment");
    let before: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    (last, log.bytes() - before)
}

/// Fails unless `path` and everything under it is its owner's alone: directories
/// [`engine::internals::storage::files::DIR_MODE_OWNER_ONLY`], files [`engine::internals::storage::files::FILE_MODE_OWNER_ONLY`].
/// Returns how many files it checked.
pub fn assert_owner_only(path: &Path) -> usize {
    use std::os::unix::fs::PermissionsExt;
    let metadata = std::fs::symlink_metadata(path).unwrap();
    let mode = metadata.permissions().mode() & 0o777;
    if metadata.is_dir() {
        assert_eq!(
            mode,
            engine::internals::storage::files::DIR_MODE_OWNER_ONLY,
            "{}",
            path.display()
        );
        let items = std::fs::read_dir(path).unwrap();
        return items
            .map(|item| assert_owner_only(&item.unwrap().path()))
            .sum();
    }
    assert_eq!(
        mode,
        engine::internals::storage::files::FILE_MODE_OWNER_ONLY,
        "{}",
        path.display()
    );
    1
}

/// The script that makes a test cluster's CA and certificates with openssl.
pub const CERTS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/tls-certs.sh");

/// Makes certificate `name` for `hosts` (none: a caller's) in `dir`, and the CA the first
/// time, with openssl.
pub fn certificate(dir: &Path, name: &str, hosts: &[&str]) {
    let made = Command::new("sh")
        .arg(CERTS_SCRIPT)
        .arg(dir)
        .arg(name)
        .args(hosts)
        .output()
        .expect("sh runs the certificate script");
    assert!(made.status.success(), "openssl (CI installs it): {made:?}");
}
