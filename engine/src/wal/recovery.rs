//! The recovery scan: reads every segment in order, checks each record's checksums, index and
//! hash chain, cuts a torn tail and reports damage anywhere else.

use super::record::{self, Parsed};
use super::{Located, SEGMENT_SUFFIX, Segment, Wal, WalError, io_error};
use crate::entry::{EntryHash, EntryHeader, chain_hash};
use crate::ids::{EntryIndex, Term};
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
    /// Damage a repairing open found (a strict open fails instead).
    pub damage: Option<Damage>,
}

/// Damage in the log: entries from `index` on are lost to this replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The first entry that could not be read.
    pub index: EntryIndex,
    /// The segment holding it.
    pub path: PathBuf,
    /// Its offset there.
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
    /// The last entry found on disk at or after the damage (a record whose header checksum
    /// holds): the end of the log this replica may have acknowledged. `None` when no header
    /// beyond the damage could be read.
    pub last: Option<(EntryIndex, Term)>,
    /// The highest commit index those headers carry: the entries up to it were committed.
    pub committed: EntryIndex,
}

/// What [`super::Wal::cut_damage`] removes: the segments after the damaged one (which is cut
/// at the log's new end).
#[derive(Debug)]
pub(super) struct Cut {
    pub later: Vec<PathBuf>,
}

/// How a scan opens the segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// For reading and writing: the log can be settled, cut and appended to afterwards.
    ReadWrite,
    /// For reading only: nothing is ever written (`runner recover`).
    ReadOnly,
}

/// The outcome of scanning one segment.
enum Scanned {
    /// Read to its end; the bytes of a torn tail to cut off (0 when only zeros follow the
    /// last record).
    Whole(u64),
    /// A damaged record at this offset (valid records after it, or a readable header).
    Damaged { offset: usize, reason: String },
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

/// Scans the segments in `dir` without changing them: a torn tail is noted (cut by
/// [`super::Wal::settle`]), damage is noted (cut by [`super::Wal::cut_damage`]) when
/// `repairing`, an error otherwise. A missing directory is an empty log.
pub(super) fn scan(
    dir: &Path,
    repairing: bool,
    access: Access,
) -> Result<(Wal, Recovery), WalError> {
    let files = match dir.try_exists() {
        Ok(false) => Vec::new(),
        Ok(true) => segment_files(dir)?,
        Err(source) => {
            return Err(WalError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let first_index = files.first().map_or(EntryIndex(1), |(first, _)| *first);
    let mut wal = Wal {
        dir: dir.to_path_buf(),
        segments: Vec::with_capacity(files.len()),
        segments_removed: 0,
        first_index,
        entries: Vec::new(),
        base_hash: EntryHash::default(),
        buf: Vec::new(),
        segment_bytes_max: super::WAL_SEGMENT_BYTES_DEFAULT,
        pending_cut: None,
        torn_tail_bytes: 0,
        access,
        max_commit: EntryIndex::ZERO,
        written_bytes: 0,
        zero_ahead_bytes: 0,
    };
    let mut damage = None;
    for (n, (first, path)) in files.iter().enumerate() {
        let expected = wal.last_index().next();
        let gap = *first != expected;
        let found = if gap {
            Scanned::Damaged {
                offset: 0,
                reason: format!("segment starts at {first}, expected {expected}"),
            }
        } else {
            scan_segment(&mut wal, path, n + 1 == files.len(), repairing)?
        };
        match found {
            Scanned::Whole(torn) => wal.torn_tail_bytes += torn,
            Scanned::Damaged { offset, reason } => {
                // The first entry the damage costs: the one after the last read.
                let expected = wal.last_index().next();
                if !repairing {
                    return Err(WalError::Corruption {
                        index: expected,
                        path: path.clone(),
                        offset: offset as u64,
                        reason,
                    });
                }
                let later: Vec<PathBuf> = files[n + 1..].iter().map(|(_, p)| p.clone()).collect();
                let (last, committed) = beyond_damage(path, offset, &later)?;
                let mut later = later;
                if gap {
                    // The whole file lies beyond a gap: it goes with the later ones.
                    later.insert(0, path.clone());
                }
                damage = Some(Damage {
                    index: expected,
                    path: path.clone(),
                    offset: offset as u64,
                    reason,
                    last,
                    committed,
                });
                wal.pending_cut = Some(Cut { later });
                break;
            }
        }
    }
    let recovery = Recovery {
        entries: wal.entries.len() as u64,
        last_index: wal.last_index(),
        torn_tail_bytes: wal.torn_tail_bytes,
        segments: files.len(),
        damage,
    };
    Ok((wal, recovery))
}

/// What the records found at or after a damage say: the last entry (index and term) whose
/// header holds, and the highest commit index those headers carry.
fn beyond_damage(
    path: &Path,
    offset: usize,
    later: &[PathBuf],
) -> Result<(Option<(EntryIndex, Term)>, EntryIndex), WalError> {
    let mut headers = headers_beyond(&fs::read(path).map_err(io_error(path))?, offset);
    for path in later {
        headers.extend(headers_beyond(&fs::read(path).map_err(io_error(path))?, 0));
    }
    let last = headers
        .iter()
        .max_by_key(|h| h.index)
        .map(|h| (h.index, h.term));
    let committed = headers
        .iter()
        .map(|h| h.commit)
        .max()
        .unwrap_or(EntryIndex::ZERO);
    Ok((last, committed))
}

/// The headers of the records at or after `from` in `data` whose header checksum holds
/// (their payloads may be damaged).
fn headers_beyond(data: &[u8], from: usize) -> Vec<EntryHeader> {
    let magic = record::RECORD_MAGIC.to_le_bytes();
    (from..data.len().saturating_sub(3))
        .filter(|&i| data[i..i + 4] == magic)
        .filter_map(|i| record::header_at(data, i))
        .collect()
}

/// Reads one segment into `wal`: to its end (the bytes of a torn tail cut off), or to a
/// damaged record. A damaged last record counts as damage when `repairing` (it may be an
/// acknowledged entry), as a torn tail otherwise; a record cut short by the end of the file,
/// or one whose header is zeros from its start or from a page boundary inside it on (never
/// written, or cut short at a page), with no readable header after it, is a torn tail either
/// way (its fsync never completed, so it was never acknowledged). Zeros alone after the last
/// record are no torn tail: they are space written ahead, and stay.
fn scan_segment(
    wal: &mut Wal,
    path: &Path,
    is_last: bool,
    repairing: bool,
) -> Result<Scanned, WalError> {
    let data = fs::read(path).map_err(io_error(path))?;
    let segment = wal.segments.len();
    let mut at = 0;
    let mut damaged = None;
    while at < data.len() {
        let index = wal.last_index().next();
        match record::parse(&data, at) {
            Parsed::Record {
                header,
                payload,
                end,
            } => {
                if header.index != index {
                    damaged = Some("entry index out of sequence");
                    break;
                }
                // The first entry of a log that starts after a snapshot has no known predecessor.
                let chained = wal.entries.is_empty() && index != EntryIndex(1)
                    || chain_hash(&wal.last_hash(), &header, &data[payload]) == header.hash;
                if !chained {
                    damaged = Some("hash does not chain to the previous entry");
                    break;
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
            Parsed::Newer => {
                return Err(WalError::Newer {
                    index,
                    path: path.to_path_buf(),
                    offset: at as u64,
                });
            }
            Parsed::Damaged(_)
                if is_last
                    && record::header_unwritten(&data, at)
                    && headers_beyond(&data, at).is_empty() =>
            {
                // A record whose header was never written (or only up to a page boundary): an
                // append over zeros writes its header after its payload, so this append did
                // not complete and was never acknowledged, whatever of its payload reached
                // the file. A readable header further on (a valid record has one) makes it
                // damage instead.
                break;
            }
            Parsed::Damaged(reason)
                if repairing && is_last && data[at..].iter().any(|&b| b != 0) =>
            {
                // Written bytes that do not make a record, with the file long enough to hold
                // it: a record that may have been acknowledged, then damaged. (A record cut
                // short by the end of the file, or bytes never written, is a torn write.)
                damaged = Some(reason);
                break;
            }
            Parsed::Incomplete | Parsed::Damaged(_)
                if is_last && record::next_valid(&data, at).is_none() =>
            {
                break;
            }
            Parsed::Incomplete => {
                damaged = Some("record cut short before later records");
                break;
            }
            Parsed::Damaged(reason) => {
                damaged = Some(reason);
                break;
            }
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .write(wal.access == Access::ReadWrite)
        .open(path)
        .map_err(io_error(path))?;
    // The bytes past `at` stay until the caller cuts them: a torn tail in `Wal::settle`, the
    // damaged part in `Wal::cut_damage` (after the repair obligation is durable).
    wal.segments.push(Segment {
        path: path.to_path_buf(),
        file,
        bytes: at as u64,
        len: data.len() as u64,
    });
    if let Some(reason) = damaged {
        return Ok(Scanned::Damaged {
            offset: at,
            reason: reason.to_string(),
        });
    }
    // Zeros alone after the last record are space written ahead, not a torn tail: they stay.
    // Anything written there is cut, with the zeros after it.
    let torn = match data[at..].iter().any(|&b| b != 0) {
        true => data.len() - at,
        false => 0,
    };
    Ok(Scanned::Whole(torn as u64))
}
