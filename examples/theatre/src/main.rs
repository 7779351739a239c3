//! Theatre bookings on three machines: the handler of the README's "Writing a handler" with
//! serde's derives, and the one-call `main` of "Run your handler on three machines" (a test
//! checks that the README shows this file as it is).

use engine::codec::{Decode, Encode};
use engine::{Handler, Schema, StateError, Table, Tx};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Encode, Decode, Serialize, Deserialize)]
struct Seat {
    show: u32,
    number: u16,
}

#[derive(Clone, Debug, PartialEq, Encode, Decode)]
struct Booking {
    customer: String,
    booked_at_ms: u64,
}

const BOOKINGS: Table<Seat, Booking> = Table::new(0, "bookings");

#[derive(Debug, Encode, Decode, Deserialize)]
enum Command {
    Book { seat: Seat, customer: String },
    Cancel { seat: Seat },
}

#[derive(Debug, PartialEq, Encode, Decode, Serialize)]
enum Refusal {
    Taken,
    NotBooked,
    SoldOut,
}

impl From<StateError> for Refusal {
    fn from(_: StateError) -> Self {
        Refusal::SoldOut
    }
}

struct Theatre;

impl Handler for Theatre {
    type Command = Command;
    type Output = ();
    type Error = Refusal;

    fn schema(&self) -> Schema {
        Schema::new().table(&BOOKINGS)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &Command) -> Result<(), Refusal> {
        match command {
            Command::Book { seat, customer } => {
                if tx.contains(&BOOKINGS, seat) {
                    return Err(Refusal::Taken);
                }
                let booking = Booking {
                    customer: customer.clone(),
                    booked_at_ms: tx.now_ms(),
                };
                tx.put(&BOOKINGS, *seat, booking)?;
                Ok(())
            }
            Command::Cancel { seat } => match tx.delete(&BOOKINGS, seat)? {
                Some(_) => Ok(()),
                None => Err(Refusal::NotBooked),
            },
        }
    }
}

fn main() -> std::process::ExitCode {
    engine::cli::main("Theatre bookings on three machines", || Theatre)
}
