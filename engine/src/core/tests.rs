//! The consensus core: exact event-to-action tests, then three cores driven in memory.

use super::*;
use crate::ids::StateHash;
use net::message::{AppliedHash, LogEnd, ReadCheck, ReadCheckReply};
use std::collections::VecDeque;

const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const N3: NodeId = NodeId(3);

/// What every replica of these tests keeps as its first members: the three of [`config`].
fn first_members() -> Option<super::MemberSet> {
    Some(super::MemberSet::of([N1, N2, N3]))
}

fn config(id: NodeId) -> CoreConfig {
    CoreConfig {
        id,
        nodes: vec![N1, N2, N3],
        election_ticks_min: 10,
        heartbeat_ticks: 2,
        seed: 7,
        lagging_entries_max: super::LAGGING_FOLLOWER_ENTRIES_MAX,
        // The exact action lists below are plain Raft's; pre-vote has tests of its own.
        pre_vote: false,
    }
}

fn core(id: NodeId) -> Core {
    Core::new(config(id), Recovered::default())
}

/// Steps `core` and checks its invariants after the step.
fn step(core: &mut Core, event: Event) -> Vec<Action> {
    let mut out = Vec::new();
    core.step(event, &mut out);
    core.check_invariants();
    out
}

/// Ticks until the core does something; returns what it did.
fn tick_until_active(core: &mut Core) -> Vec<Action> {
    for _ in 0..100 {
        let actions = step(core, Event::Tick);
        if !actions.is_empty() {
            return actions;
        }
    }
    panic!("the core never acted");
}

fn vote_granted(term: u64, from: NodeId) -> Event {
    Event::Message {
        from,
        message: PeerMessage::VoteReply(VoteReply {
            term: Term(term),
            pre: false,
            from,
            granted: true,
        }),
    }
}

/// Makes `N1` leader of term 1 and returns it with the no-op it proposed.
fn leader() -> (Core, Entry) {
    let mut n1 = core(N1);
    tick_until_active(&mut n1);
    let actions = step(&mut n1, vote_granted(1, N2));
    let Action::Persist(entries) = &actions[1] else {
        panic!("expected the no-op persisted, got {actions:?}")
    };
    let noop = entries[0].clone();
    (n1, noop)
}

/// Proves a follower whose election timeout passes persists its vote for itself in a new term
/// before asking every other node for votes.
#[test]
fn election_timeout_starts_a_campaign() {
    let mut n1 = core(N1);
    let actions = tick_until_active(&mut n1);
    let vote = Vote {
        term: Term(1),
        pre: false,
        candidate: N1,
        last_index: EntryIndex(0),
        last_term: Term(0),
    };
    assert_eq!(
        actions,
        vec![
            Action::PersistHardState(HardState {
                term: Term(1),
                voted_for: Some(N1),
                repair: None,
                votes_lost: None,
                members: first_members(),
                first_members: first_members(),
            }),
            Action::PersistKnownMembers(known_voted_n1()),
            Action::RoleChanged {
                role: Role::Candidate,
                term: Term(1),
                leader: None
            },
            Action::Send {
                to: N2,
                message: PeerMessage::Vote(vote.clone())
            },
            Action::Send {
                to: N3,
                message: PeerMessage::Vote(vote)
            },
        ]
    );
}

/// The record of known members of a replica of three that vouched for N1 in term 1.
fn known_voted_n1() -> KnownMembers {
    KnownMembers::new(Term(0), [(N1, Term(1)), (N2, Term(0)), (N3, Term(0))])
}

/// Proves a vote is made durable before it is sent, its record of known members too, and
/// that a second candidate in the same term is refused.
#[test]
fn a_vote_is_persisted_before_it_is_sent() {
    let mut n2 = core(N2);
    let vote = |candidate| Event::Message {
        from: candidate,
        message: PeerMessage::Vote(Vote {
            term: Term(1),
            pre: false,
            candidate,
            last_index: EntryIndex(0),
            last_term: Term(0),
        }),
    };
    assert_eq!(
        step(&mut n2, vote(N1)),
        vec![
            Action::PersistHardState(HardState {
                term: Term(1),
                voted_for: None,
                repair: None,
                votes_lost: None,
                members: first_members(),
                first_members: first_members(),
            }),
            Action::PersistHardState(HardState {
                term: Term(1),
                voted_for: Some(N1),
                repair: None,
                votes_lost: None,
                members: first_members(),
                first_members: first_members(),
            }),
            Action::PersistKnownMembers(known_voted_n1()),
            Action::Send {
                to: N1,
                message: PeerMessage::VoteReply(VoteReply {
                    term: Term(1),
                    pre: false,
                    from: N2,
                    granted: true
                })
            },
        ]
    );
    assert_eq!(
        step(&mut n2, vote(N3)),
        vec![Action::Send {
            to: N3,
            message: PeerMessage::VoteReply(VoteReply {
                term: Term(1),
                pre: false,
                from: N2,
                granted: false
            })
        }]
    );
}

/// Proves a candidate with a majority becomes leader and proposes a no-op of its term to all.
#[test]
fn majority_of_votes_makes_a_leader_that_proposes_a_noop() {
    let mut n1 = core(N1);
    tick_until_active(&mut n1);
    let actions = step(&mut n1, vote_granted(1, N3));
    assert_eq!(
        actions[0],
        Action::RoleChanged {
            role: Role::Leader,
            term: Term(1),
            leader: Some(N1)
        }
    );
    let Action::Persist(entries) = &actions[1] else {
        panic!("{actions:?}")
    };
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (
            entries[0].index(),
            entries[0].term(),
            entries[0].header.kind
        ),
        (EntryIndex(1), Term(1), EntryKind::Noop)
    );
    let sent: Vec<NodeId> = actions[2..]
        .iter()
        .map(|a| {
            let Action::Send {
                to,
                message: PeerMessage::Append(m),
            } = a
            else {
                panic!("{a:?}")
            };
            assert_eq!(m.entries, entries.clone());
            *to
        })
        .collect();
    assert_eq!(sent, vec![N2, N3]);
    assert_eq!(n1.role(), Role::Leader);
}

fn matched(term: u64, from: NodeId, index: u64) -> Event {
    Event::Message {
        from,
        message: PeerMessage::AppendReply(AppendReply {
            term: Term(term),
            from,
            outcome: AppendOutcome::Matched {
                index: EntryIndex(index),
            },
            applied: None,
        }),
    }
}

/// Proves the leader commits only when a majority holds the entry durably, counting itself
/// only after its own fsync: two followers suffice, one follower alone does not.
#[test]
fn commit_needs_a_durable_majority() {
    let (mut n1, noop) = leader();
    assert_eq!(
        step(&mut n1, matched(1, N2, 1)),
        vec![],
        "follower alone is not a majority"
    );
    assert_eq!(
        step(
            &mut n1,
            Event::Persisted {
                index: EntryIndex(1),
                term: Term(1)
            }
        ),
        vec![Action::Commit(EntryIndex(1))]
    );
    assert_eq!(n1.commit_index(), noop.index());

    let (mut n1, _) = leader();
    assert_eq!(step(&mut n1, matched(1, N2, 1)), vec![]);
    assert_eq!(
        step(&mut n1, matched(1, N3, 1)),
        vec![Action::Commit(EntryIndex(1))],
        "two followers are a majority"
    );
}

fn conflict(term: u64, from: NodeId, hint: u64) -> Event {
    Event::Message {
        from,
        message: PeerMessage::AppendReply(AppendReply {
            term: Term(term),
            from,
            outcome: AppendOutcome::Conflict {
                hint: EntryIndex(hint),
            },
            applied: None,
        }),
    }
}

/// A leader of term 1 with entries 1 to 5 committed (durable here and on `N3`) and applied.
fn leader_with_five_applied() -> Core {
    let (mut n1, _) = leader();
    for n in 2..=5u8 {
        let mut out = Vec::new();
        n1.propose(EntryKind::Commands, 1, Bytes::from(vec![n]), &mut out)
            .unwrap();
    }
    step(
        &mut n1,
        Event::Persisted {
            index: EntryIndex(5),
            term: Term(1),
        },
    );
    assert_eq!(
        step(&mut n1, matched(1, N3, 5)),
        vec![Action::Commit(EntryIndex(5))]
    );
    for index in 1..=5 {
        let applied = AppliedHash {
            index: EntryIndex(index),
            hash: StateHash([index as u8; 32]),
        };
        step(&mut n1, Event::Applied(applied));
    }
    n1
}

/// Proves a leader whose log starts after what a follower needs sends it a snapshot (once,
/// not again on every heartbeat), resumes appends after the follower acknowledges the
/// snapshot's index, and that a follower reporting less than it had acknowledged (a wiped
/// data directory) is believed.
#[test]
fn leader_sends_a_snapshot_to_a_follower_behind_its_log_base() {
    let mut n1 = leader_with_five_applied();
    step(&mut n1, matched(1, N2, 5));
    // A leader keeps the log a follower close behind still needs.
    assert_eq!(n1.compactable(EntryIndex(4)), EntryIndex(4));
    n1.compact(EntryIndex(4));
    assert_eq!(n1.log_base().index, EntryIndex(4));
    assert_eq!(n1.log_base().term, Term(1));

    // N2 lost everything: its conflict hint is below what it had acknowledged.
    assert_eq!(
        step(&mut n1, conflict(1, N2, 0)),
        vec![Action::SendSnapshot { peer: N2 }]
    );
    // Heartbeats (every two ticks) within the check-quorum window (ten): the follower waiting
    // for the snapshot still hears from its leader, at the log's base (a follower that heard
    // nothing for SNAPSHOT_RESEND_TICKS would campaign).
    let mut heartbeats = 0;
    for _ in 0..5 {
        let actions = step(&mut n1, Event::Tick);
        assert!(
            actions
                .iter()
                .all(|a| !matches!(a, Action::SendSnapshot { .. })),
            "a snapshot in flight is not sent again at once: {actions:?}"
        );
        heartbeats += actions
            .iter()
            .filter(|a| {
                matches!(a, Action::Send { to: N2, message: PeerMessage::Append(m) }
                    if m.entries.is_empty() && m.prev_index == EntryIndex(4) && m.prev_term == Term(1))
            })
            .count();
    }
    assert_eq!(heartbeats, 2, "a heartbeat every two ticks");
    // Its answer (it cannot match the base) sends no second snapshot.
    assert_eq!(step(&mut n1, conflict(1, N2, 0)), Vec::new());
    // Installed: appends resume after the snapshot's index.
    let actions = step(&mut n1, matched(1, N2, 4));
    let [
        Action::Send {
            to: N2,
            message: PeerMessage::Append(append),
        },
    ] = actions.as_slice()
    else {
        panic!("expected an append to N2, got {actions:?}")
    };
    assert_eq!(
        (append.prev_index, append.prev_term, append.entries.len()),
        (EntryIndex(4), Term(1), 1)
    );

    // A failed send is retried on the next contact.
    step(&mut n1, conflict(1, N2, 0));
    step(&mut n1, Event::SnapshotAborted { peer: N2 });
    assert_eq!(
        step(&mut n1, conflict(1, N2, 0)),
        vec![Action::SendSnapshot { peer: N2 }]
    );
}

/// Node 2 receives a chunk of node 1's snapshot of entry 4: it hands it to the driver to
/// store, and takes node 1 for its leader.
fn chunk_goes_to_the_driver(n2: &mut Core) {
    let chunk = SnapshotChunk {
        term: Term(1),
        leader: N1,
        index: EntryIndex(4),
        offset: 0,
        total: 10,
        data: vec![0; 10],
    };
    let actions = step(
        n2,
        Event::Message {
            from: N1,
            message: PeerMessage::Snapshot(chunk.clone()),
        },
    );
    assert_eq!(actions.last(), Some(&Action::StoreSnapshotChunk(chunk)));
    assert_eq!(n2.leader(), Some(N1));
}

/// Proves a follower hands snapshot chunks to the driver, takes an installed snapshot in place
/// of its log and acknowledges its index, then accepts appends after it, skipping entries the
/// snapshot already covers.
#[test]
fn follower_installs_a_snapshot_then_follows_the_log() {
    let n1 = leader_with_five_applied();
    let entries: Vec<Entry> = (1..=5)
        .map(|i| n1.entry(EntryIndex(i)).unwrap().clone())
        .collect();
    let mut n2 = core(N2);
    chunk_goes_to_the_driver(&mut n2);
    let base = LogBase {
        index: EntryIndex(4),
        term: Term(1),
        hash: entries[3].header.hash,
    };
    let applied = AppliedHash {
        index: EntryIndex(4),
        hash: StateHash([4; 32]),
    };
    let actions = step(
        &mut n2,
        Event::Installed {
            base,
            applied,
            members: None,
        },
    );
    assert_eq!(
        actions,
        vec![Action::Send {
            to: N1,
            message: PeerMessage::AppendReply(AppendReply {
                term: Term(1),
                from: N2,
                outcome: AppendOutcome::Matched {
                    index: EntryIndex(4)
                },
                applied: Some(applied),
            }),
        }]
    );
    assert_eq!(
        (n2.last_index(), n2.commit_index(), n2.applied()),
        (EntryIndex(4), EntryIndex(4), Some(applied))
    );

    // An append from before the snapshot: what it covers is skipped, entry 5 is taken.
    let append = Append {
        term: Term(1),
        leader: N1,
        prev_index: EntryIndex(2),
        prev_term: Term(1),
        entries: entries[2..].to_vec(),
        commit: EntryIndex(5),
        applied: None,
    };
    let actions = append_from_n1(&mut n2, append);
    assert_eq!(
        actions.first(),
        Some(&Action::Persist(vec![entries[4].clone()])),
        "{actions:?}"
    );
    assert_eq!(n2.last_index(), EntryIndex(5));
}

/// Proves a replica with an empty log refuses its vote to a candidate whose log has entries
/// (it may have lost a vote it cast in that term with its data directory), and still votes
/// while the whole cluster is new.
#[test]
fn an_empty_log_votes_only_while_the_cluster_is_new() {
    let vote = |last_index| Event::Message {
        from: N2,
        message: PeerMessage::Vote(Vote {
            term: Term(3),
            pre: false,
            candidate: N2,
            last_index: EntryIndex(last_index),
            last_term: Term(u64::from(last_index > 0)),
        }),
    };
    let granted = |actions: Vec<Action>| {
        actions.iter().any(
            |a| matches!(a, Action::Send { message: PeerMessage::VoteReply(r), .. } if r.granted),
        )
    };
    assert!(!granted(step(&mut core(N3), vote(7))));
    assert!(granted(step(&mut core(N3), vote(0))));
}

/// The term 1 leader's first append: its no-op, at the start of the log.
/// Delivers `append` from the leader `N1`.
fn append_from_n1(core: &mut Core, append: Append) -> Vec<Action> {
    step(
        core,
        Event::Message {
            from: N1,
            message: PeerMessage::Append(append),
        },
    )
}

fn first_append(noop: Entry) -> Append {
    Append {
        term: Term(1),
        leader: N1,
        prev_index: EntryIndex(0),
        prev_term: Term(0),
        entries: vec![noop],
        commit: EntryIndex(0),
        applied: None,
    }
}

/// Proves a follower acknowledges appended entries only once its own fsync has made them
/// durable: the acknowledgement is handed to the WAL, to be sent after the fsync of everything
/// before it, and the fsync report then adds no second one.
#[test]
fn follower_acknowledges_after_its_fsync() {
    let (_, noop) = leader();
    let mut n2 = core(N2);
    let append = first_append(noop.clone());
    let actions = append_from_n1(&mut n2, append);
    let ack = AppendReply {
        term: Term(1),
        from: N2,
        outcome: AppendOutcome::Matched {
            index: EntryIndex(1),
        },
        applied: None,
    };
    assert_eq!(
        actions,
        vec![
            Action::PersistHardState(HardState {
                term: Term(1),
                voted_for: None,
                repair: None,
                votes_lost: None,
                members: first_members(),
                first_members: first_members(),
            }),
            Action::RoleChanged {
                role: Role::Follower,
                term: Term(1),
                leader: Some(N1)
            },
            Action::PersistKnownMembers(known_voted_n1()),
            Action::Persist(vec![noop]),
            Action::AckWhenDurable {
                to: N1,
                reply: ack.clone()
            },
        ],
        "the acknowledgement waits for the fsync"
    );
    assert_eq!(
        step(
            &mut n2,
            Event::Persisted {
                index: EntryIndex(1),
                term: Term(1)
            }
        ),
        vec![]
    );
    assert_eq!(
        step(&mut n2, Event::AckFailed),
        vec![Action::Send {
            to: N1,
            message: PeerMessage::AppendReply(ack)
        }],
        "an acknowledgement the WAL could not send goes the ordinary way"
    );
}

/// Proves a follower answers at once a resend of entries still on their way to its disk, with
/// what is durable so far (silent until its fsync, on a disk slower than the election window
/// every leader would step down for lack of answers).
#[test]
fn a_resend_before_the_fsync_is_answered_at_once() {
    let (_, noop) = leader();
    let mut n2 = core(N2);
    let append = first_append(noop);
    let message = || Event::Message {
        from: N1,
        message: PeerMessage::Append(append.clone()),
    };
    let first = step(&mut n2, message());
    assert!(
        first
            .iter()
            .any(|a| matches!(a, Action::AckWhenDurable { .. }))
    );
    let again = step(&mut n2, message());
    let durable_so_far = AppendReply {
        term: Term(1),
        from: N2,
        outcome: AppendOutcome::Matched {
            index: EntryIndex(0),
        },
        applied: None,
    };
    assert_eq!(
        again,
        vec![Action::Send {
            to: N1,
            message: PeerMessage::AppendReply(durable_so_far)
        }],
        "nothing persisted twice, and an answer now"
    );
}

/// Proves a follower far behind the leader knows how far behind it is: an append it must
/// refuse (a gap) still tells it the leader's commit index, which its own commit index (capped
/// by its log) cannot say; readiness compares what it applied with this.
#[test]
fn a_follower_behind_knows_the_leaders_commit() {
    let mut n2 = core(N2);
    assert_eq!(n2.leader_commit(), EntryIndex(0));
    let gap = Append {
        term: Term(1),
        leader: N1,
        prev_index: EntryIndex(4_000),
        prev_term: Term(1),
        entries: vec![],
        commit: EntryIndex(4_000),
        applied: None,
    };
    append_from_n1(&mut n2, gap);
    assert_eq!(n2.commit_index(), EntryIndex(0), "its log holds nothing");
    assert_eq!(n2.leader_commit(), EntryIndex(4_000));
    let (n1, _) = leader();
    assert_eq!(n1.leader_commit(), n1.commit_index(), "a leader's own");
}

/// Proves an append whose previous entry the follower lacks is refused with a hint, and that an
/// entry that does not chain to the previous one is refused rather than logged.
#[test]
fn mismatched_appends_are_refused() {
    let (_, noop) = leader();
    let mut n2 = core(N2);
    let gap = Append {
        term: Term(1),
        leader: N1,
        prev_index: EntryIndex(4),
        prev_term: Term(1),
        entries: vec![],
        commit: EntryIndex(0),
        applied: None,
    };
    let actions = step(
        &mut n2,
        Event::Message {
            from: N1,
            message: PeerMessage::Append(gap),
        },
    );
    assert_eq!(
        actions.last(),
        Some(&Action::Send {
            to: N1,
            message: PeerMessage::AppendReply(AppendReply {
                term: Term(1),
                from: N2,
                outcome: AppendOutcome::Conflict {
                    hint: EntryIndex(0)
                },
                applied: None,
            })
        })
    );
    let forged = Entry::seal(
        EntryIndex(1),
        Term(1),
        EntryKind::Noop,
        EntryIndex(0),
        0,
        Bytes::new(),
        &EntryHash([9; 32]),
    );
    assert_ne!(forged.header.hash, noop.header.hash);
    let append = Append {
        term: Term(1),
        leader: N1,
        prev_index: EntryIndex(0),
        prev_term: Term(0),
        entries: vec![forged],
        commit: EntryIndex(0),
        applied: None,
    };
    let actions = append_from_n1(&mut n2, append);
    assert!(
        actions.iter().all(|a| !matches!(a, Action::Persist(_))),
        "{actions:?}"
    );
    assert_eq!(n2.last_index(), EntryIndex(0));
}

/// Proves a state hash that differs from another replica's at the same entry is reported once,
/// naming the entry and both nodes.
#[test]
fn divergent_hashes_are_reported() {
    let (mut n1, _) = leader();
    step(
        &mut n1,
        Event::Persisted {
            index: EntryIndex(1),
            term: Term(1),
        },
    );
    step(&mut n1, matched(1, N2, 1));
    let mine = AppliedHash {
        index: EntryIndex(1),
        hash: StateHash([1; 32]),
    };
    let theirs = AppliedHash {
        index: EntryIndex(1),
        hash: StateHash([2; 32]),
    };
    step(&mut n1, Event::Applied(mine));
    let reply = |applied| Event::Message {
        from: N3,
        message: PeerMessage::AppendReply(AppendReply {
            term: Term(1),
            from: N3,
            outcome: AppendOutcome::Matched {
                index: EntryIndex(1),
            },
            applied: Some(applied),
        }),
    };
    let actions = step(&mut n1, reply(theirs));
    let divergence = Divergence {
        index: EntryIndex(1),
        local: (N1, mine.hash),
        remote: (N3, theirs.hash),
    };
    assert_eq!(actions, vec![Action::Diverged(divergence.clone())]);
    assert_eq!(n1.divergence(), Some(&divergence));
    assert_eq!(step(&mut n1, reply(theirs)), vec![], "reported once");
    assert_eq!(step(&mut n1, reply(mine)), vec![]);
}

/// A follower recovering from damage that cut its log after entry 0: it had entries up to
/// index 5 of term 1.
fn repairing(id: NodeId) -> Core {
    repairing_known_committed(id, EntryIndex(0))
}

/// The same, the entries beyond its damage having shown entries up to `committed` committed.
fn repairing_known_committed(id: NodeId, committed: EntryIndex) -> Core {
    let recovered = Recovered {
        hard_state: HardState {
            term: Term(1),
            voted_for: None,
            repair: Some(Repair {
                index: EntryIndex(5),
                term: Term(1),
                committed,
            }),
            votes_lost: None,
            members: first_members(),
            first_members: None,
        },
        ..Recovered::default()
    };
    Core::new(config(id), recovered)
}

fn vote_from(candidate: NodeId, term: u64, last_index: u64) -> Event {
    Event::Message {
        from: candidate,
        message: PeerMessage::Vote(Vote {
            term: Term(term),
            pre: false,
            candidate,
            last_index: EntryIndex(last_index),
            last_term: Term(1),
        }),
    }
}

fn granted(actions: &[Action]) -> bool {
    actions.iter().any(|a| {
        matches!(
            a,
            Action::Send {
                message: PeerMessage::VoteReply(VoteReply { granted: true, .. }),
                ..
            }
        )
    })
}

/// Proves a replica repairing damage never leads (it campaigns, so that the others learn
/// where its log ends, but a majority of votes does not make it leader), and grants a vote
/// only to a candidate whose log is at least as up to date as the log it had before the
/// damage (so no leader can be elected with its help that lacks an entry it may have
/// acknowledged).
#[test]
fn a_repairing_replica_never_leads_and_votes_as_if_it_held_what_it_lost() {
    let mut n2 = repairing(N2);
    tick_until_active(&mut n2);
    assert_eq!(n2.role(), Role::Candidate);
    let term = n2.term().0;
    step(&mut n2, vote_granted(term, N1));
    step(&mut n2, vote_granted(term, N3));
    assert_eq!(n2.role(), Role::Candidate);
    assert!(!granted(&step(&mut n2, vote_from(N1, term + 1, 4))));
    assert!(granted(&step(&mut n2, vote_from(N3, term + 2, 5))));
}

/// Proves a repairing replica also votes for a candidate at least as up to date as every
/// other replica it has heard from since it started (the lost entries were then on no other
/// replica, so never committed), and not before it has heard from them.
#[test]
fn a_repairing_replica_votes_for_the_most_up_to_date_of_the_others() {
    let mut n2 = repairing(N2);
    assert!(!granted(&step(&mut n2, vote_from(N1, 2, 3))));
    assert!(!granted(&step(&mut n2, vote_from(N3, 3, 1))));
    assert!(granted(&step(&mut n2, vote_from(N1, 4, 3))));
}

/// Settles a hypothesis about repair: after damage with nothing readable beyond it (the repair's
/// term unknown, `u64::MAX`), a replica refuses every candidate until it has heard where the
/// third replica's log ends (a vote or pre-vote request of its), then votes for the most up to
/// date. Confirmed, and by design: any of the others may hold what it lost. Its cost is
/// liveness only while the third is silent (with it down, no vote from this replica).
#[test]
fn an_unknown_repair_term_votes_once_the_others_log_ends_are_heard() {
    let recovered = Recovered {
        hard_state: HardState {
            term: Term(1),
            voted_for: None,
            repair: Some(Repair {
                index: EntryIndex(5),
                term: Term(u64::MAX),
                committed: EntryIndex(0),
            }),
            votes_lost: None,
            members: first_members(),
            first_members: None,
        },
        ..Recovered::default()
    };
    let mut n2 = Core::new(config(N2), recovered);
    for term in 2..5 {
        assert!(
            !granted(&step(&mut n2, vote_from(N1, term, 9))),
            "N3 unheard"
        );
    }
    assert!(!granted(&step(&mut n2, vote_from(N3, 5, 4))));
    assert!(
        granted(&step(&mut n2, vote_from(N1, 6, 9))),
        "N1's log is the longer"
    );
}

/// A replica rebuilt after its hard state was lost, whose damage left nothing readable
/// beyond it: term 0, an empty log, owed entries 1-5 of an unknown term.
fn rebuilt_term_unknown() -> Core {
    let mut n2 = lost_votes(N2, false);
    n2.hard.repair = n2.hard.repair.map(|repair| Repair {
        term: Term(u64::MAX),
        ..repair
    });
    n2
}

/// N1's term-1 heartbeat after `entry`.
fn heartbeat_after(entry: &Entry) -> Append {
    Append {
        prev_index: entry.index(),
        prev_term: entry.term(),
        entries: Vec::new(),
        ..first_append(entry.clone())
    }
}

/// What `core` does over the least election timeout's ticks.
fn one_election_timeout(core: &mut Core) -> Vec<Action> {
    let mut out = Vec::new();
    for _ in 0..core.config.election_ticks_min {
        out.extend(step(core, Event::Tick));
    }
    out
}

fn acknowledges(actions: &[Action]) -> bool {
    let beyond_nothing = |reply: &AppendReply| matches!(reply.outcome, AppendOutcome::Matched { index } if index > EntryIndex(0));
    actions.iter().any(|action| {
        matches!(action, Action::AckWhenDurable { .. })
            || matches!(action, Action::Send { message: PeerMessage::AppendReply(r), .. } if beyond_nothing(r))
    })
}

fn term_answer(from: NodeId, term: u64) -> Event {
    Event::Message {
        from,
        message: PeerMessage::LogEnd(LogEnd {
            term: Term(term),
            from,
            last_index: EntryIndex(0),
            last_term: Term(0),
            ask: false,
        }),
    }
}

/// A read check of N1's term 1, round 3.
fn read_check_from_n1() -> Event {
    Event::Message {
        from: N1,
        message: PeerMessage::ReadCheck(ReadCheck {
            term: Term(1),
            leader: N1,
            round: 3,
        }),
    }
}

fn confirms_round(actions: &[Action]) -> bool {
    actions.iter().any(|a| {
        matches!(a, Action::Send { message: PeerMessage::ReadCheckReply(r), .. } if r.round == 3)
    })
}

/// Proves a replica whose lost hard state took the term it had reached vouches for no leader
/// before it has heard every other replica's term (bug 28 of `notes/reliability.md`, seed
/// 165093's case with nothing readable beyond the damage): it acknowledges nothing beyond the
/// commit, and confirms no read round. It may have acknowledged the entries it lost in a later
/// term than its log shows, for a leader that committed them; a leader of an older term, cut
/// off meanwhile, would otherwise get a majority for entries that replace them, or for a read
/// that misses them. It follows N1 meanwhile (its entries are kept). Here N3 held term 2:
/// N2 takes it, and refuses N1's term-1 appends as stale.
#[test]
fn a_rebuild_whose_term_damage_hid_acknowledges_no_leader_before_hearing_all() {
    let mut n2 = rebuilt_term_unknown();
    let (_, noop) = leader();
    let actions = append_from_n1(&mut n2, first_append(noop.clone()));
    assert!(!acknowledges(&actions), "N3 unheard: {actions:?}");
    assert!(actions.contains(&Action::Persist(vec![noop.clone()])));
    let persisted = Event::Persisted {
        index: EntryIndex(1),
        term: Term(1),
    };
    let actions = step(&mut n2, persisted);
    assert!(!acknowledges(&actions), "{actions:?}");
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Send {
                message: PeerMessage::AppendReply(_),
                ..
            }
        )),
        "still an answer, so that the leader keeps sending: {actions:?}"
    );
    let actions = step(&mut n2, read_check_from_n1());
    assert!(!confirms_round(&actions), "{actions:?}");
    let actions = step(&mut n2, term_answer(N3, 2));
    assert_eq!(n2.term(), Term(2), "{actions:?}");
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Through(Term(2))));
    let actions = append_from_n1(&mut n2, heartbeat_after(&noop));
    assert!(!acknowledges(&actions), "N1's term is stale: {actions:?}");
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Send { to: N1, message: PeerMessage::AppendReply(r) } if r.term == Term(2)
        )),
        "N1 hears the newer term, and steps down: {actions:?}"
    );
}

/// Proves the same replica acknowledges what it knows committed, and no more: committed
/// entries stay committed whoever asks, so the leader may count it for them.
#[test]
fn a_rebuild_whose_term_damage_hid_acknowledges_only_the_commit_before_hearing_all() {
    let mut n2 = rebuilt_term_unknown();
    let n1 = leader_with_five_applied();
    let append = Append {
        entries: (1..=5)
            .map(|i| n1.entry(EntryIndex(i)).unwrap().clone())
            .collect(),
        commit: EntryIndex(3),
        ..first_append(n1.entry(EntryIndex(1)).unwrap().clone())
    };
    append_from_n1(&mut n2, append);
    let actions = step(
        &mut n2,
        Event::Persisted {
            index: EntryIndex(5),
            term: Term(1),
        },
    );
    let matched: Vec<EntryIndex> = actions
        .iter()
        .filter_map(|a| {
            let Action::Send {
                message: PeerMessage::AppendReply(reply),
                ..
            } = a
            else {
                return None;
            };
            let AppendOutcome::Matched { index } = reply.outcome else {
                return None;
            };
            Some(index)
        })
        .collect();
    assert_eq!(matched, vec![EntryIndex(3)], "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::AckWhenDurable { .. }))
    );
}

/// Proves a replica whose lost votes are unknown asks, once per election timeout, every
/// replica it has not heard from for its term, even while it follows a live leader (its
/// election timer never runs out, so its pre-votes would never ask).
#[test]
fn a_replica_that_lost_its_votes_asks_the_unheard_while_it_follows() {
    let mut n2 = rebuilt_term_unknown();
    n2.hard.repair = None;
    let (_, noop) = leader();
    append_from_n1(&mut n2, first_append(noop));
    let asked = one_election_timeout(&mut n2);
    assert_eq!(log_ends_asked(&asked), vec![N3], "N1 was heard: {asked:?}");
    step(&mut n2, term_answer(N3, 1));
    let asked = one_election_timeout(&mut n2);
    assert!(log_ends_asked(&asked).is_empty(), "all heard: {asked:?}");
}

/// Proves the same replica acknowledges once every other replica's term is heard and none is
/// above its leader's: what it acknowledged before the loss was in that term or an earlier one.
#[test]
fn a_rebuild_whose_term_damage_hid_acknowledges_once_all_are_heard() {
    let mut n2 = rebuilt_term_unknown();
    let (_, noop) = leader();
    append_from_n1(&mut n2, first_append(noop.clone()));
    step(
        &mut n2,
        Event::Persisted {
            index: EntryIndex(1),
            term: Term(1),
        },
    );
    step(&mut n2, term_answer(N3, 1));
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Through(Term(1))));
    let actions = append_from_n1(&mut n2, heartbeat_after(&noop));
    assert!(acknowledges(&actions), "{actions:?}");
    assert!(confirms_round(&step(&mut n2, read_check_from_n1())));
}

/// Proves a repair ends when every other replica's log ends at or before this one's: what
/// was lost was on no other replica, so never committed.
#[test]
fn a_repair_ends_when_no_other_replica_holds_what_was_lost() {
    let mut n2 = repairing(N2);
    let actions = step(&mut n2, vote_from(N1, 2, 0));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(HardState { repair: None, .. })))
    );
    let actions = step(&mut n2, vote_from(N3, 3, 0));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(HardState { repair: None, .. }))),
        "{actions:?}"
    );
}

fn log_end_from(from: NodeId, last_index: u64, ask: bool) -> Event {
    Event::Message {
        from,
        message: PeerMessage::LogEnd(LogEnd {
            term: Term(1),
            from,
            last_index: EntryIndex(last_index),
            last_term: Term(1),
            ask,
        }),
    }
}

fn log_ends_asked(actions: &[Action]) -> Vec<NodeId> {
    actions
        .iter()
        .filter_map(|a| {
            let Action::Send {
                to,
                message: PeerMessage::LogEnd(LogEnd { ask: true, .. }),
            } = a
            else {
                return None;
            };
            Some(*to)
        })
        .collect()
}

/// Proves a repairing replica hears the log ends of replicas that never campaign: at its
/// election timeout it asks every replica whose end it has not heard, or heard beyond its own
/// (that log may have been cut since), each answers, and the repair ends once no other replica
/// holds what was lost. (Found by the simulator: with the others silent, every node waited
/// for a repair, and no leader was ever elected.)
#[test]
fn a_repairing_replica_asks_the_silent_others_where_their_logs_end() {
    let mut n2 = repairing(N2);
    step(&mut n2, vote_from(N1, 2, 3));
    let actions = tick_until_active(&mut n2);
    assert_eq!(log_ends_asked(&actions), vec![N1, N3], "{actions:?}");
    step(&mut n2, log_end_from(N1, 0, false));
    let actions = tick_until_active(&mut n2);
    assert_eq!(log_ends_asked(&actions), vec![N3], "{actions:?}");
    let actions = step(&mut n2, log_end_from(N3, 0, false));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(HardState { repair: None, .. }))),
        "{actions:?}"
    );
    let actions = tick_until_active(&mut n2);
    assert_eq!(log_ends_asked(&actions), vec![], "repaired: {actions:?}");
}

/// Proves a replica answers a log end asked of it with its own, changing nothing else (no
/// term taken), and that an answer is not answered.
#[test]
fn a_log_end_asked_is_answered_and_changes_nothing() {
    let mut n1 = leader_with_five_applied();
    let term = n1.term();
    let actions = step(&mut n1, log_end_from(N2, 0, true));
    let Some(Action::Send {
        to,
        message: PeerMessage::LogEnd(end),
    }) = actions.first()
    else {
        panic!("no answer: {actions:?}");
    };
    assert_eq!(*to, N2);
    assert_eq!((end.from, end.ask), (N1, false));
    assert_eq!(end.last_index, n1.last_index());
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!((n1.term(), n1.role()), (term, Role::Leader));
    assert_eq!(step(&mut n1, log_end_from(N2, 0, false)), vec![]);
}

/// Proves a replica that lost a committed entry (the entries beyond the damage said so) and
/// hears that no other replica holds it reports every copy lost, and keeps its repair.
#[test]
fn a_lost_committed_entry_held_nowhere_else_is_unrecoverable() {
    let mut n2 = repairing_known_committed(N2, EntryIndex(3));
    step(&mut n2, vote_from(N1, 2, 0));
    let actions = step(&mut n2, vote_from(N3, 3, 0));
    assert!(
        actions.contains(&Action::Unrecoverable(EntryIndex(1))),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Send {
                message: PeerMessage::Vote(_),
                ..
            }
        )),
        "the others hear where its log ends: {actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(HardState { repair: None, .. })))
    );
}

/// Proves two damages found one after the other merge into the larger obligation: the
/// further log end and the higher commit index, never less.
#[test]
fn a_repair_obligation_never_shrinks() {
    let far = Repair {
        index: EntryIndex(20),
        term: Term(5),
        committed: EntryIndex(12),
    };
    let unknown_term = Repair {
        index: EntryIndex(15),
        term: Term(u64::MAX),
        committed: EntryIndex(14),
    };
    let merged = far.merge(unknown_term);
    assert_eq!(
        merged,
        Repair {
            index: EntryIndex(20),
            term: Term(5),
            committed: EntryIndex(14),
        }
    );
    assert_eq!(unknown_term.merge(far), merged);
}

/// Proves the repair ends, durably, once a leader has made the log durable through the
/// index the damage may have cost.
#[test]
fn a_repair_ends_once_the_log_is_durable_through_it() {
    let n1 = leader_with_five_applied();
    let entries: Vec<Entry> = (1..=5)
        .map(|i| n1.entry(EntryIndex(i)).unwrap().clone())
        .collect();
    let mut n2 = repairing(N2);
    let append = Append {
        term: Term(1),
        leader: N1,
        prev_index: EntryIndex(0),
        prev_term: Term(0),
        entries: entries.clone(),
        commit: EntryIndex(5),
        applied: None,
    };
    step(
        &mut n2,
        Event::Message {
            from: N1,
            message: PeerMessage::Append(append),
        },
    );
    let actions = step(
        &mut n2,
        Event::Persisted {
            index: EntryIndex(4),
            term: Term(1),
        },
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(_)))
    );
    let actions = step(
        &mut n2,
        Event::Persisted {
            index: EntryIndex(5),
            term: Term(1),
        },
    );
    assert!(
        actions.contains(&Action::PersistHardState(HardState {
            term: Term(1),
            voted_for: None,
            repair: None,
            votes_lost: None,
            members: first_members(),
            first_members: first_members(),
        })),
        "{actions:?}"
    );
}

/// Proves a replica of a newer term answers a snapshot chunk of an older leader with its term,
/// and that the old leader then steps down: a restarted follower that campaigned while the
/// leader could only send it a snapshot must not be left unheard.
#[test]
fn a_stale_snapshot_chunk_is_answered_with_the_newer_term() {
    let mut n2 = core(N2);
    tick_until_active(&mut n2);
    assert_eq!((n2.role(), n2.term()), (Role::Candidate, Term(1)));
    let chunk = SnapshotChunk {
        term: Term(0),
        leader: N1,
        index: EntryIndex(4),
        offset: 0,
        total: 10,
        data: vec![0; 10],
    };
    let actions = step(
        &mut n2,
        Event::Message {
            from: N1,
            message: PeerMessage::Snapshot(chunk),
        },
    );
    let reply = AppendReply {
        term: Term(1),
        from: N2,
        outcome: AppendOutcome::Conflict {
            hint: EntryIndex(0),
        },
        applied: None,
    };
    assert_eq!(
        actions,
        vec![Action::Send {
            to: N1,
            message: PeerMessage::AppendReply(reply.clone()),
        }]
    );

    let mut n1 = leader_with_five_applied();
    let newer = AppendReply {
        term: Term(n1.term().0 + 1),
        ..reply
    };
    step(
        &mut n1,
        Event::Message {
            from: N2,
            message: PeerMessage::AppendReply(newer),
        },
    );
    assert_eq!((n1.role(), n1.term()), (Role::Follower, Term(2)));
}

/// Proves a replica that heard from its leader recently ignores a disruptive vote request of a
/// higher term, and a leader without contact to a majority steps down.
#[test]
fn stickiness_and_check_quorum() {
    let (mut n1, noop) = leader();
    let mut n2 = core(N2);
    append_from_n1(&mut n2, first_append(noop));
    let disruptive = Vote {
        term: Term(5),
        pre: false,
        candidate: N3,
        last_index: EntryIndex(9),
        last_term: Term(4),
    };
    let actions = step(
        &mut n2,
        Event::Message {
            from: N3,
            message: PeerMessage::Vote(disruptive),
        },
    );
    assert_eq!(
        actions,
        vec![Action::Send {
            to: N3,
            message: PeerMessage::VoteReply(VoteReply {
                term: Term(1),
                pre: false,
                from: N2,
                granted: false
            })
        }]
    );
    assert_eq!(n2.term(), Term(1));

    let mut stepped_down = false;
    for _ in 0..30 {
        let actions = step(&mut n1, Event::Tick);
        stepped_down |= actions.contains(&Action::RoleChanged {
            role: Role::Follower,
            term: Term(1),
            leader: None,
        });
    }
    assert!(stepped_down, "a leader that hears from nobody steps down");
}

/// Three cores and a network in memory: messages delivered in order unless a node is cut off,
/// fsync instantaneous, every committed entry applied with a hash derived from its entry hash.
struct Cluster {
    cores: Vec<Core>,
    queue: VecDeque<(NodeId, Event)>,
    cut: Option<NodeId>,
    committed: Vec<Vec<Entry>>,
    wal: Vec<Vec<Entry>>,
}

impl Cluster {
    fn new() -> Self {
        Cluster::with(core)
    }

    /// Three cores that ask for pre-votes before they campaign.
    fn pre_voting() -> Self {
        Cluster::with(|id| {
            let mut config = config(id);
            config.pre_vote = true;
            Core::new(config, Recovered::default())
        })
    }

    fn with(make: impl Fn(NodeId) -> Core) -> Self {
        Cluster {
            cores: [N1, N2, N3].into_iter().map(make).collect(),
            queue: VecDeque::new(),
            cut: None,
            committed: vec![Vec::new(); 3],
            wal: vec![Vec::new(); 3],
        }
    }

    fn at(id: NodeId) -> usize {
        id.0 as usize - 1
    }

    fn carry_out(&mut self, id: NodeId, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Send { to, message } => {
                    if self.cut != Some(to) && self.cut != Some(id) {
                        self.queue
                            .push_back((to, Event::Message { from: id, message }));
                    }
                }
                Action::Persist(entries) => {
                    let last = entries.last().expect("non-empty").header;
                    self.wal[Self::at(id)].extend(entries);
                    self.queue.push_back((
                        id,
                        Event::Persisted {
                            index: last.index,
                            term: last.term,
                        },
                    ));
                }
                Action::AckWhenDurable { to, reply } => {
                    // Persistence is instantaneous here: the acknowledgement follows it.
                    if self.cut != Some(to) && self.cut != Some(id) {
                        let message = PeerMessage::AppendReply(reply);
                        self.queue
                            .push_back((to, Event::Message { from: id, message }));
                    }
                }
                Action::Truncate(from) => self.wal[Self::at(id)].retain(|e| e.index() < from),
                Action::Commit(index) => self.apply(id, index),
                Action::Load { peer, from, to } => {
                    let entries = self.wal[Self::at(id)]
                        .iter()
                        .filter(|e| e.index() >= from && e.index() <= to)
                        .cloned()
                        .collect();
                    self.queue.push_back((id, Event::Loaded { peer, entries }));
                }
                Action::PersistHardState(_)
                | Action::PersistKnownMembers(_)
                | Action::RoleChanged { .. }
                | Action::MembersChanged(_)
                | Action::ReadsConfirmed(_) => {}
                Action::Diverged(d) => panic!("divergence in a correct cluster: {d:?}"),
                Action::Unrecoverable(i) => panic!("nothing is damaged in these tests: {i}"),
                Action::SendSnapshot { .. } | Action::StoreSnapshotChunk(_) => {
                    panic!("no snapshot is taken in these tests, so none is sent")
                }
            }
        }
    }

    fn apply(&mut self, id: NodeId, index: EntryIndex) {
        let applied = &mut self.committed[Self::at(id)];
        while (applied.len() as u64) < index.0 {
            let next = EntryIndex(applied.len() as u64 + 1);
            let entry = self.cores[Self::at(id)]
                .entry(next)
                .expect("committed entries are in memory")
                .clone();
            let hash = StateHash(entry.header.hash.0);
            applied.push(entry);
            self.queue
                .push_back((id, Event::Applied(AppliedHash { index: next, hash })));
        }
    }

    fn deliver_all(&mut self) {
        while let Some((to, event)) = self.queue.pop_front() {
            if self.cut == Some(to) && matches!(event, Event::Message { .. }) {
                continue;
            }
            let mut out = Vec::new();
            self.cores[Self::at(to)].step(event, &mut out);
            self.cores[Self::at(to)].check_invariants();
            self.carry_out(to, out);
        }
    }

    fn tick(&mut self) {
        for id in [N1, N2, N3] {
            let mut out = Vec::new();
            self.cores[Self::at(id)].step(Event::Tick, &mut out);
            self.cores[Self::at(id)].check_invariants();
            self.carry_out(id, out);
        }
        self.deliver_all();
    }

    fn leader(&self) -> Option<NodeId> {
        self.cores
            .iter()
            .find(|c| c.role() == Role::Leader && Some(c.id()) != self.cut)
            .map(|c| c.id())
    }

    fn elect(&mut self) -> NodeId {
        for _ in 0..200 {
            self.tick();
            if let Some(leader) = self.leader() {
                return leader;
            }
        }
        panic!("no leader elected");
    }

    fn propose(&mut self, leader: NodeId, body: &[u8]) -> EntryIndex {
        let mut out = Vec::new();
        let index = self.cores[Self::at(leader)]
            .propose(
                EntryKind::Commands,
                1,
                Bytes::copy_from_slice(body),
                &mut out,
            )
            .expect("leader");
        self.carry_out(leader, out);
        self.deliver_all();
        index
    }
}

/// Proves three cores elect one leader, replicate and commit in order, fail over when the
/// leader is cut off (its uncommitted entry is replaced), and converge once it returns.
#[test]
fn three_cores_elect_replicate_and_fail_over() {
    let mut cluster = Cluster::new();
    let first = cluster.elect();
    for n in 0..20u8 {
        cluster.propose(first, &[n; 10]);
    }
    cluster.tick();
    let leader_commit = cluster.cores[Cluster::at(first)].commit_index();
    assert_eq!(
        leader_commit,
        EntryIndex(21),
        "no-op and 20 entries committed"
    );

    // Cut the leader off, propose on it (never commits), elect another.
    cluster.cut = Some(first);
    let lost = cluster.propose(first, b"never committed");
    let second = cluster.elect();
    assert_ne!(first, second);
    assert!(cluster.cores[Cluster::at(second)].term() > Term(1));
    for n in 0..5u8 {
        cluster.propose(second, &[100 + n; 3]);
    }

    // Heal: the old leader steps down, its lost entry is replaced, every log converges.
    cluster.cut = None;
    for _ in 0..50 {
        cluster.tick();
    }
    let logs: Vec<Vec<EntryHash>> = cluster
        .committed
        .iter()
        .map(|applied| applied.iter().map(|e| e.header.hash).collect())
        .collect();
    assert!(
        logs[0].len() >= 27,
        "every node applied the new leader's entries: {}",
        logs[0].len()
    );
    assert_eq!(logs[0], logs[1]);
    assert_eq!(logs[1], logs[2]);
    let at_lost = &cluster.committed[Cluster::at(first)][lost.0 as usize - 1];
    assert_ne!(
        at_lost.payload.as_ref(),
        b"never committed",
        "the uncommitted entry was replaced"
    );
    let leaders = cluster
        .cores
        .iter()
        .filter(|c| c.role() == Role::Leader)
        .count();
    assert_eq!(leaders, 1);
}

fn pre_voting(id: NodeId) -> Core {
    let mut config = config(id);
    config.pre_vote = true;
    Core::new(config, Recovered::default())
}

/// Proves an election timeout with pre-vote sends pre-vote requests for the next term and
/// changes nothing of its own (no term, no vote persisted); a majority of pre-votes starts the
/// real campaign, persisted before its requests go out.
#[test]
fn a_pre_vote_changes_nothing_until_a_majority_grants_it() {
    let mut n1 = pre_voting(N1);
    let actions = tick_until_active(&mut n1);
    let asked: Vec<NodeId> = actions
        .iter()
        .filter_map(|a| {
            let Action::Send {
                to,
                message: PeerMessage::Vote(v),
            } = a
            else {
                return None;
            };
            (v.pre && v.term == Term(1) && v.candidate == N1).then_some(*to)
        })
        .collect();
    assert_eq!(asked, vec![N2, N3], "{actions:?}");
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(_)))
    );
    assert_eq!(n1.term(), Term(0));
    let granted = |from| Event::Message {
        from,
        message: PeerMessage::VoteReply(VoteReply {
            term: Term(0),
            pre: true,
            from,
            granted: true,
        }),
    };
    let actions = step(&mut n1, granted(N2));
    assert_eq!(n1.term(), Term(1));
    let persisted = actions
        .iter()
        .position(|a| matches!(a, Action::PersistHardState(h) if h.term == Term(1)))
        .expect("the campaign's term is persisted");
    let first_request = actions
        .iter()
        .position(|a| matches!(a, Action::Send { message: PeerMessage::Vote(v), .. } if !v.pre))
        .expect("real vote requests");
    assert!(persisted < first_request, "{actions:?}");
}

/// Proves a candidate that won its election while a later pre-vote round of its own was still
/// open leads on: the round ends when it becomes leader, and a late pre-vote grant does not
/// make it campaign again (raise its term and drop its clients). The simulator found this.
#[test]
fn a_late_pre_vote_does_not_depose_a_new_leader() {
    let mut n1 = pre_voting(N1);
    tick_until_active(&mut n1);
    let pre_granted = |term| Event::Message {
        from: N3,
        message: PeerMessage::VoteReply(VoteReply {
            term: Term(term),
            pre: true,
            from: N3,
            granted: true,
        }),
    };
    step(&mut n1, pre_granted(0));
    assert_eq!((n1.role(), n1.term()), (Role::Candidate, Term(1)));
    // Its campaign's timer runs out: a pre-vote round for term 2 opens, still a candidate.
    tick_until_active(&mut n1);
    assert_eq!((n1.role(), n1.term()), (Role::Candidate, Term(1)));
    // A late vote of term 1 elects it; then a late grant of the round for term 2 arrives.
    step(&mut n1, vote_granted(1, N2));
    assert_eq!(n1.role(), Role::Leader);
    let actions = step(&mut n1, pre_granted(1));
    assert_eq!(
        (n1.role(), n1.term()),
        (Role::Leader, Term(1)),
        "{actions:?}"
    );
}

/// Proves a replica grants a pre-vote only when it has not heard from a leader lately and the
/// candidate's log is up to date, and that answering one leaves its term as it was.
#[test]
fn a_pre_vote_is_granted_only_without_a_leader() {
    let request = |term, last_index| Event::Message {
        from: N3,
        message: PeerMessage::Vote(Vote {
            term: Term(term),
            pre: true,
            candidate: N3,
            last_index: EntryIndex(last_index),
            last_term: Term(0),
        }),
    };
    let answer = |actions: &[Action]| {
        actions.iter().find_map(|a| {
            let Action::Send {
                message: PeerMessage::VoteReply(r),
                ..
            } = a
            else {
                return None;
            };
            r.pre.then_some(r.granted)
        })
    };
    let mut n2 = pre_voting(N2);
    assert_eq!(answer(&step(&mut n2, request(5, 0))), Some(true));
    assert_eq!(n2.term(), Term(0), "a pre-vote takes no term");
    // Once a leader is heard from, its followers refuse pre-votes while it is fresh.
    let (mut leader, _) = leader();
    let mut out = Vec::new();
    leader.step(request(9, 0), &mut out);
    assert_eq!(answer(&out), Some(false), "a leader refuses");
    assert_eq!(leader.role(), Role::Leader, "and stays leader at its term");
    assert_eq!(leader.term(), Term(1));
}

/// Proves a follower cut off from the others for many election timeouts comes back at the
/// term it left with, and the leader the others followed is still leader, at its term.
#[test]
fn a_replica_cut_off_cannot_depose_the_leader_when_it_returns() {
    let mut cluster = Cluster::pre_voting();
    let leader = cluster.elect();
    let term = cluster.cores[Cluster::at(leader)].term();
    let away = [N1, N2, N3].into_iter().find(|&n| n != leader).unwrap();
    cluster.cut = Some(away);
    for _ in 0..300 {
        cluster.tick();
    }
    assert_eq!(
        cluster.cores[Cluster::at(away)].term(),
        term,
        "no term raised while away"
    );
    cluster.cut = None;
    for _ in 0..100 {
        cluster.tick();
    }
    assert_eq!(cluster.leader(), Some(leader));
    assert_eq!(cluster.cores[Cluster::at(leader)].term(), term);
    let index = cluster.propose(leader, b"after the return");
    for _ in 0..10 {
        cluster.tick();
    }
    assert!(
        cluster.cores[Cluster::at(away)].commit_index() >= index,
        "it follows again"
    );
}

/// Proves three pre-voting cores elect, replicate and fail over as plain Raft does.
#[test]
fn pre_voting_cores_fail_over() {
    let mut cluster = Cluster::pre_voting();
    let first = cluster.elect();
    cluster.propose(first, b"one");
    cluster.cut = Some(first);
    let second = cluster.elect();
    assert_ne!(first, second);
    cluster.propose(second, b"two");
    cluster.cut = None;
    for _ in 0..50 {
        cluster.tick();
    }
    let applied: Vec<usize> = cluster.committed.iter().map(Vec::len).collect();
    assert!(
        applied.iter().all(|&n| n == applied[0] && n >= 4),
        "{applied:?}"
    );
}

/// Proves a leader keeps sending heartbeats to a follower whose entries it is reading back
/// from its WAL (a read that waits behind a full disk may take long): the follower hears from
/// its leader and does not time out.
#[test]
fn a_follower_whose_entries_are_read_back_still_hears_heartbeats() {
    // Entries 1 to 3 of term 1, applied, none of them in memory any more.
    let recovered = Recovered {
        hard_state: HardState {
            term: Term(1),
            voted_for: None,
            repair: None,
            votes_lost: None,
            members: first_members(),
            first_members: None,
        },
        base: LogBase::default(),
        terms: vec![Term(1); 3],
        hashes: vec![EntryHash::default(); 3],
        window: Vec::new(),
        applied: Some(AppliedHash {
            index: EntryIndex(3),
            hash: StateHash([3; 32]),
        }),
        members: None,
        known: KnownRead::Missing,
    };
    let mut n1 = Core::new(config(N1), recovered);
    tick_until_active(&mut n1);
    step(&mut n1, vote_granted(2, N2));
    assert_eq!(n1.role(), Role::Leader);
    // N2 lost everything: what it needs must be read back.
    let asked = step(&mut n1, conflict(2, N2, 0));
    assert!(
        asked
            .iter()
            .any(|a| matches!(a, Action::Load { peer, .. } if *peer == N2)),
        "{asked:?}"
    );
    let heartbeats = (0..4)
        .flat_map(|_| step(&mut n1, Event::Tick))
        .filter(|a| {
            matches!(a, Action::Send { to, message: PeerMessage::Append(append) }
                if *to == N2 && append.entries.is_empty())
        })
        .count();
    assert!(
        heartbeats >= 1,
        "no heartbeat reached N2 while its entries were read"
    );
}

/// Proves a repair is not released on the strength of entries this replica holds only in
/// memory: after appending entries 1 to 3 from the leader (not yet durable), hearing that the
/// others' logs end at 3 says nothing about what a crash would leave (its log ends at 0), so
/// the repair stays. Found by the simulator with full disks (appends held for long).
#[test]
fn a_repair_is_not_released_by_entries_not_yet_durable() {
    let (mut n1, noop) = leader();
    let mut entries = vec![noop];
    for n in 2..=3u8 {
        let mut out = Vec::new();
        n1.propose(EntryKind::Commands, 1, Bytes::from(vec![n]), &mut out)
            .unwrap();
        let Some(Action::Persist(appended)) = out.into_iter().next() else {
            panic!("the leader persists what it proposes");
        };
        entries.extend(appended);
    }
    let mut n2 = repairing(N2);
    let append = Append {
        entries,
        ..first_append(n1.entry(EntryIndex(1)).unwrap().clone())
    };
    let actions = append_from_n1(&mut n2, append);
    assert!(
        actions.iter().any(|a| matches!(a, Action::Persist(_))),
        "{actions:?}"
    );
    assert_eq!(n2.last_index(), EntryIndex(3));
    let released = |actions: &[Action]| {
        actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(HardState { repair: None, .. })))
    };
    // The leader falls silent: vote requests count again.
    for _ in 0..10 {
        step(&mut n2, Event::Tick);
    }
    assert!(!released(&step(&mut n2, vote_from(N1, 8, 3))));
    assert!(
        !released(&step(&mut n2, vote_from(N3, 9, 3))),
        "released with nothing durable"
    );
}

/// A replica rebuilt on the operator's order after its hard state was damaged: term 0, its
/// votes lost, its log empty and owed entries 1-5 of term 1.
fn lost_votes(id: NodeId, pre_vote: bool) -> Core {
    let mut config = config(id);
    config.pre_vote = pre_vote;
    let recovered = Recovered {
        hard_state: HardState {
            term: Term(0),
            voted_for: None,
            repair: Some(Repair {
                index: EntryIndex(5),
                term: Term(1),
                committed: EntryIndex(0),
            }),
            votes_lost: Some(LostVotes::Unknown),
            members: first_members(),
            first_members: None,
        },
        ..Recovered::default()
    };
    Core::new(config, recovered)
}

/// Proves a replica whose hard state was lost votes in no term that another replica held once
/// it has heard from them all: it may have voted there before the loss. Here N2 had voted for
/// N1 in term 5 (N1 won with it); without the rule, N2 would give N3 a second vote in term 5,
/// and term 5 could have two leaders.
#[test]
fn a_replica_that_lost_its_votes_votes_only_above_every_term_the_others_hold() {
    let mut n2 = lost_votes(N2, false);
    assert!(!granted(&step(&mut n2, vote_from(N3, 5, 5))), "N1 unheard");
    // An acknowledgement travels apart from vote requests and may predate the loss: it does
    // not count as hearing N1.
    let old_ack = Event::Message {
        from: N1,
        message: PeerMessage::AppendReply(AppendReply {
            term: Term(4),
            from: N1,
            outcome: AppendOutcome::Matched {
                index: EntryIndex(0),
            },
            applied: None,
        }),
    };
    step(&mut n2, old_ack);
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Unknown));
    let actions = step(&mut n2, vote_from(N1, 5, 5));
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::PersistHardState(HardState {
                votes_lost: Some(LostVotes::Through(Term(5))),
                ..
            })
        )),
        "the bound is durable: {actions:?}"
    );
    assert!(!granted(&actions), "term 5 may hold a lost vote");
    assert!(!granted(&step(&mut n2, vote_from(N3, 5, 5))));
    assert!(granted(&step(&mut n2, vote_from(N3, 6, 5))));
    assert_eq!(n2.hard.votes_lost, None, "above the bound it is gone");
}

/// Proves a replica with lost votes of unknown terms never votes for itself: its election
/// timeouts send pre-vote requests only (they bind nobody), whose answers tell it the others'
/// terms; once bounded, it campaigns above every term heard.
#[test]
fn a_replica_that_lost_its_votes_campaigns_only_above_every_term_heard() {
    let mut n2 = lost_votes(N2, true);
    n2.hard.repair = None;
    let actions = tick_until_active(&mut n2);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::PersistHardState(_))),
        "no vote for itself: {actions:?}"
    );
    let answer = |from, term| Event::Message {
        from,
        message: PeerMessage::VoteReply(VoteReply {
            term: Term(term),
            pre: true,
            from,
            granted: true,
        }),
    };
    step(&mut n2, answer(N1, 7));
    step(&mut n2, answer(N3, 4));
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Through(Term(7))));
    let actions = tick_until_active(&mut n2);
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Send { message: PeerMessage::Vote(v), .. } if v.pre && v.term == Term(8)
        )),
        "{actions:?}"
    );
    step(&mut n2, answer(N1, 7));
    assert_eq!(n2.term(), Term(8), "campaigning above the bound");
    assert_eq!(n2.hard.voted_for, Some(N2));
    assert_eq!(n2.hard.votes_lost, None);
}

/// N2 rebuilt after its hard state was lost (owing entries 1-5), started with the cluster
/// file's `nodes` and the member list `members` in its hard state: less than [`lost_votes`]
/// knows, for the cases where its lists do not name it or name nobody else.
fn rebuilt_knowing(nodes: Vec<NodeId>, members: Option<super::MemberSet>) -> Core {
    let mut config = config(N2);
    config.nodes = nodes;
    let hard_state = HardState {
        members,
        first_members: None,
        ..lost_votes(N2, false).hard
    };
    let recovered = Recovered {
        hard_state,
        ..Recovered::default()
    };
    Core::new(config, recovered)
}

/// Proves a replica whose lost votes are unknown, and that is a member of no list it knows,
/// still bounds them: it asks every replica its lists name for its term and votes once it
/// has heard them all. Here N2 joined a running cluster (no cluster-file nodes) and was rebuilt
/// from a snapshot that predates its addition: its hard state names N1 and N3 only. Without
/// the rule it never asked and never voted, and a cluster that needed its vote never elected
/// a leader again (simulator seed 210228). A replica that knows no other replica asks nobody.
#[test]
fn a_replica_that_lost_its_votes_and_knows_itself_no_member_bounds_them_by_the_others() {
    let mut knows_nobody = rebuilt_knowing(Vec::new(), None);
    assert!(log_ends_asked(&one_election_timeout(&mut knows_nobody)).is_empty());
    let mut n2 = rebuilt_knowing(Vec::new(), Some(super::MemberSet::of([N1, N3])));
    assert!(!n2.is_member());
    let asked = one_election_timeout(&mut n2);
    assert_eq!(log_ends_asked(&asked), vec![N1, N3], "{asked:?}");
    step(&mut n2, term_answer(N1, 4));
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Unknown), "N3 unheard");
    step(&mut n2, term_answer(N3, 6));
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Through(Term(6))));
    assert!(
        !granted(&step(&mut n2, vote_from(N1, 6, 5))),
        "term 6 may hold a lost vote"
    );
    assert!(granted(&step(&mut n2, vote_from(N1, 7, 5))));
}

/// Proves the same through the path a rebuild takes: N2 joined a running cluster and was
/// rebuilt empty (it knows no other replica), then installs N1's snapshot from before its
/// re-addition, whose members are N1 and N3 only. N1, heard before the install, counts as
/// heard: whatever a replica hears after its start is newer than its lost votes.
#[test]
fn a_replica_that_lost_its_votes_bounds_them_by_a_snapshots_members() {
    let mut n2 = rebuilt_knowing(Vec::new(), None);
    let chunk = SnapshotChunk {
        term: Term(4),
        leader: N1,
        index: EntryIndex(4),
        offset: 0,
        total: 10,
        data: vec![0; 10],
    };
    let from_n1 = PeerMessage::Snapshot(chunk);
    step(
        &mut n2,
        Event::Message {
            from: N1,
            message: from_n1,
        },
    );
    let base = LogBase {
        index: EntryIndex(4),
        term: Term(1),
        hash: EntryHash([4; 32]),
    };
    let installed = Event::Installed {
        base,
        applied: AppliedHash {
            index: EntryIndex(4),
            hash: StateHash([4; 32]),
        },
        members: Some(Members::of_ids([N1, N3])),
    };
    step(&mut n2, installed);
    assert!(!n2.is_member());
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Unknown), "N3 unheard");
    step(&mut n2, term_answer(N3, 2));
    assert_eq!(
        n2.hard.votes_lost,
        Some(LostVotes::Through(Term(4))),
        "N1 was heard before the install"
    );
}

/// Proves a replica whose lists name only itself (a cluster file of one node, which others
/// joined later) bounds nothing by the first term it hears: it has no list of the others yet.
#[test]
fn a_replica_that_lost_its_votes_and_knows_no_other_bounds_nothing() {
    let mut n2 = rebuilt_knowing(vec![N2], None);
    assert!(log_ends_asked(&one_election_timeout(&mut n2)).is_empty());
    step(&mut n2, vote_from(N1, 5, 5));
    assert_eq!(n2.hard.votes_lost, Some(LostVotes::Unknown));
}

/// Proves a repairing replica never helps elect a candidate that lacks an entry its damage
/// showed committed, even when every other replica's log ends no further (the third was
/// damaged too: then every copy is lost, and electing the candidate would rewrite it).
#[test]
fn a_repairing_replica_never_votes_for_a_log_without_what_it_knows_committed() {
    let mut n2 = repairing_known_committed(N2, EntryIndex(4));
    assert!(
        !granted(&step(&mut n2, vote_from(N3, 2, 2))),
        "N3 asks first"
    );
    assert!(
        !granted(&step(&mut n2, vote_from(N1, 3, 3))),
        "N1's log ends after N3's, but before entry 4"
    );
    assert!(granted(&step(&mut n2, vote_from(N1, 4, 4))));
}

/// Proves the leader's rules for changing members: only the leader takes one, one at a time, and a leader that removes itself leads until the change commits,
/// then steps down and never campaigns again, while the two members left elect one of them
/// and commit without it.
#[test]
fn members_change_one_at_a_time_and_a_removed_leader_steps_down() {
    use crate::members::{MemberChange, Members};
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let mut out = Vec::new();
    let follower = if leader == N1 { N2 } else { N1 };
    let other = &mut cluster.cores[Cluster::at(follower)];
    assert!(matches!(
        other.propose_members(&MemberChange::Remove(leader), &mut out),
        Err(super::ChangeRefused::NotLeader(_))
    ));
    let core = &mut cluster.cores[Cluster::at(leader)];
    let index = core
        .propose_members(&MemberChange::Remove(leader), &mut out)
        .expect("settled");
    assert_eq!(
        core.propose_members(&MemberChange::Remove(leader), &mut out),
        Err(super::ChangeRefused::Pending)
    );
    assert!(
        !core.is_member() && core.role() == Role::Leader,
        "leads until committed"
    );
    cluster.carry_out(leader, out);
    cluster.deliver_all();
    cluster.tick();
    let removed = &cluster.cores[Cluster::at(leader)];
    assert!(removed.commit_index() >= index);
    assert_eq!(
        removed.role(),
        Role::Follower,
        "stepped down once committed"
    );
    let left: Vec<NodeId> = [N1, N2, N3].into_iter().filter(|&n| n != leader).collect();
    assert_eq!(removed.members(), &Members::of_ids(left.iter().copied()));
    let next = cluster.elect();
    assert!(left.contains(&next), "one of the members left leads");
    let proposed = cluster.propose(next, b"after the change");
    for _ in 0..100 {
        cluster.tick();
    }
    assert!(cluster.cores[Cluster::at(next)].commit_index() >= proposed);
    assert_eq!(
        cluster.cores[Cluster::at(leader)].role(),
        Role::Follower,
        "the removed node never campaigns"
    );
}

/// Proves a replica restarted after its log lost a members entry it had appended (damage, or
/// a crash before a new leader cut it) starts from the members before that entry, not from
/// those of the lost entry, which its hard state had kept. (Found by the simulator: a leader
/// elected after such a loss proposed one change more on top of a list no log held, and a
/// committed entry then changed two members at once, I11.)
#[test]
fn a_restart_after_losing_an_appended_members_entry_starts_from_the_members_before_it() {
    let mut n1 = leader_with_five_applied();
    let actions = add_node_4(&mut n1);
    let hard = last_hard_state(&actions);
    // The restart finds entries 1 to 5 only: the members entry (6) is gone.
    let entries: Vec<Entry> = (1..=5)
        .map(|i| n1.entry(EntryIndex(i)).unwrap().clone())
        .collect();
    let restarted = restarted(N1, hard, &entries);
    assert_eq!(member_ids(&restarted), vec![N1, N2, N3]);
}

/// The leader adds node 4 (`N2` acknowledging its log first): what it did.
fn add_node_4(leader: &mut Core) -> Vec<Action> {
    use crate::members::{Member, MemberChange};
    let last = leader.last_index().0;
    step(leader, matched(leader.term().0, N2, last));
    let change = MemberChange::Add(Member {
        id: NodeId(4),
        peer_address: "n4".into(),
        client_address: "n4".into(),
    });
    let mut out = Vec::new();
    leader.propose_members(&change, &mut out).expect("settled");
    out
}

/// The last hard state `actions` made durable.
fn last_hard_state(actions: &[Action]) -> HardState {
    actions
        .iter()
        .rev()
        .find_map(|a| {
            let Action::PersistHardState(hard) = a else {
                return None;
            };
            Some(*hard)
        })
        .expect("the members are kept before the entry is acknowledged")
}

fn member_ids(core: &Core) -> Vec<NodeId> {
    core.members().ids().collect()
}

/// A replica restarted from `entries` (the first five applied) and `hard`.
fn restarted(id: NodeId, hard: HardState, entries: &[Entry]) -> Core {
    let recovered = Recovered {
        hard_state: hard,
        base: LogBase::default(),
        terms: entries.iter().map(|e| e.header.term).collect(),
        hashes: entries.iter().map(|e| e.header.hash).collect(),
        window: entries.to_vec(),
        applied: Some(AppliedHash {
            index: EntryIndex(5),
            hash: StateHash([5; 32]),
        }),
        members: None,
        known: KnownRead::Missing,
    };
    Core::new(config(id), recovered)
}

/// Proves a follower restarted with an uncommitted members entry in its log, which a new
/// leader then cuts, falls back to the members before that entry, not to the cut entry's
/// (which its hard state had kept as the newest list), without any damage.
#[test]
fn a_members_entry_cut_after_a_restart_leaves_the_members_before_it() {
    use crate::members::{Member, MemberChange};
    let mut n1 = leader_with_five_applied();
    let change = MemberChange::Add(Member {
        id: NodeId(4),
        peer_address: "n4".into(),
        client_address: "n4".into(),
    });
    step(&mut n1, matched(1, N2, 5));
    n1.propose_members(&change, &mut Vec::new())
        .expect("settled");
    let entries: Vec<Entry> = (1..=6)
        .map(|i| n1.entry(EntryIndex(i)).unwrap().clone())
        .collect();
    // N2 appended all six (the sixth uncommitted), keeping the list it names.
    let mut n2 = core(N2);
    let actions = append_from_n1(
        &mut n2,
        Append {
            term: Term(1),
            leader: N1,
            prev_index: EntryIndex(0),
            prev_term: Term(0),
            entries: entries.clone(),
            commit: EntryIndex(5),
            applied: None,
        },
    );
    let mut n2 = restarted(N2, last_hard_state(&actions), &entries);
    assert_eq!(member_ids(&n2), vec![N1, N2, N3, NodeId(4)]);
    // N3 leads term 2 from the first five entries: its no-op replaces the sixth.
    let term_1 = HardState {
        term: Term(1),
        ..HardState::default()
    };
    let mut n3 = restarted(N3, term_1, &entries[..5]);
    tick_until_active(&mut n3);
    let term = n3.term().0;
    let actions = step(&mut n3, vote_granted(term, N1));
    assert_eq!(n3.role(), Role::Leader, "{actions:?}");
    let noop = n3.entry(EntryIndex(6)).unwrap().clone();
    step(
        &mut n2,
        Event::Message {
            from: N3,
            message: PeerMessage::Append(Append {
                term: n3.term(),
                leader: N3,
                prev_index: EntryIndex(5),
                prev_term: Term(1),
                entries: vec![noop],
                commit: EntryIndex(5),
                applied: None,
            }),
        },
    );
    assert_eq!(n3.term(), Term(2));
    assert_eq!(
        n2.entry(EntryIndex(6)).map(|e| e.header.term),
        Some(Term(2))
    );
    assert_eq!(member_ids(&n2), vec![N1, N2, N3]);
}

fn read_check_reply(term: u64, from: NodeId, round: u64) -> Event {
    Event::Message {
        from,
        message: PeerMessage::ReadCheckReply(ReadCheckReply {
            term: Term(term),
            from,
            round,
        }),
    }
}

/// Proves a leader's read round goes to every other member and is confirmed once a majority
/// (itself and one more) answered it in its term, and not by an answer of another term, a
/// stranger's, or one from a round it has not started.
#[test]
fn a_read_round_needs_a_majority_of_the_leaders_term() {
    let (mut n1, _) = leader();
    let mut out = Vec::new();
    let round = n1.start_read_round(&mut out);
    let check = |to| Action::Send {
        to,
        message: PeerMessage::ReadCheck(ReadCheck {
            term: Term(1),
            leader: N1,
            round,
        }),
    };
    assert_eq!(out, vec![check(N2), check(N3)]);
    assert!(n1.read_round_confirmed() < round);
    assert!(
        step(&mut n1, read_check_reply(0, N2, round)).is_empty(),
        "an older term"
    );
    assert!(
        step(&mut n1, read_check_reply(1, NodeId(9), round)).is_empty(),
        "a stranger"
    );
    assert!(
        step(&mut n1, read_check_reply(1, N2, round + 1)).is_empty(),
        "not started"
    );
    assert!(
        step(&mut n1, read_check_reply(1, N2, 0)).is_empty(),
        "no round"
    );
    assert!(n1.read_round_confirmed() < round);
    let confirmed = step(&mut n1, read_check_reply(1, N3, round));
    assert_eq!(confirmed, vec![Action::ReadsConfirmed(round)]);
    assert_eq!(n1.read_round_confirmed(), round);
    assert!(
        step(&mut n1, read_check_reply(1, N2, round)).is_empty(),
        "once is enough"
    );
}

/// Proves a member answers a check with its own term, taking a newer leader's term (and the
/// leader) from the check; that it echoes the round only to a check of its term (an older
/// leader's check is answered with no round: a leader restarted in a newer term counts its
/// rounds from 0 again); and that a leader answered with a newer term steps down and confirms
/// nothing.
#[test]
fn a_read_check_answers_with_the_term_and_a_newer_term_deposes() {
    let mut n2 = core(N2);
    let check = |term: u64| Event::Message {
        from: N1,
        message: PeerMessage::ReadCheck(ReadCheck {
            term: Term(term),
            leader: N1,
            round: 4,
        }),
    };
    let actions = step(&mut n2, check(3));
    assert_eq!(n2.term(), Term(3));
    assert_eq!(n2.leader(), Some(N1));
    let reply = Action::Send {
        to: N1,
        message: PeerMessage::ReadCheckReply(ReadCheckReply {
            term: Term(3),
            from: N2,
            round: 4,
        }),
    };
    assert_eq!(actions.last(), Some(&reply));
    let deposing = Action::Send {
        to: N1,
        message: PeerMessage::ReadCheckReply(ReadCheckReply {
            term: Term(3),
            from: N2,
            round: super::read_check::NO_ROUND,
        }),
    };
    assert_eq!(
        step(&mut n2, check(2)),
        vec![deposing],
        "a stale leader hears the term, and no round of it is confirmed"
    );

    let (mut n1, _) = leader();
    let round = n1.start_read_round(&mut Vec::new());
    step(&mut n1, read_check_reply(3, N2, round));
    assert_eq!(n1.role(), Role::Follower);
    assert_eq!(n1.term(), Term(3));
    assert!(n1.read_round_confirmed() < round);
}

/// Proves an answer to a round of an earlier leadership never confirms a round of a later
/// one, even from a member of the later term: rounds are counted for the replica's whole run.
#[test]
fn an_answer_from_an_earlier_leadership_does_not_count() {
    let (mut n1, _) = leader();
    let old_round = n1.start_read_round(&mut Vec::new());
    // Deposed by term 2, then leader of term 3.
    step(&mut n1, read_check_reply(2, N2, old_round));
    assert_eq!(n1.role(), Role::Follower);
    tick_until_active(&mut n1);
    step(&mut n1, vote_granted(3, N2));
    assert_eq!((n1.role(), n1.term()), (Role::Leader, Term(3)));
    let round = n1.start_read_round(&mut Vec::new());
    assert!(round > old_round);
    assert!(step(&mut n1, read_check_reply(3, N2, old_round)).is_empty());
    assert!(n1.read_round_confirmed() < round);
    assert_eq!(
        step(&mut n1, read_check_reply(3, N3, round)),
        vec![Action::ReadsConfirmed(round)]
    );
}

/// Proves a replica repairing damage whose log no longer names it (the entry that added it was
/// cut) votes by the repair's rules whichever members its hard state kept: a candidate counts
/// only its own members' votes (simulator seed 1700 found a cluster where no candidate could
/// win while such a replica refused).
#[test]
fn a_repairing_replica_votes_whatever_members_its_log_names() {
    let repairing = |kept: &[NodeId]| {
        let hard_state = HardState {
            term: Term(2),
            voted_for: None,
            repair: Some(Repair {
                index: EntryIndex(5),
                term: Term(2),
                committed: EntryIndex(4),
            }),
            votes_lost: None,
            members: Some(super::MemberSet::of(kept.iter().copied())),
            first_members: Some(super::MemberSet::of([N1, N3, NodeId(4)])),
        };
        let recovered = Recovered {
            hard_state,
            ..Recovered::default()
        };
        Core::new(config(N2), recovered)
    };
    let vote = Event::Message {
        from: N3,
        message: PeerMessage::Vote(Vote {
            term: Term(3),
            pre: false,
            candidate: N3,
            last_index: EntryIndex(5),
            last_term: Term(2),
        }),
    };
    let granted = |actions: &[Action]| {
        actions.iter().any(
            |a| matches!(a, Action::Send { message: PeerMessage::VoteReply(r), .. } if r.granted),
        )
    };
    let mut named = repairing(&[N1, N2, N3]);
    assert!(!named.is_member(), "its log names other members");
    assert!(granted(&step(&mut named, vote.clone())));
    let mut unnamed = repairing(&[N1, N3, NodeId(4)]);
    assert!(granted(&step(&mut unnamed, vote)));
}

/// Proves a member that has gone silent does not count as holding the log: N2 acknowledged
/// everything, then was heard no more for an election timeout (dead), and adding N4 beside
/// it is refused; had it been taken, [1, 2, 3, 4] would need 3 votes of N1, N3 and a
/// newcomer whose empty log votes for nobody. Once N2 answers again, it counts.
#[test]
fn a_leader_counts_no_silent_member_as_holding_the_log() {
    use crate::members::{Member, MemberChange};
    let change = MemberChange::Add(Member {
        id: NodeId(4),
        peer_address: "n4".into(),
        client_address: "n4".into(),
    });
    let mut n1 = leader_with_five_applied();
    step(&mut n1, matched(1, N2, 5));
    for _ in 0..n1.config.election_ticks_min {
        step(&mut n1, Event::Tick);
        // N3 keeps answering: the leader keeps its quorum.
        step(&mut n1, matched(1, N3, 5));
    }
    assert_eq!(n1.role(), Role::Leader);
    let refused = n1.propose_members(&change, &mut Vec::new());
    assert_eq!(refused, Err(ChangeRefused::Unheld), "N2 is silent");
    step(&mut n1, matched(1, N2, 5));
    let taken = n1.propose_members(&change, &mut Vec::new());
    assert_eq!(taken, Ok(EntryIndex(6)), "N2 answers again");
}

/// Proves a leader takes no change of members while fewer than a majority of the new members,
/// counting only members now, hold the log through the entry that made them members. A node
/// that holds none of it votes for nobody (an empty log refuses every candidate with
/// entries): here N2 has acknowledged nothing, and had N1 taken the change, [1, 2, 3, 4]
/// would need 3 votes where only N1 and N3 could give one, for good (simulator seed 1672).
#[test]
fn a_leader_adds_no_member_while_a_majority_of_the_new_members_lacks_the_log() {
    use crate::members::{Member, MemberChange};
    let change = MemberChange::Add(Member {
        id: NodeId(4),
        peer_address: "n4".into(),
        client_address: "n4".into(),
    });
    let mut n1 = leader_with_five_applied();
    let refused = n1.propose_members(&change, &mut Vec::new());
    assert_eq!(refused, Err(ChangeRefused::Unheld), "N2 holds nothing");
    assert!(!n1.members_pending());
    step(&mut n1, matched(1, N2, 5));
    let taken = n1.propose_members(&change, &mut Vec::new());
    assert_eq!(taken, Ok(EntryIndex(6)), "N1, N2 and N3 hold the log");
}

/// Proves a replica repairing damage keeps, as the replicas that may hold what it lost, every
/// members list it knew since the damage: refilled with entries whose members entry (6: N1 to
/// N4) is older than the list it kept (N1 to N5), it still waits to hear N5, and refuses a
/// candidate whose log is shorter than N5's. Before, the kept list followed the refilled log,
/// N5 dropped out, and the vote was granted: simulator seed 123335 then replaced a committed
/// entry.
#[test]
fn a_repairing_replica_keeps_every_members_list_it_knew() {
    let mut n1 = leader_with_five_applied();
    add_node_4(&mut n1);
    let entries: Vec<Entry> = (1..=6)
        .map(|i| n1.entry(EntryIndex(i)).unwrap().clone())
        .collect();
    let five = super::MemberSet::of([N1, N2, N3, NodeId(4), NodeId(5)]);
    let recovered = Recovered {
        hard_state: HardState {
            term: Term(1),
            voted_for: None,
            repair: Some(Repair {
                index: EntryIndex(10),
                term: Term(1),
                committed: EntryIndex(9),
            }),
            votes_lost: None,
            members: Some(five),
            first_members: None,
        },
        ..Recovered::default()
    };
    let mut n2 = Core::new(config(N2), recovered);
    let append = Append {
        term: n1.term(),
        leader: N1,
        prev_index: EntryIndex(0),
        prev_term: Term(0),
        entries,
        commit: EntryIndex(5),
        applied: None,
    };
    append_from_n1(&mut n2, append);
    assert_eq!(
        member_ids(&n2),
        vec![N1, N2, N3, NodeId(4)],
        "the refilled log's"
    );
    // The leader falls silent; the others say where their logs end.
    tick_until_active(&mut n2);
    for (from, end) in [(N1, 6), (NodeId(4), 6), (NodeId(5), 10)] {
        step(&mut n2, log_end_from(from, end, false));
    }
    let term = n2.term().0 + 1;
    assert!(
        !granted(&step(&mut n2, vote_from(N3, term, 9))),
        "N5 holds more"
    );
    step(&mut n2, log_end_from(NodeId(5), 9, false));
    let term = n2.term().0 + 1;
    assert!(
        granted(&step(&mut n2, vote_from(N3, term, 9))),
        "no other holds more"
    );
}

/// Proves a member re-added while it was cut off votes once it returns, although its log
/// still ends in the list that removed it (it led, and removed itself): the leader that added
/// it back is then cut off, and the one other member can only win with its vote. A candidate
/// counts only its own members' votes, so a voter's own list does not make an election
/// unsafe (Raft's thesis, 4.2.1); with the vote refused, no leader could be elected for good
/// (simulator seed 113971).
#[test]
fn a_member_re_added_while_cut_off_votes_when_it_returns() {
    use crate::members::{Member, MemberChange};
    for mut cluster in [Cluster::new(), Cluster::pre_voting()] {
        let away = cluster.elect();
        change_members(&mut cluster, away, MemberChange::Remove(away));
        let returned = &cluster.cores[Cluster::at(away)];
        assert!(!returned.is_member(), "its log ends in the list without it");
        cluster.cut = Some(away);
        let next = cluster.elect();
        let back = Member {
            id: away,
            peer_address: "back".into(),
            client_address: "back".into(),
        };
        change_members(&mut cluster, next, MemberChange::Add(back));
        assert!(!cluster.cores[Cluster::at(away)].is_member());
        cluster.cut = Some(next);
        let third = [N1, N2, N3].into_iter().find(|&n| n != away && n != next);
        assert_eq!(Some(cluster.elect()), third);
    }
}

/// Has `leader` take `change` and ticks until it is committed.
fn change_members(cluster: &mut Cluster, leader: NodeId, change: crate::members::MemberChange) {
    let mut out = Vec::new();
    let index = cluster.cores[Cluster::at(leader)]
        .propose_members(&change, &mut out)
        .expect("the leader takes the change");
    cluster.carry_out(leader, out);
    for _ in 0..10 {
        cluster.tick();
    }
    assert!(cluster.cores[Cluster::at(leader)].commit_index() >= index);
}

const N4: NodeId = NodeId(4);

/// N1 rebuilt after its hard state was lost (owing entries 1-5 of term 1), its lists and its
/// cluster file naming N1, N2 and N3, and `known` what its start read of its record of known
/// members.
fn rebuilt_n1_with_record(known: KnownRead) -> Core {
    let recovered = Recovered {
        hard_state: lost_votes(N1, false).hard,
        known,
        ..Recovered::default()
    };
    Core::new(config(N1), recovered)
}

/// The record of N1 in the example of `notes/decisions/data-dir.md` ("Whom it hears"): N3
/// was replaced by N4, for which N1 voted in term 20; N2 and N3 it never vouched for.
fn voted_n4_in_20() -> KnownMembers {
    let nodes = [(N1, Term(0)), (N2, Term(0)), (N3, Term(0)), (N4, Term(20))];
    KnownMembers::new(Term(0), nodes)
}

/// N3's term-19 append of N1's no-op, as leader.
fn append_of_n3_in_19(noop: Entry) -> Event {
    Event::Message {
        from: N3,
        message: PeerMessage::Append(Append {
            term: Term(19),
            leader: N3,
            ..first_append(noop)
        }),
    }
}

/// Proves a replica rebuilt after losing its hard state waits for the nodes its record of
/// known members names beyond its lists. N1 voted for N4 in term 20 (N4 had replaced N3),
/// then lost its hard state; rebuilt from the cluster file's list it hears N2 and N3 in term
/// 19. Without the record it bounds its lost votes at 19: it vouches for N3, a leader older
/// than N4, and votes again in term 20, where it voted for N4. With it, N4 is a judge: neither,
/// until term 20 is heard (N4 then passed: every vote it got is at or below 20).
#[test]
fn a_rebuilt_replica_waits_for_a_node_its_record_names_beyond_its_lists() {
    let mut n1 = rebuilt_n1_with_record(KnownRead::Whole(voted_n4_in_20()));
    step(&mut n1, term_answer(N2, 19));
    step(&mut n1, term_answer(N3, 19));
    assert_eq!(n1.hard.votes_lost, Some(LostVotes::Unknown), "N4 unheard");
    let (_, noop) = leader();
    let actions = step(&mut n1, append_of_n3_in_19(noop));
    assert!(
        !acknowledges(&actions),
        "N3 of term 19 is older than N4: {actions:?}"
    );
    assert!(
        !granted(&step(&mut n1, vote_from(N2, 20, 5))),
        "term 20 holds its vote for N4"
    );
    assert_eq!(
        n1.hard.votes_lost,
        Some(LostVotes::Through(Term(20))),
        "N2's term 20 reaches N4's record: N4 is passed"
    );
    assert!(n1.may_vote_in(Term(21)), "above the bound");
}

/// Proves a node the record names that never answers (N3, retired by a replace) does not
/// keep a rebuilt replica from bounding its lost votes once a term at or above its record has
/// been heard from the others; nor does a node it never vouched for (N2, recorded 0). Here
/// N1 had acknowledged N3 as leader in term 25, and N3 then removed itself: N4 stays at term
/// 25, and its pre-votes name term 26 (heard as 25). Waiting for a term above 25 would wait
/// for good: N4 cannot be elected without N1's vote.
#[test]
fn a_retired_node_of_the_record_is_passed_once_its_term_is_heard() {
    let nodes = [(N1, Term(0)), (N2, Term(0)), (N3, Term(25)), (N4, Term(12))];
    let known = KnownMembers::new(Term(0), nodes);
    let mut n1 = rebuilt_n1_with_record(KnownRead::Whole(known));
    step(&mut n1, term_answer(N4, 24));
    assert_eq!(
        n1.hard.votes_lost,
        Some(LostVotes::Unknown),
        "N3 was vouched for in term 25"
    );
    let pre_vote = Event::Message {
        from: N4,
        message: PeerMessage::Vote(Vote {
            term: Term(26),
            pre: true,
            candidate: N4,
            last_index: EntryIndex(5),
            last_term: Term(1),
        }),
    };
    step(&mut n1, pre_vote);
    assert_eq!(n1.hard.votes_lost, Some(LostVotes::Through(Term(25))));
    assert_eq!(n1.term(), Term(25));
    assert!(!n1.may_vote_in(Term(25)) && n1.may_vote_in(Term(26)));
}

/// Proves a judge that never answers is passed once the bound reaches its record, and not
/// only a term heard from the others: a record started late, above the others' term (at the
/// term of a campaign whose requests were lost), holds every node at its floor, and a retired
/// N4 would otherwise keep the rebuilt N1 waiting for good while the cluster stays at 49.
#[test]
fn a_judge_is_passed_once_the_bound_reaches_its_record() {
    let nodes = [(N1, Term(0)), (N2, Term(0)), (N3, Term(0)), (N4, Term(0))];
    let known = KnownMembers::new(Term(50), nodes);
    let mut n1 = rebuilt_n1_with_record(KnownRead::Whole(known));
    step(&mut n1, term_answer(N2, 49));
    step(&mut n1, term_answer(N3, 49));
    assert_eq!(n1.hard.votes_lost, Some(LostVotes::Through(Term(50))));
    assert!(!n1.may_vote_in(Term(50)) && n1.may_vote_in(Term(51)));
}

/// Proves a record that is missing or damaged at the start is not relied on (the judges are
/// the lists' alone, as before it was kept), and that it is started anew, above the bound of
/// the lost votes, once they are bounded: every vote and acknowledgement before is below it.
#[test]
fn a_missing_or_damaged_record_is_not_relied_on_and_started_at_the_bound() {
    for read in [KnownRead::Missing, KnownRead::Damaged] {
        let mut n1 = rebuilt_n1_with_record(read);
        step(&mut n1, term_answer(N2, 19));
        let actions = step(&mut n1, term_answer(N3, 19));
        assert_eq!(n1.hard.votes_lost, Some(LostVotes::Through(Term(19))));
        let started = KnownMembers::new(Term(19), [(N1, Term(0)), (N2, Term(0)), (N3, Term(0))]);
        assert!(
            actions.contains(&Action::PersistKnownMembers(started)),
            "{actions:?}"
        );
    }
}

/// Proves a rebuilt replica bounds its lost votes at least at the term its record shows it
/// voted for itself in, whichever judges it passed. N1 had won term 2 with N3's vote; N3 is
/// passed (N1 never vouched for it) once N2 is heard in term 1. Without its own record N1
/// would vote for N2 in term 2 and make a second leader there (simulator seed 12832).
#[test]
fn a_rebuilt_replica_bounds_its_votes_by_its_own_campaigns() {
    let nodes = [(N1, Term(2)), (N2, Term(0)), (N3, Term(0))];
    let known = KnownMembers::new(Term(0), nodes);
    let mut n1 = rebuilt_n1_with_record(KnownRead::Whole(known));
    step(&mut n1, term_answer(N2, 1));
    assert_eq!(n1.hard.votes_lost, Some(LostVotes::Through(Term(2))));
    assert_eq!(n1.term(), Term(2));
    assert!(!granted(&step(&mut n1, vote_from(N2, 2, 5))));
}
