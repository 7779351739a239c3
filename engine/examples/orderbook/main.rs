//! A limit order book on three machines: the whole `main` of a handler author's node binary
//! is the one call below, and the binary has `node`, `status`, `check`, `client` and
//! `recover` (see the README's "Run your handler on three machines").
//!
//! ```sh
//! cargo build --release --example orderbook
//! target/release/examples/orderbook node --cluster cluster.toml --id 1     # and 2, 3
//! target/release/examples/orderbook client --cluster cluster.toml \
//!     '{"Place": {"trader": 1, "side": "Sell", "price": 101, "quantity": 5}}'
//! ```

mod book;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

fn main() -> std::process::ExitCode {
    engine::cli::main("A limit order book on three machines", || book::OrderBook)
}
