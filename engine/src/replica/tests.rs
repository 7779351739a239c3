//! Exact-output tests of the replica: events in, the whole list of IO out, in order, as the
//! driver and the simulator would carry it out. Each IO renders as one short line, so that a
//! test states everything a step asks for and a change in order or content fails it.

use super::{Io, Replica, ReplicaConfig, SnapshotWrite, WalOp};
use crate::apply::StateMachine;
use crate::core::{CoreConfig, Recovered};
use crate::entry::EntryHeader;
use crate::handler::Handler;
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber, Term};
use crate::state::{Schema, StateError, Tx};
use net::message::{
    Append, AppendOutcome, AppendReply, ClientReply, PeerMessage, Role, Submit, VoteReply,
};

/// Bad input, for the echo handler.
#[derive(Debug, crate::codec::Encode, crate::codec::Decode, serde::Serialize)]
#[codec(crate = "crate::codec")]
pub(super) struct Refused;

impl From<StateError> for Refused {
    fn from(_: StateError) -> Self {
        Refused
    }
}

/// A handler whose every command only reads: it answers its own number.
pub(super) struct Echo;

impl Handler for Echo {
    type Command = u64;
    type Output = u64;
    type Error = Refused;
    fn schema(&self) -> Schema {
        Schema::new()
    }
    fn execute(&self, _: &mut Tx<'_>, command: &u64) -> Result<u64, Refused> {
        Ok(*command)
    }
    fn read_only(_: &u64) -> bool {
        true
    }
}

pub(super) const N1: NodeId = NodeId(1);
pub(super) const N2: NodeId = NodeId(2);
pub(super) const N3: NodeId = NodeId(3);
pub(super) const HEARTBEAT_TICKS: u32 = 2;
const ELECTION_TICKS_MIN: u32 = 10;

/// Node `id` of three, new (an empty log), with snapshots off.
pub(super) fn replica(id: NodeId) -> Replica<Echo, u32> {
    replica_snapshotting(id, 0)
}

/// Node `id` of three, new, with a snapshot every `every` entries (0: none), kept no time and
/// whatever the log's size.
fn replica_snapshotting(id: NodeId, every: u64) -> Replica<Echo, u32> {
    let config = ReplicaConfig {
        core: CoreConfig {
            id,
            nodes: vec![N1, N2, N3],
            election_ticks_min: ELECTION_TICKS_MIN,
            heartbeat_ticks: HEARTBEAT_TICKS,
            seed: 7,
            lagging_entries_max: crate::core::LAGGING_FOLLOWER_ENTRIES_MAX,
            pre_vote: false,
        },
        entry_commands_max: 64,
        pipeline_entries_max: 8,
        snapshot_every: every,
        snapshot_deltas: false,
        snapshot_turns: false,
        snapshot_retain_ticks: 0,
        changes_retain_entries: 0,
        change_stream: true,
        snapshot_log_percent: 0,
        snapshot_slice_slots: 64,
        snapshot_write_bytes: 4096,
        client_addresses: Default::default(),
    };
    let machine = StateMachine::new(Echo, 1 << 20);
    Replica::new(config, Recovered::default(), machine, None)
}

/// Node 1, ticked until it campaigns for term 1; the IO of the tick that started it.
fn candidate() -> (Replica<Echo, u32>, Vec<Io<u32>>) {
    candidate_of(replica(N1))
}

/// `replica`, ticked until it campaigns for term 1; the IO of the tick that started it.
fn candidate_of(mut replica: Replica<Echo, u32>) -> (Replica<Echo, u32>, Vec<Io<u32>>) {
    for _ in 0..ELECTION_TICKS_MIN * 3 {
        let mut out = Vec::new();
        replica.tick(0, &mut out);
        if replica.core().role() == Role::Candidate {
            return (replica, out);
        }
    }
    panic!("no campaign within three election timeouts");
}

/// Node 1, leading term 1 with its no-op durable here and acknowledged by node 2 (applied).
pub(super) fn leader() -> Replica<Echo, u32> {
    leader_of(replica(N1))
}

/// `replica` (node 1), made leader of term 1 as [`leader`] makes node 1.
fn leader_of(replica: Replica<Echo, u32>) -> Replica<Echo, u32> {
    let (mut replica, mut out) = candidate_of(replica);
    replica.receive(N2, vote_granted(N2), &mut out);
    let noop = appended(&out).expect("the new leader's no-op");
    replica.persisted(noop.index, noop.term, &mut out);
    replica.receive(N2, matched(N2, noop.index), &mut out);
    assert_eq!(replica.machine().applied_index(), noop.index);
    replica
}

fn vote_granted(from: NodeId) -> PeerMessage {
    PeerMessage::VoteReply(VoteReply {
        term: Term(1),
        pre: false,
        from,
        granted: true,
    })
}

/// `from`'s acknowledgement of the log through `index`, in term 1.
pub(super) fn matched(from: NodeId, index: EntryIndex) -> PeerMessage {
    PeerMessage::AppendReply(AppendReply {
        term: Term(1),
        from,
        outcome: AppendOutcome::Matched { index },
        applied: None,
    })
}

/// The first entry `out` appends to the WAL.
pub(super) fn appended(out: &[Io<u32>]) -> Option<EntryHeader> {
    out.iter().find_map(|io| {
        let Io::Wal(WalOp::Append(entries)) = io else {
            return None;
        };
        Some(entries[0].header)
    })
}

/// Client 5's request `number` of the commands `commands`.
pub(super) fn submit(number: u64, commands: &[u64]) -> Submit {
    Submit {
        client: ClientId(5),
        request: RequestNumber(number),
        oldest_pending: RequestNumber(number),
        command_count: commands.len() as u32,
        commands: crate::entry::encode_commands(commands),
    }
}

/// One line per IO, in order.
fn render(out: &[Io<u32>]) -> Vec<String> {
    out.iter().map(render_one).collect()
}

fn render_one(io: &Io<u32>) -> String {
    match io {
        Io::Send { to, message } => format!("send {to} {}", peer(message)),
        Io::PersistHardState(hard) => {
            format!("persist term {} vote {:?}", hard.term, hard.voted_for)
        }
        Io::PersistKnownMembers(known) => {
            let nodes: Vec<String> = known.nodes().map(|(n, t)| format!("{n}@{t}")).collect();
            format!("persist known {}", nodes.join(" "))
        }
        Io::Wal(WalOp::Append(entries)) => format!("wal append {}", entries_of(entries)),
        Io::Wal(WalOp::Ack { to, message }) => format!("wal ack {to} {}", peer(message)),
        Io::Wal(other) => format!("wal {other:?}"),
        Io::Answer { to, reply } => format!("answer {to} {}", answer(reply)),
        Io::Note(super::Note::RoleChanged { role, term, leader }) => {
            format!("note {role:?} term {term} leader {leader:?}")
        }
        Io::Note(super::Note::Applied(applied)) => format!("note applied {}", applied.index),
        Io::Note(note) => format!("note {note:?}"),
        Io::SendSnapshot { .. } | Io::Snapshot(_) | Io::StoreSnapshotChunk(_) => format!("{io:?}"),
    }
}

fn entries_of(entries: &[crate::entry::Entry]) -> String {
    let each: Vec<String> = entries
        .iter()
        .map(|e| format!("{}@{}", e.index(), e.header.term))
        .collect();
    format!("[{}]", each.join(" "))
}

fn peer(message: &PeerMessage) -> String {
    match message {
        PeerMessage::Append(Append {
            term,
            prev_index,
            prev_term,
            entries,
            commit,
            ..
        }) => format!(
            "append term {term} after {prev_index}@{prev_term} {} commit {commit}",
            entries_of(entries)
        ),
        PeerMessage::AppendReply(reply) => format!("reply term {} {:?}", reply.term, reply.outcome),
        PeerMessage::Vote(vote) => format!(
            "vote term {} last {}@{} pre {}",
            vote.term, vote.last_index, vote.last_term, vote.pre
        ),
        PeerMessage::VoteReply(_)
        | PeerMessage::Snapshot(_)
        | PeerMessage::LogEnd(_)
        | PeerMessage::ReadCheck(_)
        | PeerMessage::ReadCheckReply(_) => format!("{message:?}"),
    }
}

fn answer(reply: &ClientReply) -> String {
    let ClientReply::Results {
        request,
        command_count,
        ..
    } = reply
    else {
        return format!("{reply:?}");
    };
    format!("results of {request} ({command_count} commands)")
}

/// Proves a campaign makes its vote for itself durable before it asks for votes: the hard
/// state comes first in the IO, then the record of known members, then one request to each
/// other node, and the role change.
#[test]
fn a_campaign_persists_its_vote_before_asking() {
    let (_, out) = candidate();
    assert_eq!(
        render(&out),
        [
            "persist term 1 vote Some(NodeId(1))",
            "persist known 1@1 2@0 3@0",
            "note Candidate term 1 leader None",
            "send 2 vote term 1 last 0@0 pre false",
            "send 3 vote term 1 last 0@0 pre false",
        ]
    );
}

/// Proves a new leader reports its role, appends its no-op and sends it to both followers,
/// all in the step of the vote that made it.
#[test]
fn a_granted_vote_makes_a_leader_that_appends_and_sends_its_noop() {
    let (mut replica, _) = candidate();
    let mut out = Vec::new();
    replica.receive(N2, vote_granted(N2), &mut out);
    assert_eq!(
        render(&out),
        [
            "note Leader term 1 leader Some(NodeId(1))",
            "wal append [1@1]",
            "send 2 append term 1 after 0@0 [1@1] commit 0",
            "send 3 append term 1 after 0@0 [1@1] commit 0",
        ]
    );
}

/// Proves a client's request waits for its entry: admitting it asks for nothing, the next
/// tick appends and sends the entry, the leader's own fsync alone commits nothing, and the
/// answer leaves only once a follower has it durable, after the entry applied.
#[test]
fn a_request_is_answered_only_once_a_majority_holds_it() {
    let mut replica = leader();
    let mut out = Vec::new();
    replica.admit(submit(1, &[7, 8]), 9, &mut out);
    assert_eq!(
        render(&out),
        Vec::<String>::new(),
        "nothing before the batch"
    );
    replica.propose(1_000, &mut out);
    assert_eq!(
        render(&out),
        [
            "wal append [2@1]",
            "send 2 append term 1 after 1@1 [2@1] commit 1",
            "send 3 append term 1 after 1@1 [2@1] commit 1",
        ]
    );
    out.clear();
    replica.persisted(EntryIndex(2), Term(1), &mut out);
    assert_eq!(
        render(&out),
        Vec::<String>::new(),
        "one copy commits nothing"
    );
    replica.receive(N3, matched(N3, EntryIndex(2)), &mut out);
    assert_eq!(
        render(&out),
        ["note applied 2", "answer 9 results of 1 (2 commands)"]
    );
}

/// The one message `out` sends to `to`.
fn sent_to(out: &[Io<u32>], to: NodeId) -> PeerMessage {
    let mut sent = out.iter().filter_map(|io| {
        let Io::Send {
            to: receiver,
            message,
        } = io
        else {
            return None;
        };
        (*receiver == to).then(|| message.clone())
    });
    let message = sent.next().expect("a message to the node");
    assert!(sent.next().is_none(), "one message to the node");
    message
}

/// Proves the exchange with a new follower: it makes the leader's term durable before it
/// answers, refuses an entry whose predecessor it lacks (pointing at where its log ends),
/// then takes the leader's whole log with an acknowledgement the WAL sends only once it is
/// durable, and applies what the leader said was committed (and no more) only in idle work,
/// after its acknowledgement has left.
#[test]
fn a_new_follower_refuses_a_gap_then_takes_the_log_and_acknowledges_it_durably() {
    let (mut leader, mut follower) = (leader(), replica(N3));
    let mut out = Vec::new();
    leader.admit(submit(1, &[7]), 9, &mut out);
    leader.propose(1_000, &mut out);
    let mut followed = Vec::new();
    follower.receive(N1, sent_to(&out, N3), &mut followed);
    assert_eq!(
        render(&followed),
        [
            "persist term 1 vote None",
            "note Follower term 1 leader Some(NodeId(1))",
            "persist known 1@1 2@0 3@0",
            "send 1 reply term 1 Conflict { hint: EntryIndex(0) }",
        ]
    );
    out.clear();
    leader.receive(N3, sent_to(&followed, N1), &mut out);
    assert_eq!(
        render(&out),
        ["send 3 append term 1 after 0@0 [1@1 2@1] commit 1"]
    );
    followed.clear();
    follower.receive(N1, sent_to(&out, N3), &mut followed);
    assert_eq!(
        render(&followed),
        [
            "wal append [1@1 2@1]",
            "wal ack 1 reply term 1 Matched { index: EntryIndex(2) }",
        ]
    );
    followed.clear();
    follower.persisted(EntryIndex(2), Term(1), &mut followed);
    assert_eq!(
        render(&followed),
        Vec::<String>::new(),
        "the apply waits for idle work"
    );
    follower.idle_work(false, &mut followed);
    assert_eq!(render(&followed), ["note applied 1"]);
}

/// Proves a halted replica refuses requests at once, and a tick asks for nothing: it takes
/// no further part in consensus.
#[test]
fn a_halted_replica_refuses_and_stays_silent() {
    let mut replica = leader();
    let mut out = Vec::new();
    replica.halt(super::Halt::WalStopped, &mut out);
    assert_eq!(render(&out), ["note Halted(WalStopped)"]);
    out.clear();
    replica.admit(submit(1, &[7]), 9, &mut out);
    for _ in 0..ELECTION_TICKS_MIN * 3 {
        replica.tick(0, &mut out);
    }
    assert_eq!(
        render(&out),
        ["answer 9 Rejected { request: RequestNumber(1), reason: Halted }"]
    );
}

/// Proves a leader that finds its disk full refuses a new request without queueing it, and
/// takes requests again once the disk has room.
#[test]
fn a_full_disk_refuses_new_requests_until_it_has_room() {
    let mut replica = leader();
    let mut out = Vec::new();
    replica.set_storage_full(true);
    replica.admit(submit(1, &[7]), 9, &mut out);
    replica.propose(1_000, &mut out);
    assert_eq!(
        render(&out),
        ["answer 9 Rejected { request: RequestNumber(1), reason: StorageFull }"]
    );
    out.clear();
    replica.set_storage_full(false);
    replica.admit(submit(1, &[7]), 10, &mut out);
    replica.propose(1_000, &mut out);
    assert_eq!(appended(&out).map(|h| h.index), Some(EntryIndex(2)));
}

/// Commits request `number` of one command through the leader `replica` (node 3 holds it).
fn commit(replica: &mut Replica<Echo, u32>, number: u64, out: &mut Vec<Io<u32>>) {
    replica.admit(submit(number, &[number]), 9, out);
    replica.propose(1_000, out);
    let entry = appended(out).expect("the request's entry");
    replica.persisted(entry.index, entry.term, out);
    replica.receive(N3, matched(N3, entry.index), out);
}

fn begins_snapshot(out: &[Io<u32>]) -> bool {
    out.iter()
        .any(|io| matches!(io, Io::Snapshot(SnapshotWrite::Begin(_))))
}

/// Proves a snapshot whose file the writer could not write ends its scan there: no finish is
/// handed to a writer that dropped the file (and would report nothing of it), and the next
/// snapshot starts at the next entry. A scan left running would finish into a writer that
/// reports nothing, and hold every later snapshot back, the log with them.
#[test]
fn a_failed_snapshot_write_ends_its_scan_and_the_next_one_starts() {
    let mut replica = leader_of(replica_snapshotting(N1, 1));
    assert!(
        replica.snapshotting(),
        "the no-op's snapshot is being scanned"
    );
    replica.snapshot_failed();
    assert!(!replica.snapshotting(), "the scan ends with its file");
    let mut out = Vec::new();
    replica.snapshot_slice(&mut out);
    assert!(render(&out).is_empty(), "{:?}", render(&out));
    commit(&mut replica, 1, &mut out);
    assert!(
        begins_snapshot(&out),
        "the next one starts: {:?}",
        render(&out)
    );
}
