//! A deterministic replicated state-machine engine for business commands.
//!
//! Business logic is a [`Handler`]: it executes one command at a time against a [`Tx`] on the
//! engine-owned [`State`]. The engine packs commands into log [`entry`] records, makes them
//! durable in the write-ahead log ([`wal`]), and applies them in order ([`apply`]), each command
//! in its own transaction.
//!
//! Modules follow the data path: `handler`, `state`, `entry`, `wal`, `apply`.

pub mod apply;
pub mod batcher;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod codec;
pub mod core;
pub mod entry;
pub mod handler;
pub mod handshake;
pub mod node;
pub mod replica;
pub mod rng;
pub mod sandbox;
#[cfg(feature = "sim")]
pub mod sim;
pub mod single;
pub mod snapshot;
pub mod state;
pub mod wal;

pub use net::ids;

pub use apply::{
    Applied, ApplyCounters, ApplyError, CommittedAnswer, Mode, Reply, ReplyStatus, StateMachine,
    decode_outcomes,
};
pub use handler::{Handler, Outcome, OutcomeOf};
pub use ids::{ClientId, EntryIndex, NodeId, RequestNumber, Term};
pub use sandbox::Sandbox;
pub use state::{
    Hashed, InstallError, Key, Order, Ordered, OrderedTable, Prefetch, Record, Schema, State,
    StateError, StateHash, Table, Tx,
};
