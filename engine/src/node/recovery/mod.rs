//! Recovery of a node from its data directory, in two steps. The plan reads everything and
//! decides, writing nothing: the hard state, the WAL scan, the newest snapshot that verifies
//! and that the log continues, what is garbage. A start then carries out only what the plan
//! proves is garbage (a torn tail never acknowledged, damage cut after its repair obligation
//! is durable, damaged snapshots moved to quarantine, a log behind or conflicting with a
//! committed snapshot) and replays the committed log; `runner recover` stops after the plan
//! and the replay in memory. A file the node cannot use under its configuration is never
//! deleted: the start is refused with the file, the reason and the setting to change.

mod plan;
pub(crate) use plan::not_as_named;
mod rebuild;
pub mod replay;

use super::NodeError;
use crate::apply::{Applied, StateMachine};
use crate::core::{KnownMembers, KnownRead, Recovered};
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId};
use crate::snapshot::{Durable, ParseError};
use crate::state::{CapacityTooSmall, InstallError};
use crate::storage::data_dir::{self, DataDirError, DirLock, DirState, Identity, QUARANTINE_DIR};
use crate::storage::hard_state::WAL_DIR;
use crate::storage::journal::{JournalRecord, JournalWriter};
use crate::storage::members_file::{MEMBERS_FILE, MembersFileError, read_known_members_on};
use crate::storage::{Files, Storage};
use crate::wal::{Access, Recovery, Wal};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    /// Live client sessions the state keeps.
    pub sessions_max: usize,
    /// Seconds a client session is kept inactive.
    pub session_retention_s: u64,
    /// Bytes after which the WAL starts a new segment.
    pub wal_segment_bytes: u64,
    /// Whose the directory must be; `None` checks no identity and stamps none.
    pub owner: Option<Owner>,
    /// The operator's explicit order to start empty and take the state from the leader: the
    /// log and snapshots are moved to quarantine (never deleted), the hard state is kept when
    /// it reads, and a repair obligation covers the log the node had.
    pub rebuild_from_leader: bool,
    /// Entries after this one are replayed with what each command answered kept
    /// ([`crate::apply::Applied::ran`]), for the apply journal, which ends there; `None`
    /// keeps nothing.
    pub keep_outcomes_after: Option<EntryIndex>,
}

impl RecoveryOptions {
    /// An empty state machine for `handler` with these options' capacity and session limits.
    /// The entry points ([`restore`], [`inspect`], [`recover_on`]) refuse a capacity below the
    /// handler's empty tables before any calls this.
    pub fn machine<H: Handler>(&self, handler: H) -> StateMachine<H> {
        let mut machine = StateMachine::new(handler, self.capacity_bytes);
        machine.set_sessions_max(self.sessions_max);
        machine.set_session_retention_s(self.session_retention_s);
        machine
    }
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
    /// The hard state is missing beside a log or snapshots.
    #[error(
        "{path} is missing, but the directory holds a log or snapshots: the node's term and \
         vote are lost. Restore it from a backup of this node, or start the node with \
         --rebuild-from-leader (its log and snapshots are moved to {QUARANTINE_DIR}/ and it \
         rejoins empty)"
    )]
    HardStateMissing {
        /// The file.
        path: PathBuf,
    },
    /// The log's directory is missing beside a hard state or snapshots.
    #[error(
        "{path} is missing, but the directory holds a hard state or snapshots: the log after \
         the snapshot is lost. Restore it from a backup (an empty log is an empty directory), \
         or start the node with --rebuild-from-leader (it rejoins empty; an interrupted rebuild \
         left the old log in {QUARANTINE_DIR}/)"
    )]
    WalMissing {
        /// The directory.
        path: PathBuf,
    },
    /// An intact snapshot of another format or build.
    #[error("snapshot {path} cannot be read by this build: {problem}: run the build that wrote it")]
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

impl Refusal {
    /// The reason in a few words, without the advice.
    pub fn summary(&self) -> String {
        match self {
            Refusal::HardStateDamaged { reason, .. } => format!("hard_state damaged ({reason})"),
            Refusal::HardStateMissing { .. } => "hard_state missing".into(),
            Refusal::WalMissing { .. } => format!("{WAL_DIR}/ missing"),
            Refusal::Unreadable { path, source } => {
                format!("{} unreadable ({source})", path.display())
            }
            Refusal::NoUsableState { first, .. } => {
                format!("no usable state (the log starts at entry {first}, no usable snapshot)")
            }
            Refusal::DataDir(_)
            | Refusal::SnapshotBuild { .. }
            | Refusal::SnapshotConfig { .. } => self.to_string(),
        }
    }

    /// True when the data is what cannot be used (damaged or missing), so that starting
    /// empty (`--rebuild-from-leader`) is a way out; false when the directory or the
    /// configuration is wrong (a leader's snapshot would not fit either).
    pub fn rebuild_applies(&self) -> bool {
        match self {
            Refusal::HardStateDamaged { .. }
            | Refusal::HardStateMissing { .. }
            | Refusal::WalMissing { .. }
            | Refusal::NoUsableState { .. } => true,
            // Unreadable is most often permissions: the data may well be fine.
            Refusal::Unreadable { .. }
            | Refusal::DataDir(_)
            | Refusal::SnapshotBuild { .. }
            | Refusal::SnapshotConfig { .. } => false,
        }
    }
}

fn install_advice(problem: &InstallError) -> String {
    match problem {
        InstallError::Capacity { needed_bytes, .. } => {
            format!("raise capacity_bytes to at least {needed_bytes}")
        }
        InstallError::UnknownTable { table } => {
            format!("run a handler build whose schema declares table {table}")
        }
        InstallError::HandlerVersion { version, .. } => {
            format!("run a handler build that supports handler version {version}")
        }
        InstallError::Records { .. } | InstallError::StateHash { .. } => {
            "run the handler build that wrote it".into()
        }
        InstallError::DeltaSlots { .. } | InstallError::NotContinued { .. } => {
            "move the delta files after the newest whole snapshot aside; the log replays them"
                .into()
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
    /// The whole snapshot recovery started from, if any (the deltas over it aside): the one a
    /// follower is sent.
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
    /// The whole snapshot used: its index and size in bytes.
    pub snapshot: Option<(EntryIndex, u64)>,
    /// Entries the deltas loaded over it cover (`notes/decisions/snapshot-deltas.md`).
    pub deltas: u64,
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
    /// `--rebuild-from-leader` was given but the data is usable: it started as it was.
    pub rebuild_ignored: bool,
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
            || self.rebuild_ignored
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
        if let Some((index, _)) = self.snapshot.filter(|_| self.deltas > 0) {
            write!(f, " and its deltas through entry {}", index.0 + self.deltas)?;
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
        if self.rebuild_ignored {
            write!(f, "; --rebuild-from-leader ignored: the data is usable")?;
        }
        Ok(())
    }
}

/// Recovers a node from `dir`, as a start does: the directory's lock first, then its identity,
/// the plan and the replay of every committed entry the WAL holds after the snapshot (both in
/// memory), and only then what the plan proved garbage and the identity stamp. A directory that
/// is absent (its parent present) or empty is a first start: created and stamped. With
/// `rebuild_from_leader`, data that cannot be used is moved to quarantine and the node starts
/// empty; usable data starts as it is.
pub fn restore<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
) -> Result<Restored<H>, NodeError> {
    CapacityTooSmall::check(&handler.schema(), options.capacity_bytes)?;
    let started = Instant::now();
    let state = data_dir::dir_state(dir).map_err(Refusal::from)?;
    if state == DirState::Absent {
        data_dir::check_creatable(dir).map_err(Refusal::from)?;
        data_dir::create_dir(dir).map_err(Refusal::from)?;
    }
    let lock = DirLock::exclusive(dir).map_err(Refusal::from)?;
    data_dir::check_writable(dir).map_err(Refusal::from)?;
    data_dir::warn_if_open(dir);
    let stamp = check_identity(dir, options, &handler)?;
    let mut journal = CatchUp::open(Files, dir);
    let options = &RecoveryOptions {
        keep_outcomes_after: journal.as_ref().map(CatchUp::written),
        ..options.clone()
    };
    let started_on = recover_on(&Files, dir, handler, options, stamp, |applied| {
        if let Some(journal) = journal.as_mut() {
            journal.replayed(applied);
        }
    })?;
    if let Some(journal) = journal {
        journal.finish();
    }
    let Started {
        machine,
        wal,
        core,
        recovery,
        snapshot,
        mut report,
        stamp,
    } = started_on;
    report.rebuild_ignored &= state == DirState::Holds;
    report.first_start = state != DirState::Holds;
    if let Some(identity) = &stamp {
        data_dir::write_identity(dir, identity).map_err(Refusal::from)?;
    }
    report.took = started.elapsed();
    Ok(Restored {
        lock,
        machine,
        wal,
        core,
        recovery,
        snapshot,
        report,
    })
}

/// The apply journal brought up to a restart's replay: the entries replayed past its last
/// record are journaled, so that the change stream has no gap where a crash lost the
/// journal's unwritten tail.
pub(crate) struct CatchUp<S: Storage> {
    writer: JournalWriter<S>,
    written: EntryIndex,
}

impl<S: Storage> CatchUp<S> {
    /// The journal of `dir` on `storage`, if it opens (a node goes on without it, as the WAL
    /// thread does).
    pub(crate) fn open(storage: S, dir: &Path) -> Option<CatchUp<S>> {
        let writer = JournalWriter::open_on(storage, dir)
            .map_err(|error| tracing::warn!(%error, "no apply journal"))
            .ok()?;
        let written = writer.written().unwrap_or(EntryIndex::ZERO);
        Some(CatchUp { writer, written })
    }

    /// The last entry the journal held at the start.
    pub(crate) fn written(&self) -> EntryIndex {
        self.written
    }

    /// Journals `applied` when the journal did not hold it.
    pub(crate) fn replayed(&mut self, applied: &Applied) {
        if applied.index > self.written {
            let ran = applied.ran.clone();
            self.writer
                .append(&JournalRecord::of(applied.index, applied.state_hash, ran));
        }
    }

    /// Writes what the replay journaled.
    pub(crate) fn finish(mut self) {
        if let Err(error) = self.writer.flush() {
            tracing::warn!(%error, "the apply journal misses the entries replayed");
        }
    }
}

/// What a start on any storage leaves a node with.
pub struct Started<H: Handler, S: Storage> {
    /// The state machine, at the last committed entry the log holds.
    pub machine: StateMachine<H>,
    /// The log, ready for appends.
    pub wal: Wal<S>,
    /// What the consensus core starts from.
    pub core: Recovered,
    /// What the WAL's scan found.
    pub recovery: Recovery,
    /// The snapshot started from.
    pub snapshot: Option<Durable>,
    /// What recovery did.
    pub report: RecoveryReport,
    /// The identity to stamp, if any.
    pub stamp: Option<Identity>,
}

/// Recovers the data in `dir` on `storage` as a start does once the directory is locked and
/// its identity checked (`stamp`): the plan and the replay in memory, then what the plan
/// proved garbage. With `rebuild_from_leader`, data the plan refuses for a reason a rebuild
/// answers is moved to quarantine and the node starts empty. `applied` hears each entry
/// replayed (with what its commands answered, past `options.keep_outcomes_after`). The node runs it on its files, the simulator on
/// its simulated disks.
pub fn recover_on<S: Storage, H: Handler>(
    storage: &S,
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
    stamp: Option<Identity>,
    applied: impl FnMut(&Applied),
) -> Result<Started<H, S>, NodeError> {
    CapacityTooSmall::check(&handler.schema(), options.capacity_bytes)?;
    // Read before anything is carried out, so that a record that cannot be read refuses the
    // start with the directory as it was.
    let known = match read_known_members_on(storage, dir) {
        Err(MembersFileError::Io { path, source }) => {
            return Err(Refusal::Unreadable { path, source }.into());
        }
        read => read,
    };
    let read_write = (stamp.clone(), Access::ReadWrite);
    let (plan, core) = match plan::plan(storage, dir, handler, options, read_write) {
        Ok(mut plan) => {
            plan.report.rebuild_ignored = options.rebuild_from_leader;
            let core = plan::replay(&mut plan, options.keep_outcomes_after, applied)?;
            (plan::carry_out(dir, plan)?, core)
        }
        Err((NodeError::Refused(refusal), handler))
            if options.rebuild_from_leader && refusal.rebuild_applies() =>
        {
            let why = (stamp, &refusal);
            let mut plan = rebuild::rebuild_from_leader(storage, dir, handler, options, why)?;
            let core = plan::replay(&mut plan, options.keep_outcomes_after, applied)?;
            (plan, core)
        }
        Err((error, _)) => return Err(error),
    };
    let mut plan = plan;
    let mut core = core;
    core.known = keep_known(storage, dir, known, &mut plan.report)?;
    Ok(Started {
        machine: plan.machine,
        wal: plan.wal,
        core,
        recovery: plan.recovery,
        snapshot: plan.whole,
        report: plan.report,
        stamp: plan.stamp,
    })
}

/// The record of known members read from `dir` (`storage::members_file`), for the core. A missing one
/// is a directory from before it was kept; a damaged one is said so, copied to quarantine
/// (never deleted: the node writes a new record over it once it has a floor for one) and not
/// relied on, so that a rebuild after a lost hard state hears only the nodes its lists name,
/// as it did before the record was kept.
fn keep_known<S: Storage>(
    storage: &S,
    dir: &Path,
    read: Result<Option<KnownMembers>, MembersFileError>,
    report: &mut RecoveryReport,
) -> Result<KnownRead, NodeError> {
    match read {
        Ok(Some(known)) => Ok(KnownRead::Whole(known)),
        Ok(None) => Ok(KnownRead::Missing),
        Err(MembersFileError::Damaged { path, reason }) => {
            tracing::warn!(
                path = %path.display(),
                reason,
                "the record of known members is damaged: a rebuild after a lost hard state \
                 hears only the nodes its lists name; a new record replaces it"
            );
            let name = format!("{}-damaged-members", rebuild::unix_ms());
            data_dir::quarantine_copy(storage, dir, &name, std::slice::from_ref(&path))
                .map_err(Refusal::from)?;
            let folder = dir.join(QUARANTINE_DIR).join(name);
            report.quarantined.push(folder.join(MEMBERS_FILE));
            Ok(KnownRead::Damaged)
        }
        Err(MembersFileError::Io { path, source }) => {
            Err(Refusal::Unreadable { path, source }.into())
        }
    }
}

/// Works out what a start of `dir` would do, writing nothing (the WAL is opened read-only and
/// replayed in memory): `Err` with the refusal a start would give. A start with
/// `rebuild_from_leader` is not worked out: the refusal is what it would rebuild from.
pub fn inspect<H: Handler>(
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
) -> Result<Inspection<H>, NodeError> {
    CapacityTooSmall::check(&handler.schema(), options.capacity_bytes)?;
    let started = Instant::now();
    let state = data_dir::dir_state(dir).map_err(Refusal::from)?;
    if state == DirState::Absent {
        data_dir::check_creatable(dir).map_err(Refusal::from)?;
        let report = RecoveryReport {
            first_start: true,
            stamped: true,
            ..RecoveryReport::default()
        };
        let machine = options.machine(handler);
        return Ok(Inspection { machine, report });
    }
    let _lock = DirLock::shared(dir).map_err(Refusal::from)?;
    data_dir::check_writable(dir).map_err(Refusal::from)?;
    let stamp = check_identity(dir, options, &handler)?;
    let unstamped = data_dir::read_identity(dir)
        .map_err(Refusal::from)?
        .is_none();
    let read_only = (stamp, Access::ReadOnly);
    let mut plan = plan::plan(&Files, dir, handler, options, read_only).map_err(|(e, _)| e)?;
    plan.report.first_start = state != DirState::Holds;
    // A start stamps a directory that holds no identity, whoever it is checked against.
    plan.report.stamped |= unstamped;
    plan.report.quarantined = plan.damaged.clone();
    plan::replay(&mut plan, None, |_| {})?;
    plan.report.took = started.elapsed();
    Ok(Inspection {
        machine: plan.machine,
        report: plan.report,
    })
}

/// Reads the identity stamped in `dir` (a damaged one is a refusal, whoever the directory is
/// checked against) and checks it against the owner and the handler's schema; returns the
/// identity to stamp when none is (or tables are added).
fn check_identity<H: Handler>(
    dir: &Path,
    options: &RecoveryOptions,
    handler: &H,
) -> Result<Option<Identity>, NodeError> {
    let stamped = data_dir::read_identity(dir).map_err(Refusal::from)?;
    let Some(owner) = options.owner else {
        return Ok(None);
    };
    let schema = handler.schema();
    match stamped {
        None => Ok(Some(Identity::new(owner.cluster_id, owner.node, &schema))),
        Some(mut identity) => {
            identity
                .check(dir, owner.cluster_id, owner.node, &schema)
                .map_err(Refusal::from)?;
            Ok(identity.add_tables(&schema).then_some(identity))
        }
    }
}
