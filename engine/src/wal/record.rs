//! The on-disk record of one entry: magic, header, crc32 of the header, payload.

use crate::codec;
use crate::entry::{ENTRY_HEADER_BYTES, ENTRY_PAYLOAD_BYTES_MAX, Entry, EntryHeader};
use std::ops::Range;

/// Marks the start of every record ("WAL1").
pub(crate) const RECORD_MAGIC: u32 = 0x5741_4C31;
const _: () = assert!(crate::formats::digit(RECORD_MAGIC.to_be_bytes()[3]) == crate::formats::WAL);
/// Bytes before a record's payload: magic, entry header, header crc32.
pub(crate) const RECORD_HEADER_BYTES: usize = 4 + ENTRY_HEADER_BYTES + 4;

/// Appends the record of `entry` to `out`.
pub(crate) fn encode(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    let header_start = out.len();
    codec::encode_into(&entry.header, out).expect("fixed-size header encodes");
    let crc = crc32fast::hash(&out[header_start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        out.len() - start,
        RECORD_HEADER_BYTES,
        "a record header's fixed size"
    );
    out.extend_from_slice(&entry.payload);
}

/// What lies at an offset of a segment.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A whole record whose header and payload checksums hold.
    Record {
        header: EntryHeader,
        payload: Range<usize>,
        end: usize,
    },
    /// The bytes end before the record does.
    Incomplete,
    /// The bytes are not a valid record (bad magic, checksum or length).
    Damaged(&'static str),
    /// An intact record (magic and header checksum hold) whose header this build cannot read:
    /// written by a newer build (a new entry kind, say). Not damage: nothing may be cut.
    Newer,
}

/// Parses the record starting at `at` in `data`.
pub(crate) fn parse(data: &[u8], at: usize) -> Parsed {
    let rest = &data[at..];
    if rest.len() < RECORD_HEADER_BYTES {
        return if rest.iter().all(|&b| b == 0) || rest.len() < 4 || magic_ok(rest) {
            Parsed::Incomplete
        } else {
            Parsed::Damaged("bad magic")
        };
    }
    if !magic_ok(rest) {
        return Parsed::Damaged("bad magic");
    }
    let header_bytes = &rest[4..4 + ENTRY_HEADER_BYTES];
    let stored_crc = u32::from_le_bytes(
        rest[4 + ENTRY_HEADER_BYTES..RECORD_HEADER_BYTES]
            .try_into()
            .unwrap(),
    );
    if crc32fast::hash(header_bytes) != stored_crc {
        return Parsed::Damaged("header crc32 mismatch");
    }
    let Ok(header) = codec::decode::<EntryHeader>(header_bytes) else {
        return Parsed::Newer;
    };
    if header.payload_bytes > ENTRY_PAYLOAD_BYTES_MAX {
        return Parsed::Damaged("payload length over the limit");
    }
    let end = RECORD_HEADER_BYTES + header.payload_bytes as usize;
    if rest.len() < end {
        return Parsed::Incomplete;
    }
    let payload = RECORD_HEADER_BYTES..end;
    if crc32fast::hash(&rest[payload.clone()]) != header.payload_crc32 {
        return Parsed::Damaged("payload crc32 mismatch");
    }
    Parsed::Record {
        header,
        payload: at + payload.start..at + payload.end,
        end: at + end,
    }
}

/// The entry header of the record at `at`, when its magic and header checksum hold (its
/// payload may still be damaged).
pub(crate) fn header_at(data: &[u8], at: usize) -> Option<EntryHeader> {
    let rest = data.get(at..at + RECORD_HEADER_BYTES)?;
    if !magic_ok(rest) {
        return None;
    }
    let header_bytes = &rest[4..4 + ENTRY_HEADER_BYTES];
    let stored_crc = u32::from_le_bytes(rest[4 + ENTRY_HEADER_BYTES..].try_into().ok()?);
    if crc32fast::hash(header_bytes) != stored_crc {
        return None;
    }
    codec::decode::<EntryHeader>(header_bytes).ok()
}

/// The unit the kernel copies a write in (x86_64's page; a larger page's boundaries are
/// boundaries of this one too): a write a kill cuts short stops at one of its boundaries.
pub(crate) const WRITE_PAGE_BYTES: usize = 4096;

/// Whether the header of a record starting at `at` was never written, or written only up to
/// a page boundary inside it: its bytes are zeros from its start, or from that boundary, to
/// its end (or to the end of `data` if that comes first).
pub(crate) fn header_unwritten(data: &[u8], at: usize) -> bool {
    debug_assert!(
        at < data.len(),
        "a record at byte {at} of {} bytes",
        data.len()
    );
    let end = (at + RECORD_HEADER_BYTES).min(data.len());
    let from = match at % WRITE_PAGE_BYTES {
        0 => at,
        _ => at.next_multiple_of(WRITE_PAGE_BYTES).min(end),
    };
    let zeros = |range: std::ops::Range<usize>| data[range].iter().all(|&b| b == 0);
    zeros(at..end) || from < end && zeros(from..end)
}

fn magic_ok(rest: &[u8]) -> bool {
    rest.len() >= 4 && rest[..4] == RECORD_MAGIC.to_le_bytes()
}

/// The offset of the first whole, valid record after `at`, if any: tells a damaged record in
/// the middle of the log (valid records follow) from a torn tail (nothing valid follows).
pub(crate) fn next_valid(data: &[u8], at: usize) -> Option<usize> {
    let magic = RECORD_MAGIC.to_le_bytes();
    (at + 1..data.len().saturating_sub(3))
        .filter(|&i| data[i..i + 4] == magic)
        .find(|&i| matches!(parse(data, i), Parsed::Record { .. }))
}
