//! The engine's side of log entries: the payload of request fragments, built by the leader and
//! parsed by every replica. The entry format itself (header, checksums, hash chain, limits) is
//! shared with the network layer and lives in `net::entry`.

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

pub use net::entry::*;

use crate::codec::{self, Decode, Encode};
use crate::ids::{ClientId, EntryIndex, RequestNumber, Term};
use bytes::Bytes;

/// The start of a command entry's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct PayloadHeader {
    /// The leader's clock when it formed the entry, in ms since the Unix epoch: the time
    /// handlers see.
    pub now_ms: u64,
    /// Fragments that follow.
    pub fragment_count: u32,
}

/// Bytes of a [`RequestDigest`].
pub const REQUEST_DIGEST_BYTES: usize = 16;

/// What a request's commands were: the first [`REQUEST_DIGEST_BYTES`] of the BLAKE3 hash of
/// its command count and encoded commands. Every fragment of a request carries it and the
/// session keeps it, so that a request number used again for other commands (a client id
/// reused, a client that forgot its numbers) is told so, and never answered with the results
/// of the commands that first had that number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct RequestDigest(pub [u8; REQUEST_DIGEST_BYTES]);

impl RequestDigest {
    /// The digest of a request of `command_count` commands encoded back to back in `commands`.
    pub fn of(command_count: u32, commands: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&command_count.to_le_bytes());
        hasher.update(commands);
        let mut digest = [0; REQUEST_DIGEST_BYTES];
        digest.copy_from_slice(&hasher.finalize().as_bytes()[..REQUEST_DIGEST_BYTES]);
        RequestDigest(digest)
    }
}

/// A run of consecutive commands of one client request. A request that does not fit in the
/// space left in an entry is split across entries; each piece is a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct FragmentHeader {
    /// The client.
    pub client: ClientId,
    /// The client's request number.
    pub request: RequestNumber,
    /// The client's oldest request still unanswered when it sent this one: this one runs
    /// only once every request of the client from that number on before it has.
    pub oldest_pending: RequestNumber,
    /// Commands in the whole request.
    pub request_commands: u32,
    /// Position in the request of this fragment's first command.
    pub first_command: u32,
    /// Commands in this fragment.
    pub command_count: u32,
    /// Bytes of the encoded commands that follow this header.
    pub command_bytes: u32,
    /// The digest of the whole request (every fragment of it carries the same).
    pub digest: RequestDigest,
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
            oldest_pending: self.number,
            request_commands: self.command_count,
            first_command: 0,
            command_count: self.command_count,
            command_bytes: self.commands.len() as u32,
            digest: RequestDigest::of(self.command_count, self.commands),
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

    /// Fragments so far.
    pub fn fragment_count(&self) -> u32 {
        self.fragments
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

/// A command entry holding each of `requests` whole, stamped `now_ms`, declaring every entry
/// before it committed (true for a single node and a sandbox).
pub fn whole_requests_entry(
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
        index.prev(),
        command_count,
        payload,
        prev_hash,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_payload() -> Bytes {
        let mut builder = PayloadBuilder::new(1_700_000_000_000);
        let fragment = FragmentHeader {
            client: ClientId(7),
            request: RequestNumber(3),
            oldest_pending: RequestNumber(3),
            request_commands: 2,
            first_command: 0,
            command_count: 2,
            command_bytes: 5,
            digest: RequestDigest::of(2, b"hello"),
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
            EntryIndex::ZERO,
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
            EntryIndex::ZERO,
            2,
            sample_payload(),
            &EntryHash::default(),
        );
        let second = Entry::seal(
            EntryIndex(2),
            Term(1),
            EntryKind::Noop,
            EntryIndex::ZERO,
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
