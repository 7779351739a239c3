//! Client sessions on the state machine: registration through the log, the configured session
//! limit with deterministic eviction, the sessions' bytes counted in the state's capacity, and
//! pipelined requests applied in the client's order.

mod common;

use common::{Command, Former, Ledger};
use engine::apply::{ReplyStatus, SESSION_BYTES_FIXED, StateMachine};
use engine::internals::entry::{
    Entry, EntryHash, EntryKind, FragmentHeader, PayloadBuilder, RequestDigest, encode_commands,
};
use engine::{Applied, ClientId, EntryIndex, RequestNumber, Term};

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

/// Entries of whole requests that say which of the client's requests it still waits for:
/// (client, request, oldest pending, commands).
struct Pipelined {
    prev: EntryHash,
    next: u64,
}

/// One fragment of a request: commands `first..first + count` of `commands`.
struct Part<'a> {
    client: u128,
    request: u64,
    oldest: u64,
    commands: &'a [Command],
    first: u32,
    count: u32,
}

impl Pipelined {
    fn entry(&mut self, requests: &[(u128, u64, u64, Vec<Command>)]) -> Entry {
        let parts: Vec<Part<'_>> = requests
            .iter()
            .map(|(client, request, oldest, commands)| Part {
                client: *client,
                request: *request,
                oldest: *oldest,
                commands,
                first: 0,
                count: commands.len() as u32,
            })
            .collect();
        self.fragments(&parts)
    }

    fn fragments(&mut self, parts: &[Part<'_>]) -> Entry {
        let mut payload = PayloadBuilder::new(0);
        for part in parts {
            let all = encode_commands(part.commands);
            let total = part.commands.len() as u32;
            let range = part.first as usize..(part.first + part.count) as usize;
            let bytes = encode_commands(&part.commands[range]);
            let header = FragmentHeader {
                client: ClientId(part.client),
                request: RequestNumber(part.request),
                oldest_pending: RequestNumber(part.oldest),
                request_commands: total,
                first_command: part.first,
                command_count: part.count,
                command_bytes: bytes.len() as u32,
                digest: RequestDigest::of(total, &all),
            };
            payload.push(&header, &bytes);
        }
        let (payload, count, _) = payload.finish();
        let (index, kind) = (EntryIndex(self.next), EntryKind::Commands);
        let entry = Entry::seal(
            index,
            Term(1),
            kind,
            EntryIndex::ZERO,
            count,
            payload,
            &self.prev,
        );
        self.prev = entry.header.hash;
        self.next += 1;
        entry
    }
}

fn outcome(status: &ReplyStatus) -> engine::Outcome<i64, common::Refused> {
    let ReplyStatus::Results(results) = status else {
        panic!("results, not {status:?}")
    };
    engine::decode_outcomes::<Ledger>(results, 1)
        .unwrap()
        .remove(0)
}

/// Proves pipelined requests apply in the client's order: one that arrives before a request
/// the client still waits for is answered "not yet" and does not run (for a new client and
/// an open session alike), then runs once the earlier one has; a retry of any of the last
/// `PIPELINE_REQUESTS_MAX` finished requests is answered with its own results (never
/// "stale", which says not applied), an older one is stale, and a request the client gave up
/// on holds nothing up.
#[test]
fn pipelined_requests_apply_in_order() {
    let mut log = Pipelined {
        prev: EntryHash::default(),
        next: 1,
    };
    let mut machine = StateMachine::new(Ledger, 1 << 24);
    let balance = |n: u64| {
        vec![Command::Set {
            account: 1,
            balance: n as i64,
        }]
    };
    let mut apply = |requests: &[(u128, u64, u64, Vec<Command>)]| -> Vec<ReplyStatus> {
        let applied = machine.apply(&log.entry(requests)).unwrap();
        applied.replies.into_iter().map(|r| r.status).collect()
    };
    // Request 2 arrives first, with 1 still pending: not yet; 1 then 2 run, in order.
    assert_eq!(apply(&[(9, 2, 1, balance(2))]), vec![ReplyStatus::NotYet]);
    let replies = apply(&[
        (9, 1, 1, balance(1)),
        (9, 3, 1, balance(3)),
        (9, 2, 1, balance(2)),
    ]);
    assert!(matches!(outcome(&replies[0]), engine::Outcome::Done(1)));
    assert_eq!(replies[1], ReplyStatus::NotYet, "3 before 2");
    assert!(matches!(outcome(&replies[2]), engine::Outcome::Done(2)));
    let replies = apply(&[(9, 3, 2, balance(3))]);
    assert!(matches!(outcome(&replies[0]), engine::Outcome::Done(3)));
    // Up to request 10, each sent while 3 is pending (the window is 3 to 10): a retry of 2
    // is stale, of 3 answered with 3's.
    for n in 4..=10 {
        apply(&[(9, n, 3, balance(n))]);
    }
    let replies = apply(&[(9, 3, 3, balance(3)), (9, 2, 2, balance(2))]);
    assert!(
        matches!(outcome(&replies[0]), engine::Outcome::Done(3)),
        "a retry of 3"
    );
    assert_eq!(replies[1], ReplyStatus::Stale, "2 is past the window");
    let total = apply(&[(9, 11, 11, vec![Command::Total])]);
    assert!(
        matches!(outcome(&total[0]), engine::Outcome::Done(10)),
        "no retry ran again"
    );
    // Given up on 12 (never logged): 13 says its oldest pending is 13 and runs; the client
    // has every earlier answer, so none is kept: a retry of 11 is stale.
    let replies = apply(&[(9, 13, 13, balance(13))]);
    assert!(matches!(outcome(&replies[0]), engine::Outcome::Done(13)));
    let replies = apply(&[(9, 11, 11, vec![Command::Total])]);
    assert_eq!(replies[0], ReplyStatus::Stale);
}

/// Proves a pipelined request split between entries whose first part came before a request
/// it follows had run is answered "not yet" at its last part, for an open session and a new
/// client alike (the simulator's pipelining clients found it answered "stale" and "expired",
/// which say it will never run), and runs, whole, when it is sent again.
#[test]
fn a_split_pipelined_request_that_came_too_soon_is_not_yet() {
    let mut log = Pipelined {
        prev: EntryHash::default(),
        next: 1,
    };
    let mut machine = StateMachine::new(Ledger, 1 << 24);
    let two = [
        Command::Set {
            account: 1,
            balance: 20,
        },
        Command::Set {
            account: 2,
            balance: 21,
        },
    ];
    let part = |client, first| Part {
        client,
        request: 2,
        oldest: 1,
        commands: &two,
        first,
        count: 1,
    };
    // Client 9's request 2 begins before its request 1 has run: nothing of it runs.
    let applied = machine.apply(&log.fragments(&[part(9, 0)])).unwrap();
    assert!(applied.replies.is_empty(), "{:?}", applied.replies);
    let one = set(1, 1);
    let whole_one = Part {
        client: 9,
        request: 1,
        oldest: 1,
        commands: &one,
        first: 0,
        count: 1,
    };
    // Request 1 runs, then the rest of request 2 comes; and client 8, new, sends the last
    // part of its request 2 before anything else.
    let entry = log.fragments(&[whole_one, part(9, 1), part(8, 1)]);
    let statuses: Vec<ReplyStatus> = machine
        .apply(&entry)
        .unwrap()
        .replies
        .into_iter()
        .map(|r| r.status)
        .collect();
    assert!(matches!(outcome(&statuses[0]), engine::Outcome::Done(1)));
    assert_eq!(statuses[1], ReplyStatus::NotYet, "an open session");
    assert_eq!(statuses[2], ReplyStatus::NotYet, "a new client");
    // Sent again, whole: it runs.
    let again = machine
        .apply(&log.entry(&[(9, 2, 1, two.to_vec())]))
        .unwrap();
    let ReplyStatus::Results(results) = status(again) else {
        panic!("request 2 runs")
    };
    let outcomes = engine::decode_outcomes::<Ledger>(&results, 2).unwrap();
    assert!(
        matches!(outcomes[0], engine::Outcome::Done(20)),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], engine::Outcome::Done(21)),
        "{outcomes:?}"
    );
}
