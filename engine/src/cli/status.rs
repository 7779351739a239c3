//! `status`: every node's role, term, indexes and state hash.

use super::{mode_name, runtime};
use crate::client::node_status;
use crate::node::ClusterFile;
use clap::Args;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// Options of `status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The cluster file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// Print JSON instead of the table; `--json FILE` writes it to FILE (and prints the
    /// table), as the commands that run for a while do.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = super::JSON_STDOUT)]
    pub json: Option<PathBuf>,
}

/// Prints every node's role, term, indexes and state hash.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let file = ClusterFile::read(&args.cluster)?;
    let client = file.client_config()?;
    let statuses = runtime()?.block_on(async {
        let mut statuses = Vec::new();
        for node in &file.nodes {
            let status = node_status(&client, node.client_address, Duration::from_secs(2)).await;
            statuses.push((node.id, status));
        }
        statuses
    });
    if let Some(target) = &args.json {
        let nodes: Vec<Value> = statuses
            .iter()
            .map(|(id, status)| match status {
                Ok(s) => json!({
                    "id": id,
                    "reachable": true,
                    "role": format!("{:?}", s.role).to_lowercase(),
                    "term": s.term.0,
                    "leader": s.leader.map(|l| l.0),
                    "last_index": s.last_index.0,
                    "commit_index": s.commit_index.0,
                    "applied_index": s.applied_index.0,
                    "state_hash": s.state_hash.to_hex(),
                    "divergence": s.divergence.as_ref().map(|d| json!({
                        "index": d.index.0,
                        "nodes": [d.local.0.0, d.remote.0.0],
                        "hashes": [d.local.1.to_hex(), d.remote.1.to_hex()],
                    })),
                    "halted": s.halted,
                    "mode": mode_name(s.mode),
                }),
                Err(error) => json!({ "id": id, "reachable": false, "error": error.to_string() }),
            })
            .collect();
        if super::emit_json(target, &json!({ "nodes": nodes }))? {
            return Ok(());
        }
    }
    println!(
        "{:>4} {:<10} {:>6} {:>6} {:>10} {:>10} {:>10} {:<18} notes",
        "node", "role", "term", "leader", "last", "commit", "applied", "state hash"
    );
    for (id, status) in &statuses {
        match status {
            Ok(s) => println!(
                "{:>4} {:<10} {:>6} {:>6} {:>10} {:>10} {:>10} {:<18} {}",
                id,
                format!("{:?}", s.role).to_lowercase(),
                s.term.0,
                s.leader.map_or("-".into(), |l| l.to_string()),
                s.last_index.0,
                s.commit_index.0,
                s.applied_index.0,
                s.state_hash.to_string(),
                s.halted
                    .clone()
                    .or(s
                        .divergence
                        .as_ref()
                        .map(|d| format!("divergence at {}", d.index)))
                    .unwrap_or_default()
            ),
            Err(error) => println!("{id:>4} unreachable: {error}"),
        }
    }
    Ok(())
}
