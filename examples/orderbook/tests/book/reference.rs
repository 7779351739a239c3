//! The order book by hand, for the tests: price levels in `BTreeMap`s, orders in queues. It
//! shares no code with the handler ([`orderbook::book`]); a command that fails changes nothing.

use orderbook::book::{
    BookCommand, BookError, BookOutput, Fill, LEVEL_ORDERS_MAX, PRICE_LEVELS_MAX, PRICE_MAX,
    Position, QUANTITY_MAX, Side,
};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A resting order: (id, trader, remaining).
type Resting = (u64, u32, u64);

/// The reference book.
#[derive(Clone, Debug, Default)]
pub struct Reference {
    bids: BTreeMap<u64, VecDeque<Resting>>,
    asks: BTreeMap<u64, VecDeque<Resting>>,
    /// Order id to (side, price).
    orders: HashMap<u64, (Side, u64)>,
    positions: HashMap<u32, Position>,
    next: u64,
}

impl Reference {
    /// Runs one command; a failed one leaves the book as it was.
    pub fn run(&mut self, command: &BookCommand) -> Result<BookOutput, BookError> {
        let mut after = self.clone();
        let result = after.apply(command);
        if result.is_ok() {
            *self = after;
        }
        result
    }

    fn apply(&mut self, command: &BookCommand) -> Result<BookOutput, BookError> {
        match *command {
            BookCommand::Place {
                trader,
                side,
                price,
                quantity,
            } => self.place(trader, side, price, quantity),
            BookCommand::Cancel { trader, order } => self.cancel(trader, order),
            BookCommand::Best => Ok(BookOutput::Best {
                bid: self.bids.iter().next_back().map(level),
                ask: self.asks.iter().next().map(level),
            }),
            BookCommand::Depth { side, levels } => {
                let depth: Vec<(u64, u64)> = match side {
                    Side::Buy => self
                        .bids
                        .iter()
                        .rev()
                        .take(levels as usize)
                        .map(level)
                        .collect(),
                    Side::Sell => self.asks.iter().take(levels as usize).map(level).collect(),
                };
                Ok(BookOutput::Depth(depth))
            }
            BookCommand::Position { trader } => Ok(BookOutput::Position(
                self.positions.get(&trader).copied().unwrap_or_default(),
            )),
        }
    }

    fn place(
        &mut self,
        trader: u32,
        side: Side,
        price: u64,
        quantity: u64,
    ) -> Result<BookOutput, BookError> {
        if price == 0 || price > PRICE_MAX || quantity == 0 || quantity > QUANTITY_MAX {
            return Err(BookError::OutOfRange);
        }
        self.next += 1;
        let id = self.next;
        let mut left = quantity;
        let mut fills = Vec::new();
        while left > 0 {
            let best = match side {
                Side::Buy => self.asks.keys().next().copied().filter(|&p| p <= price),
                Side::Sell => self
                    .bids
                    .keys()
                    .next_back()
                    .copied()
                    .filter(|&p| p >= price),
            };
            let Some(at) = best else { break };
            let book = match side {
                Side::Buy => &mut self.asks,
                Side::Sell => &mut self.bids,
            };
            let queue = book.get_mut(&at).expect("a best price has a queue");
            let (maker, maker_trader, remaining) = queue.front_mut().expect("queues are not empty");
            let traded = left.min(*remaining);
            *remaining -= traded;
            left -= traded;
            fills.push(Fill {
                maker: *maker,
                price: at,
                quantity: traded,
            });
            let (maker, maker_trader, done) = (*maker, *maker_trader, *remaining == 0);
            if done {
                queue.pop_front();
                self.orders.remove(&maker);
                if queue.is_empty() {
                    book.remove(&at);
                }
            }
            self.trade(side, trader, maker_trader, at, traded);
        }
        if left > 0 {
            let book = match side {
                Side::Buy => &mut self.bids,
                Side::Sell => &mut self.asks,
            };
            if !book.contains_key(&price) && book.len() >= PRICE_LEVELS_MAX {
                return Err(BookError::BookFull);
            }
            let queue = book.entry(price).or_default();
            if queue.len() >= LEVEL_ORDERS_MAX {
                return Err(BookError::LevelFull);
            }
            queue.push_back((id, trader, left));
            self.orders.insert(id, (side, price));
        }
        Ok(BookOutput::Placed {
            order: id,
            fills,
            resting: left,
        })
    }

    fn trade(&mut self, side: Side, taker: u32, maker: u32, price: u64, quantity: u64) {
        let (buyer, seller) = match side {
            Side::Buy => (taker, maker),
            Side::Sell => (maker, taker),
        };
        let cash = i128::from(price) * i128::from(quantity);
        let bought = self.positions.entry(buyer).or_default();
        bought.quantity += quantity as i64;
        bought.cash -= cash;
        let sold = self.positions.entry(seller).or_default();
        sold.quantity -= quantity as i64;
        sold.cash += cash;
    }

    fn cancel(&mut self, trader: u32, id: u64) -> Result<BookOutput, BookError> {
        let &(side, price) = self.orders.get(&id).ok_or(BookError::UnknownOrder(id))?;
        let book = match side {
            Side::Buy => &mut self.bids,
            Side::Sell => &mut self.asks,
        };
        let queue = book.get_mut(&price).expect("a resting order has a queue");
        let at = queue.iter().position(|o| o.0 == id).expect("queued");
        if queue[at].1 != trader {
            return Err(BookError::NotYours(id));
        }
        let (_, _, remaining) = queue.remove(at).expect("found");
        if queue.is_empty() {
            book.remove(&price);
        }
        self.orders.remove(&id);
        Ok(BookOutput::Cancelled { remaining })
    }
}

/// A level as (price, quantity).
fn level((price, queue): (&u64, &VecDeque<Resting>)) -> (u64, u64) {
    (*price, queue.iter().map(|o| o.2).sum())
}
