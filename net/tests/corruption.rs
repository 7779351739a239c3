//! Damaged frames never pass: any single flipped bit, any burst of flipped bits inside a window
//! of up to 32 bits, anywhere in a frame (its 16-byte header of length, cluster id and crc32
//! included), makes the decoder refuse the frame or wait for bytes; it never hands out a body,
//! not even once the next frame's bytes arrive behind it. A frame cut at any byte waits.
//!
//! Why these hold: a flip in the cluster id is `WrongCluster`; in the crc32 alone, `BadCrc`; in
//! the body alone, `BadCrc` for certain (a crc32 detects every burst of up to 32 bits in what
//! it covers); in the length, `Empty`, `TooLarge`, a wait, or a shorter or longer body whose
//! crc32 fails (a 2^-32 chance of a miss, as for a burst over both the crc32 and the body).

use bytes::BytesMut;
use net::codec;
use net::frame::{FRAME_HEADER_BYTES, FrameCodec, FrameError};
use net::ids::{ClientId, RequestNumber};
use net::message::{ClientRequest, Submit};
use proptest::prelude::*;
use tokio_util::codec::Decoder;

const CLUSTER: u64 = 0x5EED_0FC1_A57E_2500;

/// A client request of `commands` bytes, framed; and its body.
fn frame_of(commands: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let request = ClientRequest::Submit(Submit {
        client: ClientId(7),
        request: RequestNumber(3),
        oldest_pending: RequestNumber(3),
        command_count: 1,
        commands,
    });
    let frame = FrameCodec::new(CLUSTER).frame(&request).unwrap().to_vec();
    let body = codec::encode_to_vec(&request).unwrap();
    assert_eq!(frame.len(), FRAME_HEADER_BYTES + body.len());
    (frame, body)
}

/// Every body the decoder hands out from `bytes` before it errs or waits, and how it stopped.
fn decode_all(bytes: &[u8]) -> (Vec<Vec<u8>>, Result<(), FrameError>) {
    let mut codec = FrameCodec::new(CLUSTER);
    let mut buffer = BytesMut::from(bytes);
    let mut bodies = Vec::new();
    loop {
        match codec.decode(&mut buffer) {
            Ok(Some(body)) => bodies.push(body.to_vec()),
            Ok(None) => return (bodies, Ok(())),
            Err(error) => return (bodies, Err(error)),
        }
    }
}

/// XORs `pattern` (bit 0 first) into `bytes` from bit `start` on, as far as the bytes reach;
/// returns whether a bit changed.
fn flip_bits(bytes: &mut [u8], start: usize, pattern: u32) -> bool {
    let bits = bytes.len() * 8;
    let mut changed = false;
    for i in 0..32 {
        let bit = start + i;
        if pattern >> i & 1 == 1 && bit < bits {
            bytes[bit / 8] ^= 1 << (bit % 8);
            changed = true;
        }
    }
    changed
}

/// Asserts that a damaged frame, alone and with a good frame behind it, yields no body.
fn assert_refused(damaged: &[u8]) -> Result<(), TestCaseError> {
    let (bodies, _) = decode_all(damaged);
    prop_assert!(bodies.is_empty(), "the damaged frame alone passed");
    let (next, _) = frame_of(vec![0xAB; 40]);
    let mut stream = damaged.to_vec();
    stream.extend_from_slice(&next);
    let (bodies, _) = decode_all(&stream);
    prop_assert!(
        bodies.is_empty(),
        "a body passed before the stream was refused"
    );
    Ok(())
}

fn commands() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Proves any single flipped bit anywhere in a frame is refused or waited on.
    #[test]
    fn single_bit_flips_are_detected(commands in commands(), at in any::<prop::sample::Index>()) {
        let (mut frame, _) = frame_of(commands);
        let bit = at.index(frame.len() * 8);
        prop_assert!(flip_bits(&mut frame, bit, 1));
        assert_refused(&frame)?;
    }

    /// Proves any burst of flipped bits within a window of up to 32 bits, anywhere in a frame,
    /// is refused or waited on.
    #[test]
    fn bursts_up_to_32_bits_are_detected(
        commands in commands(),
        at in any::<prop::sample::Index>(),
        pattern in 1..=u32::MAX,
        window in 1..=32u32,
    ) {
        let (mut frame, _) = frame_of(commands);
        let start = at.index(frame.len() * 8);
        // The pattern within the window, kept to the bits the frame has (never all zero).
        let reach = window.min((frame.len() * 8 - start) as u32);
        let mut pattern = pattern & (u32::MAX >> (32 - reach));
        if pattern == 0 {
            pattern = 1;
        }
        prop_assert!(flip_bits(&mut frame, start, pattern));
        assert_refused(&frame)?;
    }

    /// Proves a flip in the cluster id is refused as another cluster's frame, or on its crc32
    /// by a codec whose cluster matches the damaged id.
    #[test]
    fn cluster_id_flips_are_refused(commands in commands(), bit in 32..96usize) {
        let (mut frame, _) = frame_of(commands);
        flip_bits(&mut frame, bit, 1);
        let (bodies, end) = decode_all(&frame);
        prop_assert!(bodies.is_empty());
        let refused_as_other = matches!(end, Err(FrameError::WrongCluster { .. }));
        prop_assert!(refused_as_other, "{end:?}");
        let theirs = u64::from_le_bytes(frame[4..12].try_into().unwrap());
        let decoded = FrameCodec::new(theirs).decode(&mut BytesMut::from(&frame[..]));
        prop_assert!(matches!(decoded, Err(FrameError::BadCrc)), "{decoded:?}");
    }

    /// Proves a frame cut at any byte waits for the rest and never yields a body; whole, it
    /// yields exactly its body.
    #[test]
    fn cut_frames_wait(commands in commands(), at in any::<prop::sample::Index>()) {
        let (frame, body) = frame_of(commands);
        let cut = at.index(frame.len());
        let (bodies, end) = decode_all(&frame[..cut]);
        prop_assert!(bodies.is_empty());
        prop_assert!(end.is_ok(), "a cut frame waits: {end:?}");
        let (bodies, end) = decode_all(&frame);
        prop_assert_eq!(bodies, vec![body]);
        prop_assert!(end.is_ok());
    }
}

/// Proves, exhaustively for one frame, that every single bit flip and every cut is caught
/// (the properties above sample frames; this covers every position of one).
#[test]
fn every_bit_and_every_cut_of_one_frame() {
    let (frame, body) = frame_of((0..64).collect());
    for bit in 0..frame.len() * 8 {
        let mut damaged = frame.clone();
        flip_bits(&mut damaged, bit, 1);
        assert_refused(&damaged).unwrap_or_else(|e| panic!("bit {bit}: {e}"));
    }
    for cut in 0..frame.len() {
        let (bodies, end) = decode_all(&frame[..cut]);
        assert!(bodies.is_empty() && end.is_ok(), "cut at {cut}");
        let decoded = codec::decode::<ClientRequest>(&body[..cut.min(body.len() - 1)]);
        assert!(
            decoded.is_err(),
            "a cut body does not decode (cut at {cut})"
        );
    }
}
