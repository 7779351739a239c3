//! The gateway's listener: TCP, in clear or TLS, with a bound on open connections. Past the
//! bound the next connection is not accepted until one closes: it waits in the kernel's
//! listen backlog (bounded too), never in the gateway's memory.
//!
//! With TLS a task of its own accepts and hands each handshake to a task of its own, bounded by
//! [`GATEWAY_TLS_HANDSHAKE_S`]: a caller that stalls its handshake (or never starts it) holds
//! one place among the open connections for that long, never the accepting of the others.
//! A place is taken before the TCP accept and held by the handshake, then by the connection.

use super::serve::GATEWAY_HEADER_READ_S;
use super::tls::GATEWAY_TLS_HANDSHAKE_S;
use net::tls::{HttpAcceptor, Stream};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::AbortHandle;

/// Milliseconds to wait after an accept fails (out of file descriptors, say) before the next.
const ACCEPT_RETRY_MS: u64 = 100;

/// A TCP listener that keeps at most its bound of connections open, in clear or TLS.
pub struct Limited {
    address: SocketAddr,
    open: Arc<Semaphore>,
    accepted: Accepted,
}

/// Where [`Limited`]'s connections come from.
enum Accepted {
    /// In clear: each accepted when axum asks for the next.
    Plain(TcpListener),
    /// TLS: connections whose handshake finished, from the accepting task.
    Tls {
        handshaken: mpsc::Receiver<(Connection, SocketAddr)>,
        accepting: AbortHandle,
    },
}

impl Limited {
    /// Listens on `address`, `connections_max` connections at once at most; TLS only when
    /// `tls` is given.
    pub async fn bind(
        address: SocketAddr,
        connections_max: usize,
        tls: Option<HttpAcceptor>,
    ) -> io::Result<Self> {
        assert!(connections_max > 0, "a listener that accepts nothing");
        let listener = TcpListener::bind(address).await?;
        let address = listener.local_addr()?;
        let open = Arc::new(Semaphore::new(connections_max));
        let accepted = match tls {
            None => Accepted::Plain(listener),
            Some(acceptor) => {
                // Each connection in the channel holds a place, so it never holds more than
                // `connections_max` and a send never waits.
                let (ready, handshaken) = mpsc::channel(connections_max);
                let task = accept_tls(listener, open.clone(), acceptor, ready);
                let accepting = tokio::spawn(task).abort_handle();
                Accepted::Tls {
                    handshaken,
                    accepting,
                }
            }
        };
        Ok(Limited {
            address,
            open,
            accepted,
        })
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn address(&self) -> String {
        self.address.to_string()
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        // The accepting task owns the socket: stop it, so that the port closes with the
        // server.
        match &self.accepted {
            Accepted::Plain(_) => {}
            Accepted::Tls { accepting, .. } => accepting.abort(),
        }
    }
}

impl axum::serve::Listener for Limited {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        match &mut self.accepted {
            Accepted::Plain(listener) => {
                let open = self.open.clone().acquire_owned().await;
                let open = open.expect("the semaphore is never closed");
                let (stream, address) = accept_tcp(listener).await;
                let stream = Stream::Plain(stream);
                (Connection::new(stream, open), address)
            }
            Accepted::Tls { handshaken, .. } => {
                let next = handshaken.recv().await;
                next.expect("the accepting task runs until the listener is dropped")
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.address)
    }
}

/// The next TCP connection, retried until one comes.
async fn accept_tcp(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, address)) => {
                // Answers are small and awaited: send them at once.
                let _ = stream.set_nodelay(true);
                return (stream, address);
            }
            Err(error) => {
                tracing::warn!(%error, "gateway: accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
            }
        }
    }
}

/// Accepts connections while there is room, each handshake in a task of its own.
async fn accept_tls(
    listener: TcpListener,
    open: Arc<Semaphore>,
    acceptor: HttpAcceptor,
    ready: mpsc::Sender<(Connection, SocketAddr)>,
) {
    loop {
        let place = open.clone().acquire_owned().await;
        let place = place.expect("the semaphore is never closed");
        let (stream, address) = accept_tcp(&listener).await;
        tokio::spawn(handshake(
            acceptor.clone(),
            stream,
            address,
            place,
            ready.clone(),
        ));
    }
}

/// Runs the TLS handshake of one connection within [`GATEWAY_TLS_HANDSHAKE_S`] and hands the
/// connection on; one that fails or is late is closed (its place freed) and logged.
async fn handshake(
    acceptor: HttpAcceptor,
    stream: TcpStream,
    address: SocketAddr,
    open: OwnedSemaphorePermit,
    ready: mpsc::Sender<(Connection, SocketAddr)>,
) {
    let limit = Duration::from_secs(GATEWAY_TLS_HANDSHAKE_S);
    match tokio::time::timeout(limit, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            // Fails only when the server stopped: the connection is dropped with it.
            let _ = ready.send((Connection::new(stream, open), address)).await;
        }
        Ok(Err(error)) => {
            tracing::warn!(%address, %error, "gateway: connection refused: TLS failed");
        }
        Err(_) => {
            tracing::warn!(
                %address,
                seconds = GATEWAY_TLS_HANDSHAKE_S,
                "gateway: connection refused: TLS handshake too slow"
            );
        }
    }
}

/// An accepted connection (in clear or TLS), holding its place among the open ones until it
/// closes.
pub struct Connection {
    stream: Stream,
    _open: OwnedSemaphorePermit,
    /// Until the caller's first bytes: when they must have come. hyper waits for them
    /// without a limit (to tell HTTP/1.1 from HTTP/2), and a caller that sends nothing would
    /// hold its place among the open connections for good.
    first_bytes_by: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Connection {
    fn new(stream: Stream, open: OwnedSemaphorePermit) -> Connection {
        let limit = Duration::from_secs(GATEWAY_HEADER_READ_S);
        Connection {
            stream,
            _open: open,
            first_bytes_by: Some(Box::pin(tokio::time::sleep(limit))),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        let Some(deadline) = self.first_bytes_by.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.first_bytes_by = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => Poll::Ready(Err(
                io::Error::new(io::ErrorKind::TimedOut, "the caller sent nothing in time"),
            )),
            other @ (Poll::Ready(_) | Poll::Pending) => other,
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
