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
//!
//! Keyed runs (callers' keys inside requests, `sim/keys.rs`): the log must list exactly the
//! runs each client sent, each with the digest of its commands; a keyed request's results
//! are decoded with its keyed positions ([`Answer::Keyed`]); and a model is fed each
//! fragment's runs, to decide by itself, from its own sessions, which keyed commands run.

use super::Workload;
use super::disk::{Copies, Disk};
use super::keys::is_key;
use super::violation::{Invariant, Violation};
use crate::apply::{KeyedOutcome, Reply, ReplyStatus, StateMachine};
use crate::apply::{decode_keyed_outcomes, decode_outcomes};
use crate::codec::CodecError;
use crate::entry::{Entry, EntryKind, FragmentHeader, KeyRun, KeyedRun, RequestDigest};
use crate::entry::{encode_commands, parse_payload_of};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber, Term};
use crate::members::Members;
use crate::state::StateHash;
use crate::storage::journal::Journal;
use std::collections::{BTreeMap, BTreeSet};

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
    /// The outcomes of a request that carried keyed runs, in order: each keyed command's as
    /// its key's session decided it (see [`KeyedOutcome`]: `Ran` with an outcome, whether it
    /// ran now or in an earlier request carrying the key; `Expired`; `Reused`), each command
    /// outside the runs as `Ran`.
    Keyed(Vec<KeyedOutcome<OutcomeOf<H>>>),
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
    /// The keyed runs of the request that overlap the fragment, in order, as the log lists
    /// them (the checker checked that they are the ones the client sent, each with the
    /// digest of its commands): the fragment's commands within a run apply through the run's
    /// key's session, as request 1 of it of `run.count` commands with the run's digest
    /// would, only the part of the run within the fragment, and only the commands the
    /// fragment's own session runs. Empty for a request without keys.
    pub runs: &'a [KeyedRun],
    /// What the reference replica answered when this fragment ended its request; `None` for
    /// a fragment that does not end its request (a reply comes only with the last one).
    pub answer: Option<Answer<H>>,
}

/// What the reference answered keyed commands, over the run (for the report).
#[derive(Debug, Default)]
pub(super) struct KeyedCounts {
    /// Keyed commands answered with the outcome of their key's command run before.
    pub(super) repeats: u64,
    /// Keyed commands answered "reused".
    pub(super) reused: u64,
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
    /// The keyed runs of every request sent with some.
    runs: BTreeMap<(ClientId, RequestNumber), Vec<KeyRun>>,
    /// Each key's commands (the key and the position in its run) whose outcome was
    /// observed: a key's command runs once, and later answers with it repeat that outcome.
    keys_observed: BTreeSet<(ClientId, u32)>,
    /// What keyed commands were answered.
    pub(super) keyed: KeyedCounts,
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
            runs: BTreeMap::new(),
            keys_observed: BTreeSet::new(),
            keyed: KeyedCounts::default(),
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

    /// A client sends a request for the first time, at event `at`: its commands and keyed
    /// runs. A key sent alone is request 1 of the key's session, sent by any lane, always
    /// with the key's first commands; a key is sent when first sent in a run or alone (I9:
    /// whichever copy of it runs first was sent no sooner).
    pub(super) fn requested(
        &mut self,
        client: ClientId,
        request: RequestNumber,
        (commands, runs): (Vec<Cmd<W>>, Vec<KeyRun>),
        at: u64,
    ) {
        self.requests.insert((client, request), commands);
        for run in &runs {
            self.sent_at
                .entry((run.key, RequestNumber(1)))
                .or_insert(at);
        }
        if !runs.is_empty() {
            self.runs.insert((client, request), runs);
        }
        self.sent_at.entry((client, request)).or_insert(at);
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
        // A truncation or a reset still queued may replace entries: the log is checked once
        // it ran. Appends still queued (behind a sync under way or a full disk) are checked
        // once written.
        if disk.rewrite_pending() {
            return;
        }
        let through = match disk.has_pending() {
            true => commit.min(EntryIndex(disk.last_index())),
            false => commit,
        };
        for index in from.0 + 1..=through.0 {
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
        self.checked.insert(node, through.max(checked));
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

    /// I2 for what node `node`'s apply journal holds: each record's state hash is the one
    /// every replica reached after its entry, and no entry is journaled twice differently.
    pub(super) fn journaled(&mut self, node: NodeId, journal: &Journal) {
        for &index in &journal.conflicts {
            let why = format!(
                "node {}'s apply journal holds entry {} twice, differently",
                node.0, index.0
            );
            self.note(Invariant::Diverged, why);
        }
        for record in journal.records.values() {
            if let Some(&(first, known)) = self.hashes.get(&record.index)
                && known != record.state_hash
            {
                let why = format!(
                    "node {}'s apply journal has state hash {} after entry {}, node {} applied {}",
                    node.0, record.state_hash, record.index.0, first.0, known
                );
                self.note(Invariant::Diverged, why);
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
        self.acknowledged_at.entry((client, request)).or_insert(at);
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
        let runs = self.runs.get(&key).map_or(&[][..], Vec::as_slice);
        match (
            self.requests.get(&key).map(Vec::len),
            decode_results::<W::H>(results, reply.command_count, runs),
        ) {
            (Some(count), Ok(outcomes)) if count == outcomes.len() => {
                self.observe(workload, key, &outcomes);
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

    /// Feeds the workload each command of request `key` that ran with its outcome. A keyed
    /// command (or one of a key sent alone) counts only the first time its key's command is
    /// answered with an outcome: the copies after it ran nothing.
    fn observe(
        &mut self,
        workload: &mut W,
        key: (ClientId, RequestNumber),
        outcomes: &[KeyedOutcome<OutcomeOf<W::H>>],
    ) {
        let commands = &self.requests[&key];
        let runs = self.runs.get(&key).map_or(&[][..], Vec::as_slice);
        for (position, (command, outcome)) in (0u32..).zip(commands.iter().zip(outcomes)) {
            let covering = runs
                .iter()
                .find(|run| run.first <= position && position < run.end());
            let keyed = match covering {
                Some(run) => Some((run.key, position - run.first)),
                None => is_key(key.0).then_some((key.0, position)),
            };
            match outcome {
                KeyedOutcome::Ran(outcome) => match keyed {
                    Some(command) if !self.keys_observed.insert(command) => {
                        self.keyed.repeats += 1;
                    }
                    Some(_) | None => workload.observe(command, outcome),
                },
                KeyedOutcome::Reused => self.keyed.reused += 1,
                // Not run now; a key is kept longer than a simulated run lasts.
                KeyedOutcome::Expired => {}
            }
        }
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
        let (fragments, runs) = match parse_payload_of(entry.header.kind, &entry.payload) {
            Ok((_, fragments, runs)) => (fragments, runs),
            Err(error) => {
                let message = format!("entry {}: {error}", index.0);
                self.note(Invariant::Oracle, message);
                return;
            }
        };
        let keys = runs.iter().map(|keyed| keyed.run.key);
        let alone = fragments
            .iter()
            .map(|(f, _)| f.client)
            .filter(|&c| is_key(c));
        let keys: Vec<ClientId> = keys.chain(alone).collect();
        let mut replies = replies.iter();
        let mut found = Vec::new();
        let mut runs: &[KeyedRun] = &runs;
        for (at, (fragment, bytes)) in fragments.into_iter().enumerate() {
            let reply = if fragment.is_last() {
                replies.next()
            } else {
                None
            };
            // The runs come in the order of their fragments.
            let (own, rest) = runs.split_at(runs.partition_point(|r| r.fragment as usize == at));
            runs = rest;
            let logged = (fragment, bytes, own);
            if let Err(mismatch) = self.feed_fragment(workload, index, logged, reply) {
                found.push(mismatch.to_string());
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
        for key in keys {
            self.key_finished(key, index);
        }
    }

    /// Notes the entry at `index` as the one that finished key `key`'s request 1 when the
    /// reference's session of the key holds it finished and no entry did before: a key's
    /// request finishes in whichever request ran its last command, in a run or alone (I8,
    /// I9: a node may answer the key sent alone from its committed sessions before the key's
    /// own request 1 is ever logged).
    fn key_finished(&mut self, key: ClientId, index: EntryIndex) {
        let request = RequestNumber(1);
        if (self.reference.sessions())
            .finished_results(key, request)
            .is_some()
        {
            self.finished_in.entry((key, request)).or_insert(index);
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
        (fragment, bytes, runs): (FragmentHeader, &[u8], &[KeyedRun]),
        reply: Option<&Reply>,
    ) -> Result<(), FragmentMismatch<W::Error>> {
        let key = (fragment.client, fragment.request);
        let at = FragmentAt {
            index,
            client: key.0,
            request: key.1,
        };
        let sent = (self.requests.get(&key)).ok_or(FragmentMismatch::NeverSent { at })?;
        let first = u64::from(fragment.first_command);
        let range = first as usize..(first + u64::from(fragment.command_count)) as usize;
        let commands = sent
            .get(range.clone())
            .filter(|_| sent.len() as u64 == u64::from(fragment.request_commands))
            .ok_or_else(|| FragmentMismatch::OtherCount {
                at,
                range: range.clone(),
                logged: fragment.request_commands,
                sent: sent.len(),
            })?;
        if encode_commands(commands) != bytes {
            return Err(FragmentMismatch::OtherCommands { at, range });
        }
        let sent_runs = self.runs.get(&key).map_or(&[][..], Vec::as_slice);
        check_runs(at, (sent, sent_runs), &fragment, runs)?;
        let answer = match reply {
            None if fragment.is_last() => return Err(FragmentMismatch::NoReply { at }),
            None => None,
            Some(reply) if (reply.client, reply.request) == key => {
                Some(answer_of(reply, sent_runs))
            }
            Some(reply) => {
                return Err(FragmentMismatch::OtherReply {
                    at,
                    client: reply.client,
                    request: reply.request,
                });
            }
        };
        let logged = Logged {
            index,
            fragment,
            commands,
            runs,
            answer,
        };
        workload.logged(logged).map_err(FragmentMismatch::Model)
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
            .iter()
            .filter(|(key, _)| !self.results.contains_key(key))
            .filter(|(key, results)| !self.key_holds(**key, results))
            .map(|(key, _)| *key)
            .collect();
        for (client, request) in lost {
            let why = match is_key(client) {
                true => "with results its key's session does not hold",
                false => "but is not in the committed log",
            };
            self.note(
                Invariant::Acknowledged,
                format!(
                    "client {} request {} was acknowledged {why}",
                    client.0, request.0
                ),
            );
        }
        self.check_answers_after_commit();
        self.check_real_time_order();
        self.check_client_order();
        std::mem::take(&mut self.violations)
    }

    /// True when `key` is a key sent alone whose session in the reference holds `results`:
    /// a node answers a key sent alone from its committed sessions, and keyed runs may have
    /// run the key without the key's own request 1 ever being logged.
    fn key_holds(&self, (client, request): (ClientId, RequestNumber), results: &[u8]) -> bool {
        let sessions = self.reference.sessions();
        is_key(client)
            && sessions
                .finished_results(client, request)
                .is_some_and(|(_, held)| held == results)
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

/// The reference's reply as the workload's model sees it: outcomes decoded, with the keyed
/// runs `runs` the request was sent with.
fn answer_of<H: Handler>(reply: &Reply, runs: &[KeyRun]) -> Answer<H> {
    match &reply.status {
        ReplyStatus::Results(results) if runs.is_empty() => {
            decode_outcomes::<H>(results, reply.command_count)
                .map_or(Answer::Undecodable, Answer::Results)
        }
        ReplyStatus::Results(results) => decode_results::<H>(results, reply.command_count, runs)
            .map_or(Answer::Undecodable, Answer::Keyed),
        ReplyStatus::Stale => Answer::Stale,
        ReplyStatus::Expired => Answer::Expired,
        ReplyStatus::Reused => Answer::Reused,
        ReplyStatus::NotYet => Answer::NotYet,
    }
}

/// A request's results decoded: with a status before each command of its keyed runs `runs`
/// when it has some, each outcome of a request without runs as `Ran`.
fn decode_results<H: Handler>(
    results: &[u8],
    count: u32,
    runs: &[KeyRun],
) -> Result<Vec<KeyedOutcome<OutcomeOf<H>>>, CodecError> {
    if runs.is_empty() {
        let outcomes = decode_outcomes::<H>(results, count)?;
        return Ok(outcomes.into_iter().map(KeyedOutcome::Ran).collect());
    }
    let keyed = |position: u32| {
        runs.iter()
            .any(|r| r.first <= position && position < r.end())
    };
    decode_keyed_outcomes::<H>(results, count, keyed)
}

/// Where a fragment of the committed log is: its entry, its client and request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FragmentAt {
    index: EntryIndex,
    client: ClientId,
    request: RequestNumber,
}

impl std::fmt::Display for FragmentAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (index, client, request) = (self.index.0, self.client.0, self.request.0);
        write!(f, "entry {index}: client {client} request {request}")
    }
}

/// Why a fragment of the committed log is not what its client sent, or not what the
/// workload's model (`E`, its error) expected of it.
#[derive(Debug, thiserror::Error)]
enum FragmentMismatch<E> {
    /// No client sent the request.
    #[error("{at} is in the log but was never sent")]
    NeverSent { at: FragmentAt },
    /// The fragment's commands are not a range of the request the client sent.
    #[error("{at}: the log holds commands {range:?} of {logged}, the client sent {sent}")]
    OtherCount {
        at: FragmentAt,
        range: std::ops::Range<usize>,
        logged: u32,
        sent: usize,
    },
    /// The fragment's commands are not the client's.
    #[error("{at}: the log's commands {range:?} are not the ones the client sent")]
    OtherCommands {
        at: FragmentAt,
        range: std::ops::Range<usize>,
    },
    /// The keyed runs listed are not the ones the client sent over the fragment.
    #[error("{at}: the log lists keyed runs {listed:?}, the client sent {sent:?}")]
    OtherRuns {
        at: FragmentAt,
        listed: Vec<KeyRun>,
        sent: Vec<KeyRun>,
    },
    /// A keyed run's digest is not that of its commands.
    #[error(
        "{at}: key {} of commands {}..{} carries the digest of other commands",
        run.key.0,
        run.first,
        run.end()
    )]
    OtherDigest { at: FragmentAt, run: KeyRun },
    /// The request's last fragment applied without a reply.
    #[error("{at}: its last fragment got no reply")]
    NoReply { at: FragmentAt },
    /// The request's last fragment applied with another request's reply.
    #[error("{at}: its last fragment got the reply to client {} request {}", client.0, request.0)]
    OtherReply {
        at: FragmentAt,
        client: ClientId,
        request: RequestNumber,
    },
    /// The workload's model disagrees.
    #[error(transparent)]
    Model(E),
}

/// Checks the keyed runs a fragment's entry lists for it: the runs its client sent
/// (`sent`: the commands and runs) that overlap it, each with the digest of its commands.
fn check_runs<C: crate::codec::Encode, E>(
    at: FragmentAt,
    (commands, sent): (&[C], &[KeyRun]),
    fragment: &FragmentHeader,
    runs: &[KeyedRun],
) -> Result<(), FragmentMismatch<E>> {
    let (first, end) = (
        fragment.first_command,
        fragment.first_command + fragment.command_count,
    );
    let overlapping = sent
        .iter()
        .filter(|run| run.first < end && run.end() > first);
    if !overlapping.copied().eq(runs.iter().map(|keyed| keyed.run)) {
        return Err(FragmentMismatch::OtherRuns {
            at,
            listed: runs.iter().map(|keyed| keyed.run).collect(),
            sent: sent.to_vec(),
        });
    }
    for keyed in runs {
        let run = keyed.run;
        let digest = commands
            .get(run.first as usize..run.end() as usize)
            .map(|covered| RequestDigest::of(run.count, &encode_commands(covered)));
        if digest != Some(keyed.digest) {
            return Err(FragmentMismatch::OtherDigest { at, run });
        }
    }
    Ok(())
}
