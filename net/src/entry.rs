//! Log entries as they travel and rest: a header (index, term, command count, payload crc32,
//! blake3 hash chained to the previous entry) and an opaque payload, with the size limits that
//! every layer checks. The payload's layout (request fragments) belongs to the engine.

use crate::codec::{self, Decode, Encode};
use crate::ids::{EntryIndex, Term};
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
/// Most bytes of payload one entry may carry: its commands plus their fragment headers, and
/// in a keyed entry a keyed run per command at most after them (a request has one fragment
/// in an entry at most, so each of its runs is listed once).
pub const ENTRY_PAYLOAD_BYTES_MAX: u32 = ENTRY_COMMANDS_MAX
    * (COMMAND_BYTES_MAX + FRAGMENT_HEADER_BYTES + KEYED_RUN_BYTES)
    + PAYLOAD_HEADER_BYTES
    + 8;
/// Bytes of an encoded [`EntryHeader`] (the kind encodes as a u32).
pub const ENTRY_HEADER_BYTES: usize = 8 + 8 + 4 + 8 + 4 + 4 + 4 + 32;
/// Bytes of an encoded payload header (the engine's `PayloadHeader`).
pub const PAYLOAD_HEADER_BYTES: u32 = 8 + 4;
/// Bytes of an encoded fragment header (the engine's `FragmentHeader`).
pub const FRAGMENT_HEADER_BYTES: u32 = 16 + 8 + 8 + 4 + 4 + 4 + 4 + 16;
/// Bytes of an encoded keyed run in a keyed entry (the engine's `KeyedRun`: its fragment's
/// position, the key, the run's first command and count, its digest).
pub const KEYED_RUN_BYTES: u32 = 4 + 16 + 4 + 4 + 16;

const _: () = assert!(ENTRY_COMMANDS_CONFIG_MIN <= ENTRY_COMMANDS_MAX);
const _: () = assert!(REQUEST_COMMANDS_MAX <= ENTRY_COMMANDS_MAX);
const _: () = assert!((ENTRY_PAYLOAD_BYTES_MAX as usize) < codec::DECODE_BYTES_MAX);

/// A blake3 hash that chains an entry to all entries before it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct EntryHash(pub [u8; 32]);

impl fmt::Debug for EntryHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntryHash(")?;
        self.0[..8].iter().try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, ")")
    }
}

/// The codec tag of each variant of [`EntryKind`]: the `u32` an entry's header carries, in
/// `Append` messages and in the WAL.
///
/// A tag never changes and is never given to another kind: a new kind takes a number
/// `EntryKind` never used. They equal the positions the kinds were written with before the
/// tags were explicit, so no byte changed on the wire or on disk.
pub mod entry_kind_tags {
    /// [`EntryKind::Commands`](super::EntryKind::Commands).
    pub const COMMANDS: u32 = 0;
    /// [`EntryKind::Noop`](super::EntryKind::Noop).
    pub const NOOP: u32 = 1;
    /// [`EntryKind::Members`](super::EntryKind::Members).
    pub const MEMBERS: u32 = 2;
    /// [`EntryKind::Upgrade`](super::EntryKind::Upgrade).
    pub const UPGRADE: u32 = 3;
    /// [`EntryKind::KeyedCommands`](super::EntryKind::KeyedCommands).
    pub const KEYED_COMMANDS: u32 = 4;
}

/// What an entry carries.
///
/// A kind has two numbers, both fixed by logs already written. The codec tag (0 to 4) is what
/// the header's encoding carries; the Rust discriminant (1 to 5) is the byte [`chain_hash`]
/// hashes, so changing either breaks every stored entry: the tag its decoding, the
/// discriminant its hash chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
#[repr(u8)]
pub enum EntryKind {
    /// Client commands.
    #[codec(tag = entry_kind_tags::COMMANDS)]
    Commands = 1,
    /// Nothing: a new leader's first entry, which commits the entries of earlier terms.
    #[codec(tag = entry_kind_tags::NOOP)]
    Noop = 2,
    /// The cluster's members from here on (the engine's `members::Members`, encoded).
    #[codec(tag = entry_kind_tags::MEMBERS)]
    Members = 3,
    /// The handler version in force from here on (a `u32`, encoded): every replica switches
    /// at this entry.
    #[codec(tag = entry_kind_tags::UPGRADE)]
    Upgrade = 4,
    /// Client commands some of which carry their callers' keys: the payload of `Commands`
    /// followed by the keyed runs of its fragments (protocol version 5 on).
    #[codec(tag = entry_kind_tags::KEYED_COMMANDS)]
    KeyedCommands = 5,
}

/// The fixed-size header of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct EntryHeader {
    /// The entry's position in the log.
    pub index: EntryIndex,
    /// The term of the leader that created it.
    pub term: Term,
    /// What the payload holds.
    pub kind: EntryKind,
    /// The leader's commit index when it formed the entry (below `index`): every entry up to
    /// it is committed, so a restarting node can apply that much from its own log at once.
    pub commit: EntryIndex,
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
#[non_exhaustive]
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
    /// The payload: the engine's request fragments, or empty for a no-op.
    pub payload: Bytes,
}

impl Entry {
    /// Seals an entry: computes its payload crc32 and its hash chained to `prev_hash`.
    pub fn seal(
        index: EntryIndex,
        term: Term,
        kind: EntryKind,
        commit: EntryIndex,
        command_count: u32,
        payload: Bytes,
        prev_hash: &EntryHash,
    ) -> Entry {
        assert!(commit < index, "an entry cannot know itself committed");
        assert!(
            payload.len() <= ENTRY_PAYLOAD_BYTES_MAX as usize,
            "payload over the limit"
        );
        let mut header = EntryHeader {
            index,
            term,
            kind,
            commit,
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

    /// The entry's index.
    pub fn index(&self) -> EntryIndex {
        self.header.index
    }

    /// The entry's term.
    pub fn term(&self) -> Term {
        self.header.term
    }

    /// What the entry carries.
    pub fn kind(&self) -> EntryKind {
        self.header.kind
    }
}

/// blake3 over the previous hash, the header's fields but its hash, and the payload.
pub fn chain_hash(prev_hash: &EntryHash, header: &EntryHeader, payload: &[u8]) -> EntryHash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&prev_hash.0);
    hasher.update(&header.index.0.to_le_bytes());
    hasher.update(&header.term.0.to_le_bytes());
    // The discriminant, not the codec tag: the hashes of every stored entry are made so.
    hasher.update(&[header.kind as u8]);
    hasher.update(&header.commit.0.to_le_bytes());
    hasher.update(&header.command_count.to_le_bytes());
    hasher.update(&header.payload_bytes.to_le_bytes());
    hasher.update(&header.payload_crc32.to_le_bytes());
    hasher.update(payload);
    EntryHash(*hasher.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves each kind's two numbers are the ones stored entries were made with: the codec
    /// tag in the header's bytes, the discriminant in the hash.
    #[test]
    fn kinds_keep_their_tags_and_discriminants() {
        use entry_kind_tags as t;
        let kinds = [
            (EntryKind::Commands, t::COMMANDS, 1),
            (EntryKind::Noop, t::NOOP, 2),
            (EntryKind::Members, t::MEMBERS, 3),
            (EntryKind::Upgrade, t::UPGRADE, 4),
            (EntryKind::KeyedCommands, t::KEYED_COMMANDS, 5),
        ];
        for (position, (kind, tag, discriminant)) in kinds.into_iter().enumerate() {
            let bytes = codec::encode_to_vec(&kind).unwrap();
            assert_eq!(bytes, tag.to_le_bytes(), "{kind:?}'s tag");
            assert_eq!(tag as usize, position, "{kind:?}'s tag is its old position");
            assert_eq!(kind as u8, discriminant, "{kind:?}'s hashed byte");
            assert_eq!(codec::decode::<EntryKind>(&bytes).unwrap(), kind);
        }
    }
}
