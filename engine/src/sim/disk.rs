//! A simulated node's disk: the hard state, the log (after the base a snapshot covers), the
//! durable snapshots, and which part of the log an fsync has made durable. It survives
//! crashes; a crash loses a random part of what was written but not yet durable.

use crate::apply::StateMachine;
use crate::core::{HardState, LogBase, LostVotes, Recovered, Repair};
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

/// Entries at the end of the log among which damage strikes three times in four (the fourth
/// anywhere in the log).
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
        // Mostly recent entries (the ones another replica may still lack); one time in four
        // anywhere in the log.
        let anywhere = (draw >> 60).is_multiple_of(4);
        let span = if anywhere {
            last - first + 1
        } else {
            (last - first + 1).min(SIM_DAMAGE_SPAN_ENTRIES)
        };
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

    /// Damage found at restart in the newest durable snapshot: a bit chosen by `draw` flips
    /// (its digest no longer matches). False when the disk holds no snapshot.
    pub fn damage_snapshot(&mut self, draw: u64) -> bool {
        let Some((_, bytes)) = self.snapshots.last_mut() else {
            return false;
        };
        let at = (draw % bytes.len() as u64) as usize;
        bytes[at] ^= 1 << ((draw >> 56) % 8);
        true
    }

    /// The operator's `--rebuild-from-leader` for a disk that cannot start the node, as
    /// `node::recovery::rebuild` does: the repair obligation covering what it held is made
    /// durable first ([`replay::rebuild_repair`]), then the log and the snapshots are moved
    /// away; the node starts empty and waits for a leader to give its data back. With
    /// `hard_lost`, the hard state did not read: its term, vote and any repair obligation are
    /// gone, and the node starts with its votes lost ([`LostVotes`]).
    pub fn rebuild(&mut self, hard_lost: bool) {
        if hard_lost {
            self.hard = HardState {
                votes_lost: Some(LostVotes::Unknown),
                ..HardState::default()
            };
        }
        let newest = self.snapshots.last().map(|(meta, _)| meta.index);
        if let Some(repair) = replay::rebuild_repair(&*self, None, newest) {
            self.hard.repair = Some(self.hard.repair.map_or(repair, |r| r.merge(repair)));
        }
        self.snapshots.clear();
        self.reset(LogBase::default());
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

/// Why a simulated node cannot start from its disk.
#[derive(Debug)]
pub(super) enum Unusable {
    /// The log does not start at entry 1 and no snapshot that verifies reaches it, after
    /// `damaged` snapshots were passed over: the real node refuses to start, and the operator
    /// rebuilds it from the leader (`--rebuild-from-leader`).
    NoUsableState { first: u64, damaged: usize },
    /// The hard state does not read (its term and vote are lost): the real node refuses to
    /// start, and the operator rebuilds it.
    HardStateDamaged,
    /// Anything else: a bug.
    Broken(String),
}

impl Unusable {
    /// True when damage explains the refusal, so that the operator's rebuild is the way out.
    pub fn rebuild_applies(&self) -> bool {
        match self {
            Unusable::NoUsableState { damaged, .. } => *damaged > 0,
            Unusable::HardStateDamaged => true,
            Unusable::Broken(_) => false,
        }
    }
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unusable::NoUsableState { first, damaged } => write!(
                f,
                "no usable state: the log starts at entry {first} and no snapshot reaches it \
                 ({damaged} damaged passed over; a real node refuses to start)"
            ),
            Unusable::HardStateDamaged => f.write_str("the hard state is damaged"),
            Unusable::Broken(reason) => f.write_str(reason),
        }
    }
}

/// Recovers a node from `disk` by the node's own rules (`node::recovery::replay`): the newest
/// snapshot that verifies and that the log reaches (damaged ones passed over, and dropped as
/// the node quarantines them once it starts), the log's base after it (the log emptied when
/// it conflicts with it), then every entry the log shows committed. Damaged entries are cut
/// by [`Disk::damage`] before this, as the node's WAL scan does.
pub(super) fn recover<H: Handler>(
    disk: &mut Disk,
    handler: H,
    capacity_bytes: u64,
) -> Result<Restored<H>, Unusable> {
    let mut machine = StateMachine::new(handler, capacity_bytes);
    let (chosen, damaged) = choose_snapshot(disk, &mut machine)?;
    let latest = chosen.as_ref().map(|(meta, size)| (meta.index, *size));
    let meta = chosen.map(|(meta, _)| meta);
    let (base, reset_log) =
        replay::log_base(disk, meta.as_ref()).ok_or(Unusable::NoUsableState {
            first: disk.first_index(),
            damaged: damaged.len(),
        })?;
    for position in damaged.into_iter().rev() {
        disk.snapshots.remove(position);
    }
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
        .map_err(|e| Unusable::Broken(format!("recovery failed: {e}")))?;
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

/// The snapshot recovery starts from (its meta and file size) and the positions of the
/// damaged snapshots passed over on the way, ascending.
type Chosen = (Option<(SnapshotMeta, u64)>, Vec<usize>);

/// The snapshot recovery starts from, installed into `machine`, as the node's
/// `choose_snapshot` does: newest first, those the log does not reach skipped, damaged ones
/// passed over.
fn choose_snapshot<H: Handler>(
    disk: &Disk,
    machine: &mut StateMachine<H>,
) -> Result<Chosen, Unusable> {
    let mut damaged = Vec::new();
    for (position, (meta, bytes)) in disk.snapshots.iter().enumerate().rev() {
        if !replay::log_reaches(disk, meta.index) {
            continue;
        }
        let Ok(snapshot) = parse_snapshot(bytes) else {
            damaged.insert(0, position);
            continue;
        };
        machine.install(snapshot).map_err(|e| {
            Unusable::Broken(format!(
                "its durable snapshot of entry {} does not load: {e}",
                meta.index
            ))
        })?;
        return Ok((Some((meta.clone(), bytes.len() as u64)), damaged));
    }
    Ok((None, damaged))
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
