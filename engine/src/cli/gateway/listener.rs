//! The gateway's listener: TCP with a bound on open connections. Past the bound the next
//! connection is not accepted until one closes: it waits in the kernel's listen backlog
//! (bounded too), never in the gateway's memory.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Milliseconds to wait after an accept fails (out of file descriptors, say) before the next.
const ACCEPT_RETRY_MS: u64 = 100;

/// A TCP listener that keeps at most its bound of connections open.
pub struct Limited {
    listener: TcpListener,
    open: Arc<Semaphore>,
}

impl Limited {
    /// Listens on `address`, `connections_max` connections at once at most.
    pub async fn bind(address: SocketAddr, connections_max: usize) -> io::Result<Self> {
        Ok(Limited {
            listener: TcpListener::bind(address).await?,
            open: Arc::new(Semaphore::new(connections_max)),
        })
    }

    /// The address it listens on (the port chosen, for port 0).
    pub fn address(&self) -> String {
        self.listener
            .local_addr()
            .map_or_else(|e| e.to_string(), |a| a.to_string())
    }
}

impl axum::serve::Listener for Limited {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        let permit = self
            .open
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        loop {
            match self.listener.accept().await {
                Ok((stream, address)) => {
                    // Answers are small and awaited: send them at once.
                    let _ = stream.set_nodelay(true);
                    let connection = Connection {
                        stream,
                        _open: permit,
                    };
                    return (connection, address);
                }
                Err(error) => {
                    tracing::warn!(%error, "gateway: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// An accepted connection, holding its place among the open ones until it closes.
pub struct Connection {
    stream: TcpStream,
    _open: OwnedSemaphorePermit,
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
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
