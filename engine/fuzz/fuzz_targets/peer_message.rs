//! Bytes on a peer connection: frames through the peer `FrameCodec`, each body decoded as
//! every message a peer connection carries (`Hello`, `Challenge`, `Proof`, `Admission`,
//! `PeerMessage`), and the entries of an `Append` checked as a follower checks them on receipt
//! (`Entry::verify` against the entry before, which checks the payload first), their payload
//! parsed as the apply loop parses it.
//!
//! Mode byte: bit 0 set makes the data's frames pass their crc32 and carry this cluster's id
//! first; bits 1..8 give the bytes per read (1 to 128).

#![no_main]

use engine::internals::entry::{EntryKind, parse_payload_of};
use engine_fuzz::{CLUSTER, decode_stream, fix_frames, mode};
use libfuzzer_sys::fuzz_target;
use net::codec;
use net::frame::{FRAME_BODY_BYTES_MAX, FrameCodec};
use net::message::{Admission, Append, Challenge, Hello, PeerMessage, Proof};

fuzz_target!(|input: &[u8]| {
    let Some((mode, data)) = mode(input) else {
        return;
    };
    let mut data = data.to_vec();
    if mode & 1 == 1 {
        fix_frames(&mut data);
    }
    let chunk_bytes = 1 + (mode >> 1) as usize;
    let mut codec = FrameCodec::new(CLUSTER);
    decode_stream(&mut codec, &data, chunk_bytes, |body| {
        assert!(body.len() <= FRAME_BODY_BYTES_MAX);
        let _ = codec::decode::<Hello>(body);
        let _ = codec::decode::<Challenge>(body);
        let _ = codec::decode::<Proof>(body);
        let _ = codec::decode::<Admission>(body);
        if let Ok(PeerMessage::Append(append)) = codec::decode::<PeerMessage>(body) {
            receive(&append);
        }
    });
});

/// A follower's checks of the entries an append carries.
fn receive(append: &Append) {
    let mut prev_hash = None;
    for entry in &append.entries {
        let checked = entry.check_payload();
        if let Some(prev_hash) = prev_hash {
            let verified = entry.verify(&prev_hash);
            assert!(
                checked.is_ok() || verified.is_err(),
                "verify checks the payload"
            );
        }
        if matches!(
            entry.header.kind,
            EntryKind::Commands | EntryKind::KeyedCommands
        ) {
            let _ = parse_payload_of(entry.header.kind, &entry.payload);
        }
        prev_hash = Some(entry.header.hash);
    }
}
