//! The simulated network: per-message delay, loss, duplication and reordering (by delay),
//! cut and clogged links.

use super::*;

/// The network's faults at the moment.
#[derive(Default)]
pub(super) struct Links {
    /// Directed links that lose everything.
    pub(super) cut: BTreeSet<(NodeId, NodeId)>,
    /// Directed links twenty times slower.
    pub(super) clogged: BTreeSet<(NodeId, NodeId)>,
    /// Per-mille of messages lost.
    pub(super) loss: u64,
    /// Per-mille of messages delivered twice.
    pub(super) duplication: u64,
}

impl<W: Workload> Sim<W> {
    pub(super) fn send_peer(&mut self, from: NodeId, to: NodeId, message: PeerMessage) {
        if self.links.cut.contains(&(from, to)) || self.rng.below(1000) < self.links.loss {
            return;
        }
        let incarnation = self.node(to).incarnation;
        let mut delay = 1 + self.rng.below(10);
        if self.links.clogged.contains(&(from, to)) {
            delay *= 20;
        }
        if self.rng.below(1000) < self.links.duplication {
            let again = delay + self.rng.below(30);
            self.schedule(
                again,
                SimEvent::Peer {
                    to,
                    from,
                    incarnation,
                    message: message.clone(),
                },
            );
        }
        self.schedule(
            delay,
            SimEvent::Peer {
                to,
                from,
                incarnation,
                message,
            },
        );
    }
}
