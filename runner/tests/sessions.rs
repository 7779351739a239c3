//! Sessions with real processes: a client restarted with its id asks the cluster where its
//! session stands and goes on from there, its earlier requests applied once.

mod common;

use bank::workload::account_id;
use bank::{Bank, BankCommand, BankOutput};
use common::{leader_of, runtime, wait_for};
use engine::client::{Client, ClientError};
use engine::{ClientId, Outcome, RequestNumber};

/// Proves a client restarted with its id resumes after its last request (it would be told
/// "stale" starting again at 1), a fresh id resumes at 1, and every deposit applied once.
#[test]
fn a_client_restarted_with_its_id_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_nodes, config) = common::start_cluster(dir.path(), |_| {});
    runtime().block_on(async {
        wait_for(&config, "a leader", |all| {
            all.len() == 3 && leader_of(all).is_some()
        })
        .await;
        let id = account_id(21);
        let deposit = BankCommand::Deposit { id, amount: 10 };
        let mut first = Client::new(config.clone(), ClientId(51), RequestNumber(1));
        let open = BankCommand::Open {
            id,
            balance: 0,
            flags: 0,
        };
        first.submit::<Bank>(&[open]).await.unwrap();
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
        let get = resumed
            .submit::<Bank>(&[BankCommand::Get { id }])
            .await
            .unwrap();
        let [Outcome::Done(BankOutput::Account(account))] = &get[..] else {
            panic!("{get:?}")
        };
        assert_eq!(
            (account.balance, account.version),
            (30, 4),
            "each deposit once"
        );
        let fresh = Client::resume(config.clone(), ClientId(52)).await.unwrap();
        assert_eq!(fresh.next_request(), RequestNumber(1));
    });
}
