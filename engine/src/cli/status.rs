//! `status`: every node's role, term, indexes and state hash, and whether the cluster is
//! healthy (exit 0), degraded (1) or unreachable (2: no node answered within `--timeout`);
//! `--wait SECS` waits until it is healthy, for scripts.

use super::{mode_name, runtime};
use crate::client::{ClientError, Connects, node_build, node_status};
use crate::ids::{EntryIndex, NodeId};
use crate::node::{ClientFile, ClusterFile};
use clap::Args;
use net::message::{BuildInfo, NodeStatus, Role};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the nodes have to answer `status` by default (`--timeout`), in seconds.
pub const STATUS_TIMEOUT_S_DEFAULT: f64 = 2.0;

/// The longest `--timeout` of `status` and `client`, in seconds (a day).
pub const TIMEOUT_S_MAX: f64 = 86_400.0;

/// Time between two looks at the cluster while `--wait` lasts, in milliseconds.
pub const STATUS_POLL_MS: u64 = 200;

/// The longest `--wait`, in seconds (a day).
pub const STATUS_WAIT_S_MAX: f64 = 86_400.0;

/// Options of `status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The cluster file, or a client file (`client-file` writes one).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// The table, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
    /// Wait up to SECS for the cluster to be healthy (every node reachable, none halted,
    /// diverged or out of disk, a leader a majority follows), then report; without it,
    /// report at once. Either way it exits 1 (negative) when the cluster is degraded, and 2
    /// (unreachable) when no node answered.
    #[arg(long, value_name = "SECS", value_parser = wait_seconds)]
    pub wait: Option<f64>,
    /// Healthy also means converged: every node has applied the newest committed entry and
    /// holds the same state hash there (a script that compares hashes right after a run
    /// waits for this, with --wait; a cluster under load may never be still long enough).
    #[arg(long)]
    pub converged: bool,
    /// Seconds the nodes have to answer each look (they are asked at once); a node silent
    /// past it is unreachable.
    #[arg(long, value_name = "SECS", value_parser = timeout_seconds,
          default_value_t = STATUS_TIMEOUT_S_DEFAULT)]
    pub timeout: f64,
}

/// What makes a cluster unhealthy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// The node did not answer within `--timeout`.
    #[error("node {0} is unreachable")]
    Unreachable(NodeId),
    /// The node stopped applying.
    #[error("node {node} halted: {reason}")]
    Halted {
        /// The node.
        node: NodeId,
        /// Why, as it says.
        reason: String,
    },
    /// The node found another replica's state hash different from its own.
    #[error("node {node} found a divergence after entry {index}")]
    Diverged {
        /// The node.
        node: NodeId,
        /// The entry after which the hashes differ.
        index: EntryIndex,
    },
    /// The node's disk is full: it takes no new requests.
    #[error("node {0} is out of disk")]
    StorageFull(NodeId),
    /// No node leads with a majority of the cluster following it.
    #[error("no leader that a majority of the nodes follow")]
    NoLeader,
    /// With `--converged`: the nodes have not all applied the newest committed entry, or
    /// hold different state hashes there.
    #[error("not converged: {0}")]
    NotConverged(String),
}

/// `status` found the cluster not healthy.
#[derive(Debug, thiserror::Error)]
#[error("the cluster is not healthy: {}", list(.problems))]
pub struct Unhealthy {
    /// What is wrong.
    pub problems: Vec<Problem>,
    /// How many nodes answered (none: the cluster is unreachable, not degraded).
    pub answered: usize,
    /// How many nodes refused this credential (another cluster, version or key).
    pub refused: usize,
}

impl Unhealthy {
    /// Degraded when some node answered; when none did, refused if any refused the
    /// credential, else unreachable.
    pub fn exit(&self) -> super::Exit {
        match (self.answered, self.refused) {
            (0, 0) => super::Exit::Unreachable,
            (0, _) => super::Exit::Refused,
            (_, _) => super::Exit::Negative,
        }
    }
}

fn list(problems: &[Problem]) -> String {
    let words: Vec<String> = problems.iter().map(Problem::to_string).collect();
    words.join("; ")
}

/// Each node of the cluster file with its answer.
type Statuses = Vec<(NodeId, Result<NodeStatus, ClientError>)>;

/// Each node's build, in the order of [`Statuses`]: `None` where the node did not answer its
/// status, an error where it did not answer the question (a build from before it existed).
type Builds = Vec<Option<Result<BuildInfo, ClientError>>>;

/// Prints every node's role, term, indexes and state hash (after waiting, with `--wait`, for
/// the cluster to be healthy); an unhealthy cluster is an `Unhealthy` error.
pub fn status(args: StatusArgs) -> anyhow::Result<()> {
    let file = super::read_client_file(&args.cluster)?;
    let wait = Duration::from_secs_f64(args.wait.unwrap_or(0.0));
    let timeout = Duration::from_secs_f64(args.timeout);
    // The client secret where the file has one; else, from a cluster file (an operator's
    // copy, with no client secret), the operator credential: either role may ask.
    let operator = match (&file.client_secret, ClusterFile::parse(&args.cluster)) {
        (None, Ok(cluster)) => cluster.operator_config().ok(),
        (Some(_), _) | (None, Err(_)) => None,
    };
    let look = Look {
        wait,
        timeout,
        converged: args.converged,
    };
    let (statuses, builds) = match operator {
        Some(operator) => runtime()?.block_on(look_with_builds(&file, &operator, look)),
        None => {
            let client = file.client_config()?;
            runtime()?.block_on(look_with_builds(&file, &client, look))
        }
    };
    let found = look.problems(&answered(&statuses));
    let json = status_json(&statuses, &builds, &found);
    args.output
        .emit(&json, || print_table(&statuses, &builds))?;
    if found.is_empty() {
        return Ok(());
    }
    let answered = statuses.iter().filter(|(_, s)| s.is_ok()).count();
    let refused = statuses.iter().filter(|(_, s)| is_refusal(s)).count();
    Err(Unhealthy {
        problems: found,
        answered,
        refused,
    }
    .into())
}

/// True for a node that refused the credential.
fn is_refusal(status: &Result<NodeStatus, ClientError>) -> bool {
    match status {
        Err(error) => super::Exit::of_client(error) == super::Exit::Refused,
        Ok(_) => false,
    }
}

/// How `status` looks at the cluster.
#[derive(Clone, Copy, Debug)]
struct Look {
    /// How long to wait for the cluster to be healthy.
    wait: Duration,
    /// How long each node has to answer.
    timeout: Duration,
    /// Whether healthy includes converged.
    converged: bool,
}

impl Look {
    /// What keeps the cluster from being healthy, convergence included when asked.
    fn problems(&self, nodes: &[(NodeId, Option<&NodeStatus>)]) -> Vec<Problem> {
        let mut found = problems(nodes);
        if self.converged
            && let Some(apart) = convergence(nodes)
        {
            found.push(apart);
        }
        found
    }
}

/// Looks at every node until the cluster is healthy or the wait has passed; logs, once a
/// second, what it still waits for.
async fn look_until_healthy(file: &ClientFile, client: &impl Connects, how: Look) -> Statuses {
    let started = Instant::now();
    let mut said = Instant::now();
    loop {
        let statuses = look(file, client, how.timeout).await;
        let found = how.problems(&answered(&statuses));
        if found.is_empty() || started.elapsed() >= how.wait {
            return statuses;
        }
        if said.elapsed() >= Duration::from_secs(1) {
            let waited = started.elapsed().as_secs_f64();
            tracing::info!(
                waited_s = waited.round(),
                "status: waiting: {}",
                list(&found)
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(STATUS_POLL_MS)).await;
    }
}

/// The statuses once healthy (or once `wait` passed), then the build of each node that
/// answered.
async fn look_with_builds(
    file: &ClientFile,
    client: &impl Connects,
    how: Look,
) -> (Statuses, Builds) {
    let timeout = how.timeout;
    let statuses = look_until_healthy(file, client, how).await;
    let asks = file
        .nodes
        .iter()
        .zip(&statuses)
        .map(|(node, (_, status))| async move {
            if status.is_err() {
                return None;
            }
            let asked = node_build(client, &node.client_address, timeout);
            Some(match tokio::time::timeout(timeout, asked).await {
                Ok(build) => build,
                Err(_) => Err(ClientError::Unreachable("no answer about its build".into())),
            })
        });
    let builds = futures::future::join_all(asks).await;
    (statuses, builds)
}

/// Every node's answer, all asked at once, each within `timeout`.
async fn look(file: &ClientFile, client: &impl Connects, timeout: Duration) -> Statuses {
    let asks = file.nodes.iter().map(|node| async move {
        let asked = node_status(client, &node.client_address, timeout);
        let status = match tokio::time::timeout(timeout, asked).await {
            Ok(status) => status,
            Err(_) => Err(ClientError::Unreachable(format!(
                "no answer within {:.1} s",
                timeout.as_secs_f64()
            ))),
        };
        (NodeId(node.id), status)
    });
    futures::future::join_all(asks).await
}

fn answered(statuses: &Statuses) -> Vec<(NodeId, Option<&NodeStatus>)> {
    statuses
        .iter()
        .map(|(id, status)| (*id, status.as_ref().ok()))
        .collect()
}

/// What keeps the cluster of these nodes (each with its answer, `None` for none) from being
/// healthy: every node reachable, none halted, diverged or out of disk, and a leader (the
/// highest term's) that a majority of all the nodes name as theirs.
pub fn problems(nodes: &[(NodeId, Option<&NodeStatus>)]) -> Vec<Problem> {
    let mut found = Vec::new();
    for &(id, status) in nodes {
        let Some(s) = status else {
            found.push(Problem::Unreachable(id));
            continue;
        };
        if let Some(reason) = &s.halted {
            let reason = reason.clone();
            found.push(Problem::Halted { node: id, reason });
        }
        if let Some(divergence) = &s.divergence {
            let index = divergence.index;
            found.push(Problem::Diverged { node: id, index });
        }
        if s.storage_full {
            found.push(Problem::StorageFull(id));
        }
    }
    let leader = nodes
        .iter()
        .filter_map(|(_, s)| *s)
        .filter(|s| s.role == Role::Leader)
        .max_by_key(|s| s.term)
        .map(|s| s.node);
    let following = nodes
        .iter()
        .filter(|(_, s)| s.is_some_and(|s| leader.is_some() && s.leader == leader))
        .count();
    if following * 2 <= nodes.len() {
        found.push(Problem::NoLeader);
    }
    found
}

/// Why the nodes that answered have not converged, if they have not: one of them has not
/// applied the newest entry any of them knows committed, or two hold different hashes
/// there. (Nodes that did not answer are [`Problem::Unreachable`] already.)
pub fn convergence(nodes: &[(NodeId, Option<&NodeStatus>)]) -> Option<Problem> {
    let answered: Vec<&NodeStatus> = nodes.iter().filter_map(|(_, s)| *s).collect();
    let commit = answered.iter().map(|s| s.commit_index).max()?;
    let behind: Vec<String> = answered
        .iter()
        .filter(|s| s.applied_index < commit)
        .map(|s| format!("node {} applied {}", s.node, s.applied_index))
        .collect();
    if !behind.is_empty() {
        return Some(Problem::NotConverged(format!(
            "{} of committed {commit}",
            behind.join(", ")
        )));
    }
    let first = answered.first()?;
    let apart = answered
        .iter()
        .find(|s| (s.applied_index, s.state_hash) != (first.applied_index, first.state_hash))?;
    Some(Problem::NotConverged(format!(
        "node {} at {} has hash {}, node {} at {} has {}",
        first.node,
        first.applied_index,
        first.state_hash,
        apart.node,
        apart.applied_index,
        apart.state_hash
    )))
}

fn status_json(statuses: &Statuses, builds: &Builds, found: &[Problem]) -> Value {
    let nodes: Vec<Value> = statuses
        .iter()
        .zip(builds)
        .map(|((id, status), build)| match status {
            Ok(s) => {
                let mut node = node_json(*id, s);
                node["build"] = build_json(build.as_ref());
                node
            }
            Err(error) => json!({ "id": id.0, "reachable": false, "error": error.to_string() }),
        })
        .collect();
    let problems: Vec<String> = found.iter().map(Problem::to_string).collect();
    json!({
        "healthy": found.is_empty(),
        "converged": statuses.iter().all(|(_, s)| s.is_ok())
            && convergence(&answered(statuses)).is_none(),
        "problems": problems,
        "mixed_builds": mixed(builds),
        "nodes": nodes,
    })
}

/// A node's build as JSON: its version, commit and formats, or why it is not known.
fn build_json(build: Option<&Result<BuildInfo, ClientError>>) -> Value {
    match build {
        Some(Ok(b)) => json!({ "version": b.version, "commit": b.commit, "formats": b.formats }),
        Some(Err(error)) if older(error) => json!({ "older": true }),
        Some(Err(error)) => json!({ "unknown": error.to_string() }),
        None => Value::Null,
    }
}

/// True when the nodes do not all run the same build (a rolling upgrade in progress, or one
/// left half done). A node that cannot decode the question runs a build from before it
/// existed: a build of its own; a node that did not answer counts for nothing.
fn mixed(builds: &Builds) -> bool {
    let mut known = builds.iter().flatten().filter_map(|build| match build {
        Ok(build) => Some(Some(build)),
        Err(error) if older(error) => Some(None),
        Err(_) => None,
    });
    let Some(first) = known.next() else {
        return false;
    };
    known.any(|b| b != first)
}

/// True for the refusal a build from before the `Build` question gives it.
fn older(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Refused(net::message::Refusal::Undecodable)
    )
}

/// A build in a table cell: the version and the commit's first 10 digits.
fn build_cell(build: Option<&Result<BuildInfo, ClientError>>) -> String {
    match build {
        Some(Ok(b)) => format!("{} {}", b.version, b.commit.get(..10).unwrap_or(&b.commit)),
        Some(Err(error)) if older(error) => "older".into(),
        Some(Err(_)) => "?".into(),
        None => "-".into(),
    }
}

fn node_json(id: NodeId, s: &NodeStatus) -> Value {
    json!({
        "id": id.0,
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
        "storage_full": s.storage_full,
        "mode": mode_name(s.mode),
        "members": s.members.iter().map(|m| m.0).collect::<Vec<_>>(),
        "members_pending": s.members_pending,
    })
}

fn print_table(statuses: &Statuses, builds: &Builds) {
    crate::outln!(
        "{:>4} {:<10} {:>6} {:>6} {:>10} {:>10} {:>10} {:<18} {:<17} notes",
        "node",
        "role",
        "term",
        "leader",
        "last",
        "commit",
        "applied",
        "state hash",
        "build"
    );
    for ((id, status), build) in statuses.iter().zip(builds) {
        match status {
            Ok(s) => crate::outln!(
                "{:>4} {:<10} {:>6} {:>6} {:>10} {:>10} {:>10} {:<18} {:<17} {}",
                id,
                format!("{:?}", s.role).to_lowercase(),
                s.term.0,
                s.leader.map_or("-".into(), |l| l.to_string()),
                s.last_index.0,
                s.commit_index.0,
                s.applied_index.0,
                s.state_hash.to_string(),
                build_cell(build.as_ref()),
                notes(s)
            ),
            Err(error) => crate::outln!("{id:>4} unreachable: {error}"),
        }
    }
    if mixed(builds) {
        crate::outln!("mixed builds: the nodes run different builds (a rolling upgrade?)");
    }
}

/// What the table's last column says of a node: halted, diverged, out of disk.
fn notes(s: &NodeStatus) -> String {
    let mut notes = Vec::new();
    if let Some(reason) = &s.halted {
        notes.push(format!("halted: {reason}"));
    }
    if let Some(d) = &s.divergence {
        notes.push(format!("divergence at {}", d.index));
    }
    if s.storage_full {
        notes.push("out of disk".to_string());
    }
    notes.join("; ")
}

/// Why a text is not a number of seconds an option takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecondsError {
    /// Not a number.
    #[error("{0}")]
    NotANumber(std::num::ParseFloatError),
    /// `--wait`: below 0 or over `STATUS_WAIT_S_MAX`.
    #[error("between 0 and {STATUS_WAIT_S_MAX} seconds")]
    WaitOutOfRange,
    /// `--timeout`: not above 0, or over [`TIMEOUT_S_MAX`].
    #[error("above 0 and at most {TIMEOUT_S_MAX} seconds")]
    TimeoutOutOfRange,
}

/// `--wait`'s value: seconds, 0 to [`STATUS_WAIT_S_MAX`].
fn wait_seconds(text: &str) -> Result<f64, SecondsError> {
    let seconds: f64 = text.parse().map_err(SecondsError::NotANumber)?;
    if (0.0..=STATUS_WAIT_S_MAX).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(SecondsError::WaitOutOfRange)
    }
}

/// `--timeout`'s value: seconds, above 0 and at most [`TIMEOUT_S_MAX`].
pub fn timeout_seconds(text: &str) -> Result<f64, SecondsError> {
    let seconds: f64 = text.parse().map_err(SecondsError::NotANumber)?;
    if seconds > 0.0 && seconds <= TIMEOUT_S_MAX {
        Ok(seconds)
    } else {
        Err(SecondsError::TimeoutOutOfRange)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Term;
    use net::message::Divergence;

    fn node(id: u8, role: Role, term: u64, leader: Option<u8>) -> NodeStatus {
        NodeStatus {
            node: NodeId(id),
            role,
            term: Term(term),
            leader: leader.map(NodeId),
            last_index: EntryIndex(10),
            commit_index: EntryIndex(10),
            applied_index: EntryIndex(10),
            state_hash: Default::default(),
            divergence: None,
            halted: None,
            storage_full: false,
            mode: Default::default(),
            stages: Default::default(),
            members: vec![NodeId(1), NodeId(2), NodeId(3)],
            members_pending: false,
        }
    }

    fn check(nodes: &[Option<NodeStatus>]) -> Vec<Problem> {
        let answered: Vec<(NodeId, Option<&NodeStatus>)> = nodes
            .iter()
            .enumerate()
            .map(|(at, s)| (NodeId(at as u8 + 1), s.as_ref()))
            .collect();
        problems(&answered)
    }

    /// Proves convergence: every node applied the newest committed entry with one hash; a
    /// node behind, or one hash apart at the same entry, is named, and `--converged` makes
    /// it a problem while plain health ignores it.
    #[test]
    fn convergence_names_the_node_behind_or_apart() {
        let nodes = |statuses: &[NodeStatus]| -> Vec<(NodeId, Option<NodeStatus>)> {
            statuses.iter().map(|s| (s.node, Some(s.clone()))).collect()
        };
        let view = |owned: &[(NodeId, Option<NodeStatus>)]| -> Vec<Problem> {
            let nodes: Vec<(NodeId, Option<&NodeStatus>)> =
                owned.iter().map(|(id, s)| (*id, s.as_ref())).collect();
            convergence(&nodes).into_iter().collect()
        };
        let leader = node(1, Role::Leader, 3, Some(1));
        let follower = node(2, Role::Follower, 3, Some(1));
        let mut behind = node(3, Role::Follower, 3, Some(1));
        assert!(view(&nodes(&[leader.clone(), follower.clone(), behind.clone()])).is_empty());
        behind.applied_index = EntryIndex(9);
        let found = view(&nodes(&[leader.clone(), follower.clone(), behind.clone()]));
        assert_eq!(
            found,
            vec![Problem::NotConverged(
                "node 3 applied 9 of committed 10".into()
            )]
        );
        behind.applied_index = EntryIndex(10);
        behind.state_hash = crate::state::StateHash([7; 32]);
        let found = view(&nodes(&[leader.clone(), follower.clone(), behind.clone()]));
        let [Problem::NotConverged(text)] = found.as_slice() else {
            panic!("{found:?}")
        };
        assert!(text.starts_with("node 1 at 10 has hash") && text.contains("node 3 at 10"));
        let owned = nodes(&[leader, follower, behind]);
        let borrowed: Vec<(NodeId, Option<&NodeStatus>)> =
            owned.iter().map(|(id, s)| (*id, s.as_ref())).collect();
        let plain = Look {
            wait: Duration::ZERO,
            timeout: Duration::ZERO,
            converged: false,
        };
        assert!(
            plain.problems(&borrowed).is_empty(),
            "healthy without --converged"
        );
        let strict = Look {
            converged: true,
            ..plain
        };
        assert_eq!(strict.problems(&borrowed).len(), 1);
    }

    /// Proves the health rule: a leader that a majority follows with every node well is
    /// healthy; each kind of trouble is named with its node; no leader, or a leader only a
    /// minority follows (a stale one of a lower term included), is `NoLeader`.
    #[test]
    fn health_names_what_is_wrong() {
        let leader = node(1, Role::Leader, 3, Some(1));
        let follower = |id| node(id, Role::Follower, 3, Some(1));
        let well = [Some(leader.clone()), Some(follower(2)), Some(follower(3))];
        assert_eq!(check(&well), vec![]);
        let one_down = [Some(leader.clone()), Some(follower(2)), None];
        assert_eq!(check(&one_down), vec![Problem::Unreachable(NodeId(3))]);
        let mut halted = follower(2);
        halted.halted = Some("fsync failed".into());
        let mut full = follower(3);
        full.storage_full = true;
        full.divergence = Some(Divergence {
            index: EntryIndex(7),
            local: (NodeId(3), Default::default()),
            remote: (NodeId(1), Default::default()),
        });
        let troubled = check(&[Some(leader.clone()), Some(halted), Some(full)]);
        assert_eq!(
            troubled,
            vec![
                Problem::Halted {
                    node: NodeId(2),
                    reason: "fsync failed".into()
                },
                Problem::Diverged {
                    node: NodeId(3),
                    index: EntryIndex(7)
                },
                Problem::StorageFull(NodeId(3)),
            ]
        );
        let candidates = [2, 3].map(|id| Some(node(id, Role::Candidate, 4, None)));
        let no_leader = [
            Some(leader.clone()),
            candidates[0].clone(),
            candidates[1].clone(),
        ];
        assert_eq!(check(&no_leader), vec![Problem::NoLeader]);
        let newer = node(2, Role::Leader, 5, Some(2));
        let split = [Some(leader), Some(newer), None];
        assert_eq!(
            check(&split),
            vec![Problem::Unreachable(NodeId(3)), Problem::NoLeader]
        );
    }

    /// Proves builds are mixed when two nodes tell different builds, or when one is too old
    /// to tell (it refuses the question as undecodable), and not when a node merely did not
    /// answer.
    #[test]
    fn builds_are_mixed_when_a_node_runs_another_or_an_older_one() {
        let build = |commit: &str| {
            Some(Ok(BuildInfo {
                version: "0.1.0".into(),
                commit: commit.into(),
                formats: String::new(),
            }))
        };
        let older = || {
            Some(Err(ClientError::Refused(
                net::message::Refusal::Undecodable,
            )))
        };
        let silent = || Some(Err(ClientError::Unreachable("timed out".into())));
        assert!(!mixed(&vec![build("a"), build("a"), None]));
        assert!(mixed(&vec![build("a"), build("b"), build("a")]));
        assert!(mixed(&vec![build("a"), build("a"), older()]));
        assert!(!mixed(&vec![build("a"), silent(), build("a")]));
        assert_eq!(build_cell(older().as_ref()), "older");
        assert_eq!(build_cell(silent().as_ref()), "?");
    }

    #[test]
    fn wait_is_bounded() {
        assert_eq!(wait_seconds("2.5"), Ok(2.5));
        assert!(wait_seconds("-1").is_err() && wait_seconds("100000").is_err());
        assert!(wait_seconds("soon").is_err());
        assert_eq!(timeout_seconds("0.5"), Ok(0.5));
        assert!(timeout_seconds("0").is_err() && timeout_seconds("1e9").is_err());
    }
}
