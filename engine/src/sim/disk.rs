//! A simulated node's disk: a [`SimDisk`] device that outlives the node's processes, holding
//! the node's data directory as the product lays it out (hard state, WAL segments, snapshot
//! files), and while a process lives the product's own WAL open on it. What a crash keeps is
//! the device's to decide (unsynced writes lost or torn); what a restart makes of it is the
//! product's recovery's ([`crate::node::recovery::recover_on`]); damage is bits flipped in
//! the files, for the product's scans to find.

use crate::core::HardState;
use crate::entry::{Entry, EntryHash};
use crate::ids::{EntryIndex, NodeId, Term};
use crate::node::NodeError;
use crate::node::storage::{HARD_STATE_FILE, SNAPSHOT_DIR, WAL_DIR, write_hard_state_on};
use crate::replica::WalOp;
use crate::rng::Rng;
use crate::snapshot::{list_snapshots_on, read_snapshot_on};
use crate::storage::{Access, SimDisk, Storage};
use crate::wal::{PREPARED_SEGMENT_NAME, Wal, WalError, prepare_segment};
use net::message::PeerMessage;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};

/// Where a simulated node keeps its data, on its own device.
pub const SIM_DATA_DIR: &str = "/data";
/// The simulated WAL's segment size (small, so that segments roll over and compaction frees
/// whole ones).
pub const SIM_WAL_SEGMENT_BYTES: u64 = 16 * 1024;
/// Bytes of zeros written ahead of appends, on the seeds that write them.
pub const SIM_WAL_ZERO_AHEAD_BYTES: u64 = 8 * 1024;

/// What an fsync that completed made durable.
pub(super) struct Synced {
    /// Acknowledgements that waited for it.
    pub acks: Vec<(NodeId, PeerMessage)>,
    /// The last entry, durable now, if the log holds one.
    pub persisted: Option<(EntryIndex, Term)>,
}

pub(super) struct Disk {
    /// The device: what outlives a crash.
    pub device: SimDisk,
    /// The product's WAL, while the process lives.
    wal: Option<Wal<SimDisk>>,
    /// Acknowledgements waiting for an fsync, in order.
    acks: Vec<(NodeId, PeerMessage)>,
    /// An fsync is under way (its completion is an event).
    syncing: bool,
    /// The hard state last made durable.
    pub hard: HardState,
    /// The file system is full: an append waits until it has room.
    pub full: bool,
    /// WAL work waiting behind an append that found the disk full, in order (the WAL does
    /// nothing else meanwhile).
    pub held: VecDeque<WalOp>,
}

impl Default for Disk {
    fn default() -> Self {
        let device = SimDisk::new();
        // The operator made the data directory.
        device
            .create_dir_all(Path::new(SIM_DATA_DIR))
            .expect("a new disk");
        Disk {
            device,
            wal: None,
            acks: Vec::new(),
            syncing: false,
            hard: HardState::default(),
            full: false,
            held: VecDeque::new(),
        }
    }
}

/// The data directory of every simulated node (each on its own device).
pub(super) fn data_dir() -> &'static Path {
    Path::new(SIM_DATA_DIR)
}

/// The snapshot directory of every simulated node.
pub(super) fn snapshot_dir() -> PathBuf {
    data_dir().join(SNAPSHOT_DIR)
}

impl Disk {
    /// A started process's WAL.
    pub fn open(&mut self, wal: Wal<SimDisk>, hard: HardState) {
        self.wal = Some(wal);
        self.hard = hard;
    }

    fn wal(&mut self) -> &mut Wal<SimDisk> {
        self.wal.as_mut().expect("a live node's WAL is open")
    }

    /// The first index the log holds (the one after its base when it is empty).
    pub fn first_index(&self) -> u64 {
        self.wal.as_ref().map_or(1, |wal| wal.first_index().0)
    }

    /// The last index the log holds.
    pub fn last_index(&self) -> u64 {
        self.wal.as_ref().map_or(0, |wal| wal.last_index().0)
    }

    /// The entry at `index`, read back from the device, if the log holds it.
    pub fn get(&self, index: u64) -> Option<Entry> {
        let wal = self.wal.as_ref()?;
        let held = index >= wal.first_index().0 && index <= wal.last_index().0;
        // A read that fails is reported by the caller as an entry missing.
        held.then(|| wal.read(EntryIndex(index)).ok()).flatten()
    }

    /// The open WAL's invariants (see [`Wal::check_invariants`]), or with `recent` those of
    /// its last segment; none while the process is down.
    pub fn check_invariants(&self, recent: bool) {
        match &self.wal {
            Some(wal) if recent => wal.check_recent_invariants(),
            Some(wal) => wal.check_invariants(),
            None => {}
        }
    }

    /// Carries out one of the replica's WAL operations that write. A log that writes zeros
    /// ahead first gets its next segment file prepared, as a node's preparer thread makes it
    /// (here at once: which of its writes a crash keeps is the device's to decide all the
    /// same).
    pub fn write(&mut self, op: WalOp) -> Result<(), WalError> {
        let wal = self.wal.as_mut().expect("a live node's WAL is open");
        if wal.wants_prepared() {
            let bytes = wal.segment_bytes_max();
            // A preparation that fails (a full disk) leaves the log to make its own segment.
            if let Ok(prepared) = prepare_segment(&self.device, wal.dir(), bytes) {
                drop(wal.offer_prepared(prepared));
            }
        }
        match op {
            WalOp::Append(entries) => entries.iter().try_for_each(|entry| wal.write(entry)),
            WalOp::Truncate(from) => wal.truncate_from(from),
            WalOp::Compact(through) => wal.compact_through(through).map(drop),
            WalOp::Reset(base) => wal.reset_to(base.index, base.hash),
            WalOp::Ack { .. } | WalOp::Load { .. } | WalOp::Journal { .. } => {
                unreachable!("not a write")
            }
        }
    }

    pub fn push_ack(&mut self, to: NodeId, message: PeerMessage) {
        self.acks.push((to, message));
    }

    /// Starts an fsync unless one is under way; true when one started.
    pub fn begin_sync(&mut self) -> bool {
        !std::mem::replace(&mut self.syncing, true)
    }

    /// The fsync under way completes (`fails`: with an error): everything written is durable,
    /// and the acknowledgements waiting for it go.
    pub fn finish_sync(&mut self, fails: bool) -> Result<Synced, WalError> {
        self.syncing = false;
        if fails {
            self.device.fail_syncs(1);
        }
        let synced = self.wal().sync();
        self.device.fail_syncs(0);
        synced?;
        let wal = self.wal();
        let last = wal.last_index();
        let persisted = (last >= wal.first_index()).then(|| (last, wal.last_term()));
        Ok(Synced {
            acks: std::mem::take(&mut self.acks),
            persisted,
        })
    }

    /// Keeps the hard state, durably.
    pub fn persist(&mut self, hard: HardState) -> Result<(), NodeError> {
        write_hard_state_on(&self.device, data_dir(), hard)?;
        self.hard = hard;
        Ok(())
    }

    /// A crash: the process's WAL is gone, and of what it wrote and did not sync the device
    /// keeps what `rng` draws.
    pub fn crash(&mut self, rng: &mut Rng) {
        self.wal = None;
        self.acks.clear();
        self.syncing = false;
        self.held.clear();
        self.device.crash(rng);
    }

    /// Damage at rest in the WAL: a bit flipped in a segment (three times in four the last
    /// one), where `draw` says. False when the log has no bytes.
    pub fn damage_log(&self, draw: u64) -> bool {
        let mut segments = self.device.files_under(&data_dir().join(WAL_DIR));
        segments.retain(|(path, _)| !path.ends_with(PREPARED_SEGMENT_NAME));
        let Some(last) = segments.len().checked_sub(1) else {
            return false;
        };
        let anywhere = (draw >> 60).is_multiple_of(4);
        let pick = if anywhere {
            (draw >> 32) as usize % segments.len()
        } else {
            last
        };
        self.flip(&segments[pick], draw)
    }

    /// Damage at rest in the newest snapshot file. False when there is none.
    pub fn damage_snapshot(&self, draw: u64) -> bool {
        let snapshots = list_snapshots_on(&self.device, &snapshot_dir()).unwrap_or_default();
        let Some((_, path)) = snapshots.first() else {
            return false;
        };
        let size = self.device.read(path).map_or(0, |bytes| bytes.len() as u64);
        self.flip(&(path.clone(), size), draw)
    }

    /// Damage at rest in the hard state file. False when there is none.
    pub fn damage_hard_state(&self, draw: u64) -> bool {
        let path = data_dir().join(HARD_STATE_FILE);
        match self.device.read(&path) {
            Ok(bytes) => self.flip(&(path, bytes.len() as u64), draw),
            Err(_) => false,
        }
    }

    fn flip(&self, (path, size): &(PathBuf, u64), draw: u64) -> bool {
        *size > 0
            && self
                .device
                .flip_bit(path, draw % size, (draw >> 56) as u8 % 8)
    }

    /// What the disk holds of the log, for the checker: the entries of the log (the open
    /// WAL's, or what a scan of a stopped node's finds) and what its newest readable
    /// snapshot covers.
    pub fn copies(&self) -> Copies {
        let snapshots = list_snapshots_on(&self.device, &snapshot_dir()).unwrap_or_default();
        let covered = snapshots
            .iter()
            .find(|(_, path)| read_snapshot_on(&self.device, path).is_ok())
            .map_or(EntryIndex::ZERO, |(index, _)| *index);
        let hashes = |wal: &Wal<SimDisk>| {
            let (first, last) = (wal.first_index().0, wal.last_index().0);
            (first..=last)
                .map(|i| wal.hash_at(EntryIndex(i)).expect("held"))
                .collect()
        };
        let (first, hashes) = match &self.wal {
            Some(wal) => (wal.first_index().0, hashes(wal)),
            None => {
                let dir = data_dir().join(WAL_DIR);
                let read_only = (SIM_WAL_SEGMENT_BYTES, Access::ReadOnly);
                let scan =
                    Wal::scan_repairing_in(self.device.clone(), &dir, read_only.0, read_only.1);
                scan.map_or((1, Vec::new()), |(wal, _)| {
                    (wal.first_index().0, hashes(&wal))
                })
            }
        };
        Copies {
            covered,
            first,
            hashes,
        }
    }
}

/// What one disk holds of the log (see [`Disk::copies`]).
pub(super) struct Copies {
    covered: EntryIndex,
    first: u64,
    hashes: Vec<EntryHash>,
}

impl Copies {
    /// Whether the entry `index` with hash `hash` is held: in the log, or under a snapshot.
    pub fn holds(&self, index: u64, hash: &EntryHash) -> bool {
        let in_log = index
            .checked_sub(self.first)
            .and_then(|at| self.hashes.get(at as usize));
        self.covered.0 >= index || in_log == Some(hash)
    }
}
