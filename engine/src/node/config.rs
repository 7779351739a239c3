//! What a node's configuration may hold: every setting's range as a named constant with its
//! unit, and the checks a start makes before anything else (a bad value is a typed error
//! here, never an assertion inside the node thread).

use super::{NodeAddress, NodeConfig};
use crate::address::Address;
use crate::apply::{SESSION_RETENTION_S_MAX, SESSION_RETENTION_S_MIN};
use crate::apply::{SESSIONS_MAX_LIMIT, SESSIONS_MAX_MIN};
use crate::core::PEER_INFLIGHT_ENTRIES_MAX;
use crate::entry::{ENTRY_COMMANDS_CONFIG_MIN, ENTRY_COMMANDS_MAX};
use crate::ids::NodeId;
use crate::wal::{WAL_SEGMENT_BYTES_MAX, WAL_SEGMENT_BYTES_MIN};
use std::net::SocketAddr;

/// Least state capacity a node may be configured with (1 MiB).
pub const CAPACITY_BYTES_MIN: u64 = 1 << 20;
/// Most state capacity a node may be configured with (1 TiB).
pub const CAPACITY_BYTES_MAX: u64 = 1 << 40;
/// Shortest tick.
pub const TICK_MS_MIN: u64 = 1;
/// Longest tick.
pub const TICK_MS_MAX: u64 = 1_000;
/// Least minimum election timeout, in ticks (a heartbeat must fit below it).
pub const ELECTION_TICKS_CONFIG_MIN: u32 = 2;
/// Most minimum election timeout, in ticks.
pub const ELECTION_TICKS_CONFIG_MAX: u32 = 100_000;
/// Least ticks between heartbeats.
pub const HEARTBEAT_TICKS_CONFIG_MIN: u32 = 1;
/// Least entries a leader keeps in flight.
pub const PIPELINE_ENTRIES_CONFIG_MIN: u64 = 1;
/// Most entries a leader keeps in flight: no more than a follower may have in flight.
pub const PIPELINE_ENTRIES_CONFIG_MAX: u64 = PEER_INFLIGHT_ENTRIES_MAX;
/// Most entries between snapshot captures (0 turns snapshots off).
pub const SNAPSHOT_EVERY_ENTRIES_MAX: u64 = 1_000_000;
/// Longest a snapshot may be kept before a newer one replaces it (an hour).
pub const SNAPSHOT_RETAIN_MS_MAX: u64 = 3_600_000;
/// Most entries a leader may keep behind its snapshot for a lagging follower.
pub const LAGGING_ENTRIES_CONFIG_MAX: u64 = 1_000_000;
/// Most entries the log may be kept behind the last applied one for the change stream (the
/// consensus core keeps about 40 bytes of every entry in the log in memory: 160 MiB at it).
pub const CHANGES_RETAIN_ENTRIES_MAX: u64 = 4_194_304;
/// Longest delay added after each WAL fsync (fault runs only).
pub const FSYNC_DELAY_MS_MAX: u64 = 10_000;
/// Most nodes in a cluster.
pub const NODES_MAX: usize = 15;

const _: () = assert!(HEARTBEAT_TICKS_CONFIG_MIN < ELECTION_TICKS_CONFIG_MIN);
const _: () = assert!(WAL_SEGMENT_BYTES_MIN <= WAL_SEGMENT_BYTES_MAX);

/// One thing wrong with a node's configuration; the message names the setting (as the cluster
/// file spells it), the value and the range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number outside its range.
    #[error("{setting} = {value} is out of range: it must lie in {min}..={max} ({unit})")]
    OutOfRange {
        /// The setting.
        setting: &'static str,
        /// The value given.
        value: u64,
        /// The least allowed.
        min: u64,
        /// The most allowed.
        max: u64,
        /// Its unit.
        unit: &'static str,
    },
    /// Heartbeats must come more often than the election timeout.
    #[error("heartbeat_ticks = {heartbeat} must be below election_ticks_min = {election}")]
    HeartbeatNotBelowElection {
        /// Ticks between heartbeats.
        heartbeat: u32,
        /// The minimum election timeout.
        election: u32,
    },
    /// No nodes are listed.
    #[error("no nodes are listed")]
    NoNodes,
    /// More nodes than a cluster may have.
    #[error("{count} nodes are listed, over the most of {NODES_MAX}")]
    TooManyNodes {
        /// Nodes listed.
        count: usize,
    },
    /// A node id is 0.
    #[error("node id 0 is not allowed (ids are 1 to 255)")]
    ZeroId,
    /// Two nodes share an id.
    #[error("node id {0} is listed twice")]
    DuplicateId(NodeId),
    /// Two listeners share an address.
    #[error("address {address} is used twice: {first} and {second}")]
    DuplicateAddress {
        /// The address.
        address: Address,
        /// The first use.
        first: String,
        /// The second use.
        second: String,
    },
    /// This node is not among the nodes.
    #[error("node {0} is not listed among the nodes")]
    NotListed(NodeId),
    /// No data directory is named.
    #[error("data_dir is empty")]
    EmptyDataDir,
    /// The WAL on the node's thread would sleep that thread after every fsync.
    #[error(
        "wal_io = \"inline\" with fsync_delay_ms = {delay_ms}: the delay would hold the node's \
         own thread after every fsync; use wal_io = \"thread\" (or \"auto\") with a delay"
    )]
    InlineWalDelayed {
        /// The delay configured, in milliseconds.
        delay_ms: u64,
    },
    /// `capacity_bytes` cannot hold the handler's empty tables.
    #[error("capacity_bytes: {0}")]
    CapacityBelowTables(#[from] crate::state::CapacityTooSmall),
}

/// A number and its range, for [`range`].
struct Bounds {
    setting: &'static str,
    value: u64,
    min: u64,
    max: u64,
    unit: &'static str,
}

impl Bounds {
    fn of(setting: &'static str, value: u64, min: u64, max: u64, unit: &'static str) -> Self {
        Bounds {
            setting,
            value,
            min,
            max,
            unit,
        }
    }
}

fn range(bounds: Bounds, errors: &mut Vec<ConfigError>) {
    if !(bounds.min..=bounds.max).contains(&bounds.value) {
        errors.push(ConfigError::OutOfRange {
            setting: bounds.setting,
            value: bounds.value,
            min: bounds.min,
            max: bounds.max,
            unit: bounds.unit,
        });
    }
}

impl NodeConfig {
    /// Every error in this configuration (none when it is valid).
    pub fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        for bounds in self.bounds() {
            range(bounds, &mut errors);
        }
        if self.heartbeat_ticks >= self.election_ticks_min {
            errors.push(ConfigError::HeartbeatNotBelowElection {
                heartbeat: self.heartbeat_ticks,
                election: self.election_ticks_min,
            });
        }
        errors.extend(check_nodes(&self.nodes));
        errors.extend(bind_collisions(self));
        if !self.nodes.iter().any(|n| n.id == self.id) {
            errors.push(ConfigError::NotListed(self.id));
        }
        if self.data_dir.as_os_str().is_empty() {
            errors.push(ConfigError::EmptyDataDir);
        }
        if self.wal_io == super::WalIo::Inline && self.fsync_delay_ms > 0 {
            errors.push(ConfigError::InlineWalDelayed {
                delay_ms: self.fsync_delay_ms,
            });
        }
        errors
    }

    /// Every setting's range: the execution and consensus settings, then storage's.
    fn bounds(&self) -> Vec<Bounds> {
        let mut all = self.execution_bounds();
        all.extend(self.storage_bounds());
        all
    }

    fn execution_bounds(&self) -> Vec<Bounds> {
        vec![
            Bounds::of(
                "entry_commands_max",
                u64::from(self.entry_commands_max),
                u64::from(ENTRY_COMMANDS_CONFIG_MIN),
                u64::from(ENTRY_COMMANDS_MAX),
                "commands",
            ),
            Bounds::of(
                "capacity_bytes",
                self.capacity_bytes,
                CAPACITY_BYTES_MIN,
                CAPACITY_BYTES_MAX,
                "bytes",
            ),
            Bounds::of(
                "sessions_max",
                self.sessions_max as u64,
                SESSIONS_MAX_MIN as u64,
                SESSIONS_MAX_LIMIT as u64,
                "sessions",
            ),
            Bounds::of(
                "session_retention_s",
                self.session_retention_s,
                SESSION_RETENTION_S_MIN,
                SESSION_RETENTION_S_MAX,
                "seconds",
            ),
            Bounds::of(
                "tick_ms",
                self.tick_ms,
                TICK_MS_MIN,
                TICK_MS_MAX,
                "milliseconds",
            ),
            Bounds::of(
                "election_ticks_min",
                u64::from(self.election_ticks_min),
                u64::from(ELECTION_TICKS_CONFIG_MIN),
                u64::from(ELECTION_TICKS_CONFIG_MAX),
                "ticks",
            ),
            Bounds::of(
                "heartbeat_ticks",
                u64::from(self.heartbeat_ticks),
                u64::from(HEARTBEAT_TICKS_CONFIG_MIN),
                u64::from(ELECTION_TICKS_CONFIG_MAX),
                "ticks",
            ),
            Bounds::of(
                "pipeline_entries_max",
                self.pipeline_entries_max,
                PIPELINE_ENTRIES_CONFIG_MIN,
                PIPELINE_ENTRIES_CONFIG_MAX,
                "entries",
            ),
        ]
    }

    fn storage_bounds(&self) -> Vec<Bounds> {
        vec![
            Bounds::of(
                "snapshot_every",
                self.snapshot_every,
                0,
                SNAPSHOT_EVERY_ENTRIES_MAX,
                "entries",
            ),
            Bounds::of(
                "snapshot_retain_ms",
                self.snapshot_retain_ms,
                0,
                SNAPSHOT_RETAIN_MS_MAX,
                "milliseconds",
            ),
            Bounds::of(
                "lagging_entries_max",
                self.lagging_entries_max,
                0,
                LAGGING_ENTRIES_CONFIG_MAX,
                "entries",
            ),
            Bounds::of(
                "changes_retain_entries",
                self.changes_retain_entries,
                0,
                CHANGES_RETAIN_ENTRIES_MAX,
                "entries",
            ),
            Bounds::of(
                "wal_segment_bytes",
                self.wal_segment_bytes,
                WAL_SEGMENT_BYTES_MIN,
                WAL_SEGMENT_BYTES_MAX,
                "bytes",
            ),
            Bounds::of(
                "fsync_delay_ms",
                self.fsync_delay_ms,
                0,
                FSYNC_DELAY_MS_MAX,
                "milliseconds",
            ),
        ]
    }
}

/// What is wrong with a list of nodes: none, too many, a zero or repeated id, an address used
/// twice (by two nodes, or as one node's peer and client address).
pub fn check_nodes(nodes: &[NodeAddress]) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    if nodes.is_empty() {
        errors.push(ConfigError::NoNodes);
    }
    if nodes.len() > NODES_MAX {
        errors.push(ConfigError::TooManyNodes { count: nodes.len() });
    }
    if nodes.iter().any(|n| n.id.0 == 0) {
        errors.push(ConfigError::ZeroId);
    }
    let mut seen: Vec<NodeId> = Vec::new();
    let mut listeners: Vec<(Address, String)> = Vec::new();
    for node in nodes {
        if seen.contains(&node.id) && !errors.contains(&ConfigError::DuplicateId(node.id)) {
            errors.push(ConfigError::DuplicateId(node.id));
        }
        seen.push(node.id);
        let uses = [
            (
                node.peer_address.clone(),
                format!("node {}'s peer_address", node.id),
            ),
            (
                node.client_address.clone(),
                format!("node {}'s client_address", node.id),
            ),
        ];
        for (address, role) in uses {
            if let Some((_, first)) = listeners.iter().find(|(a, _)| same_address(a, &address)) {
                errors.push(ConfigError::DuplicateAddress {
                    address: address.clone(),
                    first: first.clone(),
                    second: role.clone(),
                });
            }
            listeners.push((address, role));
        }
    }
    errors
}

/// True when two addresses are one listener for certain: numeric ones as [`same_listener`]
/// says, names when they are written alike (case aside) with the same port. A name and a
/// number, or two names, that resolve alike are not caught here: the second node to bind
/// finds the address taken.
fn same_address(a: &Address, b: &Address) -> bool {
    match (a.socket_addr(), b.socket_addr()) {
        (Some(a), Some(b)) => same_listener(a, b),
        _ => a.port() == b.port() && a.host().eq_ignore_ascii_case(b.host()),
    }
}

/// True when two listening addresses would collide: the same port on the same address, or on
/// any address and a wildcard.
fn same_listener(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The listeners this node is given bind addresses for, where two of them collide.
pub(crate) fn bind_collisions(config: &NodeConfig) -> Vec<ConfigError> {
    let given = [
        (config.peer_bind_address, "peer_bind_address"),
        (config.client_bind_address, "client_bind_address"),
        (config.metrics_address, "metrics_address"),
    ];
    let given: Vec<(SocketAddr, &str)> = given
        .into_iter()
        .filter_map(|(address, key)| address.map(|a| (a, key)))
        .collect();
    let mut errors = Vec::new();
    for (n, (a, first)) in given.iter().enumerate() {
        for (b, second) in &given[n + 1..] {
            if same_listener(*a, *b) {
                errors.push(ConfigError::DuplicateAddress {
                    address: Address::from(*b),
                    first: format!("node {}'s {first}", config.id),
                    second: format!("node {}'s {second}", config.id),
                });
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn nodes() -> Vec<NodeAddress> {
        (1..=3)
            .map(|i| NodeAddress {
                id: NodeId(i),
                peer_address: format!("127.0.0.1:{}", 7000 + u16::from(i))
                    .parse()
                    .unwrap(),
                client_address: format!("127.0.0.1:{}", 8000 + u16::from(i))
                    .parse()
                    .unwrap(),
            })
            .collect()
    }

    fn config() -> NodeConfig {
        let key = net::auth::Key::peer(b"sixteen bytes at least").unwrap();
        NodeConfig::new(NodeId(1), nodes(), PathBuf::from("/tmp/n1"), key)
    }

    /// Proves the defaults are valid and every bad value is reported, all at once.
    #[test]
    fn every_error_is_reported() {
        assert_eq!(config().validate(), Vec::new());
        let mut bad = config();
        bad.entry_commands_max = 5_000;
        bad.tick_ms = 0;
        bad.capacity_bytes = 1_000;
        bad.heartbeat_ticks = bad.election_ticks_min;
        bad.id = NodeId(4);
        bad.wal_io = crate::node::WalIo::Inline;
        bad.fsync_delay_ms = 5;
        let errors = bad.validate();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 6, "{text:#?}");
        assert!(
            text.iter()
                .any(|t| t.contains("wal_io = \"inline\" with fsync_delay_ms = 5"))
        );
        assert!(
            text[0].contains("entry_commands_max = 5000 is out of range: it must lie in 16..=1024")
        );
        assert!(text.iter().any(|t| t.contains("tick_ms = 0")));
        assert!(text.iter().any(|t| t.contains("capacity_bytes = 1000")));
        assert!(
            text.iter()
                .any(|t| t.contains("must be below election_ticks_min"))
        );
        assert!(text.iter().any(|t| t.contains("node 4 is not listed")));
    }

    /// Proves the session settings' ranges: a million sessions and a retention from a second to
    /// 30 days pass; one more session, no retention or a retention in milliseconds by mistake
    /// is refused.
    #[test]
    fn session_limits_are_checked() {
        let mut config = config();
        config.sessions_max = 1 << 20;
        config.session_retention_s = SESSION_RETENTION_S_MIN;
        assert_eq!(config.validate(), Vec::new());
        config.session_retention_s = SESSION_RETENTION_S_MAX;
        assert_eq!(config.validate(), Vec::new());
        config.sessions_max = (1 << 20) + 1;
        config.session_retention_s = 0;
        let text: Vec<String> = config.validate().iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 2, "{text:#?}");
        assert!(text[0].contains("sessions_max = 1048577 is out of range"));
        assert!(
            text[1]
                .contains("session_retention_s = 0 is out of range: it must lie in 60..=2592000")
        );
        config.sessions_max = 1 << 20;
        config.session_retention_s = 86_400_000;
        assert_eq!(config.validate().len(), 1);
    }

    /// Proves repeated ids and addresses are found, a wildcard colliding with a port too.
    #[test]
    fn duplicates_are_found() {
        let mut list = nodes();
        list[2].id = NodeId(2);
        list[1].client_address = list[0].peer_address.clone();
        list[2].peer_address = "0.0.0.0:8001".parse().unwrap();
        let text: Vec<String> = check_nodes(&list).iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:#?}");
        assert_eq!(
            text[0],
            "address 127.0.0.1:7001 is used twice: node 1's peer_address and node 2's client_address"
        );
        assert_eq!(text[1], "node id 2 is listed twice");
        assert!(text[2].contains("0.0.0.0:8001 is used twice: node 1's client_address"));
        let mut names = nodes();
        names[0].peer_address = "Node1.example:7001".parse().unwrap();
        names[1].peer_address = "node1.EXAMPLE:7001".parse().unwrap();
        names[2].peer_address = "node1.example:7003".parse().unwrap();
        let text: Vec<String> = check_nodes(&names)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "address node1.EXAMPLE:7001 is used twice: node 1's peer_address and node 2's peer_address"
            ]
        );
    }

    /// Proves a node's own bind and metrics addresses may not collide, and apart they pass.
    #[test]
    fn bind_addresses_are_checked() {
        let mut config = config();
        config.peer_bind_address = Some("0.0.0.0:7001".parse().unwrap());
        config.client_bind_address = Some("0.0.0.0:8001".parse().unwrap());
        config.metrics_address = Some("127.0.0.1:9001".parse().unwrap());
        assert_eq!(config.validate(), Vec::new());
        config.metrics_address = Some("127.0.0.1:8001".parse().unwrap());
        let text: Vec<String> = config.validate().iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "address 127.0.0.1:8001 is used twice: node 1's client_bind_address and node 1's metrics_address"
            ]
        );
    }
}
