//! Bytes as a snapshot file in a node's data directory, then the recovery a restart (or
//! `runner recover`) runs: `node::recovery::restore` reads it, verifies its digest and
//! structure, and installs it into a Bank state machine, or passes it over (moved to
//! quarantine). Ok or a clear error, never a panic.
//!
//! Mode byte, modulo 3: 0 writes the data as the file; 1 appends the data's blake3 digest (so
//! that the structure behind the digest is what is fuzzed); 2 builds a real snapshot of a Bank
//! (data[0] gives the accounts opened), damages it (3-byte ops of offset and XOR from data[2..])
//! and, when data[1] is odd, fixes the digest after the damage. A damaged snapshot whose digest
//! was not fixed must be refused; an undamaged one must restore the state it was taken of.

#![no_main]

use bank::{AccountId, Bank, BankCommand};
use engine::internals::entry::{EntryHash, Request, encode_commands, whole_requests_entry};
use engine::node::recovery::{RecoveryOptions, restore};
use engine::internals::core::HardState;
use engine::node::storage::{SNAPSHOT_DIR, WAL_DIR, write_hard_state};
use engine::internals::snapshot::{DIGEST_BYTES, snapshot_path};
use engine::internals::wal::WAL_SEGMENT_BYTES_MIN;
use engine::{ClientId, EntryIndex, RequestNumber, StateHash, StateMachine, Term};
use engine_fuzz::{damage, mode, scratch_dir};
use libfuzzer_sys::fuzz_target;
use std::fs;

/// State capacity of the machines, in bytes.
const CAPACITY_BYTES: u64 = 1 << 20;

fuzz_target!(|input: &[u8]| {
    let Some((mode, data)) = mode(input) else {
        return;
    };
    let (file, expect) = match mode % 3 {
        0 => (data.to_vec(), Expect::Anything),
        1 => {
            let mut file = data.to_vec();
            file.extend_from_slice(blake3::hash(data).as_bytes());
            (file, Expect::Anything)
        }
        _ => built(data),
    };
    let dir = scratch_dir();
    // A node's directory as a start finds it: a hard state, a log (empty) and the snapshot.
    write_hard_state(dir.path(), HardState::default()).unwrap();
    fs::create_dir_all(dir.path().join(WAL_DIR)).unwrap();
    let snapshots = dir.path().join(SNAPSHOT_DIR);
    fs::create_dir_all(&snapshots).unwrap();
    fs::write(snapshot_path(&snapshots, EntryIndex(1)), &file).unwrap();
    let options = RecoveryOptions {
        capacity_bytes: CAPACITY_BYTES,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: WAL_SEGMENT_BYTES_MIN,
        owner: None,
        rebuild_from_leader: false,
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
}

/// A real snapshot of a Bank after one entry of account openings, damaged as `data` says.
fn built(data: &[u8]) -> (Vec<u8>, Expect) {
    let accounts = data.first().map_or(0, |&b| b as u64 % 64);
    let fix_digest = data.get(1).is_some_and(|&b| b % 2 == 1);
    let ops = data.get(2..).unwrap_or(&[]);
    let commands: Vec<BankCommand> = (0..accounts.max(1))
        .map(|n| BankCommand::Open {
            id: AccountId(n * 7919),
            balance: n * 1000,
            flags: 0,
        })
        .collect();
    let commands = encode_commands(&commands);
    let request = Request {
        client: ClientId(1),
        number: RequestNumber(1),
        command_count: accounts.max(1) as u32,
        commands: &commands,
    };
    let entry = whole_requests_entry(EntryIndex(1), Term(1), &EntryHash::default(), 7, &[request]);
    let mut machine = StateMachine::new(Bank, CAPACITY_BYTES);
    machine.apply(&entry).expect("openings apply");
    let (_, mut file) = machine.snapshot_file().expect("no scan in progress");
    let changed = damage(&mut file, ops);
    if fix_digest && file.len() >= DIGEST_BYTES {
        let body = file.len() - DIGEST_BYTES;
        let digest = blake3::hash(&file[..body]);
        file[body..].copy_from_slice(digest.as_bytes());
    }
    let expect = match (changed, fix_digest) {
        (false, _) => Expect::Restores(machine.state_hash()),
        (true, false) => Expect::Refused,
        (true, true) => Expect::Anything,
    };
    (file, expect)
}
