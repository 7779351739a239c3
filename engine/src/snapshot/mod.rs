//! Snapshots: every few entries a node captures what changed in its committed state; a
//! background writer applies the captures to its mirror of the state and, at most once per
//! retention period, persists the whole mirror as a snapshot file. A node recovers from the
//! newest snapshot that verifies plus the log after it, truncates its log behind durable
//! snapshots, and sends a snapshot to a follower that needs entries no longer in the log.

mod file;
mod priority;
mod writer;

pub use priority::WRITER_NICENESS;

pub use file::{
    SNAPSHOT_SUFFIX, Snapshot, SnapshotError, encode_snapshot, encode_snapshot_into,
    list_snapshots, read_snapshot, snapshot_path, write_snapshot,
};
pub use writer::{Durable, Mirror, Returned, SnapshotWriter};

use crate::apply::Session;
use crate::codec::{Decode, Encode};
use crate::entry::EntryHash;
use crate::ids::{ClientId, EntryIndex, StateHash, Term};
use crate::state::{HasherState, TableId};
use std::any::Any;

/// Entries between captures when none is configured (0 turns snapshots off).
pub const SNAPSHOT_EVERY_DEFAULT: u64 = 64;
/// The least time a persisted snapshot is kept before a newer one replaces it, by default.
pub const SNAPSHOT_RETAIN_MS_DEFAULT: u64 = 1_000;
/// Snapshot files kept: the newest and the one before it (the fallback when the newest does
/// not verify).
pub const SNAPSHOTS_KEPT: usize = 2;
/// Bytes of snapshot a leader sends a follower per message.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
/// Log a node writes after a persisted snapshot before it persists the next, in percent of
/// that snapshot's size: with 100, a snapshot costs at most as much writing as the log it lets
/// go, and disk use stays near one snapshot and one snapshot's worth of log.
pub const SNAPSHOT_LOG_PERCENT: u64 = 100;
/// Captures waiting for the writer beyond which a node takes no more (its journal keeps the
/// writes for a later one).
pub const SNAPSHOT_BACKLOG_CAPTURES_MAX: usize = 16;
/// Largest snapshot a follower accepts from a leader, in bytes.
pub const SNAPSHOT_BYTES_MAX: u64 = 64 * 1024 * 1024 * 1024;

const _: () = assert!(SNAPSHOTS_KEPT >= 2, "a fallback snapshot is kept");
const _: () = assert!(
    SNAPSHOT_CHUNK_BYTES + net::frame::MESSAGE_OVERHEAD_BYTES_MAX
        <= net::frame::FRAME_BODY_BYTES_MAX,
    "a chunk fits a frame"
);

/// What a snapshot covers: the last entry it includes and the state after it.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
pub struct SnapshotMeta {
    /// The last entry included.
    pub index: EntryIndex,
    /// Its term.
    pub term: Term,
    /// Its chained hash (the log after the snapshot chains to it).
    pub entry_hash: EntryHash,
    /// The state hash after it.
    pub state_hash: StateHash,
    /// The hasher's state after it, to continue the same stream.
    pub hasher: HasherState,
}

/// What changed in a node's committed state since its previous capture.
pub struct Capture {
    /// What the capture covers.
    pub meta: SnapshotMeta,
    pub(crate) tables: Vec<(TableId, Box<dyn Any + Send>)>,
    pub(crate) sessions: Vec<(ClientId, Option<Session>)>,
    /// Payload bytes of the log applied up to it (since the node started): how much log a
    /// snapshot made of it would let go.
    pub(crate) log_bytes: u64,
}
