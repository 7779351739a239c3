//! The order book's workloads: for the deterministic simulator (`orderbook sim`), random
//! requests of orders, cancels and reads by a few traders around one price, and the book's
//! invariants checked on the committed state after every entry; for the benchmark
//! (`orderbook bench`), a seeded book, then orders, cancels and reads by a few traders across
//! a few price levels, and at the end the traders' positions summed and the best prices read.

use crate::book::{BookCommand, BookError, BookOutput, Broken, OrderBook, Side, check_invariants};
use engine::cli::BenchWorkload;
use engine::rng::Rng;
use engine::sim::Workload;
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
    type Error = Broken;

    fn handler(&self) -> OrderBook {
        OrderBook
    }

    fn next_request(&mut self, rng: &mut Rng) -> Vec<BookCommand> {
        let count = 1 + rng.below(SIM_REQUEST_COMMANDS_MAX);
        // Cancels aim at the first few hundred order ids, resting or not.
        (0..count).map(|_| random_command(rng, 300)).collect()
    }

    // No model of its own (observe, logged and check_model keep their defaults): the checks
    // are the invariants of the committed state; the exactly-once rules are the simulator's
    // own (its reference replica and the clients' answers).
    fn check(&self, state: &State) -> Result<(), Broken> {
        check_invariants(state)
    }
}

/// Traders of the benchmark's orders (and of every other stream of this example: the final
/// check sums the positions of traders 1 to this one).
const BENCH_TRADERS: u64 = 16;
/// Price levels each side of [`PRICE_MID`] the benchmark's orders span (so that they cross).
const BENCH_PRICE_SPREAD: u64 = 5;
/// Price levels of each side the prefill seeds, outside the benchmark's band (depth that the
/// load's orders never reach).
const PREFILL_LEVELS: u64 = 5;
/// Resting orders per seeded price level.
const PREFILL_LEVEL_ORDERS: u64 = 8;

/// A random side.
fn side(rng: &mut Rng) -> Side {
    if rng.chance(1, 2) {
        Side::Buy
    } else {
        Side::Sell
    }
}

/// The order book under `orderbook bench`: the prefill seeds resting orders on both sides
/// just outside the band; the load places (half the commands) and cancels (a fifth: any
/// order placed so far, by any trader, so most are refused) across a few price levels
/// around [`PRICE_MID`], and reads the best prices and the depth; the final check sums every
/// trader's position (each fill moves as much quantity and cash to one trader as from
/// another: both sums are zero) and reads the best prices (the book is never crossed).
#[derive(Debug, Default)]
pub struct BookBench {
    /// Orders this workload has placed so far (an estimate of the highest order id).
    placed: u64,
}

impl BookBench {
    fn random_command(&mut self, rng: &mut Rng) -> BookCommand {
        let trader = 1 + rng.below(BENCH_TRADERS) as u32;
        match rng.below(10) {
            0..=4 => {
                self.placed += 1;
                BookCommand::Place {
                    trader,
                    side: side(rng),
                    price: PRICE_MID - BENCH_PRICE_SPREAD + rng.below(2 * BENCH_PRICE_SPREAD + 1),
                    quantity: 1 + rng.below(20),
                }
            }
            5 | 6 => BookCommand::Cancel {
                trader,
                order: 1 + rng.below(self.placed.max(1)),
            },
            7 | 8 => BookCommand::Best,
            _ => BookCommand::Depth {
                side: side(rng),
                levels: 1 + rng.below(PREFILL_LEVELS) as u32,
            },
        }
    }
}

/// What the benchmark's final check finds wrong.
#[derive(Debug, thiserror::Error)]
pub enum FinalCheckFailed {
    /// The best bid is at or above the best ask.
    #[error("the book is crossed: bid {bid:?}, ask {ask:?}")]
    Crossed {
        /// (price, quantity) of the best bid.
        bid: (u64, u64),
        /// (price, quantity) of the best ask.
        ask: (u64, u64),
    },
    /// A final read was answered with something else than a position or best prices.
    #[error("a final read answered {0:?}")]
    Unexpected(Outcome<BookOutput, BookError>),
    /// The traders' positions do not sum to zero.
    #[error("positions sum to {quantity} lots and {cash} in cash")]
    Unbalanced {
        /// Bought less sold, over the traders.
        quantity: i64,
        /// Received less paid, over the traders.
        cash: i128,
    },
}

impl BenchWorkload for BookBench {
    type H = OrderBook;
    type Error = FinalCheckFailed;

    fn prefill(&mut self) -> Vec<Vec<BookCommand>> {
        let mut orders = Vec::new();
        for level in 1..=PREFILL_LEVELS {
            for k in 0..PREFILL_LEVEL_ORDERS {
                let trader = 1 + ((level * PREFILL_LEVEL_ORDERS + k) % BENCH_TRADERS) as u32;
                let (quantity, gap) = (10 + k, BENCH_PRICE_SPREAD + level);
                orders.push(BookCommand::Place {
                    trader,
                    side: Side::Buy,
                    price: PRICE_MID - gap,
                    quantity,
                });
                orders.push(BookCommand::Place {
                    trader,
                    side: Side::Sell,
                    price: PRICE_MID + gap,
                    quantity,
                });
            }
        }
        self.placed += orders.len() as u64;
        vec![orders]
    }

    fn next_request(&mut self, _client: u32, rng: &mut Rng, commands: u32) -> Vec<BookCommand> {
        (0..commands).map(|_| self.random_command(rng)).collect()
    }

    fn final_request(&mut self) -> Vec<BookCommand> {
        let positions = (1..=BENCH_TRADERS as u32).map(|trader| BookCommand::Position { trader });
        positions.chain([BookCommand::Best]).collect()
    }

    fn check(&self, outcomes: &[Outcome<BookOutput, BookError>]) -> Result<(), FinalCheckFailed> {
        let (mut quantity, mut cash) = (0i64, 0i128);
        for outcome in outcomes {
            match outcome {
                Outcome::Done(BookOutput::Position(position)) => {
                    quantity += position.quantity;
                    cash += position.cash;
                }
                Outcome::Done(BookOutput::Best { bid, ask }) => {
                    if let (Some(bid), Some(ask)) = (bid, ask)
                        && bid.0 >= ask.0
                    {
                        return Err(FinalCheckFailed::Crossed {
                            bid: *bid,
                            ask: *ask,
                        });
                    }
                }
                other @ (Outcome::Done(_) | Outcome::Failed(_) | Outcome::Invalid) => {
                    return Err(FinalCheckFailed::Unexpected(other.clone()));
                }
            }
        }
        if quantity != 0 || cash != 0 {
            return Err(FinalCheckFailed::Unbalanced { quantity, cash });
        }
        Ok(())
    }
}
