//! Per-command transactions, capacity, sessions and the state hash, through a small key-value
//! handler with string records (a business unlike the Bank).

use engine::codec::{Decode, Encode};
use engine::internals::entry::{
    Entry, EntryHash, FragmentHeader, PayloadBuilder, Request, RequestDigest, encode_commands,
    whole_requests_entry,
};
use engine::{
    ClientId, EntryIndex, Handler, Outcome, ReplyStatus, RequestNumber, Sandbox, Schema,
    StateError, StateMachine, Table, Term, Tx, decode_outcomes,
};

const NOTES: Table<u32, String> = Table::new(3, "notes");

#[derive(Clone, Debug, Encode, Decode)]
struct Command {
    puts: Vec<(u32, String)>,
    deletes: Vec<u32>,
    /// Return an error after the writes.
    fail: bool,
    /// Return Ok even when a write failed.
    ignore_write_errors: bool,
    /// Marked read-only: its writes fail.
    read_only: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
enum KvError {
    Refused,
    Capacity,
    ReadOnly,
}

impl From<StateError> for KvError {
    fn from(error: StateError) -> Self {
        match error {
            StateError::ReadOnly => KvError::ReadOnly,
            StateError::CapacityExhausted { .. }
            | StateError::MemoryExhausted
            | StateError::Unencodable(_) => KvError::Capacity,
        }
    }
}

struct Kv;

impl Handler for Kv {
    type Command = Command;
    type Output = u64;
    type Error = KvError;

    fn schema(&self) -> Schema {
        Schema::new().table(&NOTES)
    }

    fn read_only(command: &Command) -> bool {
        command.read_only
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<u64, KvError> {
        for (key, value) in &command.puts {
            let put = tx.put(&NOTES, *key, value.clone());
            if !command.ignore_write_errors {
                put?;
            }
        }
        for key in &command.deletes {
            tx.delete(&NOTES, key)?;
        }
        if command.fail {
            return Err(KvError::Refused);
        }
        Ok(tx.len(&NOTES) as u64)
    }
}

fn put(pairs: &[(u32, &str)]) -> Command {
    Command {
        puts: pairs.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        deletes: vec![],
        fail: false,
        ignore_write_errors: false,
        read_only: false,
    }
}

fn run(sandbox: &mut Sandbox<Kv>, commands: &[Command]) -> Vec<Outcome<u64, KvError>> {
    sandbox.run(commands).expect("commands apply")
}

fn notes(sandbox: &Sandbox<Kv>) -> Vec<(u32, String)> {
    let mut all: Vec<_> = sandbox
        .state()
        .iter_unordered(&NOTES)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    all.sort();
    all
}

/// Proves a command whose handler returns an error leaves no trace (puts, replaced values and
/// deletes all rolled back), while the commands around it in the same entry apply.
#[test]
fn failed_command_is_rolled_back() {
    let mut driver = Sandbox::new(Kv, 1 << 20);
    run(&mut driver, &[put(&[(1, "one"), (2, "two")])]);
    let before = notes(&driver);
    let bytes_before = driver.state().bytes_used();
    let mut failing = put(&[(1, "uno"), (3, "three")]);
    failing.deletes = vec![2];
    failing.fail = true;
    let outcomes = run(
        &mut driver,
        &[put(&[(4, "four")]), failing, put(&[(5, "five")])],
    );
    assert_eq!(
        outcomes,
        vec![
            Outcome::Done(3),
            Outcome::Failed(KvError::Refused),
            Outcome::Done(4)
        ]
    );
    let mut expected = before;
    expected.push((4, "four".into()));
    expected.push((5, "five".into()));
    assert_eq!(notes(&driver), expected);
    // The account is that of the commands that applied, as if the failed one never ran.
    let mut twin = Sandbox::new(Kv, 1 << 20);
    run(&mut twin, &[put(&[(1, "one"), (2, "two")])]);
    run(&mut twin, &[put(&[(4, "four")]), put(&[(5, "five")])]);
    assert_eq!(driver.state().bytes_used(), twin.state().bytes_used());
    assert_eq!(
        bytes_before,
        twin.state().bytes_used(),
        "short notes fit their slots"
    );
}

/// Proves a write past the capacity fails with the business error and changes nothing, that a
/// handler ignoring the failed write still gets the command refused, and that freeing space
/// lets writes succeed again.
#[test]
fn capacity_exhaustion_is_a_business_error() {
    // The empty table's slots, the sandbox's session, and 40 bytes of heap for the session's
    // results and the notes beyond their slots.
    let empty = Sandbox::new(Kv, 1 << 20).state().bytes_used();
    let mut driver = Sandbox::new(Kv, empty + engine::apply::SESSION_BYTES_FIXED + 40);
    assert_eq!(
        run(&mut driver, &[put(&[(1, "a")])]),
        vec![Outcome::Done(1)]
    );
    assert_eq!(
        run(&mut driver, &[put(&[(2, "b")])]),
        vec![Outcome::Done(2)]
    );
    let used = driver.state().bytes_used();
    let big = "x".repeat(200);
    assert_eq!(
        run(&mut driver, &[put(&[(3, &big)])]),
        vec![Outcome::Failed(KvError::Capacity)]
    );
    let mut ignoring = put(&[(4, "d"), (5, &big)]);
    ignoring.ignore_write_errors = true;
    assert_eq!(
        run(&mut driver, &[ignoring]),
        vec![Outcome::Failed(KvError::Capacity)]
    );
    assert_eq!(notes(&driver), vec![(1, "a".into()), (2, "b".into())]);
    assert_eq!(driver.state().bytes_used(), used);
    let mut free = put(&[]);
    free.deletes = vec![1, 2];
    assert_eq!(run(&mut driver, &[free]), vec![Outcome::Done(0)]);
    assert_eq!(driver.state().bytes_used(), empty);
    assert_eq!(
        run(&mut driver, &[put(&[(6, "fits again")])]),
        vec![Outcome::Done(1)]
    );
}

/// Proves a rolled-back command's writes never reach the state hash: one failing request,
/// run where its writes fit (and are rolled back) and where they do not (and never happen),
/// leaves equal hashes. (Two different requests cannot show it: the session a request leaves,
/// hashed with the state, holds the request's digest.)
#[test]
fn failed_command_leaves_the_hash_alone() {
    let mut a = Sandbox::new(Kv, 1 << 26);
    let mut b = Sandbox::new(Kv, 1 << 21);
    run(&mut a, &[put(&[(1, "one")])]);
    run(&mut b, &[put(&[(1, "one")])]);
    let big = "x".repeat(4 << 20);
    let mut failing = put(&[(2, "two"), (3, &big)]);
    failing.deletes = vec![1];
    failing.fail = true;
    failing.ignore_write_errors = true;
    let refused = vec![Outcome::Failed(KvError::Refused)];
    assert_eq!(run(&mut a, std::slice::from_ref(&failing)), refused);
    assert_eq!(run(&mut b, &[failing]), refused);
    assert_eq!(notes(&a), vec![(1, "one".into())]);
    assert_eq!(a.machine().state_hash(), b.machine().state_hash());
}

/// Proves a command its handler marks read-only reads, and fails when it writes: with the
/// write's error passed on or ignored, a put or a delete, the state and its account are
/// unchanged, and the commands beside it in the entry apply.
#[test]
fn a_write_inside_a_read_only_command_fails_it() {
    let mut driver = Sandbox::new(Kv, 1 << 20);
    run(&mut driver, &[put(&[(1, "one"), (2, "two")])]);
    let before = notes(&driver);
    let reading = Command {
        read_only: true,
        ..put(&[])
    };
    let writing = Command {
        read_only: true,
        ..put(&[(3, "three")])
    };
    let ignoring = Command {
        ignore_write_errors: true,
        ..writing.clone()
    };
    let deleting = Command {
        deletes: vec![1],
        ..reading.clone()
    };
    let outcomes = run(
        &mut driver,
        &[reading, writing, ignoring, deleting, put(&[(4, "four")])],
    );
    let refused = Outcome::Failed(KvError::ReadOnly);
    assert_eq!(
        outcomes,
        vec![
            Outcome::Done(2),
            refused.clone(),
            refused.clone(),
            refused,
            Outcome::Done(3)
        ]
    );
    let mut expected = before;
    expected.push((4, "four".into()));
    assert_eq!(notes(&driver), expected);
    let mut twin = Sandbox::new(Kv, 1 << 20);
    run(&mut twin, &[put(&[(1, "one"), (2, "two")])]);
    run(&mut twin, &[put(&[(4, "four")])]);
    assert_eq!(driver.state().bytes_used(), twin.state().bytes_used());
}

/// Proves exactly-once: a request repeated in a later entry is not applied again and is answered
/// with its original results; an older request is reported stale.
#[test]
fn repeated_request_is_answered_not_applied() {
    let mut machine = StateMachine::new(Kv, 1 << 20);
    let bytes = encode_commands(&[put(&[(1, "one")]), put(&[(2, "two")])]);
    let request = |number| Request {
        client: ClientId(9),
        number: RequestNumber(number),
        command_count: 2,
        commands: &bytes,
    };
    let mut prev = EntryHash::default();
    let mut replies = Vec::new();
    for (index, number) in [(1, 1), (2, 1), (3, 2), (4, 1)] {
        let entry = whole_requests_entry(EntryIndex(index), Term(1), &prev, 0, &[request(number)]);
        prev = entry.header.hash;
        replies.push(machine.apply(&entry).unwrap().replies.remove(0));
    }
    assert_eq!(
        replies[0].status, replies[1].status,
        "the retry gets the original results"
    );
    let ReplyStatus::Results(second) = &replies[2].status else {
        panic!("request 2 applied")
    };
    assert_eq!(
        decode_outcomes::<Kv>(second, 2).unwrap(),
        vec![Outcome::Done(2), Outcome::Done(2)]
    );
    assert_eq!(replies[3].status, ReplyStatus::Stale);
}

/// Applies one entry per element of `plan`, each holding the given fragments of one request of
/// `encoded.len()` commands from `client`; returns every reply.
fn apply_plan(
    client: u64,
    request: u64,
    encoded: &[Vec<u8>],
    plan: &[Vec<(u32, u32)>],
) -> Vec<engine::Reply> {
    let mut machine = StateMachine::new(Kv, 1 << 20);
    let mut prev = EntryHash::default();
    let mut replies = Vec::new();
    for (n, fragments) in plan.iter().enumerate() {
        let mut payload = PayloadBuilder::new(0);
        for &(first, count) in fragments {
            let bytes: Vec<u8> = encoded[first as usize..(first + count) as usize].concat();
            let header = FragmentHeader {
                client: ClientId(u128::from(client)),
                request: RequestNumber(request),
                oldest_pending: RequestNumber(request),
                request_commands: encoded.len() as u32,
                first_command: first,
                command_count: count,
                command_bytes: bytes.len() as u32,
                digest: RequestDigest::of(encoded.len() as u32, &encoded.concat()),
            };
            payload.push(&header, &bytes);
        }
        let (payload, count, _) = payload.finish();
        let index = EntryIndex(n as u64 + 1);
        let kind = engine::internals::entry::EntryKind::Commands;
        let entry = Entry::seal(
            index,
            Term(1),
            kind,
            EntryIndex::ZERO,
            count,
            payload,
            &prev,
        );
        prev = entry.header.hash;
        replies.extend(machine.apply(&entry).unwrap().replies);
    }
    replies
}

/// Proves a request split into fragments across entries applies each command exactly once
/// however a new leader re-sends it after part of it committed: the same fragments again, the
/// whole request, or pieces that overlap what was applied.
#[test]
fn fragments_resume_where_the_request_stands() {
    let encoded: Vec<Vec<u8>> = (0..4)
        .map(|k| encode_commands(&[put(&[(k, "v")])]))
        .collect();
    let plans: [&[Vec<(u32, u32)>]; 4] = [
        &[vec![(0, 2)], vec![(0, 2)], vec![(2, 2)]],
        &[vec![(0, 2)], vec![(0, 4)]],
        &[vec![(0, 1)], vec![(0, 3)], vec![(3, 1)]],
        &[vec![(0, 2)], vec![(0, 3), (3, 1)]],
    ];
    for plan in plans {
        let replies = apply_plan(2, 1, &encoded, plan);
        assert_eq!(
            replies.len(),
            1,
            "{plan:?}: one reply, when the last command applies"
        );
        let ReplyStatus::Results(results) = &replies[0].status else {
            panic!("{plan:?}: applied")
        };
        let outcomes = decode_outcomes::<Kv>(results, 4).unwrap();
        assert_eq!(
            outcomes,
            (1..=4).map(Outcome::Done).collect::<Vec<_>>(),
            "{plan:?}: each command once, in order"
        );
    }
}

/// Proves a client without a session can only start with request 1: a later number (a
/// confused client, or one whose session is long gone) is answered that its session expired
/// (the outcome of any earlier attempt is not known) and applies nothing.
#[test]
fn unknown_client_must_start_at_request_one() {
    let encoded = vec![encode_commands(&[put(&[(1, "v")])])];
    let replies = apply_plan(8, 2, &encoded, &[vec![(0, 1)]]);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].status, ReplyStatus::Expired);
}
