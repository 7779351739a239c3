//! `LocalCluster` with a handler factory and the author's own ports: a handler that is not
//! `Clone` runs (made again at a restart), a cluster starts on the given addresses and
//! lists exactly them to clients, and a taken or empty address list is an error, not a retry.

use engine::client::blocking::Client;
use engine::codec::{Decode, Encode};
use engine::node::NodeError;
use engine::node::config::ConfigError;
use engine::node::local::{LocalCluster, free_loopback_addresses};
use engine::{Handler, Outcome, Schema, StateError, Table, Tx};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Seconds to wait for a leader, and for any one request, before the test fails.
const WAIT_S_MAX: u64 = 20;

/// Values by key.
const VALUES: Table<u32, u64> = Table::new(0, "values");

/// Sets a value; outputs what it held before.
#[derive(Debug, Clone, Encode, Decode)]
struct Set {
    key: u32,
    value: u64,
}

/// The state is full.
#[derive(Debug, Clone, PartialEq, Encode, Decode)]
struct Full;

impl From<StateError> for Full {
    fn from(_: StateError) -> Self {
        Full
    }
}

/// A handler that is deliberately not `Clone` (it owns something that cannot be cloned).
struct Registers {
    _owned: std::sync::Mutex<()>,
}

impl Registers {
    fn new() -> Self {
        Registers {
            _owned: std::sync::Mutex::new(()),
        }
    }
}

impl Handler for Registers {
    type Command = Set;
    type Output = Option<u64>;
    type Error = Full;

    fn schema(&self) -> Schema {
        Schema::new().table(&VALUES)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Set) -> Result<Option<u64>, Full> {
        let before = tx.get(&VALUES, &command.key);
        tx.put(&VALUES, command.key, command.value)?;
        Ok(before)
    }
}

/// Waits for a leader on a runtime of the test's own.
fn wait_for_leader(cluster: &LocalCluster<Registers>) {
    let waiter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime to wait on");
    let leader = waiter.block_on(cluster.wait_for_leader(Duration::from_secs(WAIT_S_MAX)));
    assert!(leader.is_some(), "no leader");
}

/// Proves a handler that is not `Clone` runs on `start_with`: one made per node start and
/// again at a restart, and the cluster answers its commands.
#[test]
fn a_handler_that_is_not_clone_runs_on_start_with() {
    let dir = tempfile::tempdir().unwrap();
    let made = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&made);
    let make = move || {
        counted.fetch_add(1, Ordering::Relaxed);
        Registers::new()
    };
    let mut cluster = LocalCluster::start_with(dir.path(), 3, make, |_| {}).unwrap();
    assert_eq!(made.load(Ordering::Relaxed), 3, "one handler per node");
    wait_for_leader(&cluster);
    let mut config = cluster.client_config();
    config.give_up_after = Some(Duration::from_secs(WAIT_S_MAX));
    let mut client = Client::register(config).unwrap();
    let set = |value| Set { key: 1, value };
    let first = client.submit::<Registers>(&[set(4)]).unwrap();
    assert_eq!(first, vec![Outcome::Done(None)]);
    let second = client.submit::<Registers>(&[set(9)]).unwrap();
    assert_eq!(second, vec![Outcome::Done(Some(4))]);

    let restarted = cluster.ids()[0];
    cluster.restart(restarted).unwrap();
    assert_eq!(
        made.load(Ordering::Relaxed),
        4,
        "a restart makes a fresh handler"
    );
}

/// Proves `start_at` starts on the caller's addresses, elects a leader, and gives clients
/// exactly those client addresses.
#[test]
fn start_at_uses_the_given_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let addresses = free_loopback_addresses(3).unwrap();
    let cluster =
        LocalCluster::start_at(dir.path(), addresses.clone(), Registers::new, |_| {}).unwrap();
    wait_for_leader(&cluster);
    let clients: Vec<_> = addresses.iter().map(|a| a.client_address.clone()).collect();
    assert_eq!(cluster.client_config().nodes, clients);
    for address in &addresses {
        assert_eq!(cluster.config(address.id).nodes, addresses);
    }
}

/// Proves `start_at` reports a taken address instead of moving elsewhere, and refuses an
/// empty list.
#[test]
fn start_at_reports_a_taken_address_and_no_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let addresses = free_loopback_addresses(3).unwrap();
    let _taken = std::net::TcpListener::bind(addresses[1].client_address.as_str()).unwrap();
    let started = LocalCluster::start_at(dir.path(), addresses, Registers::new, |_| {});
    match started {
        Err(NodeError::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
        }
        Err(other) => panic!("another error: {other}"),
        Ok(_) => panic!("started on a taken address"),
    }
    let none = LocalCluster::start_at(dir.path(), Vec::new(), Registers::new, |_| {});
    assert!(matches!(none, Err(NodeError::Config(e)) if matches!(e[..], [ConfigError::NoNodes])));
}
