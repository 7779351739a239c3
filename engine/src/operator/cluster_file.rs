//! The cluster file: TOML naming the nodes (one `[[nodes]]` table each) and cluster settings.
//! Read, checked and written here, by the nodes, the tools and the tests alike: a file is
//! never written by hand-formatting its text.
//!
//! ```toml
//! cluster_id = 1                # optional; connections from another cluster are refused
//! secret = "at least 16 bytes of shared secret"   # a node needs it; nodes prove it to each other
//! # secret_file = "/etc/bank/peer.secret"         # or: a file holding it (owner-only)
//! client_secret = "..."          # optional; when set, applications must prove it to connect
//! operator_secret = "..."        # optional; what operators prove (mode, member, upgrade,
//!                                # backup); without it, operators prove the peer secret
//! # client_secret_file, operator_secret_file: the same, in files of their own
//! # previous_secret, previous_client_secret, previous_operator_secret (and their _file
//! # keys): during a rotation, the old value, still accepted
//! tls_ca_file = "/etc/bank/ca.pem"   # optional; every link TLS, each node's certificate
//!                                    # signed by this CA
//! tls_require_client_cert = false    # optional; true: clients must present a certificate
//!                                    # the CA signed (else they may)
//! entry_commands_max = 1024     # optional; 16 to 1,024 commands per entry
//! mode = "verify"               # optional; "verify" (default) or "performance"
//! snapshot_every = 64            # optional; entries between snapshot captures, 0 for none
//! snapshot_retain_ms = 1000      # optional; least time a snapshot is kept before replacing
//! snapshot_deltas = false        # optional; true: a snapshot may be a delta over the last one
//! lagging_entries_max = 4096     # optional; log a leader keeps behind its snapshot for followers
//! changes_retain_entries = 0     # optional; entries the log keeps behind the last applied for
//!                                # the change stream at least (0: what recovery needs)
//! change_stream = true           # optional; false: no node keeps the commands' outcomes for
//!                                # the change stream (the journal's cost off the main job)
//! wal_segment_bytes = 8388608    # optional; bytes per WAL segment (4 KiB to 64 MiB)
//! fsync_delay_ms = 0             # optional; added after every WAL fsync (emulates a slow disk)
//! wal_io = "auto"                # optional; "auto" (default), "thread" or "inline": where the
//!                                # WAL's writes and fsyncs run (auto: the node's thread on tmpfs)
//! capacity_bytes = 2147483648    # optional; state capacity of every node (the same on all)
//! sessions_max = 4096             # optional; live client sessions kept (the same on all)
//! session_retention_s = 86400    # optional; seconds a client session is kept inactive, by the
//!                                # leaders' clocks in the log (the same on all)
//! pipeline_entries_max = 8       # optional; entries a leader keeps in flight
//! tick_ms = 10                   # optional; milliseconds per tick of the consensus clock
//! election_ticks_min = 15        # optional; least election timeout, in ticks
//! heartbeat_ticks = 3            # optional; ticks between a leader's heartbeats
//! seed = 1                       # optional; seed of the election timeouts (mixed with the id)
//!
//! Every range is checked (`runner check --cluster FILE` prints them, or every error): the
//! limits are [`crate::node::config`]'s constants.
//!
//! [[nodes]]
//! id = 1
//! peer_address = "node1.example:7001"     # host:port; a name, IPv4, or [IPv6]
//! client_address = "node1.example:8001"   # a name is looked up at every (re)connection
//! data_dir = "/dev/shm/bank/node1"
//! metrics_address = "127.0.0.1:9001"      # optional; Prometheus text at GET /metrics
//! peer_bind_address = "0.0.0.0:7001"      # optional; where to listen, when not peer_address
//! client_bind_address = "0.0.0.0:8001"    # optional; where to listen, when not client_address
//! tls_cert_file = "/etc/bank/node1.pem"    # with tls_ca_file: this node's certificate, naming
//! tls_key_file = "/etc/bank/node1.key"     # its hosts, and its key (owner-only)
//! ```
//!
//! A node listens at its bind addresses, or else at its own addresses looked up once at start
//! (the first address a name gives). Others reach it at `peer_address` and `client_address`,
//! looked up again at every connection, so a machine replaced behind the same name is found.
//! Client hosts need only the client file (`client-file`), which holds neither the peer nor the
//! operator secret; operator hosts the operator file (`client-file --operator`), which holds
//! neither the peer nor the client secret (`notes/decisions/access.md`).

use super::client_file::{ClientFile, ClientNode};
use super::secrets::{self, SecretError, SecretSource, SecretText};
use crate::address::Address;
use crate::apply::Mode;
use crate::client::{ClientConfig, OperatorConfig};
use crate::handshake::MisusedKeys;
use crate::ids::NodeId;
use crate::node::WalIo;
use crate::node::config::ConfigError;
use crate::node::{NodeAddress, NodeConfig};
use net::auth::{Credentials, Key, KeyRing, OperatorKey, SECRET_BYTES_MIN};
use net::message::Credential;
use net::tls::{Tls, TlsError, TlsFiles};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a cluster file could not be read, written or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterFileError {
    /// The file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML of this shape (a key unknown or missing, a value of the wrong
    /// type).
    #[error("parsing {}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with the line.
        message: String,
    },
    /// The file parses, but values are wrong: every error found, one per line.
    #[error("{} is not valid:\n  {}", path.display(), errors.join("\n  "))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every error, one per entry.
        errors: Vec<String>,
    },
    /// No node of this id is listed.
    #[error("no node {0} in the cluster file")]
    NoSuchNode(u8),
    /// A secret cannot be had (too short, unreadable, open to others, set twice).
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// One secret serves two roles.
    #[error(
        "{first} and {second} are the same secret: it serves two roles, so whoever holds one \
         role's file holds the other's power; give each role a secret of its own"
    )]
    SecretReused {
        /// One key.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
    /// The file sets no peer secret: an operator's copy, which cannot start a node.
    #[error(
        "the file sets neither secret nor secret_file: a node needs the peer secret (this may \
         be an operator's copy of the cluster file)"
    )]
    NoPeerSecret,
    /// TLS files that cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A node without its certificate or key in a cluster that speaks TLS.
    #[error("node {0}: tls_ca_file is set, so the node needs tls_cert_file and tls_key_file")]
    TlsIncomplete(u8),
    /// A certificate or key without the CA.
    #[error("tls_cert_file or tls_key_file is set without tls_ca_file")]
    TlsWithoutCa,
    /// The file holds neither an operator secret nor the peer secret.
    #[error(
        "the file holds no operator credential: set operator_secret (or operator_secret_file), \
         or use the cluster file, whose peer secret its holders may use as operators"
    )]
    NoOperatorCredential,
    /// A client file where a cluster file is needed: told apart by its keys (client
    /// addresses only, no peer address, data directory, peer or operator secret).
    #[error(
        "{} is an application's client file (the nodes' client addresses and the client secret \
         only), not a cluster file: mode, member, backup and upgrade need the operator file \
         (`client-file --operator --cluster CLUSTER_FILE --out operator.toml` writes it) or the \
         cluster file itself, and a node needs the cluster file",
        path.display()
    )]
    ClientFileGiven {
        /// The file.
        path: PathBuf,
    },
    /// An operator's file was asked of a cluster file that names no operator secret.
    #[error(
        "the cluster file sets no operator_secret: operators prove the peer secret, so an \
         operator host needs the cluster file itself. Set operator_secret (and restart the \
         nodes) to give operators a credential of their own"
    )]
    NoOperatorSecret,
}

/// The `mode` key: what a leader does with its simulations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeSetting {
    /// Execute again after commit and compare with the simulation.
    #[default]
    Verify,
    /// Reuse the leader's simulations after commit (see [`Mode::Performance`]).
    Performance,
}

impl From<ModeSetting> for Mode {
    fn from(mode: ModeSetting) -> Mode {
        match mode {
            ModeSetting::Verify => Mode::Verify,
            ModeSetting::Performance => Mode::Performance,
        }
    }
}

impl From<Mode> for ModeSetting {
    fn from(mode: Mode) -> ModeSetting {
        match mode {
            Mode::Verify => ModeSetting::Verify,
            Mode::Performance => ModeSetting::Performance,
        }
    }
}

/// One `[[nodes]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// The node's id (1 to 255).
    pub id: u8,
    /// Where the other nodes reach it: `host:port`, a name resolved at every connection.
    pub peer_address: Address,
    /// Where clients reach it.
    pub client_address: Address,
    /// Where the node keeps its data.
    pub data_dir: PathBuf,
    /// Where the node serves Prometheus metrics (`GET /metrics`), if anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_address: Option<SocketAddr>,
    /// Where the node listens for peers, when not at `peer_address` (e.g. `0.0.0.0:7001`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_bind_address: Option<SocketAddr>,
    /// Where the node listens for clients, when not at `client_address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_bind_address: Option<SocketAddr>,
    /// The node's certificate (PEM, signed by `tls_ca_file`, naming the hosts of its
    /// `peer_address` and `client_address`), when the cluster speaks TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of `tls_cert_file` (PEM, owner-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
}

impl NodeEntry {
    /// Node `id` reached at `peer_address` and `client_address` (listening there too), with
    /// its data in `data_dir` and no metrics.
    pub fn new(
        id: u8,
        peer_address: impl Into<Address>,
        client_address: impl Into<Address>,
        data_dir: impl Into<PathBuf>,
    ) -> Self {
        NodeEntry {
            id,
            peer_address: peer_address.into(),
            client_address: client_address.into(),
            data_dir: data_dir.into(),
            metrics_address: None,
            peer_bind_address: None,
            client_bind_address: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }

    /// The TLS files of this node, in a cluster whose CA is `ca`.
    pub fn tls_files(&self, ca: &Path) -> Result<TlsFiles, ClusterFileError> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Ok(TlsFiles {
                ca: ca.to_path_buf(),
                cert: Some(cert.clone()),
                key: Some(key.clone()),
                require_client_cert: false,
            }),
            (Some(_), None) | (None, Some(_)) | (None, None) => {
                Err(ClusterFileError::TlsIncomplete(self.id))
            }
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The cluster's id.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: u64,
    /// The secret the nodes prove to each other in every handshake (at least
    /// [`net::auth::SECRET_BYTES_MIN`] bytes). A node needs it (or `secret_file`); an
    /// operator's copy of the file leaves both out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretText>,
    /// A file holding the peer secret (owner-only), instead of `secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// During a rotation, the peer secret before `secret`: nodes accept both, and
    /// prove it to a node that refuses the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<SecretText>,
    /// A file holding `previous_secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_file: Option<PathBuf>,
    /// The secret applications must prove, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretText>,
    /// A file holding the client secret, instead of `client_secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<PathBuf>,
    /// During a rotation, the client secret before `client_secret`: nodes
    /// accept both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_client_secret: Option<SecretText>,
    /// A file holding `previous_client_secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_client_secret_file: Option<PathBuf>,
    /// The secret operators prove (mode, membership, upgrades, backups). Without
    /// it, operators prove a key derived from the peer secret: only the peer secret's
    /// holders are operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_secret: Option<SecretText>,
    /// A file holding the operator secret, instead of `operator_secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_secret_file: Option<PathBuf>,
    /// During a rotation, the operator secret before `operator_secret`:
    /// nodes accept both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_operator_secret: Option<SecretText>,
    /// A file holding `previous_operator_secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_operator_secret_file: Option<PathBuf>,
    /// The cluster's CA certificate (PEM): set, every connection is TLS and every node
    /// needs `tls_cert_file` and `tls_key_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// With TLS: clients must present a certificate the CA signed (without it a client may
    /// present one, and the secrets decide alone).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls_require_client_cert: bool,
    /// Most commands per entry.
    #[serde(default = "default_entry_commands_max")]
    pub entry_commands_max: u32,
    /// What the leader does with its simulations.
    #[serde(default)]
    pub mode: ModeSetting,
    /// Entries between snapshot captures (0: no snapshots).
    #[serde(default = "default_snapshot_every")]
    pub snapshot_every: u64,
    /// Least milliseconds a persisted snapshot is kept.
    #[serde(default = "default_snapshot_retain_ms")]
    pub snapshot_retain_ms: u64,
    /// Snapshots may be deltas over the last one (off by default: tracking the written slots
    /// costs the apply loop, `notes/decisions/snapshot-deltas.md`).
    #[serde(default)]
    pub snapshot_deltas: bool,
    /// Entries behind a durable snapshot a leader keeps for a lagging follower.
    #[serde(default = "default_lagging_entries_max")]
    pub lagging_entries_max: u64,
    /// Entries the log (and the change stream) keeps behind the last applied at least.
    #[serde(default)]
    pub changes_retain_entries: u64,
    /// Followers keep each command that ran with its outcome for the change stream.
    #[serde(default = "default_change_stream")]
    pub change_stream: bool,
    /// Bytes per WAL segment.
    #[serde(default = "default_wal_segment_bytes")]
    pub wal_segment_bytes: u64,
    /// Milliseconds added after every WAL fsync of the nodes reading this file (a slow disk,
    /// for fault runs).
    #[serde(default)]
    pub fsync_delay_ms: u64,
    /// Where the WAL's writes and fsyncs run (left out of the file when `auto`, so that a
    /// build from before the setting reads the file too).
    #[serde(default, skip_serializing_if = "WalIo::is_auto")]
    pub wal_io: WalIo,
    /// State capacity of every node, in bytes.
    #[serde(default = "default_capacity_bytes")]
    pub capacity_bytes: u64,
    /// Live client sessions the state keeps (the same on all; each counts in the capacity).
    #[serde(default = "default_sessions_max")]
    pub sessions_max: usize,
    /// Seconds a client session is kept inactive before it expires (the same on all; left out
    /// of the file at the default, so that a build from before the setting reads the file too).
    #[serde(
        default = "default_session_retention_s",
        skip_serializing_if = "is_default_session_retention_s"
    )]
    pub session_retention_s: u64,
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

fn is_false(value: &bool) -> bool {
    !*value
}

fn default_cluster_id() -> u64 {
    1
}

fn default_snapshot_every() -> u64 {
    crate::snapshot::SNAPSHOT_EVERY_DEFAULT
}

fn default_change_stream() -> bool {
    true
}

fn default_wal_segment_bytes() -> u64 {
    crate::wal::WAL_SEGMENT_BYTES_DEFAULT
}

fn default_lagging_entries_max() -> u64 {
    crate::core::LAGGING_FOLLOWER_ENTRIES_MAX
}

fn default_snapshot_retain_ms() -> u64 {
    crate::snapshot::SNAPSHOT_RETAIN_MS_DEFAULT
}

fn default_entry_commands_max() -> u32 {
    crate::entry::ENTRY_COMMANDS_MAX
}

fn default_capacity_bytes() -> u64 {
    crate::state::STATE_BYTES_DEFAULT
}

fn default_sessions_max() -> usize {
    crate::apply::SESSIONS_MAX_DEFAULT
}

fn default_session_retention_s() -> u64 {
    crate::apply::SESSION_RETENTION_S_DEFAULT
}

fn is_default_session_retention_s(seconds: &u64) -> bool {
    *seconds == default_session_retention_s()
}

fn default_pipeline_entries_max() -> u64 {
    crate::node::PIPELINE_ENTRIES_DEFAULT
}

fn default_tick_ms() -> u64 {
    crate::node::TICK_MS_DEFAULT
}

fn default_election_ticks_min() -> u32 {
    crate::core::ELECTION_TICKS_MIN_DEFAULT
}

fn default_heartbeat_ticks() -> u32 {
    crate::core::HEARTBEAT_TICKS_DEFAULT
}

fn default_seed() -> u64 {
    1
}

impl ClusterFile {
    /// A file for `nodes` sharing `secret`, every setting at its default.
    pub fn new(secret: impl Into<SecretText>, nodes: Vec<NodeEntry>) -> Self {
        ClusterFile {
            cluster_id: default_cluster_id(),
            secret: Some(secret.into()),
            secret_file: None,
            previous_secret: None,
            previous_secret_file: None,
            client_secret: None,
            client_secret_file: None,
            previous_client_secret: None,
            previous_client_secret_file: None,
            operator_secret: None,
            operator_secret_file: None,
            previous_operator_secret: None,
            previous_operator_secret_file: None,
            tls_ca_file: None,
            tls_require_client_cert: false,
            entry_commands_max: default_entry_commands_max(),
            mode: ModeSetting::default(),
            snapshot_every: default_snapshot_every(),
            snapshot_retain_ms: default_snapshot_retain_ms(),
            snapshot_deltas: false,
            lagging_entries_max: default_lagging_entries_max(),
            changes_retain_entries: 0,
            change_stream: default_change_stream(),
            wal_segment_bytes: default_wal_segment_bytes(),
            fsync_delay_ms: 0,
            wal_io: WalIo::Auto,
            capacity_bytes: default_capacity_bytes(),
            sessions_max: default_sessions_max(),
            session_retention_s: default_session_retention_s(),
            pipeline_entries_max: default_pipeline_entries_max(),
            tick_ms: default_tick_ms(),
            election_ticks_min: default_election_ticks_min(),
            heartbeat_ticks: default_heartbeat_ticks(),
            seed: default_seed(),
            nodes,
        }
    }

    /// Reads and checks a cluster file: every error found, one per line.
    pub fn read(path: &Path) -> Result<Self, ClusterFileError> {
        let file = ClusterFile::parse(path)?;
        let errors = file.errors();
        if !errors.is_empty() {
            return Err(ClusterFileError::Invalid {
                path: path.to_path_buf(),
                errors,
            });
        }
        Ok(file)
    }

    /// Reads a cluster file without checking its values.
    pub fn parse(path: &Path) -> Result<Self, ClusterFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClusterFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        ClusterFile::from_toml(&text).map_err(|error| {
            let path = path.to_path_buf();
            match is_client_file(&text) {
                true => ClusterFileError::ClientFileGiven { path },
                false => ClusterFileError::Parse {
                    path,
                    message: error.to_string(),
                },
            }
        })
    }

    /// Parses the text of a cluster file without checking its values; the error is the
    /// parser's, with the line.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// The file's text: every key, in the order this type declares them.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a cluster file is plain data")
    }

    /// Writes the file to `path` durably and owner-only (it holds secrets), replacing what
    /// was there.
    pub fn write(&self, path: &Path) -> Result<(), ClusterFileError> {
        crate::storage::files::write_durably(path, self.to_toml().as_bytes()).map_err(|error| {
            ClusterFileError::Write {
                path: path.to_path_buf(),
                source: error.source,
            }
        })
    }

    /// Writes the file to `path` as [`ClusterFile::write`] does, but refuses to replace a file
    /// there unless `force` (the check and the write are one step).
    pub fn write_to(&self, path: &Path, force: bool) -> Result<(), ClusterFileError> {
        if force {
            return self.write(path);
        }
        crate::storage::files::write_new(path, self.to_toml().as_bytes()).map_err(|error| {
            ClusterFileError::Write {
                path: path.to_path_buf(),
                source: error.source,
            }
        })
    }

    /// Every error in the file: the secrets, the list of nodes (ids, addresses, data
    /// directories) and each node's configuration as the engine checks it.
    pub fn errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        let secrets = [
            self.peer_ring().err().map(|e| e.to_string()),
            self.client_ring().err().map(|e| e.to_string()),
            self.operator_keys().err().map(|e| e.to_string()),
            self.distinct_secrets().err().map(|e| e.to_string()),
        ];
        errors.extend(secrets.into_iter().flatten());
        // Each host holds only its own node's key: the files are read where they are used
        // (`node_config`, `check`), the keys' presence checked here.
        for node in &self.nodes {
            let tls = match &self.tls_ca_file {
                Some(ca) => node.tls_files(ca).err(),
                None if node.tls_cert_file.is_some() || node.tls_key_file.is_some() => {
                    Some(ClusterFileError::TlsWithoutCa)
                }
                None => None,
            };
            errors.extend(tls.map(|e| e.to_string()));
        }
        let nodes = crate::node::config::check_nodes(&self.addresses());
        errors.extend(nodes.iter().map(ToString::to_string));
        errors.extend(self.duplicate_dirs());
        let Some(first) = self.nodes.first() else {
            return errors;
        };
        // The settings are the file's, the same for every node: one node's check covers them
        // (the list of nodes was checked above). The checks read no key: a stand-in serves
        // for a file without the peer secret.
        let stand_in =
            || Credentials::of_peer_key(Key::peer(&[0; SECRET_BYTES_MIN]).expect("long"));
        let config = self.config_of(first, stand_in());
        let settings = config.validate().into_iter().filter(|e| !is_about_nodes(e));
        errors.extend(settings.map(|e| e.to_string()));
        for node in &self.nodes {
            let config = self.config_of(node, stand_in());
            let collisions = crate::node::config::bind_collisions(&config);
            errors.extend(collisions.iter().map(ToString::to_string));
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
                let address = &n.peer_address;
                (!address.is_loopback()).then(|| address.host().to_ascii_lowercase())
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
                peer_address: n.peer_address.clone(),
                client_address: n.client_address.clone(),
            })
            .collect()
    }

    /// The configuration of node `id`.
    pub fn node_config(&self, id: u8) -> Result<NodeConfig, ClusterFileError> {
        let entry = self
            .nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or(ClusterFileError::NoSuchNode(id))?;
        let mut config = self.config_of(entry, self.credentials()?);
        config.misused_keys = self.misused_keys();
        config.tls = self.node_tls(entry)?;
        Ok(config)
    }

    /// The client and peer secrets (current and previous) made into operator keys, each with
    /// whose secret it is: what a node recognizes and refuses by name (an operator's file
    /// whose operator secret is the client secret; a copy of the cluster file from before it
    /// set an operator secret). The peer secret's own operator key is left out where the file
    /// sets no operator secret: it is the operator key then.
    fn misused_keys(&self) -> MisusedKeys {
        let texts = |role: &'static str| {
            let sources = self.all_secrets().into_iter();
            let texts = sources.filter(move |(r, _)| *r == role);
            texts.filter_map(|(_, source)| source.read().ok().flatten())
        };
        let mut keys = Vec::new();
        for secret in texts("client") {
            let made = operator_keys_of(&secret, true);
            keys.extend(made.into_iter().map(|key| (key, Credential::Application)));
        }
        for secret in texts("peer") {
            let made = operator_keys_of(&secret, self.has_operator_secret());
            keys.extend(made.into_iter().map(|key| (key, Credential::Peer)));
        }
        keys
    }

    /// Node `entry`'s TLS, when the cluster speaks it.
    fn node_tls(&self, entry: &NodeEntry) -> Result<Option<Tls>, ClusterFileError> {
        match &self.tls_ca_file {
            Some(ca) => {
                let mut files = entry.tls_files(ca)?;
                files.require_client_cert = self.tls_require_client_cert;
                Ok(Some(Tls::load(&files)?))
            }
            None if entry.tls_cert_file.is_some() || entry.tls_key_file.is_some() => {
                Err(ClusterFileError::TlsWithoutCa)
            }
            None => Ok(None),
        }
    }

    /// TLS for a process that dials the nodes and presents no certificate (an operator).
    fn dialer_tls(&self) -> Result<Option<Tls>, ClusterFileError> {
        let Some(ca) = &self.tls_ca_file else {
            return Ok(None);
        };
        let files = TlsFiles {
            ca: ca.clone(),
            ..TlsFiles::default()
        };
        Ok(Some(Tls::load(&files)?))
    }

    /// Node `entry`'s configuration with `credentials`.
    fn config_of(&self, entry: &NodeEntry, credentials: Credentials) -> NodeConfig {
        let id = NodeId(entry.id);
        let key = credentials.peer.current.clone();
        let mut config = NodeConfig::new(id, self.addresses(), entry.data_dir.clone(), key);
        config.credentials = credentials;
        config.cluster_id = self.cluster_id;
        config.entry_commands_max = self.entry_commands_max;
        config.mode = self.mode.into();
        config.snapshot_every = self.snapshot_every;
        config.snapshot_retain_ms = self.snapshot_retain_ms;
        config.snapshot_deltas = self.snapshot_deltas;
        config.lagging_entries_max = self.lagging_entries_max;
        config.changes_retain_entries = self.changes_retain_entries;
        config.change_stream = self.change_stream;
        config.wal_segment_bytes = self.wal_segment_bytes;
        config.fsync_delay_ms = self.fsync_delay_ms;
        config.wal_io = self.wal_io;
        config.capacity_bytes = self.capacity_bytes;
        config.sessions_max = self.sessions_max;
        config.session_retention_s = self.session_retention_s;
        config.pipeline_entries_max = self.pipeline_entries_max;
        config.tick_ms = self.tick_ms;
        config.election_ticks_min = self.election_ticks_min;
        config.heartbeat_ticks = self.heartbeat_ticks;
        config.seed = self.seed;
        config.metrics_address = entry.metrics_address;
        config.peer_bind_address = entry.peer_bind_address;
        config.client_bind_address = entry.client_bind_address;
        config
    }

    /// The keys of the peer secret, when the file sets one.
    pub fn peer_ring(&self) -> Result<Option<KeyRing>, SecretError> {
        secrets::ring(
            source("secret", &self.secret, &self.secret_file),
            source(
                "previous_secret",
                &self.previous_secret,
                &self.previous_secret_file,
            ),
            Key::peer,
        )
    }

    /// The keys of the client secret, when the file sets one.
    pub fn client_ring(&self) -> Result<Option<KeyRing>, SecretError> {
        secrets::ring(
            source(
                "client_secret",
                &self.client_secret,
                &self.client_secret_file,
            ),
            source(
                "previous_client_secret",
                &self.previous_client_secret,
                &self.previous_client_secret_file,
            ),
            Key::client,
        )
    }

    /// The keys of the operator secret, when the file sets one.
    fn operator_keys(&self) -> Result<Option<OperatorKeys>, SecretError> {
        secrets::keys(
            source(
                "operator_secret",
                &self.operator_secret,
                &self.operator_secret_file,
            ),
            source(
                "previous_operator_secret",
                &self.previous_operator_secret,
                &self.previous_operator_secret_file,
            ),
            Key::operator,
        )
    }

    /// What operators prove: the operator secret's keys, or else the peer secret's.
    fn operator_credential(&self) -> Result<OperatorKeys, ClusterFileError> {
        if let Some(keys) = self.operator_keys()? {
            return Ok(keys);
        }
        let peer = self
            .peer_ring()?
            .ok_or(ClusterFileError::NoOperatorCredential)?;
        let previous = peer.previous.as_ref().map(OperatorKey::of_peer_key);
        Ok((OperatorKey::of_peer_key(&peer.current), previous))
    }

    /// Every key a node of this cluster accepts; an error when the file sets no peer secret
    /// (an operator's copy cannot start a node).
    pub fn credentials(&self) -> Result<Credentials, ClusterFileError> {
        self.distinct_secrets()?;
        let peer = self.peer_ring()?.ok_or(ClusterFileError::NoPeerSecret)?;
        let (operator, previous) = self.operator_credential()?;
        Ok(Credentials {
            peer,
            client: self.client_ring()?,
            operator: KeyRing {
                current: operator.key().clone(),
                previous: previous.map(|key| key.key().clone()),
            },
        })
    }

    /// How operators reach the cluster: its nodes' client addresses and the operator key (the
    /// previous one too during a rotation).
    pub fn operator_config(&self) -> Result<OperatorConfig, ClusterFileError> {
        let (key, previous_key) = self.operator_credential()?;
        let addresses = self.nodes.iter().map(|n| n.client_address.clone());
        let mut config = OperatorConfig::new(self.cluster_id, addresses, key);
        config.previous_key = previous_key;
        config.tls = self.dialer_tls()?;
        Ok(config)
    }

    /// Every secret the file sets, by role and key.
    fn all_secrets(&self) -> [(&'static str, SecretSource<'_>); 6] {
        [
            ("peer", source("secret", &self.secret, &self.secret_file)),
            (
                "peer",
                source(
                    "previous_secret",
                    &self.previous_secret,
                    &self.previous_secret_file,
                ),
            ),
            (
                "client",
                source(
                    "client_secret",
                    &self.client_secret,
                    &self.client_secret_file,
                ),
            ),
            (
                "client",
                source(
                    "previous_client_secret",
                    &self.previous_client_secret,
                    &self.previous_client_secret_file,
                ),
            ),
            (
                "operator",
                source(
                    "operator_secret",
                    &self.operator_secret,
                    &self.operator_secret_file,
                ),
            ),
            (
                "operator",
                source(
                    "previous_operator_secret",
                    &self.previous_operator_secret,
                    &self.previous_operator_secret_file,
                ),
            ),
        ]
    }

    /// An error when one secret serves two roles: the client file carries the client
    /// secret's text and the operator file the operator secret's, so a secret shared with
    /// another role would hand that role to whoever holds the file.
    fn distinct_secrets(&self) -> Result<(), ClusterFileError> {
        let mut read = Vec::new();
        for (role, source) in self.all_secrets() {
            // An unreadable secret is reported where it is used.
            if let Ok(Some(secret)) = source.read() {
                read.push((role, source.field, secret));
            }
        }
        for (n, (role, field, secret)) in read.iter().enumerate() {
            let other = read[n + 1..]
                .iter()
                .find(|(r, _, s)| r != role && s == secret);
            if let Some((_, other, _)) = other {
                return Err(ClusterFileError::SecretReused {
                    first: field,
                    second: other,
                });
            }
        }
        Ok(())
    }

    /// True when the file holds any secret inline (rather than in a file of its own).
    pub fn has_inline_secret(&self) -> bool {
        [
            &self.secret,
            &self.previous_secret,
            &self.client_secret,
            &self.previous_client_secret,
            &self.operator_secret,
            &self.previous_operator_secret,
        ]
        .iter()
        .any(|secret| secret.is_some())
    }

    /// True when the file names an operator secret of its own.
    pub fn has_operator_secret(&self) -> bool {
        self.operator_secret.is_some() || self.operator_secret_file.is_some()
    }

    /// How clients reach the cluster.
    pub fn client_config(&self) -> Result<ClientConfig, ClusterFileError> {
        self.client_file()?.client_config()
    }

    /// What a client host needs, and nothing more: the cluster's id, the client addresses
    /// and the client secret, read out of its file if it is in one (never the peer or the
    /// operator secret).
    pub fn client_file(&self) -> Result<ClientFile, ClusterFileError> {
        let client = source(
            "client_secret",
            &self.client_secret,
            &self.client_secret_file,
        );
        Ok(ClientFile {
            cluster_id: self.cluster_id,
            client_secret: client.read_text()?,
            client_secret_file: None,
            tls_ca_file: self.tls_ca_file.clone(),
            tls_cert_file: None,
            tls_key_file: None,
            nodes: self
                .nodes
                .iter()
                .map(|n| ClientNode {
                    id: n.id,
                    client_address: n.client_address.clone(),
                })
                .collect(),
            operator_key: None,
        })
    }

    /// The copy of this file an operator host needs: every setting and node, the operator
    /// secret (read out of its file if it is in one), and neither the peer nor the client
    /// secret. An error when the file names no operator secret of its own.
    pub fn operator_file(&self) -> Result<ClusterFile, ClusterFileError> {
        if !self.has_operator_secret() {
            return Err(ClusterFileError::NoOperatorSecret);
        }
        let operator = |field, inline: &Option<SecretText>, file: &Option<PathBuf>| {
            source(field, inline, file).read_text()
        };
        let mut copy = self.clone();
        (copy.secret, copy.secret_file) = (None, None);
        (copy.previous_secret, copy.previous_secret_file) = (None, None);
        (copy.client_secret, copy.client_secret_file) = (None, None);
        (
            copy.previous_client_secret,
            copy.previous_client_secret_file,
        ) = (None, None);
        copy.operator_secret = operator(
            "operator_secret",
            &self.operator_secret,
            &self.operator_secret_file,
        )?;
        copy.previous_operator_secret = operator(
            "previous_operator_secret",
            &self.previous_operator_secret,
            &self.previous_operator_secret_file,
        )?;
        (
            copy.operator_secret_file,
            copy.previous_operator_secret_file,
        ) = (None, None);
        Ok(copy)
    }

    /// Fills the secrets the file does not set from the environment (as `lookup` reads it):
    /// [`secrets::SECRET_ENV`], [`secrets::CLIENT_SECRET_ENV`],
    /// [`secrets::OPERATOR_SECRET_ENV`]. A secret set both ways is an error.
    pub fn take_environment(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ClusterFileError> {
        let env = |(inline, file): (&mut Option<SecretText>, &Option<PathBuf>), field, variable| {
            let set = (field, inline.is_some() || file.is_some());
            secrets::from_environment(set, inline, variable, &lookup)
        };
        let peer = (&mut self.secret, &self.secret_file);
        env(peer, "secret", secrets::SECRET_ENV)?;
        let client = (&mut self.client_secret, &self.client_secret_file);
        env(client, "client_secret", secrets::CLIENT_SECRET_ENV)?;
        let operator = (&mut self.operator_secret, &self.operator_secret_file);
        env(operator, "operator_secret", secrets::OPERATOR_SECRET_ENV)?;
        Ok(())
    }
}

/// The operator key and, during a rotation, the previous one.
type OperatorKeys = (OperatorKey, Option<OperatorKey>);

/// The operator keys `secret` makes: set as the operator secret, and (when `as_peer`) set as
/// the peer secret of a file that names no operator secret.
fn operator_keys_of(secret: &[u8], as_peer: bool) -> Vec<Key> {
    let as_operator = Key::operator(secret).ok().map(|key| key.key().clone());
    let peer = as_peer.then(|| Key::peer(secret).ok()).flatten();
    let as_peer = peer.map(|peer| OperatorKey::of_peer_key(&peer).key().clone());
    as_operator.into_iter().chain(as_peer).collect()
}

/// Where the secret of key `field` comes from in a file: its inline value or its `_file`.
fn source<'a>(
    field: &'static str,
    inline: &'a Option<SecretText>,
    file: &'a Option<PathBuf>,
) -> SecretSource<'a> {
    SecretSource {
        field,
        inline: inline.as_deref(),
        file: file.as_deref(),
    }
}

/// True when `text` is a client file by its keys: nodes named by their client addresses only
/// (no peer address, no data directory) and no peer or operator secret, whatever else is
/// wrong in it.
fn is_client_file(text: &str) -> bool {
    const CLUSTER_ONLY: [&str; 8] = [
        "secret",
        "secret_file",
        "previous_secret",
        "previous_secret_file",
        "operator_secret",
        "operator_secret_file",
        "previous_operator_secret",
        "previous_operator_secret_file",
    ];
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return false;
    };
    let Some(toml::Value::Array(nodes)) = table.get("nodes") else {
        return false;
    };
    let client_only = |node: &toml::Value| {
        let keys = node.as_table();
        keys.is_some_and(|k| {
            k.contains_key("client_address")
                && !k.contains_key("peer_address")
                && !k.contains_key("data_dir")
        })
    };
    let secrets = CLUSTER_ONLY.iter().any(|key| table.contains_key(*key));
    !nodes.is_empty() && nodes.iter().all(client_only) && !secrets
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
        | ConfigError::EmptyDataDir
        | ConfigError::InlineWalDelayed { .. }
        | ConfigError::CapacityBelowTables(_) => false,
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

/// Node `id` at 127.0.0.1, its peer port `peer_base + id` and its client port 1,000 above.
#[cfg(test)]
pub(crate) fn loopback_node(id: u8, peer_base: u16, data_dir: PathBuf) -> NodeEntry {
    let address = |port: u16| SocketAddr::from(([127, 0, 0, 1], port + u16::from(id)));
    NodeEntry::new(id, address(peer_base), address(peer_base + 1_000), data_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves `session_retention_s` reaches every node's configuration, defaults to
    /// [`crate::apply::SESSION_RETENTION_S_DEFAULT`] when absent (and is then left out of a
    /// file written, which earlier builds read), and is checked against its range.
    #[test]
    fn session_retention_is_a_setting() {
        let nodes = vec![loopback_node(1, 7000, "/tmp/n1".into())];
        let mut file = ClusterFile::new("sixteen bytes at least", nodes);
        let default = crate::apply::SESSION_RETENTION_S_DEFAULT;
        assert_eq!(file.node_config(1).unwrap().session_retention_s, default);
        assert!(!file.to_toml().contains("session_retention_s"));
        file.session_retention_s = 60;
        let text = file.to_toml();
        assert!(text.contains("session_retention_s = 60"), "{text}");
        let read: ClusterFile = toml::from_str(&text).unwrap();
        assert_eq!(read.node_config(1).unwrap().session_retention_s, 60);
        let zero = text.replace("session_retention_s = 60", "session_retention_s = 0");
        let errors = toml::from_str::<ClusterFile>(&zero).unwrap().errors();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("session_retention_s = 0 is out of range"));
    }

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
        assert_eq!(file.node_config(1).unwrap().mode, Mode::Performance);
        assert!(toml::from_str::<ClusterFile>(&format!("mode = \"fast\"\n{good}")).is_err());
        let unknown = format!("colour = 3\n{good}");
        assert!(toml::from_str::<ClusterFile>(&unknown).is_err());
        let short = good.replace("sixteen bytes at least", "short");
        let errors = toml::from_str::<ClusterFile>(&short).unwrap().errors();
        assert!(errors[0].contains("at least 16 bytes"), "{errors:?}");
        // Without the peer secret the file is an operator's copy: valid, but no node starts.
        let without = good.replace("secret = \"sixteen bytes at least\"", "");
        let without: ClusterFile = toml::from_str(&without).unwrap();
        assert_eq!(without.errors(), Vec::<String>::new());
        let error = without.node_config(1).unwrap_err();
        assert!(matches!(error, ClusterFileError::NoPeerSecret), "{error}");
        let error = without.operator_config().unwrap_err();
        assert!(
            matches!(error, ClusterFileError::NoOperatorCredential),
            "{error}"
        );
        let clients = format!("client_secret = \"clients prove this one\"\n{good}");
        let file: ClusterFile = toml::from_str(&clients).unwrap();
        assert!(file.node_config(1).unwrap().credentials.client.is_some());
        assert!(file.client_config().unwrap().key.is_some());
    }

    /// Proves one secret serves one role: a client or operator secret equal to the peer
    /// secret, or a client secret equal to the operator secret (current or previous), is
    /// refused, since the client file and the operator file carry the secret's text.
    #[test]
    fn a_secret_serves_one_role_only() {
        let node = |id: u8| loopback_node(id, 7200, PathBuf::from(format!("/tmp/n{id}")));
        let peer = "the peers' secret, 16 bytes+";
        let base = ClusterFile::new(peer, (1..=3).map(node).collect());
        let reused = |change: &dyn Fn(&mut ClusterFile)| {
            let mut file = base.clone();
            change(&mut file);
            let errors = file.errors();
            let refused = file.credentials().is_err();
            (
                errors.iter().any(|e| e.contains("serves two roles")),
                refused,
            )
        };
        let apps = "the applications' secret, 16+";
        type Change<'a> = &'a dyn Fn(&mut ClusterFile);
        let cases: [(&str, Change<'_>); 4] = [
            ("client = peer", &|f| f.client_secret = Some(peer.into())),
            ("operator = peer", &|f| {
                f.operator_secret = Some(peer.into())
            }),
            ("client = operator", &|f| {
                f.client_secret = Some(apps.into());
                f.operator_secret = Some(apps.into());
            }),
            ("previous client = peer", &|f| {
                f.client_secret = Some(apps.into());
                f.previous_client_secret = Some(peer.into());
            }),
        ];
        for (what, change) in cases {
            assert_eq!(reused(change), (true, true), "{what}");
        }
        let distinct = reused(&|f| {
            f.client_secret = Some(apps.into());
            f.operator_secret = Some("the operators' secret, 16+".into());
        });
        assert_eq!(distinct, (false, false));
    }

    /// Proves a file written by [`ClusterFile::write`] reads back equal, and one built with
    /// [`ClusterFile::new`] has the defaults a file without the keys has.
    #[test]
    fn writes_and_reads_back() {
        let node = |id: u8| loopback_node(id, 7000, PathBuf::from(format!("/tmp/n{id}")));
        let mut file = ClusterFile::new("sixteen bytes at least", (1..=3).map(node).collect());
        let nodes: String = (1..=3)
            .map(|id| {
                format!(
                    "[[nodes]]\nid = {id}\npeer_address = \"127.0.0.1:700{id}\"\n\
                     client_address = \"127.0.0.1:800{id}\"\ndata_dir = \"/tmp/n{id}\"\n"
                )
            })
            .collect();
        let text = format!("secret = \"sixteen bytes at least\"\n{nodes}");
        let minimal = ClusterFile::from_toml(&text).unwrap();
        assert_eq!(
            minimal, file,
            "the defaults are those of a file without the keys"
        );
        file.mode = ModeSetting::Performance;
        file.client_secret = Some("clients prove this one".into());
        file.snapshot_every = 4;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.toml");
        file.write(&path).unwrap();
        assert_eq!(ClusterFile::read(&path).unwrap(), file);
        let shown = format!("{file:?}");
        assert!(
            !shown.contains("sixteen bytes") && !shown.contains("clients prove"),
            "{shown}"
        );
        let missing = ClusterFile::read(&dir.path().join("missing.toml"));
        assert!(matches!(missing, Err(ClusterFileError::Read { .. })));
    }
}
