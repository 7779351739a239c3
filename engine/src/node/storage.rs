//! A node's files: the hard state (term and vote) and the WAL, and recovery from them.

use super::NodeError;
use crate::apply::StateMachine;
use crate::codec::{self, Decode, Encode};
use crate::core::{HardState, LogBase, Recovered, Repair};
use crate::entry::EntryHash;
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::snapshot::{Durable, list_snapshots, read_snapshot};
use crate::wal::{Recovery, Wal};
use net::message::AppliedHash;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// File holding the hard state, inside the data directory.
pub const HARD_STATE_FILE: &str = "hard_state";
/// Directory holding the WAL segments, inside the data directory.
pub const WAL_DIR: &str = "wal";
/// Directory holding the snapshots, inside the data directory.
pub const SNAPSHOT_DIR: &str = "snapshots";

#[derive(Encode, Decode)]
#[bincode(crate = "crate::codec::bincode")]
struct HardStateRecord {
    term: Term,
    voted_for: Option<NodeId>,
    /// The end of the log before damage cut it (index, term), while being repaired.
    repair: Option<(EntryIndex, Term, EntryIndex)>,
}

/// Reads the hard state; a missing file is a fresh node.
pub fn read_hard_state(dir: &Path) -> Result<HardState, NodeError> {
    let path = dir.join(HARD_STATE_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HardState::default()),
        Err(source) => return Err(NodeError::Io { path, source }),
    };
    let corrupt = || NodeError::Corrupt {
        path: path.clone(),
        reason: "hard state checksum".into(),
    };
    if bytes.len() < 4 {
        return Err(corrupt());
    }
    let (crc, body) = bytes.split_at(4);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(corrupt());
    }
    let record: HardStateRecord = codec::decode(body).map_err(|_| corrupt())?;
    Ok(HardState {
        term: record.term,
        voted_for: record.voted_for,
        repair: record
            .repair
            .map(|(index, term, committed)| crate::core::Repair {
                index,
                term,
                committed,
            }),
    })
}

/// Makes the hard state durable: written to a temporary file, fsynced, renamed over the old
/// one, and the directory fsynced.
pub fn write_hard_state(dir: &Path, state: HardState) -> Result<(), NodeError> {
    let record = HardStateRecord {
        term: state.term,
        voted_for: state.voted_for,
        repair: state.repair.map(|r| (r.index, r.term, r.committed)),
    };
    let body = codec::encode_to_vec(&record).expect("hard state encodes");
    let mut bytes = crc32fast::hash(&body).to_le_bytes().to_vec();
    bytes.extend_from_slice(&body);
    let temporary = dir.join(format!("{HARD_STATE_FILE}.tmp"));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NodeError::Io { path, source }
    };
    let mut file = fs::File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(&bytes).map_err(io(&temporary))?;
    file.sync_all().map_err(io(&temporary))?;
    fs::rename(&temporary, dir.join(HARD_STATE_FILE)).map_err(io(&temporary))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

/// What a node recovered: its state machine with the committed prefix of its WAL applied, its
/// WAL, and what the consensus core needs.
pub struct Restored<H: Handler> {
    /// The state machine.
    pub machine: StateMachine<H>,
    /// The WAL, positioned after its last entry.
    pub wal: Wal,
    /// For the consensus core.
    pub core: Recovered,
    /// What the WAL scan found.
    pub recovery: Recovery,
    /// The snapshot recovery started from, if any.
    pub snapshot: Option<Durable>,
    /// How recovery went, for people.
    pub report: RecoveryReport,
}

/// How a recovery went.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// The snapshot used: its index and size in bytes.
    pub snapshot: Option<(EntryIndex, u64)>,
    /// Snapshots that did not verify and were passed over, with the reason.
    pub refused: Vec<String>,
    /// Entries replayed from the WAL after the snapshot.
    pub replayed: u64,
    /// WAL entries discarded because they did not continue the snapshot (an unfinished
    /// install, or an uncommitted suffix).
    pub discarded: u64,
    /// Damage found in the WAL: what was cut, and the repair it waits for.
    pub damage: Option<String>,
    /// Time the whole recovery took.
    pub took: Duration,
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.snapshot {
            Some((index, bytes)) => write!(
                f,
                "snapshot at entry {index} ({:.1} MiB)",
                bytes as f64 / (1024.0 * 1024.0)
            )?,
            None => write!(f, "no snapshot")?,
        }
        write!(
            f,
            ", {} entries replayed, {:.0} ms",
            self.replayed,
            self.took.as_secs_f64() * 1e3
        )?;
        if self.discarded > 0 {
            write!(f, ", {} WAL entries discarded", self.discarded)?;
        }
        for refused in &self.refused {
            write!(f, "; refused {refused}")?;
        }
        if let Some(damage) = &self.damage {
            write!(f, "; {damage}")?;
        }
        Ok(())
    }
}

/// Replay progress is printed this often once a recovery takes longer than it.
const RECOVERY_PROGRESS_MS: u64 = 1_000;

/// Recovers a node from `dir`: hard state, WAL scan, the newest snapshot that verifies and
/// that the WAL continues (older ones are the fallback), and replay of every entry after it
/// that the WAL shows committed (the highest commit index its entries carry). A WAL that no
/// snapshot connects to is emptied: the node then starts with no state and no log, takes no
/// part in elections, and gets a snapshot from the leader.
pub fn restore<H: Handler>(
    dir: &Path,
    handler: H,
    capacity_bytes: u64,
    wal_segment_bytes: u64,
) -> Result<Restored<H>, NodeError> {
    let started = Instant::now();
    fs::create_dir_all(dir).map_err(|source| NodeError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut hard_state = read_hard_state(dir)?;
    let (mut wal, recovery) = Wal::open_repairing(&dir.join(WAL_DIR), wal_segment_bytes)?;
    let mut machine = StateMachine::new(handler, capacity_bytes);
    let mut report = RecoveryReport::default();
    if let Some(damage) = &recovery.damage {
        // The damaged entries may have been acknowledged: until a leader has given them back,
        // this replica votes as if it held them and never campaigns. That obligation is made
        // durable before the damage is cut off the log.
        let repair = match damage.last {
            Some((index, term)) => Repair {
                index,
                term,
                committed: damage.committed,
            },
            // Nothing beyond the damage is readable: no candidate can be known to hold what
            // was lost, so no vote is granted until the log is whole again.
            None => Repair {
                index: damage.index,
                term: Term(u64::MAX),
                committed: damage.committed,
            },
        };
        hard_state.repair = Some(match hard_state.repair {
            Some(earlier) => earlier.merge(repair),
            None => repair,
        });
        write_hard_state(dir, hard_state)?;
        wal.cut_damage()?;
        report.damage = Some(format!(
            "entry {} damaged ({}, {} at offset {}): the log is cut before it and repaired from the leader through entry {}",
            damage.index,
            damage.reason,
            damage.path.display(),
            damage.offset,
            hard_state.repair.map_or(damage.index, |r| r.index)
        ));
    }
    let mut chosen = None;
    for (index, path) in list_snapshots(&dir.join(SNAPSHOT_DIR)) {
        if wal.first_index() > index.next() {
            report.refused.push(format!(
                "{}: the WAL starts at {}, after a gap",
                path.display(),
                wal.first_index()
            ));
            continue;
        }
        let snapshot = match read_snapshot(&path) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                report.refused.push(error.to_string());
                remove_refused(&path, &mut report);
                continue;
            }
        };
        let meta = snapshot.meta.clone();
        let bytes = snapshot.file_bytes;
        if let Err(reason) = machine.install(snapshot) {
            report.refused.push(format!("{}: {reason}", path.display()));
            remove_refused(&path, &mut report);
            continue;
        }
        report.snapshot = Some((index, bytes));
        chosen = Some(Durable {
            meta,
            path,
            bytes,
            took: Duration::ZERO,
        });
        break;
    }
    let base = match &chosen {
        Some(durable) => {
            let meta = &durable.meta;
            if !wal_continues(&wal, meta.index, meta.entry_hash) {
                report.discarded = wal.last_index().0.saturating_sub(wal.first_index().0 - 1);
                wal.reset_to(meta.index, meta.entry_hash)?;
            }
            LogBase {
                index: meta.index,
                term: meta.term,
                hash: meta.entry_hash,
            }
        }
        None => {
            if wal.first_index() > EntryIndex(1) {
                // Compacted behind snapshots none of which is usable: the entries left cannot
                // rebuild the state. Start empty and take a snapshot from the leader.
                report.discarded = wal.last_index().0 + 1 - wal.first_index().0;
                wal.reset_to(EntryIndex::ZERO, EntryHash::default())?;
            }
            LogBase::default()
        }
    };
    let committed = wal.max_commit().min(wal.last_index());
    let mut applied = chosen.as_ref().map(|d| AppliedHash {
        index: d.meta.index,
        hash: d.meta.state_hash,
    });
    let mut last_progress = Instant::now();
    for index in (base.index.0 + 1..=committed.0).map(EntryIndex) {
        let hash = machine.apply(&wal.read(index)?)?.state_hash;
        applied = Some(AppliedHash { index, hash });
        report.replayed += 1;
        if last_progress.elapsed() >= Duration::from_millis(RECOVERY_PROGRESS_MS) {
            last_progress = Instant::now();
            eprintln!(
                "recovery: replayed {} of {} entries",
                report.replayed,
                committed.0 - base.index.0
            );
        }
    }
    let last = wal.last_index();
    let after_base = base.index.0 + 1..=last.0;
    let terms = after_base
        .clone()
        .map(|i| wal.term_at(EntryIndex(i)).expect("held"))
        .collect();
    let hashes = after_base
        .map(|i| wal.hash_at(EntryIndex(i)).expect("held"))
        .collect();
    let window = (committed.max(base.index).0 + 1..=last.0)
        .map(|i| wal.read(EntryIndex(i)))
        .collect::<Result<_, _>>()?;
    let core = Recovered {
        hard_state,
        base,
        terms,
        hashes,
        window,
        applied,
    };
    report.took = started.elapsed();
    Ok(Restored {
        machine,
        wal,
        core,
        recovery,
        snapshot: chosen,
        report,
    })
}

/// Removes a snapshot that does not verify, so that it never counts as one of the snapshots
/// kept (a damaged fallback is no fallback).
fn remove_refused(path: &Path, report: &mut RecoveryReport) {
    if let Err(error) = fs::remove_file(path) {
        report
            .refused
            .push(format!("{}: not removed: {error}", path.display()));
    }
}

/// True when the WAL holds the log right after a snapshot of entry `index` (hash `hash`):
/// it holds that entry with that hash, or starts right after it with an entry chained to it.
fn wal_continues(wal: &Wal, index: EntryIndex, hash: EntryHash) -> bool {
    if index >= wal.first_index() {
        return wal.hash_at(index) == Some(hash);
    }
    // The WAL starts right after the snapshot (it cannot start earlier than the entry after
    // it: the caller skipped such snapshots).
    match wal.read(index.next()) {
        Ok(entry) => entry.verify(&hash).is_ok(),
        Err(_) => wal.last_index() < wal.first_index(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the hard state survives a rewrite and a damaged file is refused, not ignored.
    #[test]
    fn hard_state_round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), HardState::default());
        let state = HardState {
            term: Term(7),
            voted_for: Some(NodeId(2)),
            repair: Some(Repair {
                index: EntryIndex(40),
                term: Term(6),
                committed: EntryIndex(38),
            }),
        };
        write_hard_state(dir.path(), state).unwrap();
        write_hard_state(dir.path(), state).unwrap();
        assert_eq!(read_hard_state(dir.path()).unwrap(), state);
        let path = dir.path().join(HARD_STATE_FILE);
        let mut bytes = fs::read(&path).unwrap();
        bytes[5] ^= 1;
        fs::write(&path, bytes).unwrap();
        assert!(matches!(
            read_hard_state(dir.path()),
            Err(NodeError::Corrupt { .. })
        ));
    }
}
