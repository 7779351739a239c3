//! Client sessions on the state machine: registration through the log, the configured session
//! limit with deterministic eviction, and the sessions' bytes counted in the state's capacity.

mod common;

use common::{Command, Former, Ledger};
use engine::apply::{ReplyStatus, SESSION_BYTES_FIXED, StateMachine};
use engine::{Applied, ClientId, RequestNumber};

fn status(applied: Applied) -> ReplyStatus {
    let [reply] = applied.replies.as_slice() else {
        panic!("one reply: {:?}", applied.replies)
    };
    reply.status.clone()
}

fn set(account: u32, balance: i64) -> Vec<Command> {
    vec![Command::Set { account, balance }]
}

fn registered(status: &ReplyStatus) -> bool {
    matches!(status, ReplyStatus::Results(results) if results.is_empty())
}

/// Proves a registration (request 0, no commands) opens a session through the log: answered
/// with no outcomes, its retry answered the same and changing nothing, the first request then
/// number 1; and that an id the cluster knows cannot be registered again (stale once it made
/// requests, expired once evicted).
#[test]
fn a_registration_opens_a_session_through_the_log() {
    let mut former = Former::new(1);
    let mut machine = StateMachine::new(Ledger, 1 << 24);
    machine.set_sessions_max(16);
    let client = ClientId(u128::MAX - 5);
    assert_eq!(machine.committed_session(client), (RequestNumber(1), false));
    let applied = machine.apply(&former.entry(&[(u128::MAX - 5, 0, vec![])]));
    assert!(registered(&status(applied.unwrap())));
    assert_eq!(machine.sessions().len(), 1);
    assert_eq!(machine.committed_session(client), (RequestNumber(1), false));
    let hash = machine.state_hash();
    let retry = machine.apply(&former.entry(&[(u128::MAX - 5, 0, vec![])]));
    assert!(registered(&status(retry.unwrap())), "a retry is answered");
    assert_eq!(machine.state_hash(), hash, "a retry changes nothing");
    let first = machine.apply(&former.entry(&[(u128::MAX - 5, 1, set(1, 7))]));
    assert!(matches!(status(first.unwrap()), ReplyStatus::Results(r) if !r.is_empty()));
    let again = machine.apply(&former.entry(&[(u128::MAX - 5, 0, vec![])]));
    assert_eq!(
        status(again.unwrap()),
        ReplyStatus::Stale,
        "the id is in use"
    );
    // Sixteen other clients evict it; its id is then expired, for a registration too.
    for other in 0..16u128 {
        machine.apply(&former.entry(&[(other, 0, vec![])])).unwrap();
    }
    assert_eq!(machine.committed_session(client), (RequestNumber(2), true));
    let expired = machine.apply(&former.entry(&[(u128::MAX - 5, 0, vec![])]));
    assert_eq!(status(expired.unwrap()), ReplyStatus::Expired);
    let next = machine.apply(&former.entry(&[(u128::MAX - 5, 2, set(1, 8))]));
    assert_eq!(
        status(next.unwrap()),
        ReplyStatus::Expired,
        "and for a request"
    );
}

/// Proves the configured limit is the one kept, that the least recently active session is the
/// one evicted (not the oldest registered), and that two replicas evict the same (equal state
/// hashes).
#[test]
fn the_least_recently_active_session_beyond_the_limit_expires() {
    let replicas: Vec<StateMachine<Ledger>> = (0..2)
        .map(|_| {
            let mut machine = StateMachine::new(Ledger, 1 << 24);
            machine.set_sessions_max(16);
            machine
        })
        .collect();
    let mut entries = Vec::new();
    let mut former = Former::new(1);
    for client in 1..=16u128 {
        entries.push(former.entry(&[(client, 1, set(client as u32, 1))]));
    }
    // Client 1 is active again: client 2 is now the least recently active.
    entries.push(former.entry(&[(1, 2, set(1, 2))]));
    entries.push(former.entry(&[(17, 1, set(17, 1))]));
    let hashes: Vec<_> = replicas
        .into_iter()
        .map(|mut machine| {
            for entry in &entries {
                machine.apply(entry).unwrap();
            }
            assert!(machine.committed_session(ClientId(2)).1, "2 expired");
            assert_eq!(
                machine.committed_session(ClientId(1)),
                (RequestNumber(3), false)
            );
            assert_eq!(
                machine.committed_session(ClientId(17)),
                (RequestNumber(2), false)
            );
            let live = (1..=17)
                .filter(|c| !machine.committed_session(ClientId(*c)).1)
                .count();
            assert_eq!(live, 16, "the limit is the configured one");
            machine.state_hash()
        })
        .collect();
    assert_eq!(hashes[0], hashes[1]);
}

/// Proves the sessions count in the capacity: with the same capacity, a state that keeps many
/// sessions takes fewer records before a write is refused, by about the sessions' bytes.
#[test]
fn sessions_count_in_the_capacity() {
    const CAPACITY_BYTES: u64 = 1 << 20;
    const SESSIONS: u128 = 2_000;
    let records_until_full = |sessions: u128| {
        let mut former = Former::new(1);
        let mut machine = StateMachine::new(Ledger, CAPACITY_BYTES);
        machine.set_sessions_max(4_096);
        for chunk in (1..=sessions).collect::<Vec<_>>().chunks(256) {
            let registrations: Vec<_> = chunk.iter().map(|c| (*c, 0, vec![])).collect();
            machine.apply(&former.entry(&registrations)).unwrap();
        }
        let outside = machine.sessions().bytes();
        assert_eq!(outside, sessions as u64 * SESSION_BYTES_FIXED);
        let writer = u128::MAX;
        for account in 0..1_000_000u32 {
            let applied =
                machine.apply(&former.entry(&[(writer, u64::from(account) + 1, set(account, 1))]));
            let ReplyStatus::Results(results) = status(applied.unwrap()) else {
                panic!("results")
            };
            let outcomes = engine::decode_outcomes::<Ledger>(&results, 1).unwrap();
            if !matches!(outcomes[0], engine::Outcome::Done(_)) {
                assert!(machine.state().bytes_used() + outside <= CAPACITY_BYTES);
                return account;
            }
        }
        panic!("the capacity never filled")
    };
    let without = records_until_full(0);
    let with = records_until_full(SESSIONS);
    assert!(
        with < without,
        "{with} records with {SESSIONS} sessions, {without} without"
    );
}
