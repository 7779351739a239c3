//! `node`: one node of a cluster, in its own process, until SIGINT or SIGTERM.

use super::runtime;
use crate::handler::Handler;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Options of `node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// The cluster file.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// This node's id in the cluster file.
    #[arg(long, env = crate::cli::NODE_ID_ENV)]
    pub id: u8,
    /// Snapshot and WAL options (over the cluster file's).
    #[command(flatten)]
    pub storage: StorageOptions,
    /// Start empty and take the state from the leader: the data directory's log and
    /// snapshots are moved to its quarantine/ folder (never deleted), and the node rejoins
    /// without campaigning or voting for a shorter log until it holds the log it had. For a
    /// node whose data cannot be used (a refused start says when).
    #[arg(long)]
    pub rebuild_from_leader: bool,
    /// Join a running cluster (a new node): it takes the state from the leader and becomes a
    /// member once `member add` names it. Needed on its first start only (its data directory
    /// keeps it); refused for a data directory that holds a first member's data.
    #[arg(long)]
    pub join: bool,
    /// Serve Prometheus metrics (`GET /metrics`) at ADDR, over the cluster file's
    /// `metrics_address`.
    #[arg(long, value_name = "ADDR")]
    pub metrics_address: Option<std::net::SocketAddr>,
}

/// `--snapshot-every`, `--snapshot-retain-ms` and `--wal-io`.
#[derive(Args, Debug, Clone, Copy)]
pub struct StorageOptions {
    /// Entries between captures of the committed state for snapshots (0 turns snapshots off);
    /// default 64, or the cluster file's.
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// Least milliseconds a persisted snapshot is kept before a newer one replaces it;
    /// default 1,000, or the cluster file's.
    #[arg(long)]
    pub snapshot_retain_ms: Option<u64>,
    /// Where the WAL's writes and fsyncs run: `auto` (the node's own thread when the data
    /// directory is on tmpfs, else the WAL's thread), `thread` or `inline`; default `auto`,
    /// or the cluster file's.
    #[arg(long, value_enum)]
    pub wal_io: Option<crate::node::WalIo>,
}

impl StorageOptions {
    /// Sets what was given on `config`.
    pub fn apply(&self, config: &mut crate::node::NodeConfig) {
        if let Some(every) = self.snapshot_every {
            config.snapshot_every = every;
        }
        if let Some(retain) = self.snapshot_retain_ms {
            config.snapshot_retain_ms = retain;
        }
        if let Some(wal_io) = self.wal_io {
            config.wal_io = wal_io;
        }
    }
}

/// Runs one node until SIGINT or SIGTERM.
pub fn node<H: Handler>(args: NodeArgs, handler: H) -> anyhow::Result<()> {
    let file = super::read_cluster_file(&args.cluster)?;
    let mut config = file.node_config(args.id)?;
    args.storage.apply(&mut config);
    config.rebuild_from_leader = args.rebuild_from_leader;
    config.join = args.join;
    if let Some(address) = args.metrics_address {
        config.metrics_address = Some(address);
    }
    let me = config
        .nodes
        .iter()
        .find(|n| n.id == config.id)
        .context("listed")?
        .clone();
    let data_dir = config.data_dir.clone();
    // A stock soft limit of 1,024 descriptors runs out before the node's connection caps.
    crate::node::process::raise_descriptor_limit();
    let (version, commit) = crate::formats::binary();
    // One line: the refusal itself names the file, the reason and the setting.
    let mut handle = crate::node::start(config, handler).map_err(|error| {
        anyhow::anyhow!("node {} of {}: {error}", args.id, args.cluster.display())
    })?;
    // Through tracing, so that with `--log-format json` every line on stderr is JSON.
    tracing::info!(
        node = args.id,
        version,
        commit,
        peer_address = %me.peer_address,
        client_address = %me.client_address,
        data_dir = %data_dir.display(),
        "node started"
    );
    let stopped_by = runtime()?.block_on(async {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => Ok("SIGINT"),
            _ = terminate.recv() => Ok("SIGTERM"),
            reason = handle.failure() => Err(anyhow::anyhow!("node {}: {reason}", args.id)),
        }
    })?;
    tracing::info!(
        node = args.id,
        version,
        commit,
        signal = stopped_by,
        "node stopping"
    );
    handle.stop();
    tracing::info!(node = args.id, version, commit, "node stopped");
    Ok(())
}
