//! Golden files: bytes written by earlier builds, committed under `runner/tests/golden/`, that
//! this build must still read as they were meant. One file per format and version:
//!
//! - `wal-v1.wal`: a WAL segment of Bank entries (records `WAL1`);
//! - `snapshot-v5.snap`: a snapshot of the Bank state after those entries (`SNAPv005`, written
//!   for a state at the first handler version by builds before format 7);
//! - `snapshot-v6.snap`: the same after an upgrade entry to the Bank's version 2 (`SNAPv006`,
//!   written by builds before format 7);
//! - `snapshot-v7.snap`: the Bank state after those entries (`SNAPv007`: the state clock and
//!   each session's time of last activity);
//! - `protocol-v3.frames`: frames of protocol version 3, peer and client messages back to back.
//!
//! The content is regenerated here from fixed seeds, so each test checks both ways: the file
//! decodes to what the generator makes, and (while the version is the current one) the
//! generator's bytes equal the file. `GOLDEN_WRITE=1 cargo test -p runner --test golden`
//! writes the files of the current versions; a file of an earlier version is never rewritten.

use bank::{AccountId, Bank, BankCommand};
use bytes::BytesMut;
use engine::codec::encode_to_vec;
use engine::internals::entry::{Entry, EntryHash, EntryKind, Request, whole_requests_entry};
use engine::internals::snapshot::{ScanProgress, read_snapshot};
use engine::internals::wal::Wal;
use engine::{ClientId, EntryIndex, RequestNumber, StateMachine, Term};
use net::frame::FrameCodec;
use net::message::{
    Append, AppendOutcome, AppendReply, ClientReply, ClientRequest, Hello, PeerMessage, Submit,
    Vote,
};
use std::path::{Path, PathBuf};
use tokio_util::codec::Decoder;

/// State capacity of the golden state machine (the snapshot's account counts against it).
const CAPACITY_BYTES: u64 = 1 << 24;
/// Entries in the golden log.
const ENTRIES: u64 = 12;
/// The cluster id in the golden frames.
const CLUSTER: u64 = 7;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Whether a golden file is of the format this build writes, or of an earlier one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    /// This build writes it: the file must equal what the generator makes now, and
    /// `GOLDEN_WRITE=1` writes it.
    Current,
    /// An earlier build wrote it: only read.
    Earlier,
}

/// Golden file `name`'s bytes; for the current version, checked equal to `make`'s (and
/// written first with `GOLDEN_WRITE=1`).
fn golden_bytes(name: &str, version: Version, make: impl FnOnce() -> Vec<u8>) -> Vec<u8> {
    let path = golden(name);
    let read = || std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if version == Version::Earlier {
        return read();
    }
    let made = make();
    if std::env::var_os("GOLDEN_WRITE").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &made).unwrap();
    }
    let bytes = read();
    assert!(
        bytes == made,
        "{name}: this build writes other bytes than the golden file"
    );
    bytes
}

/// Entry `n` of the golden log: two clients' requests of Bank commands (opens first, then
/// deposits and transfers among ten accounts), chained to `prev`.
fn golden_entry(n: u64, prev: &EntryHash) -> Entry {
    let command = |k: u64| match (n, k % 3) {
        (1, _) => BankCommand::Open {
            id: AccountId(k + 1),
            balance: 1_000,
            flags: 0,
        },
        (_, 0) => BankCommand::Deposit {
            id: AccountId((n + k) % 10 + 1),
            amount: n * 10 + k,
        },
        _ => BankCommand::Transfer {
            from: AccountId((n * 3 + k) % 10 + 1),
            to: AccountId((n * 7 + k + 1) % 10 + 1),
            amount: n + k,
        },
    };
    let bodies: Vec<Vec<u8>> = (0..2u64)
        .map(|client| {
            let commands: Vec<BankCommand> = (0..5).map(|k| command(k + 5 * client)).collect();
            commands
                .iter()
                .flat_map(|c| encode_to_vec(c).unwrap())
                .collect()
        })
        .collect();
    let requests: Vec<Request<'_>> = bodies
        .iter()
        .enumerate()
        .map(|(client, commands)| Request {
            client: ClientId(client as u128 + 1),
            number: RequestNumber(n),
            command_count: 5,
            commands,
        })
        .collect();
    let now_ms = 1_764_000_000_000 + n;
    whole_requests_entry(EntryIndex(n), Term(1), prev, now_ms, &requests)
}

fn golden_entries() -> Vec<Entry> {
    let mut prev = EntryHash::default();
    (1..=ENTRIES)
        .map(|n| {
            let entry = golden_entry(n, &prev);
            prev = entry.header.hash;
            entry
        })
        .collect()
}

/// Proves this build reads the WAL segment of format version 1 (records `WAL1`) as the entries
/// it was written from, and writes the same bytes for them.
#[test]
fn wal_v1_reads_back() {
    let entries = golden_entries();
    let bytes = golden_bytes("wal-v1.wal", Version::Current, || {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        entries.iter().for_each(|e| wal.append(e).unwrap());
        let segment = std::fs::read_dir(dir.path()).unwrap().next().unwrap();
        std::fs::read(segment.unwrap().path()).unwrap()
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("00000000000000000001.wal"), &bytes).unwrap();
    let (wal, _) = Wal::open(dir.path()).unwrap();
    assert_eq!(wal.last_index(), EntryIndex(ENTRIES));
    for entry in &entries {
        assert_eq!(&wal.read(entry.index()).unwrap(), entry);
    }
}

/// The Bank's state after `entries`, and a snapshot of it (digest included).
fn golden_snapshot(entries: &[Entry]) -> (StateMachine<Bank>, Vec<u8>) {
    let mut machine = StateMachine::new(Bank, CAPACITY_BYTES);
    for entry in entries {
        machine.apply(entry).unwrap();
    }
    machine.begin_snapshot().expect("nothing in flight");
    let mut bytes = Vec::new();
    loop {
        match machine.snapshot_step(1 << 20, &mut bytes) {
            ScanProgress::Done(_) => break,
            ScanProgress::More => {}
            ScanProgress::Idle | ScanProgress::Void => panic!("the scan stopped"),
        }
    }
    let digest = blake3::hash(&bytes);
    bytes.extend_from_slice(digest.as_bytes());
    (machine, bytes)
}

/// Proves this build restores a snapshot of format version 5 to the state it was taken of
/// (the same state hash, the same outcomes for the next entry), its sessions without times
/// (the state clock 0: none applied yet).
#[test]
fn snapshot_v5_restores() {
    let (mut machine, _) = golden_snapshot(&golden_entries());
    let bytes = golden_bytes("snapshot-v5.snap", Version::Earlier, Vec::new);
    assert_eq!(&bytes[..8], b"SNAPv005");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000012.snap");
    std::fs::write(&path, &bytes).unwrap();
    let snapshot = read_snapshot(&path).unwrap();
    assert_eq!(snapshot.meta.index, EntryIndex(ENTRIES));
    assert_eq!(snapshot.clock_ms, 0, "format 5 kept no times");
    let mut restored = StateMachine::restore(Bank, CAPACITY_BYTES, snapshot).unwrap();
    assert_eq!(restored.state_hash(), machine.state_hash());
    let next = golden_entry(ENTRIES + 1, &golden_entries().last().unwrap().header.hash);
    assert_eq!(
        restored.apply(&next).unwrap(),
        machine.apply(&next).unwrap()
    );
}

/// Proves this build restores a snapshot of format version 6 (the handler version in force in
/// its meta) with the Bank's version 2 in force: the next transfer pays the fee.
#[test]
fn snapshot_v6_restores_with_its_handler_version() {
    let mut entries = golden_entries();
    let prev = entries.last().unwrap().header.hash;
    let version = encode_to_vec(&bank::VERSION_TRANSFER_FEE).unwrap();
    let (index, commit) = (EntryIndex(ENTRIES + 1), EntryIndex(ENTRIES));
    entries.push(Entry::seal(
        index,
        Term(1),
        EntryKind::Upgrade,
        commit,
        0,
        version.into(),
        &prev,
    ));
    let (mut machine, _) = golden_snapshot(&entries);
    let bytes = golden_bytes("snapshot-v6.snap", Version::Earlier, Vec::new);
    assert_eq!(&bytes[..8], b"SNAPv006");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000013.snap");
    std::fs::write(&path, &bytes).unwrap();
    let mut restored =
        StateMachine::restore(Bank, CAPACITY_BYTES, read_snapshot(&path).unwrap()).unwrap();
    assert_eq!(restored.handler_version(), bank::VERSION_TRANSFER_FEE);
    assert_eq!(restored.state_hash(), machine.state_hash());
    let next = golden_entry(ENTRIES + 2, &entries.last().unwrap().header.hash);
    assert_eq!(
        restored.apply(&next).unwrap(),
        machine.apply(&next).unwrap()
    );
}

/// Proves this build writes a snapshot of format version 7 as the golden file has it and
/// restores it to the state it was taken of: the same state hash, the state clock at the last
/// entry's time, the same outcomes for the next entry.
#[test]
fn snapshot_v7_restores_with_its_clock() {
    let (mut machine, fresh) = golden_snapshot(&golden_entries());
    let bytes = golden_bytes("snapshot-v7.snap", Version::Current, || fresh.clone());
    assert_eq!(&bytes[..8], b"SNAPv007");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000012.snap");
    std::fs::write(&path, &bytes).unwrap();
    let snapshot = read_snapshot(&path).unwrap();
    let last_ms = 1_764_000_000_000 + ENTRIES;
    assert_eq!(snapshot.clock_ms, last_ms);
    let mut restored = StateMachine::restore(Bank, CAPACITY_BYTES, snapshot).unwrap();
    assert_eq!(restored.sessions().clock_ms(), last_ms);
    assert_eq!(restored.state_hash(), machine.state_hash());
    let next = golden_entry(ENTRIES + 1, &golden_entries().last().unwrap().header.hash);
    assert_eq!(
        restored.apply(&next).unwrap(),
        machine.apply(&next).unwrap()
    );
}

/// Messages of every kind a node or client sends, as protocol version 3 has them.
fn golden_messages() -> Frames {
    let hello = Hello {
        version: 3,
        cluster: CLUSTER,
        node: Some(engine::NodeId(2)),
    };
    let entries = golden_entries();
    let peer = vec![
        PeerMessage::Append(Append {
            term: Term(1),
            leader: engine::NodeId(1),
            prev_index: EntryIndex(0),
            prev_term: Term(0),
            entries: entries[..2].to_vec(),
            commit: EntryIndex(0),
            applied: None,
        }),
        PeerMessage::AppendReply(AppendReply {
            term: Term(1),
            from: engine::NodeId(2),
            outcome: AppendOutcome::Matched {
                index: EntryIndex(2),
            },
            applied: None,
        }),
        PeerMessage::Vote(Vote {
            term: Term(2),
            candidate: engine::NodeId(3),
            pre: true,
            last_index: EntryIndex(2),
            last_term: Term(1),
        }),
    ];
    let requests = vec![
        ClientRequest::Submit(Submit {
            client: ClientId(9),
            request: RequestNumber(4),
            oldest_pending: RequestNumber(4),
            command_count: 1,
            commands: encode_to_vec(&BankCommand::Get { id: AccountId(1) }).unwrap(),
        }),
        ClientRequest::Status,
    ];
    let replies = vec![ClientReply::Results {
        client: ClientId(9),
        request: RequestNumber(4),
        command_count: 1,
        results: vec![0, 1, 2, 3],
    }];
    (hello, peer, requests, replies)
}

/// The messages of a frames file, in their order: a hello, then peer messages, client
/// requests and client replies.
type Frames = (
    Hello,
    Vec<PeerMessage>,
    Vec<ClientRequest>,
    Vec<ClientReply>,
);

/// Checks the golden frames file `name` against `messages`: made from them (for a version
/// this build writes), it decodes as them, in order, with nothing left over.
fn check_frames(name: &str, messages: &Frames) {
    let (hello, peer, requests, replies) = messages;
    let codec = FrameCodec::new(CLUSTER);
    let bytes = golden_bytes(name, Version::Current, || {
        let mut out = codec.frame(hello).unwrap().to_vec();
        let mut add = |frame: BytesMut| out.extend_from_slice(&frame);
        peer.iter().for_each(|m| add(codec.frame(m).unwrap()));
        requests.iter().for_each(|m| add(codec.frame(m).unwrap()));
        replies.iter().for_each(|m| add(codec.frame(m).unwrap()));
        out
    });
    let mut buffer = BytesMut::from(&bytes[..]);
    let mut decoder = FrameCodec::new(CLUSTER);
    let mut next = || decoder.decode(&mut buffer).unwrap().expect("a whole frame");
    assert_eq!(&engine::codec::decode::<Hello>(&next()).unwrap(), hello);
    for message in peer {
        assert_eq!(
            &engine::codec::decode::<PeerMessage>(&next()).unwrap(),
            message
        );
    }
    for message in requests {
        assert_eq!(
            &engine::codec::decode::<ClientRequest>(&next()).unwrap(),
            message
        );
    }
    for message in replies {
        assert_eq!(
            &engine::codec::decode::<ClientReply>(&next()).unwrap(),
            message
        );
    }
    assert!(buffer.is_empty(), "{} bytes left over", buffer.len());
}

/// Proves this build decodes the frames of protocol version 3 as the messages they were
/// made of.
#[test]
fn protocol_v3_frames_decode() {
    check_frames("protocol-v3.frames", &golden_messages());
}

/// Proves this build decodes the frames protocol version 4 added (a hello offering it, and a
/// read round's check and answer) as the messages they were made of; version 3's frames are
/// unchanged (above).
#[test]
fn protocol_v4_frames_decode() {
    let hello = Hello {
        version: 4,
        cluster: CLUSTER,
        node: Some(engine::NodeId(2)),
    };
    let peer = vec![
        PeerMessage::ReadCheck(net::message::ReadCheck {
            term: Term(3),
            leader: engine::NodeId(1),
            round: 41,
        }),
        PeerMessage::ReadCheckReply(net::message::ReadCheckReply {
            term: Term(3),
            from: engine::NodeId(2),
            round: 41,
        }),
    ];
    check_frames("protocol-v4.frames", &(hello, peer, Vec::new(), Vec::new()));
}
