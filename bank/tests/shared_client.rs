//! Many callers through one shared client (`engine::client::SharedClient`), on a real
//! three-node cluster (real TCP, real WALs with fsync), with the leader stopped while they
//! call: every command applies exactly once, every caller gets its own outcomes, a refused
//! command changes nothing for the other callers of its request, and the audit holds.

use bank::{AccountId, Bank, BankCommand, BankError, BankOutput};
use engine::client::{SharedClient, SharedOptions};
use engine::node::local::LocalCluster;
use engine::{EntryIndex, Outcome};
use std::time::Duration;

/// Concurrent callers, each with an account of its own.
const CALLERS: u64 = 96;
/// Deposits each caller makes, one command per call.
const DEPOSITS: u64 = 30;
/// The caller's deposit at which the leader is stopped (by caller 1).
const STOP_AT: u64 = 10;

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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
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
