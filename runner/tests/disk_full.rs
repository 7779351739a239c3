//! A full disk with real processes: each node's data directory on a tmpfs of its own, filled
//! with a ballast file. A full follower drops out while the others commit, and catches up once
//! space returns; a full leader refuses new requests with `StorageFull` (nothing it could not
//! persist is acknowledged; the client retries), still answers a retry of a request it knows,
//! and serves again once space returns. Every acknowledged transfer
//! is in place at the end, on three equal state hashes.

mod common;

use bank::{Bank, BankCommand};
use common::{
    Model, SmallDisk, TRANSFERS_PER_REQUEST, converged, leader_of, runtime, transfers, wait_for,
};
use engine::client::{Client, ClientError};
use engine::internals::entry::encode_commands;
use engine::node::{ClusterFile, WalIo};
use engine::rng::Rng;
use engine::{ClientId, RequestNumber};
use net::message::Rejection;
use std::cell::Cell;

/// Bytes of each node's file system: room for the WAL segments and snapshots of the run.
const DISK_BYTES: u64 = 48 << 20;
/// Small WAL segments, so that a full disk shows at the next segment as well as mid-segment.
fn settings(file: &mut ClusterFile) {
    file.wal_segment_bytes = 1 << 20;
    file.snapshot_every = 16;
    file.snapshot_retain_ms = 20;
}
/// How long the client retries a full leader's `StorageFull` before it gives up.
const GIVE_UP_WHEN_FULL: std::time::Duration = std::time::Duration::from_secs(2);
/// Requests a full leader may still acknowledge (those already in its pipeline, committed by
/// the followers) before it refuses new ones.
const REQUESTS_BEFORE_REFUSAL_MAX: usize = 1_000;

fn has_room(all: &[net::message::NodeStatus]) -> bool {
    all.len() == 3 && all.iter().all(|s| !s.storage_full)
}

/// Proves the behaviour on a full follower, then on a full leader, with the WAL on its own
/// thread.
#[test]
#[ignore = "needs root: mounts a tmpfs for each node"]
fn a_full_follower_drops_out_and_a_full_leader_refuses_new_requests() {
    full_disks(WalIo::Thread);
}

/// Proves the same with the WAL on each node's own thread (what `auto` picks on tmpfs): a
/// full disk's appends wait and are tried again without holding the node.
#[test]
#[ignore = "needs root: mounts a tmpfs for each node"]
fn the_same_with_the_wal_on_the_node_thread() {
    full_disks(WalIo::Inline);
}

/// Sends requests of transfers (recorded in `model` when answered) until one is refused for
/// a full disk and the client gives up on it; false when none was, after
/// [`REQUESTS_BEFORE_REFUSAL_MAX`].
async fn refused_for_a_full_disk(client: &mut Client, rng: &mut Rng, model: &mut Model) -> bool {
    for _ in 0..REQUESTS_BEFORE_REFUSAL_MAX {
        let batch: Vec<BankCommand> = (0..TRANSFERS_PER_REQUEST)
            .map(|_| common::random_transfer(rng))
            .collect();
        match client.submit::<Bank>(&batch).await {
            Ok(outcomes) => {
                for (command, outcome) in batch.iter().zip(&outcomes) {
                    model.record(command, outcome);
                }
            }
            Err(ClientError::GaveUp {
                last_rejection: Some(Rejection::StorageFull),
                ..
            }) => return true,
            Err(error) => panic!("unexpected: {error}"),
        }
    }
    false
}

fn full_disks(wal_io: WalIo) {
    let dir = tempfile::tempdir().unwrap();
    let mut disks = Vec::new();
    for id in 1..=3 {
        let disk = SmallDisk::mount_as_root(&dir.path().join(format!("node{id}")), DISK_BYTES);
        disks.push(disk);
    }
    let (_nodes, config) = common::start_cluster(dir.path(), |file| {
        settings(file);
        file.wal_io = wal_io;
    });
    runtime().block_on(async {
        let mut client = Client::new(config.clone(), ClientId(5), RequestNumber(1));
        let mut model = Model::open(&mut client).await;
        let mut rng = Rng::new(31);
        let acknowledged = Cell::new(0);
        let all = wait_for(&config, "a leader", |all| {
            all.len() == 3 && leader_of(all).is_some()
        })
        .await;
        let leader = leader_of(&all).unwrap().0;
        let follower = (1..=3).find(|&n| n != leader).unwrap();

        // A full follower: the others go on committing.
        disks[usize::from(follower) - 1].fill();
        transfers(&mut client, &mut rng, &mut model, 100, &acknowledged).await;
        wait_for(&config, "the follower to report a full disk", |all| {
            all.iter().any(|s| s.node.0 == follower && s.storage_full)
        })
        .await;
        transfers(&mut client, &mut rng, &mut model, 100, &acknowledged).await;
        disks[usize::from(follower) - 1].free();
        wait_for(&config, "every disk to have room", has_room).await;
        converged(&config).await;

        // A request answered before the leader's disk fills, for a retry of it below.
        let read = [BankCommand::Get {
            id: bank::workload::account_id(0),
        }];
        // Sent through the log (a read off the log is in no session), as `submit_encoded` does.
        let logged = || (encode_commands(&read), 1);
        let mut first = Client::new(config.clone(), ClientId(40), RequestNumber(1));
        let (_, answered) = first.submit_encoded(logged().0, logged().1).await.unwrap();

        // A full leader: new requests are refused with StorageFull, which the client retries
        // (here until it gives up: the outcome is unknown to it, and nothing was logged).
        disks[usize::from(leader) - 1].fill();
        let mut impatient = config.clone();
        impatient.give_up_after = Some(GIVE_UP_WHEN_FULL);
        let mut full_client = Client::new(impatient, ClientId(5), client.next_request());
        let refused = refused_for_a_full_disk(&mut full_client, &mut rng, &mut model).await;
        assert!(refused, "a full leader kept taking requests");
        // A retry of a request the sessions know is answered with its results, full disk or
        // not (it used to be refused, and the client gave its number back for other commands).
        let mut again = Client::new(config.clone(), ClientId(40), RequestNumber(1));
        let (_, retried) = again
            .submit_encoded(logged().0, logged().1)
            .await
            .expect("answered from the session");
        assert_eq!(retried, answered);
        client = Client::new(config.clone(), ClientId(5), full_client.next_request());
        disks[usize::from(leader) - 1].free();
        // The WAL retries its append every WAL_FULL_RETRY_MS: until then the leader refuses.
        wait_for(&config, "every disk to have room", has_room).await;
        transfers(&mut client, &mut rng, &mut model, 50, &acknowledged).await;
        converged(&config).await;
        model.check(&config, ClientId(6)).await;
    });
}
