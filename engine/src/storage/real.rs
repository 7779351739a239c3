//! [`Storage`] on the real file system: every file and directory created owner-only
//! ([`super::files`]), every read and write positioned (`pread`/`pwrite`).

use super::files::{self, DIR_MODE_OWNER_ONLY};
use super::{Access, Storage, StorageFile};
use std::fs::{self, DirBuilder, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};

/// The real file system.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Files;

impl Storage for Files {
    type File = File;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE_OWNER_ONLY)
            .create(dir)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        DirBuilder::new().mode(DIR_MODE_OWNER_ONLY).create(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut found = Vec::new();
        for item in fs::read_dir(dir)? {
            let item = item?;
            if !item.file_type()?.is_dir() {
                found.push(item.path());
            }
        }
        Ok(found)
    }

    fn open(&self, path: &Path, access: Access) -> io::Result<File> {
        fs::OpenOptions::new()
            .read(true)
            .write(access == Access::ReadWrite)
            .open(path)
    }

    fn create_new(&self, path: &Path) -> io::Result<File> {
        // O_EXCL: never follows a link planted at the name.
        files::owner_only()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

impl StorageFile for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, offset)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }
}
