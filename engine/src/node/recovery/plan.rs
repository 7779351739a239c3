//! The plan: everything read and decided, nothing written; then what a start carries out of
//! it, and the replay of the committed log.

use super::{RecoveryOptions, RecoveryReport, Refusal, replay};
use crate::apply::{Applied, BuiltState, StateMachine};
use crate::core::{HardState, LogBase, Recovered, Repair};
use crate::handler::Handler;
use crate::ids::{EntryIndex, Term};
use crate::node::NodeError;
use crate::snapshot::{
    Durable, Snapshot, SnapshotError, list_deltas_on, list_snapshots_on, read_snapshot_on,
};
use crate::state::InstallError;
use crate::storage::data_dir::{self, Identity};
use crate::storage::hard_state::{
    HARD_STATE_DAMAGED_REASON, HARD_STATE_FILE, HardStateError, SNAPSHOT_DIR, WAL_DIR,
    read_hard_state_on, write_hard_state_on,
};
use crate::storage::{Files, Storage};
use crate::wal::{Access, Recovery, Wal};
use net::message::AppliedHash;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Replay progress is printed this often once a recovery takes longer than it.
const RECOVERY_PROGRESS_MS: u64 = 1_000;

/// What the plan decided, before anything is written.
pub(super) struct Plan<H: Handler, S: Storage = Files> {
    pub(super) machine: StateMachine<H>,
    pub(super) wal: Wal<S>,
    pub(super) recovery: Recovery,
    pub(super) hard_state: HardState,
    /// The hard state must be written before the damage is cut (a new repair obligation).
    pub(super) repair_added: bool,
    /// The newest file of the chosen chain (a whole snapshot, or its newest delta): the
    /// log replays after it.
    pub(super) chosen: Option<Durable>,
    /// The chain's whole snapshot: the one a follower can be sent.
    pub(super) whole: Option<Durable>,
    pub(super) base: LogBase,
    /// The log lies behind the chosen snapshot or conflicts with it: it is emptied to
    /// continue after it.
    pub(super) reset_log: bool,
    /// Damaged snapshots passed over, for quarantine.
    pub(super) damaged: Vec<PathBuf>,
    /// The identity to stamp (new, or with tables added), if any.
    pub(super) stamp: Option<Identity>,
    pub(super) report: RecoveryReport,
}

/// A plan that failed, with the handler back (for a rebuild).
pub(super) type Failed<H> = (NodeError, H);

/// Reads and decides, writing nothing: the hard state, the WAL scan (a torn tail and damage
/// noted, with the repair obligation the damage needs), the snapshot to start from, the log's
/// base.
pub(super) fn plan<S: Storage, H: Handler>(
    storage: &S,
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
    (stamp, access): (Option<Identity>, Access),
) -> Result<Plan<H, S>, Failed<H>> {
    let mut machine = options.machine(handler);
    let (files, early) = scan_beside_newest(storage, dir, options, access, &machine);
    let (mut hard_state, wal, recovery) = match files {
        Ok(read) => read,
        Err(error) => return Err((error, machine.into_handler())),
    };
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
    let chosen = choose_snapshot(storage, dir, &wal, (&mut machine, early), &mut report);
    let ((whole, chosen), damaged) = match chosen {
        Ok((chain, damaged)) => (chain.unzip(), damaged),
        Err(error) => return Err((error, machine.into_handler())),
    };
    let (base, reset_log) = match log_base(dir, &wal, whole.as_ref(), &report) {
        Ok(base) => base,
        Err(error) => return Err((error, machine.into_handler())),
    };
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
        whole,
        base,
        reset_log,
        damaged,
        stamp,
        report,
    })
}

/// What [`read_files`] reads: the hard state and the scanned WAL.
type ReadFiles<S> = (HardState, Wal<S>, Recovery);

/// The newest snapshot read and its state built (or why not), before the plan knows whether
/// the log continues it.
struct Early {
    path: PathBuf,
    read: Result<(Snapshot, Result<BuiltState, InstallError>), SnapshotError>,
}

/// [`read_files`] on a thread of its own while this one reads the newest snapshot and builds
/// its state, so that neither waits for the other on a second core (at 12,000,000 accounts,
/// 0.75 s to scan 450 MB of log beside 2 s to read and digest a 336 MB snapshot and to fill a
/// 1 GiB slot array whose memory the kernel must first hand over). Both only read. Without a
/// thread to be had, the scan runs here first.
fn scan_beside_newest<S: Storage, H: Handler>(
    storage: &S,
    dir: &Path,
    options: &RecoveryOptions,
    access: Access,
    machine: &StateMachine<H>,
) -> (Result<ReadFiles<S>, NodeError>, Option<Early>) {
    std::thread::scope(|scope| {
        let scan = std::thread::Builder::new()
            .name("wal-scan".into())
            .spawn_scoped(scope, || read_files(storage, dir, options, access));
        let Ok(scan) = scan else {
            let files = read_files(storage, dir, options, access);
            return (files, read_newest(storage, dir, machine));
        };
        let early = read_newest(storage, dir, machine);
        let files = scan
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (files, early)
    })
}

/// The newest snapshot's file read and verified, and its state built; `None` when there is no
/// snapshot (or the folder cannot be listed: [`choose_snapshot`] lists it again and says why).
fn read_newest<S: Storage, H: Handler>(
    storage: &S,
    dir: &Path,
    machine: &StateMachine<H>,
) -> Option<Early> {
    let listed = list_snapshots_on(storage, &dir.join(SNAPSHOT_DIR)).ok()?;
    let (_, path) = listed.into_iter().next()?;
    let read = read_snapshot_on(storage, &path).map(|snapshot| {
        let built = machine.build_state(&snapshot);
        (snapshot, built)
    });
    Some(Early { path, read })
}

/// The hard state and the WAL scan. A damaged hard state is refused; so is a missing one, or
/// a missing log directory, beside data (a node writes its hard state before its first entry
/// and keeps its log directory from its first start on).
fn read_files<S: Storage>(
    storage: &S,
    dir: &Path,
    options: &RecoveryOptions,
    access: Access,
) -> Result<ReadFiles<S>, NodeError> {
    let hard_state = match read_hard_state_on(storage, dir) {
        Ok(state) => state,
        Err(HardStateError::Damaged { path }) => {
            let reason = HARD_STATE_DAMAGED_REASON.to_string();
            return Err(Refusal::HardStateDamaged { path, reason }.into());
        }
        Err(other) => return Err(other.into()),
    };
    let exists = |path: PathBuf| match storage.exists(&path) {
        Ok(exists) => Ok(exists),
        Err(source) => Err(NodeError::from(Refusal::Unreadable { path, source })),
    };
    let hard_state_file = exists(dir.join(HARD_STATE_FILE))?;
    let wal_dir = exists(dir.join(WAL_DIR))?;
    let snapshots = !list_snapshots_on(storage, &dir.join(SNAPSHOT_DIR))
        .map_err(|source| Refusal::Unreadable {
            path: dir.join(SNAPSHOT_DIR),
            source,
        })?
        .is_empty();
    if !wal_dir && (hard_state_file || snapshots) {
        return Err(Refusal::WalMissing {
            path: dir.join(WAL_DIR),
        }
        .into());
    }
    let (wal, recovery) = Wal::scan_repairing_in(
        storage.clone(),
        &dir.join(WAL_DIR),
        options.wal_segment_bytes,
        access,
    )?;
    let holds_log = wal.last_index() >= wal.first_index() || recovery.damage.is_some();
    if !hard_state_file && (holds_log || snapshots) {
        return Err(Refusal::HardStateMissing {
            path: dir.join(HARD_STATE_FILE),
        }
        .into());
    }
    Ok((hard_state, wal, recovery))
}

/// The repair obligation of damage found in the WAL.
pub(super) fn damage_repair(damage: &crate::wal::Damage) -> Repair {
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

/// The newest snapshot that verifies and that the WAL continues, with the deltas after it
/// that continue it, installed into `machine`: the whole snapshot and the chain's newest
/// file; with the damaged snapshots passed over on the way. An intact snapshot that does not fit
/// the configuration or the handler refuses the start: it is the configuration that is wrong,
/// and an older snapshot replayed under it would not give the state the others have.
fn choose_snapshot<S: Storage, H: Handler>(
    storage: &S,
    dir: &Path,
    wal: &Wal<S>,
    (machine, mut early): (&mut StateMachine<H>, Option<Early>),
    report: &mut RecoveryReport,
) -> Result<(Option<Chosen>, Vec<PathBuf>), NodeError> {
    let snapshots_dir = dir.join(SNAPSHOT_DIR);
    let snapshots =
        list_snapshots_on(storage, &snapshots_dir).map_err(|source| Refusal::Unreadable {
            path: snapshots_dir.clone(),
            source,
        })?;
    let mut damaged = Vec::new();
    for (index, path) in snapshots {
        if !replay::log_reaches(wal, index) {
            report.passed_over.push(format!(
                "{}: the log after it is gone (the WAL starts at {})",
                path.display(),
                wal.first_index()
            ));
            continue;
        }
        // The newest was read beside the scan; an older one is read now (and the newest's
        // state, built for nothing, let go first).
        let read = match early.take().filter(|early| early.path == path) {
            Some(early) => early.read.map(|(snapshot, built)| (snapshot, Some(built))),
            None => read_snapshot_on(storage, &path).map(|snapshot| (snapshot, None)),
        };
        let (snapshot, built) = match read {
            Ok(read) => read,
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
        if let Some(reason) = not_as_named(&snapshot, index) {
            report
                .passed_over
                .push(format!("{}: {reason}", path.display()));
            continue;
        }
        let built = built.unwrap_or_else(|| machine.build_state(&snapshot));
        let built = built.map_err(|problem| Refusal::SnapshotConfig {
            path: path.clone(),
            problem,
        })?;
        let whole = durable(&snapshot, path.clone());
        let chain = Tip {
            snapshot,
            built,
            path,
        };
        // A log that does not continue the whole snapshot is emptied after it: no delta.
        let continued = replay::log_continues(wal, index, whole.meta.entry_hash);
        let tip = match continued {
            true => extend_chain(
                storage,
                (&snapshots_dir, wal),
                machine,
                chain,
                (report, &mut damaged),
            )?,
            false => chain,
        };
        report.snapshot = Some((index, whole.bytes));
        report.deltas = tip.snapshot.meta.index.0 - index.0;
        return Ok((Some((whole, install(machine, tip))), damaged));
    }
    Ok((None, damaged))
}

/// Why a whole snapshot's file that verifies is not what its name says (a delta, or another
/// entry's state): such a file was renamed or copied in by hand, and installing it would
/// start the log from an entry the name's checks did not cover. Kept, not quarantined: it
/// is intact.
pub(crate) fn not_as_named(snapshot: &Snapshot, index: EntryIndex) -> Option<String> {
    if snapshot.previous.is_some() {
        return Some("it is a delta, under a whole snapshot's name".to_owned());
    }
    let holds = snapshot.meta.index;
    (holds != index).then(|| format!("it holds entry {holds}, its name says {index}"))
}

/// The whole snapshot chosen and the newest file of its chain (itself, without deltas).
type Chosen = (Durable, Durable);

/// The newest file of a chain read so far, and the state it builds.
struct Tip {
    snapshot: Snapshot,
    built: BuiltState,
    path: PathBuf,
}

/// Extends a whole snapshot with the deltas after it, each continuing the file before it
/// (`notes/decisions/snapshot-deltas.md`): the newest state they build. A damaged delta (to
/// quarantine), one of another format, one that continues another file, or one whose entry
/// the log does not hold ends the chain where it is: the log, kept from the whole snapshot
/// on, replays the rest. (The log must hold the chain's entries: the node's log starts
/// after the whole snapshot, which is what it can send a follower.) A delta that verifies
/// but does not build refuses the start, as a whole snapshot does.
fn extend_chain<S: Storage, H: Handler>(
    storage: &S,
    (snapshots_dir, wal): (&Path, &Wal<S>),
    machine: &StateMachine<H>,
    mut tip: Tip,
    (report, damaged): (&mut RecoveryReport, &mut Vec<PathBuf>),
) -> Result<Tip, NodeError> {
    let deltas = list_deltas_on(storage, snapshots_dir).map_err(|source| Refusal::Unreadable {
        path: snapshots_dir.to_path_buf(),
        source,
    })?;
    let base = tip.snapshot.meta.index;
    for (_, path) in deltas.into_iter().rev().filter(|(index, _)| *index > base) {
        let delta = match read_snapshot_on(storage, &path) {
            Ok(delta) => delta,
            Err(SnapshotError::Invalid { path, problem }) => {
                report
                    .passed_over
                    .push(format!("{}: {problem}", path.display()));
                if problem.is_damage() {
                    damaged.push(path);
                }
                break;
            }
            Err(SnapshotError::Io { path, source }) => {
                return Err(Refusal::Unreadable { path, source }.into());
            }
        };
        if delta.previous != Some(tip.snapshot.link()) {
            report.passed_over.push(format!(
                "{}: it does not continue {}",
                path.display(),
                tip.path.display()
            ));
            break;
        }
        let (index, hash) = (delta.meta.index, delta.meta.entry_hash);
        if index > wal.last_index() || !replay::log_continues(wal, index, hash) {
            report.passed_over.push(format!(
                "{}: the log does not hold its entry {index}",
                path.display()
            ));
            break;
        }
        let built = machine.build_on(tip.built, &delta);
        let built = built.map_err(|problem| Refusal::SnapshotConfig {
            path: path.clone(),
            problem,
        })?;
        tip = Tip {
            snapshot: delta,
            built,
            path,
        };
    }
    Ok(tip)
}

/// Puts the state of a chain's newest file in force.
fn install<H: Handler>(machine: &mut StateMachine<H>, tip: Tip) -> Durable {
    let Tip {
        snapshot,
        built,
        path,
    } = tip;
    let durable = durable(&snapshot, path);
    machine.install_built(snapshot, built);
    durable
}

/// What a snapshot read back says of its file.
fn durable(snapshot: &Snapshot, path: PathBuf) -> Durable {
    Durable {
        meta: snapshot.meta.clone(),
        path,
        bytes: snapshot.file_bytes,
        took: Duration::ZERO,
        digest: snapshot.digest,
        delta: snapshot.previous.is_some(),
    }
}

/// Where the log starts after the chosen snapshot, and whether the WAL must be emptied to get
/// there; without a snapshot the log must start at entry 1, or the start is refused.
fn log_base<S: Storage>(
    dir: &Path,
    wal: &Wal<S>,
    chosen: Option<&Durable>,
    report: &RecoveryReport,
) -> Result<(LogBase, bool), NodeError> {
    replay::log_base(wal, chosen.map(|d| &d.meta)).ok_or_else(|| {
        Refusal::NoUsableState {
            dir: dir.to_path_buf(),
            first: wal.first_index(),
            snapshots: report.passed_over.clone(),
        }
        .into()
    })
}

/// Carries out what the plan proved garbage, in an order that a crash at any point leaves
/// recoverable: the repair obligation before the damage is cut, the torn tail, damaged
/// snapshots to quarantine, then a log behind the snapshot.
pub(super) fn carry_out<S: Storage, H: Handler>(
    dir: &Path,
    mut plan: Plan<H, S>,
) -> Result<Plan<H, S>, NodeError> {
    let storage = plan.wal.storage().clone();
    if plan.repair_added {
        write_hard_state_on(&storage, dir, plan.hard_state)?;
        plan.wal.cut_damage()?;
    }
    plan.wal.settle()?;
    if !plan.damaged.is_empty() {
        let name = format!("{}-damaged-snapshots", super::rebuild::unix_ms());
        let quarantined = data_dir::quarantine(&storage, dir, &name, &plan.damaged);
        let folder = quarantined.map_err(Refusal::from)?;
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

/// Replays every entry the WAL shows committed after the base; returns what the consensus
/// core needs. A log the plan empties (behind or conflicting with the snapshot) is taken as
/// empty, emptied yet or not.
pub(super) fn replay<S: Storage, H: Handler>(
    plan: &mut Plan<H, S>,
    keep_outcomes_after: Option<EntryIndex>,
    mut applied: impl FnMut(&Applied),
) -> Result<Recovered, NodeError> {
    let from = replay::ReplayFrom {
        hard_state: plan.hard_state,
        base: plan.base,
        reset_log: plan.reset_log,
        snapshot: plan.chosen.as_ref().map(|d| AppliedHash {
            index: d.meta.index,
            hash: d.meta.state_hash,
        }),
        keep_outcomes_after,
    };
    let report = &mut plan.report;
    let mut last_progress = Instant::now();
    let progress = |done: &Applied, total: u64| {
        applied(done);
        report.replayed += 1;
        if last_progress.elapsed() >= Duration::from_millis(RECOVERY_PROGRESS_MS) {
            last_progress = Instant::now();
            tracing::info!(
                replayed = report.replayed,
                total,
                "recovery: replaying the log"
            );
        }
    };
    replay::replay(&plan.wal, &mut plan.machine, from, progress).map_err(|error| match error {
        replay::ReplayError::Log(error) => NodeError::from(error),
        replay::ReplayError::Apply(error) => NodeError::from(error),
    })
}
