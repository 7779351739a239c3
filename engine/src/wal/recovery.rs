//! The recovery scan: reads every segment in order, checks each record's checksums, index and
//! hash chain, cuts a torn tail and reports damage anywhere else.

use super::record::{self, Parsed};
use super::{Located, SEGMENT_SUFFIX, Segment, Wal, WalError, io_error};
use crate::entry::{EntryHash, EntryHeader, chain_hash};
use crate::ids::{EntryIndex, Term};
use crate::storage::{Access, Storage};
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

/// The outcome of scanning one segment.
enum Scanned {
    /// Read to its end; the bytes of a torn tail to cut off (0 when only zeros follow the
    /// last record).
    Whole(u64),
    /// A damaged record at this offset (valid records after it, or a readable header).
    Damaged { offset: usize, reason: String },
}

/// Segment files in `dir`, ordered by the first index in their names.
fn segment_files<S: Storage>(
    storage: &S,
    dir: &Path,
) -> Result<Vec<(EntryIndex, PathBuf)>, WalError> {
    let mut found = Vec::new();
    for path in storage.list(dir).map_err(io_error(dir))? {
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

/// A record that [`record::parse`] could not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unreadable {
    /// The bytes end before the record does.
    Incomplete,
    /// The bytes are not a valid record, for this reason.
    Damaged(&'static str),
}

/// Where a segment's scan stops at an unreadable record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// A torn tail: an append whose fsync never completed, so never acknowledged; cut.
    TornTail,
    /// Damage, for this reason: an entry that may have been acknowledged is lost.
    Damaged(&'static str),
}

/// The torn-write rule, for a record at `at` in `data` that could not be read, in the last
/// segment or not (`is_last`), with a repair allowed or not (`repairing`).
///
/// - A record whose header was never written (zeros from its start, or from a page boundary
///   inside it) with no readable header after it is a torn tail: an append over zeros writes
///   its header after its payload, so this append did not complete.
/// - When repairing, written bytes that do not make a record (the file long enough to hold
///   it) in the last segment are damage: a record that may have been acknowledged.
/// - Otherwise a record cut short, or damaged, with no valid record after it in the last
///   segment is a torn tail.
/// - Anything else is damage: a record cut short before later records, or damaged among them.
fn judge_unreadable(
    unreadable: Unreadable,
    data: &[u8],
    at: usize,
    (is_last, repairing): (bool, bool),
) -> Stop {
    let never_written =
        || record::header_unwritten(data, at) && headers_beyond(data, at).is_empty();
    let written = || data[at..].iter().any(|&b| b != 0);
    let nothing_valid_after = || record::next_valid(data, at).is_none();
    match unreadable {
        Unreadable::Damaged(_) if is_last && never_written() => Stop::TornTail,
        Unreadable::Damaged(reason) if repairing && is_last && written() => Stop::Damaged(reason),
        Unreadable::Incomplete | Unreadable::Damaged(_) if is_last && nothing_valid_after() => {
            Stop::TornTail
        }
        Unreadable::Incomplete => Stop::Damaged("record cut short before later records"),
        Unreadable::Damaged(reason) => Stop::Damaged(reason),
    }
}

/// Takes the whole record (`header`, `payload`) at `at..end` of `segment` into `wal`, or says
/// why it cannot follow the entries before it.
fn take_record<S: Storage>(
    wal: &mut Wal<S>,
    (header, payload): (EntryHeader, &[u8]),
    segment: usize,
    (at, end): (usize, usize),
) -> Result<(), &'static str> {
    let index = wal.last_index().next();
    assert_eq!(
        end - at,
        record::RECORD_HEADER_BYTES + payload.len(),
        "entry {}: a whole record is its header and its payload",
        header.index
    );
    if header.index != index {
        return Err("entry index out of sequence");
    }
    // The first entry of a log that starts after a snapshot has no known predecessor.
    let chained = wal.entries.is_empty() && index != EntryIndex(1)
        || chain_hash(&wal.last_hash(), &header, payload) == header.hash;
    if !chained {
        return Err("hash does not chain to the previous entry");
    }
    wal.max_commit = wal.max_commit.max(header.commit);
    wal.entries.push(Located {
        term: header.term,
        hash: header.hash,
        segment,
        offset: at as u64,
        record_bytes: (end - at) as u32,
    });
    Ok(())
}

/// A log with no entries yet, starting at `first_index`, with room for `segments`.
fn empty<S: Storage>(
    storage: S,
    dir: &Path,
    segments: usize,
    first_index: EntryIndex,
    access: Access,
) -> Wal<S> {
    Wal {
        storage,
        dir: dir.to_path_buf(),
        segments: Vec::with_capacity(segments),
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
        prepared: None,
    }
}

/// Scans the segments in `dir` without changing them: a torn tail is noted (cut by
/// [`super::Wal::settle`]), damage is noted (cut by [`super::Wal::cut_damage`]) when
/// `repairing`, an error otherwise. A missing directory is an empty log.
pub(super) fn scan<S: Storage>(
    storage: S,
    dir: &Path,
    repairing: bool,
    access: Access,
) -> Result<(Wal<S>, Recovery), WalError> {
    let files = match storage.exists(dir) {
        Ok(false) => Vec::new(),
        Ok(true) => segment_files(&storage, dir)?,
        Err(source) => {
            return Err(WalError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let first_index = files.first().map_or(EntryIndex(1), |(first, _)| *first);
    let mut wal = empty(storage, dir, files.len(), first_index, access);
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
                if !repairing {
                    return Err(WalError::Corruption {
                        index: wal.last_index().next(),
                        path: path.clone(),
                        offset: offset as u64,
                        reason,
                    });
                }
                damage = Some(note_damage(&mut wal, &files[n..], (offset, reason), gap)?);
                break;
            }
        }
    }
    assert_eq!(
        damage.is_some(),
        wal.pending_cut.is_some(),
        "damage found is cut after the repair, and only damage"
    );
    wal.check_invariants();
    let recovery = Recovery {
        entries: wal.entries.len() as u64,
        last_index: wal.last_index(),
        torn_tail_bytes: wal.torn_tail_bytes,
        segments: files.len(),
        damage,
    };
    Ok((wal, recovery))
}

/// Notes damage at `offset` of the first of `files` for a repair: what the records beyond it
/// say, and the cut that waits for the repair obligation (the later files, and the damaged
/// one too when it lies wholly beyond a `gap`).
fn note_damage<S: Storage>(
    wal: &mut Wal<S>,
    files: &[(EntryIndex, PathBuf)],
    (offset, reason): (usize, String),
    gap: bool,
) -> Result<Damage, WalError> {
    assert!(
        wal.pending_cut.is_none(),
        "a scan stops at the first damage it finds"
    );
    let path = &files[0].1;
    let mut later: Vec<PathBuf> = files[1..].iter().map(|(_, p)| p.clone()).collect();
    let (last, committed) = beyond_damage(&wal.storage, path, offset, &later)?;
    if gap {
        later.insert(0, path.clone());
    }
    wal.pending_cut = Some(Cut { later });
    Ok(Damage {
        // The first entry the damage costs: the one after the last read.
        index: wal.last_index().next(),
        path: path.clone(),
        offset: offset as u64,
        reason,
        last,
        committed,
    })
}

/// What the records found at or after a damage say: the last entry (index and term) whose
/// header holds, and the highest commit index those headers carry.
fn beyond_damage<S: Storage>(
    storage: &S,
    path: &Path,
    offset: usize,
    later: &[PathBuf],
) -> Result<(Option<(EntryIndex, Term)>, EntryIndex), WalError> {
    let read = |path: &Path| storage.read(path).map_err(io_error(path));
    let mut headers = headers_beyond(&read(path)?, offset);
    for path in later {
        headers.extend(headers_beyond(&read(path)?, 0));
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
/// damaged record ([`judge_unreadable`] says which an unreadable record is). Zeros alone after
/// the last record are no torn tail: they are space written ahead, and stay.
fn scan_segment<S: Storage>(
    wal: &mut Wal<S>,
    path: &Path,
    is_last: bool,
    repairing: bool,
) -> Result<Scanned, WalError> {
    let data = wal.storage.read(path).map_err(io_error(path))?;
    let segment = wal.segments.len();
    let mut at = 0;
    let mut damaged = None;
    while at < data.len() {
        let index = wal.last_index().next();
        let unreadable = match record::parse(&data, at) {
            Parsed::Record {
                header,
                payload,
                end,
            } => match take_record(wal, (header, &data[payload]), segment, (at, end)) {
                Ok(()) => {
                    at = end;
                    continue;
                }
                Err(reason) => {
                    damaged = Some(reason);
                    break;
                }
            },
            Parsed::Newer => {
                return Err(WalError::Newer {
                    index,
                    path: path.to_path_buf(),
                    offset: at as u64,
                });
            }
            Parsed::Incomplete => Unreadable::Incomplete,
            Parsed::Damaged(reason) => Unreadable::Damaged(reason),
        };
        if let Stop::Damaged(reason) = judge_unreadable(unreadable, &data, at, (is_last, repairing))
        {
            damaged = Some(reason);
        }
        break;
    }
    assert!(
        at <= data.len(),
        "{}: a scan stopped at byte {at} of {}",
        path.display(),
        data.len()
    );
    let file = wal.storage.open(path, wal.access).map_err(io_error(path))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the torn-write rule case by case: never-written bytes at the end of the last
    /// segment are a torn tail; written garbage there is damage when repairing and a torn
    /// tail otherwise; a record cut short, or damaged, before later segments is damage.
    #[test]
    fn the_torn_write_rule() {
        let zeros = vec![0u8; 4096];
        let garbage = vec![0x5au8; 4096];
        let damaged = Unreadable::Damaged("bad magic");
        let cut = Unreadable::Incomplete;
        let table = [
            // (what, bytes, unreadable, is_last, repairing, stop)
            ("zeros, last", &zeros, damaged, true, false, Stop::TornTail),
            (
                "zeros, last, repairing",
                &zeros,
                damaged,
                true,
                true,
                Stop::TornTail,
            ),
            (
                "zeros, not last",
                &zeros,
                damaged,
                false,
                false,
                Stop::Damaged("bad magic"),
            ),
            (
                "garbage, last, repairing",
                &garbage,
                damaged,
                true,
                true,
                Stop::Damaged("bad magic"),
            ),
            (
                "garbage, last",
                &garbage,
                damaged,
                true,
                false,
                Stop::TornTail,
            ),
            (
                "cut short, last",
                &garbage,
                cut,
                true,
                false,
                Stop::TornTail,
            ),
            (
                "cut short, not last",
                &garbage,
                cut,
                false,
                false,
                Stop::Damaged("record cut short before later records"),
            ),
        ];
        for (what, bytes, unreadable, is_last, repairing, stop) in table {
            assert_eq!(
                judge_unreadable(unreadable, bytes, 0, (is_last, repairing)),
                stop,
                "{what}"
            );
        }
    }
}
