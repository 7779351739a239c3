//! TCP connections of a node: one outgoing connection per peer (reconnecting with back-off),
//! incoming peer connections, and client connections. Every connection starts with the
//! handshake of [`net::auth`] (peers prove the cluster's key; clients prove the client key
//! when the cluster sets one); every frame is checked (cluster id, length, crc32) and decoded
//! before it reaches the node. A connection that breaks the protocol is told why in one frame,
//! where it can still hear it, and closed; the refusal is logged with its address.

use super::Input;
use super::metrics::NodeMetrics;
use crate::address::Address;
use crate::codec;
use crate::handshake::{HandshakeError, MisusedKeys, Offer, admit, introduce, welcome};
use crate::ids::{EntryIndex, NodeId, Term};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use net::auth::{Caller, Credentials, Gate, Key, Port};
use net::frame::{CLIENT_FRAME_BODY_BYTES_MAX, FrameCodec, FrameError};
use net::message::{
    ClientReply, ClientRequest, ClientRole, Hello, PeerMessage, Refusal, SnapshotChunk,
};
use net::tls::{Stream, Tls, TlsPort};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, FramedRead, FramedWrite};

/// Messages queued for one peer; past this, new messages to it are dropped (consensus resends
/// what matters, and a slow peer never holds the leader back).
pub const PEER_QUEUE_MESSAGES_MAX: usize = 256;
/// Replies queued for one client connection; past this, replies are dropped (the client
/// retries and gets its results from the session).
pub const CLIENT_REPLIES_QUEUED_MAX: usize = 1024;
/// Client connections a node holds at once, handshaking or admitted; more are refused on
/// arrival.
pub const CLIENT_CONNECTIONS_MAX: usize = 1024;
/// Incoming peer connections still in their handshake a node holds at once; more are refused
/// on arrival. Admitted peers do not count here: strangers cannot crowd out a node.
pub const PEER_HANDSHAKES_MAX: usize = 64;
/// Admitted connections from one node at once (each node opens two: one for messages, one for
/// its WAL thread's acknowledgements; the others leave room for a reconnection that overlaps a
/// connection not yet seen dead).
pub const PEER_CONNECTIONS_PER_NODE_MAX: usize = 4;
/// A connection whose other end sends nothing is probed after this long, in milliseconds...
pub const KEEPALIVE_IDLE_MS: u64 = 10_000;
/// ...then every this long...
pub const KEEPALIVE_INTERVAL_MS: u64 = 2_000;
/// ...and closed after this many unanswered probes (a crashed or cut-off peer's connection is
/// gone within about 16 s).
pub const KEEPALIVE_PROBES: u32 = 3;
/// Time a reply to a client may take to be written, in milliseconds; a client that does not
/// read its replies loses its connection.
pub const CLIENT_WRITE_TIMEOUT_MS: u64 = 5_000;
/// Pause after a failed accept (too many open files, say) before the next, in milliseconds.
pub const ACCEPT_ERROR_PAUSE_MS: u64 = 10;
/// Time a new connection has to finish its handshake, in milliseconds.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// Time a client's frame has, from its first byte, to arrive whole, in milliseconds (a frame
/// still partial after between half of this and all of it closes the connection).
pub const FRAME_READ_TIMEOUT_MS: u64 = 5_000;
/// Time a client connection may stay silent before it is closed, in milliseconds (the client
/// library reconnects when it next has a request).
pub const CLIENT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Time a refusal has to be written before the connection closes anyway, in milliseconds.
pub const REFUSAL_WRITE_TIMEOUT_MS: u64 = 100;
/// First and last wait between reconnection attempts to a peer.
pub const RECONNECT_BACKOFF_MS_MIN: u64 = 10;
/// See [`RECONNECT_BACKOFF_MS_MIN`]. A peer that comes back is not left waiting for it: its
/// own connection to us wakes our connection to it (`PeerWakes`).
pub const RECONNECT_BACKOFF_MS_MAX: u64 = 1_000;

/// One wake-up per peer: a peer that has connected to us (handshake passed) is up, so our
/// connection to it retries at once instead of finishing its back-off. Before, a node that
/// restarted after one to three seconds waited up to a whole [`RECONNECT_BACKOFF_MS_MAX`] for
/// the leader's next attempt, and heard nothing from it meanwhile.
#[derive(Clone)]
pub(crate) struct PeerWakes(Arc<BTreeMap<NodeId, tokio::sync::Notify>>);

impl PeerWakes {
    /// A wake-up for each of `peers`.
    pub(crate) fn new(peers: impl IntoIterator<Item = NodeId>) -> Self {
        PeerWakes(Arc::new(
            peers
                .into_iter()
                .map(|id| (id, tokio::sync::Notify::new()))
                .collect(),
        ))
    }

    /// Node `peer` connected to us.
    fn heard_from(&self, peer: NodeId) {
        if let Some(wake) = self.0.get(&peer) {
            wake.notify_one();
        }
    }

    /// Waits `backoff`, or less if node `peer` connects to us meanwhile; true when it did.
    async fn back_off(&self, peer: NodeId, backoff: Duration) -> bool {
        let Some(wake) = self.0.get(&peer) else {
            tokio::time::sleep(backoff).await;
            return false;
        };
        tokio::select! {
            () = tokio::time::sleep(backoff) => false,
            () = wake.notified() => true,
        }
    }
}
/// Socket send and receive buffer sizes.
pub const SOCKET_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// Who may connect: the cluster, its nodes and its keys.
#[derive(Clone, Debug)]
pub(crate) struct Access {
    pub(crate) me: NodeId,
    pub(crate) cluster: u64,
    pub(crate) nodes: Vec<NodeId>,
    pub(crate) keys: Credentials,
    /// Other roles' secrets made into operator keys: recognized on the client port, never
    /// admitted (see [`crate::handshake::MisusedKeys`]).
    pub(crate) misused: Arc<MisusedKeys>,
    /// TLS on every connection, when the node has it.
    pub(crate) tls: Option<Tls>,
}

impl Access {
    fn gate(&self, port: Port) -> Gate<'_> {
        Gate {
            cluster: self.cluster,
            port,
            keys: &self.keys,
            nodes: &self.nodes,
            me: self.me,
        }
    }

    /// The peer key `offer` proves, and how many this node may try.
    pub(crate) fn peer_key(&self, offer: Offer) -> (&Key, usize) {
        let ring = &self.keys.peer;
        let key = ring.to_prove().nth(offer.key).unwrap_or(&ring.current);
        (key, ring.to_prove().count())
    }

    /// The hello this node sends to its peers, offering protocol `version`.
    pub(crate) fn hello(&self, version: u16) -> Hello {
        Hello {
            version,
            cluster: self.cluster,
            node: Some(self.me),
        }
    }
}

/// Why a connection closed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionError {
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// A request the connection's role may not make.
    #[error("{request} refused: {}", Refusal::Forbidden { role: *role })]
    Forbidden {
        role: ClientRole,
        request: &'static str,
    },
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("decode: {0}")]
    Decode(#[from] codec::CodecError),
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("closed")]
    Closed,
    /// TLS could not be opened (a plaintext caller, a certificate the CA did not sign).
    #[error("TLS: {0}")]
    Tls(std::io::Error),
}

impl ConnectionError {
    /// The offer to call again with at once, when the handshake was refused for one that
    /// another of this node's offers may pass (see [`Offer::after`]).
    fn offer_after(&self, offer: Offer, keys: usize) -> Option<Offer> {
        match self {
            ConnectionError::Handshake(error) => offer.after(error, keys),
            ConnectionError::Forbidden { .. }
            | ConnectionError::Frame(_)
            | ConnectionError::Decode(_)
            | ConnectionError::Refused(_)
            | ConnectionError::Tls(_)
            | ConnectionError::Closed => None,
        }
    }

    fn refusal(&self) -> Option<Refusal> {
        match self {
            ConnectionError::Handshake(error) => error.refusal(),
            ConnectionError::Forbidden { role, .. } => Some(Refusal::Forbidden { role: *role }),
            ConnectionError::Frame(error) => Refusal::for_frame(error),
            ConnectionError::Decode(_) => Some(Refusal::Undecodable),
            ConnectionError::Refused(refusal) => Some(refusal.clone()),
            // A connection whose TLS failed hears nothing more in clear.
            ConnectionError::Tls(_) | ConnectionError::Closed => None,
        }
    }
}

/// TCP_NODELAY, large buffers and keepalive: frames go out at once, bursts do not block, and a
/// connection whose other end vanished (a crash, a cut cable) is closed by the kernel.
pub(crate) fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let socket = socket2::SockRef::from(stream);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_millis(KEEPALIVE_IDLE_MS))
        .with_interval(Duration::from_millis(KEEPALIVE_INTERVAL_MS))
        .with_retries(KEEPALIVE_PROBES);
    let _ = socket.set_tcp_keepalive(&keepalive);
}

/// The next connection, riding out failed accepts (a full file table, say) instead of ending
/// the listener.
async fn next_connection(listener: &TcpListener, kind: &str) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                log_line(format_args!("{kind} listener: accept failed: {error}"));
                tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_PAUSE_MS)).await;
            }
        }
    }
}

/// Admitted connections per node; a slot is given back when its guard drops.
#[derive(Clone, Default)]
struct PeerSlots(Arc<Mutex<BTreeMap<NodeId, usize>>>);

struct PeerSlot {
    slots: PeerSlots,
    node: NodeId,
}

impl PeerSlots {
    fn take(&self, node: NodeId) -> Option<PeerSlot> {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(node).or_default();
        if *count >= PEER_CONNECTIONS_PER_NODE_MAX {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            slots: self.clone(),
            node,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self
            .slots
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.node) {
            *count = count.saturating_sub(1);
        }
    }
}

/// The listener's handshake within [`HANDSHAKE_TIMEOUT_MS`].
async fn admit_within(
    frames: &mut Framed<Stream, FrameCodec>,
    gate: &Gate<'_>,
    misused: &MisusedKeys,
) -> Result<(Hello, Caller), ConnectionError> {
    match tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
        admit(frames, gate, misused),
    )
    .await
    {
        Ok(admitted) => Ok(admitted?),
        Err(_) => {
            let refusal = Refusal::HandshakeTimeout;
            tell(frames, &net::message::Admission::Refused(refusal.clone())).await;
            Err(ConnectionError::Refused(refusal))
        }
    }
}

/// Writes one last frame, within [`REFUSAL_WRITE_TIMEOUT_MS`], ignoring failure.
async fn tell<T: codec::Encode>(frames: &mut Framed<Stream, FrameCodec>, message: &T) {
    let _ = tokio::time::timeout(
        Duration::from_millis(REFUSAL_WRITE_TIMEOUT_MS),
        frames.send(message),
    )
    .await;
}

/// Refuses a connection over the limit: one frame if the socket takes it at once, then close.
fn refuse_at_once(stream: TcpStream, cluster: u64, refusal: Refusal) {
    let answer = net::message::Admission::Refused(refusal);
    if let Ok(frame) = FrameCodec::new(cluster).frame(&answer) {
        let _ = stream.try_write(&frame);
    }
}

/// Counts a new connection in `open`; over `limit`, refuses it at once (logged) and gives
/// nothing back.
fn within_limit(
    open: &AtomicUsize,
    limit: usize,
    (stream, address): (TcpStream, SocketAddr),
    (kind, metrics): (&'static str, &NodeMetrics),
    cluster: u64,
) -> Option<(TcpStream, SocketAddr)> {
    if open.fetch_add(1, Ordering::Relaxed) < limit {
        metrics.connected(kind);
        return Some((stream, address));
    }
    open.fetch_sub(1, Ordering::Relaxed);
    let refusal = Refusal::TooManyConnections {
        limit: limit as u32,
    };
    metrics.connection_refused(&refusal);
    log_refused(kind, &address, &refusal);
    refuse_at_once(stream, cluster, refusal);
    None
}

/// Accepts peer connections and forwards their messages to the node.
pub(crate) async fn accept_peers(
    listener: TcpListener,
    access: Access,
    (inbox, metrics): (mpsc::Sender<Input>, NodeMetrics),
    wakes: PeerWakes,
) {
    let handshaking = Arc::new(AtomicUsize::new(0));
    let slots = PeerSlots::default();
    loop {
        let accepted = next_connection(&listener, "peer").await;
        let counted = within_limit(
            &handshaking,
            PEER_HANDSHAKES_MAX,
            accepted,
            ("peer", &metrics),
            access.cluster,
        );
        let Some((stream, address)) = counted else {
            continue;
        };
        tune(&stream);
        let (access, inbox) = (access.clone(), inbox.clone());
        let (handshaking, slots) = (handshaking.clone(), slots.clone());
        let (wakes, metrics) = (wakes.clone(), metrics.clone());
        tokio::spawn(async move {
            let read = read_peer(stream, &access, inbox, &handshaking, &slots, &wakes).await;
            if let Err(error) = read {
                count_refusal(&metrics, &error);
                log_closed("peer", &address, &error);
            }
        });
    }
}

async fn read_peer(
    stream: TcpStream,
    access: &Access,
    inbox: mpsc::Sender<Input>,
    handshaking: &AtomicUsize,
    slots: &PeerSlots,
    wakes: &PeerWakes,
) -> Result<(), ConnectionError> {
    let admitted = async {
        let stream = accept_tls(access, TlsPort::Peer, stream).await?;
        let mut frames = Framed::new(stream, FrameCodec::new(access.cluster));
        let admitted = admit_within(&mut frames, &access.gate(Port::Peer), &Vec::new()).await?;
        Ok::<_, ConnectionError>((frames, admitted))
    }
    .await;
    handshaking.fetch_sub(1, Ordering::Relaxed);
    let (mut frames, admitted) = admitted?;
    let (hello, caller) = admitted;
    let Caller::Peer(from) = caller else {
        panic!("the peer port's gate admitted a client: {caller:?}");
    };
    assert_eq!(hello.node, Some(from), "a peer is the node its hello names");
    let Some(_slot) = slots.take(from) else {
        let refusal = Refusal::TooManyConnections {
            limit: PEER_CONNECTIONS_PER_NODE_MAX as u32,
        };
        tell(
            &mut frames,
            &net::message::Admission::Refused(refusal.clone()),
        )
        .await;
        return Err(ConnectionError::Refused(refusal));
    };
    welcome(&mut frames).await?;
    wakes.heard_from(from);
    let version = Input::PeerVersion {
        peer: from,
        version: hello.version,
    };
    if inbox.send(version).await.is_err() {
        return Ok(());
    }
    while let Some(frame) = frames.next().await {
        let message: PeerMessage = codec::decode(&frame?)?;
        if inbox.send(Input::Peer { from, message }).await.is_err() {
            return Ok(());
        }
    }
    Err(ConnectionError::Closed)
}

/// The socket address each peer was last reached at, by its connection's task: the WAL
/// thread's acknowledgements go there, so that the WAL thread never waits on a name lookup.
#[derive(Clone, Default)]
pub(crate) struct PeerAddresses(Arc<Mutex<BTreeMap<NodeId, (SocketAddr, String)>>>);

impl PeerAddresses {
    fn reached(&self, peer: NodeId, address: SocketAddr, host: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(peer, (address, host.to_string()));
    }

    /// Where `peer` was last reached, if it ever was, and the host it was dialed by (the
    /// name its TLS certificate must hold).
    pub(crate) fn get(&self, peer: NodeId) -> Option<(SocketAddr, String)> {
        let found = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        found.get(&peer).cloned()
    }
}

/// Starts the task that keeps a connection to node `peer` at `address` (its name resolved
/// again at every attempt, the socket address reached kept in `found`) and writes what the
/// node queues for it; `wakes` cuts a back-off short when the peer connects to us. A snapshot
/// transfer that loses a chunk (the connection broke before its last chunk was written, or
/// chunks were dropped while the peer was unreachable) is reported to `inbox` as
/// [`Input::SnapshotAborted`], so that the leader sends it again at once rather than after
/// `SNAPSHOT_RESEND_TICKS`.
pub(crate) fn connect_peer(
    access: Access,
    peer: NodeId,
    address: Address,
    (wakes, found): (PeerWakes, PeerAddresses),
    inbox: mpsc::Sender<Input>,
) -> mpsc::Sender<PeerMessage> {
    let (queue, mut queued) = mpsc::channel::<PeerMessage>(PEER_QUEUE_MESSAGES_MAX);
    tokio::spawn(async move {
        let mut backoff = RECONNECT_BACKOFF_MS_MIN;
        let mut transfer = Transfer::default();
        // The newest version and the current key first; a peer of an earlier build that
        // refuses the version, or a peer not yet given a rotated key, is called again at once
        // with the next offer, and offered the first again after the next break.
        let mut offer = Offer::FIRST;
        loop {
            match crate::address::connect(&address).await {
                Ok(stream) => {
                    if let Ok(reached) = stream.peer_addr() {
                        found.reached(peer, reached, address.host());
                    }
                    tune(&stream);
                    let to = (peer, offer);
                    let stream = (stream, address.host());
                    let written = write_peer(stream, &access, to, &mut queued, &mut transfer);
                    let written = written.await;
                    let keys = access.peer_key(offer).1;
                    if let Err(error) = &written
                        && let Some(next) = error.offer_after(offer, keys)
                    {
                        log_next_offer(peer, offer, next);
                        offer = next;
                        continue;
                    }
                    match written {
                        Ok(()) => return,
                        Err(error) => {
                            offer = Offer::FIRST;
                            if !matches!(error, ConnectionError::Handshake(_)) {
                                backoff = RECONNECT_BACKOFF_MS_MIN;
                            }
                            log_closed("peer", &address, &error);
                        }
                    }
                }
                Err(error) => {
                    if error.kind() == std::io::ErrorKind::NotFound {
                        tracing::warn!(peer = peer.0, %error, "peer address does not resolve");
                    }
                    // Unreachable for now: whatever was queued is stale by the time it is back.
                    while let Ok(message) = queued.try_recv() {
                        transfer.dropped(&message);
                    }
                }
            }
            if transfer.lost() && inbox.send(Input::SnapshotAborted(peer)).await.is_err() {
                return;
            }
            let woken = wakes.back_off(peer, Duration::from_millis(backoff)).await;
            backoff = if woken {
                RECONNECT_BACKOFF_MS_MIN
            } else {
                (backoff * 2).min(RECONNECT_BACKOFF_MS_MAX)
            };
        }
    });
    queue
}

/// Says why a peer is called again at once with `next` after refusing `offered`.
fn log_next_offer(peer: NodeId, offered: Offer, next: Offer) {
    if next.version != offered.version {
        tracing::info!(
            peer = peer.0,
            offered = offered.version,
            version = next.version,
            "the peer speaks an older protocol: connecting again with its version"
        );
    } else {
        tracing::warn!(
            peer = peer.0,
            "the peer refused the current peer secret: connecting again with the previous one \
             (finish the rotation on every node)"
        );
    }
}

/// Whether a snapshot transfer to a peer is under way on its connection: a chunk was taken
/// from the queue, and the transfer's last chunk has not been flushed to the socket yet.
#[derive(Default)]
struct Transfer {
    open: bool,
    /// The last chunk taken for writing ends its snapshot.
    final_taken: bool,
    /// The snapshot (entry and term) of the last chunk taken from the queue or dropped, and
    /// where that chunk ended.
    last_chunk: Option<(EntryIndex, Term, u64)>,
}

impl Transfer {
    /// A message was taken from the queue to be written.
    fn taken(&mut self, message: &PeerMessage) {
        if let PeerMessage::Snapshot(chunk) = message {
            self.follow(chunk);
            self.open = true;
            self.final_taken = chunk.offset + chunk.data.len() as u64 >= chunk.total;
        }
    }

    /// A message was dropped unwritten (the peer is unreachable).
    fn dropped(&mut self, message: &PeerMessage) {
        if let PeerMessage::Snapshot(chunk) = message {
            self.follow(chunk);
            self.open = true;
            self.final_taken = false;
        }
    }

    /// Checks that `chunk` leaves the queue in order: a transfer starts at offset 0, and each
    /// later chunk continues the one before it, of the same snapshot, because the leader
    /// queues one transfer to a peer at a time (`install::stream_snapshot` stops a transfer a
    /// newer one supersedes before it queues another chunk). In debug builds and tests only:
    /// a panic here would end this connection's task, not the node, and cut the leader off
    /// from the peer; in every build the follower refuses a chunk out of order (`Intake`),
    /// and the leader sends the snapshot again.
    fn follow(&mut self, chunk: &SnapshotChunk) {
        let end = chunk.offset + chunk.data.len() as u64;
        if chunk.offset > 0 {
            debug_assert_eq!(
                self.last_chunk,
                Some((chunk.index, chunk.term, chunk.offset)),
                "a snapshot's chunks leave for a peer in order, one transfer at a time"
            );
        }
        self.last_chunk = Some((chunk.index, chunk.term, end));
    }

    /// What was taken is written and flushed.
    fn flushed(&mut self) {
        if self.final_taken {
            self.open = false;
            self.final_taken = false;
        }
    }

    /// The connection broke or messages were dropped: true when that lost part of a
    /// transfer (reported once).
    fn lost(&mut self) -> bool {
        self.final_taken = false;
        std::mem::take(&mut self.open)
    }
}

/// Introduces this node (with `offer`), then writes queued messages, several
/// per flush when they are waiting. Returns `Ok` when the node dropped the queue (shutdown).
async fn write_peer(
    (stream, host): (TcpStream, &str),
    access: &Access,
    (peer, offer): (NodeId, Offer),
    queued: &mut mpsc::Receiver<PeerMessage>,
    transfer: &mut Transfer,
) -> Result<(), ConnectionError> {
    let stream = connect_tls(access, host, stream).await?;
    let mut frames = Framed::new(stream, FrameCodec::new(access.cluster));
    let (key, _) = access.peer_key(offer);
    let introduced = tokio::time::timeout(
        Duration::from_millis(HANDSHAKE_TIMEOUT_MS),
        introduce(
            &mut frames,
            &access.hello(offer.version),
            Some(peer),
            Some(key),
        ),
    )
    .await;
    match introduced {
        Ok(result) => result?,
        Err(_) => return Err(ConnectionError::Refused(Refusal::HandshakeTimeout)),
    }
    while let Some(message) = queued.recv().await {
        transfer.taken(&message);
        frames.feed(&message).await?;
        while let Ok(message) = queued.try_recv() {
            transfer.taken(&message);
            frames.feed(&message).await?;
        }
        SinkExt::<&PeerMessage>::flush(&mut frames).await?;
        transfer.flushed();
    }
    Ok(())
}

/// Accepts client connections (up to [`CLIENT_CONNECTIONS_MAX`] at once; a connection counts
/// until its reader and its writer have both ended).
pub(crate) async fn accept_clients(
    listener: TcpListener,
    access: Access,
    (inbox, metrics): (mpsc::Sender<Input>, NodeMetrics),
) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = next_connection(&listener, "client").await;
        let counted = within_limit(
            &open,
            CLIENT_CONNECTIONS_MAX,
            accepted,
            ("client", &metrics),
            access.cluster,
        );
        let Some((stream, address)) = counted else {
            continue;
        };
        tune(&stream);
        let (open, inbox, access) = (open.clone(), inbox.clone(), access.clone());
        let metrics = metrics.clone();
        tokio::spawn(async move {
            if let Err(error) = serve_client(stream, &access, inbox, address).await {
                count_refusal(&metrics, &error);
                log_closed("client", &address, &error);
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn serve_client(
    stream: TcpStream,
    access: &Access,
    inbox: mpsc::Sender<Input>,
    address: SocketAddr,
) -> Result<(), ConnectionError> {
    let stream = accept_tls(access, TlsPort::Client, stream).await?;
    let mut framed = Framed::new(stream, FrameCodec::new(access.cluster));
    let gate = access.gate(Port::Client);
    let (_, caller) = admit_within(&mut framed, &gate, &access.misused).await?;
    let Caller::Client(role) = caller else {
        panic!("the client port's gate admitted a node: {caller:?}");
    };
    welcome(&mut framed).await?;
    let parts = framed.into_parts();
    // Whatever arrived right behind the proof is the client's first request.
    let admitted = Admitted {
        role,
        early: parts.read_buf,
        inbox,
        cluster: access.cluster,
        address,
    };
    match parts.io {
        Stream::Plain(tcp) => {
            let (read, write) = tcp.into_split();
            serve_admitted(read, write, admitted).await
        }
        Stream::Tls(tls) => {
            let (read, write) = tokio::io::split(tls);
            serve_admitted(read, write, admitted).await
        }
    }
}

/// Logs a request only the operator's role may make (a mode switch, a backup, a member
/// change, a handler upgrade) with the address it came from: who changed the cluster, and
/// from where, is in every node's log.
fn log_operator_action(request: &ClientRequest, caller: SocketAddr) {
    if ClientRole::Application.permits(request) {
        return;
    }
    match request {
        ClientRequest::SetMode(mode) => {
            tracing::info!(%caller, request = request.name(), ?mode, "operator request");
        }
        ClientRequest::ChangeMembers(change) => {
            tracing::info!(%caller, request = request.name(), ?change, "operator request");
        }
        ClientRequest::Upgrade(upgrade) => {
            tracing::info!(%caller, request = request.name(), ?upgrade, "operator request");
        }
        // A backup is read in pieces: its first names it.
        ClientRequest::Backup(piece) if piece.offset == 0 => {
            tracing::info!(%caller, request = request.name(), index = ?piece.index, "operator request");
        }
        // Later pieces of a backup, and what the application role may ask too (returned
        // above): nothing to log.
        ClientRequest::Backup(_)
        | ClientRequest::Status
        | ClientRequest::Versions
        | ClientRequest::Build
        | ClientRequest::Changes(_)
        | ClientRequest::Submit(_)
        | ClientRequest::SubmitKeyed(_)
        | ClientRequest::Read(_)
        | ClientRequest::Resume(_) => {}
    }
}

/// An admitted client connection: its role, the bytes read past its handshake, where its
/// requests go, where it comes from.
struct Admitted {
    role: ClientRole,
    early: bytes::BytesMut,
    inbox: mpsc::Sender<Input>,
    cluster: u64,
    address: SocketAddr,
}

/// Reads an admitted client's requests into the node's inbox and writes the node's replies,
/// until either side ends; a refusal is told before the connection closes.
async fn serve_admitted<R, W>(read: R, write: W, admitted: Admitted) -> Result<(), ConnectionError>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Admitted {
        role,
        early,
        inbox,
        cluster,
        address,
    } = admitted;
    // Requests up to the largest a client may send; replies up to the largest frame.
    let requests = FrameCodec::with_limit(cluster, CLIENT_FRAME_BODY_BYTES_MAX);
    let mut frames = FramedRead::new(read, requests);
    *frames.read_buffer_mut() = early;
    let (reply, replies) = mpsc::channel::<ClientReply>(CLIENT_REPLIES_QUEUED_MAX);
    let mut writer = tokio::spawn(write_replies(write, cluster, replies));
    // The writer's handle is awaited to its end at most once (a finished handle polled again
    // panics): `writer_ended` says whether that happened.
    let mut writer_ended = false;
    let result: Result<(), ConnectionError> = loop {
        let frame = tokio::select! {
            frame = next_client_frame(&mut frames) => match frame {
                Ok(frame) => frame,
                Err(error) => break Err(error),
            },
            // The writer gave up (a client that does not read): the connection ends.
            _ = &mut writer => {
                writer_ended = true;
                break Err(ConnectionError::Closed);
            }
        };
        let Some(frame) = frame else {
            break Ok(());
        };
        let request: ClientRequest = match codec::decode(&frame) {
            Ok(request) => request,
            Err(error) => break Err(error.into()),
        };
        if !role.permits(&request) {
            let request = request.name();
            break Err(ConnectionError::Forbidden { role, request });
        }
        log_operator_action(&request, address);
        let input = Input::Client {
            request,
            role,
            reply: reply.clone(),
        };
        if inbox.send(input).await.is_err() {
            break Ok(());
        }
    };
    if !writer_ended
        && let Err(error) = &result
        && let Some(refusal) = error.refusal()
        && reply.try_send(ClientReply::Refused(refusal)).is_ok()
    {
        let grace = Duration::from_millis(REFUSAL_WRITE_TIMEOUT_MS);
        writer_ended = tokio::time::timeout(grace, &mut writer).await.is_ok();
    }
    // Replies still owed to this connection go nowhere: the writer and the socket end here.
    if !writer_ended {
        writer.abort();
        let _ = writer.await;
    }
    result
}

/// Writes a client's replies as they come, several per flush when they wait; ends after a
/// refusal, or when a write takes over [`CLIENT_WRITE_TIMEOUT_MS`].
async fn write_replies<W: tokio::io::AsyncWrite + Unpin>(
    write: W,
    cluster: u64,
    mut replies: mpsc::Receiver<ClientReply>,
) -> Result<(), FrameError> {
    let mut frames = FramedWrite::new(write, FrameCodec::new(cluster));
    let write_timeout = Duration::from_millis(CLIENT_WRITE_TIMEOUT_MS);
    while let Some(message) = replies.recv().await {
        let mut last = matches!(message, ClientReply::Refused(_));
        let mut batch = vec![message];
        while !last && let Ok(message) = replies.try_recv() {
            last = matches!(message, ClientReply::Refused(_));
            batch.push(message);
        }
        let written = async {
            for message in &batch {
                frames.feed(message).await?;
            }
            SinkExt::<&ClientReply>::flush(&mut frames).await
        };
        match tokio::time::timeout(write_timeout, written).await {
            Ok(result) => result?,
            Err(_) => return Err(FrameError::Io(std::io::ErrorKind::TimedOut.into())),
        }
        if last {
            break;
        }
    }
    Ok(())
}

/// The listener's side of TLS on a new connection to `port`, when the node has TLS; the
/// stream as it came otherwise.
async fn accept_tls(
    access: &Access,
    port: TlsPort,
    stream: TcpStream,
) -> Result<Stream, ConnectionError> {
    match &access.tls {
        Some(tls) => within_handshake(tls.accept(port, stream)).await,
        None => Ok(Stream::Plain(stream)),
    }
}

/// The dialer's side of TLS on a connection to `host`, when the node has TLS.
async fn connect_tls(
    access: &Access,
    host: &str,
    stream: TcpStream,
) -> Result<Stream, ConnectionError> {
    match &access.tls {
        Some(tls) => within_handshake(tls.connect(host, stream)).await,
        None => Ok(Stream::Plain(stream)),
    }
}

/// A TLS handshake, bounded by [`HANDSHAKE_TIMEOUT_MS`].
async fn within_handshake(
    opening: impl std::future::Future<Output = std::io::Result<Stream>>,
) -> Result<Stream, ConnectionError> {
    let limit = Duration::from_millis(HANDSHAKE_TIMEOUT_MS);
    match tokio::time::timeout(limit, opening).await {
        Ok(opened) => opened.map_err(ConnectionError::Tls),
        Err(_) => Err(ConnectionError::Refused(Refusal::HandshakeTimeout)),
    }
}

/// The next whole frame of a client, or `None` when it closed. A frame that starts and does
/// not finish within [`FRAME_READ_TIMEOUT_MS`], or silence for [`CLIENT_IDLE_TIMEOUT_MS`],
/// ends the connection.
async fn next_client_frame<R: tokio::io::AsyncRead + Unpin>(
    frames: &mut FramedRead<R, FrameCodec>,
) -> Result<Option<Bytes>, ConnectionError> {
    let tick = Duration::from_millis(FRAME_READ_TIMEOUT_MS / 2);
    let mut silent = Duration::ZERO;
    let mut partial_at_last_tick = false;
    loop {
        match tokio::time::timeout(tick, frames.next()).await {
            Ok(Some(frame)) => return Ok(Some(frame?)),
            Ok(None) => return Ok(None),
            // Still partial one tick later: the frame has taken at least a tick.
            Err(_) if !frames.read_buffer().is_empty() => {
                if partial_at_last_tick {
                    return Err(ConnectionError::Refused(Refusal::ReadTimeout));
                }
                partial_at_last_tick = true;
            }
            Err(_) => {
                partial_at_last_tick = false;
                silent += tick;
                if silent >= Duration::from_millis(CLIENT_IDLE_TIMEOUT_MS) {
                    return Err(ConnectionError::Refused(Refusal::IdleTimeout));
                }
            }
        }
    }
}

/// Counts the refusal an incoming connection's end was, if it was one.
fn count_refusal(metrics: &NodeMetrics, error: &ConnectionError) {
    if let Some(refusal) = error.refusal() {
        metrics.connection_refused(&refusal);
    } else if let ConnectionError::Tls(_) = error {
        metrics.refused_for("tls");
    }
}

fn log_closed(kind: &str, address: &dyn std::fmt::Display, error: &ConnectionError) {
    match error {
        ConnectionError::Closed
        | ConnectionError::Handshake(HandshakeError::Closed)
        | ConnectionError::Handshake(HandshakeError::Frame(FrameError::Io(_)))
        | ConnectionError::Frame(FrameError::Io(_)) => {}
        ConnectionError::Tls(error) => {
            tracing::warn!(kind, %address, %error, "connection refused: TLS failed");
        }
        ConnectionError::Forbidden { role, request } => {
            tracing::warn!(kind, %address, %role, request, "request refused: not this role's");
        }
        ConnectionError::Handshake(_)
        | ConnectionError::Frame(_)
        | ConnectionError::Decode(_)
        | ConnectionError::Refused(_) => match error.refusal() {
            Some(refusal) => log_refused(kind, address, &refusal),
            None => log_line(format_args!("{kind} connection {address} closed: {error}")),
        },
    }
}

fn log_refused(kind: &str, address: &dyn std::fmt::Display, refusal: &Refusal) {
    tracing::warn!(kind, %address, %refusal, "connection refused");
}

/// One warning; a flood of them is rate-limited by the log layer (`cli::logging::RateLimit`),
/// not here.
fn log_line(line: std::fmt::Arguments<'_>) {
    tracing::warn!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::message::SnapshotChunk;

    /// Longest the test waits for the report (a guard against a hang, not a timing claim).
    const REPORT_WAIT_MS: u64 = 10_000;

    fn access() -> Access {
        Access {
            me: NodeId(1),
            cluster: 1,
            nodes: vec![NodeId(2)],
            keys: Credentials::of_peer_key(Key::peer(b"sixteen bytes at least").unwrap()),
            misused: Arc::default(),
            tls: None,
        }
    }

    fn chunk(offset: u64, total: u64) -> PeerMessage {
        PeerMessage::Snapshot(SnapshotChunk {
            term: net::ids::Term(1),
            leader: NodeId(1),
            index: net::ids::EntryIndex(64),
            offset,
            total,
            data: vec![7; 16],
        })
    }

    /// Proves a snapshot chunk dropped because the follower is unreachable is reported as an
    /// aborted transfer (unreported, the leader would send the snapshot again only after
    /// `SNAPSHOT_RESEND_TICKS`, 10 s).
    #[tokio::test]
    async fn a_snapshot_chunk_dropped_for_an_unreachable_follower_aborts_the_transfer() {
        // A port nobody listens on: the connection is refused.
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let (inbox, mut inputs) = mpsc::channel(8);
        let links = (PeerWakes::new([NodeId(2)]), PeerAddresses::default());
        let queue = connect_peer(access(), NodeId(2), address.into(), links, inbox);
        queue.send(chunk(0, 32)).await.unwrap();
        let wait = Duration::from_millis(REPORT_WAIT_MS);
        let input = tokio::time::timeout(wait, inputs.recv()).await;
        assert!(
            matches!(input, Ok(Some(Input::SnapshotAborted(NodeId(2))))),
            "no report of the lost transfer"
        );
    }

    /// Proves a peer given by name is looked up when its connection is made, and the socket
    /// address reached is kept for the WAL thread's acknowledgements.
    #[tokio::test]
    async fn a_peer_named_is_reached_and_its_address_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (inbox, _inputs) = mpsc::channel(8);
        let found = PeerAddresses::default();
        let links = (PeerWakes::new([NodeId(2)]), found.clone());
        let named: Address = format!("localhost:{port}").parse().unwrap();
        let _queue = connect_peer(access(), NodeId(2), named, links, inbox);
        let wait = Duration::from_millis(REPORT_WAIT_MS);
        let (_stream, from) = tokio::time::timeout(wait, listener.accept())
            .await
            .expect("the named peer is connected to")
            .unwrap();
        let deadline = tokio::time::Instant::now() + wait;
        while found.get(NodeId(2)).is_none() && tokio::time::Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        let (kept, host) = found.get(NodeId(2)).expect("the address reached is kept");
        assert_eq!(host, "localhost");
        assert_eq!(kept, listener.local_addr().unwrap());
        assert!(from.ip().is_loopback());
    }

    /// Proves the bookkeeping: a transfer is open from its first chunk taken until its last
    /// chunk is flushed; a loss before that is reported once, a loss after it not at all.
    #[test]
    fn a_transfer_is_lost_only_between_its_first_chunk_and_its_last_flush() {
        let mut transfer = Transfer::default();
        assert!(!transfer.lost(), "nothing was sent");
        transfer.taken(&chunk(0, 32));
        transfer.flushed();
        assert!(transfer.lost(), "the last chunk was not written");
        assert!(!transfer.lost(), "reported once");
        transfer.taken(&chunk(0, 32));
        transfer.taken(&chunk(16, 32));
        transfer.flushed();
        assert!(!transfer.lost(), "the whole snapshot was flushed");
        transfer.taken(&chunk(0, 32));
        transfer.taken(&chunk(16, 32));
        assert!(transfer.lost(), "the last chunk was taken but not flushed");
        transfer.dropped(&chunk(0, 32));
        assert!(transfer.lost(), "a dropped chunk loses the transfer");
    }

    /// Proves a chunk that does not continue the one before it (a transfer interleaved with
    /// another, or a chunk skipped) trips the check.
    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "in order, one transfer at a time")]
    fn a_chunk_out_of_order_is_caught() {
        let mut transfer = Transfer::default();
        transfer.taken(&chunk(0, 48));
        transfer.taken(&chunk(32, 48));
    }
}
