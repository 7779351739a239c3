//! A handler that is not deterministic, in a real three-node cluster in Verify mode: the leader
//! catches it at the first divergent command, reports node, entry and command, releases none of
//! that entry's results, and the client's answer comes from the replicas that agree.

use engine::client::{Client, ClientError};
use engine::codec::{Decode, Encode};
use engine::node::local::LocalCluster;
use engine::{
    ClientId, EntryIndex, Handler, Mode, Outcome, RequestNumber, Schema, StateError, Table, Tx,
};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

const VALUES: Table<u32, i64> = Table::new(0, "values");

#[derive(Debug, Clone, Encode, Decode)]
enum Command {
    Set {
        key: u32,
        value: i64,
    },
    /// Returns how many times this node has executed or simulated it: a simulation and the
    /// execution that follows it on the same node differ.
    Count,
}

#[derive(Debug, Clone, PartialEq, Encode, Decode)]
struct Full;

impl From<StateError> for Full {
    fn from(_: StateError) -> Self {
        Full
    }
}

/// Each node's copy has its own counter.
#[derive(Default)]
struct Counting {
    runs: AtomicI64,
}

impl Clone for Counting {
    fn clone(&self) -> Self {
        Counting::default()
    }
}

impl Handler for Counting {
    type Command = Command;
    type Output = i64;
    type Error = Full;

    fn schema(&self) -> Schema {
        Schema::new().table(&VALUES)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<i64, Full> {
        match *command {
            Command::Set { key, value } => {
                tx.put(&VALUES, key, value)?;
                Ok(value)
            }
            Command::Count => Ok(self.runs.fetch_add(1, Ordering::Relaxed)),
        }
    }
}

/// Node `leader`'s status once it reports that it halted (the test fails after 20 s).
async fn halted_status(
    cluster: &LocalCluster<Counting>,
    leader: engine::NodeId,
) -> engine::client::NodeStatus {
    let started = Instant::now();
    loop {
        let statuses = cluster.statuses().await;
        if let Some(status) = statuses
            .iter()
            .flatten()
            .find(|s| s.node == leader && s.halted.is_some())
        {
            return status.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the leader never halted: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Proves the divergence is caught on the leader with its report, and that the answer the
/// client gets is the two followers' agreed one, never the divergent execution.
#[test]
fn verify_mode_stops_a_nondeterministic_leader() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(dir.path(), 3, Counting::default(), |c| {
            c.mode = Mode::Verify
        })
        .unwrap();
        let leader = cluster
            .wait_for_leader(Duration::from_secs(10))
            .await
            .expect("a leader");
        let mut config = cluster.client_config();
        config.give_up_after = Some(Duration::from_secs(20));
        let mut client = Client::new(config, ClientId(1), RequestNumber(1));
        let first = client
            .submit::<Counting>(&[Command::Set { key: 1, value: 10 }])
            .await
            .unwrap();
        assert_eq!(first, vec![Outcome::Done(10)]);

        let answer = client
            .submit::<Counting>(&[
                Command::Set { key: 2, value: 20 },
                Command::Count,
                Command::Set { key: 3, value: 30 },
            ])
            .await;

        // The leader simulated Count (0) and executed it (1): it halted at command 1.
        let halted = halted_status(&cluster, leader).await;
        let report = halted.halted.clone().unwrap();
        assert!(report.contains("command 1"), "{report}");
        assert!(
            report.contains(&format!("entry {}", halted.applied_index.next())),
            "{report}"
        );
        assert!(
            report.contains("Done(0)") && report.contains("Done(1)"),
            "{report}"
        );

        // The followers executed Count once each (0): the answer is theirs, and the same.
        match answer {
            Ok(outcomes) => assert_eq!(
                outcomes,
                vec![Outcome::Done(20), Outcome::Done(0), Outcome::Done(30)]
            ),
            Err(ClientError::GaveUp { .. }) => {
                panic!("the two agreeing replicas should have answered")
            }
            Err(other) => panic!("unexpected {other}"),
        }
        let others: Vec<_> = cluster
            .statuses()
            .await
            .into_iter()
            .flatten()
            .filter(|s| s.node != leader)
            .collect();
        assert_eq!(others.len(), 2);
        assert_eq!(others[0].state_hash, others[1].state_hash);
        assert!(
            others
                .iter()
                .all(|s| s.halted.is_none() && s.applied_index > EntryIndex(0))
        );
    });
}
