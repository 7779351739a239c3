//! The change stream, node side: the committed commands this node applied and their outcomes,
//! from a position on, read from its apply journal (`journal.rs`), which holds what each
//! command answered. Only applied entries are journaled, so only committed commands are ever
//! served; the journal's files go with the log's segments, so the stream serves what the log
//! still holds (`notes/decisions/changes.md`).

use super::journal::{JOURNAL_DIR, JournalRecord, journal_files};
use crate::ids::{EntryIndex, NodeId};
use net::message::{ChangeBatch, ChangeEntry, ChangePosition, ChangesRefusal, ChangesRequest};
use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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

/// Where an answer ended in the journal: the next entry, where its record starts, and the
/// handler version of the record before it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cursor {
    next: EntryIndex,
    path: PathBuf,
    offset: u64,
    version: u32,
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
        let files = journal_files(&self.dir).map_err(|e| self.unreadable(e.to_string()))?;
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
        let start = self.start(&files, from.index);
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
            let bytes = read_from(path, offset).map_err(|e| self.unreadable(e))?;
            let done = reading.records(&bytes, (path, offset), &mut batch, self.node)?;
            if done {
                break;
            }
        }
        if let Some(cursor) = reading.cursor {
            self.keep(cursor);
        }
        Ok(batch)
    }

    /// Where to start reading for entry `from`: a kept cursor at it, else the start of the
    /// last file that begins at or before it.
    fn start(&self, files: &[(EntryIndex, PathBuf)], from: EntryIndex) -> Cursor {
        let cursors = self
            .cursors
            .lock()
            .expect("no reader panics holding the cursors");
        let kept = cursors.iter().find(|c| c.next == from);
        if let Some(cursor) = kept.filter(|c| files.iter().any(|(_, path)| *path == c.path)) {
            return cursor.clone();
        }
        let file = files.iter().rev().find(|(first, _)| *first <= from);
        let (_, path) = file.unwrap_or(&files[0]);
        Cursor {
            next: from,
            path: path.clone(),
            offset: 0,
            version: 0,
        }
    }

    fn keep(&self, cursor: Cursor) {
        let mut cursors = self
            .cursors
            .lock()
            .expect("no reader panics holding the cursors");
        cursors.retain(|c| c.next != cursor.next);
        if cursors.len() == CURSORS_KEPT {
            cursors.pop_front();
        }
        cursors.push_back(cursor);
    }
}

/// The bytes of the file at `path` from `offset` on.
fn read_from(path: &Path, offset: u64) -> Result<Vec<u8>, String> {
    let describe = |error: std::io::Error| format!("{}: {error}", path.display());
    let mut file = std::fs::File::open(path).map_err(describe)?;
    file.seek(SeekFrom::Start(offset)).map_err(describe)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(describe)?;
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
