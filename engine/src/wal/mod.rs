//! The write-ahead log: entries appended to segment files and fdatasynced before they are
//! reported durable, with a recovery scan that cuts a torn tail and reports damage in the middle.

pub(crate) mod executor;
mod invariants;
mod prepare;
mod record;
mod recovery;

pub use crate::storage::Access;
pub use prepare::{PREPARED_SEGMENT_NAME, PreparedSegment, prepare_segment};
pub use recovery::{Damage, Recovery};

use crate::entry::{ENTRY_PAYLOAD_BYTES_MAX, Entry, EntryHash, chain_hash};
use crate::ids::{EntryIndex, Term};
use crate::storage::{Files, IoFault, Storage, StorageFile};
use bytes::Bytes;
use std::io;
use std::path::{Path, PathBuf};

/// The largest segment size a node may be configured with (a segment is closed and a new one
/// started once it holds its configured size).
pub const WAL_SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The segment size by default. Compaction drops whole segments only, and a restart scans
/// every byte the WAL holds (checksums and hash chain): with 64 MiB segments a node of
/// `runner chaos` rescanned up to 50 MB of log that its snapshot covered, 250 ms of a restart
/// on an idle machine and twice that under load. A new segment costs a file creation and a
/// directory fsync, a few per second at full speed.
pub const WAL_SEGMENT_BYTES_DEFAULT: u64 = 8 * 1024 * 1024;
/// The smallest segment size a node may be configured with.
pub const WAL_SEGMENT_BYTES_MIN: u64 = 4096;
/// Suffix of segment file names; the stem is the first index the segment holds.
const SEGMENT_SUFFIX: &str = ".wal";
/// Bytes of zeros a WAL on a disk writes ahead of its appends (see [`Wal::set_zero_ahead`]).
/// On ext4 an fdatasync after an append that grows the file also commits the file system's
/// journal (the new size and blocks): 187-230 us against 120-130 us for one that overwrites
/// written blocks, and the three nodes' commits queue behind each other. With 256 KiB ahead
/// one append in about sixteen (at 16 KiB entries) pays for the growth; 128 KiB to 512 KiB
/// measured alike, 1-4 MiB worse at p99 (`notes/benchmarks.md`, 2026-12-04 14:30-15:40).
pub const WAL_ZERO_AHEAD_BYTES: u64 = 256 * 1024;
/// The zeros written at a time.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// A WAL failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    /// The file system refused an operation.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A damaged entry with valid entries after it: never dropped silently.
    #[error("corruption at entry {index} ({path}, offset {offset}): {reason}")]
    Corruption {
        /// The first entry that could not be read.
        index: EntryIndex,
        /// The segment holding it.
        path: PathBuf,
        /// Its offset in the segment.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// An append out of order or not chained to the last entry: a bug in the caller.
    #[error("append of entry {got} refused: expected index {expected} chained to the last entry")]
    Unchained {
        /// The index expected next.
        expected: EntryIndex,
        /// The index offered.
        got: EntryIndex,
    },
    /// A read of an entry the log does not hold.
    #[error("entry {0} is not in the log")]
    Missing(EntryIndex),
    /// An intact entry this build cannot read, written by a newer build: the log is left as
    /// it is (it is not damage), and the node must run a build that reads it.
    #[error(
        "entry {index} ({path}, offset {offset}) is intact but of a format this build does not \
         read: it was written by a newer build; run that build (nothing was changed)"
    )]
    Newer {
        /// The entry.
        index: EntryIndex,
        /// The segment holding it.
        path: PathBuf,
        /// Its offset in the segment.
        offset: u64,
    },
    /// A write found the file system full (ENOSPC) or over a quota (EDQUOT): the same write
    /// can succeed once space returns.
    #[error("{path}: {source}")]
    Full {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

impl WalError {
    /// True when a write found the file system out of space (ENOSPC) or over a quota
    /// (EDQUOT): the write can succeed once space returns. Only a write is ever that; a failed
    /// fsync, truncation or directory sync is an [`WalError::Io`] and never retried (what a
    /// failed fsync left in the page cache is unknown).
    pub fn is_storage_full(&self) -> bool {
        match self {
            WalError::Full { .. } => true,
            WalError::Io { .. }
            | WalError::Corruption { .. }
            | WalError::Unchained { .. }
            | WalError::Missing(_)
            | WalError::Newer { .. } => false,
        }
    }
}

impl From<&WalError> for IoFault {
    fn from(error: &WalError) -> Self {
        let kind = match error {
            WalError::Io { source, .. } | WalError::Full { source, .. } => Some(source.kind()),
            WalError::Corruption { .. }
            | WalError::Unchained { .. }
            | WalError::Missing(_)
            | WalError::Newer { .. } => None,
        };
        IoFault::new(kind, error)
    }
}

/// The error of a write to `path`: [`WalError::Full`] when the file system has no room.
fn write_error(path: &Path) -> impl FnOnce(io::Error) -> WalError + '_ {
    move |source| {
        let path = path.to_path_buf();
        let kind = source.kind();
        if kind == io::ErrorKind::StorageFull || kind == io::ErrorKind::QuotaExceeded {
            WalError::Full { path, source }
        } else {
            WalError::Io { path, source }
        }
    }
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where one entry lives, with the facts consensus asks of it without reading the disk.
#[derive(Clone, Copy, Debug)]
struct Located {
    term: Term,
    hash: EntryHash,
    /// Number of the segment (its position in `Wal::segments` plus `Wal::segments_removed`).
    segment: usize,
    offset: u64,
    record_bytes: u32,
}

#[derive(Debug)]
struct Segment<F> {
    path: PathBuf,
    file: F,
    /// Bytes of whole records: where the next record goes.
    bytes: u64,
    /// The file's length: `bytes` plus zeros written ahead (only the last segment has them).
    len: u64,
}

/// The write-ahead log of one node, on the real file system or (in the simulator) on a
/// simulated disk.
pub struct Wal<S: Storage = Files> {
    storage: S,
    dir: PathBuf,
    segments: Vec<Segment<S::File>>,
    /// Segments removed from the front so far (log compaction).
    segments_removed: usize,
    /// Index of `entries[0]`.
    first_index: EntryIndex,
    entries: Vec<Located>,
    /// Hash of the entry before `first_index` (zero for the start of the log).
    base_hash: EntryHash,
    /// Record buffer reused by appends.
    buf: Vec<u8>,
    /// A segment is closed once it holds this many bytes.
    segment_bytes_max: u64,
    /// Damage found by a repairing open, not yet cut off the files (see [`Wal::cut_damage`]).
    pending_cut: Option<recovery::Cut>,
    /// Bytes of a torn tail after the last segment's last whole record, not yet cut off (see
    /// [`Wal::settle`]).
    torn_tail_bytes: u64,
    /// Whether the segments were opened for writing.
    access: Access,
    /// The highest commit index any entry declared (entries up to it are committed).
    max_commit: EntryIndex,
    /// Bytes of records written since the log was opened.
    written_bytes: u64,
    /// Zeros to write ahead of the appends (0: none, the file grows with each append).
    zero_ahead_bytes: u64,
    /// A segment file of zeros to become the next segment (see [`prepare_segment`]).
    prepared: Option<PreparedSegment<S::File>>,
}

impl Wal<Files> {
    /// Opens the log in `dir` (creating it if needed) and scans it: a torn tail is cut back to
    /// the last whole entry; damage before the tail is an error naming the entry's index.
    pub fn open(dir: &Path) -> Result<(Wal, Recovery), WalError> {
        Wal::open_with(dir, WAL_SEGMENT_BYTES_DEFAULT)
    }

    /// Opens the log with segments of at most `segment_bytes_max` (tests use small ones).
    pub fn open_with(dir: &Path, segment_bytes_max: u64) -> Result<(Wal, Recovery), WalError> {
        Wal::open_in(Files, dir, segment_bytes_max)
    }

    /// Opens the log as [`Wal::open_with`] does, except that damage is not an error: the log
    /// ends before the first damaged entry, and [`Recovery::damage`] says where it was and
    /// which entry was the last found beyond it (the log the replica may have acknowledged).
    /// The damaged part stays on disk until [`Wal::cut_damage`]: persist what must survive
    /// the cut first (the repair obligation), then cut.
    pub fn open_repairing(dir: &Path, segment_bytes_max: u64) -> Result<(Wal, Recovery), WalError> {
        Wal::open_repairing_in(Files, dir, segment_bytes_max)
    }

    /// Scans the log as [`Wal::open_repairing`] does but changes nothing on disk: a torn tail
    /// stays until [`Wal::settle`], damage until [`Wal::cut_damage`]. With
    /// [`Access::ReadOnly`] the files are opened for reading only and the log can only be
    /// read. A missing directory is an empty log (created by [`Wal::settle`]).
    pub fn scan_repairing(
        dir: &Path,
        segment_bytes_max: u64,
        access: Access,
    ) -> Result<(Wal, Recovery), WalError> {
        Wal::scan_repairing_in(Files, dir, segment_bytes_max, access)
    }
}

impl<S: Storage> Wal<S> {
    /// Checks every invariant of the log's index (entries contiguous, each inside its
    /// segment, segments in order); panics naming the first one broken. The simulator calls
    /// it every few events, the node's WAL in debug builds.
    pub fn check_invariants(&self) {
        self.check_index();
    }

    /// [`Wal::check_invariants`] for the end of the last segment only, where an event appends
    /// or cuts: the simulator calls it after every event, a release node's WAL thread after
    /// every batch.
    pub fn check_recent_invariants(&self) {
        self.check_last_segment();
    }

    /// [`Wal::open_with`] on `storage`.
    pub fn open_in(
        storage: S,
        dir: &Path,
        segment_bytes_max: u64,
    ) -> Result<(Wal<S>, Recovery), WalError> {
        storage.create_dir_all(dir).map_err(io_error(dir))?;
        let (mut wal, recovery) = recovery::scan(storage, dir, false, Access::ReadWrite)?;
        wal.segment_bytes_max = segment_bytes_max;
        wal.settle()?;
        Ok((wal, recovery))
    }

    /// [`Wal::open_repairing`] on `storage`.
    pub fn open_repairing_in(
        storage: S,
        dir: &Path,
        segment_bytes_max: u64,
    ) -> Result<(Wal<S>, Recovery), WalError> {
        storage.create_dir_all(dir).map_err(io_error(dir))?;
        let access = Access::ReadWrite;
        let (mut wal, recovery) = Wal::scan_repairing_in(storage, dir, segment_bytes_max, access)?;
        wal.settle()?;
        Ok((wal, recovery))
    }

    /// [`Wal::scan_repairing`] on `storage`.
    pub fn scan_repairing_in(
        storage: S,
        dir: &Path,
        segment_bytes_max: u64,
        access: Access,
    ) -> Result<(Wal<S>, Recovery), WalError> {
        let (mut wal, recovery) = recovery::scan(storage, dir, true, access)?;
        wal.segment_bytes_max = segment_bytes_max;
        Ok((wal, recovery))
    }

    /// The storage the log is on.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Makes the scanned log the durable log: cuts a torn tail (an append that never
    /// completed, so never acknowledged) and fsyncs every segment and the directory (what a
    /// killed process wrote may sit in the page cache unsynced; the node will count every
    /// recovered entry as durable, so make it so before saying it).
    pub fn settle(&mut self) -> Result<(), WalError> {
        self.assert_writable();
        if !self.storage.is_dir(&self.dir) {
            // A new log's directory, made durable in its parent.
            let created = self.storage.create_dir_all(&self.dir);
            created.map_err(io_error(&self.dir))?;
            if let Some(parent) = self.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(&self.storage, parent)?;
            }
        }
        if self.torn_tail_bytes > 0 {
            let segment = self
                .segments
                .last_mut()
                .expect("a torn tail lies in a segment");
            segment
                .file
                .set_len(segment.bytes)
                .map_err(io_error(&segment.path))?;
            segment.len = segment.bytes;
            self.torn_tail_bytes = 0;
        }
        for segment in &self.segments {
            segment.file.sync_all().map_err(io_error(&segment.path))?;
        }
        self.remove_leftover_prepared()?;
        sync_dir(&self.storage, &self.dir)
    }

    /// Makes each append that would pass the end of the last segment's file first write
    /// `bytes` of zeros past it (at most to the segment's size), so that later appends
    /// overwrite written blocks instead of growing the file. Worth it on a disk, where an
    /// fdatasync that must also make a new file size durable commits the file system's
    /// journal; not in memory (tmpfs), where the zeros are one more copy. 0 turns it off. The
    /// zeros are not part of the log: a scan ends the log at the last whole record before
    /// them, and a closed segment is cut to its records.
    pub fn set_zero_ahead(&mut self, bytes: u64) {
        self.zero_ahead_bytes = bytes;
    }

    /// Whether the log would take a prepared segment ([`Wal::offer_prepared`]): it is open
    /// for writing, writes zeros ahead (a disk) and holds none.
    pub fn wants_prepared(&self) -> bool {
        self.access == Access::ReadWrite && self.zero_ahead_bytes > 0 && self.prepared.is_none()
    }

    /// The size a segment is closed at, and a prepared segment must have.
    pub fn segment_bytes_max(&self) -> u64 {
        self.segment_bytes_max
    }

    /// Hands the log a segment file of zeros made by [`prepare_segment`] in its directory:
    /// the next segment the log starts is that file, renamed. One of another size than
    /// [`Wal::segment_bytes_max`], or one the log does not want, is given back.
    pub fn offer_prepared(
        &mut self,
        prepared: PreparedSegment<S::File>,
    ) -> Option<PreparedSegment<S::File>> {
        let fits = prepared.len == self.segment_bytes_max
            && prepared.path.parent() == Some(self.dir.as_path());
        if !fits || !self.wants_prepared() {
            return Some(prepared);
        }
        self.prepared = Some(prepared);
        None
    }

    /// Removes the prepared segment the log holds, if any: on a full disk its zeros are room
    /// the appends need more (the retry of the append then finds it), and it only ever holds
    /// zeros. A removal that fails leaves the file for the next preparation to replace.
    fn release_prepared(&mut self) {
        if let Some(prepared) = self.prepared.take() {
            let path = prepared.path;
            drop(prepared.file);
            if let Err(error) = self.storage.remove_file(&path) {
                tracing::debug!(%error, path = %path.display(), "prepared segment left in place");
            }
        }
    }

    /// Removes a file left under the prepared name (a crash while preparing, or a log stopped
    /// with one ready), once its bytes prove it garbage: zeros only, no entry. A log that
    /// prepares would replace it, one that does not (in memory, where it would hold 8 MiB of
    /// RAM) would keep it forever. Anything else under that name is left as it is.
    fn remove_leftover_prepared(&self) -> Result<(), WalError> {
        let leftover = self.dir.join(PREPARED_SEGMENT_NAME);
        if self.prepared.is_some() || !self.storage.exists(&leftover).unwrap_or(false) {
            return Ok(());
        }
        let bytes = self.storage.read(&leftover).map_err(io_error(&leftover))?;
        if bytes.iter().any(|&b| b != 0) {
            let path = leftover.display();
            tracing::warn!(%path, "not zeros under the prepared segment's name: left as it is");
            return Ok(());
        }
        self.storage
            .remove_file(&leftover)
            .map_err(io_error(&leftover))
    }

    /// Bytes of a torn tail the scan found and [`Wal::settle`] has not cut yet.
    pub fn torn_tail_bytes(&self) -> u64 {
        self.torn_tail_bytes
    }

    fn assert_writable(&self) {
        assert_eq!(
            self.access,
            Access::ReadWrite,
            "a log opened for reading only is never written"
        );
    }

    /// Removes the damaged part a repairing open found: the damaged segment is cut at the
    /// damage, later segments are deleted, all durably.
    pub fn cut_damage(&mut self) -> Result<(), WalError> {
        self.assert_writable();
        let Some(cut) = self.pending_cut.take() else {
            return Ok(());
        };
        // Later segments first: a crash half way leaves the damaged segment whole, and a
        // scan finds the same damage again.
        for path in cut.later.iter().rev() {
            self.storage.remove_file(path).map_err(io_error(path))?;
        }
        sync_dir(&self.storage, &self.dir)?;
        if let Some(segment) = self.segments.last() {
            segment
                .file
                .set_len(segment.bytes)
                .and_then(|()| segment.file.sync_all())
                .map_err(io_error(&segment.path))?;
        }
        if let Some(segment) = self.segments.last_mut() {
            segment.len = segment.bytes;
        }
        Ok(())
    }

    /// The last entry's index (zero when empty).
    pub fn last_index(&self) -> EntryIndex {
        EntryIndex(self.first_index.0 + self.entries.len() as u64 - 1)
    }

    /// The first index the log holds.
    pub fn first_index(&self) -> EntryIndex {
        self.first_index
    }

    /// The highest commit index carried by any entry: every entry up to it is committed (a
    /// committed entry is never removed, so this survives truncations).
    pub fn max_commit(&self) -> EntryIndex {
        self.max_commit
    }

    /// The last entry's term (zero when empty).
    pub fn last_term(&self) -> Term {
        self.entries.last().map_or(Term(0), |e| e.term)
    }

    /// The last entry's hash: the one the next entry must chain to.
    pub fn last_hash(&self) -> EntryHash {
        self.entries.last().map_or(self.base_hash, |e| e.hash)
    }

    /// The term of the entry at `index`, if the log holds it.
    pub fn term_at(&self, index: EntryIndex) -> Option<Term> {
        self.locate(index).map(|e| e.term)
    }

    /// The hash of the entry at `index`, if the log holds it.
    pub fn hash_at(&self, index: EntryIndex) -> Option<EntryHash> {
        self.locate(index).map(|e| e.hash)
    }

    fn locate(&self, index: EntryIndex) -> Option<&Located> {
        let at = index.0.checked_sub(self.first_index.0)?;
        self.entries.get(usize::try_from(at).ok()?)
    }

    /// Writes `entry` after the last one without syncing: call [`Wal::sync`] before reporting it
    /// durable. Several writes may share one sync.
    pub fn write(&mut self, entry: &Entry) -> Result<(), WalError> {
        self.assert_writable();
        let expected = self.last_index().next();
        if entry.index() != expected || entry.header.index.0 == 0 {
            return Err(WalError::Unchained {
                expected,
                got: entry.index(),
            });
        }
        self.check_entry(entry, expected);
        self.buf.clear();
        record::encode(entry, &mut self.buf);
        let record_bytes = self.buf.len() as u64;
        // Debug builds only: it checks the payload's crc32 again. What goes to the disk
        // parses back as the entry, whole.
        debug_assert!(
            matches!(record::parse(&self.buf, 0), record::Parsed::Record { header, end, .. }
                if header == entry.header && end == self.buf.len()),
            "entry {expected}: its record parses back as itself"
        );
        if self
            .segments
            .last()
            .is_none_or(|s| s.bytes + record_bytes > self.segment_bytes_max && s.bytes > 0)
        {
            self.start_segment(expected)?;
        }
        let segment_index = self.segments.len() - 1;
        let segment_number = segment_index + self.segments_removed;
        let segment = &mut self.segments[segment_index];
        let offset = segment.bytes;
        let zeros_to = match self.zero_ahead_bytes {
            0 => 0,
            ahead => (offset + record_bytes + ahead).min(self.segment_bytes_max),
        };
        if let Err(error) = segment.put_record(&self.buf, zeros_to) {
            if error.is_storage_full() {
                self.release_prepared();
            }
            return Err(error);
        }
        assert_eq!(
            segment.bytes,
            offset + record_bytes,
            "entry {expected}: the segment's records end after its record"
        );
        self.entries.push(Located {
            term: entry.term(),
            hash: entry.header.hash,
            segment: segment_number,
            offset,
            record_bytes: record_bytes as u32,
        });
        self.written_bytes += record_bytes;
        self.max_commit = self.max_commit.max(entry.header.commit);
        Ok(())
    }

    /// What an entry about to be written must be: whole (its payload matches its header),
    /// within the size a scan reads, and (debug builds) chained to the log's last entry.
    fn check_entry(&self, entry: &Entry, expected: EntryIndex) {
        // The chain hash was computed by the leader that sealed the entry and checked by the
        // core of a follower that received it; here the cheap payload checksum guards the copy.
        assert_eq!(
            entry.check_payload(),
            Ok(()),
            "entry {expected}: payload does not match its header"
        );
        // A record a scan would call damaged must never be written.
        assert!(
            entry.payload.len() <= ENTRY_PAYLOAD_BYTES_MAX as usize,
            "entry {expected}: a payload of {} bytes, over the limit",
            entry.payload.len()
        );
        // Debug builds only: it hashes the payload again. A log whose start follows a
        // snapshot it never saw does not know the hash its first entry chains to.
        let base_known = !self.entries.is_empty()
            || self.first_index == EntryIndex(1)
            || self.base_hash != EntryHash::default();
        debug_assert!(
            !base_known
                || chain_hash(&self.last_hash(), &entry.header, &entry.payload)
                    == entry.header.hash,
            "entry {expected} chains to the last entry of the log"
        );
    }

    /// fdatasyncs everything written: only after this returns are the writes durable.
    pub fn sync(&mut self) -> Result<(), WalError> {
        match self.segments.last() {
            Some(segment) => segment.file.sync_data().map_err(io_error(&segment.path)),
            None => Ok(()),
        }
    }

    /// Writes `entry` and syncs it.
    pub fn append(&mut self, entry: &Entry) -> Result<(), WalError> {
        self.write(entry)?;
        self.sync()
    }

    /// Reads the entry at `index` back from disk, checking its checksums.
    pub fn read(&self, index: EntryIndex) -> Result<Entry, WalError> {
        let at = *self.locate(index).ok_or(WalError::Missing(index))?;
        let segment = &self.segments[at.segment - self.segments_removed];
        assert!(
            at.offset + u64::from(at.record_bytes) <= segment.bytes,
            "entry {index}: a read of {} bytes at byte {} past the records' end at {}",
            at.record_bytes,
            at.offset,
            segment.bytes
        );
        let mut data = vec![0; at.record_bytes as usize];
        segment
            .file
            .read_exact_at(&mut data, at.offset)
            .map_err(io_error(&segment.path))?;
        let corruption = |reason: &str| WalError::Corruption {
            index,
            path: segment.path.clone(),
            offset: at.offset,
            reason: reason.to_string(),
        };
        match record::parse(&data, 0) {
            record::Parsed::Record {
                header,
                payload,
                end,
            } if header.index == index => {
                // The checksums held: what differs from what the log noted when it wrote or
                // scanned the record is the log's bug, not the disk's.
                assert!(
                    header.term == at.term && header.hash == at.hash && end == data.len(),
                    "entry {index}: read back as term {} and hash {:?} in {end} bytes, \
                     noted as term {} and hash {:?} in {} bytes",
                    header.term.0,
                    header.hash,
                    at.term.0,
                    at.hash,
                    at.record_bytes
                );
                let payload = Bytes::from(data).slice(payload);
                Ok(Entry { header, payload })
            }
            record::Parsed::Record { .. } => Err(corruption("record holds another index")),
            record::Parsed::Incomplete => Err(corruption("record cut short")),
            record::Parsed::Damaged(reason) => Err(corruption(reason)),
            record::Parsed::Newer => Err(WalError::Newer {
                index,
                path: segment.path.clone(),
                offset: at.offset,
            }),
        }
    }

    /// Removes every entry from `index` on (a conflicting suffix from an old leader), durably.
    pub fn truncate_from(&mut self, index: EntryIndex) -> Result<(), WalError> {
        self.assert_writable();
        let Some(at) = self.locate(index).copied() else {
            return Ok(());
        };
        assert!(
            index > self.max_commit,
            "truncating from entry {index} would remove committed entries (through {})",
            self.max_commit
        );
        let position = at.segment - self.segments_removed;
        for segment in self.segments.drain(position + 1..) {
            let removed = self.storage.remove_file(&segment.path);
            removed.map_err(io_error(&segment.path))?;
        }
        // The removals are made durable first: a crash must not bring a later segment back
        // after the one before it was cut short.
        sync_dir(&self.storage, &self.dir)?;
        let segment = &mut self.segments[position];
        assert!(
            at.offset < segment.bytes,
            "entry {index}: a cut at byte {} outside the records, which end at {}",
            at.offset,
            segment.bytes
        );
        segment
            .file
            .set_len(at.offset)
            .map_err(io_error(&segment.path))?;
        segment.file.sync_all().map_err(io_error(&segment.path))?;
        segment.bytes = at.offset;
        segment.len = at.offset;
        self.entries
            .truncate((index.0 - self.first_index.0) as usize);
        assert_eq!(
            self.last_index().next(),
            index,
            "a log truncated from entry {index} ends before it"
        );
        Ok(())
    }

    /// Removes the segments whose entries all lie at or below `index` (a durable snapshot
    /// covers them), keeping the last segment; returns the bytes freed.
    pub fn compact_through(&mut self, index: EntryIndex) -> Result<u64, WalError> {
        let (freed, segments) = self.release_through(index);
        remove_segments(&self.storage, &self.dir, &segments)?;
        Ok(freed)
    }

    /// Forgets the segments whose entries all lie at or below `index`, keeping the last one,
    /// and returns the bytes they hold and their files, for [`remove_segments`] to delete (off
    /// the thread that appends: deleting a large segment on tmpfs takes milliseconds).
    pub fn release_through(&mut self, index: EntryIndex) -> (u64, Vec<PathBuf>) {
        let mut freed = 0;
        let mut released = Vec::new();
        while self.segments.len() > 1 {
            let number = self.segments_removed;
            let held = self
                .entries
                .iter()
                .take_while(|e| e.segment == number)
                .count() as u64;
            if self.first_index.0 + held - 1 > index.0 || held == 0 && self.first_index > index {
                break;
            }
            let segment = self.segments.remove(0);
            freed += segment.bytes;
            released.push(segment.path);
            self.segments_removed += 1;
            if held > 0 {
                self.base_hash = self.entries[held as usize - 1].hash;
            }
            self.entries.drain(..held as usize);
            self.first_index = EntryIndex(self.first_index.0 + held);
        }
        assert!(
            released.is_empty() || self.first_index <= index.next(),
            "compaction through entry {index} released entries up to {}",
            self.first_index.0 - 1
        );
        (freed, released)
    }

    /// The WAL's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Empties the log, durably, to continue after `base` (a snapshot installed in its place):
    /// the next entry is `base + 1` and chains to `base_hash`.
    pub fn reset_to(&mut self, base: EntryIndex, base_hash: EntryHash) -> Result<(), WalError> {
        self.assert_writable();
        // Newest first: a crash half way leaves a log that still starts where it started,
        // not one that starts past the snapshot it continues.
        for segment in self.segments.drain(..).rev() {
            let removed = self.storage.remove_file(&segment.path);
            removed.map_err(io_error(&segment.path))?;
            self.segments_removed += 1;
        }
        sync_dir(&self.storage, &self.dir)?;
        self.entries.clear();
        self.first_index = base.next();
        self.base_hash = base_hash;
        Ok(())
    }

    /// Bytes of records written since the log was opened (through every segment, removed
    /// ones included).
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    /// Bytes the log's segments hold.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    fn start_segment(&mut self, first: EntryIndex) -> Result<(), WalError> {
        // The closed segment is cut to its records and synced first, so that only the last
        // segment can have a torn tail or zeros after its records: damage anywhere else is
        // corruption.
        if let Some(segment) = self.segments.last_mut() {
            // The file's own length, not `len`: a write that failed half way (a full disk)
            // may have left bytes past what was counted.
            let file_len = segment.file.size().map_err(io_error(&segment.path))?;
            if file_len != segment.bytes {
                segment
                    .file
                    .set_len(segment.bytes)
                    .map_err(io_error(&segment.path))?;
            }
            segment.len = segment.bytes;
        }
        self.sync()?;
        assert_eq!(
            first,
            self.last_index().next(),
            "a new segment is named for the entry it will hold first"
        );
        let path = segment_path(&self.dir, first);
        let segment = match self.prepared.take() {
            Some(prepared) => self.place_prepared(prepared, path)?,
            None => {
                let file = self.storage.create_new(&path).map_err(write_error(&path))?;
                Segment {
                    path,
                    file,
                    bytes: 0,
                    len: 0,
                }
            }
        };
        self.segments.push(segment);
        sync_dir(&self.storage, &self.dir)
    }

    /// Renames a prepared segment to `path`: a segment with no records and zeros to its
    /// size. Never over an existing file (a rename would replace it silently; a creation
    /// refuses, and so does this).
    fn place_prepared(
        &self,
        prepared: PreparedSegment<S::File>,
        path: PathBuf,
    ) -> Result<Segment<S::File>, WalError> {
        if self.storage.exists(&path).map_err(io_error(&path))? {
            let taken = io::Error::from(io::ErrorKind::AlreadyExists);
            return Err(WalError::Io {
                path,
                source: taken,
            });
        }
        // A directory that needs a block for the new name may find the disk full: the same
        // wait as for a creation, not a failure.
        let renamed = self.storage.rename(&prepared.path, &path);
        renamed.map_err(write_error(&path))?;
        Ok(Segment {
            path,
            file: prepared.file,
            bytes: 0,
            len: prepared.len,
        })
    }
}

impl<F: StorageFile> Segment<F> {
    /// Writes `record` after the segment's records, first writing zeros up to `zeros_to`
    /// when the record would pass the file's end (0: none). Not synced.
    fn put_record(&mut self, record: &[u8], zeros_to: u64) -> Result<(), WalError> {
        let end = self.bytes + record.len() as u64;
        if end > self.len && zeros_to > 0 {
            match self.write_zeros(zeros_to.max(end)) {
                // Zeros that do not fit are only lost speed: the record may still fit.
                Err(error) if error.is_storage_full() => {}
                other => other?,
            }
        }
        let written = match self.len > self.bytes {
            // Over written zeros a write cut short (a kill between pages) leaves no shorter
            // file to show it: the header goes last, so that a record whose header holds had
            // its payload written first, and one whose header is still zeros is a torn write.
            true => {
                let (header, payload) = record.split_at(record::RECORD_HEADER_BYTES);
                let payload_at = self.bytes + header.len() as u64;
                self.file
                    .write_all_at(payload, payload_at)
                    .and_then(|()| self.file.write_all_at(header, self.bytes))
            }
            false => self.file.write_all_at(record, self.bytes),
        };
        written.map_err(write_error(&self.path))?;
        self.bytes = end;
        self.len = self.len.max(end);
        assert!(
            self.bytes <= self.len,
            "{}: records end at byte {} of a file of {}",
            self.path.display(),
            self.bytes,
            self.len
        );
        Ok(())
    }

    /// Writes zeros from the file's end to `end` (not synced: the next sync carries them).
    fn write_zeros(&mut self, end: u64) -> Result<(), WalError> {
        while self.len < end {
            let chunk = (end - self.len).min(ZEROS.len() as u64) as usize;
            self.file
                .write_all_at(&ZEROS[..chunk], self.len)
                .map_err(write_error(&self.path))?;
            self.len += chunk as u64;
        }
        Ok(())
    }
}

fn segment_path(dir: &Path, first: EntryIndex) -> PathBuf {
    dir.join(format!("{:020}{SEGMENT_SUFFIX}", first.0))
}

/// Deletes released segment files, oldest first, then fsyncs the directory.
pub fn remove_segments<S: Storage>(
    storage: &S,
    dir: &Path,
    segments: &[PathBuf],
) -> Result<(), WalError> {
    for path in segments {
        storage.remove_file(path).map_err(io_error(path))?;
    }
    if !segments.is_empty() {
        sync_dir(storage, dir)?;
    }
    Ok(())
}

/// fsyncs a directory, making file creations, renames and removals in it durable.
fn sync_dir<S: Storage>(storage: &S, dir: &Path) -> Result<(), WalError> {
    storage.sync_dir(dir).map_err(io_error(dir))
}
