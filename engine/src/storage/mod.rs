//! The narrow interface every durable byte goes through: a directory tree of files read and
//! written at offsets, fsynced, renamed and removed. The WAL, the hard state, the snapshot
//! files and the recovery plan are written against [`Storage`], so that the same code runs
//! over the real file system ([`Files`]) in a node and over a simulated disk that loses
//! unsynced writes, tears them, flips bits and fills up (`SimDisk`, feature `sim`) in the
//! simulator. Both pass one conformance suite (`engine/tests/storage.rs`).
//!
//! The interface is the subset of POSIX the engine relies on, with the guarantees it relies
//! on: a write is durable once an fsync of its file returns; a name (a file created, renamed
//! or removed) once an fsync of its directory returns; nothing else is promised across a
//! crash. What a crash keeps of the rest is up to the implementation, and the engine's code
//! must be right for every choice.

pub mod data_dir;
pub mod files;
pub mod hard_state;
pub mod journal;
pub mod members_file;
mod real;
#[cfg(feature = "sim")]
mod simulated;

pub use real::Files;
#[cfg(feature = "sim")]
pub use simulated::{Crash, SimDisk};

use files::{parent_of, temporary_for};
use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};

/// How a file is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// For reading and writing.
    ReadWrite,
    /// For reading only: nothing is ever written through it (`runner recover`).
    ReadOnly,
}

/// A storage error as a value that can be kept, cloned and compared (an [`io::Error`] can be
/// none of these), as a replica's halt must be: the system's kind of error, where there was
/// one, and the error's message, which names the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct IoFault {
    /// The kind of the [`io::Error`] behind it; `None` when the failure was found in the
    /// bytes (a damaged entry) rather than reported by the system.
    pub kind: Option<io::ErrorKind>,
    /// What the error said.
    pub message: String,
}

impl IoFault {
    /// `error` as a value, of the system's `kind` when it has one.
    pub fn new(kind: Option<io::ErrorKind>, error: &impl std::fmt::Display) -> Self {
        IoFault {
            kind,
            message: error.to_string(),
        }
    }
}

/// A directory tree of files: the real file system, or a simulated disk.
pub trait Storage: Clone + Debug + Send + Sync + 'static {
    /// An open file.
    type File: StorageFile;

    /// Creates `dir` and every missing directory above it (owner-only); an existing one is
    /// left as it is.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates the directory `dir`, whose parent exists, owner-only; an error
    /// ([`io::ErrorKind::AlreadyExists`]) when something is at that name.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether a file or directory is at `path`.
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Whether a directory is at `path`.
    fn is_dir(&self, path: &Path) -> bool;
    /// The files (not directories) directly in `dir`, in no particular order.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// Opens the existing file `path`.
    fn open(&self, path: &Path, access: Access) -> io::Result<Self::File>;
    /// Creates the file `path` for reading and writing, owner-only; an error
    /// ([`io::ErrorKind::AlreadyExists`]) when something is at that name.
    fn create_new(&self, path: &Path) -> io::Result<Self::File>;
    /// The whole content of the file `path`.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Removes the file `path`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Renames the file `from` to `to`, replacing what `to` names.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Gives the file `from` the second name `to`; an error ([`io::ErrorKind::AlreadyExists`])
    /// when something is at `to`, with no window between a check and the link.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the names in `dir` (files created, renamed or removed there) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Writes `bytes` as the whole file `path`, durably: a temporary file beside it, fsynced,
    /// renamed over `path`, and the directory fsynced, so that a crash leaves the old file or
    /// the new one, never a mix. A temporary file an interrupted write left is replaced.
    fn write_durably(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let temporary = temporary_for(path);
        let file = self.create_replacing(&temporary)?;
        file.write_all_at(bytes, 0)?;
        self.publish(file, &temporary, path)
    }

    /// Creates the temporary file `path` as [`Storage::create_new`] does, removing first what
    /// sits at that name (a file an interrupted write left, or a link planted there).
    fn create_replacing(&self, path: &Path) -> io::Result<Self::File> {
        match self.create_new(path) {
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                self.remove_file(path)?;
                self.create_new(path)
            }
            created => created,
        }
    }

    /// Ends a write made in `temporary` (`file`): fsyncs it, renames it to `path` and fsyncs
    /// the directory.
    fn publish(&self, file: Self::File, temporary: &Path, path: &Path) -> io::Result<()> {
        file.sync_all()?;
        drop(file);
        self.rename(temporary, path)?;
        self.sync_dir(parent_of(path))
    }

    /// Writes `bytes` as the new file `path`, durably, as [`Storage::write_durably`] does;
    /// an error ([`io::ErrorKind::AlreadyExists`]) when `path` exists, which is left as it is.
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let temporary = temporary_for(path);
        let file = self.create_replacing(&temporary)?;
        file.write_all_at(bytes, 0)?;
        self.publish_new(file, &temporary, path)
    }

    /// Ends a write made in `temporary` as [`Storage::publish`] does, except that an existing
    /// `path` is never replaced: the file is linked to its name (which fails when the name is
    /// taken) and the temporary name removed. A crash leaves no `path` or the whole file.
    fn publish_new(&self, file: Self::File, temporary: &Path, path: &Path) -> io::Result<()> {
        file.sync_all()?;
        drop(file);
        let linked = self.hard_link(temporary, path);
        let removed = self.remove_file(temporary);
        linked?;
        removed?;
        self.sync_dir(parent_of(path))
    }
}

/// A file opened through a [`Storage`]. Reads and writes take an offset (no cursor), so a
/// file can be shared by reference.
pub trait StorageFile: Debug + Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset` ([`io::ErrorKind::UnexpectedEof`] when the
    /// file ends first).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`, growing the file when they pass its end (the gap,
    /// if any, reads as zeros). Not durable until a sync. A full disk is
    /// [`io::ErrorKind::StorageFull`], and may leave part of `bytes` written.
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// The file's length in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Cuts the file to `len` bytes, or grows it with zeros. Not durable until a sync.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file's data (and its length) durable: fdatasync.
    fn sync_data(&self) -> io::Result<()>;
    /// Makes the file's data and metadata durable: fsync.
    fn sync_all(&self) -> io::Result<()>;
}
