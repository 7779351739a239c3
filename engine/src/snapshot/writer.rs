//! The background snapshot writer: a thread that takes a snapshot's bytes as the node's scan
//! produces them, hashes and writes them to a temporary file, and once the scan is done
//! appends the digest, fsyncs, renames, fsyncs the directory, removes all but the newest few
//! snapshots (and the deltas no kept snapshot's chain holds) and reports the new one. A delta
//! says so by its magic: it is renamed to a delta's name.

use super::{
    DIGEST_BYTES, SNAPSHOTS_KEPT, SnapshotError, SnapshotLink, SnapshotMeta, delta_path, is_delta,
    list_deltas_on, list_snapshots_on, snapshot_path,
};
use crate::ids::EntryIndex;
use crate::storage::{Files, Storage, StorageFile};
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
    /// Time from the start of its scan to its rename.
    pub took: Duration,
    /// The blake3 digest that ends it.
    pub digest: [u8; DIGEST_BYTES],
    /// A delta (`notes/decisions/snapshot-deltas.md`), not a whole snapshot.
    pub delta: bool,
}

impl Durable {
    /// The link a delta over this file carries.
    pub fn link(&self) -> SnapshotLink {
        SnapshotLink {
            index: self.meta.index,
            digest: self.digest,
        }
    }
}

/// Work for the writer, in order.
enum WriterOp {
    /// A snapshot of this entry starts.
    Begin(EntryIndex),
    /// Its next bytes.
    Bytes(Vec<u8>),
    /// Its content is complete.
    Finish(SnapshotMeta),
    /// It is dropped.
    Abort,
}

/// The node's handle on its snapshot writer thread.
pub struct SnapshotWriter {
    ops: mpsc::Sender<WriterOp>,
}

impl SnapshotWriter {
    /// Starts the writer: snapshots go to `dir`; `report` hears of each one made durable (or of
    /// a failure: [`SnapshotError::Io`], with the file or directory refused).
    pub fn spawn(
        dir: PathBuf,
        report: impl Fn(Result<Durable, SnapshotError>) -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let (ops, queue) = mpsc::channel();
        // The node's span (`node{id=N}`) follows the writer onto its thread.
        let span = tracing::Span::current();
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || {
                let _entered = span.entered();
                run(&dir, &queue, report)
            })?;
        Ok(SnapshotWriter { ops })
    }

    /// Starts a snapshot of entry `index`; false once the writer has stopped.
    pub fn begin(&self, index: EntryIndex) -> bool {
        self.ops.send(WriterOp::Begin(index)).is_ok()
    }

    /// Hands over the snapshot's next bytes.
    pub fn bytes(&self, bytes: Vec<u8>) -> bool {
        self.ops.send(WriterOp::Bytes(bytes)).is_ok()
    }

    /// The snapshot's content is complete: make it durable.
    pub fn finish(&self, meta: SnapshotMeta) -> bool {
        self.ops.send(WriterOp::Finish(meta)).is_ok()
    }

    /// Drops the snapshot in progress.
    pub fn abort(&self) -> bool {
        self.ops.send(WriterOp::Abort).is_ok()
    }
}

/// A snapshot file being written.
struct Open<F> {
    index: EntryIndex,
    temporary: PathBuf,
    file: F,
    hasher: blake3::Hasher,
    bytes: u64,
    started: Instant,
    /// The content begins as a delta's.
    delta: bool,
}

/// A node's snapshot files as they are written, one snapshot at a time: the writer thread
/// runs it over the real file system, the simulator over its simulated disk. After a failure
/// the rest of that snapshot's work is skipped.
pub struct SnapshotFiles<S: Storage> {
    storage: S,
    dir: PathBuf,
    open: Option<Open<S::File>>,
    failed: bool,
}

impl<S: Storage> SnapshotFiles<S> {
    /// Snapshots written to `dir` on `storage`.
    pub fn new(storage: S, dir: PathBuf) -> Self {
        SnapshotFiles {
            storage,
            dir,
            open: None,
            failed: false,
        }
    }

    /// Starts a snapshot of entry `index` in a temporary file (one in progress is dropped).
    pub fn begin(&mut self, index: EntryIndex) -> Result<(), SnapshotError> {
        self.check_invariants();
        self.drop_open();
        self.failed = false;
        let started = start(&self.storage, &self.dir, index);
        self.open = Some(self.guard(started)?);
        Ok(())
    }

    /// Writes the snapshot's next bytes.
    pub fn bytes(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        self.check_invariants();
        let Some(open) = self.open.as_mut().filter(|_| !self.failed) else {
            return Ok(());
        };
        if open.bytes == 0 {
            open.delta = is_delta(bytes);
        }
        open.hasher.update(bytes);
        let written = open.file.write_all_at(bytes, open.bytes);
        open.bytes += bytes.len() as u64;
        assert_eq!(
            open.hasher.count(),
            open.bytes,
            "snapshot {}: the digest covers the bytes written",
            open.index
        );
        let written = written.map_err(io_error(&open.temporary));
        self.guard(written)
    }

    /// Ends the snapshot: the digest appended, the file fsynced and renamed into place, the
    /// directory fsynced, all but the newest [`SNAPSHOTS_KEPT`] removed. `None` when there
    /// is no snapshot to finish (none begun, or it failed).
    pub fn finish(&mut self, meta: SnapshotMeta) -> Result<Option<Durable>, SnapshotError> {
        self.check_invariants();
        let open = match self.open.take() {
            Some(open) if !self.failed => open,
            Some(_) | None => return Ok(None),
        };
        let finished = finish(&self.storage, &self.dir, open, meta);
        self.guard(finished).map(Some)
    }

    /// Drops the snapshot in progress.
    pub fn abort(&mut self) {
        self.drop_open();
    }

    /// A failed snapshot keeps no file open: the rest of its work is skipped.
    fn check_invariants(&self) {
        assert!(
            !(self.failed && self.open.is_some()),
            "a failed snapshot keeps no file open"
        );
    }

    fn guard<T>(&mut self, result: Result<T, SnapshotError>) -> Result<T, SnapshotError> {
        if result.is_err() {
            self.failed = true;
            self.drop_open();
        }
        result
    }

    fn drop_open(&mut self) {
        if let Some(open) = self.open.take() {
            drop(open.file);
            let _ = self.storage.remove_file(&open.temporary);
        }
    }
}

fn run(
    dir: &Path,
    queue: &mpsc::Receiver<WriterOp>,
    report: impl Fn(Result<Durable, SnapshotError>) -> bool,
) {
    super::priority::lower_current_thread();
    let mut files = SnapshotFiles::new(Files, dir.to_path_buf());
    while let Ok(op) = queue.recv() {
        let outcome = match op {
            WriterOp::Begin(index) => files.begin(index).map(|()| None),
            WriterOp::Bytes(bytes) => files.bytes(&bytes).map(|()| None),
            WriterOp::Finish(meta) => files.finish(meta),
            WriterOp::Abort => {
                files.abort();
                Ok(None)
            }
        };
        let keep_going = match outcome {
            Ok(None) => true,
            Ok(Some(durable)) => report(Ok(durable)),
            Err(error) => report(Err(error)),
        };
        if !keep_going {
            return;
        }
    }
    files.abort();
}

/// The error of an operation on `path` that the file system refused (the path is copied only
/// when there is an error).
fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn start<S: Storage>(
    storage: &S,
    dir: &Path,
    index: EntryIndex,
) -> Result<Open<S::File>, SnapshotError> {
    let temporary = snapshot_path(dir, index).with_extension("tmp");
    // A temporary file is never listed as a snapshot, and pruning removes it.
    assert_ne!(
        temporary,
        snapshot_path(dir, index),
        "a snapshot is written under another name first"
    );
    storage.create_dir_all(dir).map_err(io_error(dir))?;
    let file = storage
        .create_replacing(&temporary)
        .map_err(io_error(&temporary))?;
    Ok(Open {
        index,
        temporary,
        file,
        hasher: blake3::Hasher::new(),
        bytes: 0,
        started: Instant::now(),
        delta: false,
    })
}

/// Appends the digest, fsyncs, renames into place, fsyncs the directory, prunes.
fn finish<S: Storage>(
    storage: &S,
    dir: &Path,
    open: Open<S::File>,
    meta: SnapshotMeta,
) -> Result<Durable, SnapshotError> {
    assert_eq!(
        meta.index, open.index,
        "the snapshot begun is the one finished"
    );
    assert!(
        open.bytes > 0,
        "snapshot {}: its content comes before its digest",
        open.index
    );
    assert_eq!(
        open.hasher.count(),
        open.bytes,
        "snapshot {}: the digest covers the bytes written",
        open.index
    );
    let digest = open.hasher.finalize();
    assert_eq!(digest.as_bytes().len(), DIGEST_BYTES, "the digest's size");
    let path = match open.delta {
        true => delta_path(dir, open.index),
        false => snapshot_path(dir, open.index),
    };
    let written = open
        .file
        .write_all_at(digest.as_bytes(), open.bytes)
        .map_err(io_error(&open.temporary));
    let published = written.and_then(|()| {
        let publish = storage.publish(open.file, &open.temporary, &path);
        publish.map_err(io_error(&path))
    });
    if let Err(error) = published {
        // A full disk or a failed fsync: the partial file goes (the WAL still holds the log).
        let _ = storage.remove_file(&open.temporary);
        return Err(error);
    }
    // Debug builds only: it reads the whole file back. What a restart will read verifies.
    debug_assert!(
        storage.read(&path).is_ok_and(|file| {
            let body = file.len() - DIGEST_BYTES.min(file.len());
            file.len() as u64 == open.bytes + DIGEST_BYTES as u64
                && blake3::hash(&file[..body]).as_bytes()[..] == file[body..]
        }),
        "{}: the snapshot reads back whole, its digest holding",
        path.display()
    );
    prune(storage, dir);
    Ok(Durable {
        meta,
        path,
        bytes: open.bytes + digest.as_bytes().len() as u64,
        took: open.started.elapsed(),
        digest: *digest.as_bytes(),
        delta: open.delta,
    })
}

/// Removes all but the newest [`SNAPSHOTS_KEPT`] whole snapshots, the deltas older than the
/// oldest of those (no chain kept holds them), and leftover temporary files.
fn prune<S: Storage>(storage: &S, dir: &Path) {
    let snapshots = list_snapshots_on(storage, dir).unwrap_or_default();
    let kept = snapshots.len().min(SNAPSHOTS_KEPT);
    let oldest_kept = kept.checked_sub(1).map(|at| snapshots[at].0);
    for (_, path) in snapshots.into_iter().skip(SNAPSHOTS_KEPT) {
        let _ = storage.remove_file(&path);
    }
    // Only once a whole snapshot is kept: before it, every delta waits for its chain's start
    // (a node never writes a delta first).
    if let Some(oldest_kept) = oldest_kept {
        let deltas = list_deltas_on(storage, dir).unwrap_or_default();
        for (_, path) in deltas.into_iter().filter(|(index, _)| *index < oldest_kept) {
            let _ = storage.remove_file(&path);
        }
    }
    for path in storage.list(dir).unwrap_or_default() {
        if path.extension().is_some_and(|e| e == "tmp") {
            let _ = storage.remove_file(&path);
        }
    }
}
