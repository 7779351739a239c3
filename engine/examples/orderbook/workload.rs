//! The order book's workload for the deterministic simulator (`orderbook sim`): random
//! requests of orders, cancels and reads by a few traders around one price, and the book's
//! invariants checked on the committed state after every entry.

use crate::book::{BookCommand, BookError, BookOutput, OrderBook, Side, check_invariants};
use engine::rng::Rng;
use engine::sim::Workload;
use engine::sim::check::Logged;
use engine::{Outcome, State};

/// Commands in one simulated request, at most.
const SIM_REQUEST_COMMANDS_MAX: u64 = 8;

/// Traders in the random streams.
const TRADERS: u64 = 8;
/// Prices around which the streams place orders (a narrow band, so that orders cross).
const PRICE_MID: u64 = 100;
/// A random command: mostly orders, some cancels (of any recent order, the trader's or
/// not, resting or not), reads of the book and of positions.
pub fn random_command(rng: &mut Rng, placed: u64) -> BookCommand {
    let trader = 1 + rng.below(TRADERS) as u32;
    match rng.below(10) {
        0..=5 => BookCommand::Place {
            trader,
            side: if rng.chance(1, 2) {
                Side::Buy
            } else {
                Side::Sell
            },
            price: PRICE_MID - 10 + rng.below(21),
            quantity: 1 + rng.below(50),
        },
        6 | 7 => BookCommand::Cancel {
            trader,
            order: 1 + rng.below(placed.max(1) + 3),
        },
        8 => BookCommand::Depth {
            side: if rng.chance(1, 2) {
                Side::Buy
            } else {
                Side::Sell
            },
            levels: 1 + rng.below(5) as u32,
        },
        _ if rng.chance(1, 2) => BookCommand::Best,
        _ => BookCommand::Position { trader },
    }
}

/// The order book under simulation.
#[derive(Debug, Default)]
pub struct BookWorkload;

impl Workload for BookWorkload {
    type H = OrderBook;

    fn handler(&self) -> OrderBook {
        OrderBook
    }

    fn next_request(&mut self, rng: &mut Rng) -> Vec<BookCommand> {
        let count = 1 + rng.below(SIM_REQUEST_COMMANDS_MAX);
        // Cancels aim at the first few hundred order ids, resting or not.
        (0..count).map(|_| random_command(rng, 300)).collect()
    }

    fn observe(&mut self, _: &BookCommand, _: &Outcome<BookOutput, BookError>) {}

    fn check(&self, state: &State) -> Result<(), String> {
        check_invariants(state)
    }

    fn logged(&mut self, _: Logged<'_, OrderBook>) -> Result<(), String> {
        // The checks are the invariants of the committed state (check); the exactly-once
        // rules are the simulator's own (its reference replica and the clients' answers).
        Ok(())
    }

    fn check_model(&self, _: &State) -> Result<(), String> {
        Ok(())
    }
}
