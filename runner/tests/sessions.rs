//! Sessions with real processes: registration through the log, expiry past the cluster's
//! session limit and registration again; a client restarted with its id asks the cluster
//! where its session stands and goes on from there, its earlier requests applied once.

mod common;

use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use common::{balance_and_version, open_account, runtime, three_up_with_a_leader};
use engine::client::{Client, ClientError};
use engine::{ClientId, Outcome, RequestNumber};

/// Proves a client restarted with its id resumes after its last request (it would be told
/// "stale" starting again at 1), a fresh id resumes at 1, and every deposit applied once.
#[test]
fn a_client_restarted_with_its_id_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = common::start_cluster(dir.path(), |_| {});
    runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let id = account_id(21);
        let deposit = BankCommand::Deposit { id, amount: 10 };
        let mut first = Client::new(config.clone(), ClientId(51), RequestNumber(1));
        open_account(&mut first, id, 0).await;
        first
            .submit::<Bank>(std::slice::from_ref(&deposit))
            .await
            .unwrap();
        first
            .submit::<Bank>(std::slice::from_ref(&deposit))
            .await
            .unwrap();
        drop(first);
        let mut again = Client::new(config.clone(), ClientId(51), RequestNumber(1));
        let from_one = again.submit::<Bank>(std::slice::from_ref(&deposit)).await;
        assert!(
            matches!(from_one, Err(ClientError::Stale(RequestNumber(1)))),
            "{from_one:?}"
        );
        let mut resumed = Client::resume(config.clone(), ClientId(51)).await.unwrap();
        assert_eq!(resumed.next_request(), RequestNumber(4));
        resumed.submit::<Bank>(&[deposit]).await.unwrap();
        assert_eq!(
            balance_and_version(&mut resumed, id).await,
            (30, 4),
            "each deposit once"
        );
        let fresh = Client::resume(config.clone(), ClientId(52)).await.unwrap();
        assert_eq!(fresh.next_request(), RequestNumber(1));
    });
}

/// Proves with three processes and `sessions_max = 16` in the cluster file: a registered
/// client starts at request 1; sixteen newer clients evict it, and it is told its session
/// expired (not stale, not run again); it registers again under a new id and goes on; every
/// deposit applied once.
#[test]
fn an_expired_client_registers_again() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = common::start_cluster(dir.path(), |file| file.sessions_max = 16);
    runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let id = account_id(31);
        let deposit = BankCommand::Deposit { id, amount: 10 };
        let mut client = Client::register(config.clone()).await.unwrap();
        assert_eq!(client.next_request(), RequestNumber(1));
        let open = BankCommand::Open {
            id,
            balance: 0,
            flags: 0,
        };
        client
            .submit::<Bank>(&[open, deposit.clone()])
            .await
            .unwrap();
        let first_id = client.id();
        for _ in 0..16 {
            let mut other = Client::register(config.clone()).await.unwrap();
            assert_ne!(other.id(), first_id);
            balance_and_version(&mut other, id).await;
        }
        let expired = client.submit::<Bank>(std::slice::from_ref(&deposit)).await;
        assert!(
            matches!(expired, Err(ClientError::SessionExpired(RequestNumber(2)))),
            "{expired:?}"
        );
        let resumed = Client::resume(config.clone(), first_id).await;
        assert!(
            matches!(resumed, Err(ClientError::SessionExpired(_))),
            "{:?}",
            resumed.map(|c| c.next_request())
        );
        let mut again = Client::register(config.clone()).await.unwrap();
        assert_ne!(again.id(), first_id);
        again.submit::<Bank>(&[deposit]).await.unwrap();
        assert_eq!(
            balance_and_version(&mut again, id).await,
            (20, 3),
            "each deposit once"
        );
    });
}

/// Proves with three processes that requests pipelined by one client (20, eight in flight at
/// a time, each on its own connection) apply once each and in the client's order: the
/// account's version after each deposit is its request's place in the order.
#[test]
fn pipelined_requests_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = common::start_cluster(dir.path(), |_| {});
    runtime().block_on(async {
        three_up_with_a_leader(&config).await;
        let id = account_id(41);
        let mut client = Client::register(config.clone()).await.unwrap();
        open_account(&mut client, id, 0).await;
        let deposits: Vec<Vec<BankCommand>> = (1..=20)
            .map(|amount| vec![BankCommand::Deposit { id, amount }])
            .collect();
        let answers = client.submit_pipelined::<Bank>(&deposits).await;
        let mut balance = 0;
        for (at, answer) in answers.into_iter().enumerate() {
            balance += at as u64 + 1;
            match answer.as_deref() {
                Ok([Outcome::Done(BankOutput::Account(account))]) => assert_eq!(
                    (account.balance, account.version),
                    (balance, at as u64 + 2),
                    "deposit {at} ran in its place"
                ),
                other => panic!("deposit {at}: {other:?}"),
            }
        }
        assert_eq!(client.next_request(), RequestNumber(22));
        let after = client.submit::<Bank>(&[BankCommand::Get { id }]).await;
        assert!(
            after.is_ok(),
            "the client goes on after the pipeline: {after:?}"
        );
        assert_eq!(balance_and_version(&mut client, id).await, (210, 21));
    });
}
