//! `mode`: switches every node of a cluster to Verify or Performance; each node keeps the
//! choice in its data directory, so that it outlasts restarts.

use super::{mode_name, runtime};
use crate::apply::Mode;
use crate::client::{OperatorRefused, set_node_mode};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// How long one node has to answer `mode`, in milliseconds.
pub const MODE_TIMEOUT_MS: u64 = 2_000;

/// Options of `mode`.
#[derive(Args, Debug)]
pub struct ModeArgs {
    /// The cluster file.
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The mode every node uses when it leads: `verify` or `performance`.
    #[arg(value_enum)]
    pub mode: ModeChoice,
    /// A line per node, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// The modes `mode` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeChoice {
    /// Execute again after commit and compare with the simulation.
    Verify,
    /// Reuse the leader's simulations after commit.
    Performance,
}

impl From<ModeChoice> for Mode {
    fn from(choice: ModeChoice) -> Mode {
        match choice {
            ModeChoice::Verify => Mode::Verify,
            ModeChoice::Performance => Mode::Performance,
        }
    }
}

/// `mode` did not reach every node: those that did switched, the others did not.
#[derive(Debug, thiserror::Error)]
#[error("the mode was not set on every node: {}", .0.join("; "))]
pub struct ModeNotSet(pub Vec<String>);

/// Sets the mode on every node of the cluster file, prints a line per node, and fails when a
/// node did not take it (run it again once that node is up: the others keep theirs).
pub fn mode(args: ModeArgs) -> anyhow::Result<()> {
    let file = super::read_cluster_file(&args.cluster)?;
    let client = file.operator_config()?;
    let mode = Mode::from(args.mode);
    let timeout = Duration::from_millis(MODE_TIMEOUT_MS);
    let answers = runtime()?.block_on(async {
        let mut answers = Vec::new();
        for node in &file.nodes {
            let set = set_node_mode(&client, &node.client_address, mode, timeout).await;
            answers.push((node.id, set));
        }
        answers
    });
    let failed: Vec<String> = answers
        .iter()
        .filter_map(|(id, answer)| answer.as_ref().err().map(|e| format!("node {id}: {e}")))
        .collect();
    let nodes: Vec<serde_json::Value> = answers
        .iter()
        .map(|(id, answer)| {
            let error = answer.as_ref().err().map(|e| e.to_string());
            serde_json::json!({ "id": id, "set": answer.is_ok(), "error": error })
        })
        .collect();
    let json = serde_json::json!({ "mode": mode_name(mode), "nodes": nodes });
    args.output.emit(&json, || {
        for (id, answer) in &answers {
            match answer {
                Ok(()) => crate::outln!("node {id}: {}", mode_name(mode)),
                Err(error) => crate::outln!("node {id}: not set: {error}"),
            }
        }
    })?;
    // A node that refused the credential (or the cluster) says so: another try cannot help.
    let refused = answers.iter().find_map(|(id, answer)| {
        let error = answer.as_ref().err()?;
        OperatorRefused::of("mode", *id, error)
    });
    match (refused, failed.is_empty()) {
        (Some(refused), _) => Err(refused.into()),
        (None, true) => Ok(()),
        (None, false) => Err(ModeNotSet(failed).into()),
    }
}
