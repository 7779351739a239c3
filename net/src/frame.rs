//! Frames on every TCP connection: `[body length u32 LE][crc32 of the body u32 LE][body]`.
//!
//! The decoder checks the length against the limit before it reserves a byte, returns "need
//! more bytes" on partial input, and checks the crc32 before handing the body out.

use crate::codec::{self, CodecError, Encode};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io;
use tokio_util::codec::{Decoder, Encoder};

/// Bytes before a frame's body: its length and its crc32.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Largest frame body accepted or sent, in bytes: room for the largest entry with its message.
pub const FRAME_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Bytes a message adds around the entries it carries, at most (headers, ids, hashes).
pub const MESSAGE_OVERHEAD_BYTES_MAX: usize = 4096;

const _: () = assert!(
    FRAME_BODY_BYTES_MAX
        >= crate::entry::ENTRY_PAYLOAD_BYTES_MAX as usize + MESSAGE_OVERHEAD_BYTES_MAX,
    "the largest entry fits one frame"
);
const _: () = assert!(FRAME_BODY_BYTES_MAX <= codec::DECODE_BYTES_MAX);

/// A frame that cannot be read or written. The connection it came on is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// A length of zero: every message has at least a tag.
    #[error("empty frame")]
    Empty,
    /// A length over the limit, refused before allocating.
    #[error("frame of {bytes} bytes is over the limit of {FRAME_BODY_BYTES_MAX}")]
    TooLarge {
        /// Bytes the frame claimed.
        bytes: usize,
    },
    /// The body does not match its crc32.
    #[error("frame crc32 mismatch")]
    BadCrc,
    /// A message could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] CodecError),
}

/// The frame codec for tokio-util's `Framed`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FrameCodec;

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if src.len() < FRAME_HEADER_BYTES {
            return Ok(None);
        }
        let bytes = u32::from_le_bytes(src[..4].try_into().expect("4 bytes")) as usize;
        if bytes == 0 {
            return Err(FrameError::Empty);
        }
        if bytes > FRAME_BODY_BYTES_MAX {
            return Err(FrameError::TooLarge { bytes });
        }
        if src.len() < FRAME_HEADER_BYTES + bytes {
            src.reserve(FRAME_HEADER_BYTES + bytes - src.len());
            return Ok(None);
        }
        let crc = u32::from_le_bytes(src[4..8].try_into().expect("4 bytes"));
        src.advance(FRAME_HEADER_BYTES);
        let body = src.split_to(bytes).freeze();
        if crc32fast::hash(&body) != crc {
            return Err(FrameError::BadCrc);
        }
        Ok(Some(body))
    }
}

impl<T: Encode> Encoder<&T> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, message: &T, dst: &mut BytesMut) -> Result<(), FrameError> {
        let start = dst.len();
        dst.put_bytes(0, FRAME_HEADER_BYTES);
        codec::encode_into_bytes(message, dst)?;
        let bytes = dst.len() - start - FRAME_HEADER_BYTES;
        if bytes > FRAME_BODY_BYTES_MAX {
            dst.truncate(start);
            return Err(FrameError::TooLarge { bytes });
        }
        let crc = crc32fast::hash(&dst[start + FRAME_HEADER_BYTES..]);
        dst[start..start + 4].copy_from_slice(&(bytes as u32).to_le_bytes());
        dst[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }
}

/// Encodes `message` as one whole frame (for tests and one-off writers).
pub fn encode_frame<T: Encode>(message: &T) -> Result<BytesMut, FrameError> {
    let mut out = BytesMut::new();
    FrameCodec.encode(message, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(messages: &[Vec<u8>]) -> BytesMut {
        let mut out = BytesMut::new();
        for m in messages {
            FrameCodec.encode(m, &mut out).unwrap();
        }
        out
    }

    fn decode_all(codec: &mut FrameCodec, buf: &mut BytesMut) -> Result<Vec<Bytes>, FrameError> {
        let mut out = Vec::new();
        while let Some(body) = codec.decode(buf)? {
            out.push(body);
        }
        Ok(out)
    }

    /// Proves a stream of frames split at every byte offset decodes to the same bodies.
    #[test]
    fn split_at_every_offset_decodes() {
        let messages = vec![vec![1u8, 2, 3], vec![9; 300], vec![7]];
        let whole = frames(&messages);
        let expected: Vec<Bytes> = messages
            .iter()
            .map(|m| Bytes::from(codec::encode_to_vec(m).unwrap()))
            .collect();
        for cut in 0..=whole.len() {
            let mut codec = FrameCodec;
            let mut buf = BytesMut::from(&whole[..cut]);
            let mut got = decode_all(&mut codec, &mut buf).unwrap();
            buf.extend_from_slice(&whole[cut..]);
            got.extend(decode_all(&mut codec, &mut buf).unwrap());
            assert_eq!(got, expected, "cut at {cut}");
            assert!(buf.is_empty());
        }
    }

    /// Proves a flipped bit in the body, zero lengths and garbage are rejected.
    #[test]
    fn bad_crc_empty_and_garbage_are_rejected() {
        let mut frame = frames(&[vec![5u8; 40]]);
        let last = frame.len() - 1;
        frame[last] ^= 1;
        assert!(matches!(
            FrameCodec.decode(&mut frame),
            Err(FrameError::BadCrc)
        ));

        let mut empty = BytesMut::from(&[0u8; 8][..]);
        assert!(matches!(
            FrameCodec.decode(&mut empty),
            Err(FrameError::Empty)
        ));

        let mut garbage = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
        assert!(FrameCodec.decode(&mut garbage).is_err());
    }

    /// Proves an oversize length is refused from the header alone, before any allocation.
    #[test]
    fn oversize_length_is_rejected_before_allocating() {
        let mut header = BytesMut::new();
        header.put_u32_le(u32::MAX);
        header.put_u32_le(0);
        let capacity = header.capacity();
        assert!(
            matches!(FrameCodec.decode(&mut header), Err(FrameError::TooLarge { bytes }) if bytes == u32::MAX as usize)
        );
        assert_eq!(header.capacity(), capacity, "nothing was reserved");
        let mut limit = BytesMut::new();
        limit.put_u32_le(FRAME_BODY_BYTES_MAX as u32 + 1);
        limit.put_u32_le(0);
        assert!(matches!(
            FrameCodec.decode(&mut limit),
            Err(FrameError::TooLarge { .. })
        ));
    }
}
