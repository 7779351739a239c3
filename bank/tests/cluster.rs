//! The determinism test through three replicas: one seeded stream of 100,000 Bank commands, sent
//! as requests of 1,024 commands to three-node clusters (real TCP, real WAL with fsync) that pack
//! 16 or 1,024 commands per entry, in Verify and in Performance mode: identical per-command
//! results, and identical state hashes on all twelve replicas.

use bank::workload::account_id;
use bank::{Bank, BankCommand};
use engine::client::Client;
use engine::node::local::LocalCluster;
use engine::{ClientId, EntryIndex, Mode, RequestNumber, StateHash};
use std::time::Duration;

const COMMANDS: usize = 100_000;
const REQUEST_COMMANDS: usize = 1024;
const ACCOUNTS: u64 = 2_000;

/// The same kind of stream as the single-node determinism test: every command kind, valid and
/// invalid.
fn stream(seed: u64) -> Vec<BankCommand> {
    bank::workload::mixed_stream(seed, COMMANDS, ACCOUNTS)
}

/// Runs the stream through a fresh three-node cluster in `mode`, packing `entry_commands_max`
/// per entry;
/// returns every request's encoded results and each replica's final state hash.
async fn run(
    commands: &[BankCommand],
    entry_commands_max: u32,
    mode: Mode,
) -> (Vec<Vec<u8>>, Vec<StateHash>) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(dir.path(), 3, Bank, |config| {
        config.entry_commands_max = entry_commands_max;
        config.mode = mode;
    })
    .expect("cluster starts");
    cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader");
    let mut client = Client::new(cluster.client_config(), ClientId(77), RequestNumber(1));
    let mut results = Vec::new();
    for request in commands.chunks(REQUEST_COMMANDS) {
        let bytes = engine::internals::entry::encode_commands(request);
        let (count, encoded) = client
            .submit_encoded(bytes, request.len() as u32)
            .await
            .expect("request completes");
        assert_eq!(count as usize, request.len());
        results.push(encoded);
    }
    let statuses = cluster
        .wait_for_convergence(EntryIndex(1), Duration::from_secs(10))
        .await
        .expect("all three replicas converge");
    (results, statuses.iter().map(|s| s.state_hash).collect())
}

/// Proves 16 and 1,024 commands per entry, in Verify and in Performance mode, give identical
/// results and identical state hashes on all three replicas of each cluster.
#[test]
fn three_replicas_agree_whatever_the_packing_and_mode() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let commands = stream(42);
    let mut runs = Vec::new();
    for mode in [Mode::Verify, Mode::Performance] {
        for packing in [16, 1024] {
            let (results, hashes) = runtime.block_on(run(&commands, packing, mode));
            assert_eq!(hashes.len(), 3);
            assert!(
                hashes.iter().all(|h| *h == hashes[0]),
                "{mode:?} {packing}: replicas differ"
            );
            runs.push((mode, packing, results, hashes[0]));
        }
    }
    let (_, _, results, hash) = &runs[0];
    for (mode, packing, other_results, other_hash) in &runs[1..] {
        assert_eq!(
            other_hash, hash,
            "{mode:?} at {packing} per entry changed the state hash"
        );
        assert!(
            other_results == results,
            "{mode:?} at {packing} per entry changed a result"
        );
    }
}

/// Proves requests are checked before the log: empty, over 1,024 commands, undecodable or
/// with bytes left over are each refused with their reason; a client that only knows a
/// follower is redirected to the leader and its request applies.
#[test]
fn bad_requests_are_refused_and_followers_redirect() {
    use engine::client::ClientError;
    use net::message::Rejection;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(dir.path(), 3, Bank, |_| {}).expect("cluster starts");
        let leader = cluster
            .wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a leader");
        let mut client = Client::new(cluster.client_config(), ClientId(3), RequestNumber(1));
        let open = BankCommand::Open {
            id: account_id(1),
            balance: 10,
            flags: 0,
        };
        let refused = |result: Result<(u32, Vec<u8>), ClientError>| match result {
            Err(ClientError::Rejected(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(
            refused(client.submit_encoded(Vec::new(), 0).await),
            Rejection::Empty
        );
        let many = engine::internals::entry::encode_commands(&vec![open.clone(); 1025]);
        assert_eq!(
            refused(client.submit_encoded(many, 1025).await),
            Rejection::TooManyCommands { count: 1025 }
        );
        assert_eq!(
            refused(client.submit_encoded(vec![0xFF; 40], 1).await),
            Rejection::Malformed { command: 0 }
        );
        let mut extra = engine::internals::entry::encode_commands(std::slice::from_ref(&open));
        extra.push(0);
        assert_eq!(
            refused(client.submit_encoded(extra, 1).await),
            Rejection::Malformed { command: 1 }
        );
        let max = engine::internals::entry::encode_commands(&vec![BankCommand::Audit; 1024]);
        assert_eq!(
            client.submit_encoded(max, 1024).await.unwrap().0,
            1024,
            "1,024 commands are accepted"
        );

        let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
        let follower_address = cluster.config(follower).nodes[follower.0 as usize - 1]
            .client_address
            .clone();
        let mut config = cluster.client_config();
        config.nodes = vec![follower_address];
        let mut redirected = Client::new(config, ClientId(4), RequestNumber(1));
        let outcomes = redirected.submit::<Bank>(&[open]).await.unwrap();
        assert_eq!(outcomes.len(), 1);
        assert!(matches!(outcomes[0], engine::Outcome::Done(_)));
    });
}
