//! Snapshots in the simulator: written a slice at a time, made durable, sent to a lagging
//! follower in chunks over one connection that a crash or a cut breaks, and installed.

use super::*;

impl<W: Workload> Sim<W> {
    /// The snapshot writer: the file's bytes gather until the finish, which seals them with
    /// their digest; the file is durable after a simulated write.
    pub(super) fn write_snapshot(&mut self, id: NodeId, write: SnapshotWrite) {
        let write_delay = 1 + self.rng.below(100);
        let incarnation = self.node(id).incarnation;
        let Some(live) = self.live(id) else { return };
        match write {
            SnapshotWrite::Begin(_) => live.writing = Some(Vec::new()),
            SnapshotWrite::Bytes(bytes) => {
                if let Some(writing) = live.writing.as_mut() {
                    writing.extend_from_slice(&bytes);
                }
            }
            SnapshotWrite::Abort => live.writing = None,
            SnapshotWrite::Finish(meta) => {
                let Some(mut bytes) = live.writing.take() else {
                    return;
                };
                let digest = blake3::hash(&bytes);
                bytes.extend_from_slice(digest.as_bytes());
                self.schedule(
                    write_delay,
                    SimEvent::SnapshotDurable {
                        node: id,
                        incarnation,
                        meta,
                        bytes,
                    },
                );
            }
        }
    }

    /// A snapshot is durable: the disk keeps it, and the replica lets the log behind the one
    /// before it go.
    pub(super) fn snapshot_durable(&mut self, id: NodeId, meta: SnapshotMeta, bytes: Vec<u8>) {
        self.report.snapshots += 1;
        let (index, size) = (meta.index, bytes.len() as u64);
        let disk = &mut self.node(id).disk;
        if disk.snapshots.last().is_none_or(|(m, _)| m.index < index) {
            disk.keep_snapshot(meta, bytes);
        }
        self.drive(id, |r, out| r.snapshot_durable(index, size, out));
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
        let found = self
            .node(id)
            .disk
            .snapshots
            .iter()
            .find(|(m, _)| m.index == index);
        let Some((_, bytes)) = found.cloned() else {
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

    /// Follower: keeps a chunk; once the snapshot is whole and verifies, the disk keeps it and
    /// the replica installs it.
    pub(super) fn store_snapshot_chunk(
        &mut self,
        id: NodeId,
        chunk: SnapshotChunk,
        more: &mut Vec<Io<Token>>,
    ) {
        let Some(live) = self.live(id) else { return };
        if chunk.offset == 0 {
            live.incoming = Some((chunk.index, chunk.total, Vec::new()));
        }
        let Some((index, total, bytes)) = live.incoming.as_mut() else {
            return;
        };
        if *index != chunk.index || *total != chunk.total || bytes.len() as u64 != chunk.offset {
            live.incoming = None;
            return;
        }
        bytes.extend_from_slice(&chunk.data);
        if (bytes.len() as u64) < *total {
            return;
        }
        let (_, _, bytes) = live.incoming.take().expect("just used");
        let snapshot = match parse_snapshot(&bytes) {
            Ok(snapshot) => snapshot,
            Err(reason) => {
                let message = format!(
                    "node {}: a leader's snapshot does not verify: {reason}",
                    id.0
                );
                self.checker.violation(Invariant::Storage, message);
                return;
            }
        };
        let size = bytes.len() as u64;
        self.node(id)
            .disk
            .keep_snapshot(snapshot.meta.clone(), bytes);
        if let Some(live) = self.live(id) {
            live.replica.snapshot_received(snapshot, size, more);
        }
    }
}
