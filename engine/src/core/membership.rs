//! Membership in the core: the member lists a replica's log holds, the one in force (the
//! newest appended, committed or not), and the leader's rules for changing it one node at a
//! time (Raft thesis, section 4.1, with the fix of its section 4.1 errata: a leader changes
//! membership only once an entry of its own term is committed).

use super::{Action, Core, NotLeader, Progress};
use crate::entry::{Entry, EntryKind};
use crate::ids::{EntryIndex, NodeId, Term};
use crate::members::{MemberChange, Members, MembersError};
use bytes::Bytes;
use net::message::Role;

/// Why a leader did not propose a change of members.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeRefused {
    /// This replica does not lead.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// An earlier change is not committed yet: one change at a time.
    #[error("an earlier change of members is not committed yet")]
    Pending,
    /// This leader has not committed an entry of its own term yet.
    #[error("the leader has not committed an entry of its term yet")]
    NotSettled,
    /// Too few of the new members hold the log yet (see [`Core::propose_members`]).
    #[error("too few of the new members hold the log yet")]
    Unheld,
    /// The change itself is wrong.
    #[error(transparent)]
    Invalid(#[from] MembersError),
}

/// What a replica repairing damage knows of the others ([`Core::repair_view`]).
#[derive(Clone, Debug)]
pub struct RepairView {
    /// The replicas it must hear from (none: it knows no members it is one of).
    pub judges: Option<Vec<NodeId>>,
    /// The log end (term, index) heard from each replica since it started.
    pub log_ends: Vec<(NodeId, (Term, EntryIndex))>,
}

/// A set of node ids, fixed in size (a bit per id).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberSet([u64; 4]);

impl MemberSet {
    /// The set of `ids`.
    pub fn of(ids: impl IntoIterator<Item = NodeId>) -> Self {
        let mut set = MemberSet::default();
        for id in ids {
            set.0[usize::from(id.0 / 64)] |= 1 << (id.0 % 64);
        }
        set
    }

    /// True when `id` is in the set.
    pub fn contains(&self, id: NodeId) -> bool {
        self.0[usize::from(id.0 / 64)] & (1 << (id.0 % 64)) != 0
    }

    /// The ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..=u8::MAX).map(NodeId).filter(|&id| self.contains(id))
    }

    /// The ids in either set.
    pub fn union(self, other: MemberSet) -> MemberSet {
        MemberSet(std::array::from_fn(|word| self.0[word] | other.0[word]))
    }
}

/// The member lists of a replica's log.
#[derive(Clone, Debug)]
pub(super) struct Configs {
    /// The newest list committed, with its entry's index (zero: the cluster file's list, in no
    /// entry).
    settled: (EntryIndex, Members),
    /// True while the settled list is the first members, in no entry (a snapshot taken before
    /// any members entry settles at its index with them).
    settled_first: bool,
    /// Lists of members entries after it, in log order, none committed yet.
    pending: Vec<(EntryIndex, Members)>,
}

impl Configs {
    /// The lists recovered: the newest committed one (`first`: the first members, in no
    /// entry), then those of `window`'s entries after it.
    pub(super) fn recover(settled: (EntryIndex, Members), first: bool, window: &[Entry]) -> Self {
        let mut configs = Configs {
            settled,
            settled_first: first,
            pending: Vec::new(),
        };
        let after = configs.settled.0;
        for entry in window.iter().filter(|e| e.index() > after) {
            configs.appended(entry);
        }
        configs
    }

    /// The list in force.
    pub(super) fn current(&self) -> &Members {
        self.pending.last().map_or(&self.settled.1, |(_, m)| m)
    }

    /// Notes a members entry just appended to the log (other entries change nothing).
    pub(super) fn appended(&mut self, entry: &Entry) {
        if entry.kind() != EntryKind::Members {
            return;
        }
        assert!(
            entry.index() > self.pending.last().map_or(self.settled.0, |(i, _)| *i),
            "members entries are noted in log order"
        );
        // The leader that wrote it encoded a valid list, and its hash chain is verified: a
        // list that does not decode is the wrong build, which must not go on.
        let members = Members::decode(&entry.payload).expect("a members entry decodes");
        self.pending.push((entry.index(), members));
    }

    /// Forgets the lists of entries from `from` on, which left the log.
    pub(super) fn truncated(&mut self, from: EntryIndex) {
        assert!(
            from > self.settled.0,
            "committed entries never leave the log"
        );
        self.pending.retain(|(index, _)| *index < from);
    }

    /// Entries up to `commit` are committed: their lists settle.
    pub(super) fn committed(&mut self, commit: EntryIndex) {
        let settled = self
            .pending
            .iter()
            .take_while(|(i, _)| *i <= commit)
            .count();
        if let Some(newest) = self.pending.drain(..settled).next_back() {
            self.settled = newest;
            self.settled_first = false;
        }
        assert!(
            self.pending.first().is_none_or(|(i, _)| *i > commit),
            "a committed members entry left pending"
        );
    }

    /// A snapshot through `index` replaced the log: `members` were in force there (`first`:
    /// the first members, no members entry preceded it).
    pub(super) fn reset(&mut self, index: EntryIndex, members: Members, first: bool) {
        self.settled = (index, members);
        self.settled_first = first;
        self.pending.clear();
    }

    /// The index of the newest committed members entry; none while the first members are
    /// the newest committed list.
    pub(super) fn settled_entry(&self) -> Option<EntryIndex> {
        (!self.settled_first).then_some(self.settled.0)
    }

    /// True while a change is appended but not committed.
    pub(super) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The settled list is committed; the pending ones follow it in log order, none committed,
    /// each at a members entry that the log holds after `commit` (so in memory: `log`).
    fn check_invariants(&self, commit: EntryIndex, log: &super::Log) {
        assert!(
            self.settled.0 <= commit,
            "members of entry {} settled past the commit {commit}",
            self.settled.0
        );
        let mut after = commit.max(self.settled.0);
        for (index, members) in &self.pending {
            assert!(
                *index > after && *index <= log.last_index(),
                "pending members at {index}: not after {after}, or past the log's last {}",
                log.last_index()
            );
            assert!(
                log.entry(*index)
                    .is_some_and(|e| e.kind() == EntryKind::Members),
                "pending members at {index} without a members entry in memory there"
            );
            assert!(
                !members.is_empty(),
                "pending members at {index}: an empty list"
            );
            after = *index;
        }
    }
}

impl Core {
    /// The members in force.
    pub fn members(&self) -> &Members {
        self.configs.current()
    }

    /// True while a change of members is in the log, not committed yet.
    pub fn members_pending(&self) -> bool {
        self.configs.has_pending()
    }

    /// True when this replica is one of the members in force.
    pub fn is_member(&self) -> bool {
        self.members().contains(self.config.id)
    }

    /// The other replicas whose logs or terms a replica that lost data must hear before it
    /// concludes anything from them: the members in force and those its hard state kept
    /// (its log may have lost the entry that changed them); none when it is a member of
    /// neither (it does not know who the others are).
    pub(super) fn judges(&self) -> Option<Vec<NodeId>> {
        let id = self.config.id;
        let kept = self
            .hard
            .members
            .unwrap_or_else(|| MemberSet::of(self.members().ids()));
        if !self.is_member() && !kept.contains(id) {
            return None;
        }
        let mut judges: Vec<NodeId> = kept
            .ids()
            .chain(self.members().ids())
            .filter(|&n| n != id)
            .collect();
        judges.sort_unstable();
        judges.dedup();
        Some(judges)
    }

    /// The other replicas a replica whose lost votes are unknown must hear before it bounds
    /// them: its [`judges`](Self::judges), or, when it is a member of no list it knows (rebuilt
    /// from a snapshot that predates its addition), every replica its lists and its cluster
    /// file name. It cannot wait for a list that names it: the leader that would bring one may
    /// need its vote to be elected. None when it knows no other replica (rebuilt empty, having
    /// joined a running cluster, or from a cluster file of one node that others joined later):
    /// hearing nobody bounds nothing, and a leader's log tells it whom to hear.
    /// Every node the record of known members names joins them, when it was read back whole
    /// (`Core::known_judges`): its lists may have lost a change that named the leader it voted
    /// for or acknowledged.
    pub(super) fn term_judges(&self) -> Option<Vec<NodeId>> {
        let mut judges = self.listed_term_judges().unwrap_or_default();
        judges.extend(self.known_judges());
        judges.sort_unstable();
        judges.dedup();
        (!judges.is_empty()).then_some(judges)
    }

    /// [`term_judges`](Self::term_judges) from its lists and its cluster file alone.
    fn listed_term_judges(&self) -> Option<Vec<NodeId>> {
        if let Some(judges) = self.judges().filter(|judges| !judges.is_empty()) {
            return Some(judges);
        }
        let id = self.config.id;
        let kept = self.hard.members.unwrap_or_default();
        let mut known: Vec<NodeId> = kept
            .ids()
            .chain(self.members().ids())
            .chain(self.config.nodes.iter().copied())
            .filter(|&n| n != id)
            .collect();
        known.sort_unstable();
        known.dedup();
        (!known.is_empty()).then_some(known)
    }

    /// What a replica repairing damage knows of the others, for a diagnosis.
    pub fn repair_view(&self) -> RepairView {
        RepairView {
            judges: self.judges(),
            log_ends: self.log_ends.iter().map(|(&n, &end)| (n, end)).collect(),
        }
    }

    /// The member lists agree with the log and the commit index; the hard state keeps a list.
    pub(super) fn check_members(&self) {
        self.configs.check_invariants(self.commit, &self.log);
        assert!(
            self.hard.members.is_some(),
            "the hard state keeps no members"
        );
        if self.role == Role::Leader {
            assert!(!self.members().is_empty(), "a leader of no members");
        }
    }

    /// The first members: kept by the hard state, or the cluster file's.
    pub(super) fn first_members(&self) -> Members {
        let kept = self.hard.first_members;
        kept.map_or_else(
            || Members::of_ids(self.config.nodes.iter().copied()),
            |set| Members::of_ids(set.ids()),
        )
    }

    /// The first members are not needed once a members entry is applied (a restart then
    /// starts from the state's own list); they go with the next write of the hard state.
    pub(super) fn forget_first_members(&mut self, applied: EntryIndex) {
        if self
            .configs
            .settled_entry()
            .is_some_and(|settled| applied >= settled)
        {
            self.hard.first_members = None;
        }
    }

    /// The members other than this replica.
    pub(super) fn others(&self) -> Vec<NodeId> {
        let id = self.config.id;
        self.members().ids().filter(|&n| n != id).collect()
    }

    /// Votes or acknowledgements a decision needs among the members in force.
    pub(super) fn quorum(&self) -> usize {
        super::majority(self.members().len())
    }

    /// How many of `nodes` are members in force.
    pub(super) fn members_among(&self, nodes: &[NodeId]) -> usize {
        nodes
            .iter()
            .filter(|&&n| self.members().contains(n))
            .count()
    }

    /// As leader, proposes the members after `change`, one node added or removed.
    pub fn propose_members(
        &mut self,
        change: &MemberChange,
        out: &mut Vec<Action>,
    ) -> Result<EntryIndex, ChangeRefused> {
        if self.role != Role::Leader {
            return Err(NotLeader {
                leader: self.leader,
            }
            .into());
        }
        if self.configs.has_pending() {
            return Err(ChangeRefused::Pending);
        }
        if self.log.term_at(self.commit) != Some(self.hard.term) {
            return Err(ChangeRefused::NotSettled);
        }
        let members = self.members().changed(change)?;
        assert!(!members.is_empty(), "a change leaves members");
        if !self.electable_without_newcomer(&members) {
            return Err(ChangeRefused::Unheld);
        }
        let payload = Bytes::from(members.encode());
        Ok(self
            .propose(EntryKind::Members, 0, payload, out)
            .expect("proposed by the leader"))
    }

    /// True when enough of `members`, counting only members now, hold the log through the
    /// newest committed members entry (through entry 1 while the first members are in
    /// force) for a majority of `members` (all of those, for a cluster of one). The list is
    /// in force from its append on, and until it commits, only such nodes can elect a leader
    /// after a restart: an empty log votes for no candidate with entries, and a node its own
    /// log does not name (the newcomer, until its log holds the change) votes for none.
    /// Without it, the leader lost, no leader could be elected again (simulator seed 1672:
    /// a follower on a full disk held nothing, and [1, 2, 3, 4] needed 3 votes of 2 voters).
    ///
    /// Only members heard from within an election timeout count: a dead member's last
    /// acknowledgement stays in its progress, and counting it let a leader add a fourth node
    /// beside a dead third, after which only two voters were left for a majority of three.
    fn electable_without_newcomer(&self, members: &Members) -> bool {
        let needed = self.configs.settled_entry().unwrap_or(EntryIndex(1));
        let now = members.ids().filter(|&n| self.members().contains(n));
        let candidates = now.clone().count();
        let holding = now
            .filter(|&n| self.matched_of(n) >= needed && self.heard_lately(n))
            .count();
        holding >= super::majority(members.len()).min(candidates)
    }

    /// True for this replica, and for a peer it heard from within the shortest election
    /// timeout.
    fn heard_lately(&self, node: NodeId) -> bool {
        if node == self.config.id {
            return true;
        }
        let window = u64::from(self.config.election_ticks_min);
        self.peers
            .get(&node)
            .is_some_and(|p| self.ticks - p.last_heard < window)
    }

    /// The end of the log known to match the leader's and be durable on `node` (this
    /// replica's own durable end for itself).
    fn matched_of(&self, node: NodeId) -> EntryIndex {
        if node == self.config.id {
            return self.durable;
        }
        self.peers
            .get(&node)
            .map_or(EntryIndex::ZERO, |p| p.matched)
    }

    /// After the log changed: tells the driver when the members in force changed, and a leader
    /// follows them with its peers.
    pub(super) fn members_maybe_changed(&mut self, before: &Members, out: &mut Vec<Action>) {
        if self.members() == before {
            return;
        }
        // Durable before anything later: before the entry that changed them is acknowledged.
        // A replica repairing damage keeps every list it knew since the damage as well: one
        // refilling its log from the start (rebuilt) passes through lists older than the one
        // in force when it lost its entries, and the replicas that may hold those entries
        // (its judges) must not drop out as it does.
        let members = MemberSet::of(self.members().ids());
        self.hard.members = Some(match (self.hard.repair, self.hard.members) {
            (Some(_), Some(kept)) => kept.union(members),
            _ => members,
        });
        out.push(Action::PersistHardState(self.hard));
        self.learn_known();
        self.persist_known(out);
        out.push(Action::MembersChanged(self.members().clone()));
        if self.role == Role::Leader {
            self.follow_members();
        }
    }

    /// A leader's peers become the members in force other than itself; one new to it starts at
    /// the log's end, like every peer of a new leader.
    pub(super) fn follow_members(&mut self) {
        let others = self.others();
        self.peers.retain(|id, _| others.contains(id));
        let next = self.log.last_index().next();
        for id in others {
            self.peers.entry(id).or_insert(Progress {
                next,
                matched: EntryIndex::ZERO,
                last_heard: self.ticks,
                loading: false,
                snapshot: None,
            });
        }
        assert!(
            !self.peers.contains_key(&self.config.id),
            "a leader is no peer of itself"
        );
    }

    /// Commits settle the lists up to `commit`; a leader that is no member of the settled list
    /// steps down (its removal is committed without it).
    pub(super) fn settle_members(&mut self, out: &mut Vec<Action>) {
        self.configs.committed(self.commit);
        if self.role == Role::Leader && !self.is_member() && !self.configs.has_pending() {
            let term = self.hard.term;
            self.become_follower(term, None, out);
        }
    }
}
