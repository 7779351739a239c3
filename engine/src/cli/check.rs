//! `check --cluster FILE`: what each node of a cluster file would run with, or every
//! error the file holds (exit 3, a bad file), without starting anything.

use super::check_tls::NodeTls;
use crate::node::ClusterFile;
use anyhow::anyhow;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

/// Options of `check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The cluster file.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The table, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Checks the file; prints the nodes' settings, or every error and exits 3.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let mut file = ClusterFile::parse(&args.cluster)?;
    super::warn_if_secrets_open(&args.cluster, file.has_inline_secret());
    file.take_environment(super::environment)?;
    let mut errors = file.errors();
    let tls = super::check_tls::report(&file, std::time::SystemTime::now());
    errors.extend(super::check_tls::errors(&tls));
    let json = as_json(&args.cluster, &file, &errors, &tls);
    args.output.emit(&json, || match errors.is_empty() {
        true => print_nodes(&file, &tls),
        false => errors
            .iter()
            .for_each(|error| crate::outln!("error: {error}")),
    })?;
    if !errors.is_empty() {
        let error = anyhow!("{}: {} error(s)", args.cluster.display(), errors.len());
        return Err(super::coded(super::Exit::Usage, error));
    }
    Ok(())
}

/// The file's nodes, settings and errors, for programs.
fn as_json(
    path: &std::path::Path,
    file: &ClusterFile,
    errors: &[String],
    tls: &[(u8, NodeTls)],
) -> serde_json::Value {
    let tls_of = |id: u8| {
        let found = tls.iter().find(|(node, _)| *node == id);
        found.map(|(_, tls)| super::check_tls::json_of(tls))
    };
    let nodes: Vec<_> = file
        .nodes
        .iter()
        .map(|n| {
            json!({
                "tls": tls_of(n.id),
                "id": n.id,
                "peer_address": n.peer_address.to_string(),
                "client_address": n.client_address.to_string(),
                "data_dir": n.data_dir.display().to_string(),
                "peer_bind_address": n.peer_bind_address.map(|a| a.to_string()),
                "client_bind_address": n.client_bind_address.map(|a| a.to_string()),
                "metrics_address": n.metrics_address.map(|a| a.to_string()),
            })
        })
        .collect();
    json!({
        "file": path.display().to_string(),
        "valid": errors.is_empty(),
        "errors": errors,
        "nodes": nodes,
        "settings": settings(file).into_iter().collect::<serde_json::Map<_, _>>(),
    })
}

fn print_nodes(file: &ClusterFile, tls: &[(u8, NodeTls)]) {
    crate::outln!(
        "{:>4}  {:<22} {:<22} data_dir",
        "node",
        "peer_address",
        "client_address"
    );
    for node in &file.nodes {
        crate::outln!(
            "{:>4}  {:<22} {:<22} {}",
            node.id,
            node.peer_address.to_string(),
            node.client_address.to_string(),
            node.data_dir.display()
        );
        let listens = [
            ("peer_bind_address", node.peer_bind_address),
            ("client_bind_address", node.client_bind_address),
            ("metrics_address", node.metrics_address),
        ];
        for (key, address) in listens {
            if let Some(address) = address {
                crate::outln!("{:>4}  {key} {address}", "");
            }
        }
        if let Some((_, tls)) = tls.iter().find(|(id, _)| *id == node.id) {
            crate::outln!("{:>4}  {}", "", super::check_tls::line(tls));
        }
    }
    crate::outln!("every node runs with:");
    for (key, value) in settings(file) {
        match value.as_str() {
            Some(text) => crate::outln!("  {key:<22} {text}"),
            None => crate::outln!("  {key:<22} {value}"),
        }
    }
}

/// The cluster-wide settings every node runs with, as the file spells them.
fn settings(file: &ClusterFile) -> Vec<(String, serde_json::Value)> {
    let mode = crate::apply::Mode::from(file.mode).name();
    [
        ("cluster_id", json!(file.cluster_id)),
        ("secret", json!(given(&file.secret, &file.secret_file))),
        (
            "client_secret",
            json!(given(&file.client_secret, &file.client_secret_file)),
        ),
        ("operator_secret", json!(operator(file))),
        ("rotating", json!(rotating(file))),
        (
            "tls_ca_file",
            json!(file.tls_ca_file.as_ref().map(|p| p.display().to_string())),
        ),
        (
            "tls_require_client_cert",
            json!(file.tls_require_client_cert),
        ),
        ("mode", json!(mode)),
        ("entry_commands_max", json!(file.entry_commands_max)),
        ("capacity_bytes", json!(file.capacity_bytes)),
        ("sessions_max", json!(file.sessions_max)),
        ("session_retention_s", json!(file.session_retention_s)),
        ("pipeline_entries_max", json!(file.pipeline_entries_max)),
        ("tick_ms", json!(file.tick_ms)),
        ("election_ticks_min", json!(file.election_ticks_min)),
        ("heartbeat_ticks", json!(file.heartbeat_ticks)),
        ("seed", json!(file.seed)),
        ("snapshot_every", json!(file.snapshot_every)),
        ("snapshot_retain_ms", json!(file.snapshot_retain_ms)),
        ("snapshot_deltas", json!(file.snapshot_deltas)),
        ("lagging_entries_max", json!(file.lagging_entries_max)),
        ("changes_retain_entries", json!(file.changes_retain_entries)),
        ("change_stream", json!(file.change_stream)),
        ("wal_segment_bytes", json!(file.wal_segment_bytes)),
        ("fsync_delay_ms", json!(file.fsync_delay_ms)),
        ("wal_io", json!(file.wal_io.as_str())),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect()
}

/// Where a secret comes from: inline, a file, or nowhere.
fn given<T>(inline: &Option<T>, file: &Option<PathBuf>) -> String {
    match (inline, file) {
        (Some(_), _) => "inline".to_string(),
        (None, Some(path)) => format!("file {}", path.display()),
        (None, None) => "not set".to_string(),
    }
}

/// Where the operator credential comes from.
fn operator(file: &ClusterFile) -> String {
    match file.has_operator_secret() {
        true => given(&file.operator_secret, &file.operator_secret_file),
        false => "not set: operators prove the peer secret".to_string(),
    }
}

/// The credentials whose previous secret is still accepted (a rotation under way).
fn rotating(file: &ClusterFile) -> Vec<&'static str> {
    [
        ("secret", &file.previous_secret, &file.previous_secret_file),
        (
            "client_secret",
            &file.previous_client_secret,
            &file.previous_client_secret_file,
        ),
        (
            "operator_secret",
            &file.previous_operator_secret,
            &file.previous_operator_secret_file,
        ),
    ]
    .into_iter()
    .filter(|(_, inline, path)| inline.is_some() || path.is_some())
    .map(|(name, _, _)| name)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::cluster_file::loopback_node;

    /// Proves `check --json FILE` writes the verdict to FILE, and a file with an error is
    /// refused with the error in the JSON.
    #[test]
    fn check_writes_its_json_to_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let node = |id: u8| loopback_node(id, 7100, dir.path().join(format!("node{id}")));
        let mut file = ClusterFile::new("sixteen bytes at least", (1..=3).map(node).collect());
        let (cluster, json) = (
            dir.path().join("cluster.toml"),
            dir.path().join("check.json"),
        );
        file.write(&cluster).unwrap();
        let args = |json: &std::path::Path| CheckArgs {
            cluster: cluster.clone(),
            output: crate::cli::OutputArgs {
                output: crate::cli::Output::Table,
                json: Some(json.to_path_buf()),
            },
        };
        check(args(&json)).unwrap();
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(value["valid"], true);
        file.tick_ms = 0;
        file.write(&cluster).unwrap();
        let refused = check(args(&json)).unwrap_err();
        assert_eq!(crate::cli::Exit::of(&refused), crate::cli::Exit::Usage);
        let value: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(value["valid"], false);
        assert!(
            value["errors"][0].as_str().unwrap().contains("tick_ms"),
            "{value}"
        );
    }
}
