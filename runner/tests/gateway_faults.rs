//! The gateway under faults, with real processes: callers send keyed transfers through one
//! gateway while that gateway is stopped and killed (`kill -9`, with requests it sent
//! committed and unanswered) and, later, the cluster's leader; each
//! caller retries its transfer with the same key through a second gateway until it has an
//! answer. Every transfer then has exactly one outcome, the balances are exactly what the
//! acknowledged outcomes say, and no money was made or lost. The callers only ever see an
//! answer, a refused connection or a 503 while they retry.

mod common;

use common::gateway::{Gateway, TOKEN, post_to};
use common::{leader_of, runtime, start_cluster, statuses};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Accounts the transfers move money between.
const ACCOUNTS: u64 = 16;
/// Each account's opening balance.
const OPENING: u64 = 1_000;
/// Concurrent callers.
const CALLERS: u64 = 8;
/// Transfers each caller makes.
const TRANSFERS_PER_CALLER: u64 = 60;
/// Seconds a caller retries one transfer at most before the test fails.
const RETRY_S: u64 = 60;
/// Milliseconds the first gateway stays stopped before it is killed: long enough for the
/// cluster to commit what it had sent.
const PAUSE_MS: u64 = 300;

/// One caller's acknowledged transfer: from, to, amount, and whether it ran (a refusal for
/// want of funds is an outcome too, and moves nothing).
type Acknowledged = (u64, u64, u64, bool);

/// Where a caller sends: the first gateway until it is gone, then the second.
struct Route {
    first_address: String,
    first: Mutex<Option<Gateway>>,
    second: Gateway,
    first_gone: AtomicBool,
}

/// Proves exactly once under a gateway's and a leader's `kill -9`, by idempotency keys.
#[test]
fn keyed_transfers_run_once_through_gateway_and_leader_kills() {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, config) = start_cluster(dir.path(), |_| {});
    let first = Gateway::start(dir.path(), &nodes.cluster_file, "first");
    let route = Arc::new(Route {
        first_address: first.address.clone(),
        first: Mutex::new(Some(first)),
        second: Gateway::start(dir.path(), &nodes.cluster_file, "second"),
        first_gone: AtomicBool::new(false),
    });
    let opens: Vec<String> = (1..=ACCOUNTS)
        .map(|id| format!(r#"{{"Open": {{"id": {id}, "balance": {OPENING}, "flags": 0}}}}"#))
        .collect();
    route
        .second
        .commands(&format!("[{}]", opens.join(",")), &[]);
    // Each answered transfer is one message: the test waits on them, not on the clock.
    let (answered, answers) = std::sync::mpsc::channel();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let (route, answered) = (route.clone(), answered.clone());
            std::thread::spawn(move || run_caller(caller, &route, &answered))
        })
        .collect();
    let wait_until = |count: u64| {
        for _ in 0..count {
            answers
                .recv_timeout(Duration::from_secs(RETRY_S))
                .expect("the load stalled");
        }
    };
    let total = CALLERS * TRANSFERS_PER_CALLER;
    wait_until(total / 4);
    // The gateway that took the first quarter stops with requests in flight, which the
    // cluster commits meanwhile; then it dies without having answered them.
    let first = route.first.lock().unwrap().take().expect("running");
    first.pause();
    std::thread::sleep(Duration::from_millis(PAUSE_MS));
    route.first_gone.store(true, Ordering::Relaxed);
    drop(first);
    wait_until(total / 4);
    let leader = runtime().block_on(async { leader_of(&statuses(&config).await) });
    let leader = leader.expect("a leader").0;
    nodes.kill(leader);
    wait_until(total / 4);
    nodes.start(leader);
    let acknowledged: Vec<Acknowledged> = callers
        .into_iter()
        .flat_map(|caller| caller.join().expect("the caller finished"))
        .collect();
    assert_eq!(acknowledged.len() as u64, total);
    assert_balances(&route.second, &acknowledged);
}

/// One caller: its transfers in turn, each with a key of its own, each retried until answered.
fn run_caller(
    caller: u64,
    route: &Route,
    answered: &std::sync::mpsc::Sender<()>,
) -> Vec<Acknowledged> {
    let mut rng = engine::rng::Rng::new(caller + 1);
    (0..TRANSFERS_PER_CALLER)
        .map(|n| {
            let from = 1 + rng.below(ACCOUNTS);
            let to = 1 + (from + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let amount = 1 + rng.below(OPENING / 4);
            let body =
                format!(r#"[{{"Transfer": {{"from": {from}, "to": {to}, "amount": {amount}}}}}]"#);
            let outcome = send_until_answered(route, &body, &format!("caller-{caller}-{n}"));
            // The test may have stopped listening (it failed already).
            let _ = answered.send(());
            let ran = match outcome["outcome"].as_str() {
                Some("done") => true,
                Some("failed") => false,
                _ => panic!("transfer {caller}-{n}: {outcome}"),
            };
            (from, to, amount, ran)
        })
        .collect()
}

/// Sends `body` with `key` until a gateway answers it with outcomes; any other answer than a
/// 503 (or a gateway that cannot be reached) fails the test.
fn send_until_answered(route: &Route, body: &str, key: &str) -> Value {
    let header = format!("Idempotency-Key: {key}");
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(RETRY_S),
            "{key} never answered"
        );
        let address = if route.first_gone.load(Ordering::Relaxed) {
            &route.second.address
        } else {
            &route.first_address
        };
        let answer = post_to(address, "/v1/commands", body, Some(TOKEN), &[&header]);
        match answer {
            Some((200, outcomes)) => return outcomes[0].clone(),
            // A key in flight through the dead gateway's request, or no leader yet.
            Some((409 | 503, _)) | None => std::thread::sleep(Duration::from_millis(20)),
            Some((status, value)) => panic!("{key}: {status} {value}"),
        }
    }
}

/// Checks every account's balance against the acknowledged transfers, and the audit.
fn assert_balances(gateway: &Gateway, acknowledged: &[Acknowledged]) {
    // The sum of the moves that ran, whatever order they ran in (callers' lists interleave).
    let mut expected = vec![OPENING as i64; ACCOUNTS as usize + 1];
    for &(from, to, amount, ran) in acknowledged {
        if ran {
            expected[from as usize] -= amount as i64;
            expected[to as usize] += amount as i64;
        }
    }
    let gets: Vec<String> = (1..=ACCOUNTS)
        .map(|id| format!(r#"{{"Get": {{"id": {id}}}}}"#))
        .collect();
    let body = format!("[{}, \"Audit\"]", gets.join(","));
    let (status, read) = gateway.post("/v1/reads", &body, Some(TOKEN), &[]);
    assert_eq!(status, 200, "{read}");
    for id in 1..=ACCOUNTS {
        let balance = &read[id as usize - 1]["output"]["Account"]["balance"];
        assert_eq!(balance, expected[id as usize], "account {id}: {read}");
    }
    let audit = &read[ACCOUNTS as usize]["output"]["Audit"];
    assert_eq!(audit["total"], (ACCOUNTS * OPENING).to_string(), "{read}");
}
