//! Sending snapshots: the leader streams its newest durable snapshot file in chunks over the
//! peer connection to a follower (which assembles them with [`crate::snapshot::Incoming`]),
//! and any node answers an operator's backup with pieces of a durable snapshot.

use crate::apply::Mode;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::snapshot::{BACKUP_CHUNK_BYTES, SNAPSHOT_CHUNK_BYTES, list_snapshots, snapshot_path};
use crate::storage::{Access, Files, Storage, StorageFile};
use net::message::{BackupChunk, BackupRequest, ClientReply, PeerMessage, SnapshotChunk};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Why a leader stopped sending a snapshot to a follower.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// The file system refused to open or read the snapshot file.
    #[error("{path}: {source}")]
    Io {
        /// The snapshot file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The follower's queue closed (the connection to it is gone).
    #[error("the connection to the follower closed")]
    Closed,
}

/// Sends the snapshot file at `path` (covering `index`) to a follower through its queue, in
/// chunks of [`SNAPSHOT_CHUNK_BYTES`], waiting for room rather than dropping any.
pub(super) async fn stream_snapshot(
    path: PathBuf,
    (index, term, leader): (EntryIndex, Term, NodeId),
    queue: mpsc::Sender<PeerMessage>,
    send: SnapshotSend,
) -> Result<(), StreamError> {
    let describe = |source| StreamError::Io {
        path: path.clone(),
        source,
    };
    let opened = Files.open(&path, Access::ReadOnly).map_err(describe)?;
    let file = Arc::new(opened);
    let total = file.size().map_err(describe)?;
    let mut offset = 0;
    while offset < total {
        let length = (total - offset).min(SNAPSHOT_CHUNK_BYTES as u64) as usize;
        let data = read_off_the_loop(Arc::clone(&file), offset, length)
            .await
            .map_err(describe)?;
        let room = queue.reserve().await.map_err(|_| StreamError::Closed)?;
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

/// `length` bytes of `file` from `offset`, read on a blocking thread (a snapshot may sit on a
/// disk, where a read of a chunk takes milliseconds the event loop must not wait).
async fn read_off_the_loop(
    file: Arc<std::fs::File>,
    offset: u64,
    length: usize,
) -> std::io::Result<Vec<u8>> {
    let read = tokio::task::spawn_blocking(move || {
        let mut data = vec![0; length];
        file.read_exact_at(&mut data, offset).map(|()| data)
    });
    read.await.map_err(std::io::Error::other)?
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

/// Node side: answers `request` with a piece of a durable snapshot in `snapshot_dir` (the
/// newest, for `index` `None`), read off the event loop; [`ClientReply::NoBackup`] when there
/// is none or it was replaced meanwhile.
pub(super) async fn serve_backup(
    snapshot_dir: PathBuf,
    (node, mode): (NodeId, Mode),
    request: BackupRequest,
    reply: mpsc::Sender<ClientReply>,
) {
    let read = tokio::task::spawn_blocking(move || read_piece(&snapshot_dir, node, mode, request));
    let answer = match read.await {
        Ok(Ok(chunk)) => ClientReply::BackupChunk(chunk),
        Ok(Err(error)) => ClientReply::NoBackup {
            reason: error.to_string(),
        },
        Err(error) => ClientReply::NoBackup {
            reason: error.to_string(),
        },
    };
    let _ = reply.send(answer).await;
}

/// Why a node has no piece of a snapshot for a backup request; the reason it answers with.
#[derive(Debug, thiserror::Error)]
enum PieceError {
    /// The snapshot directory cannot be listed.
    #[error("{}: {source}", dir.display())]
    List {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No snapshot is durable yet.
    #[error("node {node} has no durable snapshot yet")]
    NoSnapshot {
        /// This node.
        node: NodeId,
    },
    /// The snapshot file cannot be opened or read (it may have been replaced meanwhile).
    #[error("snapshot {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The piece asked for starts past the file's end.
    #[error("offset {offset} is past the end ({total})")]
    PastEnd {
        /// Where the piece asked for starts.
        offset: u64,
        /// The file's length.
        total: u64,
    },
}

fn read_piece(
    dir: &Path,
    node: NodeId,
    mode: Mode,
    request: BackupRequest,
) -> Result<BackupChunk, PieceError> {
    let index = match request.index {
        Some(index) => index,
        None => match list_snapshots(dir).map_err(|source| PieceError::List {
            dir: dir.to_path_buf(),
            source,
        })? {
            snapshots if snapshots.is_empty() => return Err(PieceError::NoSnapshot { node }),
            snapshots => snapshots[0].0,
        },
    };
    let path = snapshot_path(dir, index);
    let describe = |source| PieceError::Read {
        path: path.clone(),
        source,
    };
    let file = Files.open(&path, Access::ReadOnly).map_err(describe)?;
    let total = file.size().map_err(describe)?;
    if request.offset > total {
        return Err(PieceError::PastEnd {
            offset: request.offset,
            total,
        });
    }
    let length = (total - request.offset).min(BACKUP_CHUNK_BYTES as u64) as usize;
    let mut data = vec![0; length];
    let read = file.read_exact_at(&mut data, request.offset);
    read.map_err(describe)?;
    Ok(BackupChunk {
        node,
        index,
        mode,
        offset: request.offset,
        total,
        data,
    })
}
