//! Snapshots in the simulator: written a slice at a time by the product's snapshot files
//! (`snapshot::SnapshotFiles`) on the node's simulated disk, made durable, sent to a lagging
//! follower in chunks over one connection that a crash or a cut breaks, received by the
//! product's `snapshot::Intake` and installed.

use super::*;

impl<W: Workload> Sim<W> {
    /// The snapshot writer, as the node's writer thread runs it: the product's snapshot
    /// files on the node's disk. The writer's report reaches the replica after a simulated
    /// while.
    pub(super) fn write_snapshot(&mut self, id: NodeId, write: SnapshotWrite) {
        let write_delay = 1 + self.rng.below(100);
        let incarnation = self.node(id).incarnation;
        let Some(live) = self.live(id) else { return };
        let files = &mut live.snapshots;
        let written = match write {
            SnapshotWrite::Begin(index) => files.begin(index).map(|()| None),
            SnapshotWrite::Bytes(bytes) => files.bytes(&bytes).map(|()| None),
            SnapshotWrite::Abort => {
                files.abort();
                Ok(None)
            }
            SnapshotWrite::Finish(meta) => files.finish(meta),
        };
        match written {
            Ok(None) => {}
            Ok(Some(durable)) => {
                let durable = SimEvent::SnapshotDurable {
                    node: id,
                    incarnation,
                    durable: Box::new(durable),
                };
                self.schedule(write_delay, durable);
            }
            Err(error) => {
                let message = format!("node {}: a snapshot write failed: {error}", id.0);
                self.checker.violation(Invariant::Storage, message);
            }
        }
    }

    /// A snapshot is durable: the next delta continues it, and a whole one lets the log
    /// behind the whole one before it go.
    pub(super) fn snapshot_durable(&mut self, id: NodeId, durable: &crate::snapshot::Durable) {
        self.report.snapshots += 1;
        self.drive(id, |r, out| r.snapshot_durable(durable, out));
    }

    /// Leader: sends `peer` the durable snapshot of `index`, in chunks over one connection (in
    /// order; a lost chunk makes the follower drop the snapshot until it is sent again).
    pub(super) fn send_snapshot(
        &mut self,
        id: NodeId,
        peer: NodeId,
        index: EntryIndex,
        term: crate::ids::Term,
        more: &mut Vec<Io<Token>>,
    ) {
        let path = snapshot_path(&disk::snapshot_dir(), index);
        let Ok(bytes) = self.node(id).disk.device.read(&path) else {
            if let Some(live) = self.live(id) {
                live.replica.snapshot_send_aborted(peer, more);
            }
            return;
        };
        let total = bytes.len() as u64;
        let incarnation = self.node(peer).incarnation;
        let leader = self.node(id).incarnation;
        let mut at = 1 + self.rng.below(10);
        // One connection carries the chunks in order: a transfer queued behind one still
        // arriving follows it.
        if let Some(&(from, _, last)) = self.transfers.get(&(id, peer))
            && from == leader
            && last > self.now
        {
            at = at.max(last - self.now);
        }
        let peer_down = self.node(peer).live.is_none();
        for (k, data) in bytes.chunks(SIM_SNAPSHOT_CHUNK_BYTES).enumerate() {
            if peer_down
                || self.links.cut.contains(&(id, peer))
                || self.rng.below(1000) < self.links.loss
            {
                // The connection broke (or never came up): the rest of the transfer is lost,
                // and the leader's connection task reports it once what went before arrived.
                let broken = SimEvent::TransferBroken {
                    leader: id,
                    incarnation: leader,
                    peer,
                };
                self.schedule(at + 1, broken);
                self.transfers.remove(&(id, peer));
                return;
            }
            let chunk = SnapshotChunk {
                term,
                leader: id,
                index,
                offset: (k * SIM_SNAPSHOT_CHUNK_BYTES) as u64,
                total,
                data: data.to_vec(),
            };
            at += 1;
            self.schedule(
                at,
                SimEvent::Peer {
                    to: peer,
                    from: id,
                    incarnation,
                    message: PeerMessage::Snapshot(chunk),
                },
            );
        }
        let last_arrives = self.now + at;
        self.transfers
            .insert((id, peer), (leader, incarnation, last_arrives));
    }

    /// Node `id` crashed: a transfer it was receiving broke, and its leader notices.
    pub(super) fn transfers_broken_by(&mut self, id: NodeId) {
        let now = self.now;
        let broken: Vec<NodeId> = self
            .transfers
            .iter()
            .filter(|((_, to), (_, incarnation, last))| {
                *to == id
                    && *last > now
                    && *incarnation + 1 == self.nodes[usize::from(id.0 - 1)].incarnation
            })
            .map(|((from, _), _)| *from)
            .collect();
        self.transfers
            .retain(|(from, to), _| *from != id && *to != id);
        for leader in broken {
            self.drive(leader, |r, out| r.snapshot_send_aborted(id, out));
        }
    }

    /// Follower: keeps a chunk as the node does ([`Intake`]); once the snapshot is whole,
    /// durable and verified, the replica installs it. A dropped one is sent again; one that
    /// arrived whole and does not verify is a violation (the simulated network does not
    /// damage what it carries).
    pub(super) fn store_snapshot_chunk(
        &mut self,
        id: NodeId,
        chunk: SnapshotChunk,
        more: &mut Vec<Io<Token>>,
    ) {
        let Some(live) = self.live(id) else { return };
        match live.intake.take(&chunk) {
            Ok(Some((snapshot, size))) => live.replica.snapshot_received(snapshot, size, more),
            Ok(None) | Err(IntakeError::Dropped(_)) => {}
            Err(error) => {
                let message = format!("node {}: {error}", id.0);
                self.checker.violation(Invariant::Storage, message);
            }
        }
    }
}
