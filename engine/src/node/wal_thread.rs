//! The WAL's own thread: appends and fsyncs off the async runtime, batching whatever queued
//! while the previous fsync ran into one fsync (group commit).

use crate::entry::Entry;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::wal::{Wal, WalError};
use std::sync::mpsc;
use std::thread;

/// Work for the WAL thread, carried out in order.
#[derive(Debug)]
pub(crate) enum WalOp {
    /// Append and fsync.
    Append(Vec<Entry>),
    /// Remove entries from this index on.
    Truncate(EntryIndex),
    /// Read entries back for a peer.
    Load {
        /// The peer.
        peer: NodeId,
        /// The first.
        from: EntryIndex,
        /// The last.
        to: EntryIndex,
    },
}

/// What the WAL thread reports.
#[derive(Debug)]
pub(crate) enum WalEvent {
    /// Every entry up to `index` is durable.
    Persisted {
        /// The last durable entry.
        index: EntryIndex,
        /// Its term.
        term: Term,
    },
    /// Entries read back for a peer.
    Loaded {
        /// The peer.
        peer: NodeId,
        /// The entries.
        entries: Vec<Entry>,
    },
    /// The WAL failed; nothing more can be made durable.
    Failed(String),
}

/// The node's handle on the WAL thread.
pub(crate) struct WalThread {
    ops: mpsc::Sender<WalOp>,
}

impl WalThread {
    /// Starts the thread; `report` delivers its events to the node.
    pub(crate) fn spawn(
        wal: Wal,
        name: String,
        report: impl Fn(WalEvent) -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let (ops, queue) = mpsc::channel();
        thread::Builder::new()
            .name(name)
            .spawn(move || run(wal, queue, report))?;
        Ok(WalThread { ops })
    }

    /// Queues work; false once the thread has stopped.
    pub(crate) fn send(&self, op: WalOp) -> bool {
        self.ops.send(op).is_ok()
    }
}

fn run(mut wal: Wal, queue: mpsc::Receiver<WalOp>, report: impl Fn(WalEvent) -> bool) {
    while let Ok(first) = queue.recv() {
        let batch: Vec<WalOp> = std::iter::once(first).chain(queue.try_iter()).collect();
        let events = match carry_out(&mut wal, batch) {
            Ok(events) => events,
            Err(error) => vec![WalEvent::Failed(error.to_string())],
        };
        let failed = events.iter().any(|e| matches!(e, WalEvent::Failed(_)));
        for event in events {
            if !report(event) {
                return;
            }
        }
        if failed {
            return;
        }
    }
}

/// Carries out a batch of work with one fsync for all its appends.
fn carry_out(wal: &mut Wal, batch: Vec<WalOp>) -> Result<Vec<WalEvent>, WalError> {
    let mut events = Vec::new();
    let mut unsynced: Option<(EntryIndex, Term)> = None;
    for op in batch {
        match op {
            WalOp::Append(entries) => {
                for entry in &entries {
                    wal.write(entry)?;
                    unsynced = Some((entry.index(), entry.term()));
                }
            }
            WalOp::Truncate(from) => {
                sync(wal, &mut unsynced, &mut events)?;
                wal.truncate_from(from)?;
            }
            WalOp::Load { peer, from, to } => {
                let mut entries = Vec::new();
                let mut bytes = 0;
                for index in from.0..=to.0.min(wal.last_index().0) {
                    let entry = wal.read(EntryIndex(index))?;
                    bytes += entry.payload.len();
                    entries.push(entry);
                    if bytes >= crate::core::APPEND_BYTES_MAX {
                        break;
                    }
                }
                events.push(WalEvent::Loaded { peer, entries });
            }
        }
    }
    sync(wal, &mut unsynced, &mut events)?;
    Ok(events)
}

fn sync(
    wal: &mut Wal,
    unsynced: &mut Option<(EntryIndex, Term)>,
    events: &mut Vec<WalEvent>,
) -> Result<(), WalError> {
    if let Some((index, term)) = unsynced.take() {
        wal.sync()?;
        events.push(WalEvent::Persisted { index, term });
    }
    Ok(())
}
