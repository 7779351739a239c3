//! The chances by which the simulator draws its faults, named in one table: how often each
//! fault strikes is read, and tuned, here. Every chance is drawn from the seed's generator in
//! the order the simulation reaches it, so changing one changes what every seed does after
//! that draw (a seed is a history only under one table). The simulated disk's own crash
//! draws (how much of a lost write a crash keeps) live with the disk, in
//! `storage::simulated`, which is built without the simulator.

use crate::rng::Rng;

/// A chance of `.0` in `.1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Odds(pub u64, pub u64);

impl Odds {
    /// Draws the chance from `rng`.
    pub(crate) fn hit(self, rng: &mut Rng) -> bool {
        rng.chance(self.0, self.1)
    }
}

/// A fault the simulator injects at a fault event (`Sim::inject_fault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The leader crashes (a random node when there is none), back after a while.
    CrashLeader,
    /// A random node crashes, back after a while.
    CrashAny,
    /// Every node crashes at once, each back after a while of its own.
    PowerCut,
    /// One node (the leader, [`LEADER_TARGETED`]) is cut off, both ways or one way.
    IsolateOne,
    /// A node reaches only one peer.
    OnePeerOnly,
    /// A link between two nodes delays what it carries.
    Clog,
    /// One, two or all nodes' disks are full for a while.
    FullDisks,
    /// A process stops (the leader, [`LEADER_TARGETED`]) and resumes where it was.
    Stall,
    /// The WAL thread's acknowledgement connections of one node fail for a while.
    AcksDown,
    /// Every node that is down restarts.
    RestartDown,
}

/// The faults with their weights: a fault event draws each with its weight out of their sum.
pub const FAULT_WEIGHTS: [(Fault, u64); 10] = [
    (Fault::CrashLeader, 2),
    (Fault::CrashAny, 1),
    (Fault::PowerCut, 1),
    (Fault::IsolateOne, 2),
    (Fault::OnePeerOnly, 1),
    (Fault::Clog, 1),
    (Fault::FullDisks, 1),
    (Fault::Stall, 1),
    (Fault::AcksDown, 1),
    (Fault::RestartDown, 1),
];

/// Draws one fault by [`FAULT_WEIGHTS`].
pub(crate) fn draw_fault(rng: &mut Rng) -> Fault {
    let total: u64 = FAULT_WEIGHTS.iter().map(|(_, weight)| weight).sum();
    let mut at = rng.below(total);
    for (fault, weight) in FAULT_WEIGHTS {
        if at < weight {
            return fault;
        }
        at -= weight;
    }
    unreachable!("a draw below the weights' sum falls on one of them")
}

/// A fault event of a seed with spare nodes changes the members instead of a fault.
pub const MEMBER_CHANGE: Odds = Odds(1, 4);
/// A change of members between the fewest and the most adds a node (else removes one).
pub const MEMBER_ADDED: Odds = Odds(1, 2);
/// An isolation or a stall strikes the leader, when there is one (else a random node).
pub const LEADER_TARGETED: Odds = Odds(2, 3);
/// A stalled leader is cut off as well: it resumes believing it leads.
pub const STALLED_LEADER_CUT_OFF: Odds = Odds(1, 2);
/// A restart while another node repairs its own damage finds damage too (every copy of an
/// entry may then be lost).
pub const DAMAGE_WHILE_REPAIRING: Odds = Odds(1, 4);
/// A restart finds a damaged entry in its log.
pub const DAMAGED_ENTRY: Odds = Odds(1, 4);
/// A restart finds a damaged snapshot file.
pub const DAMAGED_SNAPSHOT: Odds = Odds(1, 6);
/// A restart finds its hard state damaged (only while no node repairs).
pub const DAMAGED_HARD_STATE: Odds = Odds(1, 12);
/// An fsync is slow (up to 20 ms rather than 2 ms).
pub const SLOW_SYNC: Odds = Odds(1, 20);
/// A seed has no failing fsyncs (else 1 to [`FSYNC_ERROR_PERMILLE_MAX`] per mille fail).
pub const NO_FSYNC_ERRORS: Odds = Odds(1, 2);
/// The most fsyncs a seed fails, per mille.
pub const FSYNC_ERROR_PERMILLE_MAX: u64 = 5;
/// A seed's links lose, and duplicate, fewer than this many messages per mille each.
pub const LINK_FAULT_PERMILLE_BELOW: u64 = 30;

// The settings a seed draws at its start (`Swarm::draw`), in the order drawn.

/// A seed runs in Verify mode (else Performance).
pub const VERIFY_MODE: Odds = Odds(1, 2);
/// A seed takes no snapshots.
pub const NO_SNAPSHOTS: Odds = Odds(1, 5);
/// A seed keeps the product's default allowance for a lagging follower (else a small one,
/// so that followers are sent snapshots).
pub const DEFAULT_LAGGING_ALLOWANCE: Odds = Odds(1, 4);
/// A seed starts the next snapshot as soon as one is durable (else it keeps each a while).
pub const NO_SNAPSHOT_RETENTION: Odds = Odds(1, 2);
/// A seed snapshots without the log-size rule (as often as `snapshot_every` says).
pub const NO_SNAPSHOT_LOG_RULE: Odds = Odds(1, 2);
/// A seed's clients time out early.
pub const SHORT_CLIENT_TIMEOUT: Odds = Odds(1, 4);
/// A seed's clients send a request again before their timeout (hedging).
pub const HEDGED_CLIENTS: Odds = Odds(1, 2);
/// A seed's clients send one request at a time (else several in flight).
pub const NO_PIPELINE: Odds = Odds(1, 2);
/// A seed runs no spare nodes (so no membership changes).
pub const NO_SPARES: Odds = Odds(1, 2);
/// A seed has one node that does not speak read rounds (an older build, as the others see it).
pub const A_NODE_WITHOUT_READ_ROUNDS: Odds = Odds(1, 4);
/// A seed's WALs write zeros ahead of their appends.
pub const WAL_ZEROS_AHEAD: Odds = Odds(1, 2);
/// A seed's clients send callers' keys (drawn from the keys' own generator).
pub const KEYED_CLIENTS: Odds = Odds(1, 2);

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves every fault is drawn, about as often as its weight says, and each once in the
    /// table.
    #[test]
    fn faults_are_drawn_by_their_weights() {
        let mut rng = Rng::new(7);
        let draws = 120_000;
        let mut counts = [0u64; FAULT_WEIGHTS.len()];
        for _ in 0..draws {
            let fault = draw_fault(&mut rng);
            let at = FAULT_WEIGHTS.iter().position(|(f, _)| *f == fault).unwrap();
            counts[at] += 1;
        }
        let total: u64 = FAULT_WEIGHTS.iter().map(|(_, w)| w).sum();
        for ((fault, weight), count) in FAULT_WEIGHTS.iter().zip(counts) {
            let expected = draws * weight / total;
            assert!(
                count.abs_diff(expected) * 10 < expected,
                "{fault:?}: {count} draws, {expected} expected"
            );
            let once = FAULT_WEIGHTS.iter().filter(|(f, _)| f == fault).count();
            assert_eq!(once, 1, "{fault:?} is in the table once");
        }
    }
}
