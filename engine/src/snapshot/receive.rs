//! Receiving a snapshot from the leader: a follower writes the chunks to a temporary file,
//! and once it has them all, fsyncs, verifies the digest, renames it into place and fsyncs
//! the directory before installing it. The node runs it over its files, the simulator over
//! its simulated disk.

use super::{SNAPSHOT_BYTES_MAX, Snapshot, SnapshotError, read_snapshot_on, snapshot_path};
use crate::ids::EntryIndex;
use crate::storage::{Storage, StorageFile};
use net::message::SnapshotChunk;
use std::path::{Path, PathBuf};

/// Name of the file a follower assembles an incoming snapshot in, inside the snapshot directory.
const INCOMING_FILE: &str = "incoming.part";

/// Why a follower refused or dropped a snapshot arriving from its leader (the leader sends it
/// again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiveError {
    /// The first chunk of a snapshot is not at its start.
    #[error("a snapshot starts at offset 0, not at {offset}")]
    NotAtStart {
        /// The chunk's offset.
        offset: u64,
    },
    /// The snapshot is larger than a follower accepts.
    #[error("a snapshot of {total} bytes is over the limit of {limit}")]
    TooLarge {
        /// Bytes the snapshot has, as its chunks announce.
        total: u64,
        /// [`SNAPSHOT_BYTES_MAX`].
        limit: u64,
    },
    /// A chunk of another snapshot than the one being assembled.
    #[error(
        "chunk at {offset} of snapshot {index} ({total} bytes) while expecting {expected_offset} \
         of {expected_index} ({expected_total} bytes)"
    )]
    WrongSnapshot {
        /// The chunk's snapshot.
        index: EntryIndex,
        /// Its size.
        total: u64,
        /// The chunk's offset.
        offset: u64,
        /// The snapshot being assembled.
        expected_index: EntryIndex,
        /// Its size.
        expected_total: u64,
        /// The offset of the chunk expected next.
        expected_offset: u64,
    },
    /// A chunk of the snapshot being assembled, but not the next one.
    #[error("chunk at {offset} of snapshot {index} while expecting {expected} of {index}")]
    OutOfOrder {
        /// The snapshot.
        index: EntryIndex,
        /// The chunk's offset.
        offset: u64,
        /// The offset of the chunk expected next.
        expected: u64,
    },
    /// A chunk that reaches past the snapshot's announced size.
    #[error("chunk past the end of the snapshot: {bytes} bytes at {offset} of {total}")]
    PastEnd {
        /// The chunk's offset.
        offset: u64,
        /// The chunk's bytes.
        bytes: u64,
        /// The snapshot's size.
        total: u64,
    },
    /// A chunk with no bytes before the snapshot is complete.
    #[error("an empty chunk at {offset} of a snapshot of {total} bytes")]
    Empty {
        /// The chunk's offset.
        offset: u64,
        /// The snapshot's size.
        total: u64,
    },
    /// The file system refused an operation on the incoming file or the snapshot directory.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The assembled file does not read back as a snapshot (its digest or structure).
    #[error(transparent)]
    Unreadable(SnapshotError),
    /// The assembled snapshot covers another entry than the one its chunks announced.
    #[error("the snapshot announced as {announced} covers {covers}")]
    WrongIndex {
        /// The entry its chunks announced.
        announced: EntryIndex,
        /// The entry it covers.
        covers: EntryIndex,
    },
}

fn receive_io(path: &Path) -> impl FnOnce(std::io::Error) -> ReceiveError + '_ {
    move |source| ReceiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A snapshot arriving from the leader.
pub struct Incoming<S: Storage> {
    storage: S,
    index: EntryIndex,
    total: u64,
    received: u64,
    path: PathBuf,
    file: S::File,
}

impl<S: Storage> Incoming<S> {
    /// Starts assembling in `dir` the snapshot whose first chunk this is (any earlier one is
    /// dropped).
    pub fn start(storage: S, dir: &Path, chunk: &SnapshotChunk) -> Result<Self, ReceiveError> {
        if chunk.offset != 0 {
            return Err(ReceiveError::NotAtStart {
                offset: chunk.offset,
            });
        }
        if chunk.total > SNAPSHOT_BYTES_MAX {
            return Err(ReceiveError::TooLarge {
                total: chunk.total,
                limit: SNAPSHOT_BYTES_MAX,
            });
        }
        let path = dir.join(INCOMING_FILE);
        storage.create_dir_all(dir).map_err(receive_io(dir))?;
        let file = storage.create_replacing(&path).map_err(receive_io(&path))?;
        // Debug builds only: it asks the file system. A snapshot is assembled from nothing.
        debug_assert!(
            file.size().is_ok_and(|size| size == 0),
            "{}: an incoming snapshot starts in an empty file",
            path.display()
        );
        Ok(Incoming {
            storage,
            index: chunk.index,
            total: chunk.total,
            received: 0,
            path,
            file,
        })
    }

    /// Takes the next chunk; true once the whole file is in. A chunk of another snapshot, or
    /// out of order, is an error (the leader sends the snapshot again).
    pub fn take(&mut self, chunk: &SnapshotChunk) -> Result<bool, ReceiveError> {
        self.check(chunk)?;
        // Debug builds only: it asks the file system. The file holds what was received.
        debug_assert!(
            self.file.size().is_ok_and(|size| size == self.received),
            "snapshot {}: the incoming file holds the {} bytes received",
            self.index,
            self.received
        );
        self.file
            .write_all_at(&chunk.data, self.received)
            .map_err(receive_io(&self.path))?;
        self.received += chunk.data.len() as u64;
        assert!(
            self.received <= self.total,
            "snapshot {}: {} bytes received of {}",
            self.index,
            self.received,
            self.total
        );
        Ok(self.received == self.total)
    }

    /// Checks that `chunk` is the next one of this snapshot and fits inside it.
    fn check(&self, chunk: &SnapshotChunk) -> Result<(), ReceiveError> {
        if chunk.index != self.index || chunk.total != self.total {
            return Err(ReceiveError::WrongSnapshot {
                index: chunk.index,
                total: chunk.total,
                offset: chunk.offset,
                expected_index: self.index,
                expected_total: self.total,
                expected_offset: self.received,
            });
        }
        if chunk.offset != self.received {
            return Err(ReceiveError::OutOfOrder {
                index: self.index,
                offset: chunk.offset,
                expected: self.received,
            });
        }
        let bytes = chunk.data.len() as u64;
        if self.received + bytes > self.total {
            return Err(ReceiveError::PastEnd {
                offset: chunk.offset,
                bytes,
                total: self.total,
            });
        }
        if bytes == 0 {
            return Err(ReceiveError::Empty {
                offset: chunk.offset,
                total: self.total,
            });
        }
        Ok(())
    }

    /// Makes the complete file durable, verifies it, and renames it into place; returns the
    /// snapshot read back, its final path and its size.
    pub fn finish(self, dir: &Path) -> Result<(Snapshot, PathBuf, u64), ReceiveError> {
        assert_eq!(
            self.received, self.total,
            "snapshot {}: finished once every byte is in",
            self.index
        );
        // Durable before it is read back: what is verified is what a crash would leave.
        self.file.sync_all().map_err(receive_io(&self.path))?;
        let read = read_snapshot_on(&self.storage, &self.path);
        let snapshot = read.map_err(ReceiveError::Unreadable)?;
        assert_eq!(
            snapshot.file_bytes, self.total,
            "snapshot {}: the file read back is the size its chunks announced",
            self.index
        );
        if snapshot.meta.index != self.index {
            return Err(ReceiveError::WrongIndex {
                announced: self.index,
                covers: snapshot.meta.index,
            });
        }
        let path = snapshot_path(dir, self.index);
        let published = self.storage.publish(self.file, &self.path, &path);
        published.map_err(receive_io(&path))?;
        Ok((snapshot, path, self.total))
    }
}

/// A follower's intake of its leaders' snapshots, chunk by chunk: a first chunk starts one
/// (dropping any other under way), a chunk that does not follow drops it (the leader sends it
/// again), and the last makes it durable, verified and in place. The node and the simulator
/// both keep one.
pub struct Intake<S: Storage> {
    storage: S,
    dir: PathBuf,
    incoming: Option<Incoming<S>>,
}

/// Why a snapshot arriving from the leader was not taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeError {
    /// Its first chunk was refused, or a later one did not follow: nothing of it is kept,
    /// and the leader sends it again.
    #[error("leader's snapshot dropped: {0}")]
    Dropped(ReceiveError),
    /// Every chunk arrived, and the file does not verify or could not be put in place.
    #[error("leader's snapshot refused: {0}")]
    Refused(ReceiveError),
}

impl<S: Storage + Clone> Intake<S> {
    /// An intake of snapshots into `dir`, with none under way.
    pub fn new(storage: S, dir: PathBuf) -> Self {
        Intake {
            storage,
            dir,
            incoming: None,
        }
    }

    /// Takes the next chunk; the snapshot read back and its size once it is whole, durable
    /// and in place.
    pub fn take(&mut self, chunk: &SnapshotChunk) -> Result<Option<(Snapshot, u64)>, IntakeError> {
        if chunk.offset == 0 {
            self.incoming = None;
            let started = Incoming::start(self.storage.clone(), &self.dir, chunk);
            self.incoming = Some(started.map_err(IntakeError::Dropped)?);
        }
        let Some(incoming) = self.incoming.as_mut() else {
            return Ok(None);
        };
        match incoming.take(chunk) {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(error) => {
                self.incoming = None;
                return Err(IntakeError::Dropped(error));
            }
        }
        let whole = self.incoming.take().expect("just used");
        let (snapshot, _, bytes) = whole.finish(&self.dir).map_err(IntakeError::Refused)?;
        Ok(Some((snapshot, bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryHash;
    use crate::ids::StateHash;
    use crate::snapshot::{SnapshotMeta, encode_head, encode_sessions};
    use crate::state::StreamHasher;
    use crate::storage::Files;
    use net::ids::{NodeId, Term};

    fn chunk(index: u64, offset: u64, total: u64, data: &[u8]) -> SnapshotChunk {
        SnapshotChunk {
            term: Term(1),
            leader: NodeId(1),
            index: EntryIndex(index),
            offset,
            total,
            data: data.to_vec(),
        }
    }

    /// A sound snapshot file of no tables covering entry `index`.
    fn snapshot_bytes(index: u64) -> Vec<u8> {
        let meta = SnapshotMeta {
            index: EntryIndex(index),
            term: Term(1),
            entry_hash: EntryHash::default(),
            state_hash: StateHash::default(),
            hasher: StreamHasher::default().save(),
            members: None,
            handler_version: crate::handler::HANDLER_VERSION_FIRST,
        };
        let mut out = Vec::new();
        encode_head(&meta, None, 0, &mut out);
        encode_sessions(0, &[], &mut out);
        let digest = blake3::hash(&out);
        out.extend_from_slice(digest.as_bytes());
        out
    }

    /// Proves a follower refuses a first chunk that is not at the start or is over the limit,
    /// and then chunks of another snapshot, out of order, past the end or empty, each as its
    /// own variant, keeping what it received so far.
    #[test]
    fn chunks_that_do_not_follow_are_refused_with_their_facts() {
        let dir = tempfile::tempdir().unwrap();
        let not_at_start = Incoming::start(Files, dir.path(), &chunk(5, 4, 8, b"abcd"));
        assert!(matches!(
            not_at_start,
            Err(ReceiveError::NotAtStart { offset: 4 })
        ));
        let too_large = Incoming::start(
            Files,
            dir.path(),
            &chunk(5, 0, SNAPSHOT_BYTES_MAX + 1, b"a"),
        );
        assert!(matches!(too_large, Err(ReceiveError::TooLarge { .. })));

        let first = chunk(5, 0, 8, b"abcd");
        let mut incoming = Incoming::start(Files, dir.path(), &first).unwrap();
        assert!(!incoming.take(&first).unwrap());
        let error = incoming.take(&chunk(6, 4, 8, b"efgh")).unwrap_err();
        assert!(matches!(
            error,
            ReceiveError::WrongSnapshot {
                expected_offset: 4,
                ..
            }
        ));
        assert!(
            error.to_string().contains("chunk at 4 of snapshot 6"),
            "{error}"
        );
        let error = incoming.take(&chunk(5, 2, 8, b"efgh")).unwrap_err();
        assert!(matches!(
            error,
            ReceiveError::OutOfOrder {
                offset: 2,
                expected: 4,
                ..
            }
        ));
        let error = incoming.take(&chunk(5, 4, 8, b"efghi")).unwrap_err();
        assert!(matches!(
            error,
            ReceiveError::PastEnd {
                offset: 4,
                bytes: 5,
                total: 8
            }
        ));
        let error = incoming.take(&chunk(5, 4, 8, b"")).unwrap_err();
        assert!(matches!(
            error,
            ReceiveError::Empty {
                offset: 4,
                total: 8
            }
        ));
        assert!(incoming.take(&chunk(5, 4, 8, b"efgh")).unwrap());
    }

    /// Proves the intake keeps a snapshot only once every chunk arrived in order: a chunk
    /// that does not follow drops the one under way (later chunks of it are ignored), a first
    /// chunk starts it over, and the whole one is read back, in place; one that does not
    /// verify is refused, apart from the dropped ones.
    #[test]
    fn the_intake_keeps_a_snapshot_only_when_it_arrived_whole_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let mut intake = Intake::new(Files, dir.path().to_path_buf());
        let bytes = snapshot_bytes(7);
        let total = bytes.len() as u64;
        let (head, tail) = bytes.split_at(bytes.len() / 2);
        let second = chunk(7, head.len() as u64, total, tail);
        assert!(intake.take(&chunk(7, 0, total, head)).unwrap().is_none());
        let gap = chunk(7, head.len() as u64 + 1, total, &tail[1..]);
        assert!(matches!(intake.take(&gap), Err(IntakeError::Dropped(_))));
        assert!(intake.take(&second).unwrap().is_none(), "nothing under way");
        assert!(intake.take(&chunk(7, 0, total, head)).unwrap().is_none());
        let (snapshot, size) = intake.take(&second).unwrap().expect("whole");
        assert_eq!((snapshot.meta.index, size), (EntryIndex(7), total));
        assert!(snapshot_path(dir.path(), EntryIndex(7)).exists());
        let mut damaged = snapshot_bytes(8);
        damaged[0] ^= 1;
        let whole = chunk(8, 0, damaged.len() as u64, &damaged);
        assert!(matches!(intake.take(&whole), Err(IntakeError::Refused(_))));
    }

    /// Proves an assembled file that does not verify, or that covers another entry than its
    /// chunks announced, is refused and not renamed into place; a sound one is.
    #[test]
    fn an_assembled_snapshot_must_verify_and_cover_what_was_announced() {
        let dir = tempfile::tempdir().unwrap();
        let receive = |index: u64, bytes: &[u8]| {
            let whole = chunk(index, 0, bytes.len() as u64, bytes);
            let mut incoming = Incoming::start(Files, dir.path(), &whole).unwrap();
            assert!(incoming.take(&whole).unwrap());
            incoming.finish(dir.path())
        };
        let mut damaged = snapshot_bytes(5);
        damaged[0] ^= 1;
        let error = receive(5, &damaged).unwrap_err();
        assert!(matches!(error, ReceiveError::Unreadable(_)), "{error:?}");
        let error = receive(6, &snapshot_bytes(5)).unwrap_err();
        assert!(matches!(
            error,
            ReceiveError::WrongIndex {
                announced: EntryIndex(6),
                covers: EntryIndex(5)
            }
        ));
        assert!(!snapshot_path(dir.path(), EntryIndex(6)).exists());
        let (snapshot, path, _) = receive(5, &snapshot_bytes(5)).unwrap();
        assert_eq!(snapshot.meta.index, EntryIndex(5));
        assert_eq!(path, snapshot_path(dir.path(), EntryIndex(5)));
    }
}
