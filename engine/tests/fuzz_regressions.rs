//! Inputs the fuzz targets (engine/fuzz) found to misbehave, kept as tests once fixed.

mod common;

use common::{Ledger, entries};
use engine::StateMachine;
use engine::codec;
use engine::internals::snapshot::{DIGEST_BYTES, parse_snapshot};
use std::time::{Duration, Instant};

/// A snapshot of a small ledger and the offset of its first block's record count.
fn snapshot_and_first_count() -> (Vec<u8>, usize) {
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    for entry in entries(3, 8) {
        machine.apply(&entry).unwrap();
    }
    let (meta, bytes) = machine.snapshot_file().unwrap();
    // magic | meta | table count (u16) | table id (u16) | slot count (u64) | block: record
    // count (u64) ... (format 7).
    assert_eq!(&bytes[..8], b"SNAPv007");
    let at = 8 + codec::encoded_len(&meta).unwrap() + 2 + 2 + 8;
    (bytes, at)
}

fn with_digest(mut bytes: Vec<u8>) -> Vec<u8> {
    let body = bytes.len() - DIGEST_BYTES;
    let digest = blake3::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(digest.as_bytes());
    bytes
}

/// Proves a snapshot whose digest holds but whose block claims far more records than it has
/// bytes is refused at once, without reserving memory for the claim (snapshot_file found a
/// 14-byte input that made a restore reserve 2 GiB and take 6 s; a count near `usize::MAX`
/// overflowed the table's sizing arithmetic).
#[test]
fn snapshot_record_count_beyond_its_bytes_is_refused_cheaply() {
    let (bytes, at) = snapshot_and_first_count();
    let count = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    assert!(count > 0, "the ledger holds records");
    for claimed in [1 << 26, 1 << 40, u64::MAX / 4, u64::MAX] {
        let mut damaged = bytes.clone();
        damaged[at..at + 8].copy_from_slice(&u64::to_le_bytes(claimed));
        let snapshot = parse_snapshot(&with_digest(damaged)).expect("the structure parses");
        let started = Instant::now();
        let restored = StateMachine::restore(Ledger, 1 << 20, snapshot);
        assert!(restored.is_err(), "claimed {claimed} records");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "claimed {claimed}: {:?}",
            started.elapsed()
        );
    }
}

/// Proves block record counts whose sum overflows are refused, not wrapped (snapshot_file
/// found a file whose digest holds and whose blocks' counts overflowed a u64: a panic with
/// overflow checks, a wrong count without).
#[test]
fn snapshot_block_counts_that_overflow_are_refused() {
    let (bytes, at) = snapshot_and_first_count();
    let mut damaged = bytes[..at].to_vec();
    // An empty block that claims u64::MAX records, before the real one.
    damaged.extend_from_slice(&codec::encode_to_vec(&(u64::MAX, 0u64)).unwrap());
    damaged.extend_from_slice(&bytes[at..]);
    let error = parse_snapshot(&with_digest(damaged)).expect_err("the counts overflow");
    assert!(error.to_string().contains("overflow"), "{error}");
}

/// Proves the admission check lets a request without commands through only as a
/// registration (request number 0, no bytes), and refuses a registration that carries
/// commands (client_frame found the check, changed for registrations, letting a request of
/// no commands and no bytes through under any number, with no command ends).
#[test]
fn a_request_without_commands_is_only_a_registration() {
    use engine::RequestNumber;
    use engine::internals::batcher::command_ends;
    use engine::internals::entry::encode_commands;
    use net::message::Rejection;
    let one = encode_commands(&[common::Command::Total]);
    let ends =
        |request, bytes: &[u8], count| command_ends::<Ledger>(RequestNumber(request), bytes, count);
    assert_eq!(ends(0, &[], 0), Ok(Vec::new()), "a registration");
    assert_eq!(ends(3, &[], 0), Err(Rejection::Empty));
    assert_eq!(ends(0, &one, 1), Err(Rejection::Malformed { command: 0 }));
    assert_eq!(ends(0, &one, 0), Err(Rejection::Malformed { command: 0 }));
    assert_eq!(ends(1, &one, 1), Ok(vec![one.len() as u32]));
}

/// Proves a whole snapshot's file that holds something else than its name says (another
/// entry, or a delta) is passed over and kept, never installed (snapshot_file found a file
/// named for entry 1 that holds entry 0: counting the deltas after it underflowed).
#[test]
fn a_snapshot_file_that_is_not_what_its_name_says_is_passed_over() {
    use engine::internals::snapshot::SnapshotLink;
    let log = entries(3, 4);
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    let (_, empty) = machine.snapshot_file().unwrap();
    machine.apply(&log[0]).unwrap();
    let link = SnapshotLink {
        index: engine::EntryIndex(0),
        digest: empty[empty.len() - DIGEST_BYTES..].try_into().unwrap(),
    };
    let (_, delta) = machine
        .delta_snapshot_file(link)
        .expect("a delta over the empty one");
    for entry in &log[1..] {
        machine.apply(entry).unwrap();
    }
    let (_, later) = machine.snapshot_file().unwrap();
    for (what, file) in [
        ("entry 0", &empty),
        ("entry 4", &later),
        ("a delta", &delta),
    ] {
        let restored = restore_one_snapshot(file);
        assert_eq!(restored.snapshot, None, "{what}: not installed");
        assert_eq!(
            restored.passed_over.len(),
            1,
            "{what}: {:?}",
            restored.passed_over
        );
        assert!(
            restored.quarantined.is_empty(),
            "{what}: intact, kept in place"
        );
    }
}

/// Proves a delta whose link names a file not older than itself is refused by the parser,
/// even with its digest fixed: a chain's indices only grow.
#[test]
fn a_delta_that_continues_a_later_file_is_refused() {
    use engine::internals::snapshot::SnapshotLink;
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    let (_, empty) = machine.snapshot_file().unwrap();
    machine.apply(&entries(3, 1)[0]).unwrap();
    let link = SnapshotLink {
        index: engine::EntryIndex(0),
        digest: empty[empty.len() - DIGEST_BYTES..].try_into().unwrap(),
    };
    let (_, delta) = machine.delta_snapshot_file(link).unwrap();
    let encoded = codec::encode_to_vec(&link).unwrap();
    let at = delta
        .windows(encoded.len())
        .position(|window| window == encoded)
        .expect("the link is in the file");
    for later in [1, 7] {
        let forged = SnapshotLink {
            index: engine::EntryIndex(later),
            ..link
        };
        let forged = codec::encode_to_vec(&forged).unwrap();
        assert_eq!(forged.len(), encoded.len(), "fixed-width indices");
        let mut file = delta.clone();
        file[at..at + forged.len()].copy_from_slice(&forged);
        let error = parse_snapshot(&with_digest(file)).expect_err("the link is not before");
        assert!(error.to_string().contains("not an older one"), "{error}");
    }
    parse_snapshot(&delta).expect("the delta as written parses");
}

/// Proves a rehearsal (`runner replay`) passes over, as a restart does, a whole snapshot's
/// file that holds another entry than its name says, and does not start from it.
#[test]
fn a_rehearsal_passes_over_a_snapshot_file_that_is_not_what_its_name_says() {
    use engine::node::rehearsal::{RehearsalOptions, rehearse};
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    let (_, empty) = machine.snapshot_file().unwrap();
    let (dir, _) = node_dir_with_snapshot(&empty);
    let options = RehearsalOptions {
        capacity_bytes: 1 << 20,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: engine::internals::wal::WAL_SEGMENT_BYTES_MIN,
        from_start: false,
    };
    let rehearsal = rehearse(dir.path(), Ledger, &options, |_, _| {}).expect("it runs");
    assert_eq!(rehearsal.from_snapshot, None, "not started from the file");
    assert_eq!(
        rehearsal.passed_over.len(),
        1,
        "{:?}",
        rehearsal.passed_over
    );
    assert!(rehearsal.passed_over[0].contains("its name says 1"));
}

/// A node directory holding a hard state, an empty log and `file` under the name of a whole
/// snapshot of entry 1; and that file's path.
fn node_dir_with_snapshot(file: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    use engine::internals::core::HardState;
    use engine::internals::snapshot::snapshot_path;
    use engine::internals::storage::hard_state::{SNAPSHOT_DIR, WAL_DIR, write_hard_state};
    let dir = tempfile::tempdir().unwrap();
    write_hard_state(dir.path(), HardState::default()).unwrap();
    std::fs::create_dir_all(dir.path().join(WAL_DIR)).unwrap();
    let snapshots = dir.path().join(SNAPSHOT_DIR);
    std::fs::create_dir_all(&snapshots).unwrap();
    let path = snapshot_path(&snapshots, engine::EntryIndex(1));
    std::fs::write(&path, file).unwrap();
    (dir, path)
}

/// Restores a node directory holding a hard state, an empty log and `file` under the name
/// of a whole snapshot of entry 1: its report.
fn restore_one_snapshot(file: &[u8]) -> engine::node::recovery::RecoveryReport {
    use engine::node::recovery::{RecoveryOptions, restore};
    let (dir, path) = node_dir_with_snapshot(file);
    let options = RecoveryOptions {
        capacity_bytes: 1 << 20,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: engine::internals::wal::WAL_SEGMENT_BYTES_MIN,
        owner: None,
        rebuild_from_leader: false,
        keep_outcomes_after: None,
    };
    let restored = restore(dir.path(), Ledger, &options).expect("the node starts");
    assert!(path.exists(), "the file is kept");
    restored.report
}
