//! Log entries: a header (index, term, command count, payload crc32, blake3 hash chained to the
//! previous entry) and a payload of request fragments, each a run of one client request's
//! commands.

use crate::codec::{self, Decode, Encode};
use crate::ids::{ClientId, EntryIndex, RequestNumber, Term};
use bytes::Bytes;
use std::fmt;

/// Most commands one entry may hold; the configured maximum lies between
/// [`ENTRY_COMMANDS_CONFIG_MIN`] and this.
pub const ENTRY_COMMANDS_MAX: u32 = 1024;
/// Least value the configured maximum of commands per entry may take.
pub const ENTRY_COMMANDS_CONFIG_MIN: u32 = 16;
/// Most commands one client request may carry (a request holds at least one).
pub const REQUEST_COMMANDS_MAX: u32 = 1024;
/// Most bytes one encoded command may take.
pub const COMMAND_BYTES_MAX: u32 = 4096;
/// Most bytes of payload one entry may carry: its commands plus their fragment headers.
pub const ENTRY_PAYLOAD_BYTES_MAX: u32 =
    ENTRY_COMMANDS_MAX * (COMMAND_BYTES_MAX + FRAGMENT_HEADER_BYTES) + PAYLOAD_HEADER_BYTES;
/// Bytes of an encoded [`EntryHeader`] (the kind encodes as a u32).
pub const ENTRY_HEADER_BYTES: usize = 8 + 8 + 4 + 4 + 4 + 4 + 32;
/// Bytes of an encoded [`PayloadHeader`].
pub const PAYLOAD_HEADER_BYTES: u32 = 8 + 4;
/// Bytes of an encoded [`FragmentHeader`].
pub const FRAGMENT_HEADER_BYTES: u32 = 8 + 8 + 4 + 4 + 4 + 4;

const _: () = assert!(ENTRY_COMMANDS_CONFIG_MIN <= ENTRY_COMMANDS_MAX);
const _: () = assert!(REQUEST_COMMANDS_MAX <= ENTRY_COMMANDS_MAX);
const _: () = assert!((ENTRY_PAYLOAD_BYTES_MAX as usize) < codec::DECODE_BYTES_MAX);

/// A blake3 hash that chains an entry to all entries before it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
pub struct EntryHash(pub [u8; 32]);

impl fmt::Debug for EntryHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryHash(")?;
        self.0[..8].iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, ")")
    }
}

/// What an entry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
#[repr(u8)]
pub enum EntryKind {
    /// Client commands.
    Commands = 1,
    /// Nothing: a new leader's first entry, which commits the entries of earlier terms.
    Noop = 2,
}

/// The fixed-size header of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
pub struct EntryHeader {
    /// The entry's position in the log.
    pub index: EntryIndex,
    /// The term of the leader that created it.
    pub term: Term,
    /// What the payload holds.
    pub kind: EntryKind,
    /// Commands in the payload.
    pub command_count: u32,
    /// Bytes of payload.
    pub payload_bytes: u32,
    /// crc32 of the payload.
    pub payload_crc32: u32,
    /// blake3 of the previous entry's hash, this header's other fields and the payload.
    pub hash: EntryHash,
}

/// A damaged or mismatched entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The payload's length differs from the header's.
    #[error("entry {index}: payload is {actual} bytes, header says {expected}")]
    PayloadLength {
        /// The entry's index.
        index: EntryIndex,
        /// Bytes the header claims.
        expected: u32,
        /// Bytes present.
        actual: usize,
    },
    /// The payload's crc32 does not match the header's.
    #[error("entry {index}: payload crc32 mismatch")]
    PayloadCrc {
        /// The entry's index.
        index: EntryIndex,
    },
    /// The hash does not chain to the previous entry.
    #[error("entry {index}: hash does not chain to the previous entry")]
    HashChain {
        /// The entry's index.
        index: EntryIndex,
    },
}

/// One log entry: its header and its payload (shared, never copied, between the WAL writer, the
/// replication streams and the apply loop).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The header.
    pub header: EntryHeader,
    /// The payload: a [`PayloadHeader`] and request fragments, or empty for a no-op.
    pub payload: Bytes,
}

impl Entry {
    /// Seals an entry: computes its payload crc32 and its hash chained to `prev_hash`.
    pub fn seal(
        index: EntryIndex,
        term: Term,
        kind: EntryKind,
        command_count: u32,
        payload: Bytes,
        prev_hash: &EntryHash,
    ) -> Entry {
        assert!(
            payload.len() <= ENTRY_PAYLOAD_BYTES_MAX as usize,
            "payload over the limit"
        );
        let mut header = EntryHeader {
            index,
            term,
            kind,
            command_count,
            payload_bytes: payload.len() as u32,
            payload_crc32: crc32fast::hash(&payload),
            hash: EntryHash::default(),
        };
        header.hash = chain_hash(prev_hash, &header, &payload);
        Entry { header, payload }
    }

    /// Checks the payload against the header's length and crc32.
    pub fn check_payload(&self) -> Result<(), EntryError> {
        let index = self.header.index;
        if self.payload.len() != self.header.payload_bytes as usize {
            return Err(EntryError::PayloadLength {
                index,
                expected: self.header.payload_bytes,
                actual: self.payload.len(),
            });
        }
        if crc32fast::hash(&self.payload) != self.header.payload_crc32 {
            return Err(EntryError::PayloadCrc { index });
        }
        Ok(())
    }

    /// Checks the payload and that the hash chains to `prev_hash`.
    pub fn verify(&self, prev_hash: &EntryHash) -> Result<(), EntryError> {
        self.check_payload()?;
        if chain_hash(prev_hash, &self.header, &self.payload) != self.header.hash {
            return Err(EntryError::HashChain {
                index: self.header.index,
            });
        }
        Ok(())
    }

    /// A command entry holding each of `requests` whole, stamped `now_ms`.
    pub fn whole_requests(
        index: EntryIndex,
        term: Term,
        prev_hash: &EntryHash,
        now_ms: u64,
        requests: &[Request<'_>],
    ) -> Entry {
        let mut payload = PayloadBuilder::new(now_ms);
        for request in requests {
            payload.push(&request.whole_fragment(), request.commands);
        }
        let (payload, command_count) = payload.finish();
        Entry::seal(
            index,
            term,
            EntryKind::Commands,
            command_count,
            payload,
            prev_hash,
        )
    }

    /// The entry's index.
    pub fn index(&self) -> EntryIndex {
        self.header.index
    }

    /// The entry's term.
    pub fn term(&self) -> Term {
        self.header.term
    }
}

/// blake3 over the previous hash, the header's fields but its hash, and the payload.
pub(crate) fn chain_hash(prev_hash: &EntryHash, header: &EntryHeader, payload: &[u8]) -> EntryHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&prev_hash.0);
    hasher.update(&header.index.0.to_le_bytes());
    hasher.update(&header.term.0.to_le_bytes());
    hasher.update(&[header.kind as u8]);
    hasher.update(&header.command_count.to_le_bytes());
    hasher.update(&header.payload_bytes.to_le_bytes());
    hasher.update(&header.payload_crc32.to_le_bytes());
    hasher.update(payload);
    EntryHash(*hasher.finalize().as_bytes())
}

/// The start of a command entry's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
pub struct PayloadHeader {
    /// The leader's clock when it formed the entry, in ms since the Unix epoch: the time
    /// handlers see.
    pub now_ms: u64,
    /// Fragments that follow.
    pub fragment_count: u32,
}

/// A run of consecutive commands of one client request. A request that does not fit in the
/// space left in an entry is split across entries; each piece is a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
pub struct FragmentHeader {
    /// The client.
    pub client: ClientId,
    /// The client's request number.
    pub request: RequestNumber,
    /// Commands in the whole request.
    pub request_commands: u32,
    /// Position in the request of this fragment's first command.
    pub first_command: u32,
    /// Commands in this fragment.
    pub command_count: u32,
    /// Bytes of the encoded commands that follow this header.
    pub command_bytes: u32,
}

impl FragmentHeader {
    /// True when this fragment ends its request.
    pub fn is_last(&self) -> bool {
        self.first_command + self.command_count == self.request_commands
    }
}

/// One client request, its commands already encoded back to back.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The client.
    pub client: ClientId,
    /// Its request number.
    pub number: RequestNumber,
    /// Commands in `commands`.
    pub command_count: u32,
    /// The encoded commands.
    pub commands: &'a [u8],
}

impl Request<'_> {
    /// The fragment that carries the whole request.
    pub fn whole_fragment(&self) -> FragmentHeader {
        FragmentHeader {
            client: self.client,
            request: self.number,
            request_commands: self.command_count,
            first_command: 0,
            command_count: self.command_count,
            command_bytes: self.commands.len() as u32,
        }
    }
}

/// Encodes commands back to back, as a request carries them.
pub fn encode_commands<C: Encode>(commands: &[C]) -> Vec<u8> {
    let mut out = Vec::new();
    for command in commands {
        codec::encode_into(command, &mut out).expect("commands encode into a vector");
    }
    out
}

/// Builds a command entry's payload, reusing one buffer.
#[derive(Debug)]
pub struct PayloadBuilder {
    buf: Vec<u8>,
    fragments: u32,
    commands: u32,
}

impl PayloadBuilder {
    /// An empty payload stamped with the leader's time.
    pub fn new(now_ms: u64) -> Self {
        let mut buf = Vec::with_capacity(64 * 1024);
        let header = PayloadHeader {
            now_ms,
            fragment_count: 0,
        };
        codec::encode_into(&header, &mut buf).expect("fixed-size header encodes");
        PayloadBuilder {
            buf,
            fragments: 0,
            commands: 0,
        }
    }

    /// Commands so far.
    pub fn command_count(&self) -> u32 {
        self.commands
    }

    /// Bytes so far.
    pub fn payload_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Appends a fragment: its header and its already encoded commands.
    pub fn push(&mut self, fragment: &FragmentHeader, commands: &[u8]) {
        assert_eq!(
            fragment.command_bytes as usize,
            commands.len(),
            "fragment byte count"
        );
        codec::encode_into(fragment, &mut self.buf).expect("fixed-size header encodes");
        self.buf.extend_from_slice(commands);
        self.fragments += 1;
        self.commands += fragment.command_count;
    }

    /// The finished payload and its command count.
    pub fn finish(mut self) -> (Bytes, u32) {
        self.buf[8..12].copy_from_slice(&self.fragments.to_le_bytes());
        (Bytes::from(self.buf), self.commands)
    }
}

/// A payload that does not parse: the entry passed its crc32, so this is a bug in the leader
/// that formed it, and every replica sees the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed payload: {0}")]
pub struct PayloadError(pub String);

/// One fragment of a parsed payload: its header and its encoded commands.
pub type Fragment<'a> = (FragmentHeader, &'a [u8]);

/// Splits a command entry's payload into its header and fragments.
pub fn parse_payload(payload: &[u8]) -> Result<(PayloadHeader, Vec<Fragment<'_>>), PayloadError> {
    let error = |e: codec::CodecError| PayloadError(e.to_string());
    let (header, mut at): (PayloadHeader, usize) = codec::decode_prefix(payload).map_err(error)?;
    let mut fragments = Vec::with_capacity(header.fragment_count.min(ENTRY_COMMANDS_MAX) as usize);
    for _ in 0..header.fragment_count {
        let (fragment, used): (FragmentHeader, usize) =
            codec::decode_prefix(&payload[at..]).map_err(error)?;
        at += used;
        let end = at + fragment.command_bytes as usize;
        if end > payload.len() {
            return Err(PayloadError(format!(
                "fragment claims {} bytes past the end",
                end - payload.len()
            )));
        }
        fragments.push((fragment, &payload[at..end]));
        at = end;
    }
    if at != payload.len() {
        return Err(PayloadError(format!(
            "{} bytes after the last fragment",
            payload.len() - at
        )));
    }
    Ok((header, fragments))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_payload() -> Bytes {
        let mut builder = PayloadBuilder::new(1_700_000_000_000);
        let fragment = FragmentHeader {
            client: ClientId(7),
            request: RequestNumber(3),
            request_commands: 2,
            first_command: 0,
            command_count: 2,
            command_bytes: 5,
        };
        builder.push(&fragment, b"hello");
        builder.finish().0
    }

    /// Proves header sizes match their constants (the WAL and frames depend on them).
    #[test]
    fn header_sizes_match_constants() {
        let entry = Entry::seal(
            EntryIndex(1),
            Term(1),
            EntryKind::Noop,
            0,
            Bytes::new(),
            &EntryHash::default(),
        );
        assert_eq!(
            codec::encode_to_vec(&entry.header).unwrap().len(),
            ENTRY_HEADER_BYTES
        );
        let header = PayloadHeader {
            now_ms: 1,
            fragment_count: 2,
        };
        assert_eq!(
            codec::encode_to_vec(&header).unwrap().len(),
            PAYLOAD_HEADER_BYTES as usize
        );
        let payload = sample_payload();
        let (fragment, _) = &parse_payload(&payload).unwrap().1[0];
        assert_eq!(
            codec::encode_to_vec(fragment).unwrap().len(),
            FRAGMENT_HEADER_BYTES as usize
        );
    }

    /// Proves a payload round-trips through the builder and the parser.
    #[test]
    fn payload_round_trip() {
        let payload = sample_payload();
        let (header, fragments) = parse_payload(&payload).unwrap();
        assert_eq!(
            header,
            PayloadHeader {
                now_ms: 1_700_000_000_000,
                fragment_count: 1
            }
        );
        assert_eq!(fragments.len(), 1);
        assert_eq!(fragments[0].1, b"hello");
        assert!(fragments[0].0.is_last());
        // Every truncation is an error, never a panic.
        for cut in 0..payload.len() {
            assert!(parse_payload(&payload[..cut]).is_err(), "cut at {cut}");
        }
    }

    /// Proves the chain: any change to the payload, header or previous hash breaks verification.
    #[test]
    fn hash_chain_detects_changes() {
        let first = Entry::seal(
            EntryIndex(1),
            Term(1),
            EntryKind::Commands,
            2,
            sample_payload(),
            &EntryHash::default(),
        );
        let second = Entry::seal(
            EntryIndex(2),
            Term(1),
            EntryKind::Noop,
            0,
            Bytes::new(),
            &first.header.hash,
        );
        assert_eq!(first.verify(&EntryHash::default()), Ok(()));
        assert_eq!(second.verify(&first.header.hash), Ok(()));
        assert!(second.verify(&EntryHash::default()).is_err());

        let mut flipped = first.payload.to_vec();
        flipped[20] ^= 1;
        let damaged = Entry {
            header: first.header,
            payload: Bytes::from(flipped),
        };
        assert_eq!(
            damaged.verify(&EntryHash::default()),
            Err(EntryError::PayloadCrc {
                index: EntryIndex(1)
            })
        );

        let mut header = first.header;
        header.term = Term(2);
        let retermed = Entry {
            header,
            payload: first.payload.clone(),
        };
        assert_eq!(
            retermed.verify(&EntryHash::default()),
            Err(EntryError::HashChain {
                index: EntryIndex(1)
            })
        );
    }
}
