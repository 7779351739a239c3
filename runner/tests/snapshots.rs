//! Snapshots with real processes: three `runner node` processes taking a snapshot every few
//! entries, a client sending transfers throughout. A follower whose data directory is wiped,
//! and a follower that falls behind a truncated log, come back through a snapshot sent by the
//! leader; a node whose newest snapshot is damaged (bit flip, truncation, deletion) recovers
//! from the one before it; a snapshot interrupted at any step of its writing leaves a data
//! directory that recovers; a damaged or missing delta ends its chain and the log replays the
//! rest. Each ends with equal state hashes on all three nodes and every
//! acknowledged transfer in place. Every wait is on an event (a status, a reply).

mod common;

use bank::Bank;
use common::{
    Model, Nodes, converged, leader_of, reaches, runtime, transfers, transfers_until, wait_for,
};
use engine::client::{Client, ClientConfig};
use engine::internals::core::PEER_INFLIGHT_ENTRIES_MAX;
use engine::internals::snapshot::{DELTA_SUFFIX, list_snapshots};
use engine::node::ClusterFile;
use engine::node::recovery::{RecoveryOptions, restore};
use engine::rng::Rng;
use engine::{ClientId, NodeId, RequestNumber};
use std::cell::{Cell, RefCell};
use std::path::Path;

/// Snapshots every 4 entries (deltas among them), kept at least 20 ms, and a leader that keeps
/// only 16 entries behind its snapshot for a lagging follower: a few hundred requests
/// truncate the log.
/// Small WAL segments let the log go in small steps.
fn snapshots_often(file: &mut ClusterFile) {
    file.snapshot_every = 4;
    file.snapshot_deltas = true;
    file.snapshot_retain_ms = 20;
    file.lagging_entries_max = 16;
    file.wal_segment_bytes = SEGMENT_BYTES;
}
const SEGMENT_BYTES: u64 = 16384;

/// Starts three nodes and waits for a leader; returns them, the client configuration and the
/// leader.
fn cluster(dir: &Path) -> (Nodes, ClientConfig) {
    let (cluster_file, config) = common::write_cluster_file(dir, snapshots_often);
    let mut nodes = Nodes::new(dir, cluster_file);
    for id in 1..=3 {
        nodes.start(id);
    }
    (nodes, config)
}

async fn a_follower(config: &ClientConfig) -> NodeId {
    let all = wait_for(config, "a leader", |all| {
        all.len() == 3 && leader_of(all).is_some()
    })
    .await;
    let leader = leader_of(&all).unwrap();
    all.iter().map(|s| s.node).find(|&n| n != leader).unwrap()
}

/// Checks that `follower` caught up through a snapshot from the leader.
fn assert_installed(nodes: &Nodes, follower: NodeId) {
    let log = nodes.log(follower.0);
    let others: String = (1..=3)
        .filter(|&id| id != follower.0)
        .map(|id| format!("node {id}:\n{}", nodes.log(id)))
        .collect();
    assert!(
        log.contains("installed the leader's snapshot"),
        "node {follower} caught up without a snapshot:\n{log}\n{others}"
    );
}

/// Proves a follower that lost its whole data directory rejoins through a snapshot from the
/// leader while the cluster keeps committing, and then holds the same state.
#[test]
fn wiped_follower_rejoins_through_snapshot_install() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = cluster(dir.path());
    runtime().block_on(async {
        let follower = a_follower(&config).await;
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(21);
        let acknowledged = Cell::new(0);
        let nodes = RefCell::new(nodes);
        let client_side = transfers(&mut client, &mut rng, &mut model, 400, &acknowledged);
        let fault_side = async {
            reaches(&acknowledged, 100).await;
            nodes.borrow_mut().kill(follower.0);
            let data = nodes.borrow().data_dir(follower.0);
            std::fs::remove_dir_all(&data).unwrap();
            reaches(&acknowledged, 200).await;
            nodes.borrow_mut().start(follower.0);
        };
        futures::join!(client_side, fault_side);
        converged(&config).await;
        assert_installed(&nodes.borrow(), follower);
        model.check(&config, ClientId(6)).await;
    });
}

/// Proves a follower down while the leader truncated its log past the follower's end catches
/// up through a snapshot from the leader.
#[test]
fn lagging_follower_catches_up_through_snapshot_install() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = cluster(dir.path());
    runtime().block_on(async {
        let follower = a_follower(&config).await;
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(22);
        let acknowledged = Cell::new(0);
        let stop = Cell::new(false);
        let nodes = RefCell::new(nodes);
        let client_side = transfers_until(&mut client, &mut rng, &mut model, &acknowledged, &stop);
        let fault_side = async {
            reaches(&acknowledged, 100).await;
            nodes.borrow_mut().kill(follower.0);
            let follower_wal = nodes.borrow().data_dir(follower.0).join("wal");
            let last = engine::internals::wal::Wal::open(&follower_wal)
                .unwrap()
                .0
                .last_index();
            // The cluster keeps committing until the log of every running node starts past
            // what the follower holds and what the leader may still have queued for it (the
            // last messages queued before it comes back are delivered when it does, and carry
            // at most PEER_INFLIGHT_ENTRIES_MAX entries past what it acknowledged): whichever
            // node leads when it returns must then send a snapshot (the leader may change
            // meanwhile on a loaded machine).
            let past = last.0 + 1 + PEER_INFLIGHT_ENTRIES_MAX;
            wait_for(
                &config,
                "every running node's log to start past what the follower may receive",
                |all| {
                    let nodes = nodes.borrow();
                    all.len() == 2
                        && all.iter().all(|status| {
                            let wal = nodes.data_dir(status.node.0).join("wal");
                            first_segment_index(&wal) > past
                        })
                },
            )
            .await;
            nodes.borrow_mut().start(follower.0);
            let now = acknowledged.get();
            reaches(&acknowledged, now + 100).await;
            stop.set(true);
        };
        futures::join!(client_side, fault_side);
        converged(&config).await;
        assert_installed(&nodes.borrow(), follower);
        model.check(&config, ClientId(6)).await;
    });
}

/// The first index in the oldest WAL segment file of `dir` (segments are named by it).
fn first_segment_index(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".wal")?.parse::<u64>().ok()
        })
        .min()
        .unwrap_or(0)
}

/// How a test damages a snapshot file.
#[derive(Clone, Copy, Debug)]
enum Damage {
    FlipBit,
    Truncate,
    Delete,
}

fn damage(path: &Path, how: Damage) {
    match how {
        Damage::FlipBit => {
            let mut bytes = std::fs::read(path).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x10;
            std::fs::write(path, bytes).unwrap();
        }
        Damage::Truncate => {
            let length = std::fs::metadata(path).unwrap().len();
            let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            file.set_len(length / 2).unwrap();
        }
        Damage::Delete => std::fs::remove_file(path).unwrap(),
    }
}

/// Proves a node whose newest snapshot was flipped, truncated or deleted while it was down
/// recovers from the snapshot before it and the log after that one, refuses the damaged one,
/// and ends with the same state hash as the others.
#[test]
fn damaged_newest_snapshot_falls_back_to_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, config) = cluster(dir.path());
    runtime().block_on(async {
        let follower = a_follower(&config).await;
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(23);
        let acknowledged = Cell::new(0);
        let mut nodes = nodes;
        let mut last_newest = engine::EntryIndex(0);
        for (round, how) in [Damage::FlipBit, Damage::Truncate, Damage::Delete]
            .into_iter()
            .enumerate()
        {
            // Commit until the follower holds two snapshots newer than the last round's.
            let snapshot_dir = nodes.data_dir(follower.0).join("snapshots");
            let started = std::time::Instant::now();
            while list_snapshots(&snapshot_dir)
                .unwrap()
                .get(1)
                .is_none_or(|(index, _)| *index <= last_newest)
            {
                assert!(started.elapsed() < common::WAIT, "round {round}: no new snapshots");
                transfers(&mut client, &mut rng, &mut model, 10, &acknowledged).await;
            }
            nodes.kill(follower.0);
            let snapshots = list_snapshots(&snapshot_dir).unwrap();
            let (newest, path) = snapshots[0].clone();
            let (older, _) = snapshots[1];
            last_newest = newest;
            damage(&path, how);
            nodes.start(follower.0);
            converged(&config).await;
            let log = nodes.log(follower.0);
            assert!(
                log.contains(&format!("recovered: snapshot at entry {older} ")),
                "{how:?}: node {follower} did not recover from snapshot {older} (newest {newest}):\n{log}"
            );
            if !matches!(how, Damage::Delete) {
                assert!(log.contains("passed over"), "{how:?}: nothing passed over:\n{log}");
                assert!(
                    log.contains("moved to quarantine"),
                    "{how:?}: the damaged snapshot was not kept:\n{log}"
                );
            }
            assert!(!log.contains("installed the leader's snapshot"), "{log}");
        }
        model.check(&config, ClientId(6)).await;
    });
}

/// Runs a cluster under `dir` through 80 requests of transfers, stops it, and returns a
/// follower's data directory.
fn a_stopped_followers_data(dir: &std::path::Path) -> std::path::PathBuf {
    a_stopped_followers_data_with(dir, 0, 80)
}

/// [`a_stopped_followers_data`] through `requests` requests, with `idle` more accounts opened
/// first that no transfer touches: a state whose deltas are much smaller than its whole
/// snapshots.
fn a_stopped_followers_data_with(
    dir: &std::path::Path,
    idle: u64,
    requests: usize,
) -> std::path::PathBuf {
    let (mut nodes, config) = cluster(dir);
    let follower = runtime().block_on(async {
        let follower = a_follower(&config).await;
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let opens: Vec<bank::BankCommand> = (0..idle)
            .map(|at| bank::BankCommand::Open {
                id: bank::AccountId(1_000_000 + at),
                balance: 1,
                flags: 0,
            })
            .collect();
        for chunk in opens.chunks(256) {
            let opened = client.submit::<Bank>(chunk).await.expect("the opens apply");
            assert_eq!(opened.len(), chunk.len());
        }
        let mut model = Model::open(&mut client).await;
        let acknowledged = Cell::new(0);
        let mut rng = Rng::new(24);
        transfers(&mut client, &mut rng, &mut model, requests, &acknowledged).await;
        converged(&config).await;
        follower
    });
    for id in 1..=3 {
        nodes.kill(id);
    }
    nodes.data_dir(follower.0)
}

/// How these tests recover a stopped node's directory in process, as its node would.
fn recovery_options() -> RecoveryOptions {
    RecoveryOptions {
        capacity_bytes: 1 << 30,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: SEGMENT_BYTES,
        owner: None,
        rebuild_from_leader: false,
        keep_outcomes_after: None,
    }
}

/// What each step of a snapshot file's writing leaves, to write over the directory: before
/// the fsync (a third of `bytes` in `temporary`), before the rename (all of them there), and
/// after the rename with the contents lost (`final_path` empty).
fn interruptions(
    temporary: &Path,
    final_path: &Path,
    bytes: &[u8],
) -> [(&'static str, std::path::PathBuf, Vec<u8>); 3] {
    [
        (
            "before fsync",
            temporary.into(),
            bytes[..bytes.len() / 3].to_vec(),
        ),
        ("before rename", temporary.into(), bytes.to_vec()),
        ("after rename, contents lost", final_path.into(), Vec::new()),
    ]
}

/// The entry a snapshot or delta file is named for.
fn index_of(path: &Path) -> u64 {
    let stem = path.file_stem().expect("a file name");
    stem.to_string_lossy().parse().expect("named for its entry")
}

/// Proves a snapshot interrupted at each step of its writing leaves a data directory that
/// recovers to the state the node had: before the fsync (a partial temporary file), before the
/// rename (a whole temporary file), and after the rename (the new file in place).
#[test]
fn interrupted_snapshot_writes_recover() {
    let dir = tempfile::tempdir().unwrap();
    let data = a_stopped_followers_data(dir.path());
    let options = recovery_options();
    let reference = restore(&data, Bank, &options).unwrap();
    let expected = (
        reference.machine.applied_index(),
        reference.machine.state_hash(),
    );
    drop(reference);
    let snapshots = data.join("snapshots");
    let (newest, newest_path) = list_snapshots(&snapshots).unwrap()[0].clone();
    let bytes = std::fs::read(&newest_path).unwrap();
    // A later snapshot's file as each step leaves it (named for an index past the log's end,
    // as a writer a little ahead would).
    let later = engine::EntryIndex(newest.0 + 1_000_000);
    let final_path = engine::internals::snapshot::snapshot_path(&snapshots, later);
    let temporary = final_path.with_extension("tmp");
    for (step, path, contents) in interruptions(&temporary, &final_path, &bytes) {
        std::fs::write(&path, contents).unwrap();
        let restored = restore(&data, Bank, &options).unwrap_or_else(|e| panic!("{step}: {e}"));
        assert_eq!(
            (
                restored.machine.applied_index(),
                restored.machine.state_hash()
            ),
            expected,
            "{step}"
        );
        assert_eq!(
            restored.report.snapshot.map(|(index, _)| index),
            Some(newest),
            "{step}: recovered from the newest whole snapshot"
        );
        // A damaged snapshot in place is moved aside, never deleted.
        let kept: Vec<_> = restored
            .report
            .quarantined
            .iter()
            .filter(|p| p.exists())
            .collect();
        assert_eq!(kept.len(), usize::from(step.starts_with("after")), "{step}");
        let _ = std::fs::remove_file(&temporary);
        let _ = std::fs::remove_file(&final_path);
    }
}

/// A machine's applied entry, state hash and every account: the state hash follows the
/// write stream (its hasher's state travels in the snapshot's meta), so the records are
/// compared too.
fn content(
    machine: &engine::StateMachine<Bank>,
) -> (engine::EntryIndex, engine::StateHash, Vec<String>) {
    let mut accounts: Vec<String> = (machine.state().iter_unordered(&bank::ACCOUNTS))
        .map(|(id, account)| format!("{id:?} {account:?}"))
        .collect();
    accounts.sort_unstable();
    (machine.applied_index(), machine.state_hash(), accounts)
}

/// The delta files in `snapshots`, oldest first.
fn deltas(snapshots: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(snapshots)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(DELTA_SUFFIX))
        .collect();
    found.sort();
    found
}

/// Proves a node's chain of deltas rebuilds its state, and that a damaged delta (a flipped
/// bit) or a missing one ends the chain where it is, the log after it replaying the rest: the
/// same applied entry and state hash each time, the damaged delta moved to quarantine (never
/// deleted) and the deltas after a gap passed over, not loaded.
#[test]
fn a_damaged_or_missing_delta_ends_its_chain_and_the_log_replays_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let data = a_stopped_followers_data_with(dir.path(), 4096, 400);
    let options = recovery_options();
    let recover = || restore(&data, Bank, &options).unwrap();
    let reference = recover();
    let expected = content(&reference.machine);
    let whole = reference.report.snapshot.expect("a whole snapshot").0;
    let loaded = reference.report.deltas;
    drop(reference);
    let snapshots = data.join("snapshots");
    let chain: Vec<_> = deltas(&snapshots)
        .into_iter()
        .filter(|p| index_of(p) > whole.0)
        .collect();
    assert!(
        chain.len() >= 3 && loaded > 0,
        "snapshots every 4 entries leave a chain: {chain:?}, {loaded} entries loaded"
    );
    damage(chain.last().unwrap(), Damage::FlipBit);
    let restored = recover();
    assert!(
        content(&restored.machine) == expected,
        "a damaged newest delta"
    );
    assert!(restored.report.deltas < loaded, "{}", restored.report);
    assert!(
        restored.report.quarantined.iter().any(|p| p.exists()),
        "the damaged delta is kept in quarantine: {}",
        restored.report
    );
    drop(restored);
    damage(&chain[0], Damage::Delete);
    let restored = recover();
    assert!(
        content(&restored.machine) == expected,
        "a missing first delta"
    );
    assert_eq!(restored.report.deltas, 0, "{}", restored.report);
    assert!(
        restored
            .report
            .passed_over
            .iter()
            .any(|p| p.contains("does not continue")),
        "the deltas after the gap are passed over: {}",
        restored.report
    );
}

/// Proves a delta interrupted at each step of its writing leaves a data directory that
/// recovers to the state the node had, the log replaying what the delta would have held:
/// before the fsync (a partial temporary file), before the rename (a whole temporary file),
/// and after the rename with the contents lost (the file moved to quarantine, never deleted).
/// The newest delta of a stopped follower is taken out and put back as each step leaves it.
#[test]
fn interrupted_delta_writes_recover() {
    let dir = tempfile::tempdir().unwrap();
    let data = a_stopped_followers_data_with(dir.path(), 4096, 400);
    let options = recovery_options();
    let recover = || restore(&data, Bank, &options).unwrap();
    let reference = recover();
    let expected = content(&reference.machine);
    let loaded = reference.report.deltas;
    let whole = reference.report.snapshot.expect("a whole snapshot").0;
    drop(reference);
    let snapshots = data.join("snapshots");
    let mut chain = deltas(&snapshots)
        .into_iter()
        .filter(|p| index_of(p) > whole.0);
    let newest = chain
        .next_back()
        .expect("a delta over the newest whole snapshot");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::remove_file(&newest).unwrap();
    let index = index_of(&newest);
    let temporary =
        engine::internals::snapshot::snapshot_path(&snapshots, engine::EntryIndex(index))
            .with_extension("tmp");
    for (step, path, contents) in interruptions(&temporary, &newest, &bytes) {
        std::fs::write(&path, contents).unwrap();
        let restored = recover();
        assert!(content(&restored.machine) == expected, "{step}");
        assert!(
            loaded > 0 && restored.report.deltas < loaded,
            "{step}: the chain ends before the interrupted delta: {}",
            restored.report
        );
        let kept = restored.report.quarantined.iter().filter(|p| p.exists());
        assert_eq!(
            kept.count(),
            usize::from(step.starts_with("after")),
            "{step}"
        );
        let _ = std::fs::remove_file(&temporary);
        let _ = std::fs::remove_file(&newest);
    }
}
