//! The replica's WAL actions carried out on the simulated disk: appends held while the disk
//! is full, fsyncs that complete later and release their acknowledgements, and reads of
//! entries for a lagging follower.

use super::*;

impl<W: Workload> Sim<W> {
    pub(super) fn write_log(&mut self, id: NodeId, op: WalOp) {
        let disk = &mut self.node(id).disk;
        if !disk.held.is_empty() || (disk.full && matches!(op, WalOp::Append(_))) {
            let first = disk.held.is_empty();
            disk.held.push_back(op);
            if let Some(live) = self.live(id).filter(|_| first) {
                live.replica.set_storage_full(true);
            }
            return;
        }
        match op {
            WalOp::Ack { to, message } => {
                self.node(id).disk.push_ack(to, message);
                self.request_sync(id);
            }
            WalOp::Load { peer, from, to } => self.load(id, peer, from, to),
            // The simulated nodes keep no apply journal (their replicas do not journal).
            WalOp::Journal { .. } => {}
            WalOp::Append(_) | WalOp::Truncate(_) | WalOp::Compact(_) | WalOp::Reset(_) => {
                self.trace_log_write(id, &op);
                let append = matches!(op, WalOp::Append(_));
                if let Err(error) = self.node(id).disk.write(op) {
                    let message = format!("node {}: the WAL failed: {error}", id.0);
                    self.checker.violation(Invariant::Storage, message);
                    return;
                }
                if append {
                    self.request_sync(id);
                }
            }
        }
    }

    /// The disk of node `id` has room again: the WAL work held behind the full disk goes on,
    /// in order.
    pub(super) fn space_back(&mut self, id: NodeId) {
        let disk = &mut self.node(id).disk;
        disk.full = false;
        let held = std::mem::take(&mut disk.held);
        for op in held {
            self.write_log(id, op);
        }
        if let Some(live) = self.live(id) {
            live.replica.set_storage_full(false);
        }
    }

    /// Reads entries back for a peer (at most [`APPEND_BYTES_MAX`] of them, as the WAL does).
    pub(super) fn load(&mut self, id: NodeId, peer: NodeId, from: EntryIndex, to: EntryIndex) {
        let disk = &self.node(id).disk;
        let mut entries = Vec::new();
        let mut bytes = 0;
        if from.0 < disk.first_index() {
            let message = format!(
                "node {}: asked to read entry {from}, behind its log's start {}",
                id.0,
                disk.first_index()
            );
            self.checker.violation(Invariant::Storage, message);
            return;
        }
        for index in from.0..=to.0.min(disk.last_index()) {
            let Some(entry) = disk.get(index) else {
                let message = format!("node {}: entry {index} of its log does not read", id.0);
                self.checker.violation(Invariant::Storage, message);
                return;
            };
            bytes += entry.payload.len();
            entries.push(entry);
            if bytes >= APPEND_BYTES_MAX {
                break;
            }
        }
        let incarnation = self.node(id).incarnation;
        let after = 1 + self.rng.below(20);
        self.schedule(
            after,
            SimEvent::Loaded {
                node: id,
                incarnation,
                peer,
                entries,
            },
        );
    }

    /// A moment with nothing else to do, three times in four (the work may also wait for a
    /// later one): the replica's idle work, in its own order.
    pub(super) fn deferred(&mut self, id: NodeId) {
        if self.rng.chance(3, 4) {
            self.drive(id, |replica, out| replica.idle_work(true, out));
        }
    }

    pub(super) fn request_sync(&mut self, id: NodeId) {
        let incarnation = self.node(id).incarnation;
        if !self.node(id).disk.begin_sync() {
            return;
        }
        let slow = super::odds::SLOW_SYNC.hit(&mut self.rng);
        let after = 1 + self.rng.below(if slow { 200 } else { 20 });
        self.schedule(
            after,
            SimEvent::Synced {
                node: id,
                incarnation,
            },
        );
    }

    /// An fsync completed: what it covered is durable, its acknowledgements go out; a failed
    /// one halts the node.
    pub(super) fn synced(&mut self, id: NodeId) {
        let fails = self.fsync_fails();
        let synced = match self.node(id).disk.finish_sync(fails) {
            Ok(synced) => synced,
            Err(error) if fails => return self.fsync_failed(id, &error),
            Err(error) => {
                let message = format!("node {}: an fsync failed unasked: {error}", id.0);
                return self.checker.violation(Invariant::Storage, message);
            }
        };
        if let Some((index, term)) = synced.persisted {
            self.drive(id, |r, out| r.persisted(index, term, out));
        }
        let acks_down = self.node(id).acks_down_until > self.now;
        for (to, message) in synced.acks {
            if acks_down {
                self.drive(id, |r, out| r.ack_failed(out));
            } else {
                self.send_peer(id, to, message);
            }
        }
        self.deferred(id);
    }

    /// The account of a seed, step by step (`RUST_LOG=engine::sim=trace`): what the replica
    /// wrote to its log.
    fn trace_log_write(&self, id: NodeId, op: &WalOp) {
        let now = self.now;
        match op {
            WalOp::Append(entries) => {
                let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
                    return;
                };
                let (from, to) = (first.index().0, last.index().0);
                let terms = (first.header.term.0, last.header.term.0);
                tracing::trace!(now, node = id.0, from, to, ?terms, "append");
            }
            WalOp::Truncate(_) | WalOp::Compact(_) | WalOp::Reset(_) => {
                tracing::trace!(now, node = id.0, ?op, "log");
            }
            // Called for the log writes only.
            WalOp::Ack { .. } | WalOp::Load { .. } | WalOp::Journal { .. } => {}
        }
    }
}
