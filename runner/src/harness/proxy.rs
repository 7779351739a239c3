//! Our loopback TCP proxy: one listener per directed link between two nodes, forwarding to the
//! destination's real peer address, whose behaviour can be changed at any moment: pass, drop
//! (connections closed and refused), blackhole (bytes accepted and discarded), or delay.
//!
//! A node's peer connection to another node carries its messages one way only (the other
//! node answers over its own connection), so cutting the link from `a` to `b` cuts exactly
//! what `a` says to `b`.

use crate::faults::RelayListeners;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bytes a link forwards per read.
pub const PROXY_BUFFER_BYTES: usize = 256 * 1024;

/// What a link does with what it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Forwards everything at once.
    Pass,
    /// Closes its connections and refuses new ones.
    Drop,
    /// Accepts and reads everything, forwards nothing.
    Blackhole,
    /// Forwards each read after this long.
    Delay(Duration),
}

/// The directed links between the nodes of a cluster.
pub struct Proxy {
    links: BTreeMap<(u8, u8), watch::Sender<LinkMode>>,
    addresses: BTreeMap<(u8, u8), SocketAddr>,
}

impl Proxy {
    /// Starts a link from every node to every other, each forwarding to the destination's
    /// address in `peers` (node id to real peer address), the link `(from, to)` on
    /// `listeners[&(from, to)]`. Call inside a tokio runtime.
    pub fn start(
        peers: &BTreeMap<u8, SocketAddr>,
        listeners: RelayListeners,
    ) -> std::io::Result<Proxy> {
        let mut links = BTreeMap::new();
        let mut addresses = BTreeMap::new();
        for ((from, to), listener) in listeners {
            let target = peers[&to];
            listener.set_nonblocking(true)?;
            let listener = TcpListener::from_std(listener)?;
            addresses.insert((from, to), listener.local_addr()?);
            let (mode, watching) = watch::channel(LinkMode::Pass);
            links.insert((from, to), mode);
            tokio::spawn(serve_link(listener, target, watching));
        }
        Ok(Proxy { links, addresses })
    }

    /// The address node `from` dials to reach node `to` through the proxy.
    pub fn address(&self, from: u8, to: u8) -> SocketAddr {
        self.addresses[&(from, to)]
    }

    /// Sets the link from `from` to `to`.
    pub fn set(&self, from: u8, to: u8, mode: LinkMode) {
        self.links[&(from, to)].send_replace(mode);
    }

    /// Sets both links between `a` and `b`.
    pub fn set_both(&self, a: u8, b: u8, mode: LinkMode) {
        self.set(a, b, mode);
        self.set(b, a, mode);
    }

    /// Every link back to [`LinkMode::Pass`].
    pub fn heal(&self) {
        for link in self.links.values() {
            link.send_replace(LinkMode::Pass);
        }
    }
}

async fn serve_link(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<LinkMode>) {
    while let Ok((inbound, _)) = listener.accept().await {
        if *mode.borrow() == LinkMode::Drop {
            drop(inbound);
            continue;
        }
        let mode = mode.clone();
        tokio::spawn(async move {
            if let Ok(outbound) = TcpStream::connect(target).await {
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                forward(inbound, outbound, mode).await;
            }
        });
    }
}

/// Carries bytes from `inbound` to `outbound` as the link's mode says, and back unchanged,
/// until either side closes or the link drops.
async fn forward(inbound: TcpStream, outbound: TcpStream, mut mode: watch::Receiver<LinkMode>) {
    let (mut in_read, mut in_write) = inbound.into_split();
    let (mut out_read, mut out_write) = outbound.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut out_read, &mut in_write).await;
    });
    let mut buffer = vec![0u8; PROXY_BUFFER_BYTES];
    // Once bytes were discarded the stream is cut mid-frame: it closes when the hole ends,
    // and the node dials again.
    let mut discarded = false;
    loop {
        let read = tokio::select! {
            read = in_read.read(&mut buffer) => read,
            changed = mode.changed() => {
                if changed.is_err() || *mode.borrow() == LinkMode::Drop {
                    break;
                }
                continue;
            }
        };
        let Ok(length @ 1..) = read else { break };
        let current = *mode.borrow();
        match current {
            LinkMode::Blackhole => {
                discarded = true;
                continue;
            }
            LinkMode::Drop => break,
            LinkMode::Pass | LinkMode::Delay(_) if discarded => break,
            LinkMode::Pass => {}
            LinkMode::Delay(delay) => tokio::time::sleep(delay).await,
        }
        if out_write.write_all(&buffer[..length]).await.is_err() {
            break;
        }
    }
    back.abort();
}
