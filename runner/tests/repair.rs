//! Protocol-aware repair with real processes: a follower whose WAL is damaged while it is
//! down (a flipped bit in an entry in the middle of its log, or in its last entry) starts,
//! cuts its log before the damage, refuses to lead or to help elect a leader that lacks what
//! it lost, and gets the entries back from the leader, checked against the hash chain. The
//! cluster keeps committing; at the end the three state hashes are equal, every acknowledged
//! transfer is in place, and the repair obligation is gone from the follower's hard state.

mod common;

use bank::Bank;
use common::{Model, converged, leader_of, runtime, transfers, wait_for};
use engine::client::Client;
use engine::internals::storage::hard_state::{HARD_STATE_FILE, WAL_DIR, read_hard_state};
use engine::node::ClusterFile;
use engine::node::recovery::{RecoveryOptions, restore};
use engine::rng::Rng;
use engine::{ClientId, RequestNumber};
use std::cell::Cell;
use std::path::Path;

/// No snapshots (the damaged entries stay needed), small WAL segments (the damage lands in
/// an early one, with whole segments after it).
fn settings(file: &mut ClusterFile) {
    file.snapshot_every = 0;
    file.wal_segment_bytes = 16 << 10;
}

/// Where in the follower's WAL the bit flips.
#[derive(Clone, Copy, Debug)]
enum Where {
    /// The middle of the first segment: valid entries follow the damage.
    Middle,
    /// The payload of the last entry: nothing follows it.
    LastEntry,
}

fn flip(wal: &Path, at: Where) {
    let paths = common::wal_segments(wal);
    assert!(paths.len() >= 3, "several segments: {paths:?}");
    let (path, offset) = match at {
        Where::Middle => {
            let path = paths[0].clone();
            let length = std::fs::metadata(&path).unwrap().len();
            (path, length / 2)
        }
        Where::LastEntry => {
            // The last byte of the last entry's payload (zeros may follow it on a disk).
            let (path, end) = common::wal_records_end(wal);
            (path, end - 1)
        }
    };
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
}

/// Copies a stopped node's data directory (files and folders, recursively).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if item.file_type().unwrap().is_dir() {
            copy_dir(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), &target).unwrap();
        }
    }
}

/// A start on a copy of the damaged directory: the log is cut before the damage only with a
/// durable repair obligation that covers the log's old end (the entries cut may have been
/// acknowledged).
fn assert_cut_with_obligation(data: &Path, scratch: &Path, last: u64, at: Where) {
    copy_dir(data, scratch);
    let options = RecoveryOptions {
        capacity_bytes: 1 << 30,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: 16384,
        owner: None,
        rebuild_from_leader: false,
        keep_outcomes_after: None,
    };
    let restored = restore(scratch, Bank, &options).unwrap();
    assert!(restored.report.damage.is_some(), "{at:?}: damage found");
    drop(restored);
    let repair = read_hard_state(scratch).unwrap().repair;
    let repair = repair.unwrap_or_else(|| panic!("{at:?}: the cut left no repair obligation"));
    assert_eq!(
        repair.index.0, last,
        "{at:?}: the obligation covers the old end"
    );
}

fn repairs(at: Where) {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config) = common::start_cluster(dir.path(), settings);
    runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(41);
        let acknowledged = Cell::new(0);
        transfers(&mut client, &mut rng, &mut model, 300, &acknowledged).await;
        let all = wait_for(&config, "a leader", |all| {
            all.len() == 3 && leader_of(all).is_some()
        })
        .await;
        let leader = leader_of(&all).unwrap().0;
        let follower = (1..=3).find(|&n| n != leader).unwrap();
        // Everything acknowledged is on the follower too before it goes down.
        converged(&config).await;
        let all = wait_for(&config, "three nodes", |all| all.len() == 3).await;
        let last = all
            .iter()
            .find(|s| s.node.0 == follower)
            .unwrap()
            .last_index
            .0;
        nodes.kill(follower);
        let data = nodes.data_dir(follower);
        flip(&data.join(WAL_DIR), at);
        assert_cut_with_obligation(&data, &dir.path().join("copy"), last, at);
        nodes.start(follower);
        transfers(&mut client, &mut rng, &mut model, 100, &acknowledged).await;
        converged(&config).await;
        let log = nodes.log(follower);
        assert!(log.contains("damaged"), "{at:?}: {log}");
        model.check(&config, ClientId(6)).await;
        nodes.kill(follower);
        let hard = read_hard_state(&data).unwrap();
        assert_eq!(hard.repair, None, "{at:?}: the repair is over");
    });
}

/// Proves a flipped bit in an entry in the middle of a follower's log is repaired.
#[test]
fn a_damaged_middle_entry_is_repaired_from_the_leader() {
    repairs(Where::Middle);
}

/// Proves a flipped bit in a follower's last entry (which it may have acknowledged) is not
/// taken for a torn write: it is repaired too.
#[test]
fn a_damaged_last_entry_is_repaired_from_the_leader() {
    repairs(Where::LastEntry);
}

/// Proves that when every copy of a committed entry is damaged (the same bit flipped in the
/// WAL of all three stopped nodes), the nodes halt with "unrecoverable corruption at index k"
/// and apply nothing from it on.
#[test]
fn every_copy_damaged_halts_with_unrecoverable_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config) = common::start_cluster(dir.path(), settings);
    runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(43);
        let acknowledged = Cell::new(0);
        transfers(&mut client, &mut rng, &mut model, 300, &acknowledged).await;
        converged(&config).await;
        for id in 1..=3 {
            nodes.kill(id);
            flip(&nodes.data_dir(id).join(WAL_DIR), Where::Middle);
        }
        for id in 1..=3 {
            nodes.start(id);
        }
        let all = wait_for(&config, "every node to halt", |all| {
            all.len() == 3 && all.iter().all(|s| s.halted.is_some())
        })
        .await;
        for status in &all {
            let reason = status.halted.as_deref().unwrap();
            let index: u64 = reason
                .strip_prefix("unrecoverable corruption at index ")
                .and_then(|rest| rest.split(':').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("node {}: {reason}", status.node.0));
            assert!(status.applied_index.0 < index, "{status:?}");
        }
    });
}

/// Proves a follower whose hard state is damaged while it is down (its term and vote lost) is
/// refused at start, and on the operator's `--rebuild-from-leader` rejoins empty with its votes
/// marked lost; it helps elect a leader again only in a term above every term it heard, here
/// the election after the leader is killed, and the cluster keeps every acknowledged transfer.
#[test]
fn a_damaged_hard_state_is_rebuilt_with_its_votes_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config) = common::start_cluster(dir.path(), settings);
    runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(47);
        let acknowledged = Cell::new(0);
        transfers(&mut client, &mut rng, &mut model, 200, &acknowledged).await;
        let all = converged(&config).await;
        let leader = leader_of(&all).unwrap().0;
        let follower = (1..=3).find(|&n| n != leader).unwrap();
        nodes.kill(follower);
        let hard_state = nodes.data_dir(follower).join(HARD_STATE_FILE);
        let mut bytes = std::fs::read(&hard_state).unwrap();
        bytes[5] ^= 0x40;
        std::fs::write(&hard_state, bytes).unwrap();
        nodes.start(follower);
        assert!(!nodes.wait_exit(follower).success(), "refused");
        assert!(nodes.log(follower).contains("hard_state is damaged"));
        nodes.start_with(follower, &["--rebuild-from-leader"]);
        transfers(&mut client, &mut rng, &mut model, 100, &acknowledged).await;
        converged(&config).await;
        let log = nodes.log(follower);
        assert!(log.contains("its votes were lost"), "{log}");
        // The follower's vote is needed to elect the next leader.
        nodes.kill(leader);
        let all = wait_for(&config, "a new leader", |all| leader_of(all).is_some()).await;
        assert_ne!(leader_of(&all).unwrap().0, leader);
        transfers(&mut client, &mut rng, &mut model, 100, &acknowledged).await;
        nodes.start(leader);
        converged(&config).await;
        model.check(&config, ClientId(6)).await;
        nodes.kill(follower);
        let hard = read_hard_state(&nodes.data_dir(follower)).unwrap();
        assert_eq!(hard.votes_lost, None, "it voted above the bound: {hard:?}");
        assert_eq!(hard.repair, None);
    });
}
