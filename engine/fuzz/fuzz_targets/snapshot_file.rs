//! Bytes as a snapshot file in a node's data directory, then the recovery a restart (or
//! `runner recover`) runs: `node::recovery::restore` reads it, verifies its digest and
//! structure, and installs it into a Bank state machine, or passes it over (moved to
//! quarantine). Ok or a clear error, never a panic.
//!
//! Mode byte, modulo 4: 0 writes the data as the file; 1 appends the data's blake3 digest (so
//! that the structure behind the digest is what is fuzzed); 2 builds a real snapshot of a Bank
//! (data[0] gives the accounts opened), damages it (3-byte ops of offset and XOR from data[2..])
//! and, when data[1] is odd, fixes the digest after the damage. A damaged snapshot whose digest
//! was not fixed must be refused; an undamaged one must restore the state it was taken of.
//! 3 does the same to a delta (entry 2, deposits into those accounts) beside the intact whole
//! snapshot of entry 1 and a log holding both entries: an undamaged delta restores the state
//! of entry 2; a damaged one, its digest not fixed, is quarantined and the whole snapshot
//! restores entry 1's.

#![no_main]

use bank::{AccountId, Bank, BankCommand};
use engine::internals::entry::{Entry, EntryHash, Request, encode_commands, whole_requests_entry};
use engine::node::recovery::{RecoveryOptions, restore};
use engine::internals::core::HardState;
use engine::internals::storage::hard_state::{SNAPSHOT_DIR, WAL_DIR, write_hard_state};
use engine::internals::snapshot::{DIGEST_BYTES, SnapshotLink, delta_path, snapshot_path};
use engine::internals::wal::{WAL_SEGMENT_BYTES_MIN, Wal};
use engine::{ClientId, EntryIndex, RequestNumber, StateHash, StateMachine, Term};
use engine_fuzz::{damage, mode, scratch_dir};
use libfuzzer_sys::fuzz_target;
use std::fs;
use std::path::Path;

/// State capacity of the machines, in bytes.
const CAPACITY_BYTES: u64 = 1 << 20;

fuzz_target!(|input: &[u8]| {
    let Some((mode, data)) = mode(input) else {
        return;
    };
    let dir = scratch_dir();
    // A node's directory as a start finds it: a hard state, a log and the snapshot files.
    write_hard_state(dir.path(), HardState::default()).unwrap();
    fs::create_dir_all(dir.path().join(WAL_DIR)).unwrap();
    let snapshots = dir.path().join(SNAPSHOT_DIR);
    fs::create_dir_all(&snapshots).unwrap();
    let (file, expect) = match mode % 4 {
        0 => (data.to_vec(), Expect::Anything),
        1 => {
            let mut file = data.to_vec();
            file.extend_from_slice(blake3::hash(data).as_bytes());
            (file, Expect::Anything)
        }
        2 => built(data),
        _ => {
            let (whole, delta, expect) = chain(data, &dir.path().join(WAL_DIR));
            fs::write(delta_path(&snapshots, EntryIndex(2)), &delta).unwrap();
            (whole, expect)
        }
    };
    fs::write(snapshot_path(&snapshots, EntryIndex(1)), &file).unwrap();
    let options = RecoveryOptions {
        capacity_bytes: CAPACITY_BYTES,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: WAL_SEGMENT_BYTES_MIN,
        owner: None,
        rebuild_from_leader: false,
        keep_outcomes_after: None,
    };
    let restored = restore(dir.path(), Bank, &options);
    match expect {
        Expect::Anything => {}
        Expect::Refused => {
            let restored = restored.expect("a damaged snapshot leaves an empty node");
            assert_eq!(
                restored.report.snapshot, None,
                "a damaged snapshot is passed over"
            );
            assert_eq!(restored.report.quarantined.len(), 1, "and kept in quarantine");
            assert!(restored.report.quarantined[0].exists());
        }
        Expect::Restores(hash) => {
            let restored = restored.expect("an intact snapshot restores");
            assert!(restored.report.snapshot.is_some());
            assert_eq!(restored.machine.state_hash(), hash);
        }
        Expect::Chain { deltas, hash } => {
            let restored = restored.expect("an intact whole snapshot restores");
            let report = &restored.report;
            assert_eq!(report.snapshot.map(|(index, _)| index), Some(EntryIndex(1)));
            assert_eq!(report.deltas, deltas, "{:?}", report.passed_over);
            assert_eq!(report.quarantined.len(), 1 - deltas as usize, "a damaged delta is kept");
            assert!(report.quarantined.iter().all(|path| path.exists()));
            assert_eq!(restored.machine.state_hash(), hash);
        }
    }
});

/// What restoring a built snapshot must give.
enum Expect {
    /// Anything but a panic.
    Anything,
    /// The snapshot is refused.
    Refused,
    /// The snapshot restores this state.
    Restores(StateHash),
    /// The whole snapshot restores, with this many deltas over it, this state.
    Chain { deltas: u64, hash: StateHash },
}

/// A real snapshot of a Bank after one entry of account openings, damaged as `data` says.
fn built(data: &[u8]) -> (Vec<u8>, Expect) {
    let (mut machine, _) = opened(data);
    let (_, mut file) = machine.snapshot_file().expect("no scan in progress");
    let (changed, fix_digest) = damage_as(&mut file, data);
    let expect = match (changed, fix_digest) {
        (false, _) => Expect::Restores(machine.state_hash()),
        (true, false) => Expect::Refused,
        (true, true) => Expect::Anything,
    };
    (file, expect)
}

/// The intact whole snapshot of entry 1 and a delta of entry 2 over it, damaged as `data`
/// says, with both entries appended to a log in `wal_dir`.
fn chain(data: &[u8], wal_dir: &Path) -> (Vec<u8>, Vec<u8>, Expect) {
    let (mut machine, first) = opened(data);
    let (_, whole) = machine.snapshot_file().expect("no scan in progress");
    let accounts = accounts(data);
    let deposits: Vec<BankCommand> = (0..accounts)
        .map(|n| BankCommand::Deposit {
            id: AccountId(n * 7919),
            amount: n + 1,
        })
        .collect();
    let second = entry_of(2, &first.header.hash, &deposits);
    let whole_hash = machine.state_hash();
    machine.apply(&second).expect("deposits apply");
    let link = SnapshotLink {
        index: EntryIndex(1),
        digest: whole[whole.len() - DIGEST_BYTES..].try_into().expect("a digest"),
    };
    let (_, mut delta) = machine.delta_snapshot_file(link).expect("a delta over the whole");
    let (mut wal, _) = Wal::open_with(wal_dir, WAL_SEGMENT_BYTES_MIN).expect("a new log");
    for entry in [&first, &second] {
        wal.append(entry).expect("the log appends");
    }
    wal.sync().expect("the log syncs");
    let (changed, fix_digest) = damage_as(&mut delta, data);
    let expect = match (changed, fix_digest) {
        (false, _) => Expect::Chain {
            deltas: 1,
            hash: machine.state_hash(),
        },
        (true, false) => Expect::Chain {
            deltas: 0,
            hash: whole_hash,
        },
        (true, true) => Expect::Anything,
    };
    (whole, delta, expect)
}

/// Accounts the data opens: 1 to 63.
fn accounts(data: &[u8]) -> u64 {
    data.first().map_or(0, |&b| b as u64 % 64).max(1)
}

/// A Bank machine after entry 1, which opens the accounts `data` says, and that entry.
fn opened(data: &[u8]) -> (StateMachine<Bank>, Entry) {
    let accounts = accounts(data);
    let commands: Vec<BankCommand> = (0..accounts)
        .map(|n| BankCommand::Open {
            id: AccountId(n * 7919),
            balance: n * 1000,
            flags: 0,
        })
        .collect();
    let entry = entry_of(1, &EntryHash::default(), &commands);
    let mut machine = StateMachine::new(Bank, CAPACITY_BYTES);
    machine.apply(&entry).expect("openings apply");
    (machine, entry)
}

/// Entry `index` of term 1, chained to `prev`: one request of client 1, numbered as the
/// entry, holding `commands`.
fn entry_of(index: u64, prev: &EntryHash, commands: &[BankCommand]) -> Entry {
    let encoded = encode_commands(commands);
    let request = Request {
        client: ClientId(1),
        number: RequestNumber(index),
        command_count: commands.len() as u32,
        commands: &encoded,
    };
    whole_requests_entry(EntryIndex(index), Term(1), prev, 6 + index, &[request])
}

/// Damages `file` by the ops in data[2..] and, when data[1] is odd, fixes its digest after:
/// whether a byte changed, and whether the digest was fixed.
fn damage_as(file: &mut [u8], data: &[u8]) -> (bool, bool) {
    let fix_digest = data.get(1).is_some_and(|&b| b % 2 == 1);
    let changed = damage(file, data.get(2..).unwrap_or(&[]));
    if fix_digest && file.len() >= DIGEST_BYTES {
        let body = file.len() - DIGEST_BYTES;
        let digest = blake3::hash(&file[..body]);
        file[body..].copy_from_slice(digest.as_bytes());
    }
    (changed, fix_digest)
}
