//! Recovery of a node from its data directory, in two steps. The plan reads everything and
//! decides, writing nothing: the hard state, the WAL scan, the newest snapshot that verifies
//! and that the log continues, what is garbage. A start then carries out only what the plan
//! proves is garbage (a torn tail never acknowledged, damage cut after its repair obligation
//! is durable, damaged snapshots moved to quarantine, a log behind or conflicting with a
//! committed snapshot) and replays the committed log; `runner recover` stops after the plan
//! and the replay in memory. A file the node cannot use under its configuration is never
//! deleted: the start is refused with the file, the reason and the setting to change.

use super::NodeError;
use super::data_dir::{self, DataDirError, DirLock, DirState, Identity, QUARANTINE_DIR};
use super::storage::{HARD_STATE_FILE, SNAPSHOT_DIR, WAL_DIR, read_hard_state, write_hard_state};
use crate::apply::StateMachine;
use crate::core::{HardState, LogBase, Recovered, Repair};
use crate::entry::EntryHash;
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId, Term};
use crate::snapshot::{
    Durable, ParseError, Snapshot, SnapshotError, list_snapshots, read_snapshot,
};
use crate::state::InstallError;
use crate::wal::{Access, Recovery, Wal};
use net::message::AppliedHash;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Replay progress is printed this often once a recovery takes longer than it.
const RECOVERY_PROGRESS_MS: u64 = 1_000;

/// The cluster and node a data directory must belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The cluster.
    pub cluster_id: u64,
    /// The node.
    pub node: NodeId,
}

/// How to recover.
#[derive(Clone, Debug)]
pub struct RecoveryOptions {
    /// State capacity in bytes.
    pub capacity_bytes: u64,
    /// Bytes after which the WAL starts a new segment.
    pub wal_segment_bytes: u64,
    /// Whose the directory must be; `None` checks no identity and stamps none.
    pub owner: Option<Owner>,
    /// The operator's explicit order to start empty and take the state from the leader: the
    /// log and snapshots are moved to quarantine (never deleted), the hard state is kept when
    /// it reads, and a repair obligation covers the log the node had.
    pub rebuild_from_leader: bool,
}

/// Why recovery refuses to start a node. Each message names the file, the reason and what to
/// change; nothing on disk was changed.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The data directory itself (lock, identity, room, permissions).
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// The hard state does not verify.
    #[error(
        "{path} is damaged ({reason}): it holds the node's term and vote. Restore it from a \
         backup of this node, or start the node with --rebuild-from-leader (its log and \
         snapshots are moved to {QUARANTINE_DIR}/ and it rejoins empty)"
    )]
    HardStateDamaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file cannot be read.
    #[error("{path} cannot be read ({source}): make it readable by the node")]
    Unreadable {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// An intact snapshot of another format or build.
    #[error("snapshot {path} is {problem}: run the build that wrote it")]
    SnapshotBuild {
        /// The snapshot.
        path: PathBuf,
        /// What is wrong.
        problem: ParseError,
    },
    /// An intact snapshot that does not fit this configuration or handler.
    #[error(
        "snapshot {path} cannot be loaded: {problem}: {}",
        install_advice(problem)
    )]
    SnapshotConfig {
        /// The snapshot.
        path: PathBuf,
        /// What is wrong.
        problem: InstallError,
    },
    /// The log was compacted behind snapshots none of which can be used.
    #[error(
        "no usable state in {dir}: the log in {WAL_DIR}/ starts at entry {first}, and no \
         snapshot that it continues can be used ({}). Restore a snapshot from a backup, or \
         start the node with --rebuild-from-leader (its log and snapshots are moved to \
         {QUARANTINE_DIR}/ and it rejoins empty)",
        passed_over(snapshots)
    )]
    NoUsableState {
        /// The data directory.
        dir: PathBuf,
        /// The first entry the log holds.
        first: EntryIndex,
        /// Each snapshot passed over and why.
        snapshots: Vec<String>,
    },
}

fn install_advice(problem: &InstallError) -> String {
    match problem {
        InstallError::Capacity { needed_bytes, .. } => {
            format!("raise capacity_bytes to at least {needed_bytes}")
        }
        InstallError::UnknownTable { table } => {
            format!("run a handler build whose schema declares table {table}")
        }
        InstallError::Records { .. } | InstallError::StateHash { .. } => {
            "run the handler build that wrote it".into()
        }
    }
}

fn passed_over(snapshots: &[String]) -> String {
    if snapshots.is_empty() {
        "there is none".into()
    } else {
        snapshots.join("; ")
    }
}

/// What a node recovered: its state machine with the committed prefix of its WAL applied, its
/// WAL, and what the consensus core needs.
pub struct Restored<H: Handler> {
    /// The data directory's lock, held until the node's last thread ends.
    pub lock: DirLock,
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

/// What `runner recover` learns: the state a start would recover, and how.
pub struct Inspection<H: Handler> {
    /// The state machine a start would run with.
    pub machine: StateMachine<H>,
    /// What a start would do.
    pub report: RecoveryReport,
}

/// How a recovery went (or, from [`inspect`], would go).
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// The directory was absent or empty: a first start.
    pub first_start: bool,
    /// The identity was stamped (a first start, or a directory from before identities).
    pub stamped: bool,
    /// The snapshot used: its index and size in bytes.
    pub snapshot: Option<(EntryIndex, u64)>,
    /// Snapshots passed over, with the reason.
    pub passed_over: Vec<String>,
    /// Files moved to quarantine (damaged snapshots, or everything on a rebuild).
    pub quarantined: Vec<PathBuf>,
    /// Entries replayed from the WAL after the snapshot.
    pub replayed: u64,
    /// WAL entries removed because they lie behind the snapshot or conflict with it (an
    /// unfinished install).
    pub discarded: u64,
    /// Bytes of a torn tail cut off the WAL (an append that never completed).
    pub torn_tail_bytes: u64,
    /// Damage found in the WAL: what was cut, and the repair it waits for.
    pub damage: Option<String>,
    /// The node was rebuilt empty on the operator's order, and what it keeps of before.
    pub rebuilt: Option<String>,
    /// Time the whole recovery took.
    pub took: Duration,
}

impl RecoveryReport {
    /// True when there is something to say beyond a first start.
    pub fn is_notable(&self) -> bool {
        self.snapshot.is_some()
            || self.replayed > 0
            || !self.passed_over.is_empty()
            || self.damage.is_some()
            || self.rebuilt.is_some()
            || self.torn_tail_bytes > 0
            || self.discarded > 0
            || self.stamped
    }
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.first_start {
            write!(f, "first start, ")?;
        }
        match self.snapshot {
            Some((index, bytes)) => write!(
                f,
                "snapshot at entry {index} ({:.1} MiB)",
                bytes as f64 / (1024.0 * 1024.0)
            )?,
            None => write!(f, "no snapshot")?,
        }
        let ms = self.took.as_secs_f64() * 1e3;
        write!(f, ", {} entries replayed, {ms:.0} ms", self.replayed)?;
        if self.torn_tail_bytes > 0 {
            write!(f, ", a torn tail of {} bytes cut", self.torn_tail_bytes)?;
        }
        if self.discarded > 0 {
            write!(
                f,
                ", {} WAL entries behind the snapshot removed",
                self.discarded
            )?;
        }
        if self.stamped {
            write!(f, ", identity stamped")?;
        }
        for passed in &self.passed_over {
            write!(f, "; passed over {passed}")?;
        }
        for path in &self.quarantined {
            write!(f, "; moved to quarantine: {}", path.display())?;
        }
        if let Some(damage) = &self.damage {
            write!(f, "; {damage}")?;
        }
        if let Some(rebuilt) = &self.rebuilt {
            write!(f, "; {rebuilt}")?;
        }
        Ok(())
    }
}

/// What the plan decided, before anything is written.
struct Plan<H: Handler> {
    machine: StateMachine<H>,
    wal: Wal,
    recovery: Recovery,
    hard_state: HardState,
    /// The hard state must be written before the damage is cut (a new repair obligation).
    repair_added: bool,
    chosen: Option<Durable>,
    base: LogBase,
    /// The log lies behind the chosen snapshot or conflicts with it: it is emptied to
    /// continue after it.
    reset_log: bool,
    /// Damaged snapshots passed over, for quarantine.
    damaged: Vec<PathBuf>,
    /// The identity to stamp (new, or with tables added), if any.
    stamp: Option<Identity>,
    report: RecoveryReport,
}

/// Recovers a node from `dir`, as a start does: the directory's lock first, then its identity,
/// the plan and what it proves garbage, then the replay of every committed entry the WAL
/// holds after the snapshot. A directory that is absent (its parent present) or empty is a
/// first start: created and stamped.
pub fn restore<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
) -> Result<Restored<H>, NodeError> {
    let started = Instant::now();
    let state = data_dir::dir_state(dir).map_err(Refusal::from)?;
    if state == DirState::Absent {
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        data_dir::check_writable(parent.unwrap_or(Path::new("."))).map_err(Refusal::from)?;
        data_dir::create_dir(dir).map_err(Refusal::from)?;
    }
    let lock = DirLock::exclusive(dir).map_err(Refusal::from)?;
    data_dir::check_writable(dir).map_err(Refusal::from)?;
    let identity = check_identity(dir, options, &handler)?;
    let first_start = state != DirState::Holds;
    let mut plan = if options.rebuild_from_leader {
        rebuild_from_leader(dir, handler, options, identity)?
    } else {
        let plan = plan(dir, handler, options, identity, Access::ReadWrite)?;
        carry_out(dir, plan)?
    };
    plan.report.first_start = first_start;
    if let Some(identity) = &plan.stamp {
        data_dir::write_identity(dir, identity).map_err(Refusal::from)?;
    }
    let core = replay(&mut plan)?;
    plan.report.took = started.elapsed();
    Ok(Restored {
        lock,
        machine: plan.machine,
        wal: plan.wal,
        core,
        recovery: plan.recovery,
        snapshot: plan.chosen,
        report: plan.report,
    })
}

/// Works out what a start of `dir` would do, writing nothing (the WAL is opened read-only and
/// replayed in memory): `Err` with the refusal a start would give.
pub fn inspect<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
) -> Result<Inspection<H>, NodeError> {
    let started = Instant::now();
    let state = data_dir::dir_state(dir).map_err(Refusal::from)?;
    let mut report = RecoveryReport {
        first_start: state != DirState::Holds,
        ..RecoveryReport::default()
    };
    if state == DirState::Absent {
        report.stamped = options.owner.is_some();
        let machine = StateMachine::new(handler, options.capacity_bytes);
        return Ok(Inspection { machine, report });
    }
    let _lock = DirLock::shared(dir).map_err(Refusal::from)?;
    data_dir::check_writable(dir).map_err(Refusal::from)?;
    let identity = check_identity(dir, options, &handler)?;
    let mut plan = plan(dir, handler, options, identity, Access::ReadOnly)?;
    plan.report.first_start = report.first_start;
    plan.report.quarantined = plan.damaged.clone();
    replay(&mut plan)?;
    plan.report.took = started.elapsed();
    Ok(Inspection {
        machine: plan.machine,
        report: plan.report,
    })
}

/// Reads the identity stamped in `dir` and checks it against the owner and the handler's
/// schema; returns the identity to stamp when none is (or tables are added).
fn check_identity<H: Handler>(
    dir: &Path,
    options: &RecoveryOptions,
    handler: &H,
) -> Result<Option<Identity>, NodeError> {
    let Some(owner) = options.owner else {
        return Ok(None);
    };
    let schema = handler.schema();
    match data_dir::read_identity(dir).map_err(Refusal::from)? {
        None => Ok(Some(Identity::new(owner.cluster_id, owner.node, &schema))),
        Some(mut identity) => {
            identity
                .check(dir, owner.cluster_id, owner.node, &schema)
                .map_err(Refusal::from)?;
            Ok(identity.add_tables(&schema).then_some(identity))
        }
    }
}

/// Reads the hard state; a damaged one is a refusal.
fn hard_state(dir: &Path) -> Result<HardState, NodeError> {
    match read_hard_state(dir) {
        Ok(state) => Ok(state),
        Err(NodeError::Corrupt { path, reason }) => {
            Err(Refusal::HardStateDamaged { path, reason }.into())
        }
        Err(other) => Err(other),
    }
}

/// Reads and decides, writing nothing.
fn plan<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
    stamp: Option<Identity>,
    access: Access,
) -> Result<Plan<H>, NodeError> {
    let mut hard_state = hard_state(dir)?;
    let (wal, recovery) =
        Wal::scan_repairing(&dir.join(WAL_DIR), options.wal_segment_bytes, access)?;
    let mut report = RecoveryReport {
        stamped: stamp.is_some(),
        torn_tail_bytes: wal.torn_tail_bytes(),
        ..RecoveryReport::default()
    };
    let repair_added = recovery.damage.is_some();
    if let Some(damage) = &recovery.damage {
        // The damaged entries may have been acknowledged: until a leader has given them back,
        // this replica votes as if it held them and never campaigns.
        let repair = damage_repair(damage);
        hard_state.repair = Some(match hard_state.repair {
            Some(earlier) => earlier.merge(repair),
            None => repair,
        });
        report.damage = Some(format!(
            "entry {} damaged ({}, {} at offset {}): the log is cut before it and repaired \
             from the leader through entry {}",
            damage.index,
            damage.reason,
            damage.path.display(),
            damage.offset,
            hard_state.repair.map_or(damage.index, |r| r.index)
        ));
    }
    let mut machine = StateMachine::new(handler, options.capacity_bytes);
    let (chosen, damaged) = choose_snapshot(dir, &wal, &mut machine, &mut report)?;
    let (base, reset_log) = log_base(dir, &wal, chosen.as_ref(), &report)?;
    if reset_log {
        report.discarded = wal.last_index().0 + 1 - wal.first_index().0;
    }
    Ok(Plan {
        machine,
        wal,
        recovery,
        hard_state,
        repair_added,
        chosen,
        base,
        reset_log,
        damaged,
        stamp,
        report,
    })
}

/// The repair obligation of damage found in the WAL.
fn damage_repair(damage: &crate::wal::Damage) -> Repair {
    match damage.last {
        Some((index, term)) => Repair {
            index,
            term,
            committed: damage.committed,
        },
        // Nothing beyond the damage is readable: no candidate can be known to hold what was
        // lost, so no vote is granted until the log is whole again.
        None => Repair {
            index: damage.index,
            term: Term(u64::MAX),
            committed: damage.committed,
        },
    }
}

/// The newest snapshot that verifies and that the WAL continues, installed into `machine`;
/// with the damaged snapshots passed over on the way. An intact snapshot that does not fit
/// the configuration or the handler refuses the start: it is the configuration that is wrong,
/// and an older snapshot replayed under it would not give the state the others have.
fn choose_snapshot<H: Handler>(
    dir: &Path,
    wal: &Wal,
    machine: &mut StateMachine<H>,
    report: &mut RecoveryReport,
) -> Result<(Option<Durable>, Vec<PathBuf>), NodeError> {
    let snapshots_dir = dir.join(SNAPSHOT_DIR);
    let snapshots = list_snapshots(&snapshots_dir).map_err(|source| Refusal::Unreadable {
        path: snapshots_dir.clone(),
        source,
    })?;
    let mut damaged = Vec::new();
    for (index, path) in snapshots {
        if wal.first_index() > index.next() {
            report.passed_over.push(format!(
                "{}: the log after it is gone (the WAL starts at {})",
                path.display(),
                wal.first_index()
            ));
            continue;
        }
        let snapshot = match read_snapshot(&path) {
            Ok(snapshot) => snapshot,
            Err(SnapshotError::Invalid { path, problem }) if problem.is_damage() => {
                report
                    .passed_over
                    .push(format!("{}: {problem}", path.display()));
                damaged.push(path);
                continue;
            }
            Err(SnapshotError::Invalid { path, problem }) => {
                return Err(Refusal::SnapshotBuild { path, problem }.into());
            }
            Err(SnapshotError::Io { path, source }) => {
                return Err(Refusal::Unreadable { path, source }.into());
            }
        };
        let durable = install(machine, snapshot, path)?;
        report.snapshot = Some((index, durable.bytes));
        return Ok((Some(durable), damaged));
    }
    Ok((None, damaged))
}

fn install<H: Handler>(
    machine: &mut StateMachine<H>,
    snapshot: Snapshot,
    path: PathBuf,
) -> Result<Durable, NodeError> {
    let meta = snapshot.meta.clone();
    let bytes = snapshot.file_bytes;
    if let Err(problem) = machine.install(snapshot) {
        return Err(Refusal::SnapshotConfig { path, problem }.into());
    }
    Ok(Durable {
        meta,
        path,
        bytes,
        took: Duration::ZERO,
    })
}

/// Where the log starts after the chosen snapshot, and whether the WAL must be emptied to get
/// there (it lies behind the snapshot or conflicts with it: the snapshot is of committed
/// state, so those entries are garbage). Without a snapshot the log must start at entry 1.
fn log_base(
    dir: &Path,
    wal: &Wal,
    chosen: Option<&Durable>,
    report: &RecoveryReport,
) -> Result<(LogBase, bool), NodeError> {
    match chosen {
        Some(durable) => {
            let meta = &durable.meta;
            let base = LogBase {
                index: meta.index,
                term: meta.term,
                hash: meta.entry_hash,
            };
            Ok((base, !wal_continues(wal, meta.index, meta.entry_hash)))
        }
        None if wal.first_index() > EntryIndex(1) => Err(Refusal::NoUsableState {
            dir: dir.to_path_buf(),
            first: wal.first_index(),
            snapshots: report.passed_over.clone(),
        }
        .into()),
        None => Ok((LogBase::default(), false)),
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

/// Carries out what the plan proved garbage, in an order that a crash at any point leaves
/// recoverable: the repair obligation before the damage is cut, the torn tail, damaged
/// snapshots to quarantine, then a log behind the snapshot.
fn carry_out<H: Handler>(dir: &Path, mut plan: Plan<H>) -> Result<Plan<H>, NodeError> {
    if plan.repair_added {
        write_hard_state(dir, plan.hard_state)?;
        plan.wal.cut_damage()?;
    }
    plan.wal.settle()?;
    if !plan.damaged.is_empty() {
        let name = format!("{}-damaged-snapshots", unix_ms());
        let folder = data_dir::quarantine(dir, &name, &plan.damaged).map_err(Refusal::from)?;
        plan.report.quarantined = plan
            .damaged
            .iter()
            .map(|path| folder.join(path.strip_prefix(dir).unwrap_or(path)))
            .collect();
    }
    if plan.reset_log {
        plan.wal.reset_to(plan.base.index, plan.base.hash)?;
    }
    Ok(plan)
}

/// The operator's order to start empty: everything but the hard state (when it reads) goes to
/// quarantine, and a repair obligation covering the log the node had is made durable first.
fn rebuild_from_leader<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
    stamp: Option<Identity>,
) -> Result<Plan<H>, NodeError> {
    let (hard, hard_damaged) = match hard_state(dir) {
        Ok(state) => (state, false),
        Err(NodeError::Refused(Refusal::HardStateDamaged { .. })) => (HardState::default(), true),
        Err(other) => return Err(other),
    };
    let repair = rebuilt_repair(dir, options)?;
    let mut hard_state = hard;
    hard_state.repair = match (hard_state.repair, repair) {
        (Some(earlier), Some(repair)) => Some(earlier.merge(repair)),
        (earlier, repair) => earlier.or(repair),
    };
    let mut moved: Vec<PathBuf> = [WAL_DIR, SNAPSHOT_DIR]
        .iter()
        .map(|name| dir.join(name))
        .filter(|path| path.exists())
        .collect();
    if hard_damaged {
        moved.push(dir.join(HARD_STATE_FILE));
    }
    let name = format!("{}-rebuild-from-leader", unix_ms());
    let folder = data_dir::quarantine(dir, &name, &moved).map_err(Refusal::from)?;
    write_hard_state(dir, hard_state)?;
    let (wal, recovery) = Wal::open_repairing(&dir.join(WAL_DIR), options.wal_segment_bytes)?;
    let rebuilt = format!(
        "rebuilt empty on the operator's order (--rebuild-from-leader): {} moved to {}; {}",
        if moved.is_empty() {
            "nothing".to_string()
        } else {
            describe(dir, &moved)
        },
        folder.display(),
        match hard_state.repair {
            Some(r) => format!(
                "no campaign, and votes only as the log through entry {} allows, until the leader has given it back",
                r.index
            ),
            None => "it held no log".into(),
        }
    );
    Ok(Plan {
        machine: StateMachine::new(handler, options.capacity_bytes),
        wal,
        recovery,
        hard_state,
        repair_added: false,
        chosen: None,
        base: LogBase::default(),
        reset_log: false,
        damaged: Vec::new(),
        stamp,
        report: RecoveryReport {
            quarantined: moved
                .iter()
                .map(|p| folder.join(p.strip_prefix(dir).unwrap_or(p)))
                .collect(),
            rebuilt: Some(rebuilt),
            ..RecoveryReport::default()
        },
    })
}

fn describe(dir: &Path, paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.strip_prefix(dir).unwrap_or(p).display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The repair obligation of a node about to be rebuilt: the end of the log it may have
/// acknowledged (the WAL's last entry, or beyond damage), or a snapshot's entry when only a
/// snapshot is left (its term unknown: no candidate is taken for holding it).
fn rebuilt_repair(dir: &Path, options: &RecoveryOptions) -> Result<Option<Repair>, NodeError> {
    let (wal, recovery) = Wal::scan_repairing(
        &dir.join(WAL_DIR),
        options.wal_segment_bytes,
        Access::ReadOnly,
    )?;
    let mut repair = (wal.last_index() > EntryIndex::ZERO).then(|| Repair {
        index: wal.last_index(),
        term: wal.last_term(),
        committed: wal.max_commit(),
    });
    if let Some(damage) = &recovery.damage {
        let lost = damage_repair(damage);
        repair = Some(repair.map_or(lost, |r| r.merge(lost)));
    }
    let snapshots = list_snapshots(&dir.join(SNAPSHOT_DIR)).unwrap_or_default();
    if let Some((index, _)) = snapshots.first()
        && repair.is_none_or(|r| r.index < *index)
    {
        let only = Repair {
            index: *index,
            term: Term(u64::MAX),
            committed: *index,
        };
        repair = Some(repair.map_or(only, |r| r.merge(only)));
    }
    Ok(repair)
}

/// Replays every entry the WAL shows committed after the base; returns what the consensus
/// core needs. A log the plan empties (behind or conflicting with the snapshot) is taken as
/// empty, emptied yet or not.
fn replay<H: Handler>(plan: &mut Plan<H>) -> Result<Recovered, NodeError> {
    let (wal, base) = (&plan.wal, plan.base);
    let last = if plan.reset_log {
        base.index
    } else {
        wal.last_index()
    };
    let committed = wal.max_commit().min(last).max(base.index);
    let mut applied = plan.chosen.as_ref().map(|d| AppliedHash {
        index: d.meta.index,
        hash: d.meta.state_hash,
    });
    let mut last_progress = Instant::now();
    for index in (base.index.0 + 1..=committed.0).map(EntryIndex) {
        let hash = plan.machine.apply(&wal.read(index)?)?.state_hash;
        applied = Some(AppliedHash { index, hash });
        plan.report.replayed += 1;
        if last_progress.elapsed() >= Duration::from_millis(RECOVERY_PROGRESS_MS) {
            last_progress = Instant::now();
            eprintln!(
                "recovery: replayed {} of {} entries",
                plan.report.replayed,
                committed.0 - base.index.0
            );
        }
    }
    let after_base = base.index.0 + 1..=last.0;
    let terms = after_base
        .clone()
        .map(|i| wal.term_at(EntryIndex(i)).expect("held"))
        .collect();
    let hashes = after_base
        .map(|i| wal.hash_at(EntryIndex(i)).expect("held"))
        .collect();
    let window = (committed.0 + 1..=last.0)
        .map(|i| wal.read(EntryIndex(i)))
        .collect::<Result<_, _>>()?;
    Ok(Recovered {
        hard_state: plan.hard_state,
        base,
        terms,
        hashes,
        window,
        applied,
    })
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}
