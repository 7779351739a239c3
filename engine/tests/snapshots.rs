//! Snapshots at the state machine: captures taken every few entries (with speculations pending
//! on top, in Performance mode) rebuild, in a mirror, a snapshot that restores exactly the
//! committed state; a damaged snapshot file is refused.

mod common;

use common::{Ledger, entries};
use engine::snapshot::{Mirror, read_snapshot, write_snapshot};
use engine::{Mode, StateMachine};

/// Proves a snapshot built from incremental captures restores the committed state at its index
/// (same state hash, same future: the restored machine and the original end every later entry
/// alike), even when captured under pending speculations.
#[test]
fn snapshot_from_captures_restores_the_committed_state() {
    let entries = entries(11, 120);
    for mode in [Mode::Verify, Mode::Performance] {
        let dir = tempfile::tempdir().unwrap();
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut mirror = Mirror::new(leader.mirrors());
        let mut snapshots = Vec::new();
        for chunk in entries.chunks(4) {
            for entry in chunk {
                leader.simulate(entry);
            }
            for entry in chunk {
                leader.apply(entry).unwrap();
                // Captures with later speculations still pending in the state.
                if entry.index().0 % 7 == 0 {
                    mirror.apply(leader.capture().expect("no removals: always capturable"));
                    let meta = mirror.meta().unwrap().clone();
                    assert_eq!(
                        (meta.index, meta.state_hash),
                        (leader.applied_index(), leader.state_hash())
                    );
                    let (path, _) =
                        write_snapshot(dir.path(), meta.index, &mirror.encode().unwrap()).unwrap();
                    snapshots.push((meta.index, path));
                }
            }
        }
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
    let mut mirror = Mirror::new(machine.mirrors());
    for entry in &entries {
        machine.apply(entry).unwrap();
    }
    mirror.apply(machine.capture().unwrap());
    let bytes = mirror.encode().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = write_snapshot(dir.path(), machine.applied_index(), &bytes).unwrap();
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
