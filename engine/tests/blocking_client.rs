//! The blocking client against a real three-node cluster on loopback, called from plain test
//! code (no async fn around it): registration, requests applied once and in order, a
//! pipelined batch answered in order, already encoded commands, and a resumed session.

use engine::apply::decode_outcomes;
use engine::client::blocking::Client;
use engine::codec::{Decode, Encode};
use engine::internals::entry::encode_commands;
use engine::node::local::LocalCluster;
use engine::{Handler, Outcome, OutcomeOf, RequestNumber, Schema, StateError, Table, Tx};
use std::time::Duration;

/// Seconds to wait for a leader, and for any one request, before the test fails.
const WAIT_S_MAX: u64 = 20;

/// The only counter, under key 0.
const COUNTER: Table<u32, i64> = Table::new(0, "counter");

/// A counter's commands.
#[derive(Debug, Clone, Encode, Decode)]
enum Command {
    /// Adds to the counter; outputs its new value.
    Add(i64),
    /// Outputs the counter's value.
    Read,
}

/// The state is full.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
struct Full;

impl From<StateError> for Full {
    fn from(_: StateError) -> Self {
        Full
    }
}

/// One counter.
#[derive(Clone)]
struct Counter;

impl Handler for Counter {
    type Command = Command;
    type Output = i64;
    type Error = Full;

    fn schema(&self) -> Schema {
        Schema::new().table(&COUNTER)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<i64, Full> {
        let value = tx.get(&COUNTER, &0).unwrap_or(0);
        match *command {
            Command::Add(delta) => {
                tx.put(&COUNTER, 0, value + delta)?;
                Ok(value + delta)
            }
            Command::Read => Ok(value),
        }
    }
}

fn done(values: &[i64]) -> Vec<OutcomeOf<Counter>> {
    values.iter().map(|v| Outcome::Done(*v)).collect()
}

/// A running cluster of three with a leader, waited for on a runtime of the test's own
/// (dropped before the blocking client runs, which is not called inside it).
fn three_with_a_leader(dir: &std::path::Path) -> LocalCluster<Counter> {
    let cluster = LocalCluster::start(dir, 3, Counter, |_| {}).expect("the cluster starts");
    let waiter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime to wait on");
    let leader = waiter.block_on(cluster.wait_for_leader(Duration::from_secs(WAIT_S_MAX)));
    assert!(leader.is_some(), "no leader");
    cluster
}

/// Proves a blocking client registers, that two requests apply once each and in order (the
/// counter's value after them), that a pipelined batch of three comes back in order, that
/// encoded commands go through, and that the session resumes where it was.
#[test]
fn a_blocking_client_registers_submits_pipelines_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_with_a_leader(dir.path());
    let mut config = cluster.client_config();
    config.give_up_after = Some(Duration::from_secs(WAIT_S_MAX));

    let mut client = Client::register(config.clone()).expect("registered");
    assert_eq!(client.next_request(), RequestNumber(1));
    let first = client.submit::<Counter>(&[Command::Add(5)]).unwrap();
    assert_eq!(first, done(&[5]));
    let second = client
        .submit::<Counter>(&[Command::Add(7), Command::Read])
        .unwrap();
    assert_eq!(second, done(&[12, 12]));

    let batch = [
        vec![Command::Add(1)],
        vec![Command::Add(2)],
        vec![Command::Add(3), Command::Read],
    ];
    let pipelined: Vec<_> = client
        .submit_pipelined::<Counter>(&batch)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(pipelined, vec![done(&[13]), done(&[15]), done(&[18, 18])]);
    assert_eq!(client.next_request(), RequestNumber(6));

    let (count, outcomes) = client
        .submit_encoded(encode_commands(&[Command::Add(2)]), 1)
        .unwrap();
    assert_eq!(
        decode_outcomes::<Counter>(&outcomes, count).unwrap(),
        done(&[20])
    );

    let mut resumed = Client::resume(config, client.id()).expect("resumed");
    assert_eq!(resumed.id(), client.id());
    assert_eq!(resumed.next_request(), RequestNumber(7));
    let read = resumed.submit::<Counter>(&[Command::Read]).unwrap();
    assert_eq!(read, done(&[20]), "every request applied exactly once");
}

/// Threads that share one blocking shared client.
const SHARING_THREADS: i64 = 8;
/// Adds each of them makes, one command per call.
const ADDS_PER_THREAD: i64 = 50;

/// Proves plain threads that share one blocking shared client each get exactly their own
/// outcomes: every add of 1 is answered with the counter's value after it, so the values
/// all threads were told are 1 to N, each once (every add applied once, no outcome handed to
/// another caller), and each thread's rise in the order it asked.
#[test]
fn threads_share_a_blocking_shared_client() {
    use engine::client::SharedOptions;
    use engine::client::blocking::SharedClient;
    let dir = tempfile::tempdir().unwrap();
    let cluster = three_with_a_leader(dir.path());
    let mut config = cluster.client_config();
    config.give_up_after = Some(Duration::from_secs(WAIT_S_MAX));
    let shared = SharedClient::<Counter>::start(config, SharedOptions::new(64)).expect("started");
    let told: Vec<Vec<i64>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..SHARING_THREADS)
            .map(|_| {
                let client = shared.clone();
                scope.spawn(move || {
                    let add = |_| match client.submit_one(Command::Add(1)).expect("answered") {
                        Outcome::Done(value) => value,
                        other @ (Outcome::Failed(_) | Outcome::Invalid) => panic!("{other:?}"),
                    };
                    (0..ADDS_PER_THREAD).map(add).collect::<Vec<i64>>()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for values in &told {
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    }
    let mut all: Vec<i64> = told.into_iter().flatten().collect();
    all.sort_unstable();
    let expected: Vec<i64> = (1..=SHARING_THREADS * ADDS_PER_THREAD).collect();
    assert_eq!(
        all, expected,
        "each add once, each outcome to its own caller"
    );
    let key = engine::client::key_session("one add");
    let first = shared
        .submit_keyed(key, vec![Command::Add(1)])
        .expect("answered");
    let again = shared
        .submit_keyed(key, vec![Command::Add(1)])
        .expect("answered");
    assert_eq!(first, again, "a key's add runs once and is answered twice");
    let read = shared.submit_one(Command::Read).expect("answered");
    assert_eq!(read, Outcome::Done(SHARING_THREADS * ADDS_PER_THREAD + 1));
}
