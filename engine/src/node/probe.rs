//! What the node's HTTP endpoints answer from: the figures the driver publishes every
//! [`PUBLISH_INTERVAL_MS`]. A scrape or a probe reads the last publication and never enters
//! the driver's inbox, so it neither waits behind client requests nor delays them; and a
//! publication that stops coming is itself the sign that the event loop no longer answers.

use crate::ids::EntryIndex;
use crate::replica::{PeerLag, StageLatencies};
use net::message::NodeStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the driver publishes its figures, in milliseconds.
pub const PUBLISH_INTERVAL_MS: u64 = 100;

/// A node whose event loop has published nothing for this long is not live, in milliseconds
/// (`/livez` answers 503). Generous: a supervisor restarts a node that is not live, and a
/// restart costs more than a slow step.
pub const LIVE_STALE_MS: u64 = 10_000;

/// A node whose last publication is older than this is not ready, in milliseconds.
pub const READY_STALE_MS: u64 = 3_000;

/// A node is ready only while it has applied all but at most this many committed entries.
pub const READY_APPLY_LAG_ENTRIES_MAX: u64 = 256;

/// One publication of the driver's figures.
#[derive(Clone, Debug)]
pub(crate) struct Figures {
    /// When it was published.
    pub(crate) at: Instant,
    pub(crate) status: NodeStatus,
    pub(crate) latencies: StageLatencies,
    /// Live client sessions, the bytes they count in the state's capacity, and the cap.
    pub(crate) sessions: (u64, u64, u64),
    /// The state's bytes in use and its capacity.
    pub(crate) state: (u64, u64),
    pub(crate) handler_version: u32,
    /// On a leader, each follower's lag.
    pub(crate) peers: Vec<PeerLag>,
    /// Since the last durable snapshot (or since the node started, before its first).
    pub(crate) snapshot_age: Duration,
    /// The newest commit index the node knows of: a follower's own commit index stops at the
    /// end of its log, so one catching up would look current by it alone.
    pub(crate) leader_commit: EntryIndex,
    /// The change stream's journal and readers.
    pub(crate) changes: super::changes::ChangeFigures,
}

/// Where the driver publishes and the endpoints read. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Board(Arc<Mutex<Option<Arc<Figures>>>>);

impl Board {
    /// Replaces the last publication.
    pub(crate) fn publish(&self, figures: Figures) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(figures));
    }

    /// The last publication, if any.
    pub(crate) fn read(&self) -> Option<Arc<Figures>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Why a node is not live or not ready: what `/livez` and `/readyz` answer with a 503.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotReady {
    /// The driver has published nothing yet.
    #[error("starting: the event loop has published no figures yet")]
    Starting,
    /// The last publication is too old.
    #[error("the event loop has not answered for {ms} ms")]
    Stale {
        /// Its age, in milliseconds.
        ms: u64,
    },
    /// The node is not among the members in force.
    #[error("not a member of the cluster")]
    NotAMember,
    /// The node stopped applying.
    #[error("halted: {0}")]
    Halted(String),
    /// Its state differs from the leader's.
    #[error("diverged from the leader's state")]
    Diverged,
    /// Its disk is full.
    #[error("storage full")]
    StorageFull,
    /// It knows no leader.
    #[error("no leader known")]
    NoLeader,
    /// It has applied too little of what is committed.
    #[error("catching up: applied {applied}, committed {committed}")]
    Behind {
        /// The last entry applied.
        applied: u64,
        /// The commit index it knows.
        committed: u64,
    },
}

/// Whether the event loop answers: a publication within [`LIVE_STALE_MS`].
pub(crate) fn live(figures: Option<&Figures>, now: Instant) -> Result<(), NotReady> {
    fresh(figures, now, LIVE_STALE_MS).map(|_| ())
}

/// Whether the node can serve: live within [`READY_STALE_MS`], a member, not halted, not
/// diverged, not storage-full, a leader known, applied within
/// [`READY_APPLY_LAG_ENTRIES_MAX`] of the newest commit index it knows (the leader's, as the
/// leader last told it: a follower rebuilt or restarted far behind is not ready until it has
/// caught up).
pub(crate) fn ready(figures: Option<&Figures>, now: Instant) -> Result<(), NotReady> {
    let figures = fresh(figures, now, READY_STALE_MS)?;
    let status = &figures.status;
    if let Some(reason) = &status.halted {
        return Err(NotReady::Halted(reason.clone()));
    }
    if status.divergence.is_some() {
        return Err(NotReady::Diverged);
    }
    if !status.members.contains(&status.node) {
        return Err(NotReady::NotAMember);
    }
    if status.storage_full {
        return Err(NotReady::StorageFull);
    }
    if status.leader.is_none() {
        return Err(NotReady::NoLeader);
    }
    let committed = status.commit_index.max(figures.leader_commit).0;
    let applied = status.applied_index.0;
    if committed.saturating_sub(applied) > READY_APPLY_LAG_ENTRIES_MAX {
        return Err(NotReady::Behind { applied, committed });
    }
    Ok(())
}

fn fresh(figures: Option<&Figures>, now: Instant, stale_ms: u64) -> Result<&Figures, NotReady> {
    let figures = figures.ok_or(NotReady::Starting)?;
    let ms = now.saturating_duration_since(figures.at).as_millis() as u64;
    if ms > stale_ms {
        return Err(NotReady::Stale { ms });
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::ids::{EntryIndex, NodeId, Term};
    use net::message::{Role, Stages};

    fn figures(at: Instant) -> Figures {
        Figures {
            at,
            status: NodeStatus {
                node: NodeId(2),
                role: Role::Follower,
                term: Term(3),
                leader: Some(NodeId(1)),
                last_index: EntryIndex(900),
                commit_index: EntryIndex(900),
                applied_index: EntryIndex(800),
                state_hash: Default::default(),
                divergence: None,
                halted: None,
                storage_full: false,
                mode: Default::default(),
                stages: Stages::default(),
                members: vec![NodeId(1), NodeId(2), NodeId(3)],
                members_pending: false,
            },
            latencies: StageLatencies::default(),
            sessions: (0, 0, 16),
            state: (0, 1),
            handler_version: 1,
            peers: vec![],
            snapshot_age: Duration::ZERO,
            leader_commit: EntryIndex(900),
            changes: Default::default(),
        }
    }

    /// Proves each condition of readiness is checked, with its reason, and that liveness asks
    /// only for a recent publication.
    #[test]
    fn readiness_names_what_is_missing() {
        let now = Instant::now();
        let good = figures(now);
        assert_eq!(ready(Some(&good), now), Ok(()));
        assert_eq!(ready(None, now), Err(NotReady::Starting));
        let later = now + Duration::from_millis(READY_STALE_MS + 1);
        assert!(matches!(
            ready(Some(&good), later),
            Err(NotReady::Stale { .. })
        ));
        assert_eq!(live(Some(&good), later), Ok(()));
        let much_later = now + Duration::from_millis(LIVE_STALE_MS + 1);
        assert!(matches!(
            live(Some(&good), much_later),
            Err(NotReady::Stale { .. })
        ));
        type Spoil = fn(&mut NodeStatus);
        let cases: [(Spoil, NotReady); 5] = [
            (
                |s| s.halted = Some("x".into()),
                NotReady::Halted("x".into()),
            ),
            (
                |s| s.members.retain(|&m| m != NodeId(2)),
                NotReady::NotAMember,
            ),
            (|s| s.storage_full = true, NotReady::StorageFull),
            (|s| s.leader = None, NotReady::NoLeader),
            (
                |s| s.applied_index = EntryIndex(900 - READY_APPLY_LAG_ENTRIES_MAX - 1),
                NotReady::Behind {
                    applied: 900 - READY_APPLY_LAG_ENTRIES_MAX - 1,
                    committed: 900,
                },
            ),
        ];
        for (spoil, expected) in cases {
            let mut bad = figures(now);
            spoil(&mut bad.status);
            assert_eq!(ready(Some(&bad), now), Err(expected));
            assert_eq!(live(Some(&bad), now), Ok(()));
        }
    }

    /// Proves a follower whose own log (and so its own commit index) is far behind is not
    /// ready: it compares what it applied with the leader's commit, as last told.
    #[test]
    fn a_follower_catching_up_is_not_ready() {
        let now = Instant::now();
        let mut rebuilt = figures(now);
        rebuilt.status.last_index = EntryIndex(0);
        rebuilt.status.commit_index = EntryIndex(0);
        rebuilt.status.applied_index = EntryIndex(0);
        rebuilt.leader_commit = EntryIndex(5_000);
        assert_eq!(
            ready(Some(&rebuilt), now),
            Err(NotReady::Behind {
                applied: 0,
                committed: 5_000
            })
        );
        rebuilt.status.applied_index = EntryIndex(5_000 - READY_APPLY_LAG_ENTRIES_MAX);
        assert_eq!(ready(Some(&rebuilt), now), Ok(()));
    }
}
