//! A node's files: the hard state (term and vote) and the WAL, and recovery from them.

use super::NodeError;
use crate::apply::StateMachine;
use crate::codec::{self, Decode, Encode};
use crate::core::{HardState, Recovered};
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::wal::{Recovery, Wal};
use net::message::AppliedHash;
use std::fs;
use std::io::Write;
use std::path::Path;

/// File holding the hard state, inside the data directory.
pub const HARD_STATE_FILE: &str = "hard_state";
/// Directory holding the WAL segments, inside the data directory.
pub const WAL_DIR: &str = "wal";

#[derive(Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
struct HardStateRecord {
    term: Term,
    voted_for: Option<NodeId>,
}

/// Reads the hard state; a missing file is a fresh node.
pub fn read_hard_state(dir: &Path) -> Result<HardState, NodeError> {
    let path = dir.join(HARD_STATE_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HardState::default()),
        Err(source) => return Err(NodeError::Io { path, source }),
    };
    let corrupt = || NodeError::Corrupt {
        path: path.clone(),
        reason: "hard state checksum".into(),
    };
    if bytes.len() < 4 {
        return Err(corrupt());
    }
    let (crc, body) = bytes.split_at(4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt());
    }
    let record: HardStateRecord = codec::decode(body).map_err(|_| corrupt())?;
    Ok(HardState {
        term: record.term,
        voted_for: record.voted_for,
    })
}

/// Makes the hard state durable: written to a temporary file, fsynced, renamed over the old
/// one, and the directory fsynced.
pub fn write_hard_state(dir: &Path, state: HardState) -> Result<(), NodeError> {
    let record = HardStateRecord {
        term: state.term,
        voted_for: state.voted_for,
    };
    let body = codec::encode_to_vec(&record).expect("hard state encodes");
    let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
    bytes.extend_from_slice(&body);
    let temporary = dir.join(format!("{HARD_STATE_FILE}.tmp"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NodeError::Io { path, source }
    };
    let mut file = fs::File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(&bytes).map_err(io(&temporary))?;
    file.sync_all().map_err(io(&temporary))?;
    fs::rename(&temporary, dir.join(HARD_STATE_FILE)).map_err(io(&temporary))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

/// What a node recovered: its state machine with the committed prefix of its WAL applied, its
/// WAL, and what the consensus core needs.
pub struct Restored<H: Handler> {
    /// The state machine.
    pub machine: StateMachine<H>,
    /// The WAL, positioned after its last entry.
    pub wal: Wal,
    /// For the consensus core.
    pub core: Recovered,
    /// What the WAL scan found.
    pub recovery: Recovery,
}

/// Recovers a node from `dir`: hard state, WAL scan, and replay of every entry the WAL shows
/// committed (the highest commit index its entries carry).
pub fn restore<H: Handler>(
    dir: &Path,
    handler: H,
    capacity_bytes: u64,
) -> Result<Restored<H>, NodeError> {
    fs::create_dir_all(dir).map_err(|source| NodeError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let hard_state = read_hard_state(dir)?;
    let (wal, recovery) = Wal::open(&dir.join(WAL_DIR))?;
    let mut machine = StateMachine::new(handler, capacity_bytes);
    let committed = wal.max_commit().min(wal.last_index());
    let mut applied = None;
    for index in (1..=committed.0).map(EntryIndex) {
        let hash = machine.apply(&wal.read(index)?)?.state_hash;
        applied = Some(AppliedHash { index, hash });
    }
    let last = wal.last_index();
    let terms = (1..=last.0)
        .map(|i| wal.term_at(EntryIndex(i)).expect("held"))
        .collect();
    let hashes = (1..=last.0)
        .map(|i| wal.hash_at(EntryIndex(i)).expect("held"))
        .collect();
    let window = (committed.0 + 1..=last.0)
        .map(|i| wal.read(EntryIndex(i)))
        .collect::<Result<_, _>>()?;
    let core = Recovered {
        hard_state,
        terms,
        hashes,
        window,
        applied,
    };
    Ok(Restored {
        machine,
        wal,
        core,
        recovery,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the hard state survives a rewrite and a damaged file is refused, not ignored.
    #[test]
    fn hard_state_round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), HardState::default());
        let state = HardState {
            term: Term(7),
            voted_for: Some(NodeId(2)),
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
            Err(NodeError::Corrupt { .. })
        ));
    }
}
