//! Backups: a node serves its newest durable snapshot file piece by piece over the client
//! protocol; the backup file wraps those bytes with what they are (magic, format version,
//! cluster id, the snapshot's identity, the mode) and a blake3 digest of it all; a restore
//! checks it and seeds each data directory of a new cluster with the snapshot, an empty log
//! after it, a hard state of its term, an identity and the mode.

use crate::apply::Mode;
use crate::codec::{self, Decode, Encode};
use crate::core::HardState;
use crate::ids::{EntryIndex, NodeId, StateHash, Term};
use crate::snapshot::{ParseError, SnapshotError, parse_snapshot};
use crate::state::Schema;
use crate::storage::data_dir::{self, DataDirError, DirState, Identity};
use crate::storage::files;
use crate::storage::hard_state::{HARD_STATE_FILE, SNAPSHOT_DIR, WAL_DIR, write_hard_state_on};
use crate::storage::{Files, Storage};
use std::fs;
use std::path::{Path, PathBuf};

/// Starts a backup file: the format family and its version.
const BACKUP_MAGIC: [u8; 8] = *b"RSMBAK01";
/// The version of the header this build writes and reads.
pub const BACKUP_FORMAT_VERSION: u16 = 1;
/// Bytes of the blake3 digest that ends a backup file.
const BACKUP_DIGEST_BYTES: usize = 32;
/// Largest header a backup file may claim, in bytes (it is a few dozen).
const BACKUP_HEADER_BYTES_MAX: u32 = 4096;

/// What a backup file holds besides the snapshot's bytes.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct BackupHeader {
    /// [`BACKUP_FORMAT_VERSION`] of the writer.
    pub version: u16,
    /// The cluster the backup was taken from.
    pub cluster_id: u64,
    /// The node that served it.
    pub node: NodeId,
    /// The last entry the snapshot covers (committed and applied).
    pub index: EntryIndex,
    /// Its term.
    pub term: Term,
    /// The state hash after it, as the node recorded it.
    pub state_hash: StateHash,
    /// The blake3 digest that ends the snapshot file.
    pub snapshot_digest: [u8; 32],
    /// Bytes of the snapshot file.
    pub snapshot_bytes: u64,
    /// The execution mode the node ran.
    pub mode: Mode,
}

/// A backup file that cannot be written, read or restored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The file system refused an operation.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The output exists and `--force` was not given.
    #[error("{0} exists: give --force to replace it, or choose another --out")]
    Exists(PathBuf),
    /// The file does not start with the backup magic.
    #[error("{0} is not a backup file (no backup magic)")]
    Magic(PathBuf),
    /// Another version of the backup format.
    #[error("{path} is backup format version {found}; this build reads {BACKUP_FORMAT_VERSION}")]
    Version {
        /// The file.
        path: PathBuf,
        /// The version it holds.
        found: u16,
    },
    /// The digest does not match: the file was damaged or cut short.
    #[error("{0} is damaged: its blake3 digest does not match its content (or it is cut short)")]
    Digest(PathBuf),
    /// The header does not decode.
    #[error("{path} is damaged: its header does not decode ({reason})")]
    Header {
        /// The file.
        path: PathBuf,
        /// The decoder's account.
        reason: String,
    },
    /// The snapshot inside does not verify or does not match the header.
    #[error("{path}: the snapshot inside is not usable: {problem}")]
    Snapshot {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A node's data directory already holds data: a restore never writes over data.
    #[error(
        "node {node}: data directory {dir} already holds data: restore seeds only new \
         directories (absent or empty); nothing was written to any node"
    )]
    NotEmpty {
        /// The node.
        node: u8,
        /// Its data directory.
        dir: PathBuf,
    },
    /// A data directory cannot be used.
    #[error("node {node}: {source}")]
    DataDir {
        /// The node.
        node: u8,
        /// The cause.
        source: DataDirError,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A backup read back and verified: its header and the snapshot file's bytes.
#[derive(Debug)]
pub struct Backup {
    /// What it is.
    pub header: BackupHeader,
    /// The snapshot file, byte for byte as the node kept it.
    pub snapshot: Vec<u8>,
}

impl Backup {
    /// Builds the backup of `snapshot` (a whole snapshot file), checking it: its digest, its
    /// structure, and that it covers `index`.
    pub fn new(
        cluster_id: u64,
        node: NodeId,
        mode: Mode,
        snapshot: Vec<u8>,
    ) -> Result<Backup, ParseError> {
        let parsed = parse_snapshot(&snapshot)?;
        let digest_at = snapshot.len() - BACKUP_DIGEST_BYTES;
        let header = BackupHeader {
            version: BACKUP_FORMAT_VERSION,
            cluster_id,
            node,
            index: parsed.meta.index,
            term: parsed.meta.term,
            state_hash: parsed.meta.state_hash,
            snapshot_digest: snapshot[digest_at..].try_into().expect("32 bytes"),
            snapshot_bytes: snapshot.len() as u64,
            mode,
        };
        Ok(Backup { header, snapshot })
    }

    /// The file's bytes: magic, header length, header, snapshot, blake3 of all before.
    pub fn encode(&self) -> Vec<u8> {
        let header = codec::encode_to_vec(&self.header).expect("a header encodes");
        assert!(header.len() <= BACKUP_HEADER_BYTES_MAX as usize);
        let mut out = Vec::with_capacity(self.snapshot.len() + header.len() + 64);
        out.extend_from_slice(&BACKUP_MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&self.snapshot);
        let digest = blake3::hash(&out);
        out.extend_from_slice(digest.as_bytes());
        out
    }

    /// The digest the file ends with, in hex.
    pub fn digest_hex(bytes: &[u8]) -> String {
        let at = bytes.len().saturating_sub(BACKUP_DIGEST_BYTES);
        bytes[at..].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Reads and verifies the backup file at `path`: magic, digest, version, header, and the
    /// snapshot inside (its own digest and structure, and that it is the one the header names).
    pub fn read(path: &Path) -> Result<Backup, BackupError> {
        let bytes = fs::read(path).map_err(io(path))?;
        Backup::decode(path, &bytes)
    }

    /// [`Backup::read`] of bytes already read (`path` names them in errors).
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Backup, BackupError> {
        let head = BACKUP_MAGIC.len() + 4;
        if bytes.len() < head || bytes[..BACKUP_MAGIC.len()] != BACKUP_MAGIC {
            return Err(BackupError::Magic(path.to_path_buf()));
        }
        if bytes.len() < head + BACKUP_DIGEST_BYTES {
            return Err(BackupError::Digest(path.to_path_buf()));
        }
        let (body, digest) = bytes.split_at(bytes.len() - BACKUP_DIGEST_BYTES);
        if blake3::hash(body).as_bytes() != digest {
            return Err(BackupError::Digest(path.to_path_buf()));
        }
        let length = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let header_end = head + length.min(BACKUP_HEADER_BYTES_MAX) as usize;
        let damaged = |reason: String| BackupError::Header {
            path: path.to_path_buf(),
            reason,
        };
        if length > BACKUP_HEADER_BYTES_MAX || header_end > body.len() {
            return Err(damaged(format!("a header of {length} bytes")));
        }
        let header: BackupHeader =
            codec::decode(&body[head..header_end]).map_err(|e| damaged(e.to_string()))?;
        if header.version != BACKUP_FORMAT_VERSION {
            let found = header.version;
            return Err(BackupError::Version {
                path: path.to_path_buf(),
                found,
            });
        }
        let snapshot = body[header_end..].to_vec();
        check_snapshot(path, &header, &snapshot)?;
        Ok(Backup { header, snapshot })
    }
}

/// Checks that `snapshot` verifies and is the one `header` names.
fn check_snapshot(path: &Path, header: &BackupHeader, snapshot: &[u8]) -> Result<(), BackupError> {
    let problem = |problem: String| BackupError::Snapshot {
        path: path.to_path_buf(),
        problem,
    };
    let parsed = parse_snapshot(snapshot).map_err(|e| problem(e.to_string()))?;
    let meta = &parsed.meta;
    let same = meta.index == header.index
        && meta.term == header.term
        && meta.state_hash == header.state_hash
        && snapshot.len() as u64 == header.snapshot_bytes
        && snapshot[snapshot.len() - BACKUP_DIGEST_BYTES..] == header.snapshot_digest;
    if !same {
        return Err(problem(format!(
            "it covers entry {} (term {}, state hash {}), the header names entry {} (term {}, \
             state hash {})",
            meta.index, meta.term, meta.state_hash, header.index, header.term, header.state_hash
        )));
    }
    Ok(())
}

/// Writes `bytes` to `path` durably: a temporary file beside it, fsynced, renamed, the
/// directory fsynced. An existing `path` is refused unless `force`.
pub fn write_file(path: &Path, bytes: &[u8], force: bool) -> Result<(), BackupError> {
    if !force && path.symlink_metadata().is_ok() {
        return Err(BackupError::Exists(path.to_path_buf()));
    }
    let written = match force {
        true => files::write_durably(path, bytes),
        false => files::write_new(path, bytes),
    };
    written.map_err(|error| {
        if error.source.kind() == std::io::ErrorKind::AlreadyExists && error.path == path {
            return BackupError::Exists(path.to_path_buf());
        }
        file_error(error)
    })
}

fn file_error(error: files::FileError) -> BackupError {
    io(&error.path)(error.source)
}

/// One node of the cluster to seed: its id and data directory.
#[derive(Clone, Debug)]
pub struct Seed {
    /// The node.
    pub node: u8,
    /// Its data directory.
    pub dir: PathBuf,
}

/// Checks every directory first (absent with its parent present, or empty), then seeds each:
/// created, the snapshot at `snapshots/`, an empty `wal/`, a hard state of the snapshot's
/// term, the identity of `cluster_id` and the node with `schema`'s tables, and the mode.
pub fn seed_data_dirs(
    backup: &Backup,
    cluster_id: u64,
    schema: &Schema,
    seeds: &[Seed],
) -> Result<(), BackupError> {
    for seed in seeds {
        let state = data_dir::dir_state(&seed.dir).map_err(|source| BackupError::DataDir {
            node: seed.node,
            source,
        })?;
        if state == DirState::Holds {
            let dir = seed.dir.clone();
            return Err(BackupError::NotEmpty {
                node: seed.node,
                dir,
            });
        }
    }
    for seed in seeds {
        seed_one(backup, cluster_id, schema, seed)?;
    }
    Ok(())
}

fn seed_one(
    backup: &Backup,
    cluster_id: u64,
    schema: &Schema,
    seed: &Seed,
) -> Result<(), BackupError> {
    let node = seed.node;
    let dir = &seed.dir;
    let on_dir = |source| BackupError::DataDir { node, source };
    if data_dir::dir_state(dir).map_err(on_dir)? == DirState::Absent {
        data_dir::check_creatable(dir).map_err(on_dir)?;
        data_dir::create_dir(dir).map_err(on_dir)?;
    }
    // The lock keeps a node from starting on the directory while it is seeded.
    let _lock = data_dir::DirLock::exclusive(dir).map_err(on_dir)?;
    data_dir::check_writable(dir).map_err(on_dir)?;
    let identity = Identity::new(cluster_id, NodeId(node), schema);
    seed_files_on(&Files, backup, &identity, dir)
}

/// Writes a seeded node's files into the empty data directory `dir` on `storage`: the
/// snapshot, an empty `wal/`, a hard state of the snapshot's term, the mode, and last the
/// identity. Each file is written whole or not at all, so a crash part way leaves files that
/// each read back as written and a directory that a second seeding refuses as not empty.
pub fn seed_files_on<S: Storage>(
    storage: &S,
    backup: &Backup,
    identity: &Identity,
    dir: &Path,
) -> Result<(), BackupError> {
    let node = identity.node.0;
    let on_dir = |source| BackupError::DataDir { node, source };
    let snapshots = dir.join(SNAPSHOT_DIR);
    let index = backup.header.index;
    let written = crate::snapshot::write_snapshot_on(storage, &snapshots, index, &backup.snapshot);
    written.map_err(|error| match error {
        SnapshotError::Io { path, source } => BackupError::Io { path, source },
        SnapshotError::Invalid { path, problem } => BackupError::Snapshot {
            path,
            problem: problem.to_string(),
        },
    })?;
    let wal = dir.join(WAL_DIR);
    storage.create_dir(&wal).map_err(io(&wal))?;
    storage.sync_dir(dir).map_err(io(dir))?;
    let hard_state = HardState {
        term: backup.header.term,
        ..HardState::default()
    };
    write_hard_state_on(storage, dir, hard_state).map_err(|error| BackupError::Io {
        path: dir.join(HARD_STATE_FILE),
        source: std::io::Error::other(error.to_string()),
    })?;
    data_dir::write_mode_on(storage, dir, backup.header.mode).map_err(on_dir)?;
    data_dir::write_identity_on(storage, dir, identity).map_err(on_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryHash;
    use crate::snapshot::snapshot_path;
    use crate::snapshot::{SnapshotMeta, encode_head, encode_sessions};
    use crate::state::StreamHasher;

    /// A sound snapshot file of no tables covering entry `index`.
    fn snapshot_bytes(index: u64) -> Vec<u8> {
        let meta = SnapshotMeta {
            index: EntryIndex(index),
            term: Term(3),
            entry_hash: EntryHash::default(),
            state_hash: StateHash([9; 32]),
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

    fn backup() -> Backup {
        Backup::new(7, NodeId(2), Mode::Performance, snapshot_bytes(128)).unwrap()
    }

    /// Proves a backup file written durably reads back with the same header and snapshot
    /// bytes, and that the header names the snapshot's index, term and state hash.
    #[test]
    fn a_backup_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.backup");
        let written = backup();
        write_file(&path, &written.encode(), false).unwrap();
        let read = Backup::read(&path).unwrap();
        assert_eq!(read.header, written.header);
        assert_eq!(read.snapshot, snapshot_bytes(128));
        let header = &read.header;
        assert_eq!((header.index, header.term), (EntryIndex(128), Term(3)));
        assert_eq!((header.cluster_id, header.node), (7, NodeId(2)));
        assert_eq!(header.state_hash, StateHash([9; 32]));
        assert_eq!(header.mode, Mode::Performance);
        assert!(!dir.path().join("b.backup.tmp").exists());
    }

    /// Proves a damaged byte anywhere, a cut-short file, another magic and another version are
    /// each refused with their own error.
    #[test]
    fn a_damaged_backup_file_is_refused() {
        let path = Path::new("x.backup");
        let bytes = backup().encode();
        for at in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let error = Backup::decode(path, &damaged).unwrap_err();
            let expected = if at == 0 {
                matches!(error, BackupError::Magic(_))
            } else {
                matches!(error, BackupError::Digest(_))
            };
            assert!(expected, "byte {at}: {error}");
        }
        let cut = Backup::decode(path, &bytes[..bytes.len() - 10]).unwrap_err();
        assert!(matches!(cut, BackupError::Digest(_)), "{cut}");
        let mut other = backup();
        other.header.version = BACKUP_FORMAT_VERSION + 1;
        let error = Backup::decode(path, &other.encode()).unwrap_err();
        assert!(
            matches!(error, BackupError::Version { found, .. } if found == 2),
            "{error}"
        );
        let mut lying = backup();
        lying.header.index = EntryIndex(64);
        let error = Backup::decode(path, &lying.encode()).unwrap_err();
        assert!(matches!(error, BackupError::Snapshot { .. }), "{error}");
    }

    /// Proves an existing output is refused without `force` (and left as it was), and
    /// replaced with it.
    #[test]
    fn an_existing_output_is_refused_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.backup");
        fs::write(&path, b"precious").unwrap();
        let error = write_file(&path, &backup().encode(), false).unwrap_err();
        assert!(matches!(error, BackupError::Exists(_)), "{error}");
        assert_eq!(fs::read(&path).unwrap(), b"precious");
        write_file(&path, &backup().encode(), true).unwrap();
        assert_eq!(Backup::read(&path).unwrap().header, backup().header);
    }

    /// Proves a restore into directories of which one holds data is refused naming it, and
    /// writes nothing to any; into absent and empty ones it seeds each with the snapshot, an
    /// empty log, the hard state of the snapshot's term, the new cluster's identity and the
    /// mode.
    #[test]
    fn a_data_dir_that_holds_data_is_refused_and_new_ones_are_seeded() {
        let root = tempfile::tempdir().unwrap();
        let seeds: Vec<Seed> = (1..=3)
            .map(|node| Seed {
                node,
                dir: root.path().join(format!("node{node}")),
            })
            .collect();
        fs::create_dir(&seeds[1].dir).unwrap();
        fs::create_dir(&seeds[2].dir).unwrap();
        fs::write(seeds[2].dir.join("hard_state"), b"old").unwrap();
        let schema = Schema::new();
        let error = seed_data_dirs(&backup(), 11, &schema, &seeds).unwrap_err();
        assert!(
            matches!(&error, BackupError::NotEmpty { node: 3, dir } if *dir == seeds[2].dir),
            "{error}"
        );
        assert!(error.to_string().contains("node3"), "{error}");
        assert!(!seeds[0].dir.exists(), "nothing written to node 1");
        assert_eq!(fs::read_dir(&seeds[1].dir).unwrap().count(), 0);
        assert_eq!(fs::read(seeds[2].dir.join("hard_state")).unwrap(), b"old");

        fs::remove_dir_all(&seeds[2].dir).unwrap();
        seed_data_dirs(&backup(), 11, &schema, &seeds).unwrap();
        for seed in &seeds {
            let snapshot = snapshot_path(&seed.dir.join(SNAPSHOT_DIR), EntryIndex(128));
            assert_eq!(fs::read(snapshot).unwrap(), snapshot_bytes(128));
            assert_eq!(fs::read_dir(seed.dir.join(WAL_DIR)).unwrap().count(), 0);
            let hard_state = crate::storage::hard_state::read_hard_state(&seed.dir).unwrap();
            assert_eq!((hard_state.term, hard_state.voted_for), (Term(3), None));
            let identity = data_dir::read_identity(&seed.dir).unwrap().unwrap();
            assert_eq!(
                (identity.cluster_id, identity.node),
                (11, NodeId(seed.node))
            );
            assert_eq!(
                data_dir::read_mode(&seed.dir).unwrap(),
                Some(Mode::Performance)
            );
        }
        let again = seed_data_dirs(&backup(), 11, &schema, &seeds).unwrap_err();
        assert!(
            matches!(again, BackupError::NotEmpty { node: 1, .. }),
            "{again}"
        );
    }

    /// Proves a seeding stopped at any step and followed by a crash, whatever the crash
    /// keeps, leaves each of its files whole or absent (a temporary file aside), and all of
    /// them once it returned.
    #[cfg(feature = "sim")]
    #[test]
    fn a_crash_at_any_step_of_a_seeding_leaves_whole_files() {
        use crate::rng::Rng;
        use crate::storage::SimDisk;
        let dir = Path::new("/data");
        let identity = Identity::new(11, NodeId(2), &Schema::default());
        let seeded = |steps: Option<u64>| {
            let disk = SimDisk::new();
            disk.create_dir_all(dir).unwrap();
            steps.inspect(|&steps| disk.stop_after(steps));
            let result = seed_files_on(&disk, &backup(), &identity, dir);
            (disk, result)
        };
        let (whole, result) = seeded(None);
        result.unwrap();
        let files = whole.files_under(dir);
        assert_eq!(
            files.len(),
            4,
            "snapshot, hard state, mode, identity: {files:?}"
        );
        for steps in 0.. {
            let (disk, result) = seeded(Some(steps));
            disk.crash(&mut Rng::new(steps));
            for (path, _) in &files {
                match disk.read(path) {
                    Ok(bytes) => assert_eq!(bytes, whole.read(path).unwrap(), "{path:?}"),
                    Err(_) => assert!(result.is_err(), "{path:?} lost after a seeding returned"),
                }
            }
            if result.is_ok() {
                assert!(disk.is_dir(&dir.join(WAL_DIR)));
                break;
            }
        }
    }
}
