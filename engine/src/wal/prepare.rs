//! Segment files made ahead of need. On a disk, an fdatasync after an append that grew its
//! file also commits the file system's journal (the new size and blocks). Zeros written
//! ahead ([`super::Wal::set_zero_ahead`]) make most appends overwrites, but the append that
//! writes them pays that commit on the commit path: on ext4 one fdatasync in about thirty
//! took about 2 ms against 0.3 ms, and with three nodes that was the p99 of every request.
//! A segment file written full of zeros and made durable by another thread, then renamed
//! into place when the log starts a segment, leaves no growth on the commit path: the
//! segment's appends all overwrite zeros, and only the rename's directory fsync remains,
//! once per segment, as the creation's did before.

use super::{Segment, WalError, io_error, write_error};
use crate::storage::{Storage, StorageFile};
use std::path::{Path, PathBuf};

/// The name of a segment file while it is prepared, in the log's directory. Only
/// [`prepare_segment`] writes a file of this name, and only zeros: one found there (a crash
/// while preparing, or a node stopped with one ready) holds nothing of the log, and the next
/// preparation replaces it. A scan of the log does not read it (it is not named for an
/// entry).
pub const PREPARED_SEGMENT_NAME: &str = "next-segment.zeros";

/// A segment file of zeros, durable, waiting under [`PREPARED_SEGMENT_NAME`] to become the
/// log's next segment.
#[derive(Debug)]
pub struct PreparedSegment<F> {
    pub(super) path: PathBuf,
    pub(super) file: F,
    /// Its length: the segment size it was made for.
    pub(super) len: u64,
}

impl<F> PreparedSegment<F> {
    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no bytes (never: [`prepare_segment`] refuses a size of 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Writes a segment file of `bytes` zeros in `dir` under [`PREPARED_SEGMENT_NAME`] (replacing
/// one left there) and fdatasyncs it, so that its length and blocks are durable before the
/// log writes a record in it. One fdatasync for the whole file: syncing it in pieces (1 MiB,
/// 256 KiB), or starting each piece's write-back with pauses between them, spread the
/// preparation's journal commits and writes over more of the log's fsyncs and measured no
/// better (`notes/benchmarks.md`). A failure (a full disk among others) removes the partial
/// file: it only ever holds zeros.
pub fn prepare_segment<S: Storage>(
    storage: &S,
    dir: &Path,
    bytes: u64,
) -> Result<PreparedSegment<S::File>, WalError> {
    assert!(bytes > 0, "a prepared segment has room for records");
    let path = dir.join(PREPARED_SEGMENT_NAME);
    let file = storage
        .create_replacing(&path)
        .map_err(write_error(&path))?;
    let mut segment = Segment {
        path,
        file,
        bytes: 0,
        len: 0,
    };
    let written = segment.write_zeros(bytes).and_then(|()| {
        let synced = segment.file.sync_data();
        synced.map_err(io_error(&segment.path))
    });
    if let Err(error) = written {
        drop(segment.file);
        let _ = storage.remove_file(&segment.path);
        return Err(error);
    }
    assert_eq!(
        segment.len, bytes,
        "a prepared segment is zeros to its size"
    );
    Ok(PreparedSegment {
        path: segment.path,
        file: segment.file,
        len: segment.len,
    })
}
