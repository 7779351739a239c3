//! The simulator's invariant checkers. A reference replica applies the committed log as the
//! nodes report it, with a state machine of its own that never speculates; every node's
//! committed entries, state hashes and every client's acknowledged results are compared with
//! it as they appear.
//!
//! - **I1** an acknowledged request is in the committed log, with the results its client got;
//! - **I2** replicas that applied an index have the same state hash there;
//! - **I3** the workload's own check of the committed state (the Bank: money is conserved
//!   except for deposits and withdrawals);
//! - **I4** committed entries are the same on every node that holds them;
//! - **I5** a request takes effect at most once: every answer for it carries the same results
//!   (a second execution would not), and I3 counts each request's effects once;
//! - **I6** checked by the simulator: no request without an outcome after healing;
//! - **I7** one leader per term; a committed entry is never truncated;
//! - **I8** an answer with results leaves a node only once the entry that finished the request
//!   is within that node's commit index;
//! - **I9** real-time order: a request sent after another was answered is later in the log;
//! - **I10** client order: a client's requests finish in the log in their numbers' order,
//!   however many it keeps in flight;
//! - **the oracle**: the workload's own model of the business ([`Workload::logged`]), sharing
//!   no code with the engine's apply, sessions or codec, is fed every request fragment of the
//!   committed log (duplicates included) with the commands its client sent (the log's bytes
//!   must be their encoding) and the reference's answer to it, and decides by itself what
//!   applies and what it outputs; after every entry its state is compared with the
//!   reference's. With I1 this compares every answer a client got with the model.

use super::Workload;
use super::disk::{Copies, Disk};
use super::violation::{Invariant, Violation};
use crate::apply::{Reply, ReplyStatus, StateMachine, decode_outcomes};
use crate::entry::{Entry, EntryKind, FragmentHeader, encode_commands, parse_payload_of};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber, Term};
use crate::members::Members;
use crate::state::StateHash;
use std::collections::BTreeMap;

type Cmd<W> = <<W as Workload>::H as Handler>::Command;

/// What the reference replica answered for a request, in the entry whose fragment ended it.
#[derive(Debug)]
pub enum Answer<H: Handler> {
    /// The outcomes of the request's commands, in order (see [`ReplyStatus::Results`]).
    Results(Vec<OutcomeOf<H>>),
    /// The client had moved on to a newer request (see [`ReplyStatus::Stale`]).
    Stale,
    /// The client had no session (see [`ReplyStatus::Expired`]).
    Expired,
    /// The request's number was used for other commands (see [`ReplyStatus::Reused`]).
    Reused,
    /// An earlier request the client waits for had not run (see [`ReplyStatus::NotYet`]).
    NotYet,
    /// Results that do not decode as the request's outcomes.
    Undecodable,
}

/// One request fragment as the committed log holds it, every copy of it (a retried request
/// logged twice comes twice), in log order: what a workload's own model of the business
/// (an independent oracle) is fed.
#[derive(Debug)]
pub struct Logged<'a, H: Handler> {
    /// The entry holding the fragment.
    pub index: EntryIndex,
    /// The fragment: its client, request, and which of the request's commands it carries.
    pub fragment: FragmentHeader,
    /// The fragment's commands, as the client sent them (the checker checked that the log's
    /// bytes are their encoding).
    pub commands: &'a [H::Command],
    /// What the reference replica answered when this fragment ended its request; `None` for
    /// a fragment that does not end its request (a reply comes only with the last one).
    pub answer: Option<Answer<H>>,
}

/// The reference replica and what has been seen so far.
pub struct Checker<W: Workload> {
    reference: StateMachine<W::H>,
    /// The committed log, as first reported by any node.
    log: Vec<Entry>,
    /// The state hash after each applied index, as first seen.
    hashes: BTreeMap<EntryIndex, (NodeId, StateHash)>,
    /// Each node's commit index already compared with `log`.
    checked: BTreeMap<NodeId, EntryIndex>,
    /// Every request's commands.
    requests: BTreeMap<(ClientId, RequestNumber), Vec<Cmd<W>>>,
    /// Results of each request in the reference replica.
    results: BTreeMap<(ClientId, RequestNumber), Vec<u8>>,
    /// Results each client got.
    acknowledged: BTreeMap<(ClientId, RequestNumber), Vec<u8>>,
    /// The leader of each term.
    leaders: BTreeMap<Term, NodeId>,
    /// The entry that finished each request, in the reference log.
    finished_in: BTreeMap<(ClientId, RequestNumber), EntryIndex>,
    /// Every answer with results a node sent: the request, the node, its commit index then.
    answers: Vec<((ClientId, RequestNumber), NodeId, EntryIndex)>,
    /// The event at which each request was first sent.
    sent_at: BTreeMap<(ClientId, RequestNumber), u64>,
    /// The event at which each request's results reached its client.
    acknowledged_at: BTreeMap<(ClientId, RequestNumber), u64>,
    /// The reference's state differed from the workload's model after the last entry.
    model_differs: bool,
    violations: Vec<Violation>,
    /// Damage took every copy of a committed entry: from then on the cluster may rewrite
    /// history it cannot know, and nothing more is checked.
    stopped: bool,
    /// Since then: a committed entry came back different (the cluster went on without it).
    pub(super) rewritten: bool,
    /// The members of the newest committed members entry.
    members: Option<Members>,
    /// Reads in flight, by client lane.
    reads: BTreeMap<usize, PendingRead>,
}

/// A read in flight (I12): its commands, and every answer the committed state gave it from
/// its sending on (the reference runs it after each entry it applies).
struct PendingRead {
    commands: Vec<u8>,
    ends: Vec<u32>,
    /// The entry the reference had applied when the read was sent.
    sent_after: EntryIndex,
    /// Each distinct answer, in order.
    answers: Vec<Vec<u8>>,
}

/// Violations a run keeps, at most.
pub const VIOLATIONS_KEPT_MAX: usize = 20;

/// The reference replica's node id in reports.
const REFERENCE: NodeId = NodeId(0);

impl<W: Workload> Checker<W> {
    pub(super) fn new(handler: W::H) -> Self {
        Checker {
            reference: StateMachine::new(handler, super::SIM_STATE_BYTES),
            log: Vec::new(),
            hashes: BTreeMap::new(),
            checked: BTreeMap::new(),
            requests: BTreeMap::new(),
            results: BTreeMap::new(),
            acknowledged: BTreeMap::new(),
            leaders: BTreeMap::new(),
            finished_in: BTreeMap::new(),
            answers: Vec::new(),
            sent_at: BTreeMap::new(),
            acknowledged_at: BTreeMap::new(),
            model_differs: false,
            violations: Vec::new(),
            stopped: false,
            rewritten: false,
            members: None,
            reads: BTreeMap::new(),
        }
    }

    /// I12: lane `lane` sent a read of `commands`. The reference's applied index is the
    /// highest commit index a node knows: a linearizable read sees at least that state.
    pub(super) fn read_sent(&mut self, lane: usize, commands: &[Cmd<W>]) {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(commands.len());
        for command in commands {
            crate::codec::encode_into(command, &mut bytes).expect("commands encode");
            ends.push(bytes.len() as u32);
        }
        let mut read = PendingRead {
            commands: bytes,
            ends,
            sent_after: self.reference.applied_index(),
            answers: Vec::new(),
        };
        self.run_read(&mut read);
        self.reads.insert(lane, read);
    }

    /// Runs `read` on the reference's state; keeps its answer when it is a new one.
    fn run_read(&mut self, read: &mut PendingRead) {
        let answer = self
            .reference
            .read(&read.commands, &read.ends, 0)
            .expect("reads hold read-only commands only");
        if read.answers.last() != Some(&answer) {
            read.answers.push(answer);
        }
    }

    /// I12: lane `lane`'s read was answered with `results`: they must be what the committed
    /// state gave at some entry between its sending and now (the reference has applied every
    /// entry a node knows committed, so every state the answer may come from).
    pub(super) fn read_answered(&mut self, lane: usize, results: &[u8]) {
        let Some(read) = self.reads.remove(&lane) else {
            return;
        };
        if !self.stopped && !read.answers.iter().any(|answer| answer == results) {
            let now = self.reference.applied_index();
            self.note(
                Invariant::ReadLinearizable,
                format!(
                    "lane {lane}: a read's answer is none of the committed state's from entry {} \
                     (when it was sent) to entry {} (when it was answered)",
                    read.sent_after.0, now.0
                ),
            );
        }
    }

    /// Records a violation found elsewhere.
    pub(super) fn violation(&mut self, invariant: Invariant, detail: String) {
        self.note(invariant, detail);
    }

    /// Keeps the first [`VIOLATIONS_KEPT_MAX`] violations (one bug tends to repeat).
    fn note(&mut self, invariant: Invariant, detail: String) {
        self.rewritten |= self.stopped && invariant == Invariant::CommittedChanged;
        if !self.stopped && self.violations.len() < VIOLATIONS_KEPT_MAX {
            self.violations.push(Violation::new(invariant, detail));
        }
    }

    /// Adds the next committed entry to the reference log. I11: the members of a committed
    /// members entry differ from the committed list before by one node at most.
    fn push_committed(&mut self, entry: Entry) {
        if entry.kind() == EntryKind::Members {
            let index = entry.index();
            match Members::decode(&entry.payload) {
                Ok(members) => self.committed_list(index, members),
                Err(error) => self.note(
                    Invariant::MembersChange,
                    format!("committed members entry {index}: {error}"),
                ),
            }
        }
        self.log.push(entry);
    }

    fn committed_list(&mut self, index: EntryIndex, members: Members) {
        let before: Vec<NodeId> = match &self.members {
            Some(list) => list.ids().collect(),
            None => (1..=super::SIM_NODES).map(NodeId).collect(),
        };
        let after: Vec<NodeId> = members.ids().collect();
        let changed = before.iter().filter(|n| !after.contains(n)).count()
            + after.iter().filter(|n| !before.contains(n)).count();
        if changed > 1 {
            self.note(
                Invariant::MembersChange,
                format!("committed members entry {index} changes {changed} nodes: {before:?} to {after:?}"),
            );
        }
        self.members = Some(members);
    }

    /// The members of the newest committed members entry (none: the first members).
    pub(super) fn committed_members(&self) -> Option<&Members> {
        self.members.as_ref()
    }

    /// Entries committed in the reference log.
    pub(super) fn committed(&self) -> u64 {
        self.log.len() as u64
    }

    /// Checks nothing more: damage took every copy of a committed entry, and what the
    /// cluster does next cannot be compared with what was committed before.
    pub(super) fn stop(&mut self) {
        self.stopped = true;
    }

    /// The first committed entry that no disk holds any more (damage struck every copy):
    /// lost for real, not by a bug. An entry is held by a log that has it, or by a snapshot
    /// that covers it.
    pub(super) fn first_without_copy(&self, disks: &[Copies]) -> Option<EntryIndex> {
        (1..=self.log.len() as u64)
            .find(|&index| {
                let known = &self.log[index as usize - 1];
                !disks
                    .iter()
                    .any(|disk| disk.holds(index, &known.header.hash))
            })
            .map(EntryIndex)
    }

    /// A client sends a request for the first time, at event `at`.
    pub(super) fn requested(
        &mut self,
        client: ClientId,
        request: RequestNumber,
        commands: Vec<Cmd<W>>,
        at: u64,
    ) {
        self.requests.insert((client, request), commands);
        self.sent_at.insert((client, request), at);
    }

    /// Node `node` sends an answer with results for `client`'s `request` while its commit
    /// index is `commit` (I8 compares it with the entry that finished the request).
    pub(super) fn answered(
        &mut self,
        client: ClientId,
        request: RequestNumber,
        node: NodeId,
        commit: EntryIndex,
    ) {
        self.answers.push(((client, request), node, commit));
    }

    /// I7: one leader per term.
    pub(super) fn leader(&mut self, term: Term, node: NodeId) {
        if let Some(&other) = self.leaders.get(&term)
            && other != node
        {
            self.note(
                Invariant::Leadership,
                format!(
                    "two leaders in term {}: nodes {} and {}",
                    term.0, other.0, node.0
                ),
            );
        }
        self.leaders.insert(term, node);
    }

    pub(super) fn crashed(&mut self, node: NodeId) {
        self.checked.remove(&node);
    }

    pub(super) fn restarted(&mut self, node: NodeId, committed: EntryIndex) {
        self.checked
            .insert(node, committed.min(EntryIndex(self.log.len() as u64)));
    }

    /// Adds to the reference log the committed entries a node's consensus core still holds in
    /// memory beyond it. Its disk may not show them yet (WAL work held behind a full disk)
    /// and may have compacted them away by the time it does; the disk's copy is compared
    /// with them by [`Checker::committed_on`].
    pub(super) fn learn_committed(&mut self, core: &crate::core::Core) {
        let mut index = self.log.len() as u64 + 1;
        while index <= core.commit_index().0 {
            let Some(entry) = core.entry(EntryIndex(index)) else {
                return;
            };
            let (node, term, hash) = (core.id().0, entry.header.term.0, entry.header.hash);
            tracing::trace!(node, index, term, ?hash, "committed, first seen");
            self.push_committed(entry.clone());
            index += 1;
        }
    }

    /// I4: the entries node `node` holds committed are the reference's; the first to report
    /// an index adds it to the reference log. (Entries behind its log's base are covered by a
    /// snapshot, whose state hash I2 compares.)
    pub(super) fn committed_on(&mut self, node: NodeId, commit: EntryIndex, disk: &Disk) {
        let checked = self.checked.get(&node).copied().unwrap_or(EntryIndex::ZERO);
        let from = checked.max(EntryIndex(disk.first_index() - 1));
        if from.0 > self.log.len() as u64 {
            // A snapshot covers what the reference has not seen yet (the node compacted while
            // its log could not be read, behind a full disk): its entries after the snapshot
            // are compared once another node has reported the ones before.
            return;
        }
        // WAL work held behind a full disk (appends, truncations) is not written yet: the log
        // is checked once it is.
        if !disk.held.is_empty() {
            return;
        }
        for index in from.0 + 1..=commit.0 {
            let Some(entry) = disk.get(index) else {
                self.note(
                    Invariant::CommittedChanged,
                    format!(
                        "node {}: commit index {} but its log ends at {}",
                        node.0,
                        commit.0,
                        disk.last_index()
                    ),
                );
                break;
            };
            match self.log.get(index as usize - 1) {
                Some(known) if known.header.hash != entry.header.hash => {
                    self.note(
                        Invariant::CommittedChanged,
                        format!("committed entry {index} on node {} differs from the one committed before",
                        node.0
                    ));
                }
                Some(_) => {}
                None if self.log.len() as u64 + 1 == index => self.log.push(entry.clone()),
                None => {
                    self.note(
                        Invariant::CommittedChanged,
                        format!(
                            "node {}: committed entry {index} reported before entry {}",
                            node.0,
                            self.log.len() + 1
                        ),
                    );
                    break;
                }
            }
        }
        self.checked.insert(node, commit.max(checked));
    }

    /// I2: node `node` applied `index` with state hash `hash`.
    pub(super) fn node_applied(&mut self, node: NodeId, index: EntryIndex, hash: StateHash) {
        match self.hashes.get(&index) {
            Some(&(first, known)) if known != hash => self.note(
                Invariant::Diverged,
                format!(
                    "after entry {}: node {} has state hash {}, node {} has {}",
                    index.0, first.0, known, node.0, hash
                ),
            ),
            Some(_) => {}
            None => {
                self.hashes.insert(index, (node, hash));
            }
        }
    }

    /// I1 (as far as the reference has come): what a client got is what the log gives.
    pub(super) fn acknowledged(
        &mut self,
        client: ClientId,
        request: RequestNumber,
        results: Vec<u8>,
        at: u64,
    ) {
        self.acknowledged_at.insert((client, request), at);
        if let Some(reference) = self.results.get(&(client, request))
            && *reference != results
        {
            self.note(
                Invariant::Acknowledged,
                format!(
                    "client {} request {}: acknowledged results differ from the committed log's",
                    client.0, request.0
                ),
            );
        }
        self.acknowledged.insert((client, request), results);
    }

    /// Applies the reference log as far as it goes; checks I2, I3, I5, I1 and the workload's
    /// own model on the way.
    pub(super) fn advance(&mut self, workload: &mut W) {
        while (self.reference.applied_index().0 as usize) < self.log.len() {
            let position = self.reference.applied_index().0 as usize;
            let applied = match self.reference.apply(&self.log[position]) {
                Ok(applied) => applied,
                Err(error) => {
                    self.note(
                        Invariant::Reference,
                        format!("the reference replica stopped: {error}"),
                    );
                    // Nothing more can be compared.
                    self.log.truncate(position);
                    return;
                }
            };
            self.node_applied(REFERENCE, applied.index, applied.state_hash);
            let mut reads = std::mem::take(&mut self.reads);
            for read in reads.values_mut() {
                self.run_read(read);
            }
            self.reads = reads;
            for reply in &applied.replies {
                self.take_reply(workload, applied.index, reply);
            }
            self.feed_model(workload, position, &applied.replies);
            // The model applies fragments as the log holds them, so it is comparable after
            // every entry, a request split between entries included.
            match workload.check_model(self.reference.state()) {
                // Reported when the state parts from the model, not again for every entry.
                Err(reason) if !self.model_differs => {
                    self.model_differs = true;
                    self.note(
                        Invariant::Oracle,
                        format!("after entry {}: {reason}", applied.index.0),
                    );
                }
                Err(_) => {}
                Ok(()) => self.model_differs = false,
            }
            // A request split between entries has effects before its results: the state
            // is comparable only when no request is halfway.
            if self.halfway().is_none()
                && let Err(reason) = workload.check(self.reference.state())
            {
                self.note(
                    Invariant::Business,
                    format!("after entry {}: {reason}", applied.index.0),
                );
            }
        }
    }

    /// I5, I1 and the workload's observations for one of the reference's replies, in the
    /// entry at `index`.
    fn take_reply(&mut self, workload: &mut W, index: EntryIndex, reply: &Reply) {
        let key = (reply.client, reply.request);
        let ReplyStatus::Results(results) = &reply.status else {
            return;
        };
        self.finished_in.entry(key).or_insert(index);
        if let Some(earlier) = self.results.get(&key) {
            if earlier != results {
                self.note(
                    Invariant::AnsweredTwice,
                    format!(
                        "client {} request {} answered twice with different results",
                        key.0.0, key.1.0
                    ),
                );
            }
            return;
        }
        match (
            self.requests.get(&key),
            decode_outcomes::<W::H>(results, reply.command_count),
        ) {
            (Some(commands), Ok(outcomes)) if commands.len() == outcomes.len() => {
                for (command, outcome) in commands.iter().zip(&outcomes) {
                    workload.observe(command, outcome);
                }
            }
            _ => self.note(
                Invariant::Acknowledged,
                format!(
                    "client {} request {}: results that do not match its commands",
                    key.0.0, key.1.0
                ),
            ),
        }
        if let Some(acknowledged) = self.acknowledged.get(&key)
            && acknowledged != results
        {
            self.note(
                Invariant::Acknowledged,
                format!(
                    "client {} request {}: acknowledged results differ from the committed log's",
                    key.0.0, key.1.0
                ),
            );
        }
        self.results.insert(key, results.clone());
    }

    /// Feeds the workload's own model every fragment of the log's entry at `position`, in
    /// order; a fragment that ends its request comes with the reference's reply to it (a reply
    /// comes when a request's last fragment applies, so the replies follow those fragments).
    fn feed_model(&mut self, workload: &mut W, position: usize, replies: &[Reply]) {
        let entry = &self.log[position];
        let index = entry.index();
        match entry.header.kind {
            EntryKind::Noop | EntryKind::Members | EntryKind::Upgrade => return,
            EntryKind::Commands | EntryKind::KeyedCommands => {}
        }
        let fragments = match parse_payload_of(entry.header.kind, &entry.payload) {
            Ok((_, fragments, _)) => fragments,
            Err(error) => {
                let message = format!("entry {}: {error}", index.0);
                self.note(Invariant::Oracle, message);
                return;
            }
        };
        let mut replies = replies.iter();
        let mut found = Vec::new();
        for (fragment, bytes) in fragments {
            let reply = if fragment.is_last() {
                replies.next()
            } else {
                None
            };
            if let Err(message) = self.feed_fragment(workload, index, (fragment, bytes), reply) {
                found.push(message);
            }
        }
        if replies.next().is_some() {
            found.push(format!(
                "entry {}: the reference replied more often than requests ended",
                index.0
            ));
        }
        for message in found {
            self.note(Invariant::Oracle, message);
        }
    }

    /// Feeds the workload's own model one fragment of the entry at `index`, with the
    /// reference's `reply` when the fragment ends its request; returns a violation. A fragment
    /// whose commands are not the ones its client sent is not fed (the model cannot know
    /// them): the violation says so, and the model's later differences follow from it.
    fn feed_fragment(
        &self,
        workload: &mut W,
        index: EntryIndex,
        (fragment, bytes): (FragmentHeader, &[u8]),
        reply: Option<&Reply>,
    ) -> Result<(), String> {
        let key = (fragment.client, fragment.request);
        let name = format!("entry {}: client {} request {}", index.0, key.0.0, key.1.0);
        let sent = self
            .requests
            .get(&key)
            .ok_or_else(|| format!("{name} is in the log but was never sent"))?;
        let first = u64::from(fragment.first_command);
        let range = first as usize..(first + u64::from(fragment.command_count)) as usize;
        let commands = sent
            .get(range.clone())
            .filter(|_| sent.len() as u64 == u64::from(fragment.request_commands))
            .ok_or_else(|| {
                format!(
                    "{name}: the log holds commands {range:?} of {}, the client sent {}",
                    fragment.request_commands,
                    sent.len()
                )
            })?;
        if encode_commands(commands) != bytes {
            return Err(format!(
                "{name}: the log's commands {range:?} are not the ones the client sent"
            ));
        }
        let answer = match reply {
            None if fragment.is_last() => {
                return Err(format!("{name}: its last fragment got no reply"));
            }
            None => None,
            Some(reply) if (reply.client, reply.request) == key => Some(answer_of(reply)),
            Some(reply) => {
                return Err(format!(
                    "{name}: its last fragment got the reply to client {} request {}",
                    reply.client.0, reply.request.0
                ));
            }
        };
        let logged = Logged {
            index,
            fragment,
            commands,
            answer,
        };
        workload.logged(logged)
    }

    /// A client whose latest request in the reference log has applied only in part.
    fn halfway(&self) -> Option<ClientId> {
        let sessions = self.reference.sessions();
        let mut clients: Vec<ClientId> = self.requests.keys().map(|(c, _)| *c).collect();
        clients.dedup();
        clients.into_iter().find(|&client| {
            sessions
                .last_request(client)
                .is_some_and(|last| sessions.finished_results(client, last).is_none())
        })
    }

    /// The checks that need the whole run: I1 for every acknowledgement.
    pub(super) fn finish(&mut self) -> Vec<Violation> {
        let lost: Vec<(ClientId, RequestNumber)> = self
            .acknowledged
            .keys()
            .filter(|key| !self.results.contains_key(key))
            .copied()
            .collect();
        for (client, request) in lost {
            self.note(
                Invariant::Acknowledged,
                format!(
                    "client {} request {} was acknowledged but is not in the committed log",
                    client.0, request.0
                ),
            );
        }
        self.check_answers_after_commit();
        self.check_real_time_order();
        self.check_client_order();
        std::mem::take(&mut self.violations)
    }

    /// I10: each client's requests finished in entries in the order of their numbers (two
    /// may finish in one entry, in order within it as the reference applied them).
    fn check_client_order(&mut self) {
        let mut out_of_order = Vec::new();
        let mut previous: Option<((ClientId, RequestNumber), EntryIndex)> = None;
        for (&key, &index) in &self.finished_in {
            if let Some((before, at)) = previous
                && before.0 == key.0
                && at > index
            {
                out_of_order.push(format!(
                    "client {} request {} finished in entry {}, before its request {} (entry {})",
                    key.0.0, key.1.0, index.0, before.1.0, at.0
                ));
            }
            previous = Some((key, index));
        }
        for message in out_of_order {
            self.note(Invariant::ClientOrder, message);
        }
    }

    /// I8: every answer with results left after the entry that finished its request was
    /// within the answering node's commit index.
    fn check_answers_after_commit(&mut self) {
        let early: Vec<String> = self
            .answers
            .iter()
            .filter_map(|&(key, node, commit)| {
                let finished = *self.finished_in.get(&key)?;
                (finished > commit).then(|| {
                    format!(
                        "node {} answered client {} request {} with results while its commit index was {}, before entry {} that finished it",
                        node.0, key.0.0, key.1.0, commit.0, finished.0
                    )
                })
            })
            .collect();
        for message in early {
            self.note(Invariant::AnsweredEarly, message);
        }
    }

    /// I9: if request A's results reached its client before request B was sent, A finished
    /// in an earlier entry than B.
    fn check_real_time_order(&mut self) {
        let mut acknowledged: Vec<(u64, EntryIndex, (ClientId, RequestNumber))> = self
            .acknowledged_at
            .iter()
            .filter_map(|(key, &at)| Some((at, *self.finished_in.get(key)?, *key)))
            .collect();
        acknowledged.sort();
        let mut sent: Vec<(u64, (ClientId, RequestNumber))> =
            self.sent_at.iter().map(|(key, &at)| (at, *key)).collect();
        sent.sort();
        // The latest entry among the requests answered so far, swept in event order.
        let mut latest: Option<(EntryIndex, (ClientId, RequestNumber))> = None;
        let mut next = 0;
        let mut out_of_order = Vec::new();
        for (at, key) in sent {
            // Within one event an answer is taken before the client's next request is sent.
            while next < acknowledged.len() && acknowledged[next].0 <= at {
                let (_, index, done) = acknowledged[next];
                if latest.is_none_or(|(l, _)| index > l) {
                    latest = Some((index, done));
                }
                next += 1;
            }
            if let (Some((before, done)), Some(&index)) = (latest, self.finished_in.get(&key))
                && index <= before
            {
                out_of_order.push(format!(
                    "client {} request {} was sent after client {} request {} was answered, but finished in entry {} (that one in {})",
                    key.0.0, key.1.0, done.0.0, done.1.0, index.0, before.0
                ));
            }
        }
        for message in out_of_order {
            self.note(Invariant::RealTimeOrder, message);
        }
    }
}

/// The reference's reply as the workload's model sees it: outcomes decoded.
fn answer_of<H: Handler>(reply: &Reply) -> Answer<H> {
    match &reply.status {
        ReplyStatus::Results(results) => decode_outcomes::<H>(results, reply.command_count)
            .map_or(Answer::Undecodable, Answer::Results),
        ReplyStatus::Stale => Answer::Stale,
        ReplyStatus::Expired => Answer::Expired,
        ReplyStatus::Reused => Answer::Reused,
        ReplyStatus::NotYet => Answer::NotYet,
    }
}
