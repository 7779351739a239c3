//! The snapshot file: `magic | meta | tables | sessions | blake3 digest of all before it`,
//! written to a temporary name, fsynced, renamed, and the directory fsynced.

use super::SnapshotMeta;
use crate::apply::Session;
use crate::codec::{self, Decode, Encode};
use crate::ids::{ClientId, EntryIndex};
use crate::state::{AnyMirror, TableId};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Suffix of snapshot files; the stem is the index they cover, 20 digits.
pub const SNAPSHOT_SUFFIX: &str = ".snap";
const MAGIC: [u8; 8] = *b"SNAPv001";
const DIGEST_BYTES: usize = 32;

/// A snapshot file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file system refused an operation.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not verify (wrong magic, digest, or structure).
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
struct TableHeader {
    id: u16,
    records: u64,
    bytes: u64,
}

/// A snapshot read back and verified.
#[derive(Debug)]
pub struct Snapshot {
    /// What it covers.
    pub meta: SnapshotMeta,
    /// Each table's id, record count and encoded records.
    pub tables: Vec<(TableId, u64, Vec<u8>)>,
    /// Every client session.
    pub sessions: Vec<(ClientId, Session)>,
    /// Bytes of the file.
    pub file_bytes: u64,
}

/// The path of the snapshot covering `index` in `dir`.
pub fn snapshot_path(dir: &Path, index: EntryIndex) -> PathBuf {
    dir.join(format!("{:020}{SNAPSHOT_SUFFIX}", index.0))
}

/// Snapshot files in `dir`, newest (highest index) first.
pub fn list_snapshots(dir: &Path) -> Vec<(EntryIndex, PathBuf)> {
    let mut found: Vec<(EntryIndex, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|item| {
            let path = item.path();
            let stem = path
                .file_name()?
                .to_str()?
                .strip_suffix(SNAPSHOT_SUFFIX)?
                .parse()
                .ok()?;
            Some((EntryIndex(stem), path))
        })
        .collect();
    found.sort_unstable_by_key(|item| std::cmp::Reverse(item.0));
    found
}

/// Encodes a snapshot of `tables` and `sessions` covering `meta`.
pub fn encode_snapshot<'a>(
    meta: &SnapshotMeta,
    tables: &[(TableId, Box<dyn AnyMirror>)],
    sessions: impl Iterator<Item = (&'a ClientId, &'a Session)>,
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_snapshot_into(meta, tables, sessions, &mut out);
    out
}

/// Appends the encoding of a snapshot to `out` (see [`encode_snapshot`]).
pub fn encode_snapshot_into<'a>(
    meta: &SnapshotMeta,
    tables: &[(TableId, Box<dyn AnyMirror>)],
    sessions: impl Iterator<Item = (&'a ClientId, &'a Session)>,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    codec::encode_into(meta, out).expect("meta encodes");
    codec::encode_into(&(tables.len() as u16), out).expect("u16 encodes");
    for (id, mirror) in tables {
        // The records go straight after their header, whose byte count is filled in after
        // (fixed-width integers: the header's size does not depend on it).
        let mut header = TableHeader {
            id: id.0,
            records: mirror.len(),
            bytes: 0,
        };
        let header_at = out.len();
        codec::encode_into(&header, out).expect("header encodes");
        let records_at = out.len();
        mirror.encode_into(out);
        header.bytes = (out.len() - records_at) as u64;
        let encoded = codec::encode_to_vec(&header).expect("header encodes");
        assert_eq!(encoded.len(), records_at - header_at, "a fixed-size header");
        out[header_at..records_at].copy_from_slice(&encoded);
    }
    let sessions: Vec<(&ClientId, &Session)> = sessions.collect();
    codec::encode_into(&sessions, out).expect("sessions encode");
    let digest = blake3::hash(&out[start..]);
    out.extend_from_slice(digest.as_bytes());
}

/// Writes a snapshot durably: temporary file, fsync, rename, directory fsync. Returns its
/// path and size.
pub fn write_snapshot(
    dir: &Path,
    index: EntryIndex,
    bytes: &[u8],
) -> Result<(PathBuf, u64), SnapshotError> {
    let path = snapshot_path(dir, index);
    let temporary = path.with_extension("tmp");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    let mut file = fs::File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(bytes).map_err(io(&temporary))?;
    file.sync_all().map_err(io(&temporary))?;
    fs::rename(&temporary, &path).map_err(io(&temporary))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok((path, bytes.len() as u64))
}

/// Reads a snapshot file and verifies its digest and structure.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, SnapshotError> {
    let bytes = fs::read(path).map_err(|source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&bytes).map_err(|reason| SnapshotError::Invalid {
        path: path.to_path_buf(),
        reason,
    })
}

fn parse(bytes: &[u8]) -> Result<Snapshot, String> {
    if bytes.len() < MAGIC.len() + DIGEST_BYTES || bytes[..MAGIC.len()] != MAGIC {
        return Err("not a snapshot (magic)".into());
    }
    let (body, digest) = bytes.split_at(bytes.len() - DIGEST_BYTES);
    if blake3::hash(body).as_bytes() != digest {
        return Err("digest mismatch".into());
    }
    let mut at = MAGIC.len();
    let (meta, used): (SnapshotMeta, usize) =
        codec::decode_prefix(&body[at..]).map_err(|e| e.to_string())?;
    at += used;
    let (count, used): (u16, usize) =
        codec::decode_prefix(&body[at..]).map_err(|e| e.to_string())?;
    at += used;
    let mut tables = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (header, used): (TableHeader, usize) =
            codec::decode_prefix(&body[at..]).map_err(|e| e.to_string())?;
        at += used;
        let end = at
            .checked_add(header.bytes as usize)
            .filter(|&end| end <= body.len())
            .ok_or("table bytes past the end")?;
        tables.push((TableId(header.id), header.records, body[at..end].to_vec()));
        at = end;
    }
    let sessions: Vec<(ClientId, Session)> =
        codec::decode(&body[at..]).map_err(|e| e.to_string())?;
    Ok(Snapshot {
        meta,
        tables,
        sessions,
        file_bytes: bytes.len() as u64,
    })
}
