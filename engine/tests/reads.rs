//! Reads off the log on a three-node `LocalCluster` (real TCP, real WALs): a request of
//! read-only commands is answered by the leader with no number of the client's session and
//! sees every write answered before it; a read holding a command not marked read-only is
//! refused, and a read-only command that writes fails.

use engine::client::ClientError;
use engine::client::blocking::Client;
use engine::codec::{Decode, Encode};
use engine::internals::entry::encode_commands;
use engine::node::local::LocalCluster;
use engine::{Handler, Outcome, Schema, StateError, Table, Tx};
use net::message::Rejection;
use std::time::Duration;

/// Seconds to wait for a leader, and for any one request, before the test fails.
const WAIT_S_MAX: u64 = 20;

/// Values by key.
const VALUES: Table<u32, u64> = Table::new(0, "values");

#[derive(Debug, Clone, Encode, Decode)]
enum Command {
    /// Sets a value; outputs what it held before.
    Set { key: u32, value: u64 },
    /// Reads a value (read-only).
    Get { key: u32 },
    /// Marked read-only, but writes: it must fail.
    SneakySet { key: u32, value: u64 },
}

#[derive(Debug, Clone, PartialEq, Encode, Decode)]
enum Refused {
    Full,
    ReadOnly,
}

impl From<StateError> for Refused {
    fn from(error: StateError) -> Self {
        match error {
            StateError::ReadOnly => Refused::ReadOnly,
            StateError::CapacityExhausted { .. }
            | StateError::MemoryExhausted
            | StateError::Unencodable(_) => Refused::Full,
        }
    }
}

#[derive(Clone, Copy)]
struct Registers;

impl Handler for Registers {
    type Command = Command;
    type Output = Option<u64>;
    type Error = Refused;

    fn schema(&self) -> Schema {
        Schema::new().table(&VALUES)
    }

    fn read_only(command: &Command) -> bool {
        matches!(command, Command::Get { .. } | Command::SneakySet { .. })
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<Option<u64>, Refused> {
        match *command {
            Command::Set { key, value } | Command::SneakySet { key, value } => {
                let before = tx.get(&VALUES, &key);
                tx.put(&VALUES, key, value)?;
                Ok(before)
            }
            Command::Get { key } => Ok(tx.get(&VALUES, &key)),
        }
    }
}

/// Proves the read path end to end: each read sees the write answered just before it (from a
/// client of its own, so that nothing but linearizability orders them) and takes no number of
/// its session; a read-only command that writes fails and changes nothing; a read holding a
/// write command is refused and takes no number either; a client run again under its id gets
/// fresh reads, not answers the leader keeps for the earlier run's.
#[test]
fn reads_are_answered_off_the_log_and_see_every_write_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(dir.path(), 3, Registers, |_| {}).unwrap();
    let waiter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let leader = waiter.block_on(cluster.wait_for_leader(Duration::from_secs(WAIT_S_MAX)));
    assert!(leader.is_some(), "no leader");
    let mut config = cluster.client_config();
    config.give_up_after = Some(Duration::from_secs(WAIT_S_MAX));
    let mut writer = Client::register(config.clone()).unwrap();
    let mut reader = Client::register(config).unwrap();
    let numbered = reader.next_request();
    for value in 1..=20u64 {
        let set = Command::Set { key: 7, value };
        writer.submit::<Registers>(&[set]).unwrap();
        let read = reader.submit::<Registers>(&[Command::Get { key: 7 }]);
        assert_eq!(read.unwrap(), vec![Outcome::Done(Some(value))]);
    }
    assert_eq!(reader.next_request(), numbered, "reads take no number");

    let sneaky = Command::SneakySet { key: 7, value: 99 };
    let outcomes = reader.submit::<Registers>(&[sneaky]).unwrap();
    assert_eq!(outcomes, vec![Outcome::Failed(Refused::ReadOnly)]);
    let read = reader
        .submit::<Registers>(&[Command::Get { key: 7 }])
        .unwrap();
    assert_eq!(
        read,
        vec![Outcome::Done(Some(20))],
        "the sneaky write changed nothing"
    );

    let mixed = [Command::Get { key: 7 }, Command::Set { key: 7, value: 5 }];
    let refused = reader.read_encoded(encode_commands(&mixed), 2);
    assert!(
        matches!(
            refused,
            Err(ClientError::Rejected(Rejection::NotReadOnly { command: 1 }))
        ),
        "{refused:?}"
    );
    assert_eq!(reader.next_request(), numbered);

    // The reader runs again under its id (a restart): its first read is a new one, not the
    // one of the same count the leader answered a moment ago.
    let id = reader.id();
    let read = reader
        .submit::<Registers>(&[Command::Get { key: 7 }])
        .unwrap();
    assert_eq!(read, vec![Outcome::Done(Some(20))]);
    drop(reader);
    writer
        .submit::<Registers>(&[Command::Set { key: 7, value: 21 }])
        .unwrap();
    let mut again = Client::new(cluster.client_config(), id, numbered).unwrap();
    let read = again
        .submit::<Registers>(&[Command::Get { key: 7 }])
        .unwrap();
    assert_eq!(read, vec![Outcome::Done(Some(21))]);
}
