//! A limit order book on three machines: the whole `main` of a handler author's node binary
//! is the one expression below, and the binary has `node`, `status`, `check`, `client`,
//! `recover`, `sim`, the deterministic simulator with the book's workload, `bench`, a
//! benchmark of a running cluster with the book's benchmark workload, `local`, three
//! nodes in the one process and that benchmark against them in both modes, alternated (see
//! the README's "Run your handler on three machines"), and the change stream (`changes`,
//! the gateway's `/v1/changes`), which publishes only the commands the book took.
//!
//! ```sh
//! cargo build --release -p orderbook
//! target/release/orderbook sim --seeds 1000                       # the simulator
//! target/release/orderbook node --cluster cluster.toml --id 1     # and 2, 3
//! target/release/orderbook client --cluster cluster.toml \
//!     '{"Place": {"trader": 1, "side": "Sell", "price": 101, "quantity": 5}}'
//! target/release/orderbook bench --cluster cluster.toml --inflight 4 --batch 64
//! target/release/orderbook local --inflight 4 --batch 64   # verify vs performance
//! ```

use engine::Outcome;
use engine::cli::{Publish, Published};
use orderbook::book::{BookCommand, OrderBook};
use orderbook::{book, workload};

/// What the book's change stream publishes of a command: an order placed or cancelled, with
/// its outcome; a command the book refused changed nothing downstream systems need.
fn published(command: &BookCommand, outcome: &engine::OutcomeOf<OrderBook>) -> Option<Published> {
    match outcome {
        Outcome::Done(_) => Some(Published::whole::<OrderBook>(command, outcome)),
        Outcome::Failed(_) | Outcome::Invalid => None,
    }
}

fn main() -> std::process::ExitCode {
    let about = "A limit order book on three machines";
    engine::cli::App::new(about, || book::OrderBook)
        .version(engine::build_identity!())
        .sim(|| workload::BookWorkload)
        .bench(workload::BookBench::default())
        .changes(Publish::chosen(published))
        .run()
}
