//! Frames on every TCP connection:
//! `[body length u32 LE][cluster id u64 LE][crc32 of cluster id and body u32 LE][body]`.
//!
//! The decoder checks the length against its limit before it reserves a byte (and never
//! reserves more than [`FRAME_RESERVE_AHEAD_BYTES_MAX`] ahead of the bytes that arrived),
//! refuses a frame of another cluster, returns "need more bytes" on partial input, and checks
//! the crc32 before handing the body out.

use crate::codec::{self, CodecError, Encode};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::io;
use tokio_util::codec::{Decoder, Encoder};

/// Bytes before a frame's body: its length, its cluster id and its crc32.
pub const FRAME_HEADER_BYTES: usize = 16;
/// Largest frame body accepted or sent between peers, in bytes: room for the largest entry
/// with its message.
pub const FRAME_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Largest frame body a client may send, in bytes: a request of the most commands a request
/// may carry, each as large as a command may be, with the message around them.
pub const CLIENT_FRAME_BODY_BYTES_MAX: usize = crate::entry::REQUEST_COMMANDS_MAX as usize
    * crate::entry::COMMAND_BYTES_MAX as usize
    + MESSAGE_OVERHEAD_BYTES_MAX;
/// Largest frame body accepted during a handshake, in bytes: a hello, a challenge, a proof or
/// an admission (the largest is a few dozen bytes). Nobody unauthenticated makes a node buffer
/// more than this.
pub const HANDSHAKE_FRAME_BODY_BYTES_MAX: usize = 256;
/// Bytes the decoder reserves beyond those already buffered while it waits for the rest of a
/// frame: a peer that claims a large frame and sends little costs little.
pub const FRAME_RESERVE_AHEAD_BYTES_MAX: usize = 64 * 1024;

/// Bytes a message adds around the entries it carries, at most (headers, ids, hashes).
pub const MESSAGE_OVERHEAD_BYTES_MAX: usize = 4096;

const _: () = assert!(
    FRAME_BODY_BYTES_MAX
        >= crate::entry::ENTRY_PAYLOAD_BYTES_MAX as usize + MESSAGE_OVERHEAD_BYTES_MAX,
    "the largest entry fits one frame"
);
const _: () = assert!(FRAME_BODY_BYTES_MAX <= codec::DECODE_BYTES_MAX);
const _: () = assert!(CLIENT_FRAME_BODY_BYTES_MAX <= FRAME_BODY_BYTES_MAX);
const _: () = assert!(HANDSHAKE_FRAME_BODY_BYTES_MAX <= CLIENT_FRAME_BODY_BYTES_MAX);
const _: () = assert!(FRAME_BODY_BYTES_MAX <= u32::MAX as usize);

/// A frame that cannot be read or written. The connection it came on is closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// A length of zero: every message has at least a tag.
    #[error("empty frame")]
    Empty,
    /// A length over the limit, refused before allocating.
    #[error("frame of {bytes} bytes is over the limit of {limit}")]
    TooLarge {
        /// Bytes the frame claimed.
        bytes: usize,
        /// The limit on this connection.
        limit: usize,
    },
    /// A frame of another cluster.
    #[error("frame of cluster {theirs}, this is cluster {ours}")]
    WrongCluster {
        /// The cluster id the frame carries.
        theirs: u64,
        /// This connection's cluster id.
        ours: u64,
    },
    /// The header and body do not match their crc32.
    #[error("frame crc32 mismatch")]
    BadCrc,
    /// A message could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] CodecError),
}

/// The frame codec for tokio-util's `Framed`: frames of one cluster, bodies up to a limit.
#[derive(Clone, Copy, Debug)]
pub struct FrameCodec {
    cluster: u64,
    body_bytes_max: usize,
}

impl FrameCodec {
    /// Frames of cluster `cluster`, bodies up to [`FRAME_BODY_BYTES_MAX`].
    pub fn new(cluster: u64) -> Self {
        FrameCodec {
            cluster,
            body_bytes_max: FRAME_BODY_BYTES_MAX,
        }
    }

    /// Frames of cluster `cluster`, bodies up to `body_bytes_max` (at most
    /// [`FRAME_BODY_BYTES_MAX`]).
    pub fn with_limit(cluster: u64, body_bytes_max: usize) -> Self {
        FrameCodec {
            cluster,
            body_bytes_max: body_bytes_max.min(FRAME_BODY_BYTES_MAX),
        }
    }

    /// The cluster whose frames this codec reads and writes.
    pub fn cluster(&self) -> u64 {
        self.cluster
    }

    /// The largest body this codec takes.
    pub fn limit(&self) -> usize {
        self.body_bytes_max
    }

    /// Changes the largest body this codec takes (at most [`FRAME_BODY_BYTES_MAX`]): small
    /// during a handshake, the port's own limit after it.
    pub fn set_limit(&mut self, body_bytes_max: usize) {
        self.body_bytes_max = body_bytes_max.min(FRAME_BODY_BYTES_MAX);
    }

    fn crc(&self, body: &[u8]) -> u32 {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&self.cluster.to_le_bytes());
        crc.update(body);
        crc.finalize()
    }
}

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
        if bytes > self.body_bytes_max {
            return Err(FrameError::TooLarge {
                bytes,
                limit: self.body_bytes_max,
            });
        }
        let cluster = u64::from_le_bytes(src[4..12].try_into().expect("8 bytes"));
        if cluster != self.cluster {
            return Err(FrameError::WrongCluster {
                theirs: cluster,
                ours: self.cluster,
            });
        }
        if src.len() < FRAME_HEADER_BYTES + bytes {
            let missing = FRAME_HEADER_BYTES + bytes - src.len();
            src.reserve(missing.min(FRAME_RESERVE_AHEAD_BYTES_MAX));
            return Ok(None);
        }
        let crc = u32::from_le_bytes(src[12..16].try_into().expect("4 bytes"));
        src.advance(FRAME_HEADER_BYTES);
        let body = src.split_to(bytes).freeze();
        if self.crc(&body) != crc {
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
        if bytes > self.body_bytes_max {
            dst.truncate(start);
            return Err(FrameError::TooLarge {
                bytes,
                limit: self.body_bytes_max,
            });
        }
        let crc = self.crc(&dst[start + FRAME_HEADER_BYTES..]);
        dst[start..start + 4].copy_from_slice(&(bytes as u32).to_le_bytes());
        dst[start + 4..start + 12].copy_from_slice(&self.cluster.to_le_bytes());
        dst[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }
}

impl FrameCodec {
    /// Encodes `message` as one whole frame (for blocking writers and tests).
    pub fn frame<T: Encode>(&self, message: &T) -> Result<BytesMut, FrameError> {
        let mut out = BytesMut::new();
        let mut codec = *self;
        codec.encode(message, &mut out)?;
        Ok(out)
    }

    /// Reads one whole frame from a blocking reader (the reader's own timeouts apply).
    pub fn read_frame<R: io::Read>(&self, reader: &mut R) -> Result<Bytes, FrameError> {
        let mut buffer = BytesMut::zeroed(FRAME_HEADER_BYTES);
        reader.read_exact(&mut buffer)?;
        let mut codec = *self;
        loop {
            if let Some(body) = codec.decode(&mut buffer)? {
                return Ok(body);
            }
            let have = buffer.len();
            let bytes = u32::from_le_bytes(buffer[..4].try_into().expect("4 bytes")) as usize;
            buffer.resize(FRAME_HEADER_BYTES + bytes, 0);
            reader.read_exact(&mut buffer[have..])?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(messages: &[Vec<u8>]) -> BytesMut {
        let mut out = BytesMut::new();
        for m in messages {
            FrameCodec::new(7).encode(m, &mut out).unwrap();
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
            let mut codec = FrameCodec::new(7);
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
            FrameCodec::new(7).decode(&mut frame),
            Err(FrameError::BadCrc)
        ));

        let mut empty = BytesMut::from(&[0u8; FRAME_HEADER_BYTES][..]);
        assert!(matches!(
            FrameCodec::new(7).decode(&mut empty),
            Err(FrameError::Empty)
        ));

        let mut garbage = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]);
        assert!(FrameCodec::new(7).decode(&mut garbage).is_err());
    }

    /// Proves an oversize length is refused from the header alone, before any allocation.
    #[test]
    fn oversize_length_is_rejected_before_allocating() {
        let mut header = BytesMut::new();
        header.put_u32_le(u32::MAX);
        header.put_u64_le(7);
        header.put_u32_le(0);
        let capacity = header.capacity();
        assert!(
            matches!(FrameCodec::new(7).decode(&mut header), Err(FrameError::TooLarge { bytes, .. }) if bytes == u32::MAX as usize)
        );
        assert_eq!(header.capacity(), capacity, "nothing was reserved");
        let mut limit = BytesMut::new();
        limit.put_u32_le(FRAME_BODY_BYTES_MAX as u32 + 1);
        limit.put_u64_le(7);
        limit.put_u32_le(0);
        assert!(matches!(
            FrameCodec::new(7).decode(&mut limit),
            Err(FrameError::TooLarge { .. })
        ));
    }

    /// Proves a frame of another cluster is refused, and a flipped bit in the cluster id is
    /// caught even by a codec that happens to carry the flipped id (the crc covers it).
    #[test]
    fn another_clusters_frame_is_refused() {
        let frame = FrameCodec::new(7).frame(&vec![1u8, 2, 3]).unwrap();
        let mut theirs = frame.clone();
        assert!(matches!(
            FrameCodec::new(8).decode(&mut theirs),
            Err(FrameError::WrongCluster { theirs: 7, ours: 8 })
        ));
        let mut flipped = frame.clone();
        flipped[4] ^= 1;
        assert!(matches!(
            FrameCodec::new(6).decode(&mut flipped),
            Err(FrameError::BadCrc)
        ));
    }

    /// Proves a frame that claims much and sends little reserves only a bounded amount, and
    /// a client-sized codec refuses a frame a peer codec takes.
    #[test]
    fn reservation_and_client_limit_are_bounded() {
        let mut header = BytesMut::new();
        header.put_u32_le(FRAME_BODY_BYTES_MAX as u32);
        header.put_u64_le(7);
        header.put_u32_le(0);
        assert!(FrameCodec::new(7).decode(&mut header).unwrap().is_none());
        assert!(header.capacity() <= FRAME_HEADER_BYTES + FRAME_RESERVE_AHEAD_BYTES_MAX);

        let big = FrameCodec::new(7)
            .frame(&vec![0u8; CLIENT_FRAME_BODY_BYTES_MAX])
            .unwrap();
        let mut client = FrameCodec::with_limit(7, CLIENT_FRAME_BODY_BYTES_MAX);
        assert!(matches!(
            client.decode(&mut big.clone()),
            Err(FrameError::TooLarge {
                limit: CLIENT_FRAME_BODY_BYTES_MAX,
                ..
            })
        ));
        assert!(
            FrameCodec::new(7)
                .decode(&mut big.clone())
                .unwrap()
                .is_some()
        );
    }

    /// Proves the blocking reader returns the same body as the decoder.
    #[test]
    fn blocking_reader_reads_one_frame() {
        let codec = FrameCodec::new(7);
        let mut bytes = codec.frame(&vec![9u8; 100]).unwrap().to_vec();
        bytes.extend_from_slice(&codec.frame(&vec![1u8]).unwrap());
        let mut reader = &bytes[..];
        let first = codec.read_frame(&mut reader).unwrap();
        assert_eq!(first, codec::encode_to_vec(&vec![9u8; 100]).unwrap());
        let second = codec.read_frame(&mut reader).unwrap();
        assert_eq!(second, codec::encode_to_vec(&vec![1u8]).unwrap());
        assert!(codec.read_frame(&mut reader).is_err());
    }
}
