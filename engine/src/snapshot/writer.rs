//! The background snapshot writer: a thread that applies captures to its mirror of the state
//! and, once the newest persisted snapshot has been kept for the retention period, persists the
//! mirror as a new snapshot and removes all but the newest few.

use super::{
    Capture, SNAPSHOTS_KEPT, SnapshotMeta, encode_snapshot, list_snapshots, write_snapshot,
};
use crate::apply::Session;
use crate::ids::ClientId;
use crate::state::Mirrors;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
}

/// A copy of a node's committed state, rebuilt from its captures.
pub struct Mirror {
    tables: Mirrors,
    sessions: BTreeMap<ClientId, Session>,
    meta: Option<SnapshotMeta>,
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
        let mirror = Mirror::new(tables);
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || run(dir, mirror, retain, queue, report))?;
        Ok(SnapshotWriter { captures })
    }

    /// Hands a capture over; false once the writer has stopped.
    pub fn send(&self, capture: Capture) -> bool {
        self.captures.send(capture).is_ok()
    }
}

fn run(
    dir: PathBuf,
    mut mirror: Mirror,
    retain: Duration,
    queue: mpsc::Receiver<Capture>,
    report: impl Fn(Result<Durable, String>) -> bool,
) {
    // The newest snapshot on disk counts as just persisted: it is kept a full period too.
    let mut persisted_at = Instant::now();
    while let Ok(first) = queue.recv() {
        for capture in std::iter::once(first).chain(queue.try_iter()) {
            mirror.apply(capture);
        }
        if persisted_at.elapsed() < retain {
            continue;
        }
        let (Some(meta), Some(bytes)) = (mirror.meta.clone(), mirror.encode()) else {
            continue;
        };
        let started = Instant::now();
        let outcome = write_snapshot(&dir, meta.index, &bytes).map_err(|e| e.to_string());
        persisted_at = Instant::now();
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
        }
    }

    /// What the mirror covers, once it has applied a capture.
    pub fn meta(&self) -> Option<&SnapshotMeta> {
        self.meta.as_ref()
    }

    /// The snapshot file's bytes for the mirror's content.
    pub fn encode(&self) -> Option<Vec<u8>> {
        let meta = self.meta.as_ref()?;
        Some(encode_snapshot(meta, &self.tables, self.sessions.iter()))
    }

    /// Applies a capture: the mirror then covers it.
    pub fn apply(&mut self, capture: Capture) {
        for (id, changed) in capture.tables {
            let table = self
                .tables
                .iter_mut()
                .find(|(t, _)| *t == id)
                .expect("a table of the schema");
            table.1.apply(changed);
        }
        for (client, session) in capture.sessions {
            match session {
                Some(session) => self.sessions.insert(client, session),
                None => self.sessions.remove(&client),
            };
        }
        self.meta = Some(capture.meta);
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
