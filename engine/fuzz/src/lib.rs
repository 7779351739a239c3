//! Helpers shared by the fuzz targets: turning raw bytes into frames whose checksums hold (so
//! that the fuzzer reaches the decoders behind the crc32), feeding a decoder in pieces, and
//! damaging files the way a disk might.
//!
//! Every target reads its first input byte as a mode (see each target) and the rest as data:
//! one mode hands the data over exactly as it would arrive or lie on disk, the others first
//! make it pass the checks a fuzzer cannot guess (a crc32, a blake3 digest), or build a valid
//! artefact with the engine's own writers and damage it where the data says.

use bytes::BytesMut;
use net::frame::{FRAME_HEADER_BYTES, FrameCodec, FrameError};
use tokio_util::codec::Decoder;

/// The cluster id every target's codec uses.
pub const CLUSTER: u64 = 0x00C0_FFEE;

/// Rewrites `data`, read as frames back to back, so that each frame's cluster id is
/// [`CLUSTER`] and its crc32 holds (over the bytes present when the last frame is short).
pub fn fix_frames(data: &mut [u8]) {
    let mut at = 0;
    while data.len() - at >= FRAME_HEADER_BYTES {
        let bytes = u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes")) as usize;
        data[at + 4..at + 12].copy_from_slice(&CLUSTER.to_le_bytes());
        let body_start = at + FRAME_HEADER_BYTES;
        let body_end = body_start.saturating_add(bytes).min(data.len());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&CLUSTER.to_le_bytes());
        crc.update(&data[body_start..body_end]);
        data[at + 12..at + 16].copy_from_slice(&crc.finalize().to_le_bytes());
        at = body_end;
    }
}

/// Feeds `data` to `codec` `chunk_bytes` at a time, as a socket would, and hands every body
/// decoded to `on_body`; stops at the first frame error (the connection would close) and
/// returns it.
pub fn decode_stream(
    codec: &mut FrameCodec,
    data: &[u8],
    chunk_bytes: usize,
    mut on_body: impl FnMut(&[u8]),
) -> Option<FrameError> {
    assert!(chunk_bytes > 0);
    let mut buffer = BytesMut::new();
    for chunk in data.chunks(chunk_bytes) {
        buffer.extend_from_slice(chunk);
        loop {
            match codec.decode(&mut buffer) {
                Ok(Some(body)) => on_body(&body),
                Ok(None) => break,
                Err(error) => return Some(error),
            }
        }
    }
    None
}

/// Splits the mode byte off an input: the mode and the data.
pub fn mode(input: &[u8]) -> Option<(u8, &[u8])> {
    input.split_first().map(|(mode, data)| (*mode, data))
}

/// Applies damage described by `ops` to `bytes`: each 3-byte op is a 16-bit little-endian
/// offset (taken modulo the length) and a byte XORed there. Returns whether any byte changed.
pub fn damage(bytes: &mut [u8], ops: &[u8]) -> bool {
    if bytes.is_empty() {
        return false;
    }
    let before = bytes.to_vec();
    for op in ops.chunks_exact(3) {
        let offset = u16::from_le_bytes([op[0], op[1]]) as usize % bytes.len();
        bytes[offset] ^= op[2];
    }
    bytes != before.as_slice()
}

/// A directory for one run's files: in memory where Linux offers it (a run syncs files, and
/// fsync on tmpfs costs nothing).
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let in_memory = shm
        .is_dir()
        .then(|| tempfile::tempdir_in(shm).ok())
        .flatten();
    in_memory.unwrap_or_else(|| tempfile::tempdir().expect("a temporary directory"))
}

pub mod seeds;
