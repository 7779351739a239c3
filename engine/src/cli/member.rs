//! `member`: changes a running cluster's members one node at a time, through the leader's log
//! (`add`, `remove`, `replace`), and waits until the change is committed (and a new node has
//! caught up). See `notes/decisions/membership.md` and the runbook in `notes/operations.md`.

use super::runtime;
use crate::address::Address;
use crate::client::{ClientError, OperatorConfig, OperatorRefused, change_members, node_status};
use crate::ids::{EntryIndex, NodeId};
use crate::members::{Member, MemberChange};
use crate::node::{ClusterFile, NodeEntry};
use clap::{Args, Subcommand};
use net::message::{ClientReply, MembersRefusal, NodeStatus, Role};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long one node has to answer, in milliseconds.
pub const MEMBER_TIMEOUT_MS: u64 = 2_000;
/// Time between two looks at the cluster while a change settles, in milliseconds.
pub const MEMBER_POLL_MS: u64 = 100;
/// How long a change may take by default (commit, and a new node's catching up), in seconds.
pub const MEMBER_WAIT_S_DEFAULT: u64 = 120;

/// Options of `member`.
#[derive(Args, Debug)]
pub struct MemberArgs {
    /// What to change.
    #[command(subcommand)]
    pub action: MemberAction,
}

/// The changes `member` makes.
#[derive(Subcommand, Debug)]
pub enum MemberAction {
    /// Adds node ID, listed in the cluster file and started with `node --join`: waits until
    /// the change is committed and the node has caught up with the log.
    Add(OneNode),
    /// Removes node ID: waits until the change is committed (the node may then be stopped).
    Remove(OneNode),
    /// Replaces node OLD with node NEW (listed in the cluster file, started with `node
    /// --join`): adds NEW, waits until it has caught up, then removes OLD; a dead OLD (no
    /// answer) is removed first instead.
    Replace(Replace),
}

/// One node and the cluster.
#[derive(Args, Debug)]
pub struct OneNode {
    /// The cluster file (it lists the node to add, with its addresses).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The node.
    #[arg(long)]
    pub id: u8,
    /// Give up after SECS.
    #[arg(long, value_name = "SECS", default_value_t = MEMBER_WAIT_S_DEFAULT)]
    pub wait: u64,
    /// What standard output holds once the change is committed.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// `replace`'s options.
#[derive(Args, Debug)]
pub struct Replace {
    /// The cluster file (it lists the new node, with its addresses).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV)]
    pub cluster: PathBuf,
    /// The node leaving.
    #[arg(long)]
    pub old: u8,
    /// The node joining.
    #[arg(long)]
    pub new: u8,
    /// Give up after SECS (for the whole replacement).
    #[arg(long, value_name = "SECS", default_value_t = MEMBER_WAIT_S_DEFAULT)]
    pub wait: u64,
    /// What standard output holds once both changes are committed.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Why a change of members did not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemberError {
    /// The node to add is not in the cluster file (its addresses are needed).
    #[error("node {0} is not in the cluster file: add its [[nodes]] table first")]
    NotListed(u8),
    /// The leader refused the change.
    #[error("refused: {0}")]
    Refused(MembersRefusal),
    /// No leader answered, or the change did not settle, in time.
    #[error("gave up after {seconds} s: {doing}")]
    TimedOut {
        /// The wait.
        seconds: u64,
        /// What it waited for.
        doing: String,
    },
}

/// Runs `member`.
pub fn member(args: MemberArgs) -> anyhow::Result<()> {
    let (done, output) = match args.action {
        MemberAction::Add(one) => {
            let file = super::read_cluster_file(&one.cluster)?;
            let deadline = Instant::now() + Duration::from_secs(one.wait);
            let change = MemberChange::Add(listed(&file, one.id)?);
            let done = runtime()?.block_on(apply(&file, change, deadline, one.wait))?;
            (vec![done], one.output)
        }
        MemberAction::Remove(one) => {
            let file = super::read_cluster_file(&one.cluster)?;
            let deadline = Instant::now() + Duration::from_secs(one.wait);
            let change = MemberChange::Remove(NodeId(one.id));
            let done = runtime()?.block_on(apply(&file, change, deadline, one.wait))?;
            (vec![done], one.output)
        }
        MemberAction::Replace(replace) => {
            let done = runtime()?.block_on(replace_node(&replace))?;
            (done, replace.output)
        }
    };
    let json = serde_json::json!({
        "changes": done.iter().map(Committed::json).collect::<Vec<_>>(),
        "members": done.last().map(|c| c.members.clone()),
    });
    output.emit(&json, || {
        for committed in &done {
            crate::outln!(
                "{}: committed at entry {}; members now {:?}",
                committed.change,
                committed.index,
                committed.members
            );
        }
    })
}

/// A change of members once committed: what it was, its entry, the members after it.
struct Committed {
    change: String,
    index: u64,
    members: Vec<u8>,
}

impl Committed {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({ "change": self.change, "index": self.index, "members": self.members })
    }
}

/// Replaces OLD with NEW. While OLD answers, NEW is added first, so that the cluster keeps
/// its redundancy while NEW catches up. A dead OLD is removed first: beside it, an added
/// NEW would make a majority of four out of two live voters and a newcomer that cannot vote
/// until it holds the change (the leader refuses that addition for as long as OLD is
/// silent).
async fn replace_node(replace: &Replace) -> anyhow::Result<Vec<Committed>> {
    let file = super::read_cluster_file(&replace.cluster)?;
    let deadline = Instant::now() + Duration::from_secs(replace.wait);
    let add = MemberChange::Add(listed(&file, replace.new)?);
    let remove = MemberChange::Remove(NodeId(replace.old));
    let old = file.nodes.iter().find(|n| n.id == replace.old);
    let alive = match old {
        Some(old) => answers(&file, old).await?,
        None => false,
    };
    let order = if alive {
        [add, remove]
    } else {
        eprintln!(
            "node {} does not answer: removing it first, then adding node {}",
            replace.old, replace.new
        );
        [remove, add]
    };
    let [first, second] = order;
    let first = apply(&file, first, deadline, replace.wait).await?;
    let second = (apply(&file, second, deadline, replace.wait).await).map_err(|error| {
        let done = &first.change;
        error.context(format!("{done} is done; run the same command again"))
    })?;
    Ok(vec![first, second])
}

/// Whether the node at `address` answers a status request within [`MEMBER_TIMEOUT_MS`]:
/// no (dead) when it cannot be reached or stays silent; an error when it refuses the
/// credential or the file has none, since then no change could be made anyway.
async fn answers(file: &ClusterFile, node: &NodeEntry) -> anyhow::Result<bool> {
    let client = file.operator_config()?;
    let timeout = Duration::from_millis(MEMBER_TIMEOUT_MS);
    match node_status(&client, &node.client_address, timeout).await {
        Ok(_) => Ok(true),
        Err(error) => match OperatorRefused::of("member", node.id, &error) {
            Some(refused) => Err(refused.into()),
            None => Ok(false),
        },
    }
}

/// Node `id` as the cluster file lists it.
fn listed(file: &ClusterFile, id: u8) -> Result<Member, MemberError> {
    let entry: &NodeEntry = file
        .nodes
        .iter()
        .find(|n| n.id == id)
        .ok_or(MemberError::NotListed(id))?;
    Ok(Member {
        id: NodeId(id),
        peer_address: entry.peer_address.to_string(),
        client_address: entry.client_address.to_string(),
    })
}

/// Proposes `change` to the leader (asking again while it refuses for now), then waits until
/// it is committed, and for an added node until it has applied the change's entry.
async fn apply(
    file: &ClusterFile,
    change: MemberChange,
    deadline: Instant,
    seconds: u64,
) -> anyhow::Result<Committed> {
    let client = file.operator_config()?;
    let addresses: Vec<Address> = file
        .nodes
        .iter()
        .map(|n| n.client_address.clone())
        .collect();
    let timed_out = |doing: &str| MemberError::TimedOut {
        seconds,
        doing: doing.to_string(),
    };
    let (leader, index) = propose(&client, &file.nodes, &change, deadline)
        .await?
        .ok_or_else(|| match change {
            MemberChange::Add(_) => timed_out(
                "no leader took the change (a leader refuses to add a node while a member is \
                 down or behind: remove a dead member first)",
            ),
            MemberChange::Remove(_) => timed_out("no leader took the change"),
        })?;
    eprintln!(
        "{}: in the log at entry {index}, through {leader}",
        describe(&change)
    );
    let joining = match &change {
        MemberChange::Add(member) => file
            .nodes
            .iter()
            .find(|n| n.id == member.id.0)
            .map(|n| n.client_address.clone()),
        MemberChange::Remove(_) => None,
    };
    let members = settled(&client, &addresses, index, joining.as_ref(), deadline)
        .await
        .ok_or_else(|| timed_out("the change to be committed and the new node to catch up"))?;
    Ok(Committed {
        change: describe(&change),
        index: index.0,
        members: members.iter().map(|n| n.0).collect(),
    })
}

fn describe(change: &MemberChange) -> String {
    match change {
        MemberChange::Add(member) => format!("add node {}", member.id),
        MemberChange::Remove(id) => format!("remove node {id}"),
    }
}

/// Asks every node in turn until the leader takes `change`: its address and the entry.
/// `None` when none did by `deadline`; an error when the leader refused it for good.
async fn propose(
    client: &OperatorConfig,
    nodes: &[NodeEntry],
    change: &MemberChange,
    deadline: Instant,
) -> anyhow::Result<Option<(Address, EntryIndex)>> {
    let timeout = Duration::from_millis(MEMBER_TIMEOUT_MS);
    while Instant::now() < deadline {
        for node in nodes {
            let address = &node.client_address;
            match change_members(client, address, change, timeout).await {
                Ok(ClientReply::MembersChanging { index }) => {
                    return Ok(Some((address.clone(), index)));
                }
                Ok(ClientReply::MembersRefused(MembersRefusal::Invalid(reason))) => {
                    // An earlier attempt whose answer was lost may have made the change: then
                    // it is in the leader's members, and only its commit is left to wait for.
                    let status = node_status(client, address, timeout).await?;
                    if reflected(change, &status.members) {
                        return Ok(Some((address.clone(), status.last_index)));
                    }
                    return Err(MemberError::Refused(MembersRefusal::Invalid(reason)).into());
                }
                // This credential may not change members: asking again cannot help.
                Err(ClientError::Refused(refusal)) => {
                    let (command, node) = ("member", node.id);
                    return Err(OperatorRefused {
                        command,
                        node,
                        refusal,
                    }
                    .into());
                }
                // Not the leader, a leader not ready yet, a node down: the next one, or again.
                Ok(_) | Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(MEMBER_POLL_MS)).await;
    }
    Ok(None)
}

/// True when `members` are what `change` makes them (as to its node).
fn reflected(change: &MemberChange, members: &[NodeId]) -> bool {
    match change {
        MemberChange::Add(member) => members.contains(&member.id),
        MemberChange::Remove(id) => !members.contains(id),
    }
}

/// Waits until a leader's members have no change pending after `index` committed, and (for an
/// added node at `joining`) until that node has applied `index`: the members then.
async fn settled(
    client: &OperatorConfig,
    addresses: &[Address],
    index: EntryIndex,
    joining: Option<&Address>,
    deadline: Instant,
) -> Option<Vec<NodeId>> {
    let timeout = Duration::from_millis(MEMBER_TIMEOUT_MS);
    let mut last_progress = Instant::now();
    while Instant::now() < deadline {
        let leader = leader_status(client, addresses, timeout).await;
        let committed = leader
            .as_ref()
            .filter(|s| s.commit_index >= index && !s.members_pending);
        if let Some(leader) = committed {
            let caught_up = match joining {
                None => true,
                Some(address) => node_status(client, address, timeout)
                    .await
                    .is_ok_and(|s| s.applied_index >= index),
            };
            if caught_up {
                return Some(leader.members.clone());
            }
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            last_progress = Instant::now();
            let commit = leader.map_or(EntryIndex::ZERO, |s| s.commit_index);
            eprintln!("  waiting: leader's commit {commit}, change at {index}");
        }
        tokio::time::sleep(Duration::from_millis(MEMBER_POLL_MS)).await;
    }
    None
}

/// The status of the node that leads in the highest term, if one answers.
async fn leader_status(
    client: &OperatorConfig,
    addresses: &[Address],
    timeout: Duration,
) -> Option<NodeStatus> {
    let mut best: Option<NodeStatus> = None;
    for address in addresses {
        let Ok(status) = node_status(client, address, timeout).await else {
            continue;
        };
        if status.role == Role::Leader && best.as_ref().is_none_or(|b| status.term > b.term) {
            best = Some(status);
        }
    }
    best
}
