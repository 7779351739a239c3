//! Files that hold state, secrets or backups: created for their owner alone, and written
//! durably. Every directory the engine creates is [`DIR_MODE_OWNER_ONLY`] and every file
//! [`FILE_MODE_OWNER_ONLY`] (the process's umask can only narrow them), so that no other
//! local user reads a balance, a session or a secret. A whole file is written by one sequence
//! ([`write_durably`]): a temporary file beside it, fsynced, renamed over the old one, and the
//! directory fsynced, so that a crash leaves the old file or the new one, never a mix.

use crate::storage::{Files, Storage};
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Permission bits of every file the engine creates: read and write for the owner only.
pub const FILE_MODE_OWNER_ONLY: u32 = 0o600;
/// Permission bits of every directory the engine creates: the owner only.
pub const DIR_MODE_OWNER_ONLY: u32 = 0o700;
/// The permission bits that give the group or others any access.
pub const MODE_BITS_OTHERS: u32 = 0o077;
/// What a temporary file's name adds to the name of the file it will replace.
pub const TEMPORARY_SUFFIX: &str = ".tmp";

/// A file operation that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct FileError {
    /// The file or directory.
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

/// A closure that names `path` in an error.
pub fn at(path: &Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
    move |source| FileError {
        path: path.to_path_buf(),
        source,
    }
}

/// Options that create a file (when it is missing) readable by its owner only.
pub fn owner_only() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE_OWNER_ONLY);
    options
}

/// Creates the directory `path` (its parent exists), owner-only.
pub fn create_dir(path: &Path) -> Result<(), FileError> {
    Files.create_dir(path).map_err(at(path))
}

/// Creates `path` and every missing directory above it, each owner-only; an existing one is
/// left as it is.
pub fn create_dir_all(path: &Path) -> Result<(), FileError> {
    Files.create_dir_all(path).map_err(at(path))
}

/// Makes the entries of directory `dir` (a file created, renamed or removed) durable.
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    Files.sync_dir(dir).map_err(at(dir))
}

/// The directory that holds `path` (`.` for a bare name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        Some(_) | None => Path::new("."),
    }
}

/// The temporary file that [`write_durably`] writes before it replaces `path`.
pub fn temporary_for(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(TEMPORARY_SUFFIX);
    parent_of(path).join(name)
}

/// Writes `bytes` as the whole file `path`, durably and owner-only: a temporary file beside
/// it, fsynced, renamed over `path`, and the directory fsynced.
/// The sequence is [`Storage::write_durably`]'s, the one the simulator's disk runs too.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    Files.write_durably(path, bytes).map_err(at(path))
}

/// Writes `bytes` as the new file `path`, durably and owner-only, as [`write_durably`] does;
/// an error when `path` exists. The sequence is [`Storage::write_new`]'s.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    Files.write_new(path, bytes).map_err(at(path))
}

/// The permission bits of `path` when they give the group or others any access (`None`
/// when they give none, or `path` cannot be read).
pub fn open_to_others(path: &Path) -> Option<u32> {
    let mode = fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & MODE_BITS_OTHERS != 0).then_some(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// Proves files and directories are created owner-only whatever the umask allows, that a
    /// file an earlier build left world-readable is narrowed when it is written again, and
    /// that a durable write leaves no temporary file.
    #[test]
    fn everything_created_is_the_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        create_dir_all(&nested).unwrap();
        assert_eq!(mode(&dir.path().join("a")), DIR_MODE_OWNER_ONLY);
        assert_eq!(mode(&nested), DIR_MODE_OWNER_ONLY);
        let single = dir.path().join("c");
        create_dir(&single).unwrap();
        assert_eq!(mode(&single), DIR_MODE_OWNER_ONLY);
        let path = nested.join("state");
        write_durably(&path, b"balances").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"balances");
        assert_eq!(mode(&path), FILE_MODE_OWNER_ONLY);
        assert!(!temporary_for(&path).exists());
        let old = nested.join("old");
        fs::write(&old, b"x").unwrap();
        fs::set_permissions(&old, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(open_to_others(&old), Some(0o644));
        write_durably(&old, b"y").unwrap();
        assert_eq!(mode(&old), FILE_MODE_OWNER_ONLY, "replaced, not reopened");
        assert_eq!(open_to_others(&old), None);
        fs::set_permissions(&single, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(open_to_others(&single), Some(0o755));
    }

    /// Proves a durable write never writes through a link planted where its temporary file
    /// goes (a shared directory, a user-chosen `--out`): the link is replaced, its target
    /// untouched; and that a file left there by an interrupted write is replaced too.
    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("someone else's file");
        fs::write(&target, b"theirs").unwrap();
        let path = dir.path().join("client.toml");
        std::os::unix::fs::symlink(&target, temporary_for(&path)).unwrap();
        write_durably(&path, b"the client secret").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"theirs");
        assert_eq!(fs::read(&path).unwrap(), b"the client secret");
        fs::write(temporary_for(&path), b"left by a crash").unwrap();
        write_durably(&path, b"again").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"again");
        let exclusive = dir.path().join("backup");
        fs::write(&exclusive, b"an earlier backup").unwrap();
        let refused = write_new(&exclusive, b"a second backup").unwrap_err();
        assert_eq!(refused.source.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&exclusive).unwrap(), b"an earlier backup");
        assert!(!temporary_for(&exclusive).exists());
    }

    /// Proves a write that replaces a file leaves the new bytes whole, and that a temporary
    /// file is named beside its target, for a bare name too.
    #[test]
    fn a_durable_write_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mode");
        write_durably(&path, b"verify\n").unwrap();
        write_durably(&path, b"performance\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"performance\n");
        assert_eq!(temporary_for(Path::new("x")), Path::new("./x.tmp"));
        assert_eq!(temporary_for(&path), dir.path().join("mode.tmp"));
        let missing = dir.path().join("no/such/dir/file");
        let error = write_durably(&missing, b"").unwrap_err();
        assert_eq!(
            error.path, missing,
            "the error names the file the caller asked for"
        );
    }
}
