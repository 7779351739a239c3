//! The change stream, reader side: committed commands and their outcomes from a position on,
//! asked of followers first (the leader's path stays untouched), going on at another node
//! when one stops answering or no longer holds the position.

use super::{ClientError, Connects, node_changes, node_status};
use crate::address::Address;
use crate::ids::{EntryIndex, NodeId};
use net::message::{ChangeBatch, ChangePosition, ChangesRefusal, ChangesRequest, Role};
use std::time::Duration;

/// Bytes of changes a reader asks for in one answer (a node caps it at its own most).
pub const CHANGES_ASK_BYTES: u32 = 1 << 20;
/// Time a node has to answer beyond the wait it was given, in milliseconds.
pub const CHANGES_ANSWER_GRACE_MS: u64 = 2_000;

/// Why a reader got no changes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangesError {
    /// No node holds the position any more: the oldest entry any of them serves is `oldest`
    /// (the stream serves what the log still holds; a reader this far behind starts over
    /// from a backup or from `oldest`).
    #[error("no node holds entry {asked} any more: the oldest any node serves is entry {oldest}")]
    Gone {
        /// The entry asked for.
        asked: EntryIndex,
        /// The oldest entry a node serves.
        oldest: EntryIndex,
    },
    /// No node holds the changes of these entries (each applied them from a snapshot, or its
    /// journal was off), though they are in the log.
    #[error(
        "no node asked holds the changes of entries {from} to {to} (a node that led then, or \
         skipped them with a snapshot, keeps none)"
    )]
    Missing {
        /// The first entry missing.
        from: EntryIndex,
        /// The last entry missing.
        to: EntryIndex,
    },
    /// The cluster keeps no changes (`change_stream = false` in its cluster file).
    #[error("{0}")]
    Off(ChangesRefusal),
    /// No node answered; each one's error, by node.
    #[error("no node answered: {}", describe(.0))]
    Unreachable(Vec<(NodeId, String)>),
    /// A node refused the credential: trying again cannot help.
    #[error("node {node}: {error}")]
    Refused {
        /// The node.
        node: NodeId,
        /// What it said.
        error: ClientError,
    },
}

fn describe(errors: &[(NodeId, String)]) -> String {
    let each: Vec<String> = errors
        .iter()
        .map(|(n, e)| format!("node {n}: {e}"))
        .collect();
    each.join("; ")
}

/// A reader of the change stream: where it stands, and the nodes it asks.
pub struct ChangeStream<C: Connects> {
    config: C,
    /// Every node, followers first once [`ChangeStream::prefer_followers`] ran.
    nodes: Vec<(NodeId, Address)>,
    /// The node asked last (asked first next time).
    at: usize,
    next: ChangePosition,
}

impl<C: Connects> ChangeStream<C> {
    /// A reader of the nodes `nodes` (id and client address), from `from` on.
    pub fn new(config: C, nodes: Vec<(NodeId, Address)>, from: ChangePosition) -> Self {
        assert!(
            !nodes.is_empty(),
            "a change stream reads from at least one node"
        );
        ChangeStream {
            config,
            nodes,
            at: 0,
            next: from,
        }
    }

    /// Orders the nodes followers first, as their statuses within `timeout` say (a node that
    /// does not answer goes last): the leader is asked only when no follower answers. Returns
    /// the highest commit index a node named (`None`: none answered): a reader that wants
    /// what is committed now reads up to it.
    pub async fn prefer_followers(&mut self, timeout: Duration) -> Option<EntryIndex> {
        let asks = self.nodes.iter().map(|(_, address)| async {
            let status = node_status(&self.config, address, timeout).await;
            match status {
                Ok(status) if status.role != Role::Leader => (0, Some(status.commit_index)),
                Ok(status) => (1, Some(status.commit_index)),
                Err(_) => (2, None),
            }
        });
        let ranks = futures::future::join_all(asks).await;
        let committed = ranks.iter().filter_map(|(_, commit)| *commit).max();
        let mut ranked: Vec<_> = ranks.into_iter().zip(self.nodes.drain(..)).collect();
        ranked.sort_by_key(|((rank, _), _)| *rank);
        self.nodes = ranked.into_iter().map(|(_, node)| node).collect();
        self.at = 0;
        committed
    }

    /// Where the next batch starts.
    pub fn position(&self) -> ChangePosition {
        self.next
    }

    /// Makes the next batch start at `at` (a reader whose consumer lost what it read goes
    /// back to what it kept).
    pub fn seek(&mut self, at: ChangePosition) {
        self.next = at;
    }

    /// The node the last batch came from.
    pub fn node(&self) -> NodeId {
        self.nodes[self.at].0
    }

    /// The next batch of changes: from the node asked last, else from the others in turn. A
    /// node may hold the request up to `wait` while it has nothing new; an empty batch means
    /// nothing new yet. The position moves past the batch.
    pub async fn next_batch(&mut self, wait: Duration) -> Result<ChangeBatch, ChangesError> {
        let request = ChangesRequest {
            from: self.next,
            bytes_max: CHANGES_ASK_BYTES,
            wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
        };
        let timeout = wait + Duration::from_millis(CHANGES_ANSWER_GRACE_MS);
        let mut refusals = Vec::new();
        let mut silent = Vec::new();
        for turn in 0..self.nodes.len() {
            let at = (self.at + turn) % self.nodes.len();
            let (node, address) = &self.nodes[at];
            match node_changes(&self.config, address, request.clone(), timeout).await {
                // A node's answer is input: one that would move the reader back, or holds an
                // entry outside what it covers, is not taken.
                Ok(Ok(batch)) if !fits(&batch, self.next) => {
                    let error = format!(
                        "answered to {:?} when asked from {:?}",
                        batch.next, self.next
                    );
                    silent.push((*node, error));
                }
                Ok(Ok(batch)) => {
                    self.at = at;
                    self.next = batch.next;
                    return Ok(batch);
                }
                // A node that cannot read its journal counts as one that did not answer.
                Ok(Err(refusal @ ChangesRefusal::Unreadable { .. })) => {
                    silent.push((*node, refusal.to_string()));
                }
                Ok(Err(refusal @ ChangesRefusal::Off { .. })) => {
                    return Err(ChangesError::Off(refusal));
                }
                Ok(Err(refusal)) => refusals.push(refusal),
                Err(error @ ClientError::Refused(_)) => {
                    return Err(ChangesError::Refused { node: *node, error });
                }
                Err(error) => silent.push((*node, error.to_string())),
            }
        }
        Err(worst(request.from.index, &refusals).unwrap_or(ChangesError::Unreachable(silent)))
    }
}

/// True when `batch` answers a request from `from`: it ends at or past it, and its entries
/// are in order from `from` on, before where it ends.
fn fits(batch: &ChangeBatch, from: ChangePosition) -> bool {
    let indexes = batch.entries.iter().map(|entry| entry.index);
    batch.next >= from
        && indexes
            .clone()
            .all(|index| index >= from.index && index < batch.next.index)
        && indexes.clone().zip(indexes.skip(1)).all(|(a, b)| a < b)
}

/// What every node's refusal of entry `asked` comes to: gone when every node that answered
/// has compacted past it (naming the oldest any serves), else the entries none holds.
fn worst(asked: EntryIndex, refusals: &[ChangesRefusal]) -> Option<ChangesError> {
    let mut oldest = None::<EntryIndex>;
    let mut missing = None;
    for refusal in refusals {
        match refusal {
            ChangesRefusal::Gone { oldest: o, .. } => {
                oldest = Some(oldest.map_or(*o, |kept| kept.min(*o)));
            }
            ChangesRefusal::Missing { from, to, .. } => missing = Some((*from, *to)),
            // Unreadable ones are counted as silent; later kinds decide nothing here.
            ChangesRefusal::Unreadable { .. } | _ => {}
        }
    }
    if let Some((from, to)) = missing {
        return Some(ChangesError::Missing { from, to });
    }
    oldest.map(|oldest| ChangesError::Gone { asked, oldest })
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::message::ChangeEntry;

    fn batch(entries: &[u64], next: u64) -> ChangeBatch {
        ChangeBatch {
            node: NodeId(1),
            entries: (entries.iter())
                .map(|&index| ChangeEntry {
                    index: EntryIndex(index),
                    version: 1,
                    changes: Vec::new(),
                })
                .collect(),
            next: ChangePosition {
                index: EntryIndex(next),
                position: 0,
            },
            applied: EntryIndex(next),
        }
    }

    /// Proves a node's answer is taken only when it continues the reader where it asked:
    /// never behind it, its entries in order, from the position on, before where it ends.
    #[test]
    fn an_answer_is_taken_only_where_the_reader_stands() {
        let from = ChangePosition {
            index: EntryIndex(5),
            position: 2,
        };
        assert!(fits(&batch(&[5, 6, 8], 9), from));
        let mut nothing = batch(&[], 5);
        nothing.next = from;
        assert!(fits(&nothing, from), "nothing new yet");
        assert!(!fits(&batch(&[], 4), from), "behind the reader");
        assert!(
            !fits(&batch(&[4, 6], 9), from),
            "an entry before the position"
        );
        assert!(!fits(&batch(&[6, 6], 9), from), "an entry twice");
        assert!(!fits(&batch(&[6, 9], 9), from), "an entry past its end");
    }

    /// Proves every node refusing a position gone names the oldest any of them serves, and a
    /// node missing the changes decides over one that has compacted.
    #[test]
    fn refusals_come_to_the_oldest_served_or_the_entries_missing() {
        let gone = |node, oldest| ChangesRefusal::Gone {
            node: NodeId(node),
            asked: EntryIndex(1),
            oldest: EntryIndex(oldest),
        };
        let error = worst(EntryIndex(1), &[gone(1, 40), gone(2, 30)]).unwrap();
        assert!(
            matches!(
                error,
                ChangesError::Gone {
                    oldest: EntryIndex(30),
                    ..
                }
            ),
            "{error}"
        );
        let missing = ChangesRefusal::Missing {
            node: NodeId(3),
            from: EntryIndex(2),
            to: EntryIndex(3),
        };
        let error = worst(EntryIndex(1), &[gone(1, 40), missing]).unwrap();
        assert!(matches!(error, ChangesError::Missing { .. }), "{error}");
        assert!(worst(EntryIndex(1), &[]).is_none());
    }
}
