//! Seed inputs for the fuzz targets, made with the real encoders: a fuzzer starting from
//! nothing takes long to form a request whose commands decode, or an append whose entries
//! chain (5 minutes of client_frame never did). `cargo test --manifest-path
//! engine/fuzz/Cargo.toml` writes them to engine/fuzz/seeds/TARGET (committed); run.sh hands
//! that directory to each target beside its corpus.

use crate::CLUSTER;
use bank::workload::{mixed_stream, open_command};
use bank::{Bank, BankCommand};
use bytes::{Bytes, BytesMut};
use engine::internals::entry::{Entry, EntryHash, EntryKind, Request, encode_commands, whole_requests_entry};
use engine::internals::wal::{WAL_SEGMENT_BYTES_MIN, Wal};
use engine::{ClientId, EntryIndex, NodeId, RequestNumber, StateMachine, Term};
use net::codec::Encode;
use net::frame::FrameCodec;
use net::ids::StateHash;
use net::message::{
    Admission, Append, AppendOutcome, AppendReply, AppliedHash, Challenge, ClientReply,
    ClientRequest, Hello, Mode, PeerMessage, Proof, Refusal, Rejection, SnapshotChunk, Submit,
    LogEnd, Vote, VoteReply,
};
use std::fs;
use std::path::Path;
use tokio_util::codec::Encoder;

/// Frames `messages` back to back, behind a mode byte of `mode`.
fn framed<T: Encode>(mode: u8, messages: &[T]) -> Vec<u8> {
    let mut out = BytesMut::new();
    let mut codec = FrameCodec::new(CLUSTER);
    for message in messages {
        codec
            .encode(message, &mut out)
            .expect("a seed message frames");
    }
    let mut input = vec![mode];
    input.extend_from_slice(&out);
    input
}

/// `mode` followed by the encoding of `value`.
fn encoded<T: Encode>(mode: u8, value: &T) -> Vec<u8> {
    let mut input = vec![mode];
    net::codec::encode_into(value, &mut input).expect("a seed message encodes");
    input
}

fn submit(request: u64, commands: &[BankCommand]) -> Submit {
    Submit {
        client: ClientId(7),
        request: RequestNumber(request),
        oldest_pending: RequestNumber(request),
        command_count: commands.len() as u32,
        commands: encode_commands(commands),
    }
}

/// Chained entries of Bank requests (the first a no-op, as a new leader's).
fn entries(count: u64) -> Vec<Entry> {
    let mut prev = EntryHash::default();
    let mut out = Vec::new();
    for index in 1..=count {
        let entry = if index == 1 {
            let noop = Bytes::new();
            Entry::seal(
                EntryIndex(1),
                Term(1),
                EntryKind::Noop,
                EntryIndex(0),
                0,
                noop,
                &prev,
            )
        } else {
            let commands = encode_commands(&mixed_stream(index, 6, 8));
            let request = Request {
                client: ClientId(u128::from(index % 3)),
                number: RequestNumber(index),
                command_count: 6,
                commands: &commands,
            };
            whole_requests_entry(EntryIndex(index), Term(1), &prev, index, &[request])
        };
        prev = entry.header.hash;
        out.push(entry);
    }
    out
}

fn peer_messages() -> Vec<PeerMessage> {
    let append = Append {
        term: Term(1),
        leader: NodeId(1),
        prev_index: EntryIndex(0),
        prev_term: Term(0),
        entries: entries(4),
        commit: EntryIndex(1),
        applied: Some(AppliedHash {
            index: EntryIndex(1),
            hash: StateHash([3; 32]),
        }),
    };
    vec![
        PeerMessage::Append(append),
        PeerMessage::AppendReply(AppendReply {
            term: Term(1),
            from: NodeId(2),
            outcome: AppendOutcome::Matched {
                index: EntryIndex(4),
            },
            applied: None,
        }),
        PeerMessage::Vote(Vote {
            term: Term(2),
            pre: false,
            candidate: NodeId(3),
            last_index: EntryIndex(4),
            last_term: Term(1),
        }),
        PeerMessage::VoteReply(VoteReply {
            term: Term(2),
            pre: false,
            from: NodeId(1),
            granted: true,
        }),
        PeerMessage::Snapshot(SnapshotChunk {
            term: Term(2),
            leader: NodeId(3),
            index: EntryIndex(4),
            offset: 0,
            total: 5,
            data: vec![1, 2, 3, 4, 5],
        }),
        PeerMessage::LogEnd(LogEnd {
            term: Term(2),
            from: NodeId(2),
            last_index: EntryIndex(4),
            last_term: Term(1),
            ask: true,
        }),
    ]
}

fn client_seeds() -> Vec<Vec<u8>> {
    let opens: Vec<BankCommand> = (0..4).map(open_command).collect();
    let requests = [
        ClientRequest::Submit(submit(1, &opens)),
        ClientRequest::Submit(submit(2, &mixed_stream(1, 12, 4))),
        ClientRequest::Status,
        ClientRequest::SetMode(Mode::Performance),
    ];
    vec![
        framed(0, &requests),
        framed(0x1F, &requests[..1]),
        framed(
            0,
            &[ClientRequest::Submit(submit(3, &[BankCommand::Audit]))],
        ),
    ]
}

fn peer_seeds() -> Vec<Vec<u8>> {
    let refused = Admission::Refused(Refusal::FrameTooLarge { bytes: 9, limit: 8 });
    vec![
        framed(
            0,
            &[Hello {
                version: net::message::PROTOCOL_VERSION,
                cluster: CLUSTER,
                node: Some(NodeId(2)),
            }],
        ),
        framed(
            0,
            &[Challenge {
                nonce: [9; net::auth::NONCE_BYTES],
            }],
        ),
        framed(
            0,
            &[Proof {
                mac: [5; net::auth::MAC_BYTES],
            }],
        ),
        framed(0, &[Admission::Accepted, refused]),
        framed(0, &peer_messages()),
        framed(0x3F, &peer_messages()[..1]),
    ]
}

fn round_trip_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = peer_messages().iter().map(|m| encoded(1, m)).collect();
    seeds.push(encoded(
        0,
        &ClientRequest::Submit(submit(1, &mixed_stream(2, 3, 4))),
    ));
    seeds.push(encoded(0, &ClientRequest::SetMode(Mode::Verify)));
    let replies = [
        ClientReply::Results {
            client: ClientId(1),
            request: RequestNumber(2),
            command_count: 1,
            results: vec![0, 0, 0, 0, 1],
        },
        ClientReply::NotLeader {
            leader: Some(NodeId(2)),
            address: Some("127.0.0.1:7000".into()),
        },
        ClientReply::Rejected {
            request: RequestNumber(3),
            reason: Rejection::Malformed { command: 1 },
        },
        ClientReply::Stale {
            request: RequestNumber(1),
        },
        ClientReply::Reused {
            request: RequestNumber(4),
        },
        ClientReply::ModeSet(Mode::Performance),
        ClientReply::Refused(Refusal::Unauthenticated),
    ];
    seeds.extend(replies.iter().map(|r| encoded(2, r)));
    seeds
}

fn wal_seeds() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open_with(dir.path(), WAL_SEGMENT_BYTES_MIN).unwrap();
    for entry in entries(5) {
        wal.append(&entry).unwrap();
    }
    let segment = fs::read(dir.path().join(format!("{:020}.wal", 1))).unwrap();
    let mut raw = vec![0];
    raw.extend_from_slice(&segment);
    // Built logs: 6 entries of assorted sizes, intact; then with a flipped bit and cut short.
    let built = vec![2, 5, 0, 3, 10, 40, 1, 7];
    let mut damaged = vec![3, 5, 200, 3, 10, 40, 1, 7, 7];
    damaged.extend_from_slice(&[100, 0, 0x10]);
    vec![raw, built, damaged]
}

fn snapshot_seeds() -> Vec<Vec<u8>> {
    let commands = encode_commands(&mixed_stream(4, 40, 10));
    let request = Request {
        client: ClientId(1),
        number: RequestNumber(1),
        command_count: 40,
        commands: &commands,
    };
    let entry = whole_requests_entry(EntryIndex(1), Term(1), &EntryHash::default(), 7, &[request]);
    let mut machine = StateMachine::new(Bank, 1 << 20);
    machine.apply(&entry).unwrap();
    let (_, file) = machine.snapshot_file().unwrap();
    let mut raw = vec![0];
    raw.extend_from_slice(&file);
    let mut digest_added = vec![1];
    digest_added.extend_from_slice(&file[..file.len() - engine::internals::snapshot::DIGEST_BYTES]);
    vec![
        raw,
        digest_added,
        vec![2, 12, 0],
        vec![2, 12, 1, 40, 0, 0x80],
        // A delta beside its whole snapshot: intact, damaged, damaged with its digest fixed.
        vec![3, 12, 0],
        vec![3, 12, 0, 40, 0, 0x80],
        vec![3, 12, 1, 40, 0, 0x80],
    ]
}

/// Writes every target's seeds to `dir`/TARGET/seed-N, replacing what was there.
pub fn write_seeds(dir: &Path) {
    let targets = [
        ("client_frame", client_seeds()),
        ("peer_message", peer_seeds()),
        ("round_trip", round_trip_seeds()),
        ("wal_recovery", wal_seeds()),
        ("snapshot_file", snapshot_seeds()),
    ];
    for (target, seeds) in targets {
        let dir = dir.join(target);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        for (n, seed) in seeds.iter().enumerate() {
            fs::write(dir.join(format!("seed-{n}")), seed).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Writes the seeds where run.sh finds them (engine/fuzz/seeds).
    #[test]
    fn write_seeds() {
        super::write_seeds(&Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds"));
    }
}
