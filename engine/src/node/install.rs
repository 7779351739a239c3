//! Sending a snapshot to a follower: the leader streams its newest durable snapshot file in
//! chunks over the peer connection (the follower assembles them with
//! [`crate::snapshot::Incoming`]).

use crate::ids::{EntryIndex, NodeId, Term};
use crate::snapshot::SNAPSHOT_CHUNK_BYTES;
use net::message::{PeerMessage, SnapshotChunk};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncReadExt;
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
    let mut file = tokio::fs::File::open(&path).await.map_err(describe)?;
    let total = file.metadata().await.map_err(describe)?.len();
    let mut offset = 0;
    while offset < total {
        let length = (total - offset).min(SNAPSHOT_CHUNK_BYTES as u64) as usize;
        let mut data = vec![0; length];
        file.read_exact(&mut data).await.map_err(describe)?;
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
