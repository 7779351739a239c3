//! Snapshots: when its applied index reaches a multiple of the snapshot interval (and the
//! newest snapshot is old enough), a node starts a copy-on-write scan of its committed state
//! and encodes it a slice at a time between its other work; a background writer hashes and
//! writes the file, makes it durable and reports it. A node recovers from the newest snapshot
//! that verifies plus the log after it, truncates its log behind durable snapshots, and sends
//! a snapshot to a follower that needs entries no longer in the log.

mod file;
mod priority;
mod receive;
mod writer;

pub use priority::WRITER_NICENESS;

pub use file::{
    DELTA_SUFFIX, DIGEST_BYTES, ParseError, Part, SNAPSHOT_SUFFIX, Snapshot, SnapshotError,
    SnapshotLink, SnapshotTable, StructureError, delta_path, is_delta, list_deltas_on,
    list_snapshots, list_snapshots_on, parse_snapshot, read_snapshot, read_snapshot_on,
    snapshot_path, write_snapshot, write_snapshot_on,
};
pub(crate) use file::{
    encode_block, encode_head, encode_sessions, encode_table_end, encode_table_start,
};
pub use receive::{Incoming, Intake, IntakeError, ReceiveError};
pub use writer::{Durable, SnapshotFiles, SnapshotWriter};

use crate::codec::{Decode, Encode};
use crate::entry::EntryHash;
use crate::ids::{EntryIndex, StateHash, Term};
use crate::state::HasherState;

/// Entries between captures when none is configured (0 turns snapshots off).
pub const SNAPSHOT_EVERY_DEFAULT: u64 = 64;
/// The least time a persisted snapshot is kept before a newer one replaces it, by default.
pub const SNAPSHOT_RETAIN_MS_DEFAULT: u64 = 1_000;
/// Snapshot files kept: the newest and the one before it (the fallback when the newest does
/// not verify).
pub const SNAPSHOTS_KEPT: usize = 2;
/// Bytes of snapshot a leader sends a follower per message.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;
/// Bytes of snapshot a node sends per backup answer: one piece in flight per connection.
pub const BACKUP_CHUNK_BYTES: usize = 1024 * 1024;
/// Log a node applies after starting a snapshot before it starts the next, in percent of that
/// snapshot's size: with 100, a snapshot costs at most as much writing as the log it lets go,
/// and disk use stays near two snapshots and two snapshots' worth of log. (With turns, the
/// log between two starts is within 12% of this, and twice it at most: `replica::snapshots`.)
pub const SNAPSHOT_LOG_PERCENT: u64 = 100;
/// Slots a node scans per slice of snapshot work, between its other work.
pub const SNAPSHOT_SLICE_SLOTS: usize = 4096;
/// Longest a node goes without a slice of its snapshot in progress when it is never idle
/// (slices otherwise run whenever nothing else waits).
pub const SNAPSHOT_SLICE_INTERVAL_MS: u64 = 1;
/// Bytes of snapshot a node hands the writer at a time.
pub const SNAPSHOT_WRITE_BYTES: usize = 1024 * 1024;
/// Largest snapshot a follower accepts from a leader, in bytes.
pub const SNAPSHOT_BYTES_MAX: u64 = 64 * 1024 * 1024 * 1024;

const _: () = assert!(SNAPSHOTS_KEPT >= 2, "a fallback snapshot is kept");
const _: () = assert!(
    SNAPSHOT_CHUNK_BYTES + net::frame::MESSAGE_OVERHEAD_BYTES_MAX
        <= net::frame::FRAME_BODY_BYTES_MAX,
    "a chunk fits a frame"
);
const _: () = assert!(
    BACKUP_CHUNK_BYTES + net::frame::MESSAGE_OVERHEAD_BYTES_MAX <= net::frame::FRAME_BODY_BYTES_MAX,
    "a backup piece fits a reply frame"
);

/// What a snapshot covers: the last entry it includes and the state after it.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
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
    /// The members in force after it (none when no members entry preceded it).
    pub members: Option<crate::members::Members>,
    /// The handler version in force after it (format 6 on; earlier formats: the first).
    pub handler_version: u32,
}

/// Where a snapshot scan stands after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanProgress {
    /// No scan is in progress.
    Idle,
    /// More to come.
    More,
    /// The file's content is complete (the digest is to follow): the snapshot covers `meta`.
    Done(SnapshotMeta),
    /// The scan became void (a table grew under it): the partial file must be dropped.
    Void,
}
