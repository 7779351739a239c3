//! The operator's explicit order to start empty (`--rebuild-from-leader`), for data that
//! cannot be used: the repair obligation first, then the data moved to quarantine.

use super::plan::{Plan, damage_repair};
use super::replay;
use super::{RecoveryOptions, RecoveryReport, Refusal};
use crate::core::{HardState, LogBase, LostVotes, Repair};
use crate::handler::Handler;
use crate::ids::Term;
use crate::node::NodeError;
use crate::snapshot::list_snapshots_on;
use crate::storage::Storage;
use crate::storage::data_dir::{self, Identity};
use crate::storage::hard_state::{
    HARD_STATE_FILE, HardStateError, SNAPSHOT_DIR, WAL_DIR, read_hard_state_on, write_hard_state_on,
};
use crate::wal::{Access, Wal};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Starts the node empty over data a plan refused (`refusal`): the hard state is kept when it
/// reads (damaged or missing, its votes are marked lost); a repair obligation covering the log the node had is made durable first (a damaged
/// hard state copied to quarantine before it is replaced); then the log and the snapshots are
/// moved to quarantine. A crash at any step leaves the data, and the obligation once written.
pub(super) fn rebuild_from_leader<S: Storage, H: Handler>(
    storage: &S,
    dir: &Path,
    handler: H,
    options: &RecoveryOptions,
    (stamp, refusal): (Option<Identity>, &Refusal),
) -> Result<Plan<H, S>, NodeError> {
    let lost = HardState {
        votes_lost: Some(LostVotes::Unknown),
        ..HardState::default()
    };
    let hard_state_path = dir.join(HARD_STATE_FILE);
    let hard_kept = storage
        .exists(&hard_state_path)
        .map_err(|source| NodeError::Io {
            path: hard_state_path,
            source,
        })?;
    // Its term and vote are lost, whether the file is damaged or missing: it votes again only
    // above every term the others hold.
    let (mut hard_state, hard_damaged, hard_lost) = match read_hard_state_on(storage, dir) {
        Ok(state) if hard_kept => (state, false, false),
        Ok(_) => (lost, false, true),
        Err(HardStateError::Damaged { .. }) => (lost, true, true),
        Err(other) => return Err(other.into()),
    };
    let (repair, reached) = rebuilt_repair(storage, dir, options)?;
    tracing::debug!(
        ?repair,
        term = reached.0,
        hard_lost,
        "rebuild: what the old log shows"
    );
    if let Some(repair) = repair {
        hard_state.repair = Some(hard_state.repair.map_or(repair, |r| r.merge(repair)));
    }
    if hard_lost {
        // The lost hard state took the term with it, but the log shows a term the node had
        // reached. Starting below it, the node would take appends from a leader of an older
        // term and acknowledge them: a majority for entries that a later term's leader
        // replaced, after it had committed others at the same indexes.
        hard_state.term = hard_state.term.max(reached);
    }
    let moved: Vec<PathBuf> = [WAL_DIR, SNAPSHOT_DIR]
        .iter()
        .map(|name| dir.join(name))
        .filter(|path| storage.exists(path).unwrap_or(true))
        .collect();
    let name = format!("{}-rebuild-from-leader", unix_ms());
    if hard_damaged {
        let copy = [dir.join(HARD_STATE_FILE)];
        data_dir::quarantine_copy(storage, dir, &name, &copy).map_err(Refusal::from)?;
    }
    write_hard_state_on(storage, dir, hard_state)?;
    let folder = data_dir::quarantine(storage, dir, &name, &moved).map_err(Refusal::from)?;
    let wal_dir = dir.join(WAL_DIR);
    let segment_bytes = options.wal_segment_bytes;
    let (wal, recovery) = Wal::open_repairing_in(storage.clone(), &wal_dir, segment_bytes)?;
    let mut kept: Vec<PathBuf> = moved.iter().map(|p| relative(dir, p)).collect();
    if hard_damaged {
        // Copied there before it was replaced.
        kept.push(PathBuf::from(HARD_STATE_FILE));
    }
    let rebuilt = rebuilt_message(refusal, &kept, &folder, hard_lost, hard_state.repair);
    Ok(Plan {
        machine: options.machine(handler),
        wal,
        recovery,
        hard_state,
        repair_added: false,
        chosen: None,
        whole: None,
        base: LogBase::default(),
        reset_log: false,
        damaged: Vec::new(),
        report: RecoveryReport {
            stamped: stamp.is_some(),
            quarantined: kept.iter().map(|p| folder.join(p)).collect(),
            rebuilt: Some(rebuilt),
            ..RecoveryReport::default()
        },
        stamp,
    })
}

/// The start's log line for a rebuild: why, what was moved where, and what the node waits
/// for.
fn rebuilt_message(
    refusal: &Refusal,
    kept: &[PathBuf],
    folder: &Path,
    votes_lost: bool,
    repair: Option<Repair>,
) -> String {
    let moved = if kept.is_empty() {
        "nothing to move".to_string()
    } else {
        let names: Vec<String> = kept.iter().map(|p| p.display().to_string()).collect();
        format!("{} kept in {}", names.join(", "), folder.display())
    };
    let votes = if votes_lost {
        "its votes were lost with its hard state: it votes and campaigns only above every term \
         the other nodes hold, once it has heard from all of them; "
    } else {
        ""
    };
    let waits = match repair {
        Some(r) => format!(
            "it does not campaign, and votes only as its log through entry {} allows, until the \
             leader has given it back",
            r.index
        ),
        None => "it held no log".into(),
    };
    format!(
        "rebuilt empty on the operator's order (--rebuild-from-leader), for {}; {moved}; \
         {votes}{waits}",
        refusal.summary()
    )
}

fn relative(dir: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(dir).unwrap_or(path).to_path_buf()
}

/// The repair obligation of a node about to be rebuilt: the end of the log it may have
/// acknowledged (the WAL's last entry, or beyond damage), or a snapshot's entry when only a
/// snapshot is left (its term unknown: no candidate is taken for holding it); with the term
/// of the log's last entry, or of the last one readable beyond damage (zero for an empty
/// log), a term the node had reached.
fn rebuilt_repair<S: Storage>(
    storage: &S,
    dir: &Path,
    options: &RecoveryOptions,
) -> Result<(Option<Repair>, Term), NodeError> {
    let wal_dir = dir.join(WAL_DIR);
    let segment_bytes = options.wal_segment_bytes;
    let (wal, recovery) =
        Wal::scan_repairing_in(storage.clone(), &wal_dir, segment_bytes, Access::ReadOnly)?;
    let snapshots_dir = dir.join(SNAPSHOT_DIR);
    let snapshots =
        list_snapshots_on(storage, &snapshots_dir).map_err(|source| Refusal::Unreadable {
            path: snapshots_dir,
            source,
        })?;
    // `list_snapshots` lists the newest first.
    let newest = snapshots.first().map(|(index, _)| *index);
    let damage = recovery.damage.as_ref().map(damage_repair);
    // Entries readable beyond damage were acknowledged as much as those before it: their
    // term was reached too (an unknown term, nothing readable there, adds nothing).
    let beyond = damage
        .map(|d| d.term)
        .filter(|&term| term != Term(u64::MAX));
    let reached = wal.last_term().max(beyond.unwrap_or_default());
    Ok((replay::rebuild_repair(&wal, damage, newest), reached))
}

/// Milliseconds since the epoch, to name quarantine folders in the order they were made.
pub(super) fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}
