//! [`Storage`] in memory, for the simulator: a disk that remembers what each fsync made
//! durable, and on a crash keeps of the rest whatever a seeded draw chooses, tearing writes
//! at page granularity; and that flips bits at rest, fails syncs and fills up on demand.
//!
//! What it models (the promises of [`Storage`], and no more):
//! - A write is durable once a sync of its file returns; unsynced writes of a file survive a
//!   crash as a prefix, in the order they were made, the first lost one possibly torn: any
//!   subset of its pages ([`SIM_PAGE_BYTES`]) kept.
//! - A name (created, renamed, removed) is durable once a sync of its directory returns; a
//!   crash restores the names of the last directory sync. Directories themselves are durable
//!   once made, and once moved.
//! - A failed sync makes nothing durable; what it covered stays at the crash's mercy.
//! - A full disk refuses a write that would grow a file, with nothing written.

use super::{Access, Storage, StorageFile};
use crate::rng::Rng;
use crate::storage::files::parent_of;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The unit a torn write keeps or loses: one page of the page cache.
pub const SIM_PAGE_BYTES: u64 = 4096;

/// A simulated disk; clones share it (as handles to one device).
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    inner: Arc<Mutex<Device>>,
}

/// What a crash did to the unsynced writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Crash {
    /// Unsynced writes (and length changes) that survived whole.
    pub kept: u64,
    /// Unsynced writes of which only some pages survived.
    pub torn: u64,
    /// Unsynced writes and length changes lost.
    pub lost: u64,
    /// Names whose creation, rename or removal was undone.
    pub names_undone: u64,
}

#[derive(Debug, Default)]
struct Device {
    dirs: BTreeSet<PathBuf>,
    /// The names a lookup sees now.
    names: BTreeMap<PathBuf, u64>,
    /// The names a crash leaves: those of each directory's last sync.
    durable_names: BTreeMap<PathBuf, u64>,
    files: BTreeMap<u64, Inode>,
    next_inode: u64,
    /// Bumped by each crash: handles opened before it are dead.
    generation: u64,
    full: bool,
    failing_syncs: u64,
    /// Changes the process makes before it stops ([`SimDisk::stop_after`]); `None`: no end.
    steps_left: Option<u64>,
}

#[derive(Debug, Default)]
struct Inode {
    /// What a read sees.
    now: Vec<u8>,
    /// What a crash keeps for certain.
    durable: Vec<u8>,
    /// Changes since the last sync, in order.
    pending: Vec<Change>,
}

#[derive(Clone, Debug)]
enum Change {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

impl Change {
    fn apply(&self, data: &mut Vec<u8>) {
        match self {
            Change::Write { offset, bytes } => write_at(data, bytes, *offset),
            Change::SetLen(len) => data.resize(*len as usize, 0),
        }
    }
}

fn write_at(data: &mut Vec<u8>, bytes: &[u8], offset: u64) {
    let (start, end) = (offset as usize, offset as usize + bytes.len());
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(bytes);
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

/// A file of a [`SimDisk`].
#[derive(Debug)]
pub struct SimFile {
    disk: SimDisk,
    inode: u64,
    generation: u64,
    access: Access,
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    fn device(&self) -> MutexGuard<'_, Device> {
        // A panic while the lock was held is the simulator's own failure, reported already.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A crash: every file keeps its durable bytes and, of its unsynced changes, a prefix
    /// `rng` chooses, the first change lost possibly torn; every name reverts to its
    /// directory's last sync; handles opened before die.
    pub fn crash(&self, rng: &mut Rng) -> Crash {
        self.device().steps_left = None;
        let mut device = self.device();
        let mut crash = Crash::default();
        for inode in device.files.values_mut() {
            inode.crash(rng, &mut crash);
        }
        let undone = device
            .names
            .iter()
            .filter(|(name, inode)| device.durable_names.get(*name) != Some(inode))
            .count()
            + device
                .durable_names
                .keys()
                .filter(|name| !device.names.contains_key(*name))
                .count();
        crash.names_undone = undone as u64;
        device.names = device.durable_names.clone();
        let live: BTreeSet<u64> = device.names.values().copied().collect();
        device.files.retain(|inode, _| live.contains(inode));
        device.generation += 1;
        device.failing_syncs = 0;
        crash
    }

    /// Fills the disk (a write that would grow a file fails) or gives room back.
    pub fn set_full(&self, full: bool) {
        self.device().full = full;
    }

    /// The next `count` syncs (of files or directories) fail, making nothing durable.
    pub fn fail_syncs(&self, count: u64) {
        self.device().failing_syncs = count;
    }

    /// The process stops after `steps` more changes (a file or directory created, renamed,
    /// linked or removed, a write, a length change, a sync): each later one fails, as if the
    /// process had died there, until the next [`SimDisk::crash`]. Crash tests stop a sequence
    /// of writes at each step in turn.
    pub fn stop_after(&self, steps: u64) {
        self.device().steps_left = Some(steps);
    }

    /// Flips bit `bit` (0-7) of the byte at `offset` in the file `path`, in what a read sees
    /// and in what a crash keeps: damage at rest. False when there is no such byte.
    pub fn flip_bit(&self, path: &Path, offset: u64, bit: u8) -> bool {
        let mut device = self.device();
        let Some(&inode) = device.names.get(path) else {
            return false;
        };
        let file = device.files.get_mut(&inode).expect("a name's file exists");
        let mask = 1u8 << (bit % 8);
        let mut flipped = false;
        for data in [&mut file.now, &mut file.durable] {
            if let Some(byte) = data.get_mut(offset as usize) {
                *byte ^= mask;
                flipped = true;
            }
        }
        flipped
    }

    /// The files under `dir` (at any depth) with their lengths, in name order.
    pub fn files_under(&self, dir: &Path) -> Vec<(PathBuf, u64)> {
        let device = self.device();
        device
            .names
            .iter()
            .filter(|(name, _)| name.starts_with(dir))
            .map(|(name, inode)| (name.clone(), device.files[inode].now.len() as u64))
            .collect()
    }

    /// Bytes of unsynced changes waiting in every file.
    pub fn unsynced_bytes(&self) -> u64 {
        let device = self.device();
        let changed = |change: &Change| match change {
            Change::Write { bytes, .. } => bytes.len() as u64,
            Change::SetLen(_) => 0,
        };
        device
            .files
            .values()
            .flat_map(|inode| inode.pending.iter().map(changed))
            .sum()
    }
}

/// A crash tears the first write it loses of a file (some of its pages reach the disk),
/// as a chance of `.0` in `.1`.
pub const CRASH_TEARS_WRITE: (u64, u64) = (1, 2);
/// Each page of a torn write reaches the disk, as a chance of `.0` in `.1`.
pub const TORN_PAGE_KEPT: (u64, u64) = (1, 2);

impl Inode {
    fn crash(&mut self, rng: &mut Rng, crash: &mut Crash) {
        let pending = std::mem::take(&mut self.pending);
        let kept = rng.below(pending.len() as u64 + 1) as usize;
        for change in &pending[..kept] {
            change.apply(&mut self.durable);
        }
        crash.kept += kept as u64;
        crash.lost += (pending.len() - kept) as u64;
        if let Some(Change::Write { offset, bytes }) = pending.get(kept)
            && rng.chance(CRASH_TEARS_WRITE.0, CRASH_TEARS_WRITE.1)
        {
            crash.torn += tear(&mut self.durable, bytes, *offset, rng) as u64;
        }
        self.now = self.durable.clone();
    }

    fn sync(&mut self) {
        for change in std::mem::take(&mut self.pending) {
            change.apply(&mut self.durable);
        }
        debug_assert_eq!(
            self.durable, self.now,
            "a sync makes what a read sees durable"
        );
    }
}

/// Keeps a random subset of the pages of a lost write; true when any page was kept.
fn tear(data: &mut Vec<u8>, bytes: &[u8], offset: u64, rng: &mut Rng) -> bool {
    let mut torn = false;
    let mut at = offset;
    let end = offset + bytes.len() as u64;
    while at < end {
        let page_end = ((at / SIM_PAGE_BYTES + 1) * SIM_PAGE_BYTES).min(end);
        if rng.chance(TORN_PAGE_KEPT.0, TORN_PAGE_KEPT.1) {
            let part = &bytes[(at - offset) as usize..(page_end - offset) as usize];
            write_at(data, part, at);
            torn = true;
        }
        at = page_end;
    }
    torn
}

impl Device {
    fn inode(&mut self, path: &Path) -> io::Result<u64> {
        self.names.get(path).copied().ok_or_else(|| not_found(path))
    }

    fn check_dir(&self, dir: &Path) -> io::Result<()> {
        match self.dirs.contains(dir) {
            true => Ok(()),
            false => Err(not_found(dir)),
        }
    }

    /// Moves the directory `from` and all it holds to `to`, durably at once (as a directory
    /// is durable once made: this disk keeps no directory entries of its own).
    fn move_dir(&mut self, from: &Path, to: &Path) {
        let moved = |path: &Path| to.join(path.strip_prefix(from).expect("under the directory"));
        let under = |path: &PathBuf| path.starts_with(from);
        let dirs: Vec<PathBuf> = self.dirs.iter().filter(|d| under(d)).cloned().collect();
        for dir in dirs {
            self.dirs.remove(&dir);
            self.dirs.insert(moved(&dir));
        }
        for names in [&mut self.names, &mut self.durable_names] {
            let inside: Vec<PathBuf> = names.keys().filter(|n| under(n)).cloned().collect();
            for name in inside {
                let inode = names.remove(&name).expect("listed");
                names.insert(moved(&name), inode);
            }
        }
    }

    /// One change the process makes: refused once the process has stopped.
    fn step(&mut self) -> io::Result<()> {
        match self.steps_left {
            None => Ok(()),
            Some(0) => Err(io::Error::other("the simulated process stopped")),
            Some(left) => {
                self.steps_left = Some(left - 1);
                Ok(())
            }
        }
    }

    /// Nothing is at `path` ([`io::ErrorKind::AlreadyExists`] otherwise).
    fn check_free(&self, path: &Path) -> io::Result<()> {
        if self.names.contains_key(path) || self.dirs.contains(path) {
            let message = format!("{}: exists", path.display());
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, message));
        }
        Ok(())
    }

    fn take_sync(&mut self) -> io::Result<()> {
        if self.failing_syncs == 0 {
            return Ok(());
        }
        self.failing_syncs -= 1;
        Err(io::Error::other("simulated fsync failure"))
    }
}

impl Storage for SimDisk {
    type File = SimFile;

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut device = self.device();
        device.step()?;
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            if device.names.contains_key(ancestor) {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{}: a file", ancestor.display()),
                ));
            }
            device.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut device = self.device();
        device.step()?;
        device.check_dir(parent_of(dir))?;
        device.check_free(dir)?;
        device.dirs.insert(dir.to_path_buf());
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let device = self.device();
        Ok(device.dirs.contains(path) || device.names.contains_key(path))
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.device().dirs.contains(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let device = self.device();
        device.check_dir(dir)?;
        let in_dir = |name: &&PathBuf| name.parent() == Some(dir);
        Ok(device.names.keys().filter(in_dir).cloned().collect())
    }

    fn open(&self, path: &Path, access: Access) -> io::Result<SimFile> {
        let mut device = self.device();
        let inode = device.inode(path)?;
        Ok(SimFile {
            disk: self.clone(),
            inode,
            generation: device.generation,
            access,
        })
    }

    fn create_new(&self, path: &Path) -> io::Result<SimFile> {
        let mut device = self.device();
        device.step()?;
        device.check_dir(parent_of(path))?;
        device.check_free(path)?;
        device.next_inode += 1;
        let inode = device.next_inode;
        device.files.insert(inode, Inode::default());
        device.names.insert(path.to_path_buf(), inode);
        Ok(SimFile {
            disk: self.clone(),
            inode,
            generation: device.generation,
            access: Access::ReadWrite,
        })
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut device = self.device();
        let inode = device.inode(path)?;
        Ok(device.files[&inode].now.clone())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut device = self.device();
        device.step()?;
        device
            .names
            .remove(path)
            .map(drop)
            .ok_or_else(|| not_found(path))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut device = self.device();
        device.step()?;
        device.check_dir(parent_of(to))?;
        if device.dirs.contains(from) {
            device.move_dir(from, to);
            return Ok(());
        }
        let inode = device.names.remove(from).ok_or_else(|| not_found(from))?;
        device.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut device = self.device();
        device.step()?;
        device.check_dir(parent_of(to))?;
        device.check_free(to)?;
        let inode = *device.names.get(from).ok_or_else(|| not_found(from))?;
        device.names.insert(to.to_path_buf(), inode);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut device = self.device();
        device.step()?;
        device.check_dir(dir)?;
        device.take_sync()?;
        let in_dir = |name: &PathBuf| name.parent() == Some(dir);
        device.durable_names.retain(|name, _| !in_dir(name));
        let now: Vec<(PathBuf, u64)> = device
            .names
            .iter()
            .filter(|(name, _)| in_dir(name))
            .map(|(name, inode)| (name.clone(), *inode))
            .collect();
        device.durable_names.extend(now);
        Ok(())
    }
}

impl SimFile {
    /// The file's inode, on the device of its generation; a handle from before a crash is an
    /// error (the process that held it is gone).
    fn with<T>(&self, act: impl FnOnce(&mut Device, &mut Inode) -> io::Result<T>) -> io::Result<T> {
        let mut device = self.disk.device();
        if device.generation != self.generation {
            return Err(io::Error::other("a file handle from before a crash"));
        }
        let mut inode = device.files.remove(&self.inode).unwrap_or_default();
        let result = act(&mut device, &mut inode);
        device.files.insert(self.inode, inode);
        result
    }

    fn writable(&self) -> io::Result<()> {
        match self.access {
            Access::ReadWrite => Ok(()),
            Access::ReadOnly => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "opened for reading only",
            )),
        }
    }
}

impl StorageFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with(|_, inode| {
            let start = offset as usize;
            let Some(bytes) = inode.now.get(start..start + buf.len()) else {
                return Err(io::ErrorKind::UnexpectedEof.into());
            };
            buf.copy_from_slice(bytes);
            Ok(())
        })
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.writable()?;
        self.with(|device, inode| {
            let end = offset + bytes.len() as u64;
            device.step()?;
            if device.full && end > inode.now.len() as u64 {
                return Err(io::ErrorKind::StorageFull.into());
            }
            write_at(&mut inode.now, bytes, offset);
            let bytes = bytes.to_vec();
            inode.pending.push(Change::Write { offset, bytes });
            Ok(())
        })
    }

    fn size(&self) -> io::Result<u64> {
        self.with(|_, inode| Ok(inode.now.len() as u64))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.writable()?;
        self.with(|device, inode| {
            device.step()?;
            inode.now.resize(len as usize, 0);
            inode.pending.push(Change::SetLen(len));
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        self.with(|device, inode| {
            device.step()?;
            device.take_sync()?;
            inode.sync();
            Ok(())
        })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }
}
