//! The engine's inner layers (the batcher, entries, the consensus core, the replica, storage,
//! the WAL, snapshots, the handshake, the single-node path), gathered under one name for the
//! engine's own tests, benches, fuzz targets and tools: not part of the API a handler author
//! or an operator uses, and free to change in any release. Each lives in its own folder,
//! declared in `lib.rs`.

pub use crate::{batcher, core, entry, handshake, replica, single, snapshot, storage, wal};
