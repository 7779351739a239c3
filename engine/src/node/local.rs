//! Three (or more) nodes in one process over TCP, on loopback ports picked free or on the
//! caller's addresses: what `runner local` and the in-process cluster tests run.

use super::config::ConfigError;
use super::{NodeAddress, NodeConfig, NodeError, NodeHandle, start};
use crate::client::{ClientConfig, OperatorConfig, node_status};
use crate::handler::Handler;
use crate::ids::NodeId;
use net::auth::OperatorKey;
use net::message::{NodeStatus, Role};
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Ports this process has handed out already: a port is given back as soon as it is picked
/// (the node binds it later), so a later pick could otherwise find it free again and give it
/// to another cluster of a test running beside. No port is handed out twice by one process.
static HANDED_OUT: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());

/// Loopback ports [`free_loopback_addresses`] hands out: below the range the kernel takes
/// the source ports of outgoing connections from (32768-60999 on Linux by default, 49152 and
/// up elsewhere), so that while a node is down no connection can take its port as a source
/// port (a peer reconnecting to a killed node did, and the node's restart failed).
pub const LOCAL_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// Ports for `count` nodes (peer and client each) from [`LOCAL_PORTS`] that were free a
/// moment ago, none handed out before by this process. Each process starts at its own place
/// in the range, so that two processes picking at once (test binaries, a benchmark) rarely
/// try the same ports.
pub fn free_loopback_addresses(count: usize) -> std::io::Result<Vec<NodeAddress>> {
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let span = u32::from(LOCAL_PORTS.end - LOCAL_PORTS.start);
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    // Held until every pick is made: what is picked is free at the same moment.
    let mut held = Vec::new();
    let mut addresses: Vec<SocketAddr> = Vec::new();
    for step in 0..span {
        if addresses.len() == count * 2 {
            break;
        }
        let port = LOCAL_PORTS.start + ((start + step) % span) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            handed_out.insert(port);
            addresses.push(listener.local_addr()?);
            held.push(listener);
        }
    }
    if addresses.len() < count * 2 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrNotAvailable,
            format!(
                "no free loopback port in {}-{} this process has not handed out already",
                LOCAL_PORTS.start,
                LOCAL_PORTS.end - 1
            ),
        ));
    }
    Ok((0..count)
        .map(|i| NodeAddress {
            id: NodeId(i as u8 + 1),
            peer_address: addresses[2 * i].into(),
            client_address: addresses[2 * i + 1].into(),
        })
        .collect())
}

/// Times [`LocalCluster::start`] and [`LocalCluster::start_with`] try fresh ports when one
/// they picked was taken meanwhile.
pub const LOCAL_START_ATTEMPTS_MAX: u32 = 5;

/// Makes a node's handler, once for each start or restart of a node (shared by the start
/// attempts, so that a retry on fresh ports makes its handlers the same way).
type MakeHandler<H> = Arc<dyn Fn() -> H + Send + Sync>;

/// A cluster running in this process. Each node's handler comes from the factory the cluster
/// was started with, called at every start and restart of a node (a handler need not be
/// `Clone`; [`LocalCluster::start`] makes clones of one).
pub struct LocalCluster<H: Handler> {
    configs: Vec<NodeConfig>,
    handles: Vec<Option<NodeHandle>>,
    make: MakeHandler<H>,
}

impl<H: Handler + Clone> LocalCluster<H> {
    /// Starts `count` nodes with data under `base` (one directory per node), each with a
    /// clone of `handler`; `tune` adjusts each node's configuration before it starts. Ports
    /// are picked free, as with [`LocalCluster::start_with`].
    pub fn start(
        base: &Path,
        count: usize,
        handler: H,
        tune: impl Fn(&mut NodeConfig),
    ) -> Result<Self, NodeError> {
        LocalCluster::start_with(base, count, move || handler.clone(), tune)
    }
}

impl<H: Handler> LocalCluster<H> {
    /// Starts `count` nodes with data under `base` (one directory per node), each with a
    /// handler from `make` (called again at every restart); `tune` adjusts each node's
    /// configuration before it starts. Ports are picked free; one that another process took
    /// meanwhile makes it start again on fresh ones (at most [`LOCAL_START_ATTEMPTS_MAX`]
    /// times).
    pub fn start_with(
        base: &Path,
        count: usize,
        make: impl Fn() -> H + Send + Sync + 'static,
        tune: impl Fn(&mut NodeConfig),
    ) -> Result<Self, NodeError> {
        let make: MakeHandler<H> = Arc::new(make);
        let mut attempt = 1;
        loop {
            let addresses = free_loopback_addresses(count).map_err(|source| NodeError::Io {
                path: base.to_path_buf(),
                source,
            })?;
            match LocalCluster::start_nodes(base, addresses, Arc::clone(&make), &tune) {
                Err(NodeError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AddrInUse
                        && attempt < LOCAL_START_ATTEMPTS_MAX =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Starts one node for each of `addresses` (the caller's: their ids, peer and client
    /// addresses) with data under `base` (one directory per node), each with a handler from
    /// `make` (called again at every restart); `tune` adjusts each node's configuration
    /// before it starts. An address in use is an error ([`NodeError::Io`]), not tried again
    /// elsewhere; no addresses is [`ConfigError::NoNodes`].
    pub fn start_at(
        base: &Path,
        addresses: Vec<NodeAddress>,
        make: impl Fn() -> H + Send + Sync + 'static,
        tune: impl Fn(&mut NodeConfig),
    ) -> Result<Self, NodeError> {
        LocalCluster::start_nodes(base, addresses, Arc::new(make), &tune)
    }

    /// Starts a node for each of `addresses`, under one fresh key for all.
    fn start_nodes(
        base: &Path,
        addresses: Vec<NodeAddress>,
        make: MakeHandler<H>,
        tune: &impl Fn(&mut NodeConfig),
    ) -> Result<Self, NodeError> {
        if addresses.is_empty() {
            return Err(NodeError::Config(vec![ConfigError::NoNodes]));
        }
        let key = net::auth::Key::random().map_err(|source| NodeError::Io {
            path: base.to_path_buf(),
            source,
        })?;
        let configs: Vec<NodeConfig> = addresses
            .iter()
            .map(|a| {
                let dir = base.join(format!("node{}", a.id));
                let mut config = NodeConfig::new(a.id, addresses.clone(), dir, key.clone());
                tune(&mut config);
                config
            })
            .collect();
        let mut cluster = LocalCluster {
            handles: configs.iter().map(|_| None).collect(),
            configs,
            make,
        };
        // On an error the nodes started so far stop with `cluster` (and free their directories).
        for id in cluster.ids() {
            cluster.restart(id)?;
        }
        Ok(cluster)
    }

    /// The nodes' ids.
    pub fn ids(&self) -> Vec<NodeId> {
        self.configs.iter().map(|c| c.id).collect()
    }

    /// A node's configuration.
    pub fn config(&self, id: NodeId) -> &NodeConfig {
        &self.configs[self.position(id)]
    }

    /// Where node `id` is in this cluster's lists (the caller's addresses, for
    /// [`LocalCluster::start_at`], need not number the nodes from 1 in order).
    fn position(&self, id: NodeId) -> usize {
        self.configs
            .iter()
            .position(|c| c.id == id)
            .unwrap_or_else(|| panic!("node {id} is not one of this cluster's"))
    }

    /// How clients reach this cluster.
    pub fn client_config(&self) -> ClientConfig {
        let nodes = self.configs[0]
            .nodes
            .iter()
            .map(|n| n.client_address.clone());
        let mut config = ClientConfig::new(self.configs[0].cluster_id, nodes);
        let client = self.configs[0].credentials.client.as_ref();
        config.key = client.map(|ring| ring.current.clone());
        // In one process the nodes' own TLS serves their clients too (the CA, and node 1's
        // certificate presented where a client may present one).
        config.tls.clone_from(&self.configs[0].tls);
        config
    }

    /// How operators reach this cluster: with the operator key of its nodes' peer key (a
    /// `tune` that gives the nodes an operator secret of their own makes its own
    /// configuration).
    pub fn operator_config(&self) -> OperatorConfig {
        let first = &self.configs[0];
        let nodes = first.nodes.iter().map(|n| n.client_address.clone());
        let key = OperatorKey::of_peer_key(&first.credentials.peer.current);
        let mut config = OperatorConfig::new(first.cluster_id, nodes, key);
        config.tls.clone_from(&first.tls);
        config
    }

    /// Stops one node (its data stays).
    pub fn stop(&mut self, id: NodeId) {
        let at = self.position(id);
        if let Some(handle) = self.handles[at].take() {
            handle.stop();
        }
    }

    /// Starts (or restarts) one node from its data, with a handler fresh from the factory.
    pub fn restart(&mut self, id: NodeId) -> Result<(), NodeError> {
        self.stop(id);
        let handle = start(self.config(id).clone(), (self.make)())?;
        let at = self.position(id);
        self.handles[at] = Some(handle);
        Ok(())
    }

    /// Every running node's status (`None` for a node that did not answer).
    pub async fn statuses(&self) -> Vec<Option<NodeStatus>> {
        let mut statuses = Vec::new();
        let client = self.client_config();
        for (config, handle) in self.configs.iter().zip(&self.handles) {
            let address = &config.address(config.id).expect("listed").client_address;
            let status = match handle {
                Some(_) => node_status(&client, address, Duration::from_secs(1))
                    .await
                    .ok(),
                None => None,
            };
            statuses.push(status);
        }
        statuses
    }

    /// Waits until one node leads with the others following it; returns the leader.
    pub async fn wait_for_leader(&self, limit: Duration) -> Option<NodeId> {
        let started = Instant::now();
        while started.elapsed() < limit {
            let statuses = self.statuses().await;
            let leader = statuses
                .iter()
                .flatten()
                .find(|s| s.role == Role::Leader)
                .map(|s| s.node);
            if leader.is_some() && statuses.iter().flatten().all(|s| s.leader == leader) {
                return leader;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Waits until every running node has applied the same entry, at least `index`, with the
    /// same state hash; returns their statuses.
    pub async fn wait_for_convergence(
        &self,
        index: crate::ids::EntryIndex,
        limit: Duration,
    ) -> Option<Vec<NodeStatus>> {
        let started = Instant::now();
        while started.elapsed() < limit {
            let statuses: Vec<NodeStatus> = self.statuses().await.into_iter().flatten().collect();
            let running = self.handles.iter().filter(|h| h.is_some()).count();
            let first = statuses.first()?;
            let same = statuses.iter().all(|s| {
                s.applied_index == first.applied_index && s.state_hash == first.state_hash
            });
            if statuses.len() == running && same && first.applied_index >= index {
                return Some(statuses);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves every port handed out lies below the kernel's range for the source ports of
    /// outgoing connections (before, they came from binds of port 0, inside that range: a
    /// peer reconnecting to a killed node took its port as a source port, and the node's
    /// restart failed with "address already in use").
    #[test]
    fn picked_ports_are_below_the_outgoing_connections_range() {
        for address in free_loopback_addresses(3).unwrap() {
            for port in [address.peer_address.port(), address.client_address.port()] {
                assert!(LOCAL_PORTS.contains(&port), "port {port}");
                assert!(
                    port < 32_768,
                    "port {port} is in Linux's default source range"
                );
            }
        }
    }

    /// Proves one process never hands out a port twice, although each pick is given back to
    /// the kernel at once (before, the next pick could get it again: a cluster of one test
    /// could then be given another's port).
    #[test]
    fn picked_ports_are_never_handed_out_twice() {
        let mut seen = BTreeSet::new();
        for _ in 0..300 {
            for address in free_loopback_addresses(3).unwrap() {
                assert!(seen.insert(address.peer_address.port()));
                assert!(seen.insert(address.client_address.port()));
            }
        }
    }
}
