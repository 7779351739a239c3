//! The apply journal: for every entry a node applied, the state hash after it and each
//! command's outcome fingerprint. `replay` re-executes a stopped node's log with the current
//! build and compares with it, entry by entry and command by command.
//!
//! Files `journal/<first index, 20 digits>.jrn`, each a run of records (little-endian, the
//! crc over all before it):
//!
//! - `JRN2` (written): `magic | index u64 | state hash [32] | handler version u32 | count u32 |
//!   fingerprints u32 x count | changes length u32 | changes | crc32`, where the changes are
//!   the commands that ran with their encoded outcomes ([`crate::apply::Ran`]): what the change
//!   stream serves.
//! - `JRN1` (read): `magic | index u64 | state hash [32] | count u32 | fingerprints u32 x
//!   count | crc32`; it holds no changes.
//!
//! Written by the WAL thread after the entry's apply, once per batch of its work, and never
//! fsynced: a torn tail or a lost last record only shortens what a replay can compare with,
//! and a restart journals again the entries it replays past the journal's end. A file is
//! started past [`JOURNAL_FILE_BYTES_MAX`]; files wholly behind what the WAL let go are
//! removed with the WAL's segments.

use crate::apply::Ran;
use crate::ids::EntryIndex;
use crate::state::StateHash;
use crate::storage::{Access, Files, Storage, StorageFile};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The journal's directory under a data directory.
pub const JOURNAL_DIR: &str = "journal";
/// Bytes after which the journal starts a new file (so that old ones can be removed), unless
/// the WAL's segments are smaller: then at a segment's size, so that the journal lets go of
/// the entries the WAL lets go of, and no more than about them.
pub const JOURNAL_FILE_BYTES_MAX: u64 = 8 << 20;
/// Suffix of journal files.
const JOURNAL_SUFFIX: &str = ".jrn";
/// Starts every record of the first format ("JRN1": no handler version, no changes).
const RECORD_MAGIC_1: u32 = 0x4A52_4E31;
/// Starts every record this build writes ("JRN2").
const RECORD_MAGIC: u32 = 0x4A52_4E32;
/// Bytes of a `JRN1` record around its fingerprints: magic, index, state hash, count, crc.
const RECORD_1_FIXED_BYTES: usize = 4 + 8 + 32 + 4 + 4;
/// Bytes of a `JRN2` record around its fingerprints and changes: magic, index, state hash,
/// version, count, changes length, crc.
const RECORD_FIXED_BYTES: usize = 4 + 8 + 32 + 4 + 4 + 4 + 4;
/// The changes length of a record that keeps none.
const CHANGES_NOT_KEPT: u32 = u32::MAX;
/// Most fingerprints one record holds (an entry's most commands).
const RECORD_OUTCOMES_MAX: usize = crate::entry::ENTRY_COMMANDS_MAX as usize;
/// Most bytes of changes one record holds (a record past it is read as damaged; the writer
/// keeps no changes for an entry whose changes are larger, and the stream names the gap).
pub const RECORD_CHANGES_BYTES_MAX: usize = net::codec::DECODE_BYTES_MAX;

/// One applied entry as the journal keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRecord {
    /// The entry.
    pub index: EntryIndex,
    /// The state hash after it.
    pub state_hash: StateHash,
    /// The handler version in force after it (0 in a `JRN1` record: not recorded).
    pub version: u32,
    /// Each command's outcome fingerprint by position (0: not run); empty for an entry
    /// without commands.
    pub outcomes: Vec<u32>,
    /// The commands that ran and their outcomes, as [`crate::apply::Ran::changes`] holds them
    /// (`None` in a `JRN1` record: not recorded).
    pub changes: Option<Vec<u8>>,
}

impl JournalRecord {
    /// The record of an applied entry.
    pub fn of(index: EntryIndex, state_hash: StateHash, ran: Ran) -> Self {
        let kept = ran.kept && ran.changes.len() <= RECORD_CHANGES_BYTES_MAX;
        JournalRecord {
            index,
            state_hash,
            version: ran.version,
            outcomes: ran.fingerprints,
            changes: kept.then_some(ran.changes),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let changes = self.changes.as_deref().unwrap_or_default();
        let changes_len = self
            .changes
            .as_ref()
            .map_or(CHANGES_NOT_KEPT, |c| c.len() as u32);
        out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        out.extend_from_slice(&self.index.0.to_le_bytes());
        out.extend_from_slice(&self.state_hash.0);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.outcomes.len() as u32).to_le_bytes());
        for outcome in &self.outcomes {
            out.extend_from_slice(&outcome.to_le_bytes());
        }
        out.extend_from_slice(&changes_len.to_le_bytes());
        out.extend_from_slice(changes);
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    /// The record at the front of `bytes` and its length; `None` at a torn or damaged one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<(JournalRecord, usize)> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        let (first_format, count_at) = match u32_at(0)? {
            RECORD_MAGIC => (false, 48),
            RECORD_MAGIC_1 => (true, 44),
            _ => return None,
        };
        let count = u32_at(count_at)? as usize;
        if count > RECORD_OUTCOMES_MAX {
            return None;
        }
        let fingerprints_end = count_at + 4 + 4 * count;
        let changes_len = match first_format {
            true => CHANGES_NOT_KEPT,
            false => u32_at(fingerprints_end)?,
        };
        let kept = changes_len != CHANGES_NOT_KEPT;
        let changes_len = if kept { changes_len as usize } else { 0 };
        if changes_len > RECORD_CHANGES_BYTES_MAX {
            return None;
        }
        let fixed = [RECORD_FIXED_BYTES, RECORD_1_FIXED_BYTES][usize::from(first_format)];
        let end = fixed + 4 * count + changes_len;
        let body = bytes.get(..end - 4)?;
        if crc32fast::hash(body) != u32_at(end - 4)? {
            return None;
        }
        let outcomes = (0..count)
            .map(|i| u32_at(count_at + 4 + 4 * i))
            .collect::<Option<_>>()?;
        let changes_at = fingerprints_end + 4;
        let record = JournalRecord {
            index: EntryIndex(u64::from_le_bytes(body[4..12].try_into().ok()?)),
            state_hash: StateHash(body[12..44].try_into().ok()?),
            version: if first_format { 0 } else { u32_at(44)? },
            outcomes,
            changes: kept.then(|| body[changes_at..changes_at + changes_len].to_vec()),
        };
        Some((record, end))
    }
}

/// Why the journal could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct JournalError {
    /// The file or directory.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends records to the journal of one data directory.
pub struct JournalWriter<S: Storage = Files> {
    storage: S,
    dir: PathBuf,
    /// The file being appended to, and its size.
    file: Option<(S::File, u64)>,
    /// Records not yet written.
    buffer: Vec<u8>,
    /// The first record to go into a new file (its name).
    next_first: Option<EntryIndex>,
    /// The last record queued, and the last one written.
    queued_last: Option<EntryIndex>,
    written: Option<EntryIndex>,
    /// Bytes after which a file is full.
    file_bytes_max: u64,
}

impl JournalWriter {
    /// A writer into `data_dir`'s journal (created if missing).
    pub fn open(data_dir: &Path) -> Result<Self, JournalError> {
        JournalWriter::open_on(Files, data_dir)
    }
}

impl<S: Storage> JournalWriter<S> {
    /// A writer into `data_dir`'s journal on `storage` (created if missing).
    pub fn open_on(storage: S, data_dir: &Path) -> Result<Self, JournalError> {
        let dir = data_dir.join(JOURNAL_DIR);
        storage.create_dir_all(&dir).map_err(io_error(&dir))?;
        let written = last_record(&storage, &dir)?;
        Ok(JournalWriter {
            storage,
            dir,
            file: None,
            buffer: Vec::new(),
            next_first: None,
            queued_last: None,
            written,
            file_bytes_max: JOURNAL_FILE_BYTES_MAX,
        })
    }

    /// Starts new files past `bytes` (at most [`JOURNAL_FILE_BYTES_MAX`]).
    pub fn with_file_bytes(mut self, bytes: u64) -> Self {
        self.file_bytes_max = bytes.clamp(1, JOURNAL_FILE_BYTES_MAX);
        self
    }

    /// Queues `record`; [`JournalWriter::flush`] writes it. An entry at or before the last one
    /// journaled is passed over: a restart applies again the entries after the last commit
    /// its log showed, which the journal may hold already, and a second copy would start a
    /// file that sorts before the newest.
    pub fn append(&mut self, record: &JournalRecord) {
        if self
            .queued_last
            .or(self.written)
            .is_some_and(|last| record.index <= last)
        {
            return;
        }
        self.next_first.get_or_insert(record.index);
        self.queued_last = Some(record.index);
        record.encode(&mut self.buffer);
    }

    /// The entry of the last record written (by this writer, or found at its start).
    pub fn written(&self) -> Option<EntryIndex> {
        self.written
    }

    /// Writes the queued records (starting a new file first when the current one is full).
    pub fn flush(&mut self) -> Result<(), JournalError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let full = self
            .file
            .as_ref()
            .is_none_or(|(_, bytes)| *bytes >= self.file_bytes_max);
        if full {
            let first = self.next_first.expect("a record is queued");
            let path = journal_path(&self.dir, first);
            self.file = Some((self.start_file(&path)?, 0));
        }
        let (file, bytes) = self.file.as_mut().expect("opened above");
        file.write_all_at(&self.buffer, *bytes)
            .map_err(io_error(&self.dir))?;
        *bytes += self.buffer.len() as u64;
        self.buffer.clear();
        self.next_first = None;
        self.written = self.queued_last.take().or(self.written);
        Ok(())
    }

    /// Opens the file `path` empty. A file of this name holds no whole record: the journal's
    /// last one is before its first (see `append`), so what a crash left in it is a torn
    /// start, and records after it would never be read.
    fn start_file(&self, path: &Path) -> Result<S::File, JournalError> {
        let file = match self.storage.create_new(path) {
            Err(error) if error.kind() == ErrorKind::AlreadyExists => {
                self.storage.open(path, Access::ReadWrite)
            }
            created => created,
        };
        let file = file.map_err(io_error(path))?;
        file.set_len(0).map_err(io_error(path))?;
        Ok(file)
    }

    /// Removes the files whose records all lie at or before `through` (the next file starts
    /// after it); the file being written stays.
    pub fn release_through(&mut self, through: EntryIndex) -> Result<(), JournalError> {
        let files = journal_files(&self.storage, &self.dir)?;
        for pair in files.windows(2) {
            if pair[1].0 <= through.next() {
                let removed = self.storage.remove_file(&pair[0].1);
                removed.map_err(io_error(&pair[0].1))?;
            }
        }
        Ok(())
    }
}

/// The apply journal as the WAL's executor keeps it beside the log: a record appended as each
/// entry applies, written when the executor's queue drains, files let go with the log's
/// segments. It is a record for diagnosis and for the change stream, so a failure turns it
/// off with a warning and the node goes on without it.
pub(crate) struct Journaling<S: Storage> {
    writer: Option<JournalWriter<S>>,
}

impl<S: Storage> Journaling<S> {
    /// The journal of `data_dir` on `storage`, files started past `file_bytes`; off (with a
    /// warning) when it cannot be opened.
    pub(crate) fn open(storage: S, data_dir: &Path, file_bytes: u64) -> Self {
        let writer = JournalWriter::open_on(storage, data_dir)
            .map(|writer| writer.with_file_bytes(file_bytes))
            .map_err(|error| tracing::warn!(%error, "no apply journal"))
            .ok();
        Journaling { writer }
    }

    /// Queues the record of the entry `index`, applied with `ran` to `state_hash`.
    pub(crate) fn record(&mut self, index: EntryIndex, state_hash: StateHash, ran: Ran) {
        let record = JournalRecord::of(index, state_hash, ran);
        self.run(|writer| {
            writer.append(&record);
            Ok(())
        });
    }

    /// Writes what is queued.
    pub(crate) fn flush(&mut self) {
        self.run(JournalWriter::flush);
    }

    /// Lets go of the files wholly at or before `through`.
    pub(crate) fn release_through(&mut self, through: EntryIndex) {
        self.run(|writer| writer.release_through(through));
    }

    /// The entry of the last record written, while the journal is on.
    pub(crate) fn written(&self) -> Option<EntryIndex> {
        self.writer.as_ref().and_then(JournalWriter::written)
    }

    /// Runs `work` on the writer; on an error, says so and turns the journal off.
    fn run(&mut self, work: impl FnOnce(&mut JournalWriter<S>) -> Result<(), JournalError>) {
        if let Some(writer) = self.writer.as_mut()
            && let Err(error) = work(writer)
        {
            tracing::warn!(%error, "apply journal off: replay will compare less");
            self.writer = None;
        }
    }
}

fn journal_path(dir: &Path, first: EntryIndex) -> PathBuf {
    dir.join(format!("{:020}{JOURNAL_SUFFIX}", first.0))
}

/// The journal's files in `dir` by first index (none when `dir` is missing).
pub(crate) fn journal_files<S: Storage>(
    storage: &S,
    dir: &Path,
) -> Result<Vec<(EntryIndex, PathBuf)>, JournalError> {
    let listing = match storage.list(dir) {
        Ok(listing) => listing,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io_error(dir)(source)),
    };
    let mut files: Vec<(EntryIndex, PathBuf)> = listing
        .into_iter()
        .filter_map(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let first = name.strip_suffix(JOURNAL_SUFFIX)?.parse().ok()?;
            Some((EntryIndex(first), path))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The entry of the last whole record in the journal directory `dir`: in the newest file that
/// holds one (a crash may leave the newest empty).
fn last_record<S: Storage>(storage: &S, dir: &Path) -> Result<Option<EntryIndex>, JournalError> {
    for (_, path) in journal_files(storage, dir)?.iter().rev() {
        let bytes = storage.read(path).map_err(io_error(path))?;
        let mut at = 0;
        let mut last = None;
        while let Some((record, used)) = JournalRecord::decode(&bytes[at..]) {
            last = Some(record.index);
            at += used;
        }
        if last.is_some() {
            return Ok(last);
        }
    }
    Ok(None)
}

/// What a data directory's journal holds: every record by index (the first one kept when an
/// index was journaled twice), and the indexes journaled twice with different contents.
#[derive(Debug, Default)]
pub struct Journal {
    /// The records.
    pub records: BTreeMap<EntryIndex, JournalRecord>,
    /// Indexes whose records disagree (a node that applied an entry twice and answered
    /// otherwise the second time).
    pub conflicts: Vec<EntryIndex>,
}

/// Reads `data_dir`'s journal; each file is read up to its first torn or damaged record.
pub fn read_journal(data_dir: &Path) -> Result<Journal, JournalError> {
    read_journal_on(&Files, data_dir)
}

/// [`read_journal`] on `storage`.
pub fn read_journal_on<S: Storage>(storage: &S, data_dir: &Path) -> Result<Journal, JournalError> {
    let mut journal = Journal::default();
    for (_, path) in journal_files(storage, &data_dir.join(JOURNAL_DIR))? {
        let bytes = storage.read(&path).map_err(io_error(&path))?;
        let mut at = 0;
        while let Some((record, used)) = JournalRecord::decode(&bytes[at..]) {
            at += used;
            match journal.records.get(&record.index) {
                Some(kept) if *kept != record => journal.conflicts.push(record.index),
                Some(_) => {}
                None => {
                    journal.records.insert(record.index, record);
                }
            }
        }
    }
    Ok(journal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(index: u64, commands: u32) -> JournalRecord {
        let changes = (0..commands).flat_map(|c| [c as u8, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0]);
        JournalRecord {
            index: EntryIndex(index),
            state_hash: StateHash([index as u8; 32]),
            version: 1,
            outcomes: (0..commands).map(|c| c * 7 + 1).collect(),
            changes: (index % 2 == 1).then(|| changes.collect()),
        }
    }

    /// The bytes a build of the first format wrote for a record (no version, no changes).
    fn first_format(record: &JournalRecord) -> Vec<u8> {
        let mut out = RECORD_MAGIC_1.to_le_bytes().to_vec();
        out.extend_from_slice(&record.index.0.to_le_bytes());
        out.extend_from_slice(&record.state_hash.0);
        out.extend_from_slice(&(record.outcomes.len() as u32).to_le_bytes());
        record
            .outcomes
            .iter()
            .for_each(|o| out.extend_from_slice(&o.to_le_bytes()));
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Proves a restart that applies again entries the journal holds journals only the ones
    /// after its last record, so the new file sorts after the newest and nothing is held
    /// twice; and that a file a crash left with a torn start is started over, not appended to.
    #[test]
    fn a_restart_journals_only_past_the_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let open = || JournalWriter::open(dir.path()).unwrap().with_file_bytes(1);
        let mut writer = open();
        (100..=150).for_each(|i| writer.append(&record(i, 2)));
        writer.flush().unwrap();
        (151..=160).for_each(|i| writer.append(&record(i, 2)));
        writer.flush().unwrap();
        let journal_dir = dir.path().join(JOURNAL_DIR);
        // A crash while the next file was being started: its name, a torn record.
        std::fs::write(journal_path(&journal_dir, EntryIndex(161)), b"JRN").unwrap();
        let mut writer = open();
        assert_eq!(writer.written(), Some(EntryIndex(160)));
        (141..=170).for_each(|i| writer.append(&record(i, 2)));
        writer.flush().unwrap();
        let firsts: Vec<u64> = journal_files(&Files, &journal_dir)
            .unwrap()
            .iter()
            .map(|f| f.0.0)
            .collect();
        assert_eq!(firsts, [100, 151, 161]);
        let read = read_journal(dir.path()).unwrap();
        assert_eq!(
            read.records.keys().map(|i| i.0).collect::<Vec<_>>(),
            (100..=170).collect::<Vec<_>>()
        );
        assert!(read.conflicts.is_empty());
    }

    /// Proves a record keeps its changes, or that it kept none, and that a first-format
    /// record (an older build's file) reads with its fingerprints, no version and no changes.
    #[test]
    fn records_keep_their_changes_and_the_first_format_still_reads() {
        for index in [1, 2] {
            let written = record(index, 3);
            let mut bytes = Vec::new();
            written.encode(&mut bytes);
            assert_eq!(JournalRecord::decode(&bytes), Some((written, bytes.len())));
        }
        let old = record(5, 2);
        let bytes = first_format(&old);
        let (read, used) = JournalRecord::decode(&bytes).expect("a first-format record reads");
        assert_eq!(used, bytes.len());
        assert_eq!((read.index, read.outcomes), (old.index, old.outcomes));
        assert_eq!((read.version, read.changes), (0, None));
    }

    /// Proves records read back as written, across files; a restart passes over the entries
    /// journaled already; an index an older build journaled twice differently is a conflict
    /// (the first kept); a torn tail ends a file's records; and files wholly behind a point
    /// are removed, the file being written kept.
    #[test]
    fn records_round_trip_and_old_files_go() {
        let dir = tempfile::tempdir().unwrap();
        let journal_dir = dir.path().join(JOURNAL_DIR);
        let mut writer = JournalWriter::open(dir.path()).unwrap();
        (1..=3).for_each(|i| writer.append(&record(i, i as u32)));
        writer.flush().unwrap();
        // A restart: a new writer appends to a new file, past what is journaled.
        let mut writer = JournalWriter::open(dir.path()).unwrap();
        writer.append(&record(3, 3));
        writer.append(&record(4, 0));
        let mut other = record(4, 0);
        other.state_hash = StateHash([0; 32]);
        writer.append(&other);
        writer.flush().unwrap();
        let read = read_journal(dir.path()).unwrap();
        assert_eq!(read.records.len(), 4);
        assert_eq!(read.records[&EntryIndex(2)], record(2, 2));
        assert_eq!(
            read.records[&EntryIndex(4)],
            record(4, 0),
            "the second 4 passed over"
        );
        assert!(read.conflicts.is_empty());
        let mut older = Vec::new();
        other.encode(&mut older);
        std::fs::write(journal_path(&journal_dir, EntryIndex(9)), &older).unwrap();
        assert_eq!(read_journal(dir.path()).unwrap().conflicts, [EntryIndex(4)]);
        let second = journal_path(&journal_dir, EntryIndex(4));
        let bytes = std::fs::read(&second).unwrap();
        std::fs::write(&second, &bytes[..bytes.len() - 3]).unwrap();
        let torn = read_journal(dir.path()).unwrap();
        assert_eq!((torn.records.len(), torn.conflicts.len()), (4, 0));
        assert_eq!(
            torn.records[&EntryIndex(4)],
            other,
            "only the older file's is whole"
        );
        writer.release_through(EntryIndex(1)).unwrap();
        assert_eq!(
            read_journal(dir.path()).unwrap().records.len(),
            4,
            "entry 2 still needed"
        );
        writer.release_through(EntryIndex(3)).unwrap();
        let left = read_journal(dir.path()).unwrap();
        let kept: Vec<u64> = left.records.keys().map(|i| i.0).collect();
        assert_eq!(kept, [4], "the newest file stays");
    }

    /// Proves the journal on a disk whose process stops at any step of a write and then
    /// crashes: what it keeps reads back as written (no record twice, none altered), a
    /// writer reopened on it starts after its last record, and what it appends then is read.
    #[cfg(feature = "sim")]
    #[test]
    fn a_crash_at_any_step_leaves_records_as_written() {
        use crate::rng::Rng;
        use crate::storage::SimDisk;
        let dir = Path::new("/data");
        for steps in 0..40 {
            let disk = SimDisk::new();
            disk.create_dir_all(dir).unwrap();
            let open = || {
                JournalWriter::open_on(disk.clone(), dir)
                    .unwrap()
                    .with_file_bytes(300)
            };
            let mut writer = open();
            (1..=10).for_each(|i| writer.append(&record(i, 2)));
            writer.flush().unwrap();
            disk.sync_dir(&dir.join(JOURNAL_DIR)).unwrap();
            disk.stop_after(steps);
            (11..=30).for_each(|i| {
                writer.append(&record(i, 2));
                drop(writer.flush());
            });
            disk.crash(&mut Rng::new(steps));
            let mut writer = open();
            let kept = read_journal_on(&disk, dir).unwrap();
            assert!(kept.conflicts.is_empty());
            for (index, read) in &kept.records {
                assert_eq!(*read, record(index.0, 2), "stopped after {steps} steps");
            }
            let last = kept.records.keys().next_back().copied();
            assert_eq!(writer.written(), last);
            let next = last.map_or(1, |last| last.0 + 1);
            (next..=40).for_each(|i| writer.append(&record(i, 2)));
            writer.flush().unwrap();
            let read = read_journal_on(&disk, dir).unwrap();
            assert!(read.conflicts.is_empty());
            assert!(read.records.contains_key(&EntryIndex(40)));
        }
    }
}
