//! The change stream, node side: the committed commands this node applied and their outcomes,
//! from a position on, read from its apply journal (`journal.rs`), which holds what each
//! command answered. Only applied entries are journaled, so only committed commands are ever
//! served; the journal's files go with the log's segments, so the stream serves what the log
//! still holds (`notes/decisions/changes.md`).

use crate::ids::{EntryIndex, NodeId};
use crate::storage::Files;
use crate::storage::journal::{JOURNAL_DIR, JournalRecord, journal_files};
use net::message::{ChangeBatch, ChangeEntry, ChangePosition, ChangesRefusal, ChangesRequest};
use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most bytes of changes one answer holds, whatever the reader asks (half a frame's body: an
/// answer always fits one).
pub const CHANGES_ANSWER_BYTES_MAX: u32 = (net::frame::FRAME_BODY_BYTES_MAX / 2) as u32;
/// Longest a node holds a request for changes it has not applied yet, in milliseconds.
pub const CHANGES_WAIT_MS_MAX: u32 = 30_000;
/// Where recent answers ended, kept so that a reader that follows reads only what is new.
const CURSORS_KEPT: usize = 16;
/// Bytes of a frame's body left for everything in an answer around the changes.
const ANSWER_FIXED_BYTES_MAX: usize = 64 * 1024;
/// How long after its last answer a reader still counts in the node's figures, in
/// milliseconds: longer than the longest wait, so a following reader that waits counts.
const READER_ACTIVE_MS: u64 = 2 * CHANGES_WAIT_MS_MAX as u64;

/// Where an answer ended in the journal: the next entry, where its record starts, and the
/// handler version of the record before it; and the reader it went to, until that reader
/// asks again (a position read again, by another reader or after a reconnect, finds the
/// cursor still, without a reader).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cursor {
    next: EntryIndex,
    path: PathBuf,
    offset: u64,
    version: u32,
    reader: Option<Reader>,
}

/// A reader as the node sees it through the answers it was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reader {
    /// When its last answer was sent.
    answered: Instant,
    /// Since when it has lacked applied entries, if it does: its last answer that reached
    /// the applied entries (anything later was applied after it), else its first answer.
    since: Instant,
}

impl Reader {
    /// A reader (`previous` when it was answered before) whose answer at `now` ended before
    /// `next` while `applied` was applied.
    fn answered(
        previous: Option<Reader>,
        (next, applied): (EntryIndex, EntryIndex),
        now: Instant,
    ) -> Self {
        let since = if next > applied {
            now
        } else {
            previous.map_or(now, |reader| reader.since)
        };
        Reader {
            answered: now,
            since,
        }
    }
}

/// The stream's readers and the journal, as the node's metrics show them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ChangeFigures {
    /// The last entry the journal has written.
    pub(crate) journaled: EntryIndex,
    /// Readers answered in the last [`READER_ACTIVE_MS`].
    pub(crate) readers: u64,
    /// The most applied entries one of them lacked after its last answer.
    pub(crate) behind_entries: u64,
    /// The longest one of them has been behind the applied entries, in seconds.
    pub(crate) behind_seconds: f64,
}

/// What a node serves its change stream from: its journal, where recent answers ended, and
/// the last entry the journal has written.
pub(crate) struct ChangeSource {
    node: NodeId,
    /// False when the cluster keeps no changes (`change_stream = false`).
    on: bool,
    dir: PathBuf,
    cursors: Mutex<VecDeque<Cursor>>,
    journaled: watch::Receiver<EntryIndex>,
}

impl ChangeSource {
    /// The change stream of node `node` (`on`: unless the cluster keeps no changes) with data
    /// directory `data_dir`; `journaled` names the last entry its journal has written.
    pub(crate) fn new(
        (node, on): (NodeId, bool),
        data_dir: &Path,
        journaled: watch::Receiver<EntryIndex>,
    ) -> Self {
        ChangeSource {
            node,
            on,
            dir: data_dir.join(JOURNAL_DIR),
            cursors: Mutex::new(VecDeque::new()),
            journaled,
        }
    }

    /// The answer to `request`: held up to its wait (at most [`CHANGES_WAIT_MS_MAX`]) while the
    /// journal has not reached the entry asked for, then read off the event loop.
    pub(crate) async fn answer(
        self: std::sync::Arc<Self>,
        request: ChangesRequest,
        applied: EntryIndex,
    ) -> Result<ChangeBatch, ChangesRefusal> {
        if !self.on {
            return Err(ChangesRefusal::Off { node: self.node });
        }
        let mut journaled = self.journaled.clone();
        let wait = request.wait_ms.min(CHANGES_WAIT_MS_MAX);
        let reached = journaled.wait_for(|last| *last >= request.from.index);
        // A timeout answers with what there is (perhaps nothing).
        let _ = tokio::time::timeout(std::time::Duration::from_millis(wait.into()), reached).await;
        // The journal lags the applied entries by a batch of the WAL's work: one still behind
        // them after the wait has stopped (a write failed), and a reader must go elsewhere.
        let journaled = *self.journaled.borrow();
        // The journal follows the applied entries: what it holds was applied.
        let applied = applied.max(journaled);
        if wait > 0 && journaled < request.from.index && applied >= request.from.index {
            let reason = format!("its journal stopped at entry {journaled}, applied {applied}");
            return Err(self.unreadable(reason));
        }
        let source = std::sync::Arc::clone(&self);
        let read = tokio::task::spawn_blocking(move || source.read(&request, applied)).await;
        read.unwrap_or_else(|error| Err(self.unreadable(error.to_string())))
    }

    fn unreadable(&self, reason: String) -> ChangesRefusal {
        ChangesRefusal::Unreadable {
            node: self.node,
            reason,
        }
    }

    /// Reads the changes `request` asks for from the journal.
    fn read(
        &self,
        request: &ChangesRequest,
        applied: EntryIndex,
    ) -> Result<ChangeBatch, ChangesRefusal> {
        let from = ChangePosition {
            index: request.from.index.max(EntryIndex(1)),
            position: request.from.position,
        };
        let files = journal_files(&Files, &self.dir).map_err(|e| self.unreadable(e.to_string()))?;
        let mut batch = ChangeBatch {
            node: self.node,
            entries: Vec::new(),
            next: from,
            applied,
        };
        let Some(&(oldest, _)) = files.first() else {
            return Ok(batch);
        };
        if from.index < oldest {
            return Err(ChangesRefusal::Gone {
                node: self.node,
                asked: from.index,
                oldest,
            });
        }
        let (start, previous) = self.start(&files, from.index);
        let budget = request.bytes_max.clamp(1, CHANGES_ANSWER_BYTES_MAX) as usize;
        let mut reading = Reading {
            from,
            budget,
            used: 0,
            version: start.version,
            cursor: None,
        };
        let first_file = files.iter().position(|(_, path)| *path == start.path);
        for (at, (_, path)) in files.iter().enumerate().skip(first_file.unwrap_or(0)) {
            let offset = if Some(at) == first_file {
                start.offset
            } else {
                0
            };
            let bytes = read_from(path, offset)
                .map_err(|e| self.unreadable(format!("{}: {e}", path.display())))?;
            let done = reading.records(&bytes, (path, offset), &mut batch, self.node)?;
            if done {
                break;
            }
        }
        let mut ended = reading.cursor.unwrap_or(start);
        let now = Instant::now();
        ended.reader = Some(Reader::answered(previous, (batch.next.index, applied), now));
        self.keep(ended);
        Ok(batch)
    }

    /// The journal's last entry and the readers answered lately, as of `now` with `applied`
    /// applied.
    pub(crate) fn figures(&self, applied: EntryIndex, now: Instant) -> ChangeFigures {
        let mut figures = ChangeFigures {
            journaled: *self.journaled.borrow(),
            ..ChangeFigures::default()
        };
        let active = Duration::from_millis(READER_ACTIVE_MS);
        let cursors = self.lock_cursors();
        for cursor in cursors.iter() {
            let Some(reader) = cursor.reader else {
                continue;
            };
            if now.saturating_duration_since(reader.answered) > active {
                continue;
            }
            figures.readers += 1;
            let behind = applied.0.saturating_sub(cursor.next.0.saturating_sub(1));
            figures.behind_entries = figures.behind_entries.max(behind);
            if behind > 0 {
                let seconds = now.saturating_duration_since(reader.since).as_secs_f64();
                figures.behind_seconds = figures.behind_seconds.max(seconds);
            }
        }
        figures
    }

    fn lock_cursors(&self) -> std::sync::MutexGuard<'_, VecDeque<Cursor>> {
        self.cursors
            .lock()
            .expect("no reader panics holding the cursors")
    }

    /// Where to start reading for entry `from`: a kept cursor at it (its reader taken: the
    /// answer's end will carry it), else the start of the last file that begins at or before
    /// it.
    fn start(&self, files: &[(EntryIndex, PathBuf)], from: EntryIndex) -> (Cursor, Option<Reader>) {
        let mut cursors = self.lock_cursors();
        let kept = (cursors.iter_mut())
            .find(|c| c.next == from && files.iter().any(|(_, path)| *path == c.path));
        if let Some(cursor) = kept {
            let reader = cursor.reader.take();
            return (cursor.clone(), reader);
        }
        let file = files.iter().rev().find(|(first, _)| *first <= from);
        let (_, path) = file.unwrap_or(&files[0]);
        let cursor = Cursor {
            next: from,
            path: path.clone(),
            offset: 0,
            version: 0,
            reader: None,
        };
        (cursor, None)
    }

    fn keep(&self, cursor: Cursor) {
        let mut cursors = self.lock_cursors();
        cursors.retain(|c| c.next != cursor.next);
        if cursors.len() == CURSORS_KEPT {
            cursors.pop_front();
        }
        cursors.push_back(cursor);
    }
}

/// The bytes of the file at `path` from `offset` on.
fn read_from(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// One answer being read: what it starts from, its bytes, the version of the record before
/// the next one, and where it ends.
struct Reading {
    from: ChangePosition,
    budget: usize,
    used: usize,
    version: u32,
    cursor: Option<Cursor>,
}

impl Reading {
    /// Takes the records of one file's `bytes` (read from `offset` of `path`) into `batch`;
    /// true when the answer is complete (full, or at a gap after some entries).
    fn records(
        &mut self,
        bytes: &[u8],
        (path, offset): (&Path, u64),
        batch: &mut ChangeBatch,
        node: NodeId,
    ) -> Result<bool, ChangesRefusal> {
        let mut at = 0;
        while let Some((record, used)) = JournalRecord::decode(&bytes[at..]) {
            let expected = batch.next.index;
            if record.index < expected {
                // Before the position, or journaled again after a restart.
                self.version = record.version;
                at += used;
                continue;
            }
            let taken = record.index == expected;
            let Some(changes) = record.changes.as_ref().filter(|_| taken) else {
                let missing = ChangesRefusal::Missing {
                    node,
                    from: expected,
                    to: if taken { expected } else { record.index.prev() },
                };
                return if batch.entries.is_empty() {
                    Err(missing)
                } else {
                    Ok(true)
                };
            };
            let changes = self.past_position(record.index, changes).map_err(|error| {
                let reason = format!("entry {}: {error}", record.index);
                ChangesRefusal::Unreadable { node, reason }
            })?;
            let size = changes.len();
            if size > net::frame::FRAME_BODY_BYTES_MAX - ANSWER_FIXED_BYTES_MAX {
                let reason = format!(
                    "entry {}'s changes ({size} bytes) exceed a frame",
                    record.index
                );
                return Err(ChangesRefusal::Unreadable { node, reason });
            }
            if !batch.entries.is_empty() && self.used + size > self.budget {
                return Ok(true);
            }
            if size > 0 || record.version != self.version {
                batch.entries.push(ChangeEntry {
                    index: record.index,
                    version: record.version,
                    changes,
                });
            }
            self.used += size;
            self.version = record.version;
            at += used;
            batch.next = ChangePosition {
                index: record.index.next(),
                position: 0,
            };
            self.cursor = Some(Cursor {
                next: batch.next.index,
                path: path.to_path_buf(),
                offset: offset + at as u64,
                version: record.version,
                reader: None,
            });
        }
        Ok(self.used >= self.budget)
    }

    /// An entry's changes, without those before the position asked for in the entry asked
    /// for.
    fn past_position(
        &self,
        index: EntryIndex,
        changes: &[u8],
    ) -> Result<Vec<u8>, crate::apply::MalformedChanges> {
        let all = crate::apply::changes(changes)?;
        if index != self.from.index || self.from.position == 0 {
            return Ok(changes.to_vec());
        }
        let mut kept = crate::apply::Ran::default();
        for change in all.iter().filter(|c| c.position >= self.from.position) {
            kept.push_change(change);
        }
        Ok(kept.changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::{Change, Ran};
    use crate::ids::StateHash;
    use crate::storage::journal::JournalWriter;
    use std::sync::Arc;

    /// A journal in `dir` holding entries `1..=last`, each with one command, and the change
    /// stream served from it (the watch says the journal wrote through `last`).
    fn source(dir: &Path, last: u64) -> (Arc<ChangeSource>, watch::Sender<EntryIndex>) {
        let mut writer = JournalWriter::open(dir).unwrap();
        for index in 1..=last {
            let mut ran = Ran {
                fingerprints: vec![1],
                version: 1,
                kept: true,
                ..Ran::default()
            };
            let command = index.to_le_bytes();
            ran.push_change(&Change {
                position: 0,
                command: &command,
                outcome: b"ok",
            });
            let record = JournalRecord::of(EntryIndex(index), StateHash([0; 32]), ran);
            writer.append(&record);
        }
        writer.flush().unwrap();
        let (journaled, watch) = watch::channel(EntryIndex(last));
        let source = ChangeSource::new((NodeId(2), true), dir, watch);
        (Arc::new(source), journaled)
    }

    fn request(from: u64, wait_ms: u32) -> ChangesRequest {
        ChangesRequest {
            from: ChangePosition {
                index: EntryIndex(from),
                position: 0,
            },
            bytes_max: CHANGES_ANSWER_BYTES_MAX,
            wait_ms,
        }
    }

    /// Proves a node whose journal stopped short of its applied entries (a write failed)
    /// refuses, after the reader's wait, the entries it cannot serve as unreadable, naming
    /// where the journal stopped, while what the journal holds is still served.
    #[tokio::test]
    async fn a_journal_that_stopped_short_is_unreadable_past_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let (source, _journaled) = source(dir.path(), 5);
        let answer = Arc::clone(&source).answer(request(6, 20), EntryIndex(9));
        match answer.await {
            Err(ChangesRefusal::Unreadable { node, reason }) => {
                assert_eq!(node, NodeId(2));
                assert!(reason.contains("stopped at entry 5"), "{reason}");
            }
            other => panic!("expected unreadable, got {other:?}"),
        }
        let served = Arc::clone(&source).answer(request(3, 20), EntryIndex(9));
        let batch = served.await.expect("the journaled entries are served");
        let indexes: Vec<u64> = batch.entries.iter().map(|e| e.index.0).collect();
        assert_eq!(indexes, [3, 4, 5]);
        assert_eq!(batch.next.index, EntryIndex(6));
    }

    /// Proves the node's figures count the readers it answered lately, how many applied
    /// entries the furthest behind lacks and since when, and that a reader that caught up
    /// lacks nothing; readers answered longer ago than the window do not count.
    #[tokio::test]
    async fn the_figures_follow_the_readers_answered() {
        let dir = tempfile::tempdir().unwrap();
        let (source, _journaled) = source(dir.path(), 8);
        let small = ChangesRequest {
            bytes_max: 1,
            ..request(1, 0)
        };
        let first = Arc::clone(&source).answer(small, EntryIndex(8)).await;
        assert_eq!(first.unwrap().next.index, EntryIndex(2));
        let started = Instant::now();
        let figures = source.figures(EntryIndex(8), started);
        assert_eq!((figures.journaled, figures.readers), (EntryIndex(8), 1));
        assert_eq!(figures.behind_entries, 7);
        let later = started + Duration::from_secs(3);
        let behind = source.figures(EntryIndex(8), later).behind_seconds;
        assert!(behind >= 3.0, "behind for {behind} s");
        // The same reader goes on where it stopped and reaches the end: it lacks nothing.
        let rest = Arc::clone(&source)
            .answer(request(2, 0), EntryIndex(8))
            .await;
        assert_eq!(rest.unwrap().next.index, EntryIndex(9));
        let figures = source.figures(EntryIndex(8), Instant::now());
        assert_eq!((figures.readers, figures.behind_entries), (1, 0));
        assert_eq!(figures.behind_seconds, 0.0);
        // Another reader reads from entry 2 again: the same entries, from the cursor kept
        // there; the place it left is no reader, and two readers at one end count once.
        let again = Arc::clone(&source)
            .answer(request(2, 0), EntryIndex(8))
            .await;
        let indexes: Vec<u64> = again.unwrap().entries.iter().map(|e| e.index.0).collect();
        assert_eq!(indexes, (2..=8).collect::<Vec<_>>());
        assert_eq!(source.figures(EntryIndex(8), Instant::now()).readers, 1);
        // Two entries applied since: it lacks them, for no longer than since its answer.
        let now = Instant::now();
        let figures = source.figures(EntryIndex(10), now);
        assert_eq!(figures.behind_entries, 2);
        assert!(figures.behind_seconds < 3.0);
        let gone = now + Duration::from_millis(READER_ACTIVE_MS + 1);
        assert_eq!(source.figures(EntryIndex(10), gone).readers, 0);
    }
}
