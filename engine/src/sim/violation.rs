//! What the simulator's checks find: a [`Violation`] names the [`Invariant`] it breaks and
//! says, in words, where (entry, node, client, request) so that a person can find the bug.

use std::fmt;

/// The invariants the checker holds a run to (see [`super::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// I1: a request's acknowledged results are those of the committed log.
    Acknowledged,
    /// I2: replicas that applied the same entries hold the same state.
    Diverged,
    /// I3: the business's own invariant (the Bank's audit total).
    Business,
    /// I4: a committed entry never changes.
    CommittedChanged,
    /// I5: a request is answered with one set of results, however often it is retried.
    AnsweredTwice,
    /// I6: every request has an outcome once the cluster healed.
    NoOutcome,
    /// I7: one leader per term; a node never truncates committed entries.
    Leadership,
    /// I8: results leave a node only after the entry that finished the request committed.
    AnsweredEarly,
    /// I9: a request answered before another was sent is before it in the log.
    RealTimeOrder,
    /// I10: a client's requests finish in the log in the order of their numbers (pipelined
    /// requests included).
    ClientOrder,
    /// I11: a committed members entry changes one node at most from the committed list before.
    MembersChange,
    /// I12: a read answered off the log gives what the committed state gave at some entry
    /// applied between its sending and its answer.
    ReadLinearizable,
    /// The cluster commits again after healing, and a node does not campaign while a leader
    /// it can hear leads.
    Liveness,
    /// The independent model of the business disagrees with the reference replica.
    Oracle,
    /// The checker's reference replica could not apply the committed log.
    Reference,
    /// A client was refused or failed in a way that the faults do not explain.
    Client,
    /// A node's storage or recovery failed where it must not (no usable state, a snapshot
    /// that does not verify, a read behind its log's start).
    Storage,
    /// A node halted for a reason the faults do not explain.
    Halted,
    /// An assertion of the product's code tripped (an invariant its own code states).
    Assertion,
}

impl Invariant {
    /// The short name reports use (`I1` to `I10`, or a word).
    pub fn code(self) -> &'static str {
        match self {
            Invariant::Acknowledged => "I1",
            Invariant::Diverged => "I2",
            Invariant::Business => "I3",
            Invariant::CommittedChanged => "I4",
            Invariant::AnsweredTwice => "I5",
            Invariant::NoOutcome => "I6",
            Invariant::Leadership => "I7",
            Invariant::AnsweredEarly => "I8",
            Invariant::RealTimeOrder => "I9",
            Invariant::ClientOrder => "I10",
            Invariant::MembersChange => "I11",
            Invariant::ReadLinearizable => "I12",
            Invariant::Liveness => "liveness",
            Invariant::Oracle => "oracle",
            Invariant::Reference => "reference",
            Invariant::Client => "client",
            Invariant::Storage => "storage",
            Invariant::Halted => "halted",
            Invariant::Assertion => "assertion",
        }
    }
}

/// One violation a run found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What it breaks.
    pub invariant: Invariant,
    /// Where and how, in words.
    pub detail: String,
}

impl Violation {
    /// A violation of `invariant`, described by `detail`.
    pub fn new(invariant: Invariant, detail: impl Into<String>) -> Self {
        Violation {
            invariant,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.invariant.code(), self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_violation_reads_as_its_code_and_detail() {
        let v = Violation::new(Invariant::AnsweredEarly, "node 2 answered early");
        assert_eq!(v.to_string(), "I8: node 2 answered early");
        assert_eq!(Invariant::Liveness.code(), "liveness");
    }
}
