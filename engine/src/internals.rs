//! The engine's inner layers (the batcher, entries, the WAL, the consensus core, the replica,
//! snapshots, the handshake, the single-node path), public only for the engine's own tests,
//! benches, fuzz targets and tools: not part of the API a handler author or an operator uses,
//! and free to change in any release. Their files stay where the data path puts them.

#[path = "batcher.rs"]
pub mod batcher;
#[path = "core/mod.rs"]
pub mod core;
#[path = "entry.rs"]
pub mod entry;
#[path = "handshake.rs"]
pub mod handshake;
#[path = "replica/mod.rs"]
pub mod replica;
#[path = "single.rs"]
pub mod single;
#[path = "snapshot/mod.rs"]
pub mod snapshot;
#[path = "wal/mod.rs"]
pub mod wal;
