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
            WalOp::Append(entries) => {
                for entry in entries {
                    if let Err(error) = self.node(id).disk.append(entry) {
                        self.checker
                            .violation(Invariant::Storage, format!("node {}: {error}", id.0));
                        return;
                    }
                }
                self.request_sync(id);
            }
            WalOp::Ack { to, message } => {
                self.node(id).disk.push_ack(to, message);
                self.request_sync(id);
            }
            WalOp::Truncate(from) => self.node(id).disk.truncate_from(from.0),
            WalOp::Compact(through) => self.node(id).disk.compact(through.0),
            WalOp::Reset(base) => self.node(id).disk.reset(base),
            WalOp::Load { peer, from, to } => self.load(id, peer, from, to),
            // The simulated nodes keep no apply journal (their replicas do not journal).
            WalOp::Journal { .. } => {}
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
            let entry = disk.get(index).expect("within the log").clone();
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

    /// Work a node does when it has a moment: the leader simulates what it proposed, a
    /// follower applies what committed, a slice of a snapshot in progress is scanned.
    pub(super) fn deferred(&mut self, id: NodeId) {
        let simulate_now = self.rng.chance(1, 2);
        let apply_now = self.rng.chance(1, 2);
        self.drive(id, |replica, out| {
            if simulate_now {
                replica.simulate();
            }
            if apply_now {
                replica.catch_up(out);
            }
            if replica.snapshotting() {
                replica.snapshot_slice(out);
            }
        });
    }

    pub(super) fn request_sync(&mut self, id: NodeId) {
        let incarnation = self.node(id).incarnation;
        if !self.node(id).disk.begin_sync() {
            return;
        }
        let slow = self.rng.chance(1, 20);
        let after = 1 + self.rng.below(if slow { 200 } else { 20 });
        self.schedule(
            after,
            SimEvent::Synced {
                node: id,
                incarnation,
            },
        );
    }

    /// An fsync completed: what it covered is durable, its acknowledgements go out.
    pub(super) fn synced(&mut self, id: NodeId) {
        if self.fsync_fails() {
            self.fsync_failed(id);
            return;
        }
        let Some(synced) = self.node(id).disk.finish_sync() else {
            return;
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
        if synced.more {
            self.request_sync(id);
        }
        self.deferred(id);
    }
}
