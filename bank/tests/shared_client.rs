//! Many callers through one shared client (`engine::client::SharedClient`), on a real
//! three-node cluster (real TCP, real WALs with fsync), with the leader stopped while they
//! call: every command applies exactly once, every caller gets its own outcomes, a refused
//! command changes nothing for the other callers of its request, and the audit holds.

use bank::{AccountId, Bank, BankCommand, BankError, BankOutput};
use engine::client::{SharedClient, SharedError, SharedOptions, key_session};
use engine::node::local::LocalCluster;
use engine::{EntryIndex, Outcome};
use std::time::Duration;

/// Concurrent callers, each with an account of its own.
const CALLERS: u64 = 96;
/// Deposits each caller makes, one command per call.
const DEPOSITS: u64 = 30;
/// The caller's deposit at which the leader is stopped (by caller 1).
const STOP_AT: u64 = 10;

/// A runtime of two worker threads, as a service sharing one client across them has.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Proves a shared client is what its callers may share across threads.
#[test]
fn a_shared_client_is_clone_send_and_sync() {
    fn shareable<T: Clone + Send + Sync + 'static>() {}
    shareable::<SharedClient<Bank>>();
}

/// What caller `caller` deposits each time: distinct per caller, so that each balance it is
/// told is its own.
fn amount(caller: u64) -> u64 {
    caller
}

/// One caller: opens its account, then deposits one command per call, each time checking the
/// balance it is told is its own account's after exactly its own deposits; between deposits
/// it asks for more than it has and must be refused alone.
async fn caller(client: SharedClient<Bank>, caller: u64, stop: tokio::sync::mpsc::Sender<()>) {
    let id = AccountId(caller);
    let open = BankCommand::Open {
        id,
        balance: 0,
        flags: 0,
    };
    let opened = client.submit_one(open).await.expect("the open is answered");
    assert!(matches!(opened, Outcome::Done(_)), "{caller}: {opened:?}");
    for deposit in 1..=DEPOSITS {
        if caller == 1 && deposit == STOP_AT {
            stop.send(()).await.expect("the test waits for it");
        }
        let command = BankCommand::Deposit {
            id,
            amount: amount(caller),
        };
        let outcome = client.submit_one(command).await.expect("answered");
        let Outcome::Done(BankOutput::Account(account)) = outcome else {
            panic!("caller {caller}, deposit {deposit}: {outcome:?}");
        };
        assert_eq!(account.balance, deposit * amount(caller), "caller {caller}");
        let too_much = BankCommand::Withdraw {
            id,
            amount: account.balance + 1,
        };
        let refused = client.submit_one(too_much).await.expect("answered");
        let expected = BankError::InsufficientFunds {
            balance: account.balance,
            amount: account.balance + 1,
        };
        assert_eq!(refused, Outcome::Failed(expected), "caller {caller}");
    }
}

/// Proves `CALLERS` callers sharing one client, each with one command in flight, get exactly
/// their own outcomes while the leader is stopped under them, and that every deposit applied
/// exactly once (each balance, and the audit's total).
#[test]
fn callers_share_a_client_through_a_leader_change_exactly_once() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let mut cluster = LocalCluster::start(dir.path(), 3, Bank, |_| {}).expect("starts");
        let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
        let leader = leader.expect("a leader");
        let options = SharedOptions {
            inflight: 2,
            ..SharedOptions::new(256)
        };
        let client = SharedClient::<Bank>::start(cluster.client_config(), options);
        let (stop, mut stop_asked) = tokio::sync::mpsc::channel(1);
        let callers: Vec<_> = (1..=CALLERS)
            .map(|id| tokio::spawn(caller(client.clone(), id, stop.clone())))
            .collect();
        stop_asked.recv().await.expect("caller 1 asks");
        cluster.stop(leader);
        for joined in callers {
            joined.await.expect("every caller got its own outcomes");
        }
        let reads: Vec<BankCommand> = (1..=CALLERS)
            .map(|id| BankCommand::Get { id: AccountId(id) })
            .chain([BankCommand::Audit])
            .collect();
        let read = client.submit(reads).await.expect("the reads are answered");
        for (caller, outcome) in (1..=CALLERS).zip(&read) {
            let Outcome::Done(BankOutput::Account(account)) = outcome else {
                panic!("caller {caller}: {outcome:?}");
            };
            assert_eq!(account.balance, DEPOSITS * amount(caller), "once each");
        }
        let total: u128 = (1..=CALLERS)
            .map(|c| u128::from(DEPOSITS * amount(c)))
            .sum();
        let audit = BankOutput::Audit {
            accounts: CALLERS,
            total,
        };
        assert_eq!(read[CALLERS as usize], Outcome::Done(audit));
        let converged = cluster.wait_for_convergence(EntryIndex(1), Duration::from_secs(10));
        converged.await.expect("the two replicas left agree");
    });
}

/// Keyed callers, each deposit under a key of its own.
const KEYED_CALLERS: u64 = 32;
/// Keyed deposits each keyed caller makes.
const KEYED_DEPOSITS: u64 = 12;

/// One keyed caller: each deposit sent under its key through both clients at once (two
/// gateways retrying one caller's key, say); both must get the same outcome, the balance
/// after exactly this caller's deposits so far.
async fn keyed_caller(
    clients: [SharedClient<Bank>; 2],
    caller: u64,
    stop: tokio::sync::mpsc::Sender<()>,
) {
    let id = AccountId(caller);
    for deposit in 1..=KEYED_DEPOSITS {
        if caller == 1 && deposit == KEYED_DEPOSITS / 2 {
            stop.send(()).await.expect("the test waits for it");
        }
        let key = key_session(&format!("caller-{caller}-deposit-{deposit}"));
        let command = || {
            vec![BankCommand::Deposit {
                id,
                amount: amount(caller),
            }]
        };
        let (a, b) = tokio::join!(
            clients[0].submit_keyed(key, command()),
            clients[1].submit_keyed(key, command())
        );
        let (a, b) = (a.expect("answered"), b.expect("answered"));
        assert_eq!(
            a, b,
            "caller {caller}, deposit {deposit}: one outcome per key"
        );
        let Outcome::Done(BankOutput::Account(account)) = &a[0] else {
            panic!("caller {caller}, deposit {deposit}: {a:?}");
        };
        assert_eq!(account.balance, deposit * amount(caller), "caller {caller}");
    }
}

/// Proves keyed callers through two shared clients apply each key once, through a leader's
/// stop: both sends of a key get the same outcome, every balance counts each deposit once,
/// and a key sent again with another command runs nothing.
#[test]
fn keyed_callers_through_two_clients_apply_each_key_once() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let mut cluster = LocalCluster::start(dir.path(), 3, Bank, |_| {}).expect("starts");
        let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
        let leader = leader.expect("a leader");
        let start = || SharedClient::<Bank>::start(cluster.client_config(), SharedOptions::new(64));
        let clients = [start(), start()];
        let opens: Vec<BankCommand> = (1..=KEYED_CALLERS)
            .map(|id| BankCommand::Open {
                id: AccountId(id),
                balance: 0,
                flags: 0,
            })
            .collect();
        clients[0]
            .submit(opens)
            .await
            .expect("the opens are answered");
        let (stop, mut stop_asked) = tokio::sync::mpsc::channel(1);
        let callers: Vec<_> = (1..=KEYED_CALLERS)
            .map(|caller| tokio::spawn(keyed_caller(clients.clone(), caller, stop.clone())))
            .collect();
        stop_asked.recv().await.expect("caller 1 asks");
        cluster.stop(leader);
        for joined in callers {
            joined.await.expect("every keyed caller got its outcomes");
        }
        let reads: Vec<BankCommand> = (1..=KEYED_CALLERS)
            .map(|id| BankCommand::Get { id: AccountId(id) })
            .collect();
        let read = clients[1]
            .submit(reads)
            .await
            .expect("the reads are answered");
        for (caller, outcome) in (1..=KEYED_CALLERS).zip(&read) {
            let Outcome::Done(BankOutput::Account(account)) = outcome else {
                panic!("caller {caller}: {outcome:?}");
            };
            assert_eq!(
                account.balance,
                KEYED_DEPOSITS * amount(caller),
                "once each"
            );
        }
        let key = key_session("caller-1-deposit-1");
        let other = vec![BankCommand::Deposit {
            id: AccountId(1),
            amount: 999,
        }];
        let refused = clients[1].submit_keyed(key, other).await;
        assert!(
            matches!(refused, Err(SharedError::KeyReused)),
            "{refused:?}"
        );
    });
}

/// Proves a read-only call rides in the same request as a write sent beside it (a request
/// costs the cluster more than a command does), and that the read sees the log's order: a
/// read and a write of one account, with the client's linger long enough for both to join,
/// form one request of two commands whose read is the balance before or after the deposit.
#[test]
fn a_read_rides_in_the_request_of_a_write_beside_it() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let cluster = LocalCluster::start(dir.path(), 3, Bank, |_| {}).expect("starts");
        cluster
            .wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a leader");
        let formed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let told = formed.clone();
        let options = SharedOptions {
            inflight: 1,
            // Far longer than the test needs: the request forms when its second command
            // joins, at `batch_max`, not when the linger ends.
            linger: Duration::from_secs(60),
            on_formed: Some(std::sync::Arc::new(move |commands, _| {
                told.lock().unwrap().push(commands)
            })),
            ..SharedOptions::new(2)
        };
        let client = SharedClient::<Bank>::start(cluster.client_config(), options);
        let id = AccountId(7);
        let open = BankCommand::Open {
            id,
            balance: 5,
            flags: 0,
        };
        let opened = client.submit(vec![open, BankCommand::Get { id }]).await;
        assert!(matches!(opened.expect("answered")[0], Outcome::Done(_)));
        let deposit = BankCommand::Deposit { id, amount: 3 };
        let (read, wrote) = tokio::join!(
            client.submit_one(BankCommand::Get { id }),
            client.submit_one(deposit)
        );
        let Outcome::Done(BankOutput::Account(read)) = read.expect("the read is answered") else {
            panic!("the read found the account");
        };
        assert!([5, 8].contains(&read.balance), "{read:?}");
        assert!(matches!(wrote.expect("answered"), Outcome::Done(_)));
        assert_eq!(*formed.lock().unwrap(), [2, 2], "one request each time");
    });
}
