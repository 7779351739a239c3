//! Snapshots at the state machine: a copy-on-write scan started with speculations pending (in
//! Performance and Verify mode) and carried on a slice at a time while later entries are
//! applied and simulated yields a file that restores exactly the committed state at its
//! start; a damaged snapshot file is refused.

mod common;

use common::{Ledger, entries};
use engine::internals::snapshot::{ScanProgress, read_snapshot, write_snapshot};
use engine::{Mode, StateMachine};

/// Proves a snapshot scanned while entries keep being applied and simulated restores the
/// committed state at its start (same state hash, same future: the restored machine and one
/// that applied the same prefix end every later entry alike).
#[test]
fn snapshot_scanned_during_applies_restores_the_committed_state() {
    let entries = entries(11, 160);
    for mode in [Mode::Verify, Mode::Performance] {
        let dir = tempfile::tempdir().unwrap();
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut snapshots = Vec::new();
        let mut bytes = Vec::new();
        let mut started = None;
        for chunk in entries.chunks(4) {
            for entry in chunk {
                leader.simulate(entry);
            }
            for entry in chunk {
                leader.apply(entry).unwrap();
                if started.is_none() && entry.index().0 % 7 == 0 {
                    // Started with later speculations still pending in the state.
                    let meta = leader
                        .begin_snapshot()
                        .expect("no removals: always possible");
                    assert_eq!(
                        (meta.index, meta.state_hash),
                        (leader.applied_index(), leader.state_hash())
                    );
                    started = Some(meta.index);
                }
                // A few slots per applied entry: the scan spans many entries.
                match leader.snapshot_step(3, &mut bytes) {
                    ScanProgress::Idle | ScanProgress::More => {}
                    ScanProgress::Done(meta) => {
                        assert_eq!(Some(meta.index), started.take());
                        let digest = blake3::hash(&bytes);
                        bytes.extend_from_slice(digest.as_bytes());
                        let (path, _) = write_snapshot(dir.path(), meta.index, &bytes).unwrap();
                        snapshots.push((meta.index, path));
                        bytes.clear();
                    }
                    ScanProgress::Void => panic!("the table does not grow here"),
                }
            }
        }
        assert!(
            snapshots.len() >= 3,
            "{mode:?}: {} snapshots",
            snapshots.len()
        );
        for (index, path) in &snapshots {
            let mut restored =
                StateMachine::restore(Ledger, 1 << 20, read_snapshot(path).unwrap()).unwrap();
            let mut follower = StateMachine::new(Ledger, 1 << 20);
            for entry in &entries[..index.0 as usize] {
                follower.apply(entry).unwrap();
            }
            assert_eq!(
                restored.state_hash(),
                follower.state_hash(),
                "{mode:?} snapshot at {index}"
            );
            for entry in &entries[index.0 as usize..] {
                assert_eq!(
                    restored.apply(entry).unwrap(),
                    follower.apply(entry).unwrap(),
                    "{mode:?} after {index}"
                );
            }
        }
    }
}

/// Proves a snapshot file with a flipped bit, cut short, or of another kind is refused.
#[test]
fn damaged_snapshots_are_refused() {
    let entries = entries(12, 10);
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    for entry in &entries {
        machine.apply(entry).unwrap();
    }
    let (meta, bytes) = machine.snapshot_file().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_snapshot(dir.path(), meta.index, &bytes).unwrap();
    assert!(StateMachine::restore(Ledger, 1 << 20, read_snapshot(&path).unwrap()).is_ok());
    for position in [0, 9, bytes.len() / 2, bytes.len() - 1] {
        let mut damaged = bytes.clone();
        damaged[position] ^= 0x40;
        std::fs::write(&path, &damaged).unwrap();
        assert!(read_snapshot(&path).is_err(), "bit flipped at {position}");
    }
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    assert!(read_snapshot(&path).is_err(), "cut short");
    std::fs::write(&path, b"hello").unwrap();
    assert!(read_snapshot(&path).is_err(), "not a snapshot");
}
