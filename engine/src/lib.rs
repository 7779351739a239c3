//! A deterministic replicated state-machine engine for business commands.
//!
//! Business logic is a [`Handler`]: it executes one command at a time against a [`Tx`] on the
//! engine-owned [`State`] (typed [`Table`]s, hashed or [`Ordered`]). The engine packs commands
//! into log entries, makes them durable on a quorum of nodes, and applies them in one order,
//! each command in its own transaction; clients are answered only with committed results.
//!
//! Start with the [`guide`]: a handler from the first table to an upgrade of its rules.
//!
//! What an author and an operator use:
//! - [`handler`], [`state`] and [`codec`] (the derives): the handler and its tables;
//! - [`Sandbox`]: the handler run in one process, for its tests; [`testing`]: the
//!   determinism check every handler's tests should run;
//! - `cli` (feature `cli`, off by default): a node binary's whole command line in one call;
//! - [`node`]: a node's configuration and start, a local cluster;
//! - [`operator`]: the cluster file, client files, secrets, backups;
//! - [`client`]: the client library (registration, exactly-once requests, pipelining), async
//!   or blocking ([`client::blocking`], for programs without tokio);
//! - `sim` (feature `sim`): the deterministic simulator with the author's workload;
//! - [`apply`]: the modes and the state machine's outcomes; [`rng`]: the deterministic
//!   generator workloads use.
//!
//! The inner layers (entries, the WAL, the consensus core, the replica, snapshots) are in a
//! hidden module for the engine's own tests, benches and tools.

pub mod address;
pub mod apply;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod codec;
pub mod formats;
pub mod guide;
pub mod handler;
pub mod members;
pub mod node;
pub mod operator;
pub mod rng;
pub mod sandbox;
#[cfg(feature = "sim")]
pub mod sim;
pub mod state;
pub mod testing;

// The inner layers, in the order of the data path. Public only for the engine's own tests,
// benches, fuzz targets and tools (through `internals`), hidden from the API.
#[doc(hidden)]
pub mod batcher;
#[doc(hidden)]
pub mod core;
#[doc(hidden)]
pub mod entry;
#[doc(hidden)]
pub mod handshake;
#[doc(hidden)]
pub mod replica;
#[doc(hidden)]
pub mod single;
#[doc(hidden)]
pub mod snapshot;
#[doc(hidden)]
pub mod storage;
#[doc(hidden)]
pub mod wal;

#[doc(hidden)]
pub mod internals;

pub use net::ids;

pub use address::Address;
pub use apply::{
    Applied, ApplyCounters, ApplyError, CommittedAnswer, Mode, Reply, ReplyStatus, StateMachine,
    decode_outcomes,
};
pub use handler::{Handler, Outcome, OutcomeOf};
pub use ids::{ClientId, EntryIndex, NodeId, RequestNumber, Term};
pub use sandbox::Sandbox;
pub use state::{
    CapacityTooSmall, Hashed, InstallError, Key, Order, Ordered, OrderedTable, Prefetch, Record,
    Schema, State, StateError, StateHash, Table, Tx,
};
