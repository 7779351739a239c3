//! A limit order book as an engine handler: price-time priority, partial fills, cancels, best
//! bid and ask, depth, and each trader's position. Written against `engine`'s public API only.
//!
//! Tables: the orders resting in the book; per side, an ordered table of price levels (its
//! orders, oldest first, and their total) keyed by price, so that the best bid is the last buy
//! level, the best ask the first sell level, and depth a range scan; each trader's position,
//! and the next order id.

use engine::codec::{Decode, Encode};
use engine::{Handler, OrderedTable, Schema, State, StateError, Table, Tx};
use serde::{Deserialize, Serialize};

/// Price levels one side of the book holds at most; an order that would open one more is
/// refused (`BookError::BookFull`).
pub const PRICE_LEVELS_MAX: usize = 4096;
/// Orders one price level holds at most; likewise (`BookError::LevelFull`).
pub const LEVEL_ORDERS_MAX: usize = 1024;
/// The highest price an order may have, in ticks.
pub const PRICE_MAX: u64 = 1_000_000_000;
/// The largest quantity an order may have, in lots.
pub const QUANTITY_MAX: u64 = 1_000_000_000;

/// Buy or sell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Encode, Decode, Serialize, Deserialize)]
pub enum Side {
    /// A bid.
    Buy,
    /// An ask.
    Sell,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Buy => Side::Sell,
            Side::Sell => Side::Buy,
        }
    }

    /// True when a price of this side's order crosses a resting price of the other side.
    fn crosses(self, limit: u64, resting: u64) -> bool {
        match self {
            Side::Buy => resting <= limit,
            Side::Sell => resting >= limit,
        }
    }
}

/// An order resting in the book.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Order {
    trader: u32,
    side: Side,
    price: u64,
    remaining: u64,
}

/// One price level: its orders, oldest first, and their remaining quantity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Encode, Decode)]
pub struct Level {
    orders: Vec<u64>,
    total: u64,
}

/// A trader's position: quantity bought less sold, and cash received less paid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub struct Position {
    /// Bought less sold.
    pub quantity: i64,
    /// Received less paid (price x quantity summed: wider than either).
    pub cash: i128,
}

const ORDERS: Table<u64, Order> = Table::new(1, "orders");
/// The buy levels by price: the best bid is the last.
const BIDS: OrderedTable<u64, Level> = Table::ordered(2, "bids");
/// The sell levels by price: the best ask is the first.
const ASKS: OrderedTable<u64, Level> = Table::ordered(3, "asks");
const POSITIONS: Table<u32, Position> = Table::new(4, "positions");
/// The next order id, under key 0.
const NEXT_ORDER: Table<u8, u64> = Table::new(5, "next_order");

/// An order book command.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub enum BookCommand {
    /// A limit order: it fills against the other side while prices cross, oldest order first
    /// at each price, and the rest rests in the book.
    Place {
        /// Who places it.
        trader: u32,
        /// Buy or sell.
        side: Side,
        /// The limit price, above zero.
        price: u64,
        /// The quantity, above zero.
        quantity: u64,
    },
    /// Takes a resting order of the trader's out of the book.
    Cancel {
        /// Who cancels.
        trader: u32,
        /// The order.
        order: u64,
    },
    /// The best bid and ask, with the quantity at each.
    Best,
    /// The first `levels` price levels of one side, best first.
    Depth {
        /// The side.
        side: Side,
        /// Levels wanted.
        levels: u32,
    },
    /// A trader's position.
    Position {
        /// The trader.
        trader: u32,
    },
}

/// One fill of a placed order against a resting one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub struct Fill {
    /// The resting order.
    pub maker: u64,
    /// Its price (the trade's).
    pub price: u64,
    /// The quantity traded.
    pub quantity: u64,
}

/// What a command returns.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub enum BookOutput {
    /// The order's id, its fills in order, and what of it rests in the book.
    Placed {
        /// The new order's id.
        order: u64,
        /// Its fills.
        fills: Vec<Fill>,
        /// The quantity left resting (0: filled, not in the book).
        resting: u64,
    },
    /// The cancelled order's quantity that was still resting.
    Cancelled {
        /// Its remaining quantity.
        remaining: u64,
    },
    /// The best price of each side and the quantity there.
    Best {
        /// (price, quantity) of the best bid.
        bid: Option<(u64, u64)>,
        /// (price, quantity) of the best ask.
        ask: Option<(u64, u64)>,
    },
    /// (price, quantity) per level, best first.
    Depth(Vec<(u64, u64)>),
    /// A trader's position.
    Position(Position),
}

/// Why a command was refused (it changed nothing).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode, Serialize, Deserialize)]
pub enum BookError {
    /// A price outside 1..=[`PRICE_MAX`] or a quantity outside 1..=[`QUANTITY_MAX`].
    OutOfRange,
    /// No resting order has this id.
    UnknownOrder(u64),
    /// The order is another trader's.
    NotYours(u64),
    /// The side holds [`PRICE_LEVELS_MAX`] levels already.
    BookFull,
    /// The level holds [`LEVEL_ORDERS_MAX`] orders already.
    LevelFull,
    /// The state is full.
    Capacity,
}

impl From<StateError> for BookError {
    fn from(_: StateError) -> Self {
        BookError::Capacity
    }
}

/// The order book handler.
#[derive(Clone, Copy, Debug, Default)]
pub struct OrderBook;

impl Handler for OrderBook {
    type Command = BookCommand;
    type Output = BookOutput;
    type Error = BookError;

    fn schema(&self) -> Schema {
        Schema::new()
            .table(&ORDERS)
            .table(&BIDS)
            .table(&ASKS)
            .table(&POSITIONS)
            .table(&NEXT_ORDER)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &BookCommand) -> Result<BookOutput, BookError> {
        match *command {
            BookCommand::Place {
                trader,
                side,
                price,
                quantity,
            } => place(tx, trader, side, price, quantity),
            BookCommand::Cancel { trader, order } => cancel(tx, trader, order),
            BookCommand::Best => Ok(BookOutput::Best {
                bid: best(tx, Side::Buy),
                ask: best(tx, Side::Sell),
            }),
            BookCommand::Depth { side, levels } => {
                let best_first = match side {
                    Side::Buy => tx.range_rev(&BIDS, .., levels as usize),
                    Side::Sell => tx.range(&ASKS, .., levels as usize),
                };
                let depth = best_first
                    .into_iter()
                    .map(|(price, level)| (price, level.total));
                Ok(BookOutput::Depth(depth.collect()))
            }
            BookCommand::Position { trader } => Ok(BookOutput::Position(
                tx.get(&POSITIONS, &trader).unwrap_or_default(),
            )),
        }
    }
}

/// The price levels of `side`.
fn levels(side: Side) -> &'static OrderedTable<u64, Level> {
    match side {
        Side::Buy => &BIDS,
        Side::Sell => &ASKS,
    }
}

/// The best price of `side` and the quantity there: the highest bid, the lowest ask.
fn best(tx: &mut Tx<'_>, side: Side) -> Option<(u64, u64)> {
    let (price, level) = match side {
        Side::Buy => tx.last(&BIDS)?,
        Side::Sell => tx.first(&ASKS)?,
    };
    Some((price, level.total))
}

fn place(
    tx: &mut Tx<'_>,
    trader: u32,
    side: Side,
    price: u64,
    quantity: u64,
) -> Result<BookOutput, BookError> {
    if !(1..=PRICE_MAX).contains(&price) || !(1..=QUANTITY_MAX).contains(&quantity) {
        return Err(BookError::OutOfRange);
    }
    let order = tx.get(&NEXT_ORDER, &0).unwrap_or(1);
    tx.put(&NEXT_ORDER, 0, order + 1)?;
    let mut left = quantity;
    let mut fills = Vec::new();
    while left > 0 {
        let Some((resting, _)) = best(tx, side.other()) else {
            break;
        };
        if !side.crosses(price, resting) {
            break;
        }
        left = fill_level(
            tx,
            (trader, side),
            (side.other(), resting),
            left,
            &mut fills,
        )?;
    }
    if left > 0 {
        rest(tx, order, trader, side, price, left)?;
    }
    Ok(BookOutput::Placed {
        order,
        fills,
        resting: left,
    })
}

/// Fills up to `left` against the level at `at`, oldest order first; returns what is left.
fn fill_level(
    tx: &mut Tx<'_>,
    (taker, side): (u32, Side),
    at: (Side, u64),
    mut left: u64,
    fills: &mut Vec<Fill>,
) -> Result<u64, BookError> {
    let mut level = tx
        .get(levels(at.0), &at.1)
        .expect("the best price has a level");
    while left > 0 && !level.orders.is_empty() {
        let maker = level.orders[0];
        let mut order = tx.get(&ORDERS, &maker).expect("a level's orders rest");
        let traded = left.min(order.remaining);
        left -= traded;
        order.remaining -= traded;
        level.total -= traded;
        settle(tx, (taker, side), order.trader, at.1, traded)?;
        fills.push(Fill {
            maker,
            price: at.1,
            quantity: traded,
        });
        if order.remaining == 0 {
            level.orders.remove(0);
            tx.delete(&ORDERS, &maker)?;
        } else {
            tx.put(&ORDERS, maker, order)?;
        }
    }
    if level.orders.is_empty() {
        tx.delete(levels(at.0), &at.1)?;
    } else {
        tx.put(levels(at.0), at.1, level)?;
    }
    Ok(left)
}

/// Moves `quantity` at `price` between the taker and the maker's positions.
fn settle(
    tx: &mut Tx<'_>,
    (taker, side): (u32, Side),
    maker: u32,
    price: u64,
    quantity: u64,
) -> Result<(), BookError> {
    let (buyer, seller) = match side {
        Side::Buy => (taker, maker),
        Side::Sell => (maker, taker),
    };
    let (quantity, cash) = (quantity as i64, i128::from(quantity) * i128::from(price));
    let mut bought = tx.get(&POSITIONS, &buyer).unwrap_or_default();
    bought.quantity += quantity;
    bought.cash -= cash;
    tx.put(&POSITIONS, buyer, bought)?;
    let mut sold = tx.get(&POSITIONS, &seller).unwrap_or_default();
    sold.quantity -= quantity;
    sold.cash += cash;
    tx.put(&POSITIONS, seller, sold)?;
    Ok(())
}

/// Puts what is left of a placed order in the book, behind the orders at its price.
fn rest(
    tx: &mut Tx<'_>,
    id: u64,
    trader: u32,
    side: Side,
    price: u64,
    remaining: u64,
) -> Result<(), BookError> {
    let mut level = match tx.get(levels(side), &price) {
        Some(level) => level,
        None if tx.len(levels(side)) >= PRICE_LEVELS_MAX => return Err(BookError::BookFull),
        None => Level::default(),
    };
    if level.orders.len() >= LEVEL_ORDERS_MAX {
        return Err(BookError::LevelFull);
    }
    level.orders.push(id);
    level.total += remaining;
    tx.put(levels(side), price, level)?;
    let order = Order {
        trader,
        side,
        price,
        remaining,
    };
    tx.put(&ORDERS, id, order)?;
    Ok(())
}

fn cancel(tx: &mut Tx<'_>, trader: u32, id: u64) -> Result<BookOutput, BookError> {
    let order = tx.get(&ORDERS, &id).ok_or(BookError::UnknownOrder(id))?;
    if order.trader != trader {
        return Err(BookError::NotYours(id));
    }
    tx.delete(&ORDERS, &id)?;
    let side = levels(order.side);
    let mut level = tx
        .get(side, &order.price)
        .expect("a resting order has a level");
    level.orders.retain(|&o| o != id);
    level.total -= order.remaining;
    if level.orders.is_empty() {
        tx.delete(side, &order.price)?;
    } else {
        tx.put(side, order.price, level)?;
    }
    Ok(BookOutput::Cancelled {
        remaining: order.remaining,
    })
}

/// An invariant of the book that a committed state breaks.
#[derive(Debug, thiserror::Error)]
pub enum Broken {
    /// The best bid is at or above the best ask.
    #[error("the book is crossed: best bid {bid}, best ask {ask}")]
    Crossed {
        /// The best bid.
        bid: u64,
        /// The best ask.
        ask: u64,
    },
    /// A level lists an order that does not rest there.
    #[error("level {side:?} {price} lists order {id}: {order:?}")]
    Misplaced {
        /// The level's side.
        side: Side,
        /// The level's price.
        price: u64,
        /// The order listed.
        id: u64,
        /// The order as it rests, if it does.
        order: Option<Order>,
    },
    /// A level is empty, or its total is not its orders' remaining quantity.
    #[error("level {side:?} {price}: {level:?}, remaining {total}")]
    LevelTotal {
        /// The level's side.
        side: Side,
        /// The level's price.
        price: u64,
        /// The level.
        level: Level,
        /// Its orders' remaining quantity.
        total: u64,
    },
    /// The levels do not list every resting order once.
    #[error("{resting} orders rest, the levels list {listed}")]
    Unlisted {
        /// Resting orders.
        resting: usize,
        /// Orders the levels list.
        listed: usize,
    },
    /// Positions do not net to zero.
    #[error("positions net to {net:?}, not zero")]
    Unbalanced {
        /// The positions' sum: quantity and cash.
        net: (i64, i128),
    },
}

/// The book's invariants on a committed state (the simulator's workload checks them after
/// every entry): the book is never crossed; each level lists resting orders of its side and
/// price, oldest first, and its total is their remaining quantity; every resting order is
/// listed once; and positions net to zero, in quantity and in cash.
pub fn check_invariants(state: &State) -> Result<(), Broken> {
    let best_bid = state.iter_ordered(&BIDS, ..).next_back().map(|(p, _)| *p);
    let best_ask = state.iter_ordered(&ASKS, ..).next().map(|(p, _)| *p);
    if let (Some(bid), Some(ask)) = (best_bid, best_ask)
        && bid >= ask
    {
        return Err(Broken::Crossed { bid, ask });
    }
    let mut listed = 0;
    for (side, table) in [(Side::Buy, &BIDS), (Side::Sell, &ASKS)] {
        for (&price, level) in state.iter_ordered(table, ..) {
            let mut total = 0;
            for id in &level.orders {
                let order = state.get(&ORDERS, id);
                let Some(order) = order.filter(|o| o.side == side && o.price == price) else {
                    return Err(Broken::Misplaced {
                        side,
                        price,
                        id: *id,
                        order: order.cloned(),
                    });
                };
                total += order.remaining;
            }
            if level.orders.is_empty() || total != level.total {
                return Err(Broken::LevelTotal {
                    side,
                    price,
                    level: level.clone(),
                    total,
                });
            }
            listed += level.orders.len();
        }
    }
    if listed != state.len(&ORDERS) {
        let resting = state.len(&ORDERS);
        return Err(Broken::Unlisted { resting, listed });
    }
    let net = state
        .iter_unordered(&POSITIONS)
        .fold((0i64, 0i128), |(q, c), (_, p)| (q + p.quantity, c + p.cash));
    if net != (0, 0) {
        return Err(Broken::Unbalanced { net });
    }
    Ok(())
}
