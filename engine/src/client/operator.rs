//! Operator requests: the execution mode, the cluster's members, handler upgrades (and, in
//! `cli::backup`, backups). Each needs an [`OperatorConfig`], which holds an operator key:
//! an application's [`ClientConfig`](super::ClientConfig) cannot make one, and a node refuses
//! them from a connection that did not prove the operator credential.

use super::{ClientError, Connects, ask, unexpected};
use crate::address::Address;
use net::auth::{Key, OperatorKey};
use net::message::{ClientReply, ClientRequest, MemberChange, Mode};
use net::tls::Tls;
use std::time::Duration;

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
