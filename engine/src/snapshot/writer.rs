//! The background snapshot writer: a thread that takes a snapshot's bytes as the node's scan
//! produces them, hashes and writes them to a temporary file, and once the scan is done
//! appends the digest, fsyncs, renames, fsyncs the directory, removes all but the newest few
//! snapshots and reports the new one.

use super::{SNAPSHOTS_KEPT, SnapshotError, SnapshotMeta, list_snapshots, snapshot_path};
use crate::files;
use crate::ids::EntryIndex;
use std::fs;
use std::io::Write;
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
struct Open {
    index: EntryIndex,
    temporary: PathBuf,
    file: fs::File,
    hasher: blake3::Hasher,
    bytes: u64,
    started: Instant,
}

fn run(
    dir: &Path,
    queue: &mpsc::Receiver<WriterOp>,
    report: impl Fn(Result<Durable, SnapshotError>) -> bool,
) {
    super::priority::lower_current_thread();
    let mut open: Option<Open> = None;
    // After a failure, the rest of that snapshot's work is skipped.
    let mut failed = false;
    while let Ok(op) = queue.recv() {
        let outcome = match op {
            WriterOp::Begin(index) => {
                drop_open(&mut open);
                failed = false;
                start(dir, index).map(|started| {
                    open = Some(started);
                    None
                })
            }
            WriterOp::Bytes(bytes) => match open.as_mut() {
                Some(file) if !failed => {
                    file.hasher.update(&bytes);
                    file.bytes += bytes.len() as u64;
                    file.file
                        .write_all(&bytes)
                        .map(|()| None)
                        .map_err(io_error(&file.temporary))
                }
                Some(_) | None => Ok(None),
            },
            WriterOp::Finish(meta) => match open.take() {
                Some(file) if !failed => finish(dir, file, meta).map(Some),
                Some(_) | None => Ok(None),
            },
            WriterOp::Abort => {
                drop_open(&mut open);
                Ok(None)
            }
        };
        let keep_going = match outcome {
            Ok(None) => true,
            Ok(Some(durable)) => report(Ok(durable)),
            Err(error) => {
                failed = true;
                drop_open(&mut open);
                report(Err(error))
            }
        };
        if !keep_going {
            return;
        }
    }
    drop_open(&mut open);
}

/// The error of an operation on `path` that the file system refused (the path is copied only
/// when there is an error).
fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn file_error(error: files::FileError) -> SnapshotError {
    SnapshotError::Io {
        path: error.path,
        source: error.source,
    }
}

fn start(dir: &Path, index: EntryIndex) -> Result<Open, SnapshotError> {
    let temporary = snapshot_path(dir, index).with_extension("tmp");
    let file = files::create_dir_all(dir)
        .and_then(|()| files::create(&temporary))
        .map_err(file_error)?;
    Ok(Open {
        index,
        temporary,
        file,
        hasher: blake3::Hasher::new(),
        bytes: 0,
        started: Instant::now(),
    })
}

/// Appends the digest, fsyncs, renames into place, fsyncs the directory, prunes.
fn finish(dir: &Path, mut open: Open, meta: SnapshotMeta) -> Result<Durable, SnapshotError> {
    assert_eq!(
        meta.index, open.index,
        "the snapshot begun is the one finished"
    );
    let digest = open.hasher.finalize();
    let path = snapshot_path(dir, open.index);
    let written = open
        .file
        .write_all(digest.as_bytes())
        .map_err(files::at(&open.temporary))
        .and_then(|()| files::publish(open.file, &open.temporary, &path));
    if let Err(error) = written {
        // A full disk or a failed fsync: the partial file goes (the WAL still holds the log).
        let _ = fs::remove_file(&open.temporary);
        return Err(file_error(error));
    }
    prune(dir);
    Ok(Durable {
        meta,
        path,
        bytes: open.bytes + digest.as_bytes().len() as u64,
        took: open.started.elapsed(),
    })
}

fn drop_open(open: &mut Option<Open>) {
    if let Some(open) = open.take() {
        drop(open.file);
        let _ = fs::remove_file(&open.temporary);
    }
}

/// Removes all but the newest [`SNAPSHOTS_KEPT`] snapshots, and leftover temporary files.
fn prune(dir: &Path) {
    for (_, path) in list_snapshots(dir)
        .unwrap_or_default()
        .into_iter()
        .skip(SNAPSHOTS_KEPT)
    {
        let _ = fs::remove_file(path);
    }
    for item in fs::read_dir(dir).into_iter().flatten().flatten() {
        if item.path().extension().is_some_and(|e| e == "tmp") {
            let _ = fs::remove_file(item.path());
        }
    }
}
