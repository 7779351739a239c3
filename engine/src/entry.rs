//! The engine's side of log entries: the payload of request fragments, built by the leader and
//! parsed by every replica. The entry format itself (header, checksums, hash chain, limits) is
//! shared with the network layer and lives in `net::entry`.

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

pub use net::entry::*;

use crate::codec::{self, Decode, Encode};
use crate::ids::{ClientId, EntryIndex, RequestNumber, Term};
use bytes::Bytes;
pub use net::message::KeyRun;

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

    /// The digest of a keyed request: its commands and its keyed runs, so that a request
    /// number used again with other keys is told apart as well as one with other commands.
    pub fn of_keyed(command_count: u32, commands: &[u8], runs: &[KeyRun]) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&command_count.to_le_bytes());
        hasher.update(commands);
        for run in runs {
            hasher.update(&run.key.0.to_le_bytes());
            hasher.update(&run.first.to_le_bytes());
            hasher.update(&run.count.to_le_bytes());
        }
        let mut digest = [0; REQUEST_DIGEST_BYTES];
        digest.copy_from_slice(&hasher.finalize().as_bytes()[..REQUEST_DIGEST_BYTES]);
        RequestDigest(digest)
    }
}

/// A keyed run of a request's commands as a keyed entry logs it, after the fragments: the
/// fragment it belongs to, the run (positions within the request), and the digest of the
/// run's commands, which is what request 1 of the key's session would carry, so that a key
/// sent alone by an older gateway and the same key in a run are one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct KeyedRun {
    /// Position in the entry of the fragment whose commands the run overlaps.
    pub fragment: u32,
    /// The key's session, and the run's place in its request.
    pub run: KeyRun,
    /// The digest of the run's commands.
    pub digest: RequestDigest,
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
    /// The keyed runs of the fragments so far, written after them.
    runs: Vec<KeyedRun>,
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
            runs: Vec::new(),
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

    /// Notes a keyed run of the fragment pushed last (which it must overlap).
    pub fn push_run(&mut self, run: KeyRun, digest: RequestDigest) {
        assert!(self.fragments > 0, "a keyed run follows its fragment");
        self.runs.push(KeyedRun {
            fragment: self.fragments - 1,
            run,
            digest,
        });
    }

    /// The finished payload, its command count, and its kind: keyed when a fragment has a
    /// keyed run, whose runs then follow the fragments.
    pub fn finish(mut self) -> (Bytes, u32, EntryKind) {
        self.buf[8..12].copy_from_slice(&self.fragments.to_le_bytes());
        if self.runs.is_empty() {
            return (Bytes::from(self.buf), self.commands, EntryKind::Commands);
        }
        codec::encode_into(&self.runs, &mut self.buf).expect("runs encode into a vector");
        (
            Bytes::from(self.buf),
            self.commands,
            EntryKind::KeyedCommands,
        )
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
    let (header, fragments, at) = parse_fragments(payload)?;
    if at != payload.len() {
        return Err(PayloadError(format!(
            "{} bytes after the last fragment",
            payload.len() - at
        )));
    }
    Ok((header, fragments))
}

/// A command entry's payload parsed: its header, its fragments, and the keyed runs of
/// its fragments in order (none for an entry of kind `Commands`).
pub type ParsedPayload<'a> = (PayloadHeader, Vec<Fragment<'a>>, Vec<KeyedRun>);

/// Splits the payload of an entry of `kind` (`Commands` or `KeyedCommands`) into its header,
/// fragments and keyed runs, checking that each run lies in its request and overlaps its
/// fragment, and that the runs come in order, apart.
pub fn parse_payload_of(
    kind: EntryKind,
    payload: &[u8],
) -> Result<ParsedPayload<'_>, PayloadError> {
    if kind != EntryKind::KeyedCommands {
        let (header, fragments) = parse_payload(payload)?;
        return Ok((header, fragments, Vec::new()));
    }
    let (header, fragments, at) = parse_fragments(payload)?;
    let runs: Vec<KeyedRun> =
        codec::decode(&payload[at..]).map_err(|e| PayloadError(e.to_string()))?;
    check_runs(&fragments, &runs)?;
    Ok((header, fragments, runs))
}

/// Checks a keyed entry's runs against its fragments.
fn check_runs(fragments: &[Fragment<'_>], runs: &[KeyedRun]) -> Result<(), PayloadError> {
    if runs.is_empty() {
        return Err(PayloadError("a keyed entry without keyed runs".into()));
    }
    let mut previous: Option<&KeyedRun> = None;
    for keyed in runs {
        let Some((fragment, _)) = fragments.get(keyed.fragment as usize) else {
            return Err(PayloadError(format!(
                "a run of fragment {}",
                keyed.fragment
            )));
        };
        let (first, end) = (
            fragment.first_command,
            fragment.first_command + fragment.command_count,
        );
        let run = keyed.run;
        let within = run.count > 0 && run.end() <= fragment.request_commands;
        if !within || run.first >= end || run.end() <= first {
            return Err(PayloadError(format!(
                "fragment {}: run {}..{} outside it",
                keyed.fragment,
                run.first,
                run.end()
            )));
        }
        let ordered = previous.is_none_or(|p| {
            p.fragment < keyed.fragment
                || (p.fragment == keyed.fragment && p.run.end() <= run.first)
        });
        if !ordered {
            return Err(PayloadError(format!(
                "fragment {}: runs out of order",
                keyed.fragment
            )));
        }
        previous = Some(keyed);
    }
    Ok(())
}

/// The header and fragments at the start of a payload, and where they end.
fn parse_fragments(
    payload: &[u8],
) -> Result<(PayloadHeader, Vec<Fragment<'_>>, usize), PayloadError> {
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
    Ok((header, fragments, at))
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
    let (payload, command_count, kind) = payload.finish();
    Entry::seal(
        index,
        term,
        kind,
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

    /// A payload of one fragment of commands 2..4 of a request of 6, with `runs` noted.
    fn keyed_payload(runs: &[KeyRun]) -> Bytes {
        let mut builder = PayloadBuilder::new(7);
        let fragment = FragmentHeader {
            client: ClientId(7),
            request: RequestNumber(3),
            oldest_pending: RequestNumber(3),
            request_commands: 6,
            first_command: 2,
            command_count: 2,
            command_bytes: 2,
            digest: RequestDigest::default(),
        };
        builder.push(&fragment, b"ab");
        for &run in runs {
            builder.push_run(run, RequestDigest::of(run.count, b"x"));
        }
        let (payload, count, kind) = builder.finish();
        assert_eq!(count, 2);
        let keyed = if runs.is_empty() {
            EntryKind::Commands
        } else {
            EntryKind::KeyedCommands
        };
        assert_eq!(kind, keyed, "keyed exactly when a run was noted");
        payload
    }

    fn run(key: u128, first: u32, count: u32) -> KeyRun {
        KeyRun {
            key: ClientId(key),
            first,
            count,
        }
    }

    /// Proves a keyed payload round-trips, that every truncation of it is an error, and that
    /// runs outside their fragment or request, empty, or out of order are refused.
    #[test]
    fn keyed_payloads_round_trip_and_bad_runs_are_refused() {
        let runs = [run(1, 0, 3), run(2, 3, 1)];
        let payload = keyed_payload(&runs);
        let (_, fragments, parsed) = parse_payload_of(EntryKind::KeyedCommands, &payload).unwrap();
        assert_eq!(fragments.len(), 1);
        let kept: Vec<KeyRun> = parsed.iter().map(|keyed| keyed.run).collect();
        assert_eq!(kept, runs);
        assert!(parsed.iter().all(|keyed| keyed.fragment == 0));
        for cut in 0..payload.len() {
            let parsed = parse_payload_of(EntryKind::KeyedCommands, &payload[..cut]);
            assert!(parsed.is_err(), "cut at {cut}");
        }
        assert!(
            parse_payload(&payload).is_err(),
            "the runs are no commands' bytes"
        );
        let bad = [
            vec![run(1, 4, 1)],               // after the fragment
            vec![run(1, 0, 2)],               // before it
            vec![run(1, 2, 0)],               // empty
            vec![run(1, 3, 4)],               // past the request
            vec![run(1, 3, 1), run(2, 2, 1)], // out of order
            vec![run(1, 2, 2), run(2, 3, 1)], // overlapping
        ];
        for runs in bad {
            let payload = keyed_payload(&runs);
            let parsed = parse_payload_of(EntryKind::KeyedCommands, &payload);
            assert!(parsed.is_err(), "{runs:?} refused");
        }
        let plain = keyed_payload(&[]);
        let parsed = parse_payload_of(EntryKind::KeyedCommands, &plain);
        assert!(parsed.is_err(), "a keyed entry has runs");
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
