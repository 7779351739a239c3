//! The cluster file: TOML naming the nodes (one `[[nodes]]` table each) and cluster settings.
//!
//! ```toml
//! cluster_id = 1                # optional; connections from another cluster are refused
//! secret = "at least 16 bytes of shared secret"   # required; nodes prove it to each other
//! client_secret = "..."          # optional; when set, clients must prove it to connect
//! entry_commands_max = 1024     # optional; 16 to 1,024 commands per entry
//! mode = "verify"               # optional; "verify" (default) or "performance"
//! snapshot_every = 64            # optional; entries between snapshot captures, 0 for none
//! snapshot_retain_ms = 1000      # optional; least time a snapshot is kept before replacing
//! lagging_entries_max = 4096     # optional; log a leader keeps behind its snapshot for followers
//! wal_segment_bytes = 8388608    # optional; bytes per WAL segment (4 KiB to 64 MiB)
//! fsync_delay_ms = 0             # optional; added after every WAL fsync (emulates a slow disk)
//! capacity_bytes = 2147483648    # optional; state capacity of every node (the same on all)
//! pipeline_entries_max = 8       # optional; entries a leader keeps in flight
//! tick_ms = 10                   # optional; milliseconds per tick of the consensus clock
//! election_ticks_min = 15        # optional; least election timeout, in ticks
//! heartbeat_ticks = 3            # optional; ticks between a leader's heartbeats
//! seed = 1                       # optional; seed of the election timeouts (mixed with the id)
//!
//! Every range is checked (`runner check --cluster FILE` prints them, or every error): the
//! limits are `engine::node::config`'s constants.
//!
//! [[nodes]]
//! id = 1
//! peer_address = "127.0.0.1:7001"
//! client_address = "127.0.0.1:8001"
//! data_dir = "/dev/shm/bank/node1"
//! ```

use anyhow::{Context, bail};
use engine::NodeId;
use engine::client::ClientConfig;
use engine::entry::ENTRY_COMMANDS_MAX;
use engine::node::config::ConfigError;
use engine::node::{NodeAddress, NodeConfig};
use net::auth::Key;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One `[[nodes]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// The node's id (1 to 255).
    pub id: u8,
    /// Address for the other nodes.
    pub peer_address: SocketAddr,
    /// Address for clients.
    pub client_address: SocketAddr,
    /// Where the node keeps its data.
    pub data_dir: PathBuf,
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The cluster's id.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: u64,
    /// The secret the nodes prove to each other in every handshake (at least
    /// [`net::auth::SECRET_BYTES_MIN`] bytes).
    pub secret: String,
    /// The secret clients must prove, when set.
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Most commands per entry.
    #[serde(default = "default_entry_commands_max")]
    pub entry_commands_max: u32,
    /// What the leader does with its simulations.
    #[serde(default = "default_mode")]
    pub mode: crate::commands::ModeArg,
    /// Entries between snapshot captures (0: no snapshots).
    #[serde(default = "default_snapshot_every")]
    pub snapshot_every: u64,
    /// Least milliseconds a persisted snapshot is kept.
    #[serde(default = "default_snapshot_retain_ms")]
    pub snapshot_retain_ms: u64,
    /// Entries behind a durable snapshot a leader keeps for a lagging follower.
    #[serde(default = "default_lagging_entries_max")]
    pub lagging_entries_max: u64,
    /// Bytes per WAL segment.
    #[serde(default = "default_wal_segment_bytes")]
    pub wal_segment_bytes: u64,
    /// Milliseconds added after every WAL fsync of the nodes reading this file (a slow disk,
    /// for fault runs).
    #[serde(default)]
    pub fsync_delay_ms: u64,
    /// State capacity of every node, in bytes.
    #[serde(default = "default_capacity_bytes")]
    pub capacity_bytes: u64,
    /// Entries a leader keeps in flight.
    #[serde(default = "default_pipeline_entries_max")]
    pub pipeline_entries_max: u64,
    /// Milliseconds per tick.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// Least election timeout, in ticks.
    #[serde(default = "default_election_ticks_min")]
    pub election_ticks_min: u32,
    /// Ticks between heartbeats.
    #[serde(default = "default_heartbeat_ticks")]
    pub heartbeat_ticks: u32,
    /// Seed of the election timeouts.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The nodes.
    pub nodes: Vec<NodeEntry>,
}

fn default_cluster_id() -> u64 {
    1
}

fn default_snapshot_every() -> u64 {
    engine::snapshot::SNAPSHOT_EVERY_DEFAULT
}

fn default_wal_segment_bytes() -> u64 {
    engine::wal::WAL_SEGMENT_BYTES_DEFAULT
}

fn default_lagging_entries_max() -> u64 {
    engine::core::LAGGING_FOLLOWER_ENTRIES_MAX
}

fn default_snapshot_retain_ms() -> u64 {
    engine::snapshot::SNAPSHOT_RETAIN_MS_DEFAULT
}

fn default_mode() -> crate::commands::ModeArg {
    crate::commands::ModeArg::Verify
}

fn default_entry_commands_max() -> u32 {
    ENTRY_COMMANDS_MAX
}

fn default_capacity_bytes() -> u64 {
    engine::state::STATE_BYTES_DEFAULT
}

fn default_pipeline_entries_max() -> u64 {
    engine::node::PIPELINE_ENTRIES_DEFAULT
}

fn default_tick_ms() -> u64 {
    engine::node::TICK_MS_DEFAULT
}

fn default_election_ticks_min() -> u32 {
    engine::core::ELECTION_TICKS_MIN_DEFAULT
}

fn default_heartbeat_ticks() -> u32 {
    engine::core::HEARTBEAT_TICKS_DEFAULT
}

fn default_seed() -> u64 {
    1
}

impl ClusterFile {
    /// Reads and checks a cluster file: every error found, one per line.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file = ClusterFile::parse(path)?;
        let errors = file.errors();
        if !errors.is_empty() {
            bail!(
                "{} is not valid:\n  {}",
                path.display(),
                errors.join("\n  ")
            );
        }
        Ok(file)
    }

    /// Reads a cluster file without checking its values.
    pub fn parse(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Every error in the file: the secrets, the list of nodes (ids, addresses, data
    /// directories) and each node's configuration as the engine checks it.
    pub fn errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if let Err(error) = Key::peer(self.secret.as_bytes()) {
            errors.push(format!("secret: {error}"));
        }
        if let Some(secret) = &self.client_secret
            && let Err(error) = Key::client(secret.as_bytes())
        {
            errors.push(format!("client_secret: {error}"));
        }
        let nodes = engine::node::config::check_nodes(&self.addresses());
        errors.extend(nodes.iter().map(ToString::to_string));
        errors.extend(self.duplicate_dirs());
        let Some(first) = self.nodes.first() else {
            return errors;
        };
        // The settings are the file's, the same for every node: one node's check covers them
        // (the list of nodes was checked above).
        if let Ok(config) = self.config_of(first) {
            let settings = config.validate().into_iter().filter(|e| !is_about_nodes(e));
            errors.extend(settings.map(|e| e.to_string()));
        }
        errors
    }

    /// Data directories named twice on one host (the same path, or one inside another). Nodes
    /// whose peer addresses differ are taken for different machines, where the same path is
    /// two directories.
    fn duplicate_dirs(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for (n, a) in self.nodes.iter().enumerate() {
            let host = |n: &NodeEntry| {
                let ip = n.peer_address.ip();
                (!ip.is_loopback()).then_some(ip)
            };
            // Every loopback address is this machine.
            let same_host = |b: &&NodeEntry| host(b) == host(a);
            for b in self.nodes[n + 1..].iter().filter(same_host) {
                let (da, db) = (normal(&a.data_dir), normal(&b.data_dir));
                if da.starts_with(&db) || db.starts_with(&da) {
                    errors.push(format!(
                        "data_dir {} of node {} and data_dir {} of node {} overlap: each node \
                         needs a directory of its own",
                        a.data_dir.display(),
                        a.id,
                        b.data_dir.display(),
                        b.id
                    ));
                }
            }
        }
        errors
    }

    /// Every node's addresses.
    pub fn addresses(&self) -> Vec<NodeAddress> {
        self.nodes
            .iter()
            .map(|n| NodeAddress {
                id: NodeId(n.id),
                peer_address: n.peer_address,
                client_address: n.client_address,
            })
            .collect()
    }

    /// The configuration of node `id`.
    pub fn node_config(&self, id: u8) -> anyhow::Result<NodeConfig> {
        let entry = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .with_context(|| format!("no node {id} in the cluster file"))?;
        self.config_of(entry)
    }

    fn config_of(&self, entry: &NodeEntry) -> anyhow::Result<NodeConfig> {
        let key = Key::peer(self.secret.as_bytes()).context("secret")?;
        let id = NodeId(entry.id);
        let mut config = NodeConfig::new(id, self.addresses(), entry.data_dir.clone(), key);
        config.cluster_id = self.cluster_id;
        config.client_key = self.client_key()?;
        config.entry_commands_max = self.entry_commands_max;
        config.mode = self.mode.into();
        config.snapshot_every = self.snapshot_every;
        config.snapshot_retain_ms = self.snapshot_retain_ms;
        config.lagging_entries_max = self.lagging_entries_max;
        config.wal_segment_bytes = self.wal_segment_bytes;
        config.fsync_delay_ms = self.fsync_delay_ms;
        config.capacity_bytes = self.capacity_bytes;
        config.pipeline_entries_max = self.pipeline_entries_max;
        config.tick_ms = self.tick_ms;
        config.election_ticks_min = self.election_ticks_min;
        config.heartbeat_ticks = self.heartbeat_ticks;
        config.seed = self.seed;
        Ok(config)
    }

    fn client_key(&self) -> anyhow::Result<Option<Key>> {
        self.client_secret
            .as_ref()
            .map(|s| Key::client(s.as_bytes()).context("client_secret"))
            .transpose()
    }

    /// How clients reach the cluster.
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = ClientConfig::new(
            self.cluster_id,
            self.nodes.iter().map(|n| n.client_address).collect(),
        );
        config.key = self.client_key()?;
        Ok(config)
    }
}

/// True for the errors about the list of nodes, which [`ClusterFile::errors`] reports once.
fn is_about_nodes(error: &ConfigError) -> bool {
    match error {
        ConfigError::NoNodes
        | ConfigError::TooManyNodes { .. }
        | ConfigError::ZeroId
        | ConfigError::DuplicateId(_)
        | ConfigError::DuplicateAddress { .. }
        | ConfigError::NotListed(_) => true,
        ConfigError::OutOfRange { .. }
        | ConfigError::HeartbeatNotBelowElection { .. }
        | ConfigError::EmptyDataDir => false,
    }
}

/// A path with `.` components dropped and `..` applied, for comparing data directories that
/// may not exist yet.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Prefix(_)
            | std::path::Component::RootDir
            | std::path::Component::Normal(_) => out.push(part),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a well-formed file parses and bad ones are refused with a reason.
    #[test]
    fn parses_and_checks() {
        let good = r#"
            secret = "sixteen bytes at least"
            [[nodes]]
            id = 1
            peer_address = "127.0.0.1:7001"
            client_address = "127.0.0.1:8001"
            data_dir = "/tmp/n1"
            [[nodes]]
            id = 2
            peer_address = "127.0.0.1:7002"
            client_address = "127.0.0.1:8002"
            data_dir = "/tmp/n2"
        "#;
        let file: ClusterFile = toml::from_str(good).unwrap();
        assert_eq!(file.errors(), Vec::<String>::new());
        assert_eq!(
            file.node_config(2).unwrap().data_dir,
            PathBuf::from("/tmp/n2")
        );
        assert!(file.node_config(3).is_err());
        let duplicate = good.replace("id = 2", "id = 1");
        let errors = toml::from_str::<ClusterFile>(&duplicate).unwrap().errors();
        assert_eq!(errors, vec!["node id 1 is listed twice"]);
        let address = good.replace("127.0.0.1:8002", "127.0.0.1:7001");
        let errors = toml::from_str::<ClusterFile>(&address).unwrap().errors();
        assert_eq!(
            errors,
            vec![
                "address 127.0.0.1:7001 is used twice: node 1's peer_address and node 2's client_address"
            ]
        );
        let dirs = good.replace("/tmp/n2", "/tmp/./n1/");
        let errors = toml::from_str::<ClusterFile>(&dirs).unwrap().errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("overlap"), "{errors:?}");
        let hosts = dirs.replace("127.0.0.1:7002", "10.0.0.2:7002");
        let errors = toml::from_str::<ClusterFile>(&hosts).unwrap().errors();
        assert_eq!(errors, Vec::<String>::new(), "one path on two machines");
        let ranges = format!("tick_ms = 0\ncapacity_bytes = 10\n{good}");
        let errors = toml::from_str::<ClusterFile>(&ranges).unwrap().errors();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].contains("capacity_bytes = 10 is out of range"),
            "{errors:?}"
        );
        let performance = format!("mode = \"performance\"\n{good}");
        let file: ClusterFile = toml::from_str(&performance).unwrap();
        assert_eq!(file.node_config(1).unwrap().mode, engine::Mode::Performance);
        assert!(toml::from_str::<ClusterFile>(&format!("mode = \"fast\"\n{good}")).is_err());
        let unknown = format!("colour = 3\n{good}");
        assert!(toml::from_str::<ClusterFile>(&unknown).is_err());
        let short = good.replace("sixteen bytes at least", "short");
        let errors = toml::from_str::<ClusterFile>(&short).unwrap().errors();
        assert!(errors[0].contains("at least 16 bytes"), "{errors:?}");
        let without = good.replace("secret = \"sixteen bytes at least\"", "");
        assert!(toml::from_str::<ClusterFile>(&without).is_err());
        let clients = format!("client_secret = \"clients prove this one\"\n{good}");
        let file: ClusterFile = toml::from_str(&clients).unwrap();
        assert!(file.node_config(1).unwrap().client_key.is_some());
        assert!(file.client_config().unwrap().key.is_some());
    }
}
