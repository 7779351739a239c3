//! What one simulated run does ([`SimOptions`]) and what it found ([`SimReport`]).

use super::*;

/// What one simulated run does.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// Clients, each with the seed's [`Swarm::pipeline`] requests outstanding at a time.
    pub clients: u32,
    /// Requests each client sends.
    pub requests: u32,
    /// Whether faults are injected (off: a healthy run, for comparison).
    pub faults: bool,
}

impl SimOptions {
    /// The options of a standard run from `seed`.
    pub fn new(seed: u64) -> Self {
        SimOptions {
            seed,
            clients: 3,
            requests: 40,
            faults: true,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    /// The seed that replays this run.
    pub seed: u64,
    /// What the seed drew for the run.
    pub swarm: Swarm,
    /// Snapshots made durable.
    pub snapshots: u64,
    /// Snapshots installed from a leader.
    pub installs: u64,
    /// Restarts that found a damaged entry in the log (and repaired it).
    pub damaged: u64,
    /// Invariant violations, in the order found (empty: the run passed).
    pub violations: Vec<Violation>,
    /// Requests whose results reached their client.
    pub acknowledged: u64,
    /// Of those, reads answered off the log (checked by I12).
    pub reads: u64,
    /// Requests with no known outcome after the cluster healed (I6).
    pub unknown: u64,
    /// Entries committed.
    pub committed: u64,
    /// Node crashes.
    pub crashes: u64,
    /// Partitions and clogged links.
    pub partitions: u64,
    /// Times one or more disks filled up.
    pub disks_full: u64,
    /// Times a node's process was stopped for a while.
    pub stalls: u64,
    /// Times a node's acknowledgement connections failed for a while.
    pub acks_down: u64,
    /// Restarts that found the newest snapshot damaged (passed over).
    pub snapshots_damaged: u64,
    /// Nodes the operator rebuilt from the leader (a damaged snapshot or hard state left
    /// nothing usable).
    pub rebuilds: u64,
    /// Restarts that found the hard state damaged (its term and vote lost: rebuilt).
    pub hard_states_damaged: u64,
    /// Restarts that found damage while another node still repaired its own.
    pub damaged_together: u64,
    /// 1 when damage took every copy of a committed entry (the cluster may stop; no
    /// violation), else 0.
    pub copies_lost: u64,
    /// 1 when, after that, the cluster went on with different entries where the lost ones
    /// were (it could not know them), else 0.
    pub rewritten_after_loss: u64,
    /// Attempts that clients also sent to a second node (hedges).
    pub hedges: u64,
    /// Answers "not yet" that clients got: a pipelined request that reached the cluster
    /// before one it follows had run (sent again).
    pub not_yet: u64,
    /// Fsyncs that failed (each stopped its node until a restart).
    pub fsync_errors: u64,
    /// Changes of members proposed (a node added or removed).
    pub member_changes: u64,
    /// Changes of members the leader refused (one not committed yet, or its term not settled).
    pub member_changes_refused: u64,
    /// Keyed runs in the requests clients sent (each counted once, however often retried).
    pub keyed_runs: u64,
    /// Keys clients sent alone, as request 1 of the key's own session.
    pub keys_alone: u64,
    /// Keyed commands the reference answered with the outcome of a key applied before
    /// (another request, client or copy carried the key and ran it): each ran once.
    pub keyed_repeats: u64,
    /// Keyed commands the reference answered "reused" (their key was used with other
    /// commands), and keys sent alone answered so.
    pub keyed_reused: u64,
    /// Leaders elected.
    pub leaders: u64,
    /// Events processed.
    pub events: u64,
    /// Simulated time the run took.
    pub time: Time,
}

impl SimReport {
    /// Adds `other`'s counts to these (for a summary of many seeds; the seed, the swarm, the
    /// violations and the leaders stay this report's).
    pub fn absorb(&mut self, other: &SimReport) {
        self.acknowledged += other.acknowledged;
        self.reads += other.reads;
        self.committed += other.committed;
        self.crashes += other.crashes;
        self.partitions += other.partitions;
        self.events += other.events;
        self.snapshots += other.snapshots;
        self.installs += other.installs;
        self.damaged += other.damaged;
        self.disks_full += other.disks_full;
        self.stalls += other.stalls;
        self.acks_down += other.acks_down;
        self.fsync_errors += other.fsync_errors;
        self.hedges += other.hedges;
        self.not_yet += other.not_yet;
        self.member_changes += other.member_changes;
        self.member_changes_refused += other.member_changes_refused;
        self.snapshots_damaged += other.snapshots_damaged;
        self.rebuilds += other.rebuilds;
        self.hard_states_damaged += other.hard_states_damaged;
        self.damaged_together += other.damaged_together;
        self.copies_lost += other.copies_lost;
        self.rewritten_after_loss += other.rewritten_after_loss;
        self.keyed_runs += other.keyed_runs;
        self.keys_alone += other.keys_alone;
        self.keyed_repeats += other.keyed_repeats;
        self.keyed_reused += other.keyed_reused;
    }
}
