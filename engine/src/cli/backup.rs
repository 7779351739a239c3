//! `backup`: fetches a node's newest durable snapshot (committed, applied state at an index,
//! with its state hash and digest) over the client protocol and writes it durably as a backup
//! file; `restore`: checks a backup file and seeds the data directories of a new cluster
//! from it.

use super::{mode_name, runtime};
use crate::address::Address;
use crate::client::{Connects, OperatorConfig, OperatorRefused};
use crate::codec;
use crate::handler::Handler;
use crate::handshake::HandshakeError;
use crate::node::ClusterFile;
use crate::operator::backup::{Backup, BackupHeader, Seed, seed_data_dirs, write_file};
use crate::snapshot::SNAPSHOT_BYTES_MAX;
use clap::Args;
use futures::{SinkExt, StreamExt};
use net::message::{BackupChunk, BackupRequest, ClientReply, ClientRequest};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// How long one node has to answer one piece of a backup, in milliseconds.
pub const BACKUP_PIECE_TIMEOUT_MS: u64 = 10_000;
/// Times a backup starts again from a node's newest snapshot when the one it was fetching was
/// replaced meanwhile (a node keeps two; each at least a second).
pub const BACKUP_RESTARTS_MAX: u32 = 3;

/// Options of `backup`.
#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The cluster file of the running cluster.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The backup file to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace `--out` if it exists.
    #[arg(long)]
    pub force: bool,
    /// The line, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Options of `restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup file.
    #[arg(long)]
    pub from: PathBuf,
    /// The cluster file of the new cluster, whose nodes' data directories are seeded.
    #[arg(long)]
    pub cluster: PathBuf,
    /// The line, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Why `backup` wrote nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupFailed {
    /// No node gave a whole snapshot.
    #[error("no node gave a backup: {}", .0.join("; "))]
    NoNode(Vec<String>),
}

/// Fetches a node's newest durable snapshot (the first node of the cluster file that gives
/// one), verifies it, writes it durably to `--out`, and prints what it holds.
pub fn backup(args: BackupArgs) -> anyhow::Result<()> {
    let file = super::read_cluster_file(&args.cluster)?;
    let client = file.operator_config()?;
    if !args.force && args.out.symlink_metadata().is_ok() {
        return Err(crate::operator::backup::BackupError::Exists(args.out.clone()).into());
    }
    let (mut failures, mut refused) = (Vec::new(), None);
    let fetched = runtime()?.block_on(async {
        for node in &file.nodes {
            match fetch(&client, &node.client_address).await {
                Ok(fetched) => return Some(fetched),
                Err(error) => {
                    let id = node.id;
                    if refused.is_none() {
                        refused = error.refusal().map(|refusal| OperatorRefused {
                            command: "backup",
                            node: id,
                            refusal,
                        });
                    }
                    failures.push(format!("node {id}: {error}"));
                }
            }
        }
        None
    });
    // No node gave one: a node that refused the credential (or the cluster) says why.
    let Some((chunk, snapshot)) = fetched else {
        return Err(match refused {
            Some(refused) => refused.into(),
            None => BackupFailed::NoNode(failures).into(),
        });
    };
    let backup = Backup::new(file.cluster_id, chunk.node, chunk.mode, snapshot)
        .map_err(|e| anyhow::anyhow!("node {}'s snapshot does not verify: {e}", chunk.node))?;
    let bytes = backup.encode();
    // Read back what the encoding holds before anything is written: the digest checks.
    Backup::decode(&args.out, &bytes)?;
    write_file(&args.out, &bytes, args.force)?;
    let on_disk = Backup::read(&args.out)?;
    assert_eq!(
        on_disk.header, backup.header,
        "the file reads back as written"
    );
    let digest = Backup::digest_hex(&bytes);
    report(
        &backup.header,
        &digest,
        bytes.len() as u64,
        &args.out,
        &args.output,
    )
}

fn header_json(header: &BackupHeader, digest: &str, bytes: u64) -> Value {
    json!({
        "cluster_id": header.cluster_id,
        "node": header.node.0,
        "index": header.index.0,
        "term": header.term.0,
        "state_hash": header.state_hash.to_string(),
        "state_hash_full": header.state_hash.0.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        "digest": digest,
        "bytes": bytes,
        "snapshot_bytes": header.snapshot_bytes,
        "mode": mode_name(header.mode),
    })
}

fn report(
    header: &BackupHeader,
    digest: &str,
    bytes: u64,
    out: &std::path::Path,
    output: &super::OutputArgs,
) -> anyhow::Result<()> {
    let mut value = header_json(header, digest, bytes);
    value["file"] = json!(out.display().to_string());
    output.emit(&value, || print_report(header, digest, bytes, out))
}

fn print_report(header: &BackupHeader, digest: &str, bytes: u64, out: &std::path::Path) {
    crate::outln!(
        "backup {}: cluster {}, node {}, entry {} (term {}), state hash {}, digest {}, {} bytes",
        out.display(),
        header.cluster_id,
        header.node,
        header.index,
        header.term,
        header.state_hash,
        &digest[..16],
        bytes
    );
}

/// Why one node gave no backup.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error(transparent)]
    Connection(#[from] HandshakeError),
    #[error("no answer within {BACKUP_PIECE_TIMEOUT_MS} ms")]
    Timeout,
    #[error("{0}")]
    NoBackup(String),
    #[error("refused: {0}")]
    Refused(net::message::Refusal),
    #[error("unexpected answer {0}")]
    Unexpected(String),
    #[error("a snapshot of {0} bytes is over the limit")]
    TooLarge(u64),
}

impl FetchError {
    /// The node's refusal, when it refused for good (the credential, the cluster, the version).
    fn refusal(&self) -> Option<net::message::Refusal> {
        match self {
            FetchError::Refused(refusal)
            | FetchError::Connection(HandshakeError::Refused(refusal))
                if refusal.is_permanent() =>
            {
                Some(refusal.clone())
            }
            FetchError::Connection(_)
            | FetchError::Timeout
            | FetchError::NoBackup(_)
            | FetchError::Refused(_)
            | FetchError::Unexpected(_)
            | FetchError::TooLarge(_) => None,
        }
    }
}

/// The whole newest durable snapshot of the node at `address`, with its first piece's facts.
async fn fetch(
    config: &OperatorConfig,
    address: &Address,
) -> Result<(BackupChunk, Vec<u8>), FetchError> {
    let keys = Connects::proofs(config).len();
    let mut first = 0;
    loop {
        match fetch_proving(config, address, first).await {
            Err(FetchError::Refused(refusal))
                if crate::client::proves_too_little(&refusal) && first + 1 < keys =>
            {
                first += 1;
            }
            fetched => return fetched,
        }
    }
}

/// [`fetch`], proving the operator's keys from the one at `first` on.
async fn fetch_proving(
    config: &OperatorConfig,
    address: &Address,
    first: usize,
) -> Result<(BackupChunk, Vec<u8>), FetchError> {
    let mut frames = crate::client::connect_from(config, address, first).await?;
    let mut last = FetchError::NoBackup("not tried".into());
    for _ in 0..=BACKUP_RESTARTS_MAX {
        match fetch_once(&mut frames).await {
            Ok(fetched) => return Ok(fetched),
            // The snapshot was replaced meanwhile: start again from the newest.
            Err(FetchError::NoBackup(reason)) => last = FetchError::NoBackup(reason),
            Err(other) => return Err(other),
        }
    }
    Err(last)
}

async fn fetch_once(
    frames: &mut crate::client::Connection,
) -> Result<(BackupChunk, Vec<u8>), FetchError> {
    let first = piece(frames, None, 0).await?;
    if first.total > SNAPSHOT_BYTES_MAX {
        return Err(FetchError::TooLarge(first.total));
    }
    let mut bytes = Vec::with_capacity(first.total as usize);
    bytes.extend_from_slice(&first.data);
    while (bytes.len() as u64) < first.total {
        let next = piece(frames, Some(first.index), bytes.len() as u64).await?;
        let follows = next.index == first.index
            && next.total == first.total
            && next.offset == bytes.len() as u64
            && !next.data.is_empty();
        if !follows {
            return Err(FetchError::NoBackup("the snapshot changed".into()));
        }
        bytes.extend_from_slice(&next.data);
    }
    if bytes.len() as u64 != first.total {
        return Err(FetchError::NoBackup("more bytes than announced".into()));
    }
    Ok((first, bytes))
}

async fn piece(
    frames: &mut crate::client::Connection,
    index: Option<crate::ids::EntryIndex>,
    offset: u64,
) -> Result<BackupChunk, FetchError> {
    let request = ClientRequest::Backup(BackupRequest { index, offset });
    let exchange = async {
        frames.send(&request).await.map_err(HandshakeError::Frame)?;
        let frame = frames.next().await.ok_or(HandshakeError::Closed)??;
        Ok::<_, HandshakeError>(codec::decode::<ClientReply>(&frame)?)
    };
    let timeout = Duration::from_millis(BACKUP_PIECE_TIMEOUT_MS);
    let reply = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| FetchError::Timeout)??;
    if let ClientReply::BackupChunk(chunk) = reply {
        return Ok(chunk);
    }
    if let ClientReply::NoBackup { reason } = reply {
        return Err(FetchError::NoBackup(reason));
    }
    Err(match reply.refusal() {
        Some(refusal) => FetchError::Refused(refusal.clone()),
        None => FetchError::Unexpected(reply.name().to_string()),
    })
}

/// Checks the backup file and seeds every node's data directory of the new cluster from it
/// (refusing, before writing anything, if any already holds data); prints what it restored.
pub fn restore<H: Handler>(args: RestoreArgs, handler: H) -> anyhow::Result<()> {
    let file = ClusterFile::read(&args.cluster)?;
    // A backup file that is missing or damaged is a bad file, as a bad cluster file is.
    let backup =
        Backup::read(&args.from).map_err(|error| super::coded(super::Exit::Usage, error))?;
    let bytes = std::fs::metadata(&args.from)?.len();
    let seeds: Vec<Seed> = file
        .nodes
        .iter()
        .map(|n| Seed {
            node: n.id,
            dir: n.data_dir.clone(),
        })
        .collect();
    seed_data_dirs(&backup, file.cluster_id, &handler.schema(), &seeds)?;
    let digest = {
        let raw = std::fs::read(&args.from)?;
        Backup::digest_hex(&raw)
    };
    let header = &backup.header;
    let mut value = header_json(header, &digest, bytes);
    value["restored_cluster_id"] = json!(file.cluster_id);
    let dirs: Vec<String> = seeds.iter().map(|s| s.dir.display().to_string()).collect();
    value["data_dirs"] = json!(dirs);
    args.output.emit(&value, || {
        print_restored(header, file.cluster_id, seeds.len())
    })
}

/// The line `restore` prints for a person.
fn print_restored(header: &BackupHeader, cluster_id: u64, seeded: usize) {
    crate::outln!(
        "restored entry {} (term {}, state hash {}, cluster {}) into cluster {}: {} data \
         directories seeded; start the nodes",
        header.index,
        header.term,
        header.state_hash,
        header.cluster_id,
        cluster_id,
        seeded
    );
}
