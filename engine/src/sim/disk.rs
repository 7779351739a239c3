//! A simulated node's disk: the hard state, the log (after the base a snapshot covers), the
//! durable snapshots, and which part of the log an fsync has made durable. It survives
//! crashes; a crash loses a random part of what was written but not yet durable.

use crate::apply::StateMachine;
use crate::core::{HardState, LogBase, Recovered, Repair};
use crate::entry::{Entry, EntryHash};
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::node::recovery::replay::{self, RecoveryLog, ReplayFrom};
use crate::replica::WalOp;
use crate::snapshot::SnapshotMeta;
use crate::snapshot::parse_snapshot;
use net::message::AppliedHash;
use net::message::PeerMessage;
use std::collections::VecDeque;

/// Entries at the end of the log among which damage strikes.
pub const SIM_DAMAGE_SPAN_ENTRIES: u64 = 8;

/// Durable snapshots a simulated disk keeps (as a real node keeps `SNAPSHOTS_KEPT`).
pub const SIM_SNAPSHOTS_KEPT: usize = 2;

/// What an fsync that completed made durable.
pub(super) struct Synced {
    /// Acknowledgements that waited for it.
    pub acks: Vec<(NodeId, PeerMessage)>,
    /// The last durable entry, if the log holds one after its base.
    pub persisted: Option<(EntryIndex, Term)>,
    /// Written since the fsync started: another one is due.
    pub more: bool,
}

#[derive(Default)]
pub(super) struct Disk {
    pub hard: HardState,
    /// What the log starts after: a snapshot covers it and everything before.
    pub base: LogBase,
    /// The log from `base.index + 1`.
    entries: Vec<Entry>,
    /// The last durable index (at least `base.index`).
    synced: u64,
    /// An fsync in flight: the last index and the acknowledgements it covers.
    syncing: Option<(u64, usize)>,
    /// Acknowledgements waiting for an fsync, in order.
    acks: Vec<(NodeId, PeerMessage)>,
    /// Durable snapshots, oldest first: what each covers and its file's bytes.
    pub snapshots: Vec<(SnapshotMeta, Vec<u8>)>,
    /// The file system is full: an append waits until it has room.
    pub full: bool,
    /// WAL work waiting behind an append that found the disk full, in order (the WAL does
    /// nothing else meanwhile).
    pub held: VecDeque<WalOp>,
}

impl Disk {
    pub fn first_index(&self) -> u64 {
        self.base.index.0 + 1
    }

    pub fn last_index(&self) -> u64 {
        self.base.index.0 + self.entries.len() as u64
    }

    pub fn get(&self, index: u64) -> Option<&Entry> {
        let offset = index.checked_sub(self.first_index())?;
        self.entries.get(usize::try_from(offset).ok()?)
    }

    /// Appends the next entry; an entry out of sequence is a bug of the caller.
    pub fn append(&mut self, entry: Entry) -> Result<(), String> {
        if entry.index().0 != self.last_index() + 1 {
            return Err(format!(
                "entry {} written after {}",
                entry.index(),
                self.last_index()
            ));
        }
        self.entries.push(entry);
        Ok(())
    }

    pub fn push_ack(&mut self, to: NodeId, message: PeerMessage) {
        self.acks.push((to, message));
    }

    /// Drops the log from `from` on.
    pub fn truncate_from(&mut self, from: u64) {
        let keep = from.saturating_sub(1).max(self.base.index.0);
        self.entries.truncate((keep - self.base.index.0) as usize);
        self.synced = self.synced.min(keep);
        if let Some((index, _)) = &mut self.syncing {
            *index = (*index).min(keep);
        }
    }

    /// Starts an fsync unless one is in flight; true when one started.
    pub fn begin_sync(&mut self) -> bool {
        if self.syncing.is_some() {
            return false;
        }
        self.syncing = Some((self.last_index(), self.acks.len()));
        true
    }

    /// The fsync in flight completed.
    pub fn finish_sync(&mut self) -> Option<Synced> {
        let (index, acks) = self.syncing.take()?;
        self.synced = self.synced.max(index.min(self.last_index()));
        let acks = self.acks.drain(..acks).collect();
        let persisted = self.get(self.synced).map(|e| (e.index(), e.term()));
        Some(Synced {
            acks,
            persisted,
            more: self.last_index() > self.synced || !self.acks.is_empty(),
        })
    }

    /// A crash: of what was written and not yet durable, a prefix of `draw`'s choosing
    /// survives (the rest was lost, or torn and cut by recovery).
    pub fn crash(&mut self, draw: u64) {
        let unsynced = self.last_index() - self.synced;
        let kept = draw % (unsynced + 1);
        self.truncate_from(self.synced + kept + 1);
        self.synced = self.last_index();
        self.syncing = None;
        self.acks.clear();
        self.held.clear();
    }

    /// Drops the log through `through` (a durable snapshot covers it).
    pub fn compact(&mut self, through: u64) {
        let Some(last) = self.get(through) else {
            return;
        };
        let base = LogBase {
            index: last.index(),
            term: last.term(),
            hash: last.header.hash,
        };
        self.entries.drain(..(through - self.base.index.0) as usize);
        self.base = base;
        self.synced = self.synced.max(through);
    }

    /// Replaces the log with an empty one after `base` (a snapshot that the log does not
    /// continue).
    pub fn reset(&mut self, base: LogBase) {
        self.entries.clear();
        self.base = base;
        self.synced = base.index.0;
        if let Some((index, _)) = &mut self.syncing {
            *index = base.index.0;
        }
    }

    /// Damage found at restart: an entry chosen by `draw` is unreadable. As
    /// `node::recovery::restore` does, the log is cut before it and the hard state records the
    /// log's old end as the repair to wait for. False when the log is empty.
    pub fn damage(&mut self, draw: u64) -> bool {
        let (first, last) = (self.first_index(), self.last_index());
        let Some(end) = self.get(last) else {
            return false;
        };
        // Recent entries: the ones another replica may still lack.
        let span = (last - first + 1).min(SIM_DAMAGE_SPAN_ENTRIES);
        let lost = last + 1 - span + draw % span;
        let committed = (lost..=last)
            .filter_map(|i| self.get(i))
            .map(|e| e.header.commit)
            .max()
            .unwrap_or(EntryIndex::ZERO);
        let repair = Repair {
            index: end.index(),
            term: end.term(),
            committed,
        };
        self.hard.repair = Some(match self.hard.repair {
            Some(earlier) => earlier.merge(repair),
            None => repair,
        });
        self.truncate_from(lost);
        true
    }

    /// Keeps a durable snapshot, dropping the oldest past [`SIM_SNAPSHOTS_KEPT`].
    pub fn keep_snapshot(&mut self, meta: SnapshotMeta, bytes: Vec<u8>) {
        self.snapshots.retain(|(m, _)| m.index != meta.index);
        self.snapshots.push((meta, bytes));
        self.snapshots.sort_by_key(|(m, _)| m.index);
        if self.snapshots.len() > SIM_SNAPSHOTS_KEPT {
            self.snapshots.remove(0);
        }
    }
}

/// An entry the simulated log does not hold (it is read back as written: damage is cut
/// before recovery reads it).
#[derive(Debug, thiserror::Error)]
#[error("entry {0} is not on the disk")]
pub(super) struct Missing(EntryIndex);

impl RecoveryLog for Disk {
    type Error = Missing;

    fn first_index(&self) -> EntryIndex {
        EntryIndex(Disk::first_index(self))
    }

    fn last_index(&self) -> EntryIndex {
        EntryIndex(Disk::last_index(self))
    }

    fn max_commit(&self) -> EntryIndex {
        self.entries
            .iter()
            .map(|e| e.header.commit)
            .max()
            .unwrap_or(EntryIndex::ZERO)
    }

    fn term_at(&self, index: EntryIndex) -> Option<Term> {
        self.get(index.0).map(Entry::term)
    }

    fn hash_at(&self, index: EntryIndex) -> Option<EntryHash> {
        self.get(index.0).map(|e| e.header.hash)
    }

    fn read(&self, index: EntryIndex) -> Result<Entry, Missing> {
        self.get(index.0).cloned().ok_or(Missing(index))
    }
}

/// What a simulated node starts from.
pub(super) struct Restored<H: Handler> {
    pub machine: StateMachine<H>,
    pub recovered: Recovered,
    /// The snapshot started from: its index and file size.
    pub latest: Option<(EntryIndex, u64)>,
    /// The snapshot installed (if any) and each entry replayed, with the state hash after it.
    pub replayed: Vec<AppliedHash>,
}

/// Recovers a node from `disk` by the node's own rules (`node::recovery::replay`): the newest
/// snapshot the log reaches, the log's base after it (the log emptied when it conflicts with
/// it), then every entry the log shows committed. What the real node does with files (the
/// scan, quarantine) is the disk's own: damage is cut by [`Disk::damage`] before this.
pub(super) fn recover<H: Handler>(
    disk: &mut Disk,
    handler: H,
    capacity_bytes: u64,
) -> Result<Restored<H>, String> {
    let mut machine = StateMachine::new(handler, capacity_bytes);
    let chosen = disk
        .snapshots
        .iter()
        .rev()
        .find(|(meta, _)| replay::log_reaches(disk, meta.index));
    let mut latest = None;
    if let Some((meta, bytes)) = chosen {
        let snapshot = parse_snapshot(bytes).map_err(|e| {
            format!(
                "its durable snapshot of entry {} does not parse: {e}",
                meta.index
            )
        })?;
        machine.install(snapshot).map_err(|e| {
            format!(
                "its durable snapshot of entry {} does not load: {e}",
                meta.index
            )
        })?;
        latest = Some((meta.index, bytes.len() as u64));
    }
    let meta = chosen.map(|(meta, _)| meta.clone());
    let (base, reset_log) = replay::log_base(disk, meta.as_ref()).ok_or_else(|| {
        format!(
            "no usable state: the log starts at entry {} and no snapshot reaches it (a real node refuses to start)",
            disk.first_index()
        )
    })?;
    let from = ReplayFrom {
        hard_state: disk.hard,
        base,
        reset_log,
        snapshot: meta.as_ref().map(|m| AppliedHash {
            index: m.index,
            hash: m.state_hash,
        }),
    };
    let mut replayed: Vec<AppliedHash> = from.snapshot.into_iter().collect();
    let recovered = replay::replay(&*disk, &mut machine, from, |done, _| replayed.push(done))
        .map_err(|e| format!("recovery failed: {e}"))?;
    // What a start carries out: the log emptied to continue the snapshot, or (the disk keeps
    // no entries behind its base) compacted through it.
    if reset_log {
        disk.reset(base);
    } else if meta.is_some() {
        disk.compact(base.index.0);
    }
    Ok(Restored {
        machine,
        recovered,
        latest,
        replayed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::recovery::replay::conformance::{chain, check};

    /// Proves the simulated disk keeps the contract recovery relies on, as the real WAL does
    /// (`node::recovery::replay`): from entry 1, after a compaction, after a reset.
    #[test]
    fn the_simulated_disk_meets_the_recovery_log_contract() {
        let mut disk = Disk::default();
        check(&disk, LogBase::default(), &[]);
        let entries = chain(LogBase::default(), 8, EntryIndex(5));
        for entry in &entries {
            disk.append(entry.clone()).unwrap();
        }
        check(&disk, LogBase::default(), &entries);
        disk.compact(3);
        let third = &entries[2];
        let base = LogBase {
            index: third.index(),
            term: third.term(),
            hash: third.header.hash,
        };
        check(&disk, base, &entries[3..]);
        let base = LogBase {
            index: EntryIndex(20),
            term: Term(3),
            hash: EntryHash([7; 32]),
        };
        disk.reset(base);
        check(&disk, base, &[]);
        let entries = chain(base, 6, EntryIndex(23));
        for entry in &entries {
            disk.append(entry.clone()).unwrap();
        }
        check(&disk, base, &entries);
    }
}
