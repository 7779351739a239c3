//! Replay rehearsal: re-executes a stopped node's committed log with this build's handler,
//! from its oldest usable snapshot (or from the start), and compares every entry with what the
//! node recorded: the apply journal's state hash and per-command outcome fingerprints, and the
//! snapshots' state hashes. The first difference is reported with its entry and command; an
//! author checks a new handler build against real history before rolling it out. Writes
//! nothing (the log is opened read-only, under a shared lock a running node refuses).

use crate::apply::{ApplyError, StateMachine};
use crate::codec;
use crate::entry::{Entry, EntryKind, parse_payload_of};
use crate::handler::Handler;
use crate::ids::EntryIndex;
use crate::snapshot::{SnapshotError, list_snapshots, read_snapshot};
use crate::state::{InstallError, StateHash};
use crate::storage::data_dir::{DataDirError, DirLock};
use crate::storage::hard_state::{SNAPSHOT_DIR, WAL_DIR};
use crate::storage::journal::{Journal, JournalError, read_journal};
use crate::wal::{Access, Wal, WalError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a rehearsal runs.
#[derive(Clone, Debug)]
pub struct RehearsalOptions {
    /// State capacity, in bytes (the node's `capacity_bytes`).
    pub capacity_bytes: u64,
    /// Live sessions the state keeps (the node's `sessions_max`).
    pub sessions_max: usize,
    /// Seconds a session is kept inactive (the node's `session_retention_s`).
    pub session_retention_s: u64,
    /// Bytes per WAL segment (the node's `wal_segment_bytes`).
    pub wal_segment_bytes: u64,
    /// Start from the log's first entry even when a snapshot is usable (the log must start at
    /// entry 1).
    pub from_start: bool,
}

/// The first thing this build does otherwise than the node recorded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Difference {
    /// A command's outcome differs from the journal's.
    #[error(
        "entry {index}, command {command} ({described}): its outcome differs from the one recorded"
    )]
    Outcome {
        /// The entry.
        index: EntryIndex,
        /// The command's position in the entry.
        command: u32,
        /// The command, as this build decodes it.
        described: String,
    },
    /// The outcomes are the recorded ones, but the state after the entry is not.
    #[error("entry {index}: the state hash after it is {replayed}, the node recorded {recorded}")]
    StateHash {
        /// The entry.
        index: EntryIndex,
        /// The hash this build reaches.
        replayed: StateHash,
        /// The hash the journal or a snapshot recorded.
        recorded: StateHash,
    },
    /// This build stops applying where the node went on.
    #[error("entry {index}: this build stops: {error}")]
    Stops {
        /// The entry.
        index: EntryIndex,
        /// Why.
        error: ApplyError,
    },
}

/// What a rehearsal did.
#[derive(Debug)]
pub struct Rehearsal {
    /// The snapshot it started from (`None`: the start of the log).
    pub from_snapshot: Option<EntryIndex>,
    /// The last entry it replayed.
    pub through: EntryIndex,
    /// Entries replayed.
    pub entries: u64,
    /// Commands in them.
    pub commands: u64,
    /// Entries compared with a journal record.
    pub journaled: u64,
    /// Snapshots whose state hash was compared.
    pub snapshots: u64,
    /// Snapshots that could not be read, passed over (path and why).
    pub passed_over: Vec<String>,
    /// How long it took.
    pub took: Duration,
    /// The first difference, if any.
    pub difference: Option<Difference>,
}

/// Why a rehearsal could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RehearsalError {
    /// The directory is locked by a running node, or unreadable.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// The log could not be read.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// The journal could not be read.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// A snapshot could not be read.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The starting snapshot does not install with this build.
    #[error("{}: does not install with this build: {error}", path.display())]
    Install {
        /// The snapshot.
        path: PathBuf,
        /// Why.
        error: InstallError,
    },
    /// The capacity cannot hold the handler's empty tables.
    #[error(transparent)]
    Capacity(#[from] crate::state::CapacityTooSmall),
    /// Neither a usable snapshot nor a log from entry 1.
    #[error(
        "nothing to start from: the log starts at entry {first} and no snapshot it continues is usable"
    )]
    NoStart {
        /// The log's first entry.
        first: EntryIndex,
    },
}

/// Re-executes the committed log of the stopped node in `dir` with `handler`; `progress` hears
/// the entries done and the total now and then.
pub fn rehearse<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RehearsalOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<Rehearsal, RehearsalError> {
    let started = Instant::now();
    let _lock = DirLock::shared(dir)?;
    let (wal, _) = Wal::scan_repairing(
        &dir.join(WAL_DIR),
        options.wal_segment_bytes,
        Access::ReadOnly,
    )?;
    let journal = read_journal(dir)?;
    let snapshots =
        list_snapshots(&dir.join(SNAPSHOT_DIR)).map_err(|source| SnapshotError::Io {
            path: dir.join(SNAPSHOT_DIR),
            source,
        })?;
    let mut machine = StateMachine::try_new(handler, options.capacity_bytes)?;
    machine.set_sessions_max(options.sessions_max);
    machine.set_session_retention_s(options.session_retention_s);
    machine.set_journaling(true);
    let (from_snapshot, recorded, passed_over) = start(&mut machine, &wal, &snapshots, options)?;
    let last = journal
        .records
        .keys()
        .next_back()
        .copied()
        .unwrap_or_default();
    let through = wal.max_commit().max(last).min(wal.last_index());
    let mut run = Run {
        machine,
        journal: &journal,
        recorded: &recorded,
        rehearsal: Rehearsal {
            from_snapshot,
            through: EntryIndex(from_snapshot.map_or(0, |i| i.0)),
            entries: 0,
            commands: 0,
            journaled: 0,
            snapshots: 0,
            passed_over,
            took: Duration::ZERO,
            difference: None,
        },
    };
    let first = run.machine.applied_index().next();
    let total = through.0.saturating_sub(first.0 - 1);
    for index in first.0..=through.0 {
        let entry = wal.read(EntryIndex(index))?;
        if run.step(&entry).is_some() {
            break;
        }
        progress(run.rehearsal.entries, total);
    }
    run.rehearsal.took = started.elapsed();
    Ok(run.rehearsal)
}

/// Where a rehearsal starts: the snapshot installed, every readable snapshot's state hash, and
/// the snapshots passed over.
type Start = (
    Option<EntryIndex>,
    BTreeMap<EntryIndex, StateHash>,
    Vec<String>,
);

/// Installs the oldest snapshot the log continues (unless `from_start`), or none when the log
/// starts at entry 1; returns its index and every readable snapshot's recorded state hash.
fn start<H: Handler>(
    machine: &mut StateMachine<H>,
    wal: &Wal,
    snapshots: &[(EntryIndex, PathBuf)],
    options: &RehearsalOptions,
) -> Result<Start, RehearsalError> {
    let (mut recorded, mut passed_over) = (BTreeMap::new(), Vec::new());
    let mut from = None;
    // Oldest first: the longest history to compare.
    for (index, path) in snapshots.iter().rev() {
        let usable = !options.from_start
            && from.is_none()
            && crate::node::recovery::replay::log_reaches(wal, *index);
        let snapshot = match read_snapshot(path) {
            Ok(snapshot) => snapshot,
            Err(error) => {
                passed_over.push(error.to_string());
                continue;
            }
        };
        // As a restart does: a file renamed or copied in by hand is no start.
        if let Some(reason) = crate::node::recovery::not_as_named(&snapshot, *index) {
            passed_over.push(format!("{}: {reason}", path.display()));
            continue;
        }
        recorded.insert(*index, snapshot.meta.state_hash);
        if usable {
            machine
                .install(snapshot)
                .map_err(|error| RehearsalError::Install {
                    path: path.clone(),
                    error,
                })?;
            from = Some(*index);
        }
    }
    if from.is_none() && wal.first_index() > EntryIndex(1) {
        return Err(RehearsalError::NoStart {
            first: wal.first_index(),
        });
    }
    Ok((from, recorded, passed_over))
}

/// A rehearsal under way.
struct Run<'a, H: Handler> {
    machine: StateMachine<H>,
    journal: &'a Journal,
    recorded: &'a BTreeMap<EntryIndex, StateHash>,
    rehearsal: Rehearsal,
}

impl<H: Handler> Run<'_, H> {
    /// Applies `entry` and compares it with what was recorded; the difference found, if any.
    fn step(&mut self, entry: &Entry) -> Option<&Difference> {
        let index = entry.index();
        let difference = match self.machine.apply(entry) {
            Err(error) => Some(Difference::Stops { index, error }),
            Ok(applied) => {
                self.rehearsal.entries += 1;
                self.rehearsal.commands += u64::from(entry.header.command_count);
                self.rehearsal.through = index;
                self.compare(entry, &applied.ran.fingerprints, applied.state_hash)
            }
        };
        self.rehearsal.difference = difference;
        self.rehearsal.difference.as_ref()
    }

    fn compare(&mut self, entry: &Entry, outcomes: &[u32], hash: StateHash) -> Option<Difference> {
        let index = entry.index();
        if let Some(record) = self.journal.records.get(&index) {
            self.rehearsal.journaled += 1;
            let length = outcomes.len().max(record.outcomes.len());
            let at = |list: &[u32], i: usize| list.get(i).copied().unwrap_or(0);
            if let Some(command) = (0..length).find(|&i| at(outcomes, i) != at(&record.outcomes, i))
            {
                let described = describe::<H>(entry, command);
                let command = command as u32;
                return Some(Difference::Outcome {
                    index,
                    command,
                    described,
                });
            }
            if record.state_hash != hash {
                return Some(differs(index, hash, record.state_hash));
            }
        }
        if let Some(&recorded) = self.recorded.get(&index) {
            self.rehearsal.snapshots += 1;
            if recorded != hash {
                return Some(differs(index, hash, recorded));
            }
        }
        None
    }
}

fn differs(index: EntryIndex, replayed: StateHash, recorded: StateHash) -> Difference {
    Difference::StateHash {
        index,
        replayed,
        recorded,
    }
}

/// Command `at` of `entry`, decoded with this build's command type (or why it does not).
fn describe<H: Handler>(entry: &Entry, at: usize) -> String {
    if !matches!(entry.kind(), EntryKind::Commands | EntryKind::KeyedCommands) {
        return format!("{:?} entry", entry.kind());
    }
    let Ok((_, fragments, _)) = parse_payload_of(entry.kind(), &entry.payload) else {
        return "a payload that does not parse".into();
    };
    let mut seen = 0;
    for (fragment, mut bytes) in fragments {
        for _ in 0..fragment.command_count {
            let Ok((command, used)) = codec::decode_prefix::<H::Command>(bytes) else {
                return "a command that does not decode".into();
            };
            if seen == at {
                return format!("{command:?}");
            }
            bytes = &bytes[used..];
            seen += 1;
        }
    }
    "no such command".into()
}
