//! Unit tests of keyed runs: a key applies once whichever request, client or form carries it,
//! and a key used with other commands, or forgotten, runs nothing.

use super::tests::{KeyedFragment, Log, RETENTION_S, T0_MS, Writer, aging, apply, machine};
use super::{KeyedOutcome, Mode, ReplyStatus, StateMachine, decode_keyed_outcomes};
use crate::entry::{FragmentHeader, KeyRun, RequestDigest, encode_commands};
use crate::handler::Outcome;
use crate::ids::{ClientId, RequestNumber};

/// What a command of a keyed request got, as the tests compare it.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Ran(u64),
    Expired,
    Reused,
}

/// A key's session id in these tests.
const K: u128 = 0xfeed;
/// Another key.
const L: u128 = 0xbeef;

/// Commands `take` of `client`'s request `number` of `commands`, whose `runs` are (key, first,
/// count): the fragment and the runs it overlaps, with their digests.
fn keyed_part(
    (client, number): (u128, u64),
    commands: &[u64],
    runs: &[(u128, u32, u32)],
    take: std::ops::Range<u32>,
) -> KeyedFragment {
    let runs: Vec<KeyRun> = (runs.iter())
        .map(|&(key, first, count)| KeyRun {
            key: ClientId(key),
            first,
            count,
        })
        .collect();
    let whole = encode_commands(commands);
    let bytes = encode_commands(&commands[take.start as usize..take.end as usize]);
    let fragment = FragmentHeader {
        client: ClientId(client),
        request: RequestNumber(number),
        oldest_pending: RequestNumber(number),
        request_commands: commands.len() as u32,
        first_command: take.start,
        command_count: take.end - take.start,
        command_bytes: bytes.len() as u32,
        digest: RequestDigest::of_keyed(commands.len() as u32, &whole, &runs),
    };
    let overlapping = (runs.iter())
        .filter(|run| run.first < take.end && run.end() > take.start)
        .map(|&run| {
            let own = &commands[run.first as usize..run.end() as usize];
            (run, RequestDigest::of(run.count, &encode_commands(own)))
        })
        .collect();
    ((fragment, bytes), overlapping)
}

/// `client`'s whole request `number` of `commands` with keyed `runs`.
fn keyed(client: u128, number: u64, commands: &[u64], runs: &[(u128, u32, u32)]) -> KeyedFragment {
    keyed_part((client, number), commands, runs, 0..commands.len() as u32)
}

/// The one reply's results, decoded with the keyed positions of `runs`.
fn got(statuses: &[ReplyStatus], count: u32, runs: &[(u128, u32, u32)]) -> Vec<Got> {
    let [ReplyStatus::Results(results)] = statuses else {
        panic!("one request answered with results: {statuses:?}")
    };
    let is_keyed = |at: u32| {
        runs.iter()
            .any(|&(_, first, n)| (first..first + n).contains(&at))
    };
    let outcomes = decode_keyed_outcomes::<Writer>(results, count, is_keyed).expect("decodes");
    (outcomes.into_iter())
        .map(|outcome| match outcome {
            KeyedOutcome::Ran(Outcome::Done(n)) => Got::Ran(n),
            KeyedOutcome::Expired => Got::Expired,
            KeyedOutcome::Reused => Got::Reused,
            KeyedOutcome::Ran(other) => panic!("{other:?}"),
        })
        .collect()
}

fn executed(machine: &StateMachine<Writer>) -> u64 {
    machine.counters().executed
}

/// Proves a keyed run is applied once whichever request carries it: another client's
/// request with the same key and commands is answered with the outcomes they had, without
/// running them, while its unkeyed commands run.
#[test]
fn a_key_runs_once_whichever_request_carries_it() {
    let mut machine = machine(64);
    let mut log = Log::new();
    let runs = [(K, 1, 1)];
    let first = apply(
        &mut machine,
        &log.keyed_entry(1, &[keyed(1, 1, &[10, 20, 30], &runs)]),
    );
    assert_eq!(
        got(&first, 3, &runs),
        [Got::Ran(10), Got::Ran(20), Got::Ran(30)]
    );
    assert_eq!(executed(&machine), 3);
    let runs = [(K, 0, 1)];
    let again = apply(
        &mut machine,
        &log.keyed_entry(2, &[keyed(2, 1, &[20, 40], &runs)]),
    );
    assert_eq!(got(&again, 2, &runs), [Got::Ran(20), Got::Ran(40)]);
    assert_eq!(executed(&machine), 4, "the keyed command did not run again");
}

/// Proves a key used before with other commands runs none of its run, and says so, while
/// the rest of its request runs.
#[test]
fn a_key_used_with_other_commands_runs_nothing() {
    let mut machine = machine(64);
    let mut log = Log::new();
    apply(
        &mut machine,
        &log.keyed_entry(1, &[keyed(1, 1, &[5], &[(K, 0, 1)])]),
    );
    let runs = [(K, 1, 2)];
    let other = apply(
        &mut machine,
        &log.keyed_entry(2, &[keyed(2, 1, &[7, 5, 6], &runs)]),
    );
    assert_eq!(
        got(&other, 3, &runs),
        [Got::Ran(7), Got::Reused, Got::Reused]
    );
    assert_eq!(executed(&machine), 2);
}

/// Proves a key sent alone, as request 1 of its own session (an older gateway's form), and
/// the same key in a run are one, in either order.
#[test]
fn a_key_sent_alone_and_in_a_run_are_one() {
    let mut machine = machine(64);
    let mut log = Log::new();
    let alone = super::tests::request(K, 1, &[50]);
    apply(&mut machine, &log.entry(1, &[alone]));
    let runs = [(K, 0, 1)];
    let in_run = apply(
        &mut machine,
        &log.keyed_entry(2, &[keyed(2, 1, &[50], &runs)]),
    );
    assert_eq!(got(&in_run, 1, &runs), [Got::Ran(50)]);
    assert_eq!(executed(&machine), 1);

    apply(
        &mut machine,
        &log.keyed_entry(3, &[keyed(3, 1, &[60], &[(L, 0, 1)])]),
    );
    let alone = apply(
        &mut machine,
        &log.entry(4, &[super::tests::request(L, 1, &[60])]),
    );
    assert_eq!(got(&alone, 1, &[]), [Got::Ran(60)]);
    assert_eq!(executed(&machine), 2);
}

/// Proves a run split between two entries, with another request carrying the same key
/// applied between its parts, runs each command once, and both requests get every outcome.
#[test]
fn a_split_run_and_a_retry_between_its_parts_run_each_command_once() {
    let mut machine = machine(64);
    let mut log = Log::new();
    let commands = [1, 2, 3, 4];
    let runs = [(K, 0, 4)];
    let head = keyed_part((1, 1), &commands, &runs, 0..2);
    assert!(apply(&mut machine, &log.keyed_entry(1, &[head])).is_empty());
    let retry = apply(
        &mut machine,
        &log.keyed_entry(2, &[keyed(2, 1, &commands, &runs)]),
    );
    let all = [Got::Ran(1), Got::Ran(2), Got::Ran(3), Got::Ran(4)];
    assert_eq!(got(&retry, 4, &runs), all);
    assert_eq!(executed(&machine), 4);
    let tail = keyed_part((1, 1), &commands, &runs, 2..4);
    let rest = apply(&mut machine, &log.keyed_entry(3, &[tail]));
    assert_eq!(got(&rest, 4, &runs), all);
    assert_eq!(executed(&machine), 4, "nothing ran twice");
}

/// Proves a key the cluster no longer keeps (its session outlived the retention) runs
/// nothing and is answered expired.
#[test]
fn a_forgotten_key_is_answered_expired() {
    let mut machine = aging();
    let mut log = Log::new();
    let runs = [(K, 0, 1)];
    apply(
        &mut machine,
        &log.keyed_entry(T0_MS, &[keyed(1, 1, &[9], &runs)]),
    );
    let later = T0_MS + 2 * RETENTION_S * 1_000;
    let expired = apply(
        &mut machine,
        &log.keyed_entry(later, &[keyed(2, 1, &[9], &runs)]),
    );
    assert_eq!(got(&expired, 1, &runs), [Got::Expired]);
    assert_eq!(executed(&machine), 1);
}

/// Proves a replica that simulates keyed entries before they commit (Verify mode compares
/// the execution with the simulation) ends with the state, hashes and answers of one that
/// only executes them.
#[test]
fn simulated_keyed_entries_agree_with_executed_ones() {
    let mut plain = machine(16);
    let mut speculating = machine(16);
    speculating.set_mode(Mode::Verify);
    let mut log = Log::new();
    for step in 0..64u64 {
        let key = 1_000 + u128::from(step % 24);
        let commands = [step % 5, 100 + step % 3];
        let runs = [(key, (step % 2) as u32, 1)];
        let entry = log.keyed_entry(step, &[keyed(u128::from(step) + 1, 1, &commands, &runs)]);
        speculating.simulate(&entry);
        let a = plain.apply(&entry).expect("applies");
        let b = speculating.apply(&entry).expect("applies as simulated");
        assert_eq!(
            (a.state_hash, a.replies),
            (b.state_hash, b.replies),
            "step {step}"
        );
        speculating.check_invariants();
    }
    assert!(
        speculating.counters().verified > 0,
        "the simulations were compared"
    );
}

/// Proves a run whose key's id a client took for requests of its own is answered from the
/// key's request 1 as that session keeps it (here among its finished requests), never from
/// the client's later request.
#[test]
fn a_key_whose_id_went_on_to_later_requests_answers_from_request_one() {
    let mut machine = machine(64);
    let mut log = Log::new();
    apply(
        &mut machine,
        &log.entry(1, &[super::tests::request(K, 1, &[5])]),
    );
    let (mut second, bytes) = super::tests::request(K, 2, &[6, 7]);
    second.oldest_pending = RequestNumber(1);
    apply(&mut machine, &log.entry(2, &[(second, bytes)]));
    let runs = [(K, 0, 1)];
    let run = apply(
        &mut machine,
        &log.keyed_entry(3, &[keyed(2, 1, &[5], &runs)]),
    );
    assert_eq!(got(&run, 1, &runs), [Got::Ran(5)]);
    assert_eq!(executed(&machine), 3, "the run copied request 1's outcome");
}
