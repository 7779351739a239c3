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
//! wal_segment_bytes = 67108864   # optional; bytes per WAL segment
//! fsync_delay_ms = 0             # optional; added after every WAL fsync (emulates a slow disk)
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
use engine::entry::{ENTRY_COMMANDS_CONFIG_MIN, ENTRY_COMMANDS_MAX};
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
    engine::wal::WAL_SEGMENT_BYTES_MAX
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

impl ClusterFile {
    /// Reads and checks a cluster file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: ClusterFile =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        file.check()
            .with_context(|| format!("checking {}", path.display()))?;
        Ok(file)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.nodes.is_empty() {
            bail!("no [[nodes]]");
        }
        let mut ids: Vec<u8> = self.nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.nodes.len() || ids.contains(&0) {
            bail!("node ids must be distinct and nonzero");
        }
        Key::peer(self.secret.as_bytes()).context("secret")?;
        if let Some(secret) = &self.client_secret {
            Key::client(secret.as_bytes()).context("client_secret")?;
        }
        let range = ENTRY_COMMANDS_CONFIG_MIN..=ENTRY_COMMANDS_MAX;
        if !range.contains(&self.entry_commands_max) {
            bail!("entry_commands_max must lie in {range:?}");
        }
        if self.wal_segment_bytes < engine::wal::WAL_SEGMENT_BYTES_MIN {
            bail!(
                "wal_segment_bytes must be at least {}",
                engine::wal::WAL_SEGMENT_BYTES_MIN
            );
        }
        Ok(())
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
        let key = Key::peer(self.secret.as_bytes()).context("secret")?;
        let mut config = NodeConfig::new(NodeId(id), self.addresses(), entry.data_dir.clone(), key);
        config.cluster_id = self.cluster_id;
        config.client_key = self.client_key()?;
        config.entry_commands_max = self.entry_commands_max;
        config.mode = self.mode.into();
        config.snapshot_every = self.snapshot_every;
        config.snapshot_retain_ms = self.snapshot_retain_ms;
        config.lagging_entries_max = self.lagging_entries_max;
        config.wal_segment_bytes = self.wal_segment_bytes;
        config.fsync_delay_ms = self.fsync_delay_ms;
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
        file.check().unwrap();
        assert_eq!(
            file.node_config(2).unwrap().data_dir,
            PathBuf::from("/tmp/n2")
        );
        assert!(file.node_config(3).is_err());
        let duplicate = good.replace("id = 2", "id = 1");
        assert!(
            toml::from_str::<ClusterFile>(&duplicate)
                .unwrap()
                .check()
                .is_err()
        );
        let performance = format!("mode = \"performance\"\n{good}");
        let file: ClusterFile = toml::from_str(&performance).unwrap();
        assert_eq!(file.node_config(1).unwrap().mode, engine::Mode::Performance);
        assert!(toml::from_str::<ClusterFile>(&format!("mode = \"fast\"\n{good}")).is_err());
        let unknown = format!("colour = 3\n{good}");
        assert!(toml::from_str::<ClusterFile>(&unknown).is_err());
        let short = good.replace("sixteen bytes at least", "short");
        let error = toml::from_str::<ClusterFile>(&short)
            .unwrap()
            .check()
            .unwrap_err();
        assert!(
            format!("{error:#}").contains("at least 16 bytes"),
            "{error:#}"
        );
        let without = good.replace("secret = \"sixteen bytes at least\"", "");
        assert!(toml::from_str::<ClusterFile>(&without).is_err());
        let clients = format!("client_secret = \"clients prove this one\"\n{good}");
        let file: ClusterFile = toml::from_str(&clients).unwrap();
        assert!(file.node_config(1).unwrap().client_key.is_some());
        assert!(file.client_config().unwrap().key.is_some());
    }
}
