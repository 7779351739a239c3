//! Operator requests: the execution mode, the cluster's members, handler upgrades (and, in
//! `cli::backup`, backups). Each needs an [`OperatorConfig`], which holds an operator key:
//! an application's [`ClientConfig`](super::ClientConfig) cannot make one, and a node refuses
//! them from a connection that did not prove the operator credential.

use super::{ClientError, Connects, ask, unexpected};
use crate::address::Address;
use net::auth::{Key, OperatorKey};
use net::message::{ClientReply, ClientRequest, ClientRole, MemberChange, Mode, Refusal};
use net::tls::Tls;
use std::time::Duration;

/// A node refused an operator command for good: another cluster or version, or a credential
/// that is not the operator's. It names the node, the command and what the node said of the
/// key, and for a credential what an operator uses instead.
#[derive(Debug, thiserror::Error)]
#[error("node {node} refused {command}: {refusal}{}", instead(.refusal))]
pub struct OperatorRefused {
    /// The command (`mode`, `member`, `backup`, `upgrade`).
    pub command: &'static str,
    /// The node that refused.
    pub node: u8,
    /// What it said.
    pub refusal: Refusal,
}

impl OperatorRefused {
    /// The refusal in `error`, if it is one, as node `node`'s refusal of `command`.
    pub fn of(command: &'static str, node: u8, error: &ClientError) -> Option<OperatorRefused> {
        let ClientError::Refused(refusal) = error else {
            return None;
        };
        Some(OperatorRefused {
            command,
            node,
            refusal: refusal.clone(),
        })
    }
}

/// What an operator uses instead, after a refusal of its credential ("" after another).
fn instead(refusal: &Refusal) -> &'static str {
    let named = matches!(
        refusal,
        Refusal::Forbidden {
            role: ClientRole::Application
        } | Refusal::WrongCredential {
            needs: ClientRole::Operator,
            ..
        }
    );
    if *refusal == Refusal::Unauthenticated {
        "; mode, member, backup and upgrade need the operator credential: use the cluster file \
         (its operator_secret, or its peer secret where it sets none) or the operator file that \
         `client-file --operator` writes"
    } else if named {
        ": use the cluster file (its operator_secret, or its peer secret where it sets none) or \
         the operator file that `client-file --operator` writes"
    } else {
        ""
    }
}

/// Where and how an operator reaches a cluster.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// The cluster's id.
    pub cluster_id: u64,
    /// Every node's client address (a name is resolved at every connection).
    pub nodes: Vec<Address>,
    /// The operator key.
    pub key: OperatorKey,
    /// During a rotation, the operator key before `key`: proved to a node that refuses the
    /// new one.
    pub previous_key: Option<OperatorKey>,
    /// TLS to every node, for a cluster that speaks it.
    pub tls: Option<Tls>,
}

impl OperatorConfig {
    /// The operator holding `key`, for the nodes at `nodes` (their client addresses).
    pub fn new<A: Into<Address>>(
        cluster_id: u64,
        nodes: impl IntoIterator<Item = A>,
        key: OperatorKey,
    ) -> Self {
        OperatorConfig {
            cluster_id,
            nodes: nodes.into_iter().map(Into::into).collect(),
            key,
            previous_key: None,
            tls: None,
        }
    }
}

impl Connects for OperatorConfig {
    fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    fn proofs(&self) -> Vec<Option<&Key>> {
        let previous = self.previous_key.iter().map(|key| Some(key.key()));
        std::iter::once(Some(self.key.key()))
            .chain(previous)
            .collect()
    }

    fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }
}

/// Sets the execution mode of one node (a cluster's operator sets it on every node).
pub async fn set_node_mode(
    config: &OperatorConfig,
    address: &Address,
    mode: Mode,
    timeout: Duration,
) -> Result<(), ClientError> {
    let reply = ask(config, address, &ClientRequest::SetMode(mode), timeout).await?;
    if let ClientReply::ModeSet(set) = reply
        && set == mode
    {
        return Ok(());
    }
    Err(unexpected(address, &reply))
}

/// Asks one node to change the cluster's members by one node; the node's answer as it gave
/// it (a leader's `MembersChanging` or `MembersRefused`, another's `NotLeader`).
pub async fn change_members(
    config: &OperatorConfig,
    address: &Address,
    change: &MemberChange,
    timeout: Duration,
) -> Result<ClientReply, ClientError> {
    let request = ClientRequest::ChangeMembers(change.clone());
    ask(config, address, &request, timeout).await
}

/// Asks one node to put handler `version` in force through the log; the node's answer as it
/// gave it (a leader's `Upgrading` or `UpgradeRefused`, another's `NotLeader`).
pub async fn upgrade_handler(
    config: &OperatorConfig,
    address: &Address,
    version: u32,
    timeout: Duration,
) -> Result<ClientReply, ClientError> {
    ask(config, address, &ClientRequest::Upgrade(version), timeout).await
}
