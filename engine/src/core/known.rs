//! The nodes a replica was ever told of, and for each the highest term in which it voted for
//! that node or acknowledged it as leader: kept in a file of its own beside the hard state
//! (`storage::members_file`), so that it outlives a lost hard state. A replica rebuilt after
//! losing its hard state bounds its lost votes by the terms of the nodes it must hear (its
//! judges, `Core::term_judges`); these records extend the judges to every node it may have
//! voted for or acknowledged, and let it pass a judge that never answers (a retired node)
//! once a term at or above that judge's record has been heard from the others: every vote or
//! acknowledgement it gave that judge was recorded, durably before it left, at or below it.

use super::{Action, Core, HardState, LostVotes};
use crate::ids::{NodeId, Term};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

/// Every node a replica was told of, with the highest term in which it voted for the node or
/// acknowledged it as leader (zero when never).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownMembers {
    /// Every vote and acknowledgement given before the record was started (an older data
    /// directory, or one whose earlier record was lost) is in this term or an earlier one,
    /// whichever node it went to.
    pub floor: Term,
    /// Each node and its term.
    terms: BTreeMap<NodeId, Term>,
}

impl KnownMembers {
    /// A record of `nodes`, each with its term, above `floor`.
    pub fn new(floor: Term, nodes: impl IntoIterator<Item = (NodeId, Term)>) -> Self {
        KnownMembers {
            floor,
            terms: nodes.into_iter().collect(),
        }
    }

    /// Each node and its term, ascending by node.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, Term)> + '_ {
        self.terms.iter().map(|(&n, &t)| (n, t))
    }

    /// The highest term in which `node` may have been voted for or acknowledged: its own, or
    /// the floor, whichever is higher.
    pub fn recorded(&self, node: NodeId) -> Term {
        self.terms
            .get(&node)
            .copied()
            .unwrap_or_default()
            .max(self.floor)
    }

    /// Adds the nodes of `ids` not known yet; true when any was.
    pub fn learn(&mut self, ids: impl IntoIterator<Item = NodeId>) -> bool {
        let mut learned = false;
        for id in ids {
            if let Entry::Vacant(vacant) = self.terms.entry(id) {
                vacant.insert(Term(0));
                learned = true;
            }
        }
        learned
    }

    /// Records a vote for `node`, or an acknowledgement of it as leader, in `term`; true when
    /// that raised its record (or named a node not known yet).
    pub fn vouch(&mut self, node: NodeId, term: Term) -> bool {
        let recorded = self.terms.entry(node).or_default();
        let raised = term > *recorded;
        *recorded = (*recorded).max(term);
        raised
    }
}

/// What a start read of the record of known members.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KnownRead {
    /// No record (a data directory from before it was kept).
    #[default]
    Missing,
    /// A record that does not verify: kept aside, and not relied on.
    Damaged,
    /// The record, whole.
    Whole(KnownMembers),
}

/// How far a replica may rely on its record of known members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KnownState {
    /// Read back whole at the start: it extends the judges of lost votes.
    Whole,
    /// Started by this run above a known floor (missing or damaged at the start): written,
    /// for the next start, but not relied on in this one.
    Started,
    /// Missing or damaged at a start whose votes were lost: no floor is known until they are
    /// bounded, and nothing is written before.
    Unfounded,
}

/// A replica's record of known members, and how far it relies on it.
#[derive(Clone, Debug)]
pub(super) struct Known {
    /// The record.
    pub(super) record: KnownMembers,
    /// How far it is relied on.
    pub(super) state: KnownState,
    /// It changed since it was last made durable.
    pub(super) dirty: bool,
}

impl Known {
    /// The record a replica starts with, from what its start read beside `hard`. A record
    /// missing or damaged is started anew above the hard state's term (every vote and
    /// acknowledgement so far was in it or before), or, when the hard state was lost too,
    /// once the lost votes are bounded; it is written with the first vote or acknowledgement
    /// it must cover (until then a missing record loses nothing).
    pub(super) fn start(hard: &HardState, read: KnownRead) -> Self {
        let floor = match hard.votes_lost {
            Some(LostVotes::Unknown) => None,
            Some(LostVotes::Through(lost)) => Some(hard.term.max(lost)),
            None => Some(hard.term),
        };
        let (record, state) = match (read, floor) {
            (KnownRead::Whole(known), _) => (known, KnownState::Whole),
            (KnownRead::Missing | KnownRead::Damaged, Some(floor)) => {
                (KnownMembers::new(floor, []), KnownState::Started)
            }
            (KnownRead::Missing | KnownRead::Damaged, None) => {
                (KnownMembers::default(), KnownState::Unfounded)
            }
        };
        Known {
            dirty: state == KnownState::Started,
            record,
            state,
        }
    }
}

impl Core {
    /// The record of known members.
    pub fn known_members(&self) -> &KnownMembers {
        &self.known.record
    }

    /// Notes the nodes of every list this replica knows (its lists, its hard state's, its
    /// cluster file's); the record is to be written when that added any.
    pub(super) fn learn_known(&mut self) {
        let kept = self.hard.members.unwrap_or_default();
        let first = self.hard.first_members.unwrap_or_default();
        let lists: Vec<NodeId> = (kept.ids().chain(first.ids()))
            .chain(self.members().ids())
            .chain(self.config.nodes.iter().copied())
            .collect();
        if self.known.record.learn(lists) {
            self.known.dirty = true;
        }
    }

    /// Records a vote for `node`, or an acknowledgement of it as leader, in `term`, durably
    /// before whatever follows in `out` (the vote's answer, the acknowledgement).
    pub(super) fn vouch_known(&mut self, node: NodeId, term: Term, out: &mut Vec<Action>) {
        if self.known.record.vouch(node, term) {
            self.known.dirty = true;
        }
        self.persist_known(out);
        assert!(
            self.known.record.recorded(node) >= term,
            "vouching for {node} in term {term} above its record"
        );
    }

    /// Writes the record when it changed and has a floor.
    pub(super) fn persist_known(&mut self, out: &mut Vec<Action>) {
        if self.known.dirty && self.known.state != KnownState::Unfounded {
            self.known.dirty = false;
            out.push(Action::PersistKnownMembers(self.known.record.clone()));
        }
    }

    /// The lost votes were just bounded by `bound`: a record that had no floor takes it
    /// (every vote and acknowledgement before the loss is at or below it) and is written.
    pub(super) fn found_known(&mut self, bound: Term, out: &mut Vec<Action>) {
        if self.known.state == KnownState::Unfounded {
            self.known.record.floor = bound;
            self.known.state = KnownState::Started;
            self.known.dirty = true;
            self.persist_known(out);
        }
    }

    /// The judges of lost votes from the record: every node it names other than this one,
    /// when it was read back whole (none otherwise).
    pub(super) fn known_judges(&self) -> Vec<NodeId> {
        if self.known.state != KnownState::Whole {
            return Vec::new();
        }
        let id = self.config.id;
        self.known
            .record
            .nodes()
            .map(|(n, _)| n)
            .filter(|&n| n != id)
            .collect()
    }

    /// The highest term in which this replica voted for itself, by the record read back
    /// whole (zero otherwise: then every judge is heard, as before the record was kept).
    pub(super) fn own_record(&self) -> Term {
        match self.known.state {
            KnownState::Whole => self.known.record.recorded(self.config.id),
            KnownState::Started | KnownState::Unfounded => Term(0),
        }
    }

    /// True when lost votes need not wait for `judge`: the record was read back whole and
    /// `highest` (the highest term heard since the start, or this replica's own record if
    /// higher) is at or above every vote or acknowledgement given to it. The bound then taken
    /// is at least `highest`: it votes only above it, so
    /// never again in a term it voted for `judge` in, and acknowledges no leader below it, so
    /// none older than `judge` (in `judge`'s own term, `judge` is that term's only leader).
    /// At, not only above: a leader that removed itself leaves the others at its term, and
    /// their pre-votes (which name the term after theirs) would otherwise never pass it.
    pub(super) fn judge_passed(&self, judge: NodeId, highest: Term) -> bool {
        self.known.state == KnownState::Whole && highest >= self.known.record.recorded(judge)
    }
}
