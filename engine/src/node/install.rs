//! Moving a snapshot between nodes: the leader streams its newest durable snapshot file in
//! chunks; a follower writes the chunks to a temporary file, and once it has them all, fsyncs,
//! verifies the digest, renames it into place and fsyncs the directory before installing it.

use crate::ids::{EntryIndex, NodeId, Term};
use crate::snapshot::{
    SNAPSHOT_BYTES_MAX, SNAPSHOT_CHUNK_BYTES, Snapshot, read_snapshot, snapshot_path,
};
use net::message::{PeerMessage, SnapshotChunk};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

/// Name of the file a follower assembles an incoming snapshot in, inside the snapshot directory.
const INCOMING_FILE: &str = "incoming.part";

/// Sends the snapshot file at `path` (covering `index`) to a follower through its queue, in
/// chunks of [`SNAPSHOT_CHUNK_BYTES`], waiting for room rather than dropping any.
pub(super) async fn stream_snapshot(
    path: PathBuf,
    (index, term, leader): (EntryIndex, Term, NodeId),
    queue: mpsc::Sender<PeerMessage>,
    send: SnapshotSend,
) -> Result<(), String> {
    let describe = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = tokio::fs::File::open(&path).await.map_err(describe)?;
    let total = file.metadata().await.map_err(describe)?.len();
    let mut offset = 0;
    while offset < total {
        let length = (total - offset).min(SNAPSHOT_CHUNK_BYTES as u64) as usize;
        let mut data = vec![0; length];
        file.read_exact(&mut data).await.map_err(describe)?;
        let closed = |_| "the connection to the follower closed".to_string();
        let room = queue.reserve().await.map_err(closed)?;
        // Checked with the slot in hand, so that nothing can be queued between the check
        // and the chunk: a newer transfer to this follower started, and two would interleave.
        if send.superseded() {
            return Ok(());
        }
        room.send(PeerMessage::Snapshot(SnapshotChunk {
            term,
            leader,
            index,
            offset,
            total,
            data,
        }));
        offset += length as u64;
    }
    Ok(())
}

/// One transfer to a follower: it stops once a newer one to the same follower starts.
pub(super) struct SnapshotSend {
    sends: Arc<AtomicU64>,
    number: u64,
}

impl SnapshotSend {
    /// A new transfer over `sends` (one counter per follower), superseding the one before.
    pub(super) fn next(sends: &Arc<AtomicU64>) -> SnapshotSend {
        SnapshotSend {
            sends: Arc::clone(sends),
            number: sends.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    fn superseded(&self) -> bool {
        self.sends.load(Ordering::Relaxed) != self.number
    }
}

/// A snapshot arriving from the leader.
pub(super) struct Incoming {
    index: EntryIndex,
    total: u64,
    received: u64,
    path: PathBuf,
    file: fs::File,
}

impl Incoming {
    /// Starts assembling the snapshot whose first chunk this is (any earlier one is dropped).
    pub(super) fn start(dir: &Path, chunk: &SnapshotChunk) -> Result<Self, String> {
        if chunk.offset != 0 {
            return Err("a snapshot starts at offset 0".into());
        }
        if chunk.total > SNAPSHOT_BYTES_MAX {
            return Err(format!(
                "a snapshot of {} bytes is over the limit of {SNAPSHOT_BYTES_MAX}",
                chunk.total
            ));
        }
        let path = dir.join(INCOMING_FILE);
        let file = fs::create_dir_all(dir)
            .and_then(|()| fs::File::create(&path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Incoming {
            index: chunk.index,
            total: chunk.total,
            received: 0,
            path,
            file,
        })
    }

    /// Takes the next chunk; true once the whole file is in. A chunk of another snapshot, or
    /// out of order, is an error (the leader sends the snapshot again).
    pub(super) fn take(&mut self, chunk: &SnapshotChunk) -> Result<bool, String> {
        if chunk.index != self.index || chunk.total != self.total || chunk.offset != self.received {
            return Err(format!(
                "chunk at {} of snapshot {} while expecting {} of {}",
                chunk.offset, chunk.index, self.received, self.index
            ));
        }
        if self.received + chunk.data.len() as u64 > self.total || chunk.data.is_empty() {
            return Err("chunk past the end of the snapshot".into());
        }
        self.file
            .write_all(&chunk.data)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.received += chunk.data.len() as u64;
        Ok(self.received == self.total)
    }

    /// Makes the complete file durable, verifies it, and renames it into place; returns the
    /// snapshot read back, its final path and its size.
    pub(super) fn finish(self, dir: &Path) -> Result<(Snapshot, PathBuf, u64), String> {
        let describe = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
        self.file.sync_all().map_err(|e| describe(&self.path, e))?;
        drop(self.file);
        let snapshot = read_snapshot(&self.path).map_err(|e| e.to_string())?;
        if snapshot.meta.index != self.index {
            return Err(format!(
                "the snapshot announced as {} covers {}",
                self.index, snapshot.meta.index
            ));
        }
        let path = snapshot_path(dir, self.index);
        fs::rename(&self.path, &path).map_err(|e| describe(&self.path, e))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| describe(dir, e))?;
        Ok((snapshot, path, self.total))
    }
}
