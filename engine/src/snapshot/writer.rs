//! The background snapshot writer: a thread that applies captures to its mirror of the state
//! and, once the newest persisted snapshot has been kept for the retention period, persists the
//! mirror as a new snapshot and removes all but the newest few.

use super::{
    Capture, SNAPSHOT_BACKLOG_CAPTURES_MAX, SNAPSHOT_LOG_PERCENT, SNAPSHOTS_KEPT, SnapshotMeta,
    encode_snapshot_into, list_snapshots, write_snapshot,
};
use crate::apply::Session;
use crate::ids::ClientId;
use crate::state::{Mirrors, TableId};
use std::any::Any;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A snapshot made durable.
#[derive(Clone, Debug)]
pub struct Durable {
    /// What it covers.
    pub meta: SnapshotMeta,
    /// Its file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Time spent encoding and writing it.
    pub took: Duration,
}

/// The node's handle on its snapshot writer thread.
pub struct SnapshotWriter {
    captures: mpsc::Sender<Capture>,
    returned: mpsc::Receiver<Returned>,
    /// Captures handed over and not applied yet.
    backlog: Arc<AtomicUsize>,
}

/// A capture's buffers, emptied by the writer and handed back for the node's next capture
/// (reusing them keeps the node from faulting in fresh memory for every capture).
pub struct Returned {
    pub(crate) tables: Vec<(TableId, Box<dyn Any + Send>)>,
}

/// A copy of a node's committed state, rebuilt from its captures.
pub struct Mirror {
    tables: Mirrors,
    sessions: BTreeMap<ClientId, Session>,
    meta: Option<SnapshotMeta>,
    log_bytes: u64,
}

impl SnapshotWriter {
    /// Starts the writer: snapshots go to `dir`, each kept at least `retain` before a newer one
    /// replaces it; `report` hears of each one made durable (or of a failure).
    pub fn spawn(
        dir: PathBuf,
        tables: Mirrors,
        retain: Duration,
        report: impl Fn(Result<Durable, String>) -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let (captures, queue) = mpsc::channel();
        let (give_back, returned) = mpsc::channel();
        let mirror = Mirror::new(tables);
        let backlog = Arc::new(AtomicUsize::new(0));
        let applied = backlog.clone();
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || run(dir, mirror, retain, queue, give_back, applied, report))?;
        Ok(SnapshotWriter {
            captures,
            returned,
            backlog,
        })
    }

    /// True when the writer can take another capture: fewer than
    /// [`SNAPSHOT_BACKLOG_CAPTURES_MAX`] wait. Otherwise the node leaves the writes in its
    /// journal for a later capture (memory stays bounded when the writer falls behind).
    pub fn has_room(&self) -> bool {
        self.backlog.load(Ordering::Relaxed) < SNAPSHOT_BACKLOG_CAPTURES_MAX
    }

    /// Hands a capture over; false once the writer has stopped.
    pub fn send(&self, capture: Capture) -> bool {
        self.backlog.fetch_add(1, Ordering::Relaxed);
        self.captures.send(capture).is_ok()
    }

    /// Buffers of earlier captures, emptied, for [`crate::StateMachine::recycle`].
    pub fn returned(&self) -> impl Iterator<Item = Returned> + '_ {
        self.returned.try_iter()
    }
}

fn run(
    dir: PathBuf,
    mut mirror: Mirror,
    retain: Duration,
    queue: mpsc::Receiver<Capture>,
    give_back: mpsc::Sender<Returned>,
    backlog: Arc<AtomicUsize>,
    report: impl Fn(Result<Durable, String>) -> bool,
) {
    super::priority::lower_current_thread();
    // The newest snapshot on disk counts as just persisted: it is kept a full period too.
    let mut persisted_at = Instant::now();
    let mut persisted_log_bytes = 0;
    let mut persisted_bytes = 0;
    // Kept across snapshots: a fresh buffer would fault in every page again each time.
    let mut bytes = Vec::new();
    while let Ok(first) = queue.recv() {
        for capture in std::iter::once(first).chain(queue.try_iter()) {
            let _ = give_back.send(mirror.apply(capture));
            backlog.fetch_sub(1, Ordering::Relaxed);
        }
        let log_written = mirror.log_bytes.saturating_sub(persisted_log_bytes);
        if persisted_at.elapsed() < retain
            || log_written * 100 < persisted_bytes * SNAPSHOT_LOG_PERCENT
        {
            continue;
        }
        let Some(meta) = mirror.meta.clone() else {
            continue;
        };
        let started = Instant::now();
        mirror.encode_into(&mut bytes);
        let outcome = write_snapshot(&dir, meta.index, &bytes).map_err(|e| e.to_string());
        persisted_at = Instant::now();
        persisted_log_bytes = mirror.log_bytes;
        persisted_bytes = bytes.len() as u64;
        let outcome = outcome.map(|(path, bytes)| {
            prune(&dir);
            Durable {
                meta,
                path,
                bytes,
                took: started.elapsed(),
            }
        });
        if !report(outcome) {
            return;
        }
    }
}

impl Mirror {
    /// An empty mirror of these tables (from [`crate::StateMachine::mirrors`]).
    pub fn new(tables: Mirrors) -> Self {
        Mirror {
            tables,
            sessions: BTreeMap::new(),
            meta: None,
            log_bytes: 0,
        }
    }

    /// What the mirror covers, once it has applied a capture.
    pub fn meta(&self) -> Option<&SnapshotMeta> {
        self.meta.as_ref()
    }

    /// The snapshot file's bytes for the mirror's content.
    pub fn encode(&mut self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.meta.as_ref()?;
        self.encode_into(&mut out);
        Some(out)
    }

    /// Replaces `out` with the snapshot file's bytes for the mirror's content (nothing before
    /// the first capture).
    pub fn encode_into(&mut self, out: &mut Vec<u8>) {
        out.clear();
        for (_, table) in &mut self.tables {
            table.merge();
        }
        if let Some(meta) = &self.meta {
            encode_snapshot_into(meta, &self.tables, self.sessions.iter(), out);
        }
    }

    /// Applies a capture: the mirror then covers it. Returns the capture's emptied buffers.
    pub fn apply(&mut self, capture: Capture) -> Returned {
        let mut returned = Vec::with_capacity(capture.tables.len());
        for (id, changed) in capture.tables {
            let table = self
                .tables
                .iter_mut()
                .find(|(t, _)| *t == id)
                .expect("a table of the schema");
            returned.push((id, table.1.apply(changed)));
        }
        for (client, session) in capture.sessions {
            match session {
                Some(session) => self.sessions.insert(client, session),
                None => self.sessions.remove(&client),
            };
        }
        self.meta = Some(capture.meta);
        self.log_bytes = capture.log_bytes;
        Returned { tables: returned }
    }
}

/// Removes all but the newest [`SNAPSHOTS_KEPT`] snapshots, and leftover temporary files.
fn prune(dir: &Path) {
    for (_, path) in list_snapshots(dir).into_iter().skip(SNAPSHOTS_KEPT) {
        let _ = std::fs::remove_file(path);
    }
    for item in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if item.path().extension().is_some_and(|e| e == "tmp") {
            let _ = std::fs::remove_file(item.path());
        }
    }
}
