//! A handler with tables of three record sizes, for the capacity tests: ~80-byte orders (the
//! size whose slots the old account undercounted most), Bank-sized accounts, and notes whose
//! strings live on the heap.

use engine::codec::{Decode, Encode};
use engine::internals::entry::{Entry, EntryHash, Request, encode_commands, whole_requests_entry};
use engine::{
    ClientId, EntryIndex, Handler, OutcomeOf, ReplyStatus, RequestNumber, Schema, StateError,
    StateMachine, Table, Term, Tx, decode_outcomes,
};

/// Orders of 80 encoded bytes (ten u64 fields), 88 bytes with their key: 128-byte slots.
pub const ORDERS: Table<u64, Order> = Table::new(0, "orders");
/// Accounts shaped as the Bank's: 28 encoded bytes with their key, 64-byte slots.
pub const ACCOUNTS: Table<u64, Account> = Table::new(1, "accounts");
/// Notes: a string each, its bytes outside the slot.
pub const NOTES: Table<u64, String> = Table::new(2, "notes");

/// An order of ten u64 fields.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct Order {
    pub fields: [u64; 10],
}

/// An account as the Bank keeps one.
#[derive(Clone, Debug, PartialEq, Encode, Decode)]
pub struct Account {
    pub balance: u64,
    pub version: u64,
    pub flags: u32,
}

/// One command of [`Shelves`].
#[derive(Clone, Debug, Encode, Decode)]
pub enum Command {
    /// Puts order `id` (its fields derived from the id).
    Order { id: u64 },
    /// Puts account `id`.
    Account { id: u64 },
    /// Puts note `id`: a string of `bytes` bytes.
    Note { id: u64, bytes: u32 },
    /// Removes order `id`.
    DeleteOrder { id: u64 },
    /// Puts orders `first..first + count`, then fails (so everything is rolled back).
    OrdersThenFail { first: u64, count: u64 },
    /// Puts account `id` with its version one higher (1 when it has none): a write whose
    /// record differs from the one before it.
    Bump { id: u64 },
}

/// Why a command of [`Shelves`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub enum Refused {
    /// The state's capacity is exhausted.
    Full {
        needed_bytes: u64,
        capacity_bytes: u64,
    },
    /// Any other state error.
    State,
    /// The command failed on purpose.
    Failed,
}

impl From<StateError> for Refused {
    fn from(error: StateError) -> Self {
        match error {
            StateError::CapacityExhausted {
                needed_bytes,
                capacity_bytes,
            } => Refused::Full {
                needed_bytes,
                capacity_bytes,
            },
            StateError::MemoryExhausted | StateError::Unencodable(_) | StateError::ReadOnly => {
                Refused::State
            }
        }
    }
}

/// The handler of the three tables.
pub struct Shelves;

/// Order `id` as [`Command::Order`] puts it.
pub fn order(id: u64) -> Order {
    Order {
        fields: std::array::from_fn(|at| id.wrapping_mul(at as u64 + 1)),
    }
}

impl Handler for Shelves {
    type Command = Command;
    type Output = u64;
    type Error = Refused;

    fn schema(&self) -> Schema {
        Schema::new().table(&ORDERS).table(&ACCOUNTS).table(&NOTES)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<u64, Refused> {
        match *command {
            Command::Order { id } => tx.put(&ORDERS, id, order(id))?,
            Command::Account { id } => {
                let account = Account {
                    balance: id,
                    version: 1,
                    flags: 0,
                };
                tx.put(&ACCOUNTS, id, account)?;
            }
            Command::Note { id, bytes } => {
                // Built at its exact size: spare capacity a handler leaves in a value is not in
                // its encoding, so the account cannot see it.
                let mut text = String::with_capacity(bytes as usize);
                text.extend((0..bytes).map(|at| (b'a' + (at % 26) as u8) as char));
                tx.put(&NOTES, id, text)?;
            }
            Command::DeleteOrder { id } => {
                tx.delete(&ORDERS, &id)?;
            }
            Command::Bump { id } => {
                let version = tx.get(&ACCOUNTS, &id).map_or(0, |a| a.version) + 1;
                let account = Account {
                    balance: id,
                    version,
                    flags: 0,
                };
                tx.put(&ACCOUNTS, id, account)?;
            }
            Command::OrdersThenFail { first, count } => {
                for id in first..first + count {
                    tx.put(&ORDERS, id, order(id))?;
                }
                return Err(Refused::Failed);
            }
        }
        Ok(tx.len(&ORDERS) as u64)
    }
}

/// Forms chained entries, one request of up to 1,024 commands each, from one client.
pub struct Chain {
    prev: EntryHash,
    next: u64,
}

impl Default for Chain {
    fn default() -> Self {
        Self::new()
    }
}

impl Chain {
    /// Commands per entry when filling.
    pub const COMMANDS: usize = 1024;

    pub fn new() -> Self {
        Chain {
            prev: EntryHash::default(),
            next: 1,
        }
    }

    /// The next entry: one request of `commands`.
    pub fn entry(&mut self, commands: &[Command]) -> Entry {
        let bytes = encode_commands(commands);
        let request = Request {
            client: ClientId(1),
            number: RequestNumber(self.next),
            command_count: commands.len() as u32,
            commands: &bytes,
        };
        let entry = whole_requests_entry(EntryIndex(self.next), Term(1), &self.prev, 5, &[request]);
        self.prev = entry.header.hash;
        self.next += 1;
        entry
    }

    /// Applies `commands` to `machine` as one entry; returns their outcomes.
    pub fn apply(
        &mut self,
        machine: &mut StateMachine<Shelves>,
        commands: &[Command],
    ) -> Vec<OutcomeOf<Shelves>> {
        let mut applied = machine
            .apply(&self.entry(commands))
            .expect("the entry applies");
        let reply = applied.replies.pop().expect("the request finishes");
        match reply.status {
            ReplyStatus::Results(results) => {
                decode_outcomes::<Shelves>(&results, reply.command_count).expect("outcomes decode")
            }
            ReplyStatus::Stale
            | ReplyStatus::Expired
            | ReplyStatus::Reused
            | ReplyStatus::NotYet => {
                unreachable!("requests are numbered")
            }
        }
    }

    /// Applies `commands` to `machine`, 1,024 to an entry.
    pub fn apply_all(&mut self, machine: &mut StateMachine<Shelves>, commands: &[Command]) {
        for chunk in commands.chunks(Self::COMMANDS) {
            machine.apply(&self.entry(chunk)).expect("entries apply");
        }
    }
}
