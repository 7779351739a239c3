//! A simulated node's disk: a [`SimDisk`] device that outlives the node's processes, holding
//! the node's data directory as the product lays it out (hard state, WAL segments, snapshot
//! files), and while a process lives the product's own WAL open on it. What a crash keeps is
//! the device's to decide (unsynced writes lost or torn); what a restart makes of it is the
//! product's recovery's ([`crate::node::recovery::recover_on`]); damage is bits flipped in
//! the files, for the product's scans to find.

use crate::core::{HardState, KnownMembers};
use crate::entry::{Entry, EntryHash};
use crate::ids::{EntryIndex, NodeId};
use crate::node::NodeError;
use crate::replica::WalOp;
use crate::rng::Rng;
use crate::snapshot::{list_snapshots_on, read_snapshot_on};
use crate::state::StateHash;
use crate::storage::hard_state::{HARD_STATE_FILE, SNAPSHOT_DIR, WAL_DIR, write_hard_state_on};
use crate::storage::journal::Journaling;
use crate::storage::members_file::{MEMBERS_FILE, MembersFileError, write_known_members_on};
use crate::storage::{Access, SimDisk, Storage};
use crate::wal::executor::{Beside, Step, WalEvent, WalExecutor};
use crate::wal::{PREPARED_SEGMENT_NAME, Wal, WalError, prepare_segment, remove_segments};
use net::message::PeerMessage;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a simulated node keeps its data, on its own device.
pub const SIM_DATA_DIR: &str = "/data";
/// The simulated WAL's segment size (small, so that segments roll over and compaction frees
/// whole ones).
pub const SIM_WAL_SEGMENT_BYTES: u64 = 16 * 1024;
/// Bytes of zeros written ahead of appends, on the seeds that write them.
pub const SIM_WAL_ZERO_AHEAD_BYTES: u64 = 8 * 1024;

/// What a run of a simulated node's WAL executor did.
pub(super) struct Ran {
    /// Where it stopped.
    pub step: Step,
    /// What it reports, as the node's WAL thread would.
    pub events: Vec<WalEvent>,
    /// Acknowledgements it let go.
    pub acks: Vec<(NodeId, PeerMessage)>,
    /// Segments behind a compaction that could not be removed.
    pub removal: Option<WalError>,
}

pub(super) struct Disk {
    /// The device: what outlives a crash.
    pub device: SimDisk,
    /// The product's WAL executor, while the process lives.
    wal: Option<WalExecutor<SimDisk>>,
    /// An fsync is under way (its completion is an event): the executor waits for it.
    syncing: bool,
    /// Work the replica queued while the executor's batch was under way: as on a node's WAL
    /// thread, it joins the next batch.
    arrived: VecDeque<WalOp>,
    /// The executor's batch is under way: its last run stopped for a sync.
    in_batch: bool,
    /// The apply journal beside the log, while the process lives.
    journal: Option<Journaling<SimDisk>>,
    /// The hard state last made durable.
    pub hard: HardState,
    /// The file system is full: the executor's writes that would grow a file fail.
    pub full: bool,
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
            syncing: false,
            arrived: VecDeque::new(),
            in_batch: false,
            journal: None,
            hard: HardState::default(),
            full: false,
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
        let bytes = wal.segment_bytes_max();
        self.journal = Some(Journaling::open(self.device.clone(), data_dir(), bytes));
        self.wal = Some(WalExecutor::new(wal));
        self.hard = hard;
    }

    /// The first index the log holds (the one after its base when it is empty).
    pub fn first_index(&self) -> u64 {
        self.wal.as_ref().map_or(1, |wal| wal.wal().first_index().0)
    }

    /// The last index the log holds.
    pub fn last_index(&self) -> u64 {
        self.wal.as_ref().map_or(0, |wal| wal.wal().last_index().0)
    }

    /// The entry at `index`, read back from the device, if the log holds it.
    pub fn get(&self, index: u64) -> Option<Entry> {
        let wal = self.wal.as_ref()?.wal();
        let held = index >= wal.first_index().0 && index <= wal.last_index().0;
        // A read that fails is reported by the caller as an entry missing.
        held.then(|| wal.read(EntryIndex(index)).ok()).flatten()
    }

    /// The open WAL's invariants (see [`Wal::check_invariants`]), or with `recent` those of
    /// its last segment; none while the process is down.
    pub fn check_invariants(&self, recent: bool) {
        match self.wal.as_ref().map(WalExecutor::wal) {
            Some(wal) if recent => wal.check_recent_invariants(),
            Some(wal) => wal.check_invariants(),
            None => {}
        }
    }

    /// True while WAL work is queued and not carried out (behind a sync under way or a full
    /// disk).
    pub fn has_pending(&self) -> bool {
        !self.arrived.is_empty() || self.wal.as_ref().is_some_and(WalExecutor::has_pending)
    }

    /// True while a truncation or a reset is queued: the log's entries may be replaced.
    pub fn rewrite_pending(&self) -> bool {
        let queued = self.wal.iter().flat_map(WalExecutor::queued);
        queued
            .chain(&self.arrived)
            .any(|op| matches!(op, WalOp::Truncate(_) | WalOp::Reset(_)))
    }

    /// Queues one of the replica's WAL operations, for the executor's next batch.
    pub fn queue(&mut self, op: WalOp) {
        self.arrived.push_back(op);
    }

    /// Runs the executor unless a sync is under way, with the device full while it runs if
    /// the disk is: only the WAL's writes find it full.
    pub fn run(&mut self) -> Ran {
        let mut ran = Ran {
            step: Step::SyncDue,
            events: Vec::new(),
            acks: Vec::new(),
            removal: None,
        };
        if self.syncing {
            return ran;
        }
        let journal = self.journal.as_mut().expect("opened with the WAL");
        let mut beside = SimBeside::new(journal);
        let executor = self.wal.as_mut().expect("a live node's WAL is open");
        if !self.in_batch {
            self.arrived.drain(..).for_each(|op| executor.queue(op));
        }
        self.device.set_full(self.full);
        ran.step = executor.run(&mut beside, &mut ran.acks, &mut ran.events);
        self.device.set_full(false);
        self.in_batch = ran.step == Step::SyncDue;
        ran.removal = beside.removal;
        ran
    }

    /// Starts an fsync unless one is under way; true when one started.
    pub fn begin_sync(&mut self) -> bool {
        !std::mem::replace(&mut self.syncing, true)
    }

    /// The fsync under way completes (`fails`: with an error): everything written is durable
    /// and reported, or the WAL failed.
    pub fn finish_sync(&mut self, fails: bool) -> Vec<WalEvent> {
        self.syncing = false;
        if fails {
            self.device.fail_syncs(1);
        }
        let mut events = Vec::new();
        let journal = self.journal.as_mut().expect("opened with the WAL");
        let executor = self.wal.as_mut().expect("a live node's WAL is open");
        executor.sync(&mut SimBeside::new(journal), &mut events);
        self.device.fail_syncs(0);
        events
    }

    /// Keeps the hard state, durably.
    pub fn persist(&mut self, hard: HardState) -> Result<(), NodeError> {
        write_hard_state_on(&self.device, data_dir(), hard)?;
        self.hard = hard;
        Ok(())
    }

    /// Keeps the record of known members, durably.
    pub fn persist_known(&mut self, known: &KnownMembers) -> Result<(), MembersFileError> {
        write_known_members_on(&self.device, data_dir(), known)
    }

    /// Damage at rest in the record of known members. False when there is none.
    pub fn damage_known_members(&self, draw: u64) -> bool {
        let path = data_dir().join(MEMBERS_FILE);
        match self.device.read(&path) {
            Ok(bytes) => self.flip(&(path, bytes.len() as u64), draw),
            Err(_) => false,
        }
    }

    /// A crash: the process's WAL is gone, and of what it wrote and did not sync the device
    /// keeps what `rng` draws.
    pub fn crash(&mut self, rng: &mut Rng) {
        self.wal = None;
        self.journal = None;
        self.syncing = false;
        self.arrived.clear();
        self.in_batch = false;
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
        let (first, hashes) = match self.wal.as_ref().map(WalExecutor::wal) {
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

/// What the simulated node's WAL executor does beside the log: its next segment prepared at
/// once (which of its writes a crash keeps is the device's to decide all the same), freed
/// segments removed at once, and the product's apply journal kept on the device.
struct SimBeside<'a> {
    removal: Option<WalError>,
    journal: &'a mut Journaling<SimDisk>,
}

impl<'a> SimBeside<'a> {
    fn new(journal: &'a mut Journaling<SimDisk>) -> Self {
        SimBeside {
            removal: None,
            journal,
        }
    }
}

impl Beside<SimDisk> for SimBeside<'_> {
    fn prepare(&mut self, wal: &mut Wal<SimDisk>) {
        if !wal.wants_prepared() {
            return;
        }
        let bytes = wal.segment_bytes_max();
        // A preparation that fails (a full disk) leaves the log to make its own segment.
        if let Ok(prepared) = prepare_segment(wal.storage(), wal.dir(), bytes) {
            drop(wal.offer_prepared(prepared));
        }
    }

    fn journal(&mut self, index: EntryIndex, state_hash: StateHash, ran: crate::apply::Ran) {
        self.journal.record(index, state_hash, ran);
    }

    fn synced(&mut self, _: &Wal<SimDisk>, _: Duration) {}

    fn released(
        &mut self,
        disk: &SimDisk,
        dir: &Path,
        through: EntryIndex,
        segments: Vec<PathBuf>,
    ) {
        self.journal.release_through(through);
        if let Err(error) = remove_segments(disk, dir, &segments) {
            self.removal.get_or_insert(error);
        }
    }

    fn drained(&mut self) {
        self.journal.flush();
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
