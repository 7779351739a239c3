//! A node's data directory as a whole: the exclusive lock a running node holds on it, the
//! identity stamped in it at first start (cluster, node and the handler's tables), the checks
//! made before anything in it is read (it exists or can be created, it is writable, it has
//! room), the mode an operator set, and the quarantine folder, where files the node cannot use
//! are moved aside, never deleted.

use crate::apply::Mode;
use crate::codec::{self, Decode, Encode};
use crate::entry::ENTRY_PAYLOAD_BYTES_MAX;
use crate::ids::NodeId;
use crate::state::Schema;
use crate::storage::files::{self, FileError};
use crate::storage::{Files, Storage, StorageFile};
use rustix::fs::{Access, FlockOperation};
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file holding the directory's identity, inside the data directory.
pub const IDENTITY_FILE: &str = "identity";

/// The file that keeps the execution mode an operator set with `mode` (`verify` or
/// `performance`): it outlasts restarts and wins over the cluster file's `mode` key.
pub const MODE_FILE: &str = "mode";
/// The file that marks a node started to join a running cluster (`node --join`): it is no
/// member until a members entry names it, whatever its cluster file lists.
pub const JOIN_FILE: &str = "join";
/// The folder inside the data directory that files the node cannot use are moved to.
pub const QUARANTINE_DIR: &str = "quarantine";
/// Bytes the data directory's file system must have free for a node to start: room for two
/// of the largest entries (an append and the next), the hard state and the identity.
pub const START_FREE_BYTES_MIN: u64 = 2 * ENTRY_PAYLOAD_BYTES_MAX as u64 + 64 * 1024;
/// Entries a file system creates on its own, which do not make a directory hold data.
const FILE_SYSTEM_ENTRIES: [&str; 1] = ["lost+found"];
/// Starts the identity file: the format and its version.
const IDENTITY_MAGIC: [u8; 8] = *b"NODEIDv1";

/// Why a data directory cannot be used as it is. Every message names the directory or file,
/// the reason, and what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    /// Neither the directory nor its parent exists: a volume not mounted, or a typo.
    #[error(
        "data directory {dir} does not exist, and neither does its parent {parent}: is the \
         volume mounted? Fix data_dir, or create {parent} for a new node"
    )]
    Missing {
        /// The data directory.
        dir: PathBuf,
        /// Its parent.
        parent: PathBuf,
    },
    /// The path names something that is not a directory.
    #[error("data directory {0} is not a directory: fix data_dir")]
    NotADirectory(PathBuf),
    /// Another process holds the directory's lock.
    #[error("data directory {dir} is in use by {}: stop it first, or fix data_dir", holder(*.pid))]
    InUse {
        /// The data directory.
        dir: PathBuf,
        /// The process holding the lock, when the system says.
        pid: Option<u32>,
    },
    /// The directory cannot be written.
    #[error(
        "data directory {dir} is not writable ({source}): the node writes its log there; \
         make it writable, or fix data_dir"
    )]
    ReadOnly {
        /// The data directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The directory does not exist and its parent cannot be written.
    #[error(
        "data directory {dir} does not exist and cannot be created in {parent} ({source}): \
         make {parent} writable, or fix data_dir"
    )]
    CannotCreate {
        /// The data directory.
        dir: PathBuf,
        /// Its parent.
        parent: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The directory's file system is (nearly) full.
    #[error(
        "data directory {dir} has {free_bytes} bytes free, under the {needed_bytes} a node \
         needs to start: free space on its file system, or move data_dir"
    )]
    Full {
        /// The data directory.
        dir: PathBuf,
        /// Bytes free for unprivileged use.
        free_bytes: u64,
        /// Bytes needed ([`START_FREE_BYTES_MIN`]).
        needed_bytes: u64,
    },
    /// The identity file does not verify.
    #[error(
        "{path} is damaged ({reason}): it records which cluster and node this directory \
         belongs to. If you are sure it is this node's directory, move the file away and start \
         again (the directory is stamped anew)"
    )]
    IdentityDamaged {
        /// The identity file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The mode file holds neither `verify` nor `performance`.
    #[error(
        "{path} holds {text:?}, not `verify` or `performance`: write one of them there, or \
         remove the file to run the cluster file's mode"
    )]
    ModeDamaged {
        /// The mode file.
        path: PathBuf,
        /// What it holds.
        text: String,
    },
    /// The directory belongs to another cluster.
    #[error(
        "data directory {dir} belongs to cluster {stamped}, not to cluster {configured}: fix \
         data_dir, or cluster_id"
    )]
    WrongCluster {
        /// The data directory.
        dir: PathBuf,
        /// The cluster stamped in it.
        stamped: u64,
        /// The cluster configured.
        configured: u64,
    },
    /// The directory belongs to another node.
    #[error(
        "data directory {dir} belongs to node {stamped}, not to node {configured}: fix \
         data_dir for node {configured} (or start node {stamped} with it)"
    )]
    WrongNode {
        /// The data directory.
        dir: PathBuf,
        /// The node stamped in it.
        stamped: NodeId,
        /// The node configured.
        configured: NodeId,
    },
    /// The data holds a table the handler does not declare.
    #[error(
        "data directory {dir} holds table {table} ({name:?}), which this handler's schema does \
         not declare: run a handler build that declares it"
    )]
    TableMissing {
        /// The data directory.
        dir: PathBuf,
        /// The table's id.
        table: u16,
        /// Its name when it was stamped.
        name: String,
    },
    /// A table id the data holds is declared under another name.
    #[error(
        "data directory {dir} holds table {table} as {stamped:?}, but this handler declares \
         table {table} as {declared:?}: run the handler build that wrote the data, or keep \
         the table's name"
    )]
    TableRenamed {
        /// The data directory.
        dir: PathBuf,
        /// The table's id.
        table: u16,
        /// The name stamped.
        stamped: String,
        /// The name declared now.
        declared: String,
    },
    /// A file system operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

fn holder(pid: Option<u32>) -> String {
    pid.map_or_else(|| "another process".into(), |pid| format!("process {pid}"))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DataDirError + '_ {
    move |source| DataDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The lock on a data directory: held while a node (or an inspection) uses it, released when
/// dropped. It is an advisory `flock` on the directory itself, so taking it writes nothing.
#[derive(Debug)]
pub struct DirLock {
    dir: Option<File>,
    /// Told once the lock is released.
    released: Option<std::sync::mpsc::Sender<()>>,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the flock; then whoever waits hears of it.
        drop(self.dir.take());
        if let Some(released) = self.released.take() {
            let _ = released.send(());
        }
    }
}

impl DirLock {
    /// Takes the exclusive lock a running node holds; refused at once when another process
    /// (or another node in this one) holds it.
    pub fn exclusive(dir: &Path) -> Result<DirLock, DataDirError> {
        DirLock::take(dir, FlockOperation::NonBlockingLockExclusive)
    }

    /// Takes a shared lock, for reading a stopped node's data: refused while a node runs on
    /// it, and keeps one from starting meanwhile.
    pub fn shared(dir: &Path) -> Result<DirLock, DataDirError> {
        DirLock::take(dir, FlockOperation::NonBlockingLockShared)
    }

    /// A receiver that hears once this lock is released (the last holder dropped it).
    pub fn on_release(&mut self) -> std::sync::mpsc::Receiver<()> {
        let (released, heard) = std::sync::mpsc::channel();
        self.released = Some(released);
        heard
    }

    fn take(dir: &Path, operation: FlockOperation) -> Result<DirLock, DataDirError> {
        let file = File::open(dir).map_err(io(dir))?;
        match rustix::fs::flock(&file, operation) {
            Ok(()) => Ok(DirLock {
                dir: Some(file),
                released: None,
            }),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(DataDirError::InUse {
                dir: dir.to_path_buf(),
                pid: lock_holder(&file),
            }),
            Err(errno) => Err(DataDirError::Io {
                path: dir.to_path_buf(),
                source: errno.into(),
            }),
        }
    }
}

/// The process holding a `flock` on `file`, as `/proc/locks` lists it (Linux; `None`
/// elsewhere or when it is not listed).
fn lock_holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let locks = fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // "1: FLOCK  ADVISORY  WRITE 4242 00:1a:12345 0 EOF"
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, place) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let mut place = place.split(':');
        let on_major = u32::from_str_radix(place.next()?, 16).ok()? == major;
        let on_minor = u32::from_str_radix(place.next()?, 16).ok()? == minor;
        let on_inode = place.next()?.parse::<u64>().ok()? == meta.ino();
        (*kind == "FLOCK" && on_major && on_minor && on_inode)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// What a data directory says about itself before anything in it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirState {
    /// It does not exist; its parent does (a first start creates it).
    Absent,
    /// It exists and holds nothing (a first start).
    Empty,
    /// It holds files.
    Holds,
}

/// Looks at `dir` without changing anything: absent (with its parent present), empty, or
/// holding files; refused when neither it nor its parent exists, or it is not a directory.
pub fn dir_state(dir: &Path) -> Result<DirState, DataDirError> {
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(DataDirError::NotADirectory(dir.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match dir.parent() {
                Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
                Some(parent) => parent,
                None => Path::new("/"),
            };
            if parent.is_dir() {
                return Ok(DirState::Absent);
            }
            return Err(DataDirError::Missing {
                dir: dir.to_path_buf(),
                parent: parent.to_path_buf(),
            });
        }
        Err(source) => return Err(io(dir)(source)),
    }
    let mut items = fs::read_dir(dir).map_err(io(dir))?;
    let holds = items.any(|item| {
        item.map_or(true, |item| {
            !FILE_SYSTEM_ENTRIES
                .iter()
                .any(|name| item.file_name() == *name)
        })
    });
    Ok(if holds {
        DirState::Holds
    } else {
        DirState::Empty
    })
}

/// Creates a data directory that does not exist (its parent does), durably.
pub fn create_dir(dir: &Path) -> Result<(), DataDirError> {
    match files::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(writable_error(dir, e.source)),
    }
    sync_dir(files::parent_of(dir))
}

/// Warns, naming `dir`, when the data directory lets the group or others in: it holds every
/// balance and session. A directory an earlier build made (0755) is left as it is, for the
/// operator to narrow: the node does not change what it did not create.
pub fn warn_if_open(dir: &Path) {
    if let Some(mode) = files::open_to_others(dir) {
        tracing::warn!(
            path = %dir.display(),
            mode = format!("{mode:o}"),
            "the data directory is open to other users: it holds the whole state; \
             run chmod 700 on it"
        );
    }
}

/// Checks that `dir`, which does not exist, can be created in its parent, and that the
/// parent's file system has room to start a node in; writes nothing.
pub fn check_creatable(dir: &Path) -> Result<(), DataDirError> {
    let parent = match dir.parent() {
        Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
        Some(parent) => parent,
        None => Path::new("/"),
    };
    match check_writable(parent) {
        Ok(()) => Ok(()),
        Err(DataDirError::ReadOnly { source, .. }) => Err(DataDirError::CannotCreate {
            dir: dir.to_path_buf(),
            parent: parent.to_path_buf(),
            source,
        }),
        Err(DataDirError::Full {
            free_bytes,
            needed_bytes,
            ..
        }) => Err(DataDirError::Full {
            dir: dir.to_path_buf(),
            free_bytes,
            needed_bytes,
        }),
        Err(other) => Err(other),
    }
}

/// Checks that `dir` (an existing directory) can be written and its file system has room to
/// start a node in; writes nothing.
pub fn check_writable(dir: &Path) -> Result<(), DataDirError> {
    if let Err(errno) = rustix::fs::access(dir, Access::WRITE_OK) {
        return Err(DataDirError::ReadOnly {
            dir: dir.to_path_buf(),
            source: errno.into(),
        });
    }
    let stats = rustix::fs::statvfs(dir).map_err(|e| io(dir)(e.into()))?;
    let free_bytes = stats.f_bavail.saturating_mul(stats.f_frsize);
    if free_bytes < START_FREE_BYTES_MIN {
        return Err(DataDirError::Full {
            dir: dir.to_path_buf(),
            free_bytes,
            needed_bytes: START_FREE_BYTES_MIN,
        });
    }
    Ok(())
}

/// A failed write under `dir`: [`DataDirError::ReadOnly`] when the file system or the
/// permissions refuse it.
/// True for the errors that say the place cannot be written (not that a write failed).
fn refuses_writes(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::PermissionDenied
        || error.kind() == std::io::ErrorKind::ReadOnlyFilesystem
}

fn writable_error(dir: &Path, source: std::io::Error) -> DataDirError {
    if refuses_writes(&source) {
        DataDirError::ReadOnly {
            dir: dir.to_path_buf(),
            source,
        }
    } else {
        io(dir)(source)
    }
}

/// A failed write in `dir`: refused as [`writable_error`] says, or the path that failed.
fn file_error(dir: &Path, error: files::FileError) -> DataDirError {
    if refuses_writes(&error.source) {
        return writable_error(dir, error.source);
    }
    io(&error.path)(error.source)
}

/// Whose a data directory is: stamped at its first start, checked at every start.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Identity {
    /// The cluster.
    pub cluster_id: u64,
    /// The node.
    pub node: NodeId,
    /// The handler's tables (id and name) the data may hold: every table any start declared.
    pub tables: Vec<(u16, String)>,
}

impl Identity {
    /// The identity of a new directory of node `node` in cluster `cluster_id`, whose handler
    /// declares `schema`.
    pub fn new(cluster_id: u64, node: NodeId, schema: &Schema) -> Self {
        let mut identity = Identity {
            cluster_id,
            node,
            tables: Vec::new(),
        };
        identity.add_tables(schema);
        identity
    }

    /// Adds the tables `schema` declares that are not stamped yet; true when any was added.
    pub fn add_tables(&mut self, schema: &Schema) -> bool {
        let before = self.tables.len();
        for (id, name) in schema.tables() {
            if self.tables.iter().all(|(known, _)| *known != id.0) {
                self.tables.push((id.0, name.to_string()));
            }
        }
        self.tables.sort_unstable();
        self.tables.len() > before
    }

    /// Checks that this directory is node `node`'s of cluster `cluster_id`, and that
    /// `schema` declares every table stamped, under the same name.
    pub fn check(
        &self,
        dir: &Path,
        cluster_id: u64,
        node: NodeId,
        schema: &Schema,
    ) -> Result<(), DataDirError> {
        if self.cluster_id != cluster_id {
            return Err(DataDirError::WrongCluster {
                dir: dir.to_path_buf(),
                stamped: self.cluster_id,
                configured: cluster_id,
            });
        }
        if self.node != node {
            return Err(DataDirError::WrongNode {
                dir: dir.to_path_buf(),
                stamped: self.node,
                configured: node,
            });
        }
        for (table, stamped) in &self.tables {
            match schema.tables().find(|(id, _)| id.0 == *table) {
                None => {
                    return Err(DataDirError::TableMissing {
                        dir: dir.to_path_buf(),
                        table: *table,
                        name: stamped.clone(),
                    });
                }
                Some((_, declared)) if declared != stamped => {
                    return Err(DataDirError::TableRenamed {
                        dir: dir.to_path_buf(),
                        table: *table,
                        stamped: stamped.clone(),
                        declared: declared.to_string(),
                    });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Reads the identity stamped in `dir`; `None` when none was stamped.
pub fn read_identity(dir: &Path) -> Result<Option<Identity>, DataDirError> {
    let path = dir.join(IDENTITY_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io(&path)(source)),
    };
    let damaged = |reason: &str| DataDirError::IdentityDamaged {
        path: path.clone(),
        reason: reason.into(),
    };
    let head = IDENTITY_MAGIC.len() + 4;
    if bytes.len() < head || bytes[..IDENTITY_MAGIC.len()] != IDENTITY_MAGIC {
        return Err(damaged("not an identity file"));
    }
    let (crc, body) = bytes[IDENTITY_MAGIC.len()..].split_at(4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(damaged("checksum"));
    }
    codec::decode(body)
        .map(Some)
        .map_err(|e| damaged(&e.to_string()))
}

/// Stamps `identity` in `dir` durably: a temporary file, fsynced, renamed over the old one,
/// and the directory fsynced.
pub fn write_identity(dir: &Path, identity: &Identity) -> Result<(), DataDirError> {
    write_identity_on(&Files, dir, identity)
}

/// [`write_identity`] on `storage`.
pub fn write_identity_on<S: Storage>(
    storage: &S,
    dir: &Path,
    identity: &Identity,
) -> Result<(), DataDirError> {
    let body = codec::encode_to_vec(identity).expect("an identity encodes");
    let mut bytes = IDENTITY_MAGIC.to_vec();
    bytes.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    bytes.extend_from_slice(&body);
    write_durably(storage, dir, IDENTITY_FILE, &bytes)
}

/// Writes `bytes` as the file `name` in `dir` durably: a temporary file, fsynced, renamed over
/// the old one, and the directory fsynced.
fn write_durably<S: Storage>(
    storage: &S,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(), DataDirError> {
    let path = dir.join(name);
    storage
        .write_durably(&path, bytes)
        .map_err(|source| file_error(dir, FileError { path, source }))
}

/// The mode an operator set for the node of `dir` ([`MODE_FILE`]); `None` when none was set.
pub fn read_mode(dir: &Path) -> Result<Option<Mode>, DataDirError> {
    let path = dir.join(MODE_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io(&path)(source)),
    };
    match text.trim().parse::<Mode>() {
        Ok(mode) => Ok(Some(mode)),
        Err(_) => Err(DataDirError::ModeDamaged { path, text }),
    }
}

/// True when the node of `dir` was started to join a running cluster ([`JOIN_FILE`]).
pub fn joined(dir: &Path) -> bool {
    dir.join(JOIN_FILE).exists()
}

/// Marks the node of `dir` as one that joined a running cluster, durably.
pub fn write_joined(dir: &Path) -> Result<(), DataDirError> {
    write_durably(
        &Files,
        dir,
        JOIN_FILE,
        b"started with --join: a member once a members entry names it\n",
    )
}

/// Keeps `mode` as the one an operator set for the node of `dir`, durably.
pub fn write_mode(dir: &Path, mode: Mode) -> Result<(), DataDirError> {
    write_mode_on(&Files, dir, mode)
}

/// [`write_mode`] on `storage`.
pub fn write_mode_on<S: Storage>(storage: &S, dir: &Path, mode: Mode) -> Result<(), DataDirError> {
    let text = format!("{}\n", mode.name());
    write_durably(storage, dir, MODE_FILE, text.as_bytes())
}

/// Moves `paths` (files or directories inside `dir`) into the folder `quarantine/<name>` of
/// `dir`, keeping their paths relative to `dir`, durably; returns the folder. Nothing is
/// deleted: an operator can move them back.
pub fn quarantine<S: Storage>(
    storage: &S,
    dir: &Path,
    name: &str,
    paths: &[PathBuf],
) -> Result<PathBuf, DataDirError> {
    let folder = dir.join(QUARANTINE_DIR).join(name);
    for path in paths {
        let target = folder.join(path.strip_prefix(dir).unwrap_or(path));
        let parent = target.parent().expect("inside the folder");
        create_dirs(storage, dir, parent)?;
        storage.rename(path, &target).map_err(io(path))?;
        storage.sync_dir(parent).map_err(io(parent))?;
        let source = path.parent().unwrap_or(dir);
        storage.sync_dir(source).map_err(io(source))?;
    }
    Ok(folder)
}

/// Copies `paths` (files inside `dir`) into the folder `quarantine/<name>` of `dir`, as
/// [`quarantine`] moves them, durably (the copy is fsynced before the caller replaces them).
pub fn quarantine_copy<S: Storage>(
    storage: &S,
    dir: &Path,
    name: &str,
    paths: &[PathBuf],
) -> Result<(), DataDirError> {
    let folder = dir.join(QUARANTINE_DIR).join(name);
    for path in paths {
        let target = folder.join(path.strip_prefix(dir).unwrap_or(path));
        let parent = target.parent().expect("inside the folder");
        create_dirs(storage, dir, parent)?;
        let bytes = storage.read(path).map_err(io(path))?;
        let file = storage.create_replacing(&target).map_err(io(&target))?;
        file.write_all_at(&bytes, 0)
            .and_then(|()| file.sync_all())
            .map_err(io(&target))?;
        storage.sync_dir(parent).map_err(io(parent))?;
    }
    Ok(())
}

/// Creates `path` and any missing directory between `dir` and it, each made durable in its
/// parent.
fn create_dirs<S: Storage>(storage: &S, dir: &Path, path: &Path) -> Result<(), DataDirError> {
    let mut at = dir.to_path_buf();
    for part in path.strip_prefix(dir).unwrap_or(path).components() {
        let next = at.join(part);
        if !storage.is_dir(&next) {
            storage.create_dir_all(&next).map_err(io(&next))?;
            storage.sync_dir(&at).map_err(io(&at))?;
        }
        at = next;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), DataDirError> {
    files::sync_dir(dir).map_err(|e| io(dir)(e.source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Table;

    const ACCOUNTS: Table<u64, u64> = Table::new(0, "accounts");
    const LEDGER: Table<u64, u64> = Table::new(1, "ledger");
    const RENAMED: Table<u64, u64> = Table::new(1, "journal");

    /// Proves an identity survives a rewrite and is checked: another cluster, another node, a
    /// missing or renamed table are refused; a new table is added, a damaged file refused.
    #[test]
    fn identity_is_stamped_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        assert_eq!(read_identity(path).unwrap(), None);
        let both = Schema::new().table(&ACCOUNTS).table(&LEDGER);
        let identity = Identity::new(9, NodeId(2), &both);
        write_identity(path, &identity).unwrap();
        write_identity(path, &identity).unwrap();
        let read = read_identity(path).unwrap().unwrap();
        assert_eq!(read, identity);
        read.check(path, 9, NodeId(2), &both).unwrap();
        let error = |result: Result<(), DataDirError>| result.unwrap_err().to_string();
        assert!(
            error(read.check(path, 8, NodeId(2), &both)).contains("cluster 9, not to cluster 8")
        );
        assert!(error(read.check(path, 9, NodeId(1), &both)).contains("node 2, not to node 1"));
        let fewer = Schema::new().table(&ACCOUNTS);
        assert!(error(read.check(path, 9, NodeId(2), &fewer)).contains("table 1 (\"ledger\")"));
        let renamed = Schema::new().table(&ACCOUNTS).table(&RENAMED);
        assert!(error(read.check(path, 9, NodeId(2), &renamed)).contains("as \"journal\""));
        let mut grown = Identity::new(9, NodeId(2), &fewer);
        assert!(grown.add_tables(&both));
        assert!(!grown.add_tables(&both));
        assert_eq!(grown, identity);
        let file = path.join(IDENTITY_FILE);
        let mut bytes = fs::read(&file).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        fs::write(&file, bytes).unwrap();
        assert!(matches!(
            read_identity(path),
            Err(DataDirError::IdentityDamaged { .. })
        ));
    }

    /// Proves a second exclusive lock is refused while the first is held (naming this
    /// process), a shared lock too, and the lock is free again once dropped.
    #[test]
    fn one_lock_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = DirLock::exclusive(dir.path()).unwrap();
        let refused = DirLock::exclusive(dir.path()).unwrap_err();
        let me = std::process::id();
        assert!(
            matches!(refused, DataDirError::InUse { pid: Some(pid), .. } if pid == me),
            "{refused}"
        );
        assert!(DirLock::shared(dir.path()).is_err());
        drop(held);
        let shared = DirLock::shared(dir.path()).unwrap();
        assert!(DirLock::shared(dir.path()).is_ok());
        assert!(DirLock::exclusive(dir.path()).is_err());
        drop(shared);
        DirLock::exclusive(dir.path()).unwrap();
    }

    /// Proves the states of a directory: absent with a parent, empty, holding files, and a
    /// missing parent refused.
    #[test]
    fn directory_states() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("node1");
        assert_eq!(dir_state(&node).unwrap(), DirState::Absent);
        let deep = dir.path().join("absent").join("node1");
        assert!(matches!(
            dir_state(&deep),
            Err(DataDirError::Missing { .. })
        ));
        create_dir(&node).unwrap();
        assert_eq!(dir_state(&node).unwrap(), DirState::Empty);
        fs::create_dir(node.join("lost+found")).unwrap();
        assert_eq!(dir_state(&node).unwrap(), DirState::Empty);
        fs::write(node.join("hard_state"), b"x").unwrap();
        assert_eq!(dir_state(&node).unwrap(), DirState::Holds);
        assert!(matches!(
            dir_state(&node.join("hard_state")),
            Err(DataDirError::NotADirectory(_))
        ));
        check_writable(&node).unwrap();
    }

    /// Proves the mode an operator set is kept and read back, that none set is `None`, and
    /// that a mode file with anything else in it is refused with its path, not guessed.
    #[test]
    fn the_mode_set_is_kept_and_a_damaged_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_mode(dir.path()).unwrap(), None);
        write_mode(dir.path(), Mode::Performance).unwrap();
        assert_eq!(read_mode(dir.path()).unwrap(), Some(Mode::Performance));
        write_mode(dir.path(), Mode::Verify).unwrap();
        assert_eq!(read_mode(dir.path()).unwrap(), Some(Mode::Verify));
        fs::write(dir.path().join(MODE_FILE), "fast\n").unwrap();
        let error = read_mode(dir.path()).unwrap_err();
        assert!(matches!(error, DataDirError::ModeDamaged { .. }), "{error}");
        assert!(error.to_string().contains(MODE_FILE), "{error}");
    }
}
