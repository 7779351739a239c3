//! A node's files: where each lives in the data directory, and the hard state (term, vote and
//! repair obligation). Recovery from them is `node::recovery`.

use crate::codec::{self, Decode, Encode};
use crate::core::{HardState, LostVotes, MemberSet};
use crate::ids::{EntryIndex, NodeId, Term};
use crate::storage::{Files, Storage};
use std::path::{Path, PathBuf};

/// What a damaged hard state is said to be.
pub const HARD_STATE_DAMAGED_REASON: &str = "hard state checksum";

/// Why the hard state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HardStateError {
    /// The file system failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not verify (its checksum or its record).
    #[error("{}: damaged ({HARD_STATE_DAMAGED_REASON})", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
    },
}

/// File holding the hard state, inside the data directory.
pub const HARD_STATE_FILE: &str = "hard_state";
/// Directory holding the WAL segments, inside the data directory.
pub const WAL_DIR: &str = "wal";
/// Directory holding the snapshots, inside the data directory.
pub const SNAPSHOT_DIR: &str = "snapshots";

#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct HardStateRecord {
    term: Term,
    voted_for: Option<NodeId>,
    /// The end of the log before damage cut it (index, term), while being repaired.
    repair: Option<(EntryIndex, Term, EntryIndex)>,
    /// Votes lost with an earlier hard state: `Some(None)` while their terms are unknown,
    /// `Some(Some(term))` once bounded by `term`.
    votes_lost: Option<Option<Term>>,
    /// The members last in force in the log (none before the first change of them).
    members: Option<Vec<NodeId>>,
    /// The members before the first members entry, while none is applied and they differ
    /// from `members` (an empty list is a node that joined: it knew no members).
    first_members: Option<Vec<NodeId>>,
}

/// The record as written when the first members equal the members kept, or are not kept (the
/// layout before they were: a build before them still reads every record that does not need
/// them).
#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct HardStateRecordV3 {
    term: Term,
    voted_for: Option<NodeId>,
    repair: Option<(EntryIndex, Term, EntryIndex)>,
    votes_lost: Option<Option<Term>>,
    members: Option<Vec<NodeId>>,
}

/// The record as written before the members were kept (read; written only by tests).
#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct HardStateRecordV2 {
    term: Term,
    voted_for: Option<NodeId>,
    repair: Option<(EntryIndex, Term, EntryIndex)>,
    votes_lost: Option<Option<Term>>,
}

/// The record as written before lost votes were kept (read; written only by tests).
#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct HardStateRecordV1 {
    term: Term,
    voted_for: Option<NodeId>,
    repair: Option<(EntryIndex, Term, EntryIndex)>,
}

impl HardStateRecord {
    /// The record in `body`: the current layout, or the one before it (a data directory
    /// written by an earlier build).
    fn decode(body: &[u8]) -> Result<HardStateRecord, codec::CodecError> {
        let current = codec::decode::<HardStateRecord>(body);
        if current.is_ok() {
            return current;
        }
        let v3 = |old: HardStateRecordV3| HardStateRecord {
            term: old.term,
            voted_for: old.voted_for,
            repair: old.repair,
            votes_lost: old.votes_lost,
            members: old.members,
            first_members: None,
        };
        if let Ok(old) = codec::decode::<HardStateRecordV3>(body) {
            return Ok(v3(old));
        }
        if let Ok(old) = codec::decode::<HardStateRecordV2>(body) {
            return Ok(v3(HardStateRecordV3 {
                term: old.term,
                voted_for: old.voted_for,
                repair: old.repair,
                votes_lost: old.votes_lost,
                members: None,
            }));
        }
        let old: HardStateRecordV1 = codec::decode(body)?;
        Ok(v3(HardStateRecordV3 {
            term: old.term,
            voted_for: old.voted_for,
            repair: old.repair,
            votes_lost: None,
            members: None,
        }))
    }

    /// The bytes: the layout before the first members were kept when they are not needed
    /// (absent, or equal to the members), so that a directory stays readable by that build.
    fn encode(&self) -> Vec<u8> {
        if self.first_members.is_none() {
            let old = HardStateRecordV3 {
                term: self.term,
                voted_for: self.voted_for,
                repair: self.repair,
                votes_lost: self.votes_lost,
                members: self.members.clone(),
            };
            return codec::encode_to_vec(&old).expect("hard state encodes");
        }
        codec::encode_to_vec(self).expect("hard state encodes")
    }
}

/// Reads the hard state; a missing file is a fresh node.
pub fn read_hard_state(dir: &Path) -> Result<HardState, HardStateError> {
    read_hard_state_on(&Files, dir)
}

/// Makes the hard state durable: written to a temporary file, fsynced, renamed over the old
/// one, and the directory fsynced.
pub fn write_hard_state(dir: &Path, state: HardState) -> Result<(), HardStateError> {
    write_hard_state_on(&Files, dir, state)
}

/// [`read_hard_state`] from `storage`.
pub fn read_hard_state_on<S: Storage>(
    storage: &S,
    dir: &Path,
) -> Result<HardState, HardStateError> {
    let path = dir.join(HARD_STATE_FILE);
    let bytes = match storage.read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HardState::default()),
        Err(source) => return Err(HardStateError::Io { path, source }),
    };
    let corrupt = || HardStateError::Damaged { path: path.clone() };
    if bytes.len() < 4 {
        return Err(corrupt());
    }
    let (crc, body) = bytes.split_at(4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt());
    }
    let record = HardStateRecord::decode(body).map_err(|_| corrupt())?;
    Ok(HardState {
        term: record.term,
        voted_for: record.voted_for,
        repair: record
            .repair
            .map(|(index, term, committed)| crate::core::Repair {
                index,
                term,
                committed,
            }),
        votes_lost: record.votes_lost.map(|through| match through {
            None => LostVotes::Unknown,
            Some(term) => LostVotes::Through(term),
        }),
        members: record.members.map(|ids| MemberSet::of(ids.iter().copied())),
        first_members: record
            .first_members
            .map(|ids| MemberSet::of(ids.iter().copied())),
    })
}

/// [`write_hard_state`] on `storage`.
pub fn write_hard_state_on<S: Storage>(
    storage: &S,
    dir: &Path,
    state: HardState,
) -> Result<(), HardStateError> {
    let record = HardStateRecord {
        term: state.term,
        voted_for: state.voted_for,
        repair: state.repair.map(|r| (r.index, r.term, r.committed)),
        votes_lost: state.votes_lost.map(|lost| match lost {
            LostVotes::Unknown => None,
            LostVotes::Through(term) => Some(term),
        }),
        members: state.members.map(|set| set.ids().collect()),
        first_members: state
            .first_members
            .filter(|&first| Some(first) != state.members)
            .map(|set| set.ids().collect()),
    };
    let body = record.encode();
    let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
    bytes.extend_from_slice(&body);
    let path = dir.join(HARD_STATE_FILE);
    match storage.write_durably(&path, &bytes) {
        Ok(()) => Ok(()),
        Err(source) => Err(HardStateError::Io { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Repair;
    use std::fs;

    /// Proves the hard state survives a rewrite and a damaged file is refused, not ignored.
    #[test]
    fn hard_state_round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), HardState::default());
        let state = HardState {
            term: Term(7),
            voted_for: Some(NodeId(2)),
            repair: Some(Repair {
                index: EntryIndex(40),
                term: Term(6),
                committed: EntryIndex(38),
            }),
            first_members: None,
            votes_lost: None,
            members: Some(MemberSet::of([NodeId(1), NodeId(4)])),
        };
        write_hard_state(dir.path(), state).unwrap();
        write_hard_state(dir.path(), state).unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), state);
        let path = dir.path().join(HARD_STATE_FILE);
        let mut bytes = fs::read(&path).unwrap();
        bytes[5] ^= 1;
        fs::write(&path, bytes).unwrap();
        assert!(matches!(
            read_hard_state(dir.path()),
            Err(HardStateError::Damaged { .. })
        ));
    }

    /// Proves lost votes survive a rewrite in both of their states, and that a hard state
    /// written in the layout before them (an earlier build's data directory) still reads.
    #[test]
    fn lost_votes_round_trip_and_the_earlier_layout_reads() {
        let dir = tempfile::tempdir().unwrap();
        for votes_lost in [Some(LostVotes::Unknown), Some(LostVotes::Through(Term(9)))] {
            let state = HardState {
                term: Term(3),
                voted_for: None,
                repair: None,
                votes_lost,
                members: None,
                first_members: None,
            };
            write_hard_state(dir.path(), state).unwrap();
            assert_eq!(read_hard_state(dir.path()).unwrap(), state);
        }
        let old = HardStateRecordV1 {
            term: Term(4),
            voted_for: Some(NodeId(1)),
            repair: Some((EntryIndex(8), Term(3), EntryIndex(6))),
        };
        let body = codec::encode_to_vec(&old).unwrap();
        let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        fs::write(dir.path().join(HARD_STATE_FILE), bytes).unwrap();
        let read = read_hard_state(dir.path()).unwrap();
        assert_eq!((read.term, read.voted_for), (Term(4), Some(NodeId(1))));
        assert_eq!(read.repair.map(|r| r.index), Some(EntryIndex(8)));
        assert_eq!(read.votes_lost, None);
        // The layout before the members were kept.
        let v2 = HardStateRecordV2 {
            term: Term(5),
            voted_for: None,
            repair: None,
            votes_lost: Some(Some(Term(4))),
        };
        let body = codec::encode_to_vec(&v2).unwrap();
        let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        fs::write(dir.path().join(HARD_STATE_FILE), bytes).unwrap();
        let read = read_hard_state(dir.path()).unwrap();
        assert_eq!(read.votes_lost, Some(LostVotes::Through(Term(4))));
        assert_eq!(read.members, None);
    }

    /// Proves the first members survive a rewrite when they differ from the members kept, and
    /// that otherwise the record keeps the layout before them, which a build before them reads.
    #[test]
    fn first_members_round_trip_and_are_written_only_when_needed() {
        let dir = tempfile::tempdir().unwrap();
        let first = MemberSet::of([NodeId(1), NodeId(2), NodeId(3)]);
        let grown = MemberSet::of([NodeId(1), NodeId(2), NodeId(3), NodeId(4)]);
        let state = HardState {
            term: Term(2),
            members: Some(grown),
            first_members: Some(first),
            ..HardState::default()
        };
        write_hard_state(dir.path(), state).unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), state);
        let before_them = |state: HardState| {
            write_hard_state(dir.path(), state).unwrap();
            let bytes = fs::read(dir.path().join(HARD_STATE_FILE)).unwrap();
            codec::decode::<HardStateRecordV3>(&bytes[4..]).is_ok()
        };
        assert!(!before_them(state), "needed: the new layout");
        let same = HardState {
            members: Some(first),
            ..state
        };
        assert!(
            before_them(same),
            "equal to the members: the earlier layout"
        );
        let read = read_hard_state(dir.path()).unwrap();
        assert_eq!((read.members, read.first_members), (Some(first), None));
        let forgotten = HardState {
            first_members: None,
            ..state
        };
        assert!(before_them(forgotten), "not kept: the earlier layout");
        // A node that joined knew no members first: kept as such, not as none.
        let joined = HardState {
            first_members: Some(MemberSet::default()),
            ..state
        };
        write_hard_state(dir.path(), joined).unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), joined);
    }
}
