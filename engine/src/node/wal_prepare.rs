//! The WAL's segment preparer: a thread that writes the log's next segment file ahead of need
//! ([`crate::wal::prepare_segment`]), so that the appends on the WAL's thread never grow a
//! file and never wait for its zeros.

use crate::storage::Files;
use crate::storage::data_dir::DirLock;
use crate::wal::{PreparedSegment, Wal, WalError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// Least time between a preparation that failed or was not taken (a full disk, say) and the
/// next try, in milliseconds; meanwhile the log creates its segments itself, as it does
/// without a preparer.
pub const WAL_PREPARE_RETRY_MS: u64 = 1_000;
/// A preparation starts only while the file system has at least this many segments' bytes
/// free: its zeros are room the log's appends may need more.
pub const WAL_PREPARE_FREE_SEGMENTS_MIN: u64 = 4;

/// What the thread sends back: a segment file of zeros, or why it made none.
type Prepared = Result<PreparedSegment<std::fs::File>, WalError>;

/// The WAL thread's handle on its preparer.
pub(super) struct Preparer {
    /// Absent when no thread could be started: the log makes its own segments.
    thread: Option<Thread>,
    /// A preparation is under way.
    asked: bool,
    /// No preparation before this time (one failed or was refused).
    idle_until: Option<Instant>,
    /// The last preparation failed (its warning said so; the next ones are quieter).
    failing: bool,
}

struct Thread {
    asks: mpsc::SyncSender<()>,
    made: mpsc::Receiver<Prepared>,
    /// Set when the handle goes: a request still queued is not carried out.
    stopped: Arc<AtomicBool>,
}

impl Drop for Thread {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
    }
}

impl Preparer {
    /// Starts the thread for `wal`'s directory and segment size; it holds `lock`, the data
    /// directory's, until it ends.
    pub(super) fn spawn(wal: &Wal, lock: Arc<DirLock>) -> Preparer {
        let thread = Thread::spawn(wal.dir().to_path_buf(), wal.segment_bytes_max(), lock)
            .map_err(|error| tracing::warn!(%error, "no thread to prepare WAL segments"))
            .ok();
        Preparer {
            thread,
            asked: false,
            idle_until: None,
            failing: false,
        }
    }

    /// Asks for a segment file unless one is under way or a failure is recent.
    pub(super) fn ask(&mut self) {
        let resting = self.idle_until.is_some_and(|until| Instant::now() < until);
        let Some(thread) = self.thread.as_ref().filter(|_| !self.asked && !resting) else {
            return;
        };
        self.asked = thread.asks.try_send(()).is_ok();
    }

    /// Hands `wal` the segment file the thread finished, if it did.
    pub(super) fn deliver(&mut self, wal: &mut Wal) {
        let Some(Ok(prepared)) = self.thread.as_ref().map(|t| t.made.try_recv()) else {
            return;
        };
        self.asked = false;
        let refused = match prepared {
            Ok(segment) => {
                self.failing = false;
                wal.offer_prepared(segment).is_some()
            }
            Err(error) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(%error, "cannot prepare a WAL segment; the log makes its own");
                }
                true
            }
        };
        if refused {
            let pause = Duration::from_millis(WAL_PREPARE_RETRY_MS);
            self.idle_until = Some(Instant::now() + pause);
        }
    }
}

impl Thread {
    fn spawn(dir: PathBuf, bytes: u64, lock: Arc<DirLock>) -> io::Result<Thread> {
        // One request at a time: the WAL thread asks again only after a delivery.
        let (asks, queue) = mpsc::sync_channel::<()>(1);
        let (done, made) = mpsc::channel();
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopped);
        let span = tracing::Span::current();
        thread::Builder::new()
            .name("wal-prepare".into())
            .spawn(move || {
                let _entered = span.entered();
                let _held = lock;
                for () in queue {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    if done.send(prepare(&dir, bytes)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Thread {
            asks,
            made,
            stopped,
        })
    }
}

/// One segment file of `bytes` zeros in `dir`, if the file system has room to spare.
fn prepare(dir: &Path, bytes: u64) -> Prepared {
    let needed = bytes.saturating_mul(WAL_PREPARE_FREE_SEGMENTS_MIN);
    // A file system that cannot say counts as roomy: the preparation's own writes then find
    // out, and a full disk removes the partial file.
    if let Ok(stats) = rustix::fs::statvfs(dir)
        && stats.f_bavail.saturating_mul(stats.f_frsize) < needed
    {
        return Err(WalError::Full {
            path: dir.to_path_buf(),
            source: io::Error::from(io::ErrorKind::StorageFull),
        });
    }
    crate::wal::prepare_segment(&Files, dir, bytes)
}
