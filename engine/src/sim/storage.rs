//! The replica's WAL actions carried out on the simulated disk by the node's own executor
//! ([`crate::wal::executor`]): the simulator decides only when an fsync completes (an event
//! drawn later), whether it fails, and when a full disk has room again.

use super::disk::Ran;
use super::*;
use crate::storage::IoFault;
use crate::wal::executor::{Step, WalEvent};
use std::io::ErrorKind::StorageFull;

impl<W: Workload> Sim<W> {
    pub(super) fn write_log(&mut self, id: NodeId, op: WalOp) {
        self.trace_log_write(id, &op);
        self.node(id).disk.queue(op);
        self.run_wal(id);
    }

    /// Runs node `id`'s WAL executor (unless an fsync is under way: the work waits for it)
    /// and takes what it did as the node's driver takes the WAL thread's reports. Work that
    /// taking a report queues waits for the next round of this loop, never runs inside it.
    fn run_wal(&mut self, id: NodeId) {
        if std::mem::replace(&mut self.node(id).wal_running, true) {
            return;
        }
        while self.live(id).is_some() {
            let full = self.node(id).disk.full;
            let Ran {
                step,
                events,
                acks,
                removal,
            } = self.node(id).disk.run();
            if let Some(error) = removal {
                let message = format!("node {}: freed WAL segments not removed: {error}", id.0);
                self.checker.violation(Invariant::Storage, message);
            }
            self.acknowledge(id, acks);
            // Only a write that grows a file finds the disk full; the executor holds such an
            // append, so no other failure is explained by it.
            let explained =
                |failure: &WalFailure| full && fault_of(failure).kind == Some(StorageFull);
            if !self.take_wal_events(id, events, explained) {
                break;
            }
            match step {
                Step::SyncDue => self.request_sync(id),
                Step::Idle if self.node(id).disk.has_pending() => continue,
                Step::Idle | Step::Full | Step::Failed => {}
            }
            break;
        }
        self.node(id).wal_running = false;
    }

    /// Sends the acknowledgements the executor let go, or fails them while node `id`'s
    /// acknowledgement connections are down.
    fn acknowledge(&mut self, id: NodeId, acks: Vec<(NodeId, PeerMessage)>) {
        let acks_down = self.node(id).acks_down_until > self.now;
        for (to, message) in acks {
            if acks_down {
                self.drive(id, |r, out| r.ack_failed(out));
            } else {
                self.send_peer(id, to, message);
            }
        }
    }

    /// Takes the executor's reports; false when the WAL failed (the node halted and went
    /// down: a failure the faults explain, `explained`, or a violation otherwise).
    fn take_wal_events(
        &mut self,
        id: NodeId,
        events: Vec<WalEvent>,
        explained: impl Fn(&WalFailure) -> bool,
    ) -> bool {
        for event in events {
            match event {
                WalEvent::Persisted { index, term } => {
                    self.drive(id, |r, out| r.persisted(index, term, out));
                }
                WalEvent::Loaded { peer, entries } => self.schedule_loaded(id, peer, entries),
                WalEvent::AckFailed => self.drive(id, |r, out| r.ack_failed(out)),
                WalEvent::Full(_) => {
                    if let Some(live) = self.live(id) {
                        live.replica.set_storage_full(true);
                    }
                }
                WalEvent::SpaceBack => {
                    if let Some(live) = self.live(id) {
                        live.replica.set_storage_full(false);
                    }
                }
                WalEvent::Failed(failure) if explained(&failure) => {
                    self.wal_failed(id, failure);
                    return false;
                }
                WalEvent::Failed(failure) => {
                    let message = format!("node {}: the WAL failed: {failure}", id.0);
                    self.checker.violation(Invariant::Storage, message);
                    return false;
                }
            }
        }
        true
    }

    /// The disk of node `id` has room again: the WAL work held behind the full disk goes on,
    /// in order.
    pub(super) fn space_back(&mut self, id: NodeId) {
        self.node(id).disk.full = false;
        if self.live(id).is_some() {
            self.run_wal(id);
        }
    }

    /// Entries read back for a peer reach the replica a little later, as a WAL thread's
    /// report would.
    fn schedule_loaded(&mut self, id: NodeId, peer: NodeId, entries: Vec<Entry>) {
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

    /// An fsync completed: what it covered is durable and the work behind it goes on; a
    /// failed one halts the node.
    pub(super) fn synced(&mut self, id: NodeId) {
        let fails = self.fsync_fails();
        let events = self.node(id).disk.finish_sync(fails);
        let explained = |failure: &WalFailure| fails && matches!(failure, WalFailure::Sync(_));
        if self.take_wal_events(id, events, explained) {
            self.run_wal(id);
            self.deferred(id);
        }
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

/// The system's fault behind a failure of the WAL.
fn fault_of(failure: &WalFailure) -> &IoFault {
    match failure {
        WalFailure::Write(fault)
        | WalFailure::Sync(fault)
        | WalFailure::Truncate(fault)
        | WalFailure::Reset(fault)
        | WalFailure::Read(fault) => fault,
    }
}
