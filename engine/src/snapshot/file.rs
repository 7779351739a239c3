//! The snapshot file: `magic | meta | table count | tables | state clock | sessions | blake3
//! digest of all before it`, where a table is `id | slot count | blocks | an empty block`, and a
//! block is
//! `record count | byte count | records` (a snapshot is written in blocks as a scan goes
//! through the table). The slot count is the table's as the capacity account counted it, so
//! that a restored state's account is the writer's (version 3; version 2 had none).
//! Written to a temporary name, fsynced, renamed, and the directory fsynced.
//!
//! A delta (`notes/decisions/snapshot-deltas.md`) is the same file with its own magic, the
//! link to the file before it after the meta, and in each table, before the blocks of its
//! records, the blocks of the keys removed since that file (and their empty block).

use super::SnapshotMeta;
use crate::apply::Session;
use crate::codec::{self, Decode, Encode};
use crate::ids::{ClientId, EntryIndex};
use crate::state::{SLOTS_INITIAL, TABLES_MAX, TableId};
use crate::storage::{Files, Storage};
use std::path::{Path, PathBuf};

/// Suffix of snapshot files; the stem is the index they cover, 20 digits.
pub const SNAPSHOT_SUFFIX: &str = ".snap";
/// Suffix of delta files (`notes/decisions/snapshot-deltas.md`), named as snapshot files are.
pub const DELTA_SUFFIX: &str = ".delta";
/// Version 7: the state clock before the sessions, and each session's time of last activity
/// (the sessions' age bound needs both, and every replica must judge age alike). Written for
/// every state.
const MAGIC: [u8; 8] = *b"SNAPv007";
/// Version 6: the handler version in force in the meta. Read only (it was written for a state
/// whose handler version was not the first).
const MAGIC_V6: [u8; 8] = *b"SNAPv006";
/// Version 5: the members in force in the meta (version 4: 128-bit client ids, and a session's
/// expiry its own flag (version 3: each session keeps its request's digest, and each table its
/// counted slot count; version 2: expired marks)). Read only (it was written for the first
/// handler version).
const MAGIC_V5: [u8; 8] = *b"SNAPv005";

/// A delta's first version: format 7's content, the link to the file before, and the keys
/// each table removed since it.
const MAGIC_DELTA: [u8; 8] = *b"SNAPd001";

const _: () = assert!(crate::formats::magic_number(&MAGIC) == crate::formats::SNAPSHOT);
const _: () = assert!(crate::formats::magic_number(&MAGIC_DELTA) == crate::formats::SNAPSHOT_DELTA);
const _: () = assert!(crate::formats::magic_number(&MAGIC_V5) == crate::formats::SNAPSHOT_OLDEST);

/// The snapshot formats this build reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// [`MAGIC_V5`]: no handler version, no times.
    V5,
    /// [`MAGIC_V6`]: no times.
    V6,
    /// [`MAGIC`].
    V7,
    /// [`MAGIC_DELTA`].
    Delta1,
}

impl Format {
    /// The format a magic names, if this build reads it.
    fn of(magic: &[u8]) -> Option<Format> {
        match magic {
            m if m == MAGIC => Some(Format::V7),
            m if m == MAGIC_DELTA => Some(Format::Delta1),
            m if m == MAGIC_V6 => Some(Format::V6),
            m if m == MAGIC_V5 => Some(Format::V5),
            _ => None,
        }
    }
}

/// A session as formats 5 and 6 kept it: without its time of last activity.
#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct SessionV6 {
    request: crate::ids::RequestNumber,
    request_commands: u32,
    digest: crate::entry::RequestDigest,
    applied_commands: u32,
    results: Vec<u8>,
    last_active: EntryIndex,
    expired: bool,
    earlier: Vec<crate::apply::Finished>,
}

/// The meta of format 5: format 6's without the handler version.
#[derive(Encode, Decode)]
#[codec(crate = "crate::codec")]
struct MetaV5 {
    index: EntryIndex,
    term: crate::ids::Term,
    entry_hash: crate::entry::EntryHash,
    state_hash: crate::state::StateHash,
    hasher: crate::state::HasherState,
    members: Option<crate::members::Members>,
}
/// Bytes of the magic that name the format family (the rest name its version).
const MAGIC_FAMILY_BYTES: usize = 4;
/// Bytes of the digest that ends a snapshot file.
pub const DIGEST_BYTES: usize = 32;
/// Bytes of a block header: record count and byte count, fixed-width.
const BLOCK_HEADER_BYTES: usize = 16;

/// A snapshot file that cannot be written or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The file system refused an operation on the file (or on its directory).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file's bytes do not make a snapshot this build reads.
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: ParseError,
    },
}

/// Why a snapshot file's bytes were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Too short to hold the magic and the digest: a file cut short.
    #[error("damaged: {bytes} bytes, too short for a snapshot")]
    TooShort {
        /// Bytes of the file.
        bytes: usize,
    },
    /// The digest does not match the content: the file was damaged after it was written.
    #[error("damaged: the blake3 digest does not match the content")]
    Digest,
    /// Another format of snapshot (the magic names another version of this format).
    #[error("written in snapshot format {found:?}; this build reads {expected:?}")]
    Format {
        /// The magic found.
        found: String,
        /// The magic this build writes and reads.
        expected: String,
    },
    /// Its digest holds but it is not a snapshot (no snapshot magic).
    #[error("damaged: not a snapshot (no snapshot magic)")]
    Magic,
    /// The digest holds but the content does not decode: written by a build whose layout
    /// differs from this one's.
    #[error("its digest holds but its content does not decode ({0}): written by another build")]
    Structure(#[source] StructureError),
}

/// What is wrong with the sessions of a snapshot file whose digest holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionsError {
    /// They do not decode: the decoder's account.
    #[error("{0}")]
    Decode(String),
    /// Two sessions of one client, or out of client order.
    #[error("the sessions are not in client order, each once")]
    NotInClientOrder,
    /// A session active after the state clock (which never goes back).
    #[error(
        "client {client:?} was active at {active_ms} ms, after the state clock's {clock_ms} ms"
    )]
    ActiveAfterClock {
        /// The session's client.
        client: ClientId,
        /// When it was last active.
        active_ms: u64,
        /// The state clock the file holds.
        clock_ms: u64,
    },
    /// A session active at a later entry than another has an earlier time.
    #[error("a session active at a later entry has an earlier time")]
    TimesOutOfOrder,
}

/// Why the content of a snapshot whose digest holds does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StructureError {
    /// The sessions, at the end of the content, did not decode or are not what the state can
    /// take.
    #[error("the sessions at byte {at}: {source}")]
    Sessions {
        /// Where they start in the file.
        at: usize,
        /// What is wrong with them.
        source: SessionsError,
    },
    /// A part of the content did not decode.
    #[error("{part} at byte {at}: {reason}")]
    Decode {
        /// The part.
        part: Part,
        /// Where it starts in the file.
        at: usize,
        /// The decoder's account of the failure.
        reason: String,
    },
    /// A block claims more bytes than the content has after its header.
    #[error(
        "table bytes past the end: a block of table {table} at byte {at} claims {bytes} bytes, \
         the content ends at byte {end}"
    )]
    BlockPastEnd {
        /// The table's id.
        table: u16,
        /// Where the block's records start in the file.
        at: usize,
        /// Bytes the block claims.
        bytes: u64,
        /// Where the content ends (the digest starts).
        end: usize,
    },
    /// A delta continues a file that is not older than itself.
    #[error("a delta of entry {index} continues the file of entry {previous}, not an older one")]
    LinkNotBefore {
        /// The index the file before covers, by the link.
        previous: EntryIndex,
        /// The index the delta covers.
        index: EntryIndex,
    },
    /// The blocks of a table claim more records in all than a u64 counts.
    #[error(
        "table record count overflows: table {table} has {records} records before a block of \
         {count}"
    )]
    RecordCountOverflow {
        /// The table's id.
        table: u16,
        /// Records counted before the block.
        records: u64,
        /// Records the block claims.
        count: u64,
    },
}

/// A part of a snapshot's content, to say which one did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The meta (what the snapshot covers).
    Meta,
    /// A delta's link to the file before it.
    Link,
    /// The number of tables.
    TableCount,
    /// The id of the table at this position (from 0) in the file.
    TableId {
        /// Its position.
        position: u16,
    },
    /// The slot count of this table.
    SlotCount {
        /// The table's id.
        table: u16,
    },
    /// A block header (record count and byte count) of this table.
    BlockHeader {
        /// The table's id.
        table: u16,
    },
    /// The client sessions.
    Sessions,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Meta => write!(f, "the meta"),
            Part::Link => write!(f, "the link to the file before"),
            Part::TableCount => write!(f, "the table count"),
            Part::TableId { position } => write!(f, "the id of table number {position}"),
            Part::SlotCount { table } => write!(f, "the slot count of table {table}"),
            Part::BlockHeader { table } => write!(f, "a block header of table {table}"),
            Part::Sessions => write!(f, "the sessions"),
        }
    }
}

impl ParseError {
    /// True when the file is damaged (a copy that cannot be trusted, which a node passes over
    /// for an older snapshot); false when it is intact but written by another build or
    /// format (the configuration or the build is wrong, not the file).
    pub fn is_damage(&self) -> bool {
        match self {
            ParseError::TooShort { .. } | ParseError::Digest | ParseError::Magic => true,
            ParseError::Format { .. } | ParseError::Structure(_) => false,
        }
    }
}

/// The file a delta continues: the snapshot (whole or delta) it was taken over, by the index
/// it covers and the blake3 digest that ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct SnapshotLink {
    /// The index the file before covers.
    pub index: EntryIndex,
    /// Its digest (the file's last [`DIGEST_BYTES`] bytes).
    pub digest: [u8; DIGEST_BYTES],
}

/// A snapshot read back and verified.
#[derive(Debug)]
pub struct Snapshot {
    /// What it covers.
    pub meta: SnapshotMeta,
    /// For a delta, the file it continues; `None` for a whole snapshot.
    pub previous: Option<SnapshotLink>,
    /// Each table's slot count and records.
    pub tables: Vec<SnapshotTable>,
    /// The state clock: the highest leader's time applied, in ms since the Unix epoch (0 for
    /// a file of format 5 or 6, which kept no times).
    pub clock_ms: u64,
    /// Every client session.
    pub sessions: Vec<(ClientId, Session)>,
    /// Bytes of the file.
    pub file_bytes: u64,
    /// The blake3 digest that ends the file (what a delta over it links to).
    pub digest: [u8; DIGEST_BYTES],
}

impl Snapshot {
    /// The link a delta over this file carries.
    pub fn link(&self) -> SnapshotLink {
        SnapshotLink {
            index: self.meta.index,
            digest: self.digest,
        }
    }
}

/// One table of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotTable {
    /// The table's id.
    pub id: TableId,
    /// The slot count the capacity account charged the table for.
    pub slots: u64,
    /// The number of records.
    pub records: u64,
    /// The records, encoded as `(key, record)` pairs back to back.
    pub bytes: Vec<u8>,
    /// A delta's: the number of keys the table removed since the file before.
    pub removed: u64,
    /// Those keys, encoded back to back (empty in a whole snapshot).
    pub removed_bytes: Vec<u8>,
}

/// The path of the snapshot covering `index` in `dir`.
pub fn snapshot_path(dir: &Path, index: EntryIndex) -> PathBuf {
    dir.join(format!("{:020}{SNAPSHOT_SUFFIX}", index.0))
}

/// The path of the delta covering `index` in `dir`.
pub fn delta_path(dir: &Path, index: EntryIndex) -> PathBuf {
    dir.join(format!("{:020}{DELTA_SUFFIX}", index.0))
}

/// True when `bytes` (a snapshot file's, from its start) begin as a delta's.
pub fn is_delta(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC_DELTA)
}

/// Snapshot files in `dir`, newest (highest index) first; none when `dir` does not exist.
pub fn list_snapshots(dir: &Path) -> std::io::Result<Vec<(EntryIndex, PathBuf)>> {
    list_snapshots_on(&Files, dir)
}

/// [`list_snapshots`] on `storage`.
pub fn list_snapshots_on<S: Storage>(
    storage: &S,
    dir: &Path,
) -> std::io::Result<Vec<(EntryIndex, PathBuf)>> {
    list_with_suffix(storage, dir, SNAPSHOT_SUFFIX)
}

/// Delta files in `dir`, newest first; none when `dir` does not exist.
pub fn list_deltas_on<S: Storage>(
    storage: &S,
    dir: &Path,
) -> std::io::Result<Vec<(EntryIndex, PathBuf)>> {
    list_with_suffix(storage, dir, DELTA_SUFFIX)
}

fn list_with_suffix<S: Storage>(
    storage: &S,
    dir: &Path,
    suffix: &str,
) -> std::io::Result<Vec<(EntryIndex, PathBuf)>> {
    let items = match storage.list(dir) {
        Ok(items) => items,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for path in items {
        let stem = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_suffix(suffix))
            .and_then(|stem| stem.parse().ok());
        if let Some(stem) = stem {
            found.push((EntryIndex(stem), path));
        }
    }
    found.sort_unstable_by_key(|item| std::cmp::Reverse(item.0));
    Ok(found)
}

/// Appends the start of a snapshot file: magic, meta, for a delta the link to the `previous`
/// file, and the number of tables.
pub(crate) fn encode_head(
    meta: &SnapshotMeta,
    previous: Option<&SnapshotLink>,
    tables: usize,
    out: &mut Vec<u8>,
) {
    assert!(
        tables <= TABLES_MAX,
        "a snapshot of {tables} tables, at most {TABLES_MAX}"
    );
    assert!(
        previous.is_none_or(|link| link.index < meta.index),
        "a delta of entry {} over a file of entry {:?}",
        meta.index,
        previous.map(|link| link.index)
    );
    let start = out.len();
    out.extend_from_slice(if previous.is_some() {
        &MAGIC_DELTA
    } else {
        &MAGIC
    });
    codec::encode_into(meta, out).expect("meta encodes");
    if let Some(link) = previous {
        codec::encode_into(link, out).expect("a link encodes");
    }
    codec::encode_into(&(tables as u16), out).expect("u16 encodes");
    // Debug builds only: it decodes the meta again. The head written reads back as the meta
    // and the table count given.
    debug_assert!(
        parse_head(&out[start..]).is_ok_and(|(read, count)| read == *meta && count == tables),
        "a snapshot's head reads back as its meta"
    );
}

/// The meta and the table count of a snapshot head (`head`: from its magic on).
fn parse_head(head: &[u8]) -> Result<(SnapshotMeta, usize), StructureError> {
    let format = head.get(..MAGIC.len()).and_then(Format::of);
    let mut at = MAGIC.len();
    let meta = parse_meta(head, &mut at, format == Some(Format::V5))?;
    if format == Some(Format::Delta1) {
        let _: SnapshotLink = decode_part(head, &mut at, Part::Link)?;
    }
    let count: u16 = decode_part(head, &mut at, Part::TableCount)?;
    Ok((meta, count as usize))
}

/// Appends the start of a table: its id and slot count.
pub(crate) fn encode_table_start(id: TableId, slots: u64, out: &mut Vec<u8>) {
    // A slot count the account charged: what a table loading the snapshot must accept.
    assert!(
        (id.0 as usize) < TABLES_MAX && slots.is_power_of_two() && slots >= SLOTS_INITIAL as u64,
        "table {} of {slots} slots",
        id.0
    );
    codec::encode_into(&(id.0, slots), out).expect("a table start encodes");
}

/// Appends a block of `records` records that `fill` encodes onto `out`; an empty block is left
/// out (an empty block ends the table, see [`encode_table_end`]). Returns what `fill` returned.
pub(crate) fn encode_block<T>(out: &mut Vec<u8>, fill: impl FnOnce(&mut Vec<u8>) -> (T, u64)) -> T {
    let header_at = out.len();
    out.resize(header_at + BLOCK_HEADER_BYTES, 0);
    let (outcome, records) = fill(out);
    assert!(
        out.len() >= header_at + BLOCK_HEADER_BYTES,
        "a block's records only add to the file"
    );
    if records == 0 {
        out.truncate(header_at);
        return outcome;
    }
    let bytes = (out.len() - header_at - BLOCK_HEADER_BYTES) as u64;
    let header = codec::encode_to_vec(&(records, bytes)).expect("header encodes");
    assert_eq!(
        header.len(),
        BLOCK_HEADER_BYTES,
        "a fixed-size block header"
    );
    out[header_at..header_at + BLOCK_HEADER_BYTES].copy_from_slice(&header);
    outcome
}

/// Appends the empty block that ends a table.
pub(crate) fn encode_table_end(out: &mut Vec<u8>) {
    let start = out.len();
    codec::encode_into(&(0u64, 0u64), out).expect("header encodes");
    assert_eq!(
        out.len() - start,
        BLOCK_HEADER_BYTES,
        "the empty block is a block header"
    );
}

/// Appends the state clock (`clock_ms`) and the sessions, which end the snapshot's content
/// (the digest follows).
pub(crate) fn encode_sessions(clock_ms: u64, sessions: &[(ClientId, Session)], out: &mut Vec<u8>) {
    // Every replica writes the same bytes for the same sessions.
    assert!(
        sessions.windows(2).all(|w| w[0].0 < w[1].0),
        "a snapshot's sessions are in client order, each once"
    );
    let start = out.len();
    codec::encode_into(&(clock_ms, sessions), out).expect("sessions encode");
    // Debug builds only: it decodes every session again.
    debug_assert!(
        codec::decode::<(u64, Vec<(ClientId, Session)>)>(&out[start..])
            .is_ok_and(|(clock, read)| clock == clock_ms && read == sessions),
        "a snapshot's sessions read back as written"
    );
}

/// Writes a snapshot durably: temporary file, fsync, rename, directory fsync. Returns its
/// path and size.
pub fn write_snapshot(
    dir: &Path,
    index: EntryIndex,
    bytes: &[u8],
) -> Result<(PathBuf, u64), SnapshotError> {
    write_snapshot_on(&Files, dir, index, bytes)
}

/// [`write_snapshot`] on `storage`.
pub fn write_snapshot_on<S: Storage>(
    storage: &S,
    dir: &Path,
    index: EntryIndex,
    bytes: &[u8],
) -> Result<(PathBuf, u64), SnapshotError> {
    let path = snapshot_path(dir, index);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io { path, source }
    };
    storage.create_dir_all(dir).map_err(io(dir))?;
    storage.write_durably(&path, bytes).map_err(io(&path))?;
    // Debug builds only: it reads the whole file back.
    debug_assert!(
        storage.read(&path).is_ok_and(|read| read == bytes),
        "{}: the snapshot written reads back as written",
        path.display()
    );
    Ok((path, bytes.len() as u64))
}

/// Reads a snapshot file and verifies its digest and structure.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, SnapshotError> {
    read_snapshot_on(&Files, path)
}

/// [`read_snapshot`] from `storage`.
pub fn read_snapshot_on<S: Storage>(storage: &S, path: &Path) -> Result<Snapshot, SnapshotError> {
    let bytes = storage.read(path).map_err(|source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_snapshot(&bytes).map_err(|problem| SnapshotError::Invalid {
        path: path.to_path_buf(),
        problem,
    })
}

/// Verifies and decodes a snapshot file's bytes (the digest and the magic first, then the
/// structure).
pub fn parse_snapshot(bytes: &[u8]) -> Result<Snapshot, ParseError> {
    let format = check_head(bytes)?;
    let body = &bytes[..bytes.len() - DIGEST_BYTES];
    parse_body(body, format)
        .map(|(meta, previous, tables, (clock_ms, sessions))| Snapshot {
            meta,
            previous,
            tables,
            clock_ms,
            sessions,
            file_bytes: bytes.len() as u64,
            digest: bytes[bytes.len() - DIGEST_BYTES..]
                .try_into()
                .expect("the digest's size"),
        })
        .map_err(ParseError::Structure)
}

/// Checks the length, the digest and the magic (the digest first: a damaged file is damaged
/// whichever byte was hit, the magic's included); the format the magic names.
fn check_head(bytes: &[u8]) -> Result<Format, ParseError> {
    if bytes.len() < MAGIC.len() + DIGEST_BYTES {
        return Err(ParseError::TooShort { bytes: bytes.len() });
    }
    let (body, digest) = bytes.split_at(bytes.len() - DIGEST_BYTES);
    if blake3::hash(body).as_bytes() != digest {
        return Err(ParseError::Digest);
    }
    let magic = &bytes[..MAGIC.len()];
    if let Some(format) = Format::of(magic) {
        return Ok(format);
    }
    // Same family, another version: an intact file of another format.
    if magic[..MAGIC_FAMILY_BYTES] == MAGIC[..MAGIC_FAMILY_BYTES] {
        return Err(ParseError::Format {
            found: String::from_utf8_lossy(magic).into_owned(),
            expected: String::from_utf8_lossy(&MAGIC).into_owned(),
        });
    }
    Err(ParseError::Magic)
}

/// The state clock and every session, as a snapshot keeps them.
type SessionRecords = (u64, Vec<(ClientId, Session)>);

/// What a snapshot's content decodes to: its meta, a delta's link, its tables, state clock
/// and sessions.
type Content = (
    SnapshotMeta,
    Option<SnapshotLink>,
    Vec<SnapshotTable>,
    SessionRecords,
);

/// Decodes the content between the magic and the digest, of `format`.
fn parse_body(body: &[u8], format: Format) -> Result<Content, StructureError> {
    let mut at = MAGIC.len();
    let meta = parse_meta(body, &mut at, format == Format::V5)?;
    let delta = format == Format::Delta1;
    let previous: Option<SnapshotLink> = match delta {
        true => Some(decode_part(body, &mut at, Part::Link)?),
        false => None,
    };
    if let Some(link) = previous.filter(|link| link.index >= meta.index) {
        return Err(StructureError::LinkNotBefore {
            previous: link.index,
            index: meta.index,
        });
    }
    let count: u16 = decode_part(body, &mut at, Part::TableCount)?;
    let mut tables = Vec::with_capacity(count as usize);
    for position in 0..count {
        let id: u16 = decode_part(body, &mut at, Part::TableId { position })?;
        let slots: u64 = decode_part(body, &mut at, Part::SlotCount { table: id })?;
        let (removed, removed_bytes) = match delta {
            true => {
                let (removed, removed_bytes, end) = parse_table(body, id, at)?;
                at = end;
                (removed, removed_bytes)
            }
            false => (0, Vec::new()),
        };
        let (records, bytes, end) = parse_table(body, id, at)?;
        at = end;
        tables.push(SnapshotTable {
            id: TableId(id),
            slots,
            records,
            bytes,
            removed,
            removed_bytes,
        });
    }
    let records = parse_sessions(&body[at..], format)
        .map_err(|source| StructureError::Sessions { at, source })?;
    Ok((meta, previous, tables, records))
}

/// Decodes the state clock and the sessions (`bytes`: the rest of the content), of `format`,
/// and checks what the sessions must hold to be loaded (see [`check_sessions`]). A format
/// that kept no times gives the clock 0 and every session time 0: no time applied yet.
fn parse_sessions(bytes: &[u8], format: Format) -> Result<SessionRecords, SessionsError> {
    let records = match format {
        Format::V7 | Format::Delta1 => {
            codec::decode(bytes).map_err(|e| SessionsError::Decode(e.to_string()))?
        }
        Format::V5 | Format::V6 => {
            let sessions: Vec<(ClientId, SessionV6)> =
                codec::decode(bytes).map_err(|e| SessionsError::Decode(e.to_string()))?;
            (0, sessions.into_iter().map(untimed).collect())
        }
    };
    check_sessions(&records)?;
    Ok(records)
}

/// A session of format 5 or 6, with no time of last activity.
fn untimed((client, old): (ClientId, SessionV6)) -> (ClientId, Session) {
    let session = Session {
        request: old.request,
        request_commands: old.request_commands,
        digest: old.digest,
        applied_commands: old.applied_commands,
        results: old.results,
        last_active: old.last_active,
        last_active_ms: 0,
        expired: old.expired,
        earlier: old.earlier,
    };
    (client, session)
}

/// What the sessions of a file whose digest holds must be for the state to take them: in
/// client order, each once, none active after the state clock, and their times in the order
/// of their last activity (the state clock never goes back).
fn check_sessions((clock_ms, sessions): &SessionRecords) -> Result<(), SessionsError> {
    if !sessions.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(SessionsError::NotInClientOrder);
    }
    if let Some((client, s)) = sessions.iter().find(|(_, s)| s.last_active_ms > *clock_ms) {
        return Err(SessionsError::ActiveAfterClock {
            client: *client,
            active_ms: s.last_active_ms,
            clock_ms: *clock_ms,
        });
    }
    let mut by_age: Vec<(EntryIndex, u64)> = sessions
        .iter()
        .map(|(_, s)| (s.last_active, s.last_active_ms))
        .collect();
    by_age.sort_unstable();
    if !by_age.windows(2).all(|w| w[0].1 <= w[1].1) {
        return Err(SessionsError::TimesOutOfOrder);
    }
    Ok(())
}

/// Decodes the meta at `at` (of format 5 when `v5`), and moves `at` past it.
fn parse_meta(body: &[u8], at: &mut usize, v5: bool) -> Result<SnapshotMeta, StructureError> {
    if !v5 {
        return decode_part(body, at, Part::Meta);
    }
    let meta: MetaV5 = decode_part(body, at, Part::Meta)?;
    Ok(SnapshotMeta {
        index: meta.index,
        term: meta.term,
        entry_hash: meta.entry_hash,
        state_hash: meta.state_hash,
        hasher: meta.hasher,
        members: meta.members,
        handler_version: crate::handler::HANDLER_VERSION_FIRST,
    })
}

/// Decodes `part` from `at`, and moves `at` past it.
fn decode_part<T: codec::Decode<()>>(
    body: &[u8],
    at: &mut usize,
    part: Part,
) -> Result<T, StructureError> {
    let (value, used) =
        codec::decode_prefix(&body[*at..]).map_err(|e| decode_error(part, *at, &e))?;
    assert!(
        used <= body.len() - *at,
        "{part} at byte {at} decoded from {used} bytes, past the content's end at {}",
        body.len()
    );
    *at += used;
    Ok(value)
}

fn decode_error(part: Part, at: usize, error: &codec::CodecError) -> StructureError {
    StructureError::Decode {
        part,
        at,
        reason: error.to_string(),
    }
}

/// Decodes the blocks of table `table` from `at`: its record count, its records' bytes, and
/// where the table ends.
fn parse_table(
    body: &[u8],
    table: u16,
    mut at: usize,
) -> Result<(u64, Vec<u8>, usize), StructureError> {
    let (mut records, mut content) = (0u64, Vec::new());
    loop {
        let (count, bytes): (u64, u64) = decode_part(body, &mut at, Part::BlockHeader { table })?;
        if count == 0 && bytes == 0 {
            return Ok((records, content, at));
        }
        let end = usize::try_from(bytes)
            .ok()
            .and_then(|bytes| at.checked_add(bytes))
            .filter(|&end| end <= body.len())
            .ok_or(StructureError::BlockPastEnd {
                table,
                at,
                bytes,
                end: body.len(),
            })?;
        content.extend_from_slice(&body[at..end]);
        records = records
            .checked_add(count)
            .ok_or(StructureError::RecordCountOverflow {
                table,
                records,
                count,
            })?;
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryHash;
    use crate::ids::{StateHash, Term};
    use crate::state::StreamHasher;

    /// The start of a snapshot of one table, id 3, with no blocks yet.
    fn head_of_one_table() -> Vec<u8> {
        let meta = SnapshotMeta {
            index: EntryIndex(5),
            term: Term(1),
            entry_hash: EntryHash::default(),
            state_hash: StateHash::default(),
            hasher: StreamHasher::default().save(),
            members: None,
            handler_version: crate::handler::HANDLER_VERSION_FIRST,
        };
        let mut out = Vec::new();
        encode_head(&meta, None, 1, &mut out);
        encode_table_start(TableId(3), 16, &mut out);
        out
    }

    fn with_digest(mut body: Vec<u8>) -> Vec<u8> {
        let digest = blake3::hash(&body);
        body.extend_from_slice(digest.as_bytes());
        body
    }

    fn structure(bytes: &[u8]) -> StructureError {
        match parse_snapshot(bytes) {
            Err(ParseError::Structure(error)) => error,
            other => panic!("expected a structure error, got {other:?}"),
        }
    }

    /// Proves each way the content behind a sound digest fails to decode is its own variant,
    /// with the table and the offsets, and that the messages keep the words operators know.
    #[test]
    fn content_that_does_not_decode_names_the_part_and_the_table() {
        let mut overflow = head_of_one_table();
        overflow.extend_from_slice(&codec::encode_to_vec(&(u64::MAX, 0u64)).unwrap());
        overflow.extend_from_slice(&codec::encode_to_vec(&(1u64, 0u64)).unwrap());
        let error = structure(&with_digest(overflow));
        assert_eq!(
            error,
            StructureError::RecordCountOverflow {
                table: 3,
                records: u64::MAX,
                count: 1
            }
        );
        assert!(error.to_string().contains("table record count overflows"));

        let mut past_end = head_of_one_table();
        past_end.extend_from_slice(&codec::encode_to_vec(&(1u64, 1000u64)).unwrap());
        let end = past_end.len();
        let error = structure(&with_digest(past_end));
        assert_eq!(
            error,
            StructureError::BlockPastEnd {
                table: 3,
                at: end,
                bytes: 1000,
                end
            }
        );
        assert!(error.to_string().contains("table bytes past the end"));

        let cut = head_of_one_table();
        let at = cut.len();
        let error = structure(&with_digest(cut));
        assert!(
            matches!(
                &error,
                StructureError::Decode { part: Part::BlockHeader { table: 3 }, at: found, .. }
                    if *found == at
            ),
            "{error:?}"
        );
    }
}
