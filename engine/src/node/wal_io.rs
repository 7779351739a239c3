//! Where a node's WAL work is carried out: on the WAL's own thread, which any storage can use,
//! or on the node's thread itself, for storage whose fsync is a memory operation (tmpfs), where
//! handing each entry to another thread and its report back cost more than the write.
//!
//! Either way the work is the same ([`crate::wal::executor`]) and so are its events: the
//! replica cannot tell them apart, and the simulator runs the same executor over its disk.

use super::wal_thread::{InlineWal, WalThread};
use crate::replica::WalOp;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `wal_io` setting: where the WAL's writes and fsyncs run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum WalIo {
    /// On the node's thread when the WAL's file system keeps its files in memory (tmpfs,
    /// ramfs) and no fsync delay is configured; on the WAL's own thread otherwise.
    #[default]
    Auto,
    /// On the WAL's own thread: an fsync that takes milliseconds does not hold the node's
    /// heartbeats, replication and apply.
    Thread,
    /// On the node's thread, whatever the storage: every fsync holds the node while it runs.
    Inline,
}

/// statfs's `f_type` of tmpfs (`TMPFS_MAGIC`, linux/magic.h).
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// statfs's `f_type` of ramfs (`RAMFS_MAGIC`, linux/magic.h).
const RAMFS_MAGIC: u64 = 0x8584_58f6;

impl WalIo {
    /// Whether the WAL kept in `dir` runs on the node's thread, with `fsync_delay_ms` added
    /// after each fsync.
    pub(crate) fn inline_for(self, dir: &Path, fsync_delay_ms: u64) -> bool {
        match self {
            WalIo::Thread => false,
            WalIo::Inline => true,
            WalIo::Auto => fsync_delay_ms == 0 && in_memory(dir),
        }
    }

    /// Whether this is the default, `auto`.
    pub fn is_auto(&self) -> bool {
        *self == WalIo::Auto
    }

    /// The setting as the cluster file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            WalIo::Auto => "auto",
            WalIo::Thread => "thread",
            WalIo::Inline => "inline",
        }
    }
}

/// Bytes of zeros the WAL kept in `dir` writes ahead of its appends
/// ([`crate::wal::Wal::set_zero_ahead`]): none in memory, where they would be one more copy.
pub(crate) fn zero_ahead_for(dir: &Path) -> u64 {
    match in_memory(dir) {
        true => 0,
        false => crate::wal::WAL_ZERO_AHEAD_BYTES,
    }
}

/// Whether `dir` lies on a file system that keeps its files in memory. One that cannot be
/// asked counts as a disk: the thread is right for any storage.
fn in_memory(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|stats| {
        let kind = stats.f_type as u64;
        kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
    })
}

/// The WAL as the driver holds it.
pub(super) enum WalWorker {
    /// Work is queued to the WAL's thread, which reports back through the node's inbox.
    Thread(WalThread),
    /// Work is queued here and carried out on the node's thread when the driver flushes it.
    Inline(Box<InlineWal>),
}

impl WalWorker {
    /// Queues `op`; false once the WAL's thread has stopped.
    pub(super) fn send(&mut self, op: WalOp) -> bool {
        match self {
            WalWorker::Thread(thread) => thread.send(op),
            WalWorker::Inline(inline) => {
                inline.queue(op);
                true
            }
        }
    }

    /// Where the work runs, for the start's log line.
    pub(super) fn place(&self) -> &'static str {
        match self {
            WalWorker::Thread(_) => "the WAL's own thread",
            WalWorker::Inline(_) => "the node's thread",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the explicit settings are kept whatever the storage, `auto` picks the node's
    /// thread only on a file system in memory without an fsync delay, and the cluster file's
    /// spelling is the setting's.
    #[test]
    fn auto_runs_inline_only_on_memory_without_a_delay() {
        for dir in [Path::new("/proc"), Path::new("/sys")] {
            assert!(!in_memory(dir), "{} is not in memory", dir.display());
            assert!(!WalIo::Auto.inline_for(dir, 0));
            assert!(WalIo::Inline.inline_for(dir, 0));
        }
        // The main job's default storage.
        let shm = Path::new("/dev/shm");
        assert!(in_memory(shm), "/dev/shm is tmpfs");
        assert!(WalIo::Auto.inline_for(shm, 0));
        assert!(!WalIo::Auto.inline_for(shm, 5));
        assert!(!WalIo::Thread.inline_for(shm, 0));
        #[derive(Serialize)]
        struct Setting {
            wal_io: WalIo,
        }
        for wal_io in [WalIo::Auto, WalIo::Thread, WalIo::Inline] {
            let spelled = toml::to_string(&Setting { wal_io }).unwrap();
            assert_eq!(spelled.trim(), format!("wal_io = \"{}\"", wal_io.as_str()));
        }
    }

    /// Proves the WAL writes zeros ahead only where they save a journal commit: not in memory.
    #[test]
    fn zeros_ahead_only_off_memory() {
        assert_eq!(zero_ahead_for(Path::new("/dev/shm")), 0);
        let disk = zero_ahead_for(Path::new("/proc"));
        assert_eq!(disk, crate::wal::WAL_ZERO_AHEAD_BYTES);
    }
}
