//! The recovery scan: reads every segment in order, checks each record's checksums, index and
//! hash chain, cuts a torn tail and reports damage anywhere else.

use super::record::{self, Parsed};
use super::{Located, SEGMENT_SUFFIX, Segment, Wal, WalError, io_error};
use crate::entry::{EntryHash, chain_hash};
use crate::ids::EntryIndex;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

/// What the recovery scan found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Whole, valid entries in the log.
    pub entries: u64,
    /// The last of them (zero when the log is empty).
    pub last_index: EntryIndex,
    /// Bytes of a torn tail that were cut off (an append the crash interrupted).
    pub torn_tail_bytes: u64,
    /// Segment files read.
    pub segments: usize,
}

/// Segment files in `dir`, ordered by the first index in their names.
fn segment_files(dir: &Path) -> Result<Vec<(EntryIndex, PathBuf)>, WalError> {
    let mut found = Vec::new();
    for item in fs::read_dir(dir).map_err(io_error(dir))? {
        let path = item.map_err(io_error(dir))?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(first) = name
            .strip_suffix(SEGMENT_SUFFIX)
            .and_then(|s| s.parse().ok())
        {
            found.push((EntryIndex(first), path));
        }
    }
    found.sort_unstable();
    Ok(found)
}

pub(super) fn scan(dir: &Path) -> Result<(Wal, Recovery), WalError> {
    let files = segment_files(dir)?;
    let first_index = files.first().map_or(EntryIndex(1), |(first, _)| *first);
    let mut wal = Wal {
        dir: dir.to_path_buf(),
        segments: Vec::with_capacity(files.len()),
        segments_removed: 0,
        first_index,
        entries: Vec::new(),
        base_hash: EntryHash::default(),
        buf: Vec::new(),
        segment_bytes_max: super::WAL_SEGMENT_BYTES_MAX,
        max_commit: EntryIndex::ZERO,
    };
    let mut torn_tail_bytes = 0;
    for (n, (first, path)) in files.iter().enumerate() {
        if *first != wal.last_index().next() {
            return Err(WalError::Corruption {
                index: wal.last_index().next(),
                path: path.clone(),
                offset: 0,
                reason: format!(
                    "segment starts at {first}, expected {}",
                    wal.last_index().next()
                ),
            });
        }
        let is_last = n + 1 == files.len();
        torn_tail_bytes += scan_segment(&mut wal, path, is_last)?;
    }
    super::sync_dir(dir)?;
    let recovery = Recovery {
        entries: wal.entries.len() as u64,
        last_index: wal.last_index(),
        torn_tail_bytes,
        segments: files.len(),
    };
    Ok((wal, recovery))
}

/// Reads one segment into `wal`; returns the bytes of torn tail cut from it.
fn scan_segment(wal: &mut Wal, path: &Path, is_last: bool) -> Result<u64, WalError> {
    let data = fs::read(path).map_err(io_error(path))?;
    let segment = wal.segments.len();
    let mut at = 0;
    while at < data.len() {
        let index = wal.last_index().next();
        let corruption = |reason: &str| WalError::Corruption {
            index,
            path: path.to_path_buf(),
            offset: at as u64,
            reason: reason.to_string(),
        };
        match record::parse(&data, at) {
            Parsed::Record {
                header,
                payload,
                end,
            } => {
                if header.index != index {
                    return Err(corruption("entry index out of sequence"));
                }
                // The first entry of a log that starts after a snapshot has no known predecessor.
                let chained = wal.entries.is_empty() && index != EntryIndex(1)
                    || chain_hash(&wal.last_hash(), &header, &data[payload]) == header.hash;
                if !chained {
                    return Err(corruption("hash does not chain to the previous entry"));
                }
                wal.max_commit = wal.max_commit.max(header.commit);
                wal.entries.push(Located {
                    term: header.term,
                    hash: header.hash,
                    segment,
                    offset: at as u64,
                    record_bytes: (end - at) as u32,
                });
                at = end;
            }
            Parsed::Incomplete | Parsed::Damaged(_)
                if is_last && record::next_valid(&data, at).is_none() =>
            {
                break;
            }
            // Deliberately broken build: any damage is taken for a torn tail and cut.
            Parsed::Incomplete | Parsed::Damaged(_)
                if cfg!(feature = "mutation-truncate-on-checksum") =>
            {
                break;
            }
            Parsed::Incomplete => return Err(corruption("record cut short before later records")),
            Parsed::Damaged(reason) => return Err(corruption(reason)),
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_error(path))?;
    let torn = (data.len() - at) as u64;
    if torn > 0 {
        file.set_len(at as u64).map_err(io_error(path))?;
    }
    // What a killed process wrote may sit in the page cache unsynced; the node will count every
    // recovered entry as durable, so make it so before saying it.
    file.sync_all().map_err(io_error(path))?;
    wal.segments.push(Segment {
        path: path.to_path_buf(),
        file,
        bytes: at as u64,
    });
    Ok(torn)
}
