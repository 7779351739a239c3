//! Snapshots at the state machine: a copy-on-write scan started with speculations pending (in
//! Performance and Verify mode) and carried on a slice at a time while later entries are
//! applied and simulated yields a file that restores exactly the committed state at its
//! start; a damaged snapshot file is refused; a whole snapshot and the deltas taken over it,
//! each while later entries are applied and simulated, rebuild the committed state at each
//! delta's start, removals, rolled-back writes and growths included.

mod common;

use common::tables::{ACCOUNTS, Chain, Command, NOTES, ORDERS, Shelves};
use common::{Ledger, entries};
use engine::internals::entry::Entry;
use engine::internals::snapshot::{
    DIGEST_BYTES, ScanProgress, SnapshotLink, parse_snapshot, read_snapshot, write_snapshot,
};
use engine::rng::Rng;
use engine::{EntryIndex, Mode, StateMachine};

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

/// Entries of random Shelves commands over few ids: puts, removals, heap-sized notes and
/// requests that fail whole (their writes rolled back).
fn shelves_entries(seed: u64, count: usize) -> Vec<Entry> {
    let mut rng = Rng::new(seed);
    let mut chain = Chain::new();
    // Every id first, so that the tables grow early and the chains after run long.
    let every: Vec<Command> = (0..48)
        .flat_map(|id| [Command::Order { id }, Command::Account { id }])
        .chain((0..48).map(|id| Command::Note { id, bytes: 8 }))
        .collect();
    let first = chain.entry(&every);
    std::iter::once(first)
        .chain((1..count).map(|_| {
            let commands: Vec<Command> = (0..6)
                .map(|_| {
                    let id = rng.below(48);
                    match rng.below(7) {
                        0 => Command::Order { id },
                        1 | 2 => Command::DeleteOrder { id },
                        3 => Command::Bump { id },
                        6 => Command::Account { id },
                        4 => Command::Note {
                            id,
                            bytes: rng.below(200) as u32,
                        },
                        _ => Command::OrdersThenFail {
                            first: id,
                            count: 3,
                        },
                    }
                })
                .collect();
            chain.entry(&commands)
        }))
        .collect()
}

/// Every record of the three tables, sorted: the state's content, whatever its slot order.
fn content(machine: &StateMachine<Shelves>) -> (Vec<String>, u64) {
    let state = machine.state();
    let mut records: Vec<String> = Vec::new();
    records.extend(
        state
            .iter_unordered(&ORDERS)
            .map(|(k, v)| format!("o{k}:{v:?}")),
    );
    records.extend(
        state
            .iter_unordered(&ACCOUNTS)
            .map(|(k, v)| format!("a{k}:{v:?}")),
    );
    records.extend(
        state
            .iter_unordered(&NOTES)
            .map(|(k, v)| format!("n{k}:{v}")),
    );
    records.sort_unstable();
    (records, state.bytes_used())
}

/// Proves a whole snapshot and the chain of deltas over it, each scanned a few slots per
/// entry while later entries are applied and simulated (in Verify and Performance mode),
/// rebuild the committed state at each delta's start: the records, the capacity account,
/// the state hash and the future (the rebuilt machine and one that applied the same prefix
/// answer every later entry alike). A growth of a table ends a chain, and the next snapshot
/// is whole.
#[test]
fn deltas_over_a_whole_snapshot_rebuild_the_committed_state() {
    let entries = shelves_entries(5, 300);
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Shelves, 16 << 20);
        leader.set_mode(mode);
        // Chains of (index, file bytes): a whole snapshot, then its deltas.
        let mut chains: Vec<Vec<(EntryIndex, Vec<u8>)>> = Vec::new();
        let mut bytes = Vec::new();
        let mut started = false;
        for chunk in entries.chunks(4) {
            for entry in chunk {
                leader.simulate(entry);
            }
            for entry in chunk {
                leader.apply(entry).unwrap();
                if !started && entry.index().0 % 5 == 0 {
                    let last = chains.last().and_then(|chain| chain.last());
                    started = match last {
                        Some((index, file)) if leader.can_take_delta() => {
                            let digest = file[file.len() - DIGEST_BYTES..].try_into().unwrap();
                            let link = SnapshotLink {
                                index: *index,
                                digest,
                            };
                            leader.begin_delta_snapshot(link).is_some()
                        }
                        _ => {
                            let begun = leader.begin_snapshot().is_some();
                            if begun {
                                chains.push(Vec::new());
                            }
                            begun
                        }
                    };
                }
                match leader.snapshot_step(16, &mut bytes) {
                    ScanProgress::Idle | ScanProgress::More => {}
                    ScanProgress::Done(meta) => {
                        bytes.extend_from_slice(blake3::hash(&bytes).as_bytes());
                        let chain = chains.last_mut().expect("a chain was started");
                        chain.push((meta.index, std::mem::take(&mut bytes)));
                        started = false;
                    }
                    ScanProgress::Void => {
                        bytes.clear();
                        started = false;
                    }
                }
            }
        }
        let deltas: usize = chains.iter().map(|c| c.len().saturating_sub(1)).sum();
        assert!(
            deltas >= 10,
            "{mode:?}: {deltas} deltas in {} chains",
            chains.len()
        );
        for chain in &chains {
            for upto in 1..chain.len() {
                check_chain(&chain[..=upto], &entries, mode);
            }
        }
    }
}

/// Builds the state of `chain` (a whole snapshot and its deltas, oldest first) and checks it
/// against a machine that applied the entries up to the newest delta's index: the records,
/// the capacity account, the state hash, then every later entry's outcome.
fn check_chain(chain: &[(EntryIndex, Vec<u8>)], entries: &[Entry], mode: Mode) {
    let mut rebuilt = StateMachine::new(Shelves, 16 << 20);
    let base = parse_snapshot(&chain[0].1).unwrap();
    assert!(base.previous.is_none(), "a chain starts whole");
    let mut built = rebuilt.build_state(&base).unwrap();
    let mut newest = base;
    for (index, file) in &chain[1..] {
        let delta = parse_snapshot(file).unwrap();
        assert!(delta.previous.is_some(), "{mode:?}: a delta at {index}");
        built = rebuilt.build_on(built, &delta).unwrap();
        newest = delta;
    }
    let index = newest.meta.index;
    rebuilt.install_built(newest, built);
    let mut follower = StateMachine::new(Shelves, 16 << 20);
    for entry in &entries[..index.0 as usize] {
        follower.apply(entry).unwrap();
    }
    assert_eq!(
        content(&rebuilt),
        content(&follower),
        "{mode:?}: the delta at {index}"
    );
    assert_eq!(
        rebuilt.state_hash(),
        follower.state_hash(),
        "{mode:?} at {index}"
    );
    for entry in &entries[index.0 as usize..] {
        assert_eq!(
            rebuilt.apply(entry).unwrap(),
            follower.apply(entry).unwrap(),
            "{mode:?} after {index}"
        );
    }
}
