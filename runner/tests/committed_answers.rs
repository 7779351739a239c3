//! Real processes: a client is answered only with committed results. Every node adds 300 ms
//! to each WAL fsync (`fsync_delay_ms`), so that no entry can commit sooner than that after it
//! is proposed, and the client gives each attempt 30 ms: it retries, through other nodes too,
//! several times while its request waits for its commit. An answer before the commit (a retry
//! answered from what the leader's simulation left in the sessions, a bug once) arrives early.
//! The delay is twice the 150 ms within which a leader must hear from a majority: a follower
//! on a disk that slow must still answer the leader's resends at once (it used to stay silent
//! until its fsync, and every leader stepped down before anything committed).

mod common;

use bank::workload::account_id;
use bank::{Bank, BankCommand};
use common::{runtime, three_up_with_a_leader};
use engine::client::Client;
use engine::{ClientId, Outcome, RequestNumber};
use std::time::{Duration, Instant};

/// Milliseconds each node adds after every WAL fsync.
const FSYNC_DELAY_MS: u64 = 300;
/// Milliseconds a client waits for one attempt's answer.
const ATTEMPT_MS: u64 = 30;
/// Deposits sent, one per request.
const DEPOSITS: u64 = 6;

/// Proves no answer leaves before its entry can have committed, though the client retries
/// meanwhile, and every deposit is applied exactly once.
#[test]
fn no_answer_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, mut config) =
        common::start_cluster(dir.path(), |file| file.fsync_delay_ms = FSYNC_DELAY_MS);
    config.request_timeout = Duration::from_millis(ATTEMPT_MS);
    runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let mut client = Client::new(config.clone(), ClientId(21), RequestNumber(1));
        let id = account_id(7);
        let open = BankCommand::Open {
            id,
            balance: 0,
            flags: 0,
        };
        let mut commands = vec![open];
        commands.extend((0..DEPOSITS).map(|_| BankCommand::Deposit { id, amount: 10 }));
        for command in &commands {
            let sent = Instant::now();
            let outcome = client.submit::<Bank>(std::slice::from_ref(command)).await;
            let took = sent.elapsed();
            assert!(
                took >= Duration::from_millis(FSYNC_DELAY_MS),
                "{command:?} answered after {took:?}, before its entry could commit: {outcome:?}"
            );
            assert!(matches!(outcome.unwrap()[0], Outcome::Done(_)));
        }
        assert_eq!(
            common::balance_and_version(&mut client, id).await,
            (10 * DEPOSITS, 1 + DEPOSITS),
            "each deposit applied once"
        );
    });
}

/// Proves a client id used by two clients at once gives no wrong answer: the
/// second client's request under a number the first used is answered "reused" (it used to
/// get the first client's one outcome for its 256 commands), and none of its commands runs.
#[test]
fn a_client_id_used_twice_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = common::start_cluster(dir.path(), |_| {});
    runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let id = account_id(11);
        let mut first = Client::new(config.clone(), ClientId(33), RequestNumber(1));
        common::open_account(&mut first, id, 5).await;
        let mut second = Client::new(config.clone(), ClientId(33), RequestNumber(1));
        let deposits = vec![BankCommand::Deposit { id, amount: 1 }; 256];
        match second.submit::<Bank>(&deposits).await {
            Err(engine::client::ClientError::Reused(RequestNumber(1))) => {}
            other => panic!("a reused number must be refused, got {other:?}"),
        }
        assert_eq!(
            common::balance_and_version(&mut first, id).await,
            (5, 1),
            "no deposit of the second client ran"
        );
    });
}
