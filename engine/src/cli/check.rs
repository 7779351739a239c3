//! `check --cluster FILE`: what each node of a cluster file would run with, or every
//! error the file holds (exit 1), without starting anything.

use crate::node::ClusterFile;
use anyhow::bail;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

/// Options of `check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The cluster file.
    #[arg(long)]
    pub cluster: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Checks the file; prints the nodes' settings, or every error and exits 1.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let file = ClusterFile::parse(&args.cluster)?;
    let errors = file.errors();
    if args.json {
        let nodes: Vec<_> = file
            .nodes
            .iter()
            .map(|n| {
                json!({
                    "id": n.id,
                    "peer_address": n.peer_address.to_string(),
                    "client_address": n.client_address.to_string(),
                    "data_dir": n.data_dir.display().to_string(),
                })
            })
            .collect();
        let value = json!({
            "file": args.cluster.display().to_string(),
            "valid": errors.is_empty(),
            "errors": errors,
            "nodes": nodes,
            "settings": settings(&file).into_iter().collect::<serde_json::Map<_, _>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if errors.is_empty() {
        print_nodes(&file);
    } else {
        for error in &errors {
            println!("error: {error}");
        }
    }
    if !errors.is_empty() {
        bail!("{}: {} error(s)", args.cluster.display(), errors.len());
    }
    Ok(())
}

fn print_nodes(file: &ClusterFile) {
    println!(
        "{:>4}  {:<22} {:<22} data_dir",
        "node", "peer_address", "client_address"
    );
    for node in &file.nodes {
        println!(
            "{:>4}  {:<22} {:<22} {}",
            node.id,
            node.peer_address.to_string(),
            node.client_address.to_string(),
            node.data_dir.display()
        );
    }
    println!("every node runs with:");
    for (key, value) in settings(file) {
        match value.as_str() {
            Some(text) => println!("  {key:<22} {text}"),
            None => println!("  {key:<22} {value}"),
        }
    }
}

/// The cluster-wide settings every node runs with, as the file spells them.
fn settings(file: &ClusterFile) -> Vec<(String, serde_json::Value)> {
    let mode = match file.mode {
        crate::node::ModeSetting::Verify => "verify",
        crate::node::ModeSetting::Performance => "performance",
    };
    [
        ("cluster_id", json!(file.cluster_id)),
        ("client_secret", json!(file.client_secret.is_some())),
        ("mode", json!(mode)),
        ("entry_commands_max", json!(file.entry_commands_max)),
        ("capacity_bytes", json!(file.capacity_bytes)),
        ("pipeline_entries_max", json!(file.pipeline_entries_max)),
        ("tick_ms", json!(file.tick_ms)),
        ("election_ticks_min", json!(file.election_ticks_min)),
        ("heartbeat_ticks", json!(file.heartbeat_ticks)),
        ("seed", json!(file.seed)),
        ("snapshot_every", json!(file.snapshot_every)),
        ("snapshot_retain_ms", json!(file.snapshot_retain_ms)),
        ("lagging_entries_max", json!(file.lagging_entries_max)),
        ("wal_segment_bytes", json!(file.wal_segment_bytes)),
        ("fsync_delay_ms", json!(file.fsync_delay_ms)),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect()
}
