//! The WAL's own thread: appends and fsyncs off the async runtime, batching whatever queued
//! while the previous fsync ran into one fsync (group commit).

use super::metrics::WalCounters;
use super::wal_prepare::Preparer;
use crate::apply::Ran;
use crate::handshake::Offer;
use crate::ids::{EntryIndex, NodeId};
pub(crate) use crate::replica::WalOp;
use crate::state::StateHash;
use crate::storage::Files;
use crate::storage::data_dir::DirLock;
use crate::storage::journal::Journaling;
use crate::wal::Wal;
pub(crate) use crate::wal::executor::WalEvent;
use crate::wal::executor::{AckSink, Beside, Step, WalExecutor};
use net::message::PeerMessage;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Time between two tries of an append that found the file system full.
pub const WAL_FULL_RETRY_MS: u64 = 100;

/// The node's handle on the WAL thread.
pub(crate) struct WalThread {
    ops: mpsc::Sender<WalOp>,
}

impl WalThread {
    /// Starts the thread; `report` delivers its events to the node. The thread (and any it
    /// starts to remove segments) holds `lock`, the data directory's, until it ends; it adds
    /// the bytes it writes and its fsyncs' times to `counters`.
    pub(crate) fn spawn(
        wal: Wal,
        acker: Acker,
        name: String,
        disk: DiskSetup,
        report: impl Fn(WalEvent) -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let (ops, queue) = mpsc::channel();
        let disk = Disk::open(&wal, disk);
        let span = tracing::Span::current();
        thread::Builder::new().name(name).spawn(move || {
            let _entered = span.entered();
            run(WalExecutor::new(wal), acker, queue, disk, report)
        })?;
        Ok(WalThread { ops })
    }

    /// Queues work; false once the thread has stopped.
    pub(crate) fn send(&self, op: WalOp) -> bool {
        self.ops.send(op).is_ok()
    }
}

/// What the WAL's worker is given beside the log: the delay added after every fsync
/// (`NodeConfig::fsync_delay_ms`; zero adds nothing), the data directory's lock, its counters,
/// and where it tells the last entry the apply journal has written (the change stream waits
/// on it).
pub(crate) struct DiskSetup {
    pub(crate) slow: Duration,
    pub(crate) lock: Arc<DirLock>,
    pub(crate) counters: WalCounters,
    pub(crate) journaled: tokio::sync::watch::Sender<EntryIndex>,
}

/// What the WAL thread works with beside the log (see [`DiskSetup`]).
struct Disk {
    slow: Duration,
    lock: Arc<DirLock>,
    counters: WalCounters,
    journaled: tokio::sync::watch::Sender<EntryIndex>,
    /// The apply journal.
    journal: Journaling<Files>,
    /// The thread that prepares the log's next segment file, started once the log wants one.
    preparer: Option<Preparer>,
}

impl Disk {
    /// What the WAL kept in `wal`'s directory works with: the apply journal beside it, if it
    /// opens (the node goes on without one).
    fn open(wal: &Wal, setup: DiskSetup) -> Self {
        let data_dir = wal.dir().parent().unwrap_or(wal.dir());
        let journal = Journaling::open(Files, data_dir, wal.segment_bytes_max());
        let mut disk = Disk {
            slow: setup.slow,
            lock: setup.lock,
            counters: setup.counters,
            journaled: setup.journaled,
            journal,
            preparer: None,
        };
        disk.tell_journaled();
        disk
    }

    /// Tells the change stream the last entry the journal has written, when it moved.
    fn tell_journaled(&mut self) {
        let Some(written) = self.journal.written() else {
            return;
        };
        self.journaled.send_if_modified(|last| {
            let moved = *last != written;
            *last = written;
            moved
        });
    }
}

impl Beside<Files> for Disk {
    /// Gives the log a segment file its preparer finished, and asks for the next one when
    /// the log wants one and none is on its way (starting the preparer the first time).
    fn prepare(&mut self, wal: &mut Wal) {
        if let Some(preparer) = self.preparer.as_mut() {
            preparer.deliver(wal);
        }
        if !wal.wants_prepared() {
            return;
        }
        let lock = &self.lock;
        self.preparer
            .get_or_insert_with(|| Preparer::spawn(wal, Arc::clone(lock)))
            .ask();
    }

    fn journal(&mut self, index: EntryIndex, state_hash: StateHash, ran: Ran) {
        self.journal.record(index, state_hash, ran);
    }

    fn synced(&mut self, wal: &Wal, took: Duration) {
        self.counters.synced(took.as_micros() as u64);
        self.counters.written(wal.written_bytes());
        if !self.slow.is_zero() {
            thread::sleep(self.slow);
        }
    }

    /// The freed segments are removed off this thread, so that appends and their fsyncs do
    /// not wait for the deletion.
    fn released(&mut self, _: &Files, dir: &Path, through: EntryIndex, segments: Vec<PathBuf>) {
        self.journal.release_through(through);
        if segments.is_empty() {
            return;
        }
        let dir = dir.to_path_buf();
        let lock = Arc::clone(&self.lock);
        let span = tracing::Span::current();
        thread::spawn(move || {
            let _entered = span.entered();
            let _held = lock;
            if let Err(error) = crate::wal::remove_segments(&Files, &dir, &segments) {
                tracing::warn!(%error, "cannot remove WAL segments behind a snapshot");
            }
        });
    }

    /// The apply journal flushed, and its progress told to the change stream.
    fn drained(&mut self) {
        self.journal.flush();
        self.tell_journaled();
    }
}

fn run(
    mut executor: WalExecutor<Files>,
    mut acker: Acker,
    queue: mpsc::Receiver<WalOp>,
    mut disk: Disk,
    report: impl Fn(WalEvent) -> bool,
) {
    loop {
        if !executor.has_pending() {
            match queue.recv() {
                Ok(op) => executor.queue(op),
                Err(_) => return,
            }
        }
        queue.try_iter().for_each(|op| executor.queue(op));
        let mut events = Vec::new();
        let step = carry_out(&mut executor, &mut disk, &mut acker, &mut events);
        for event in events {
            if !report(event) {
                return;
            }
        }
        match step {
            Step::Failed => return,
            Step::Full if !wait_for_room(&queue, &mut executor) => return,
            Step::Idle | Step::Full | Step::SyncDue => {}
        }
    }
}

/// Runs the executor, with each sync it asks for at once, until it is idle or stopped.
fn carry_out(
    executor: &mut WalExecutor<Files>,
    disk: &mut Disk,
    acks: &mut impl AckSink,
    events: &mut Vec<WalEvent>,
) -> Step {
    loop {
        match executor.run(disk, acks, events) {
            Step::SyncDue => executor.sync(disk, events),
            step @ (Step::Idle | Step::Full | Step::Failed) => return step,
        }
    }
}

/// Waits [`WAL_FULL_RETRY_MS`] before the next try of an append that found no room, queuing
/// what arrives meanwhile; false once the node has gone (its queue closed).
fn wait_for_room(queue: &mpsc::Receiver<WalOp>, executor: &mut WalExecutor<Files>) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_millis(WAL_FULL_RETRY_MS);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match queue.recv_timeout(left) {
            Ok(op) => executor.queue(op),
            Err(mpsc::RecvTimeoutError::Timeout) => return true,
            Err(mpsc::RecvTimeoutError::Disconnected) => return false,
        }
    }
}

impl AckSink for Acker {
    fn ack(&mut self, to: NodeId, message: PeerMessage) -> bool {
        self.send(to, &message)
    }
}

/// The WAL carried out on the node's own thread (`wal_io`): the same work as the thread's, in
/// the same order, flushed by the driver after each batch of IO; only for storage whose fsync
/// costs microseconds, since each one holds the node while it runs.
pub(crate) struct InlineWal {
    executor: WalExecutor<Files>,
    disk: Disk,
    /// The file system had no room for the last try.
    full: bool,
    /// While full, the next try is not before this.
    retry_at: Instant,
    /// The WAL failed: nothing more is carried out.
    failed: bool,
}

impl InlineWal {
    /// The WAL, to be carried out on the calling thread; see [`WalThread::spawn`] for `disk`.
    pub(crate) fn new(wal: Wal, disk: DiskSetup) -> Self {
        InlineWal {
            disk: Disk::open(&wal, disk),
            executor: WalExecutor::new(wal),
            full: false,
            retry_at: Instant::now(),
            failed: false,
        }
    }

    /// Queues work for the next [`InlineWal::flush`].
    pub(crate) fn queue(&mut self, op: WalOp) {
        self.executor.queue(op);
    }

    /// Carries out what is queued, with one fsync for all its appends; returns what the
    /// thread would have reported, and leaves in `acks` the acknowledgements now due. While
    /// the file system is full the work waits [`WAL_FULL_RETRY_MS`] between tries.
    pub(crate) fn flush(&mut self, acks: &mut Vec<(NodeId, PeerMessage)>) -> Vec<WalEvent> {
        let mut events = Vec::new();
        let waiting = self.full && Instant::now() < self.retry_at;
        if self.failed || waiting || !self.executor.has_pending() {
            return events;
        }
        let step = carry_out(&mut self.executor, &mut self.disk, acks, &mut events);
        self.failed = step == Step::Failed;
        self.full = step == Step::Full;
        if self.full {
            self.retry_at = Instant::now() + Duration::from_millis(WAL_FULL_RETRY_MS);
        }
        events
    }
}

/// Blocking connections from the WAL thread to the other nodes, for acknowledgements only.
pub(crate) struct Acker {
    access: super::connections::Access,
    /// Where the node's connections last reached each peer (no name is looked up here).
    peers: super::connections::PeerAddresses,
    streams: std::collections::BTreeMap<NodeId, AckStream>,
    /// A node that could not be reached is not tried again before this.
    retry_after: std::collections::BTreeMap<NodeId, std::time::Instant>,
}

/// An acknowledgement connection, in clear or in TLS: written to only, once open.
enum AckStream {
    Plain(std::net::TcpStream),
    Tls(Box<net::tls::BlockingTls>),
}

impl AckStream {
    /// Writes `frame` whole within the socket's write timeout ([`ACK_WRITE_TIMEOUT_MS`]), or
    /// fails; after a failure the connection is dropped.
    fn send(&mut self, frame: &[u8]) -> std::io::Result<()> {
        match self {
            AckStream::Plain(stream) => std::io::Write::write_all(stream, frame),
            AckStream::Tls(tls) => net::tls::write_blocking(tls, frame),
        }
    }
}

/// Longest the TLS handshake of an acknowledgement connection may take, in milliseconds
/// (each read within it is bounded by [`ACK_HANDSHAKE_TIMEOUT_MS`]).
const ACK_TLS_HANDSHAKE_MS: u64 = 1_000;

/// Time to wait for a connection from the WAL thread before giving up on it (the core then
/// acknowledges the ordinary way).
const ACK_CONNECT_TIMEOUT_MS: u64 = 50;
/// After a failed connection, the WAL thread leaves that node alone this long.
const ACK_RETRY_MS: u64 = 1_000;
/// Time the WAL thread waits for each handshake answer on a new connection.
const ACK_HANDSHAKE_TIMEOUT_MS: u64 = 200;
/// Longest one acknowledgement's write may block (a leader that stopped reading, with the
/// socket's buffer full): past it the connection is dropped and the core acknowledges the
/// ordinary way.
const ACK_WRITE_TIMEOUT_MS: u64 = 50;

impl Acker {
    pub(crate) fn new(
        access: super::connections::Access,
        peers: super::connections::PeerAddresses,
    ) -> Self {
        Acker {
            access,
            peers,
            streams: Default::default(),
            retry_after: Default::default(),
        }
    }

    /// Sends `message` to `to`; false when it could not.
    fn send(&mut self, to: NodeId, message: &net::message::PeerMessage) -> bool {
        let Ok(frame) = net::frame::FrameCodec::new(self.access.cluster).frame(message) else {
            return false;
        };
        let Some(stream) = self.stream(to) else {
            return false;
        };
        if stream.send(&frame).is_ok() {
            return true;
        }
        self.streams.remove(&to);
        false
    }

    /// Connects to `to` at `address` (dialed as `host`, the name its TLS certificate must
    /// hold) and introduces this node with `offer`.
    fn dial(
        &self,
        (address, host): (std::net::SocketAddr, &str),
        to: NodeId,
        offer: Offer,
    ) -> Result<AckStream, AckDialError> {
        let timeout = Duration::from_millis(ACK_CONNECT_TIMEOUT_MS);
        let stream = std::net::TcpStream::connect_timeout(&address, timeout)?;
        configure(&stream)?;
        stream.set_read_timeout(Some(Duration::from_millis(ACK_HANDSHAKE_TIMEOUT_MS)))?;
        match &self.access.tls {
            None => {
                let mut stream = stream;
                self.introduce(&mut stream, to, offer)?;
                Ok(AckStream::Plain(stream))
            }
            Some(tls) => {
                let limit = Duration::from_millis(ACK_TLS_HANDSHAKE_MS);
                let mut stream = tls.connect_blocking(host, stream, limit)?;
                self.introduce(&mut stream, to, offer)?;
                Ok(AckStream::Tls(Box::new(stream)))
            }
        }
    }

    /// The handshake on a new acknowledgement connection to `to`, with `offer`.
    fn introduce<S: std::io::Read + std::io::Write>(
        &self,
        stream: &mut S,
        to: NodeId,
        offer: Offer,
    ) -> Result<(), crate::handshake::HandshakeError> {
        crate::handshake::introduce_blocking(
            stream,
            net::frame::FrameCodec::new(self.access.cluster),
            &self.access.hello(offer.version),
            to,
            self.access.peer_key(offer).0,
        )
    }

    /// Dials `to` with the first offer, then with each next one a refusal allows (a peer of
    /// an earlier build, or one not yet given a rotated peer secret).
    fn dial_with_offers(
        &self,
        (address, host): (std::net::SocketAddr, &str),
        to: NodeId,
    ) -> Result<AckStream, AckDialError> {
        let keys = self.access.peer_key(Offer::FIRST).1;
        let mut offer = Offer::FIRST;
        loop {
            match self.dial((address, host), to, offer) {
                Err(AckDialError::Handshake(error)) => match offer.after(&error, keys) {
                    Some(next) => offer = next,
                    None => return Err(AckDialError::Handshake(error)),
                },
                connected => return connected,
            }
        }
    }

    fn stream(&mut self, to: NodeId) -> Option<&mut AckStream> {
        if !self.streams.contains_key(&to) {
            if self
                .retry_after
                .get(&to)
                .is_some_and(|t| std::time::Instant::now() < *t)
            {
                return None;
            }
            let (address, host) = self.peers.get(to)?;
            match self.dial_with_offers((address, &host), to) {
                Ok(stream) => {
                    self.streams.insert(to, stream);
                }
                Err(error) => {
                    tracing::warn!(peer = to.0, %error, "acknowledgements cannot reach the peer");
                    let later =
                        std::time::Instant::now() + std::time::Duration::from_millis(ACK_RETRY_MS);
                    self.retry_after.insert(to, later);
                    return None;
                }
            }
        }
        self.streams.get_mut(&to)
    }
}

/// Why an acknowledgement connection could not be opened.
#[derive(Debug, thiserror::Error)]
enum AckDialError {
    #[error("connect: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Handshake(#[from] crate::handshake::HandshakeError),
}

/// The socket options of an acknowledgement connection: no delay, and a write timeout.
fn configure(stream: &std::net::TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_write_timeout(Some(Duration::from_millis(ACK_WRITE_TIMEOUT_MS)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryHash;
    use crate::ids::Term;
    use crate::wal::executor::tests::{ack, noops};

    /// Proves the WAL carried out on the caller's thread makes its appends durable before it
    /// reports them or lets an acknowledgement go, with one report for all appends queued
    /// together, nothing when nothing is queued, and the entries read back from the files.
    #[test]
    fn inline_wal_reports_and_acknowledges_only_what_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let wal_dir = dir.path().join("wal");
        let (wal, _) = Wal::open(&wal_dir).unwrap();
        let lock = Arc::new(DirLock::exclusive(dir.path()).unwrap());
        let counters = WalCounters::default();
        let (journaled, _) = tokio::sync::watch::channel(EntryIndex::ZERO);
        let disk = DiskSetup {
            slow: Duration::ZERO,
            lock,
            counters: counters.clone(),
            journaled,
        };
        let mut inline = InlineWal::new(wal, disk);
        let mut prev = EntryHash::default();
        inline.queue(WalOp::Append(noops(1, 2, &mut prev)));
        inline.queue(WalOp::Append(noops(3, 3, &mut prev)));
        inline.queue(ack(3));
        let mut acks = Vec::new();
        let events = inline.flush(&mut acks);
        let [WalEvent::Persisted { index, term }] = events.as_slice() else {
            panic!("one report of the appends: {events:?}");
        };
        assert_eq!((*index, *term), (EntryIndex(3), Term(1)));
        assert_eq!(
            counters.fsyncs(),
            1,
            "one fsync for the appends queued together"
        );
        assert_eq!(acks.len(), 1);
        assert!(matches!(acks[0], (NodeId(1), PeerMessage::AppendReply(_))));
        assert!(inline.flush(&mut acks).is_empty(), "nothing more queued");
        // An acknowledgement with nothing new to make durable goes at once, with no fsync.
        inline.queue(ack(3));
        assert!(inline.flush(&mut acks).is_empty());
        assert_eq!((acks.len(), counters.fsyncs()), (2, 1));
        inline.queue(WalOp::Load {
            peer: NodeId(3),
            from: EntryIndex(2),
            to: EntryIndex(3),
        });
        let events = inline.flush(&mut acks);
        let [WalEvent::Loaded { peer, entries }] = events.as_slice() else {
            panic!("the entries read back: {events:?}");
        };
        assert_eq!(*peer, NodeId(3));
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].header.hash, prev);
        drop(inline);
        let (reopened, _) = Wal::open(&wal_dir).unwrap();
        assert_eq!(reopened.last_index(), EntryIndex(3), "durable in the files");
    }

    /// Proves an acknowledgement to a leader that stopped reading fails within the write
    /// timeout once the socket's buffer is full, instead of holding the WAL thread.
    #[test]
    fn an_acknowledgement_to_a_leader_that_stopped_reading_gives_up() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let stream = std::net::TcpStream::connect(address).unwrap();
        let (_stalled, _) = listener.accept().unwrap();
        configure(&stream).unwrap();
        let access = crate::node::connections::Access {
            me: NodeId(2),
            cluster: 1,
            nodes: vec![NodeId(1)],
            keys: net::auth::Credentials::of_peer_key(
                net::auth::Key::peer(b"sixteen bytes at least").unwrap(),
            ),
            misused: Default::default(),
            tls: None,
        };
        let mut acker = Acker::new(access, Default::default());
        acker.streams.insert(NodeId(1), AckStream::Plain(stream));
        let WalOp::Ack { message: ack, .. } = ack(1) else {
            unreachable!("an acknowledgement")
        };
        let (done, gave_up) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // The kernel buffers some megabytes; then a write blocks.
            let sent = (0..10_000_000)
                .take_while(|_| acker.send(NodeId(1), &ack))
                .count();
            let _ = done.send(sent);
        });
        let sent = gave_up
            .recv_timeout(Duration::from_secs(30))
            .expect("the sender gave up instead of blocking");
        assert!(sent > 0, "the first acknowledgements went out");
    }
}
