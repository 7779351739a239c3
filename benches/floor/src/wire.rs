//! The probe's bytes, on the wire and in the WAL alike.
//!
//! A frame is a header of [`FRAME_HEADER_BYTES`] (the body's length `u32`, a sequence number
//! `u64`, the crc32 of the body `u32`, all little-endian) and a body. A request's body is a
//! batch: its command count and pad (`u32` each), then each command ([`COMMAND_BYTES`]: id
//! `u64`, from `u32`, to `u32`, amount `u64`) followed by `pad` filler bytes. A reply's body is
//! one status byte per command. Fixed-width integers: decoding is a few loads per command.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes of a frame's header: body length, sequence number, crc32 of the body.
pub const FRAME_HEADER_BYTES: usize = 4 + 8 + 4;
/// Bytes of a batch's own header: command count, pad bytes per command.
pub const BATCH_HEADER_BYTES: usize = 4 + 4;
/// Bytes of one encoded transfer, before its pad.
pub const COMMAND_BYTES: usize = 8 + 4 + 4 + 8;
/// Commands per batch, at most: as many as the engine takes in one request.
pub const BATCH_COMMANDS_MAX: usize = 1024;
/// Bytes of one command with its pad, at most: the engine's own limit per command.
pub const COMMAND_BYTES_MAX: usize = 4096;
/// Filler bytes per command, at most.
pub const PAD_BYTES_MAX: usize = COMMAND_BYTES_MAX - COMMAND_BYTES;
/// Bytes of a frame's body, at most: a full batch of the largest commands.
pub const FRAME_BODY_BYTES_MAX: usize = BATCH_HEADER_BYTES + BATCH_COMMANDS_MAX * COMMAND_BYTES_MAX;
/// The filler byte (not zero, so that nothing can treat the pad as a hole).
const PAD_BYTE: u8 = 0xA5;

const _: () = assert!(COMMAND_BYTES <= COMMAND_BYTES_MAX);
const _: () = assert!(FRAME_BODY_BYTES_MAX <= u32::MAX as usize);

/// One business command: move `amount` from account `from` to account `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The client's id for the command, as a real command carries one.
    pub id: u64,
    /// The debited account.
    pub from: u32,
    /// The credited account.
    pub to: u32,
    /// The amount moved.
    pub amount: u64,
}

/// A frame's header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the body that follows.
    pub body_bytes: u32,
    /// The leader's sequence number (0 from the client).
    pub seq: u64,
    /// crc32 of the body.
    pub crc: u32,
}

impl Header {
    /// The header's bytes.
    fn encode(self) -> [u8; FRAME_HEADER_BYTES] {
        let mut bytes = [0; FRAME_HEADER_BYTES];
        bytes[0..4].copy_from_slice(&self.body_bytes.to_le_bytes());
        bytes[4..12].copy_from_slice(&self.seq.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.crc.to_le_bytes());
        bytes
    }

    /// The header in the first [`FRAME_HEADER_BYTES`] of `bytes`.
    fn decode(bytes: &[u8]) -> Header {
        Header {
            body_bytes: u32::from_le_bytes(field(bytes, 0)),
            seq: u64::from_le_bytes(field(bytes, 4)),
            crc: u32::from_le_bytes(field(bytes, 12)),
        }
    }
}

/// The `N` bytes of `bytes` at `at` (the caller has checked the length).
fn field<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

/// Writes `transfers` into `frame` as a whole request frame (sequence 0, its crc set), each
/// command followed by `pad` filler bytes. Reuses `frame`'s allocation.
pub fn encode_batch(transfers: &[Transfer], pad: usize, frame: &mut Vec<u8>) {
    assert!(transfers.len() <= BATCH_COMMANDS_MAX && pad <= PAD_BYTES_MAX);
    frame.clear();
    frame.resize(FRAME_HEADER_BYTES, 0);
    frame.extend_from_slice(&(transfers.len() as u32).to_le_bytes());
    frame.extend_from_slice(&(pad as u32).to_le_bytes());
    for transfer in transfers {
        frame.extend_from_slice(&transfer.id.to_le_bytes());
        frame.extend_from_slice(&transfer.from.to_le_bytes());
        frame.extend_from_slice(&transfer.to.to_le_bytes());
        frame.extend_from_slice(&transfer.amount.to_le_bytes());
        frame.resize(frame.len() + pad, PAD_BYTE);
    }
    seal(frame, 0);
}

/// Writes a reply frame of one status byte per command into `frame`.
pub fn encode_reply(statuses: &[u8], seq: u64, frame: &mut Vec<u8>) {
    frame.clear();
    frame.resize(FRAME_HEADER_BYTES, 0);
    frame.extend_from_slice(statuses);
    seal(frame, seq);
}

/// Fills in the header of a frame whose body is in place: length, `seq`, crc32.
fn seal(frame: &mut [u8], seq: u64) {
    let body = &frame[FRAME_HEADER_BYTES..];
    let header = Header {
        body_bytes: body.len() as u32,
        seq,
        crc: crc32fast::hash(body),
    };
    frame[..FRAME_HEADER_BYTES].copy_from_slice(&header.encode());
}

/// Sets a frame's sequence number; the crc covers the body only, so it stays valid.
pub fn set_seq(frame: &mut [u8], seq: u64) {
    frame[4..12].copy_from_slice(&seq.to_le_bytes());
}

/// A frame's body.
pub fn body(frame: &[u8]) -> &[u8] {
    &frame[FRAME_HEADER_BYTES..]
}

/// Checks a whole frame's crc32 against its body.
pub fn check_crc(frame: &[u8]) -> std::io::Result<()> {
    let header = Header::decode(frame);
    match crc32fast::hash(body(frame)) == header.crc {
        true => Ok(()),
        false => Err(invalid(format!("frame {}: crc32 mismatch", header.seq))),
    }
}

/// Decodes a request body into `out` (cleared first), checking every length.
pub fn decode_batch(body: &[u8], out: &mut Vec<Transfer>) -> std::io::Result<()> {
    if body.len() < BATCH_HEADER_BYTES {
        return Err(invalid("batch shorter than its header".into()));
    }
    let count = u32::from_le_bytes(field(body, 0)) as usize;
    let pad = u32::from_le_bytes(field(body, 4)) as usize;
    let stride = COMMAND_BYTES + pad;
    if count > BATCH_COMMANDS_MAX || pad > PAD_BYTES_MAX {
        return Err(invalid(format!(
            "batch of {count} commands, {pad} pad bytes"
        )));
    }
    if body.len() != BATCH_HEADER_BYTES + count * stride {
        return Err(invalid(format!("batch body of {} bytes", body.len())));
    }
    out.clear();
    for command in body[BATCH_HEADER_BYTES..].chunks_exact(stride) {
        out.push(Transfer {
            id: u64::from_le_bytes(field(command, 0)),
            from: u32::from_le_bytes(field(command, 8)),
            to: u32::from_le_bytes(field(command, 12)),
            amount: u64::from_le_bytes(field(command, 16)),
        });
    }
    Ok(())
}

/// Reads one frame into `frame` (header and body, reusing its allocation). `None` when the
/// stream ends cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    frame: &mut Vec<u8>,
) -> std::io::Result<Option<Header>> {
    let mut bytes = [0; FRAME_HEADER_BYTES];
    match reader.read_exact(&mut bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let header = Header::decode(&bytes);
    let body_bytes = header.body_bytes as usize;
    if body_bytes > FRAME_BODY_BYTES_MAX {
        return Err(invalid(format!("frame body of {body_bytes} bytes")));
    }
    frame.clear();
    frame.extend_from_slice(&bytes);
    frame.resize(FRAME_HEADER_BYTES + body_bytes, 0);
    reader.read_exact(&mut frame[FRAME_HEADER_BYTES..]).await?;
    Ok(Some(header))
}

/// An error for bytes that do not hold what they should.
fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfers() -> Vec<Transfer> {
        (0..5)
            .map(|i| Transfer {
                id: u64::MAX - i,
                from: i as u32,
                to: 1_999_999 - i as u32,
                amount: 1 + i * 1000,
            })
            .collect()
    }

    /// Proves a batch decodes to what was encoded, with or without pad, and its crc holds.
    #[test]
    fn a_batch_round_trips() {
        for pad in [0, 40] {
            let mut frame = Vec::new();
            encode_batch(&transfers(), pad, &mut frame);
            let expected = FRAME_HEADER_BYTES + BATCH_HEADER_BYTES + 5 * (COMMAND_BYTES + pad);
            assert_eq!(frame.len(), expected);
            check_crc(&frame).unwrap();
            set_seq(&mut frame, 7);
            check_crc(&frame).unwrap();
            assert_eq!(Header::decode(&frame).seq, 7);
            let mut out = Vec::new();
            decode_batch(body(&frame), &mut out).unwrap();
            assert_eq!(out, transfers());
        }
    }

    /// Proves damaged or inconsistent bytes are refused, never decoded.
    #[test]
    fn bad_bytes_are_refused() {
        let mut frame = Vec::new();
        encode_batch(&transfers(), 40, &mut frame);
        let last = frame.len() - 1;
        frame[last] ^= 1;
        assert!(check_crc(&frame).is_err());
        let mut out = Vec::new();
        assert!(decode_batch(&body(&frame)[..20], &mut out).is_err());
        assert!(decode_batch(&body(&frame)[..body(&frame).len() - 1], &mut out).is_err());
        assert!(decode_batch(&[0xFF; 8], &mut out).is_err());
    }

    /// Proves frames are read back whole from a stream, and a clean end is `None`.
    #[tokio::test]
    async fn frames_are_read_back() {
        let (mut one, mut two) = (Vec::new(), Vec::new());
        encode_batch(&transfers(), 3, &mut one);
        encode_reply(&[0, 1, 0], 9, &mut two);
        let stream = [one.clone(), two.clone()].concat();
        let mut reader = stream.as_slice();
        let mut frame = Vec::new();
        assert!(read_frame(&mut reader, &mut frame).await.unwrap().is_some());
        assert_eq!(frame, one);
        let header = read_frame(&mut reader, &mut frame).await.unwrap().unwrap();
        assert_eq!((header.seq, frame.as_slice()), (9, two.as_slice()));
        assert!(read_frame(&mut reader, &mut frame).await.unwrap().is_none());
    }
}
