//! A minimal write-ahead log: one file of [`WAL_FILE_BYTES`] written with zeros once, then
//! records written at increasing offsets (back to the start when the next one would not fit),
//! each made durable with fdatasync (`File::sync_data`) before `append` returns. Writing over
//! blocks that already exist keeps the file's size and block map unchanged, so the sync has
//! only the data to flush.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// The log file's size, in bytes.
pub const WAL_FILE_BYTES: u64 = 64 << 20;
/// Bytes of zeros written at a time when the file is made.
const ZERO_CHUNK_BYTES: usize = 1 << 20;

const _: () = assert!(WAL_FILE_BYTES.is_multiple_of(ZERO_CHUNK_BYTES as u64));
const _: () = assert!(
    (crate::wire::FRAME_HEADER_BYTES + crate::wire::FRAME_BODY_BYTES_MAX) as u64 <= WAL_FILE_BYTES
);

/// The log of one node; its file is removed when it is dropped.
pub struct Wal {
    file: File,
    path: PathBuf,
    offset: u64,
}

impl Wal {
    /// Makes the log's file at `path` (replacing any), written whole with zeros and synced.
    pub fn create(path: PathBuf) -> std::io::Result<Wal> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let zeros = vec![0; ZERO_CHUNK_BYTES];
        for _ in 0..WAL_FILE_BYTES / ZERO_CHUNK_BYTES as u64 {
            file.write_all(&zeros)?;
        }
        file.sync_all()?;
        Ok(Wal {
            file,
            path,
            offset: 0,
        })
    }

    /// Writes `record` after the previous one and returns once it is durable.
    pub fn append(&mut self, record: &[u8]) -> std::io::Result<()> {
        let bytes = record.len() as u64;
        assert!(bytes <= WAL_FILE_BYTES, "a record larger than the log");
        if self.offset + bytes > WAL_FILE_BYTES {
            self.offset = 0;
        }
        self.file.write_all_at(record, self.offset)?;
        self.file.sync_data()?;
        self.offset += bytes;
        Ok(())
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // The probe's files are scratch: a failure to remove one leaves 64 MiB behind, no more.
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves records land one after another, wrap to the start, and the file goes on drop.
    #[test]
    fn records_follow_each_other_and_wrap() {
        let path = std::env::temp_dir().join(format!("floor-wal-test-{}", std::process::id()));
        let mut wal = Wal::create(path.clone()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), WAL_FILE_BYTES);
        wal.append(b"first").unwrap();
        wal.append(b"second").unwrap();
        assert_eq!(wal.offset, 11);
        let mut read = [0; 11];
        wal.file.read_exact_at(&mut read, 0).unwrap();
        assert_eq!(&read, b"firstsecond");
        wal.offset = WAL_FILE_BYTES - 3;
        wal.append(b"wraps").unwrap();
        assert_eq!(wal.offset, 5);
        drop(wal);
        assert!(!path.exists());
    }
}
