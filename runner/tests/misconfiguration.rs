//! The misconfiguration suite: operator mistakes made against real `runner node` processes and
//! real data directories of a cluster that ran under load. Each row makes one mistake, checks
//! the refusal (the process exits, its message names the file, the reason and the setting),
//! and hashes the data directory file by file before and after: byte-identical.
//!
//! Set `MISCONFIGURATION_TABLE=FILE` to have the rows written there as a Markdown table (it
//! goes into notes/reliability.md).

mod common;

use bank::workload::account_id;
use bank::{Bank, BankCommand, BankError, BankOutput};
use common::{
    CLUSTER_ID, Model, Nodes, SmallDisk, TEST_SECRET, WAIT, converged, runtime, transfers,
    write_cluster_file,
};
use engine::client::Client;
use engine::internals::wal::PREPARED_SEGMENT_NAME;
use engine::node::ClusterFile;
use engine::node::{NodeAddress, NodeConfig};
use engine::{ClientId, Handler, NodeId, Outcome, RequestNumber, Schema, Table, Tx};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Accounts opened: their state (about 50 bytes each in the capacity account) is over the
/// smallest capacity a node may have, 1 MiB.
const ACCOUNTS_OPENED: u64 = 30_000;
/// Their opening balance.
const OTHER_BALANCE: u64 = 10;
/// Small segments and frequent snapshots, so that the data holds several of each.
fn settings(file: &mut ClusterFile) {
    file.wal_segment_bytes = 256 << 10;
    file.snapshot_every = 16;
    file.snapshot_retain_ms = 20;
}
/// The node whose directory the mistakes are made on.
const SUBJECT: u8 = 2;

/// Every file under `dir`, by path relative to it, with the blake3 of its bytes.
fn hashes(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut all = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        let Ok(items) = std::fs::read_dir(&at) else {
            continue;
        };
        for item in items {
            let path = item.unwrap().path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if path.is_dir() {
                all.insert(relative, "directory".into());
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                all.insert(relative, blake3::hash(&bytes).to_hex().to_string());
            }
        }
    }
    all
}

/// One row of the table.
struct Row {
    mistake: &'static str,
    message: String,
    /// What became of the data directory.
    data: &'static str,
}

/// The rows found so far; written out when the suite ends.
struct Rows {
    rows: Vec<Row>,
    /// The run's temporary directory, written `$DIR` in the table.
    base: String,
}

impl Rows {
    /// A refusal: the directory must be byte-identical.
    fn add(&mut self, mistake: &'static str, message: &str, identical: bool) {
        assert!(identical, "{mistake}: the data directory changed");
        self.push(mistake, message, "byte-identical");
    }

    /// A start that went ahead (its caller checked that every file was kept).
    fn add_kept(&mut self, mistake: &'static str, message: &str) {
        let data = "nothing deleted: every file in place (the WAL appended to) or in quarantine/, byte for byte";
        self.push(mistake, message, data);
    }

    fn push(&mut self, mistake: &'static str, message: &str, data: &'static str) {
        let message = message
            .trim()
            .replace('\n', " ")
            .replace(&self.base, "$DIR");
        self.rows.push(Row {
            mistake,
            message,
            data,
        });
    }

    fn write(&self) {
        let mut text =
            String::from("| mistake | refusal (exact message) | data directory |\n|---|---|---|\n");
        for row in &self.rows {
            text += &format!("| {} | `{}` | {} |\n", row.mistake, row.message, row.data);
        }
        eprintln!("{text}");
        if let Ok(path) = std::env::var("MISCONFIGURATION_TABLE") {
            std::fs::write(path, text).unwrap();
        }
    }
}

/// Runs `runner` with `args` to its exit (failing the test after [`WAIT`]); its status and
/// what it printed (stdout and stderr).
fn runner(args: &[&str]) -> (ExitStatus, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (done, exited) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output().unwrap()));
    let output = exited.recv_timeout(WAIT).unwrap_or_else(|_| {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("runner {args:?} did not exit: it was not refused")
    });
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status, text)
}

/// Starts `runner node --cluster file --id id`, which must refuse: returns its message (the
/// line that names the refusal).
fn refused_node(file: &Path, id: u8, expected: &str) -> String {
    let file = file.to_str().unwrap();
    let (status, text) = runner(&["node", "--cluster", file, "--id", &id.to_string()]);
    assert!(!status.success(), "node {id} started:\n{text}");
    assert!(text.contains(expected), "expected {expected:?} in:\n{text}");
    let line = text.lines().find(|l| l.contains(expected)).unwrap();
    line.trim_start_matches("Error: ").to_string()
}

/// A copy of the cluster file with `from` replaced by `to` (each must occur).
fn variant(file: &Path, name: &str, edit: impl FnOnce(&mut ClusterFile)) -> PathBuf {
    let mut changed = ClusterFile::parse(file).unwrap();
    edit(&mut changed);
    let path = file.with_file_name(format!("{name}.toml"));
    changed.write(&path).unwrap();
    path
}

/// An edit that moves the data directory `from` to `to`.
fn moved(from: &Path, to: &Path) -> impl FnOnce(&mut ClusterFile) {
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    move |file| {
        let node = file.nodes.iter_mut().find(|n| n.data_dir == from);
        node.expect("a node of that directory").data_dir = to;
    }
}

/// A copy of directory `from` at `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if item.path().is_dir() {
            copy_dir(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), target).unwrap();
        }
    }
}

/// Runs a cluster under load until the subject holds two snapshots; returns it running, with
/// the model of its accounts.
fn ran_cluster(dir: &Path) -> (Nodes, engine::client::ClientConfig, Model) {
    let (nodes, config) = common::start_cluster(dir, settings);
    let model = runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let opens: Vec<BankCommand> = (1_000..1_000 + ACCOUNTS_OPENED)
            .map(|n| BankCommand::Open {
                id: account_id(n),
                balance: OTHER_BALANCE,
                flags: 0,
            })
            .collect();
        for chunk in opens.chunks(1024) {
            client.submit::<Bank>(chunk).await.unwrap();
        }
        let mut model = Model::open(&mut client).await;
        let snapshots = dir.join(format!("node{SUBJECT}")).join("snapshots");
        let mut rng = engine::rng::Rng::new(3);
        while engine::internals::snapshot::list_snapshots(&snapshots)
            .unwrap()
            .len()
            < 2
        {
            transfers(&mut client, &mut rng, &mut model, 5, &Cell::new(0)).await;
        }
        converged(&config).await;
        model
    });
    (nodes, config, model)
}

/// `runner recover` with a capacity smaller than the data of `data`: it says a start would
/// refuse and that nothing was written; returns that line.
fn recover_refuses_a_small_capacity(data: &Path) -> String {
    let (status, text) = runner(&[
        "recover",
        "--data-dir",
        data.to_str().unwrap(),
        "--capacity-bytes",
        "1048576",
    ]);
    assert!(
        !status.success()
            && text.contains("a start would refuse")
            && text.contains("nothing was written"),
        "{text}"
    );
    let line = text.lines().find(|l| l.starts_with("a start would refuse"));
    line.unwrap().to_string()
}

/// Proves every mistake of the suite is refused with its message and leaves the data
/// directory byte-identical; the newest snapshot damaged falls back to the older one and
/// deletes nothing; and the cluster runs on afterwards.
#[test]
fn every_mistake_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config, mut model) = ran_cluster(dir.path());
    let file = nodes.cluster_file.clone();
    let data = nodes.data_dir(SUBJECT);
    let mut table = Rows {
        rows: Vec::new(),
        base: dir.path().display().to_string(),
    };
    second_process_under_load(&mut nodes, &config, &mut model, &mut table);
    for id in 1..=3 {
        nodes.kill(id);
    }
    let before = hashes(&data);
    let same = |table: &mut Rows, mistake, message: &str| {
        table.add(mistake, message, hashes(&data) == before);
    };

    let small = variant(&file, "small", |file| file.capacity_bytes = 1 << 20);
    let message = refused_node(&small, SUBJECT, "raise capacity_bytes to at least");
    same(&mut table, "capacity smaller than the data", &message);
    let line = recover_refuses_a_small_capacity(&data);
    same(
        &mut table,
        "`runner recover --capacity-bytes 1048576` on the same data",
        &line,
    );

    let swapped = variant(&file, "swapped", |file| {
        let (one, two) = (
            file.nodes[0].data_dir.clone(),
            file.nodes[1].data_dir.clone(),
        );
        file.nodes[0].data_dir = two;
        file.nodes[1].data_dir = one;
    });
    let message = refused_node(&swapped, 1, "belongs to node 2, not to node 1");
    same(
        &mut table,
        "wrong node id for the directory (node 1 given node 2's)",
        &message,
    );

    let other = variant(&file, "other", |file| file.cluster_id = 10);
    let message = refused_node(&other, SUBJECT, "belongs to cluster 9, not to cluster 10");
    same(&mut table, "wrong cluster id", &message);

    let missing = dir.path().join("absent").join("node2");
    let elsewhere = variant(&file, "missing", moved(&data, &missing));
    let message = refused_node(
        &elsewhere,
        SUBJECT,
        "does not exist, and neither does its parent",
    );
    assert!(!dir.path().join("absent").exists(), "nothing was created");
    same(
        &mut table,
        "a missing data directory (its parent missing too)",
        &message,
    );

    on_a_small_disk(dir.path(), &file, &data, &mut table, &before);
    damaged_hard_state(dir.path(), &file, &data, &mut table);
    missing_hard_state(dir.path(), &file, &data, &mut table);
    bad_cluster_files(&file, &mut table, &same);

    // The WAL given a torn tail (an append cut short): recover says what a start would cut,
    // and cuts nothing.
    torn_tail_is_reported_not_cut(&data, &mut table);
    newest_snapshot_damaged(&mut nodes, &config, &data, &mut table);
    let others = (
        ACCOUNTS_OPENED,
        u128::from(ACCOUNTS_OPENED) * u128::from(OTHER_BALANCE),
    );
    runtime().block_on(model.check_beside(&config, ClientId(99), others));
    no_usable_state_then_rebuild(&mut nodes, &config, &data, &mut table);
    runtime().block_on(model.check_beside(&config, ClientId(98), others));
    handler_missing_a_table(dir.path(), &mut table);
    table.write();
}

/// A second `runner node` on the subject's directory while it runs under load: refused at
/// once, naming the running process; with the running process paused (SIGSTOP), the directory
/// is hashed around the refused start: byte-identical. The load goes on.
fn second_process_under_load(
    nodes: &mut Nodes,
    config: &engine::client::ClientConfig,
    model: &mut Model,
    table: &mut Rows,
) {
    let file = nodes.cluster_file.clone();
    let pid = nodes.children[&SUBJECT].id();
    let expected = format!("is in use by process {pid}");
    runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(7), RequestNumber(1));
        let acknowledged = Cell::new(0);
        let mut rng = engine::rng::Rng::new(9);
        transfers(&mut client, &mut rng, model, 5, &acknowledged).await;
        let message = refused_node(&file, SUBJECT, &expected);
        transfers(&mut client, &mut rng, model, 5, &acknowledged).await;
        assert_eq!(acknowledged.get(), 10);
        let data = nodes.data_dir(SUBJECT);
        let signal = |what: &str| {
            let status = Command::new("kill").args([what, &pid.to_string()]).status();
            assert!(status.unwrap().success());
        };
        signal("-STOP");
        let before = hashes(&data);
        refused_node(&file, SUBJECT, &expected);
        let identical = hashes(&data) == before;
        signal("-CONT");
        table.add(
            "a second process on the same directory, the first under load",
            &message,
            identical,
        );
        transfers(&mut client, &mut rng, model, 5, &acknowledged).await;
        converged(config).await;
    });
}

/// A read-only data directory and a full disk at start, each on a tmpfs of its own holding a
/// copy of the subject's directory (a row of the table says when tmpfs cannot be mounted).
fn on_a_small_disk(
    dir: &Path,
    file: &Path,
    data: &Path,
    table: &mut Rows,
    before: &BTreeMap<PathBuf, String>,
) {
    let Some(disk) = SmallDisk::mount(&dir.join("ro"), 64 << 20) else {
        let not_run = "NOT RUN: mounting a tmpfs needs root";
        table.add(
            "a read-only data directory, a full disk at start",
            not_run,
            true,
        );
        return;
    };
    let copy = disk.path.join("node2");
    copy_dir(data, &copy);
    let status = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&disk.path)
        .status();
    assert!(status.unwrap().success());
    let read_only = variant(file, "read-only", moved(data, &copy));
    let message = refused_node(
        &read_only,
        SUBJECT,
        "is not writable (Read-only file system",
    );
    table.add(
        "a read-only data directory",
        &message,
        hashes(&copy) == *before,
    );
    drop(disk);

    let Some(disk) = SmallDisk::mount(&dir.join("full"), 64 << 20) else {
        return;
    };
    let copy = disk.path.join("node2");
    copy_dir(data, &copy);
    disk.fill();
    let full = variant(file, "full", moved(data, &copy));
    let message = refused_node(&full, SUBJECT, "bytes free, under the");
    table.add("a full disk at start", &message, hashes(&copy) == *before);
}

/// A copy of the subject's directory without its hard state: refused (its votes are lost).
fn missing_hard_state(dir: &Path, file: &Path, data: &Path, table: &mut Rows) {
    let copy = dir.join("missing-hard-state");
    copy_dir(data, &copy);
    std::fs::remove_file(copy.join("hard_state")).unwrap();
    let before = hashes(&copy);
    let missing = variant(file, "no-hard-state", moved(data, &copy));
    let message = refused_node(&missing, SUBJECT, "hard_state is missing");
    table.add(
        "`hard_state` missing beside the log",
        &message,
        hashes(&copy) == before,
    );
}

/// A copy of the subject's directory with its hard state damaged: refused.
fn damaged_hard_state(dir: &Path, file: &Path, data: &Path, table: &mut Rows) {
    let copy = dir.join("damaged-hard-state");
    copy_dir(data, &copy);
    let hard_state = copy.join("hard_state");
    let mut bytes = std::fs::read(&hard_state).unwrap();
    bytes[5] ^= 0x40;
    std::fs::write(&hard_state, bytes).unwrap();
    let before = hashes(&copy);
    let damaged = variant(file, "damaged", moved(data, &copy));
    let message = refused_node(&damaged, SUBJECT, "hard_state is damaged");
    table.add("damaged `hard_state`", &message, hashes(&copy) == before);
}

/// Cluster files with a duplicate address and an out-of-range setting: `runner check` and
/// `runner node` refuse them.
fn bad_cluster_files(file: &Path, table: &mut Rows, same: &dyn Fn(&mut Rows, &'static str, &str)) {
    let duplicate = variant(file, "duplicate", |file| {
        file.nodes[1].client_address = file.nodes[0].client_address.clone()
    });
    let (status, text) = runner(&["check", "--cluster", duplicate.to_str().unwrap()]);
    assert!(
        !status.success() && text.contains("is used twice"),
        "{text}"
    );
    let message = refused_node(&duplicate, SUBJECT, "is used twice");
    same(table, "a cluster file with a duplicate address", &message);

    let range = variant(file, "range", |file| file.tick_ms = 0);
    let (status, text) = runner(&["check", "--cluster", range.to_str().unwrap()]);
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("tick_ms = 0 is out of range: it must lie in 1..=1000 (milliseconds)"),
        "{text}"
    );
    let message = refused_node(&range, SUBJECT, "tick_ms = 0 is out of range");
    same(table, "an out-of-range setting", &message);
    let (status, text) = runner(&["check", "--cluster", file.to_str().unwrap()]);
    assert!(
        status.success() && text.contains("every node runs with:"),
        "{text}"
    );
}

/// Zeros after the last record of the subject's last segment: `runner recover` says a start
/// would cut them, and writes nothing.
fn torn_tail_is_reported_not_cut(data: &Path, table: &mut Rows) {
    let (last, end) = common::wal_records_end(&data.join("wal"));
    let last = &last;
    let original = std::fs::read(last).unwrap();
    // An append a kill cut short over zeros: its payload written, its header (written last,
    // 80 bytes) not.
    let mut bytes = original[..end as usize].to_vec();
    bytes.extend_from_slice(&[0u8; 80]);
    bytes.extend_from_slice(&[0xA5u8; 4096 - 80]);
    std::fs::write(last, bytes).unwrap();
    let before = hashes(data);
    let (status, text) = runner(&["recover", "--data-dir", data.to_str().unwrap()]);
    assert!(status.success(), "{text}");
    assert!(
        text.contains("a start would cut a torn tail of 4096 bytes off the WAL"),
        "{text}"
    );
    let line = text.lines().find(|l| l.contains("torn tail")).unwrap();
    table.add(
        "`runner recover` on a WAL with a torn tail (reported, not cut)",
        line,
        hashes(data) == before,
    );
    // As it was, for the next row (a start would cut the tail: it was never acknowledged).
    std::fs::write(last, original).unwrap();
}

/// The subject's newest snapshot damaged (its digest fails) while the older one is fine: the
/// start falls back to the older, moves the damaged one to quarantine byte for byte, deletes
/// nothing, says so, and the cluster converges.
fn newest_snapshot_damaged(
    nodes: &mut Nodes,
    config: &engine::client::ClientConfig,
    data: &Path,
    table: &mut Rows,
) {
    let snapshots = engine::internals::snapshot::list_snapshots(&data.join("snapshots")).unwrap();
    let (newest, path) = snapshots[0].clone();
    let (older, _) = snapshots[1];
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let before = contents(data);
    for id in 1..=3 {
        nodes.start(id);
    }
    runtime().block_on(converged(config));
    let log = nodes.log(SUBJECT);
    let line = log
        .lines()
        .find(|l| l.contains("recovered:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains(&format!("snapshot at entry {older} ")),
        "{log}"
    );
    assert!(line.contains("the blake3 digest does not match"), "{log}");
    assert!(line.contains("moved to quarantine"), "{log}");
    // Every file that was there still is, with the same bytes: in place, in quarantine (the
    // damaged snapshot), or grown by appends (the WAL's segments); the hard state is
    // rewritten at each new term.
    let after = contents(data);
    for (relative, bytes) in &before {
        let in_place = after.get(relative) == Some(bytes);
        let quarantined = after
            .iter()
            .any(|(p, b)| b == bytes && p.starts_with("quarantine") && p.ends_with(relative));
        let appended = relative.starts_with("wal")
            && after
                .get(relative)
                .is_some_and(|now| now.starts_with(bytes));
        let rewritten = relative.as_os_str() == "hard_state";
        // The WAL's next segment made ahead holds zeros only; a start removes or replaces it.
        let prepared = relative.ends_with(PREPARED_SEGMENT_NAME) && bytes.iter().all(|&b| b == 0);
        assert!(
            in_place || quarantined || appended || rewritten || prepared,
            "{} lost or changed (the damaged snapshot was {newest})",
            relative.display()
        );
    }
    let message = line
        .split("; ")
        .find(|p| p.contains("passed over"))
        .unwrap()
        .to_string();
    table.add_kept(
        "the newest snapshot with a bad digest, an older one fine: it falls back",
        &message,
    );
}

/// Every file under `dir` with its bytes, by path relative to it.
fn contents(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    hashes(dir)
        .into_keys()
        .filter(|p| dir.join(p).is_file())
        .map(|p| {
            let bytes = std::fs::read(dir.join(&p)).unwrap();
            (p, bytes)
        })
        .collect()
}

/// The Bank's accounts and one more table, "ledger": a handler build that a later build (the
/// Bank alone) drops a table of.
#[derive(Clone, Copy)]
struct BankWithLedger;

const LEDGER: Table<u64, u64> = Table::new(1, "ledger");

impl Handler for BankWithLedger {
    type Command = BankCommand;
    type Output = BankOutput;
    type Error = BankError;

    fn schema(&self) -> Schema {
        Schema::new().table(&bank::ACCOUNTS).table(&LEDGER)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &BankCommand) -> Result<BankOutput, BankError> {
        let output = Bank.execute(tx, command)?;
        let entries = tx.get(&LEDGER, &0).unwrap_or(0);
        tx.put(&LEDGER, 0, entries + 1)?;
        Ok(output)
    }
}

/// A data directory written by a handler with a table the Bank lacks (a node of a one-node
/// cluster, the engine's own, in this process): `runner node` (the Bank) refuses it, naming
/// the table.
fn handler_missing_a_table(dir: &Path, table: &mut Rows) {
    let dir = dir.join("ledger");
    std::fs::create_dir(&dir).unwrap();
    let (file, client_config) = write_cluster_file(&dir, |_| {});
    let one = variant(&file, "one", |file| file.nodes.truncate(1));
    let data = dir.join("node1");
    let address = NodeAddress {
        id: NodeId(1),
        peer_address: peer_address(&one),
        client_address: client_config.nodes[0].clone(),
    };
    let key = net::auth::Key::peer(TEST_SECRET.as_bytes()).unwrap();
    let mut node_config = NodeConfig::new(NodeId(1), vec![address], data.clone(), key);
    node_config.cluster_id = CLUSTER_ID;
    let handle = engine::node::start(node_config, BankWithLedger).unwrap();
    let mut single = client_config.clone();
    single.nodes.truncate(1);
    runtime().block_on(async {
        let mut client = Client::new(single, ClientId(3), RequestNumber(1));
        let open = BankCommand::Open {
            id: account_id(1),
            balance: 5,
            flags: 0,
        };
        let opened = client.submit::<Bank>(&[open]).await.unwrap();
        assert!(matches!(opened[0], Outcome::Done(_)), "{opened:?}");
    });
    handle.stop();
    let before = hashes(&data);
    let expected = "holds table 1 (\"ledger\"), which this handler's schema does not declare";
    let message = refused_node(&one, 1, expected);
    table.add(
        "a handler schema missing a table the data has",
        &message,
        hashes(&data) == before,
    );
}

/// The first node's peer address in a cluster file.
fn peer_address(file: &Path) -> engine::Address {
    ClusterFile::parse(file)
        .unwrap()
        .nodes
        .swap_remove(0)
        .peer_address
}

/// Every snapshot of the subject damaged while its log was compacted behind them: no usable
/// state is left, the start is refused (byte-identical); the operator's explicit
/// `--rebuild-from-leader` then starts it empty, with every old file kept in quarantine byte
/// for byte, and it catches up from the leader.
fn no_usable_state_then_rebuild(
    nodes: &mut Nodes,
    config: &engine::client::ClientConfig,
    data: &Path,
    table: &mut Rows,
) {
    nodes.kill(SUBJECT);
    for (_, path) in engine::internals::snapshot::list_snapshots(&data.join("snapshots")).unwrap() {
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
    }
    let mut segments: Vec<String> = std::fs::read_dir(data.join("wal"))
        .unwrap()
        .map(|i| i.unwrap().file_name().into_string().unwrap())
        .collect();
    segments.sort();
    assert_ne!(
        segments[0],
        format!("{:020}.wal", 1),
        "the log is compacted"
    );
    let before = contents(data);
    let file = nodes.cluster_file.clone();
    let message = refused_node(&file, SUBJECT, "no usable state in");
    table.add(
        "every snapshot damaged behind a compacted log",
        &message,
        contents(data) == before,
    );
    nodes.start_with(SUBJECT, &["--rebuild-from-leader"]);
    runtime().block_on(converged(config));
    let log = nodes.log(SUBJECT);
    let line = log.lines().find(|l| l.contains("recovered:")).unwrap();
    assert!(
        line.contains("rebuilt empty on the operator's order"),
        "{log}"
    );
    let after = contents(data);
    for (relative, bytes) in &before {
        let kept = after.get(relative) == Some(bytes) && relative.as_os_str() != "wal"
            || after
                .iter()
                .any(|(p, b)| b == bytes && p.starts_with("quarantine") && p.ends_with(relative));
        let rewritten = relative.as_os_str() == "hard_state";
        assert!(kept || rewritten, "{} lost or changed", relative.display());
    }
    let moved = &line[line.find("rebuilt empty").unwrap()..];
    table.add_kept(
        "the same, started with `--rebuild-from-leader` (explicit)",
        moved,
    );
    // Left on the command line, the flag does nothing to usable data.
    nodes.kill(SUBJECT);
    let before = contents(data);
    nodes.start_with(SUBJECT, &["--rebuild-from-leader"]);
    runtime().block_on(converged(config));
    let log = nodes.log(SUBJECT);
    assert!(
        log.contains("--rebuild-from-leader ignored: the data is usable"),
        "{log}"
    );
    let quarantined = |files: &BTreeMap<PathBuf, Vec<u8>>| {
        files.keys().filter(|p| p.starts_with("quarantine")).count()
    };
    assert_eq!(quarantined(&contents(data)), quarantined(&before));
}
