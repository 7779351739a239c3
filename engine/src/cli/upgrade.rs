//! `upgrade --cluster F --handler-version N`: puts a newer handler version in force through the
//! leader's log, once every node's build runs it, and waits until every node has switched at
//! the same entry. See `notes/decisions/versions.md`.

use super::runtime;
use crate::address::Address;
use crate::client::{ClientError, OperatorConfig, OperatorRefused, node_versions, upgrade_handler};
use crate::ids::EntryIndex;
use clap::Args;
use net::message::{ClientReply, HandlerVersions, UpgradeRefusal};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long one node has to answer, in milliseconds.
pub const UPGRADE_TIMEOUT_MS: u64 = 2_000;
/// Time between two looks at the cluster while the upgrade settles, in milliseconds.
pub const UPGRADE_POLL_MS: u64 = 100;
/// How long an upgrade may take by default (commit, and every node's apply), in seconds.
pub const UPGRADE_WAIT_S_DEFAULT: u64 = 60;

/// Options of `upgrade`.
#[derive(Args, Debug)]
pub struct UpgradeArgs {
    /// The cluster file.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The handler version to put in force (newer than the one in force).
    #[arg(long)]
    pub handler_version: u32,
    /// Give up after SECS.
    #[arg(long, value_name = "SECS", default_value_t = UPGRADE_WAIT_S_DEFAULT)]
    pub wait: u64,
    /// What standard output holds once every node has the version in force.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Why an upgrade did not happen or did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpgradeError {
    /// A node did not answer: its build is unknown, so the version might halt it.
    #[error(
        "node {node} did not answer ({reason}): upgrade once every node runs a build that supports it"
    )]
    Unreachable {
        /// The node.
        node: u8,
        /// Why.
        reason: String,
    },
    /// A node's build does not run the version.
    #[error(
        "node {node} runs handler versions {oldest} to {newest}, not {version}: upgrade its binary first"
    )]
    Unsupported {
        /// The node.
        node: u8,
        /// The version asked for.
        version: u32,
        /// The oldest its build runs.
        oldest: u32,
        /// The newest its build runs.
        newest: u32,
    },
    /// The leader refused.
    #[error("refused: {0}")]
    Refused(UpgradeRefusal),
    /// A node refused the connection for good (another cluster, a wrong key, or a credential
    /// that is not the operator's).
    #[error(transparent)]
    Connection(OperatorRefused),
    /// No leader took it, or not every node switched, in time.
    #[error("gave up after {seconds} s: {doing}")]
    TimedOut {
        /// The wait.
        seconds: u64,
        /// What it waited for.
        doing: String,
    },
}

/// Runs `upgrade`: checks every node runs the version, proposes it, and waits until every
/// node has it in force; prints where it switched.
pub fn upgrade(args: UpgradeArgs) -> anyhow::Result<()> {
    let file = super::read_cluster_file(&args.cluster)?;
    let client = file.operator_config()?;
    let nodes: Vec<(u8, Address)> = file
        .nodes
        .iter()
        .map(|n| (n.id, n.client_address.clone()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(args.wait);
    let version = args.handler_version;
    let timed_out = |doing: &str| UpgradeError::TimedOut {
        seconds: args.wait,
        doing: doing.to_string(),
    };
    let switched = runtime()?.block_on(async {
        every_node_runs(&client, &nodes, version)
            .await
            .map_err(refused_first)?;
        let index = propose(&client, &nodes, version, deadline)
            .await
            .map_err(refused_first)?
            .ok_or_else(|| timed_out("no leader took the upgrade"))?;
        match index {
            Some(index) => eprintln!("handler version {version}: in the log at entry {index}"),
            None => eprintln!("handler version {version}: already in force or on its way"),
        }
        let switched = settled(&client, &nodes, version, deadline)
            .await
            .ok_or_else(|| timed_out("every node to apply the upgrade"))?;
        anyhow::Ok(switched)
    })?;
    let nodes: Vec<_> = (switched.iter())
        .map(|v| {
            let (node, applied) = (v.node.0, v.applied_index.0);
            serde_json::json!({ "node": node, "in_force": v.in_force, "applied_index": applied })
        })
        .collect();
    let json = serde_json::json!({ "handler_version": version, "nodes": nodes });
    args.output.emit(&json, || {
        for versions in &switched {
            crate::outln!(
                "node {}: handler version {} in force (applied through entry {})",
                versions.node,
                versions.in_force,
                versions.applied_index
            );
        }
    })
}

/// `error`, with a node's refusal of the credential first in its chain (for its exit code).
fn refused_first(error: UpgradeError) -> anyhow::Error {
    if let UpgradeError::Connection(refused) = error {
        return refused.into();
    }
    error.into()
}

/// Why node `node` gave no versions: it refused the credential (or the cluster), or it did
/// not answer.
fn unanswered(node: u8, error: &ClientError) -> UpgradeError {
    match OperatorRefused::of("upgrade", node, error) {
        Some(refused) => UpgradeError::Connection(refused),
        None => UpgradeError::Unreachable {
            node,
            reason: error.to_string(),
        },
    }
}

/// Checks every node answers and its build runs `version`.
async fn every_node_runs(
    client: &OperatorConfig,
    nodes: &[(u8, Address)],
    version: u32,
) -> Result<(), UpgradeError> {
    let timeout = Duration::from_millis(UPGRADE_TIMEOUT_MS);
    for (node, address) in nodes {
        let versions = node_versions(client, address, timeout).await;
        let versions = versions.map_err(|error| unanswered(*node, &error))?;
        if !(versions.oldest..=versions.newest).contains(&version) {
            return Err(UpgradeError::Unsupported {
                node: *node,
                version,
                oldest: versions.oldest,
                newest: versions.newest,
            });
        }
    }
    Ok(())
}

/// Asks every node in turn until the leader takes the upgrade: `Some(Some(index))` with its
/// entry, `Some(None)` when the version is already in force or on its way (an earlier attempt
/// whose answer was lost), `None` when no leader took it by `deadline`.
async fn propose(
    client: &OperatorConfig,
    nodes: &[(u8, Address)],
    version: u32,
    deadline: Instant,
) -> Result<Option<Option<EntryIndex>>, UpgradeError> {
    let timeout = Duration::from_millis(UPGRADE_TIMEOUT_MS);
    while Instant::now() < deadline {
        for (node, address) in nodes {
            match upgrade_handler(client, address, version, timeout).await {
                Ok(ClientReply::Upgrading { index }) => return Ok(Some(Some(index))),
                Ok(ClientReply::UpgradeRefused(UpgradeRefusal::NotNewer { in_force, .. }))
                    if in_force >= version =>
                {
                    return Ok(Some(None));
                }
                Ok(ClientReply::UpgradeRefused(refusal)) => {
                    return Err(UpgradeError::Refused(refusal));
                }
                // This credential may not upgrade: asking again cannot help.
                Err(ClientError::Refused(refusal)) => {
                    let (command, node) = ("upgrade", *node);
                    let refused = OperatorRefused {
                        command,
                        node,
                        refusal,
                    };
                    return Err(UpgradeError::Connection(refused));
                }
                // Not the leader, a node down: the next one, or again.
                Ok(_) | Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(UPGRADE_POLL_MS)).await;
    }
    Ok(None)
}

/// Waits until every node has `version` in force: their versions then, or `None` at
/// `deadline`.
async fn settled(
    client: &OperatorConfig,
    nodes: &[(u8, Address)],
    version: u32,
    deadline: Instant,
) -> Option<Vec<HandlerVersions>> {
    let timeout = Duration::from_millis(UPGRADE_TIMEOUT_MS);
    while Instant::now() < deadline {
        let mut all = Vec::new();
        for (_, address) in nodes {
            match node_versions(client, address, timeout).await {
                Ok(versions) if versions.in_force >= version => all.push(versions),
                Ok(_) | Err(_) => break,
            }
        }
        if all.len() == nodes.len() {
            return Some(all);
        }
        tokio::time::sleep(Duration::from_millis(UPGRADE_POLL_MS)).await;
    }
    None
}
