//! Replay rehearsal on a real node's history: three Bank nodes (the node's own driver, WAL,
//! snapshots and apply journal) take opens, transfers and deposits, then stop. Replayed with
//! the same Bank, every node's log shows no difference, compared with its journal and its
//! snapshots; replayed with a Bank whose deposit rule was changed, the first deposit is
//! reported, by entry and command, and nothing before it.

use bank::{AccountId, Bank, BankCommand, BankError, BankOutput};
use engine::client::Client;
use engine::node::local::LocalCluster;
use engine::node::rehearsal::{Difference, Rehearsal, RehearsalOptions, rehearse};
use engine::{Handler, NodeId, Schema, Tx};
use std::path::Path;
use std::time::Duration;

/// Requests before the first deposit.
const TRANSFER_REQUESTS: u64 = 150;
/// The amount of the first deposit, unique in the history.
const DEPOSIT: u64 = 777;

/// The Bank with one rule changed: a deposit credits one unit more.
struct GenerousBank;

impl Handler for GenerousBank {
    type Command = BankCommand;
    type Output = BankOutput;
    type Error = BankError;

    fn schema(&self) -> Schema {
        Bank.schema()
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &BankCommand) -> Result<BankOutput, BankError> {
        match *command {
            BankCommand::Deposit { id, amount } => Bank.execute(
                tx,
                &BankCommand::Deposit {
                    id,
                    amount: amount + 1,
                },
            ),
            BankCommand::Open { .. }
            | BankCommand::Withdraw { .. }
            | BankCommand::Transfer { .. }
            | BankCommand::Get { .. }
            | BankCommand::Audit => Bank.execute(tx, command),
        }
    }
}

/// Ten accounts, then transfers among them, then one request with a deposit in its middle.
async fn history(client: &mut Client) {
    let opens: Vec<BankCommand> = (1..=10)
        .map(|id| BankCommand::Open {
            id: AccountId(id),
            balance: 1_000_000,
            flags: 0,
        })
        .collect();
    client.submit::<Bank>(&opens).await.unwrap();
    for n in 0..TRANSFER_REQUESTS {
        let transfers: Vec<BankCommand> = (0..20)
            .map(|k| BankCommand::Transfer {
                from: AccountId((n + k) % 10 + 1),
                to: AccountId((n + 2 * k + 1) % 10 + 1),
                amount: k + 1,
            })
            .collect();
        client.submit::<Bank>(&transfers).await.unwrap();
    }
    let last = [
        BankCommand::Get { id: AccountId(1) },
        BankCommand::Deposit {
            id: AccountId(2),
            amount: DEPOSIT,
        },
        BankCommand::Get { id: AccountId(2) },
    ];
    client.submit::<Bank>(&last).await.unwrap();
}

fn options() -> RehearsalOptions {
    RehearsalOptions {
        capacity_bytes: 1 << 26,
        sessions_max: engine::apply::SESSIONS_MAX_DEFAULT,
        session_retention_s: engine::apply::SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: 1 << 16,
        from_start: false,
    }
}

fn replayed<H: Handler>(dir: &Path, handler: H, options: &RehearsalOptions) -> Rehearsal {
    rehearse(dir, handler, options, |_, _| {}).expect("the rehearsal runs")
}

/// Proves an unchanged build replays every node's history with no difference (from its
/// oldest snapshot, and from the start) and a changed deposit rule is reported at the first
/// deposit, command 1 of its entry, after every entry before it matched.
#[test]
fn a_changed_rule_is_reported_at_the_first_command_it_affects() {
    let dir = tempfile::tempdir().unwrap();
    let tune = |config: &mut engine::node::NodeConfig| {
        config.capacity_bytes = options().capacity_bytes;
        config.wal_segment_bytes = options().wal_segment_bytes;
        config.snapshot_every = 16;
        config.snapshot_retain_ms = 0;
    };
    let mut cluster = LocalCluster::start(dir.path(), 3, Bank, tune).expect("cluster starts");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        cluster
            .wait_for_leader(Duration::from_secs(30))
            .await
            .expect("a leader");
        let mut client = Client::register(cluster.client_config()).await.unwrap();
        history(&mut client).await;
        let leader = cluster
            .statuses()
            .await
            .into_iter()
            .flatten()
            .next()
            .unwrap();
        cluster
            .wait_for_convergence(leader.commit_index, Duration::from_secs(30))
            .await
            .expect("the nodes converge");
    });
    let dirs: Vec<_> = cluster
        .ids()
        .iter()
        .map(|&id| cluster.config(id).data_dir.clone())
        .collect();
    (1..=3).for_each(|id| cluster.stop(NodeId(id)));
    for dir in &dirs {
        let same = replayed(dir, Bank, &options());
        assert_eq!(same.difference, None, "{}", dir.display());
        assert!(same.journaled > TRANSFER_REQUESTS / 2, "{same:?}");
        let changed = replayed(dir, GenerousBank, &options());
        let Some(Difference::Outcome {
            index,
            command,
            described,
        }) = &changed.difference
        else {
            panic!("{:?}", changed.difference)
        };
        assert_eq!(*command, 1, "the deposit is the request's second command");
        assert!(
            described.contains(&format!("amount: {DEPOSIT}")),
            "{described}"
        );
        assert_eq!(changed.through, *index, "it stops at the difference");
        let before = index.0 - changed.from_snapshot.map_or(0, |s| s.0) - 1;
        assert_eq!(changed.entries, before + 1, "every entry before it matched");
        assert!(*index <= same.through);
    }
    let from_start = RehearsalOptions {
        from_start: true,
        ..options()
    };
    let whole = rehearse(&dirs[0], Bank, &from_start, |_, _| {});
    match whole {
        Ok(whole) => assert_eq!(whole.difference, None),
        // The log no longer starts at entry 1 once snapshots let its start go.
        Err(error) => assert!(
            error.to_string().contains("nothing to start from"),
            "{error}"
        ),
    }
}
