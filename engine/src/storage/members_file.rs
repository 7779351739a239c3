//! The record of known members (`members` in the data directory, beside the hard state):
//! every node this node was ever told of (its cluster file, the member lists of its log and
//! of the snapshots it installed, the candidates it voted for, itself included, the leaders
//! it acknowledged), and for each the highest term in which it voted for that node or
//! acknowledged it as leader ([`KnownMembers`]). Kept apart from the hard state so that it
//! outlives the hard state's loss: a node rebuilt then hears the terms of every node it
//! names (`notes/decisions/data-dir.md`, "Limit, and the record of known members").
//!
//! Written through [`Storage::write_durably`] (a temporary file, fsynced, renamed, the
//! directory fsynced) before the vote or acknowledgement that needed it leaves, and only when
//! it changes: a node learned, or a higher term for a node (about once an election).
//!
//! # Format, version 1
//!
//! ```text
//! magic    8 bytes   "MEMBv001"
//! crc32    4 bytes   little-endian CRC-32 (IEEE) of the body
//! body     codec     { floor: u64, nodes: Vec<(node id: u8, term: u64)> } (engine::codec)
//! ```
//!
//! `floor` is a term at or above every vote and acknowledgement given before the record was
//! started (a data directory from before it was kept, or one whose record was damaged):
//! every node's recorded term is at least the floor. A later version changes the magic's
//! digits; a build reads only the versions it knows, and takes any other file for damage.
//!
//! A missing file is a data directory from before it was kept: a start goes on as it did
//! without it. A damaged one is reported and copied to quarantine (never deleted), and the
//! start does not rely on it; the node starts a new record above its hard state's term.

use crate::codec::{self, Decode, Encode};
use crate::core::KnownMembers;
use crate::ids::{NodeId, Term};
use crate::storage::{Files, IoFault, Storage};
use std::path::{Path, PathBuf};

/// File holding the record of known members, inside the data directory.
pub const MEMBERS_FILE: &str = "members";
/// The first bytes of the file: its name and format version.
pub const MEMBERS_MAGIC: &[u8; 8] = b"MEMBv001";
/// Bytes of the checksum after the magic.
const CRC_BYTES: usize = 4;

/// Why the record of known members could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MembersFileError {
    /// The file system failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not verify: left where it is, not relied on.
    #[error("{path}: damaged ({reason})")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
}

impl From<&MembersFileError> for IoFault {
    fn from(error: &MembersFileError) -> Self {
        let kind = match error {
            MembersFileError::Io { source, .. } => Some(source.kind()),
            MembersFileError::Damaged { .. } => None,
        };
        IoFault::new(kind, error)
    }
}

#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct MembersRecord {
    floor: Term,
    nodes: Vec<(NodeId, Term)>,
}

/// The record in `dir`; `None` when there is none.
pub fn read_known_members(dir: &Path) -> Result<Option<KnownMembers>, MembersFileError> {
    read_known_members_on(&Files, dir)
}

/// Makes `known` the record in `dir`, durably.
pub fn write_known_members(dir: &Path, known: &KnownMembers) -> Result<(), MembersFileError> {
    write_known_members_on(&Files, dir, known)
}

/// [`read_known_members`] from `storage`.
pub fn read_known_members_on<S: Storage>(
    storage: &S,
    dir: &Path,
) -> Result<Option<KnownMembers>, MembersFileError> {
    let path = dir.join(MEMBERS_FILE);
    let bytes = match storage.read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(MembersFileError::Io { path, source }),
    };
    let damaged = |reason| MembersFileError::Damaged {
        path: path.clone(),
        reason,
    };
    let Some(rest) = bytes.strip_prefix(MEMBERS_MAGIC.as_slice()) else {
        return Err(damaged("not a members file of a known version"));
    };
    if rest.len() < CRC_BYTES {
        return Err(damaged("shorter than its checksum"));
    }
    let (crc, body) = rest.split_at(CRC_BYTES);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(damaged("checksum"));
    }
    let record: MembersRecord = codec::decode(body).map_err(|_| damaged("record"))?;
    Ok(Some(KnownMembers::new(record.floor, record.nodes)))
}

/// [`write_known_members`] on `storage`.
pub fn write_known_members_on<S: Storage>(
    storage: &S,
    dir: &Path,
    known: &KnownMembers,
) -> Result<(), MembersFileError> {
    let record = MembersRecord {
        floor: known.floor,
        nodes: known.nodes().collect(),
    };
    let body = codec::encode_to_vec(&record).expect("the record encodes");
    let mut bytes = MEMBERS_MAGIC.to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    let path = dir.join(MEMBERS_FILE);
    storage
        .write_durably(&path, &bytes)
        .map_err(|source| MembersFileError::Io { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn known() -> KnownMembers {
        KnownMembers::new(Term(3), [(NodeId(1), Term(0)), (NodeId(4), Term(20))])
    }

    /// Proves the record survives a rewrite, a missing file reads as none, and a damaged one
    /// is reported and left in place.
    #[test]
    fn the_record_round_trips_and_a_damaged_one_is_reported_not_deleted() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_known_members(dir.path()).unwrap(), None);
        write_known_members(dir.path(), &known()).unwrap();
        write_known_members(dir.path(), &known()).unwrap();
        assert_eq!(read_known_members(dir.path()).unwrap(), Some(known()));
        let path = dir.path().join(MEMBERS_FILE);
        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read_known_members(dir.path()),
            Err(MembersFileError::Damaged { .. })
        ));
        assert_eq!(fs::read(&path).unwrap(), bytes, "left as it was");
        bytes[0] = b'X';
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read_known_members(dir.path()),
            Err(MembersFileError::Damaged { .. })
        ));
    }
}
