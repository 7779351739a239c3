//! TCP connections of a node: one outgoing connection per peer (reconnecting with back-off),
//! incoming peer connections, and client connections. Every connection starts with a
//! [`Hello`]; every frame is checked (length, crc32) and decoded before it reaches the node.

use super::Input;
use crate::codec;
use crate::ids::NodeId;
use futures::{SinkExt, StreamExt};
use net::frame::{FrameCodec, FrameError};
use net::message::{ClientReply, ClientRequest, Hello, PROTOCOL_VERSION, PeerMessage};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};

/// Messages queued for one peer; past this, new messages to it are dropped (consensus resends
/// what matters, and a slow peer never holds the leader back).
pub const PEER_QUEUE_MESSAGES_MAX: usize = 256;
/// Replies queued for one client connection; past this, replies are dropped (the client
/// retries and gets its results from the session).
pub const CLIENT_REPLIES_QUEUED_MAX: usize = 1024;
/// Client connections a node accepts at once; more are closed on arrival.
pub const CLIENT_CONNECTIONS_MAX: usize = 1024;
/// Time a new connection has to send its handshake.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 5_000;
/// First and last wait between reconnection attempts to a peer.
pub const RECONNECT_BACKOFF_MS_MIN: u64 = 10;
/// See [`RECONNECT_BACKOFF_MS_MIN`].
pub const RECONNECT_BACKOFF_MS_MAX: u64 = 1_000;
/// Socket send and receive buffer sizes.
pub const SOCKET_BUFFER_BYTES: usize = 4 * 1024 * 1024;

/// Why a connection closed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("decode: {0}")]
    Decode(#[from] codec::CodecError),
    #[error("handshake refused: {0}")]
    Handshake(String),
    #[error("closed")]
    Closed,
}

/// TCP_NODELAY and large buffers: frames go out at once, bursts do not block.
pub(crate) fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let socket = socket2::SockRef::from(stream);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
}

/// Reads and checks the handshake: same protocol, same cluster, and a caller of the expected
/// kind (a listed peer, or a client).
async fn handshake<R>(
    frames: &mut FramedRead<R, FrameCodec>,
    cluster: u64,
) -> Result<Hello, ConnectionError>
where
    R: tokio::io::AsyncRead + Unpin,
{
    let first = tokio::time::timeout(Duration::from_millis(HANDSHAKE_TIMEOUT_MS), frames.next())
        .await
        .map_err(|_| ConnectionError::Handshake("no handshake in time".into()))?
        .ok_or(ConnectionError::Closed)??;
    let hello: Hello = codec::decode(&first)?;
    if hello.version != PROTOCOL_VERSION {
        return Err(ConnectionError::Handshake(format!(
            "protocol version {}",
            hello.version
        )));
    }
    if hello.cluster != cluster {
        return Err(ConnectionError::Handshake(format!(
            "cluster {}",
            hello.cluster
        )));
    }
    Ok(hello)
}

/// Accepts peer connections and forwards their messages to the node.
pub(crate) async fn accept_peers(
    listener: TcpListener,
    cluster: u64,
    nodes: Vec<NodeId>,
    inbox: mpsc::Sender<Input>,
) {
    while let Ok((stream, address)) = listener.accept().await {
        tune(&stream);
        let (nodes, inbox) = (nodes.clone(), inbox.clone());
        tokio::spawn(async move {
            if let Err(error) = read_peer(stream, cluster, nodes, inbox).await {
                log_closed("peer", address, &error);
            }
        });
    }
}

async fn read_peer(
    stream: TcpStream,
    cluster: u64,
    nodes: Vec<NodeId>,
    inbox: mpsc::Sender<Input>,
) -> Result<(), ConnectionError> {
    let mut frames = FramedRead::new(stream, FrameCodec);
    let hello = handshake(&mut frames, cluster).await?;
    let from = hello.node.filter(|n| nodes.contains(n)).ok_or_else(|| {
        ConnectionError::Handshake(format!("not a peer of this cluster: {:?}", hello.node))
    })?;
    while let Some(frame) = frames.next().await {
        let message: PeerMessage = codec::decode(&frame?)?;
        if inbox.send(Input::Peer { from, message }).await.is_err() {
            return Ok(());
        }
    }
    Err(ConnectionError::Closed)
}

/// Starts the task that keeps a connection to `peer` and writes what the node queues for it.
pub(crate) fn connect_peer(
    me: NodeId,
    cluster: u64,
    address: SocketAddr,
) -> mpsc::Sender<PeerMessage> {
    let (queue, mut queued) = mpsc::channel::<PeerMessage>(PEER_QUEUE_MESSAGES_MAX);
    tokio::spawn(async move {
        let mut backoff = RECONNECT_BACKOFF_MS_MIN;
        loop {
            match TcpStream::connect(address).await {
                Ok(stream) => {
                    tune(&stream);
                    backoff = RECONNECT_BACKOFF_MS_MIN;
                    let hello = Hello {
                        version: PROTOCOL_VERSION,
                        cluster,
                        node: Some(me),
                    };
                    match write_peer(stream, &hello, &mut queued).await {
                        Ok(()) => return,
                        Err(error) => log_closed("peer", address, &error),
                    }
                }
                Err(_) => {
                    // Unreachable for now: whatever was queued is stale by the time it is back.
                    while queued.try_recv().is_ok() {}
                }
            }
            tokio::time::sleep(Duration::from_millis(backoff)).await;
            backoff = (backoff * 2).min(RECONNECT_BACKOFF_MS_MAX);
        }
    });
    queue
}

/// Writes the handshake, then queued messages, several per flush when they are waiting.
/// Returns `Ok` when the node dropped the queue (shutdown).
async fn write_peer(
    stream: TcpStream,
    hello: &Hello,
    queued: &mut mpsc::Receiver<PeerMessage>,
) -> Result<(), ConnectionError> {
    let mut frames = FramedWrite::new(stream, FrameCodec);
    frames.send(hello).await?;
    while let Some(message) = queued.recv().await {
        frames.feed(&message).await?;
        while let Ok(message) = queued.try_recv() {
            frames.feed(&message).await?;
        }
        SinkExt::<&PeerMessage>::flush(&mut frames).await?;
    }
    Ok(())
}

/// Accepts client connections (up to [`CLIENT_CONNECTIONS_MAX`] at once).
pub(crate) async fn accept_clients(
    listener: TcpListener,
    cluster: u64,
    inbox: mpsc::Sender<Input>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    while let Ok((stream, address)) = listener.accept().await {
        if open.fetch_add(1, Ordering::Relaxed) >= CLIENT_CONNECTIONS_MAX {
            open.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        tune(&stream);
        let (open, inbox) = (open.clone(), inbox.clone());
        tokio::spawn(async move {
            if let Err(error) = serve_client(stream, cluster, inbox).await {
                log_closed("client", address, &error);
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

async fn serve_client(
    stream: TcpStream,
    cluster: u64,
    inbox: mpsc::Sender<Input>,
) -> Result<(), ConnectionError> {
    let (read, write) = stream.into_split();
    let mut frames = FramedRead::new(read, FrameCodec);
    let hello = handshake(&mut frames, cluster).await?;
    if hello.node.is_some() {
        return Err(ConnectionError::Handshake(
            "a peer on the client port".into(),
        ));
    }
    let (reply, mut replies) = mpsc::channel::<ClientReply>(CLIENT_REPLIES_QUEUED_MAX);
    let writer = tokio::spawn(async move {
        let mut frames = FramedWrite::new(write, FrameCodec);
        while let Some(message) = replies.recv().await {
            frames.feed(&message).await?;
            while let Ok(message) = replies.try_recv() {
                frames.feed(&message).await?;
            }
            SinkExt::<&ClientReply>::flush(&mut frames).await?;
        }
        Ok::<(), FrameError>(())
    });
    let result = async {
        while let Some(frame) = frames.next().await {
            let request: ClientRequest = codec::decode(&frame?)?;
            if inbox
                .send(Input::Client {
                    request,
                    reply: reply.clone(),
                })
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        Ok(())
    }
    .await;
    drop(reply);
    writer.abort();
    result
}

fn log_closed(kind: &str, address: SocketAddr, error: &ConnectionError) {
    match error {
        ConnectionError::Closed => {}
        ConnectionError::Frame(FrameError::Io(e))
            if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        ConnectionError::Frame(_) | ConnectionError::Decode(_) | ConnectionError::Handshake(_) => {
            eprintln!("{kind} connection from {address} closed: {error}");
        }
    }
}
