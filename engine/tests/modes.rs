//! Verify and Performance modes at the state machine: a leader that simulates entries before
//! they commit ends with exactly what a follower that only executes ends with, reuses what it
//! may, executes what it must, and catches a handler that is not deterministic.

mod common;

use common::{Command, Former, Ledger, entries};
use engine::internals::entry::{RequestDigest, encode_commands};
use engine::{ApplyError, CommittedAnswer, EntryIndex, Mode, ReplyStatus, StateMachine};

/// The digest of a request of `commands`, as the leader computes it.
fn digest_of(commands: &[Command]) -> RequestDigest {
    RequestDigest::of(commands.len() as u32, &encode_commands(commands))
}

/// Proves a leader that simulates up to four entries ahead of commit, in either mode, ends every
/// entry with the same replies and state hash as a follower; Performance reuses every command
/// (the chain of simulations stays exact) and Verify executes and confirms every one.
#[test]
fn simulating_leader_matches_executing_follower() {
    let entries = entries(3, 200);
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Ledger, 1 << 20);
        for chunk in entries.chunks(4) {
            for entry in chunk {
                leader.simulate(entry);
            }
            for entry in chunk {
                assert_eq!(
                    leader.apply(entry).unwrap(),
                    follower.apply(entry).unwrap(),
                    "{mode:?} entry {}",
                    entry.index()
                );
            }
        }
        let counters = leader.counters();
        let commands = 200 * 16;
        assert_eq!(counters.simulated, commands);
        match mode {
            Mode::Performance => assert_eq!((counters.reused, counters.executed), (commands, 0)),
            Mode::Verify => {
                assert_eq!((counters.verified, counters.executed), (commands, commands))
            }
        }
    }
}

/// Proves a leader change between simulation and commit fails verification: from the first entry
/// that is another leader's, the simulations are discarded and every command executes; the
/// results are a follower's.
#[test]
fn leader_change_between_simulation_and_commit_executes() {
    let mine = entries(5, 6);
    let committed = {
        let mut theirs = entries(5, 3);
        let mut former = Former::new(2);
        for entry in &theirs {
            former.prev = entry.header.hash;
            former.next += 1;
        }
        theirs.push(former.entry(&[(
            9,
            1,
            vec![
                Command::Set {
                    account: 1,
                    balance: 7,
                },
                Command::Total,
            ],
        )]));
        theirs.push(former.entry(&[(
            9,
            2,
            vec![Command::Move {
                from: 1,
                to: 2,
                amount: 3,
            }],
        )]));
        theirs
    };
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Ledger, 1 << 20);
        for entry in &mine {
            leader.simulate(entry);
        }
        for entry in &committed {
            assert_eq!(leader.apply(entry).unwrap(), follower.apply(entry).unwrap());
        }
        assert_eq!(
            leader.pending_simulations(),
            0,
            "simulations of replaced entries are gone"
        );
        // Entries 1-3 are the ones this leader simulated; 4 and 5 are another leader's.
        let counters = leader.counters();
        let (replaced, kept) = (3, 3 * 16);
        match mode {
            Mode::Performance => assert_eq!((counters.executed, counters.reused), (replaced, kept)),
            Mode::Verify => assert_eq!(
                (counters.executed, counters.verified),
                (kept + replaced, kept)
            ),
        }
    }
}

/// Proves a retried request inside a simulated entry is a duplicate for the simulation exactly
/// as for the commit: the speculation stays exact and every command of it is reused.
#[test]
fn retried_requests_are_simulated_as_they_apply() {
    let mut former = Former::new(1);
    let setup = former.entry(&[(
        1,
        1,
        (0..6)
            .map(|a| Command::Set {
                account: a,
                balance: 100,
            })
            .collect(),
    )]);
    let first = former.entry(&[(
        2,
        1,
        vec![Command::Move {
            from: 0,
            to: 1,
            amount: 10,
        }],
    )]);
    // The same request again (a retry): a duplicate, applied once.
    let retry = former.entry(&[(
        2,
        1,
        vec![Command::Move {
            from: 0,
            to: 1,
            amount: 10,
        }],
    )]);
    let next = former.entry(&[(
        3,
        1,
        vec![
            Command::Move {
                from: 0,
                to: 2,
                amount: 5,
            },
            Command::Move {
                from: 3,
                to: 4,
                amount: 1,
            },
        ],
    )]);
    for mode in [Mode::Verify, Mode::Performance] {
        let mut leader = StateMachine::new(Ledger, 1 << 20);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Ledger, 1 << 20);
        for entry in [&setup, &first, &retry, &next] {
            leader.simulate(entry);
        }
        for entry in [&setup, &first, &retry, &next] {
            assert_eq!(
                leader.apply(entry).unwrap(),
                follower.apply(entry).unwrap(),
                "{mode:?}"
            );
        }
        let counters = leader.counters();
        assert_eq!(
            counters.simulated,
            6 + 1 + 2,
            "{mode:?}: the duplicate was not run"
        );
        match mode {
            Mode::Performance => assert_eq!((counters.reused, counters.executed), (9, 0)),
            Mode::Verify => assert_eq!((counters.verified, counters.executed), (9, 9)),
        }
    }
}

/// Proves Verify mode stops at the first command whose execution differs from its simulation,
/// names the entry and the command, and releases none of the entry's results.
#[test]
fn verify_mode_catches_a_nondeterministic_handler() {
    let mut former = Former::new(1);
    let entry = former.entry(&[(
        1,
        1,
        vec![
            Command::Set {
                account: 1,
                balance: 5,
            },
            Command::Noise,
            Command::Total,
        ],
    )]);
    let mut leader = StateMachine::new(Ledger, 1 << 20);
    leader.set_mode(Mode::Verify);
    leader.simulate(&entry);
    match leader.apply(&entry) {
        Err(ApplyError::Nondeterministic {
            index,
            command,
            simulated,
            executed,
            writes,
        }) => {
            assert_eq!((index, command), (EntryIndex(1), 1));
            assert_ne!(simulated, executed);
            assert_eq!(writes, "the same");
        }
        other => panic!("expected the divergence to be caught, got {other:?}"),
    }
    assert_eq!(
        leader.applied_index(),
        EntryIndex(0),
        "nothing of the entry counts as applied"
    );
}

/// Proves a retry is answered only from committed sessions: while a leader's
/// simulation of an entry is pending, the request it finished is neither finished nor stale
/// for `committed_answer`; once the entry is applied it is finished with the applied results,
/// and the client's earlier request is stale.
#[test]
fn a_simulated_request_is_not_committed() {
    let mut former = Former::new(1);
    let request = |number, balance| {
        let set = Command::Set {
            account: 3,
            balance,
        };
        (7, number, vec![set])
    };
    let first = former.entry(&[request(1, 10)]);
    let second = former.entry(&[request(2, 20)]);
    let (one, two) = (digest_of(&request(1, 10).2), digest_of(&request(2, 20).2));
    let mut leader = StateMachine::new(Ledger, 1 << 20);
    let client = engine::ClientId(7);
    let number = engine::RequestNumber;
    leader.apply(&first).unwrap();
    assert!(matches!(
        leader.committed_answer(client, number(1), one),
        CommittedAnswer::Finished(1, _)
    ));
    leader.simulate(&second);
    assert_eq!(
        leader.committed_answer(client, number(2), two),
        CommittedAnswer::Unknown
    );
    assert!(matches!(
        leader.committed_answer(client, number(1), one),
        CommittedAnswer::Finished(1, _)
    ));
    let applied = leader.apply(&second).unwrap();
    let CommittedAnswer::Finished(count, results) = leader.committed_answer(client, number(2), two)
    else {
        panic!("request 2 applied")
    };
    assert_eq!(count, 1);
    assert_eq!(applied.replies.len(), 1);
    // Request 2 said the client had request 1's answer (one in flight): 1 is not kept.
    assert_eq!(
        leader.committed_answer(client, number(1), one),
        CommittedAnswer::Stale
    );
    // The same number with other commands is never answered with these results.
    assert_eq!(
        leader.committed_answer(client, number(2), one),
        CommittedAnswer::Reused
    );
    assert!(!results.is_empty());
}

/// Proves a request number used again for other commands (a client id reused) is
/// answered "reused" and not applied, at apply and from the committed sessions, and a retry
/// of the request that has the number is still answered with its results.
#[test]
fn a_request_number_reused_for_other_commands_is_refused() {
    let mut former = Former::new(1);
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    machine.set_replying(true);
    let set = |balance| {
        vec![Command::Set {
            account: 3,
            balance,
        }]
    };
    let first = machine.apply(&former.entry(&[(7, 1, set(10))])).unwrap();
    let [first] = first.replies.as_slice() else {
        panic!("one reply")
    };
    let ReplyStatus::Results(results) = &first.status else {
        panic!("applied: {first:?}")
    };
    let hash = machine.state_hash();
    let other = machine.apply(&former.entry(&[(7, 1, set(99))])).unwrap();
    assert_eq!(
        other.replies.iter().map(|r| &r.status).collect::<Vec<_>>(),
        [&ReplyStatus::Reused]
    );
    assert_eq!(machine.state_hash(), hash, "the other commands did not run");
    let (client, number) = (engine::ClientId(7), engine::RequestNumber(1));
    assert_eq!(
        machine.committed_answer(client, number, digest_of(&set(99))),
        CommittedAnswer::Reused
    );
    assert_eq!(
        machine.committed_answer(client, number, digest_of(&set(10))),
        CommittedAnswer::Finished(1, results.clone())
    );
    let retry = machine.apply(&former.entry(&[(7, 1, set(10))])).unwrap();
    assert_eq!(
        retry.replies.iter().map(|r| &r.status).collect::<Vec<_>>(),
        [&ReplyStatus::Results(results.clone())]
    );
    assert_eq!(machine.state_hash(), hash, "a retry runs nothing");
}

/// Proves a client whose session was evicted (past `SESSIONS_MAX_DEFAULT` other clients) is told its
/// session expired, for a new request and for a retry of one that was applied: never "stale"
/// (which says not applied) and never run again.
#[test]
fn an_evicted_client_is_told_its_session_expired() {
    let mut former = Former::new(1);
    let mut machine = StateMachine::new(Ledger, 1 << 26);
    machine.set_replying(true);
    let set = |balance| {
        vec![Command::Set {
            account: 1,
            balance,
        }]
    };
    let status = |applied: engine::Applied| {
        let [reply] = applied.replies.as_slice() else {
            panic!("one reply: {:?}", applied.replies)
        };
        reply.status.clone()
    };
    let first = machine.apply(&former.entry(&[(1, 1, set(5))])).unwrap();
    assert!(matches!(status(first), ReplyStatus::Results(_)));
    // As many other clients as sessions are kept: the oldest (client 1) is evicted.
    let others: Vec<(u128, u64, Vec<Command>)> = (2..2 + engine::apply::SESSIONS_MAX_DEFAULT
        as u128)
        .map(|client| (client, 1, set(1)))
        .collect();
    for chunk in others.chunks(256) {
        machine.apply(&former.entry(chunk)).unwrap();
    }
    let client = engine::ClientId(1);
    assert_eq!(
        machine.committed_answer(client, engine::RequestNumber(1), digest_of(&set(5))),
        CommittedAnswer::Expired
    );
    let retry = machine.apply(&former.entry(&[(1, 1, set(5))])).unwrap();
    assert_eq!(
        status(retry),
        ReplyStatus::Expired,
        "a retry of what was applied"
    );
    let next = machine.apply(&former.entry(&[(1, 2, set(6))])).unwrap();
    assert_eq!(status(next), ReplyStatus::Expired, "a new request");
    let account = machine
        .apply(&former.entry(&[(99_999, 1, vec![Command::Total])]))
        .unwrap();
    let ReplyStatus::Results(total) = status(account) else {
        panic!("the total")
    };
    // The other clients set account 1 to 1 after client 1 set it to 5: a retry run again would
    // set it back to 5, the new request to 6.
    assert_eq!(
        engine::decode_outcomes::<Ledger>(&total, 1).unwrap(),
        vec![engine::Outcome::Done(1)],
        "neither the retry nor the new request ran"
    );
}
