//! What each seed draws for its whole run (swarm testing): every run explores one corner of
//! the settings, and a failing seed prints the corner it was in.

use super::odds::{self, Odds};
use super::{CLIENT_TIMEOUT_SHORT_UNITS, CLIENT_TIMEOUT_UNITS, Time};
use crate::apply::{Mode, PIPELINE_REQUESTS_MAX};
use crate::core::LAGGING_FOLLOWER_ENTRIES_MAX;
use crate::rng::Rng;
use crate::snapshot::SNAPSHOT_LOG_PERCENT;
use std::fmt;

/// The fewest percent of write requests with keys of a seed that sends keys.
const KEYED_PERCENT_MIN: u64 = 10;

/// The settings one seed runs with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swarm {
    /// What leaders do with their simulations.
    pub mode: Mode,
    /// Entries between snapshots (0: none).
    pub snapshot_every: u64,
    /// Entries a leader keeps behind a snapshot for a lagging follower.
    pub lagging_entries_max: u64,
    /// Ticks a durable snapshot is kept before the next starts.
    pub snapshot_retain_ticks: u64,
    /// The snapshot policy's log-to-snapshot percent.
    pub snapshot_log_percent: u64,
    /// How long a client waits for an answer.
    pub client_timeout: Time,
    /// How long a client's attempt waits before it asks a second node too (None: never).
    pub hedge_after: Option<Time>,
    /// Per-mille of fsyncs that fail while faults last (each stops its node).
    pub fsync_error_permille: u64,
    /// Per-mille of messages lost (drawn when faults start).
    pub loss_permille: u64,
    /// Per-mille of messages delivered twice (drawn when faults start).
    pub duplication_permille: u64,
    /// Requests each client keeps in flight (1: one at a time; more: pipelined, the next
    /// batch of them sent once every one of the batch before was answered).
    pub pipeline: u32,
    /// Nodes beside the first members, added and removed by membership changes among the
    /// faults (0: the members never change).
    pub spares: u8,
    /// A node whose connections speak the protocol before read rounds (a build not upgraded
    /// yet, as the others see it), so that leaders confirm reads with an entry instead; none:
    /// every node speaks read rounds.
    pub read_checks_unspoken_by: Option<u8>,
    /// The nodes' WALs write zeros ahead of their appends (as on a disk; not in memory).
    pub wal_zero_ahead: bool,
    /// Percent of write requests that carry callers' keys over runs of their commands, one
    /// request in `SIM_KEY_ALONE_ONE_IN` (`sim/keys.rs`) being a key sent alone instead (0:
    /// no keys). Always 0 where a node speaks an older protocol: a leader refuses keys until
    /// every member is upgraded, which the simulated clients do not wait out.
    pub keyed_percent: u64,
    /// Snapshots may be deltas (drawn from the seed alone, so that the other draws are what
    /// they were before deltas).
    pub snapshot_deltas: bool,
    /// Members take turns at snapshots (drawn from the seed alone, as deltas are).
    pub snapshot_turns: bool,
}

impl Swarm {
    /// The settings drawn at the start of a run (the network's are drawn when faults start).
    pub(super) fn draw(rng: &mut Rng) -> Self {
        let mode = if odds::VERIFY_MODE.hit(rng) {
            Mode::Verify
        } else {
            Mode::Performance
        };
        let snapshot_every = zero_or(odds::NO_SNAPSHOTS, rng, |rng| 4 + rng.below(29));
        let lagging_entries_max = if odds::DEFAULT_LAGGING_ALLOWANCE.hit(rng) {
            LAGGING_FOLLOWER_ENTRIES_MAX
        } else {
            rng.below(64)
        };
        let snapshot_retain_ticks = zero_or(odds::NO_SNAPSHOT_RETENTION, rng, |rng| rng.below(200));
        let snapshot_log_percent = if odds::NO_SNAPSHOT_LOG_RULE.hit(rng) {
            0
        } else {
            SNAPSHOT_LOG_PERCENT
        };
        let (short, long) = CLIENT_TIMEOUT_SHORT_UNITS;
        let client_timeout = if odds::SHORT_CLIENT_TIMEOUT.hit(rng) {
            short + rng.below(long - short)
        } else {
            CLIENT_TIMEOUT_UNITS
        };
        let fsync_error_permille = zero_or(odds::NO_FSYNC_ERRORS, rng, |rng| {
            1 + rng.below(odds::FSYNC_ERROR_PERMILLE_MAX)
        });
        let hedge_after = odds::HEDGED_CLIENTS
            .hit(rng)
            .then(|| 10 + rng.below(client_timeout.saturating_sub(10).max(1)));
        // Drawn last, so that the draws above are those of a seed before pipelining.
        let pipeline = if odds::NO_PIPELINE.hit(rng) {
            1
        } else {
            2 + rng.below(PIPELINE_REQUESTS_MAX as u64 - 1) as u32
        };
        // Drawn after the pipeline, for the same reason.
        let spares = if odds::NO_SPARES.hit(rng) {
            0
        } else {
            super::SIM_SPARES
        };
        // Drawn after the spares, for the same reason.
        let read_checks_unspoken_by = odds::A_NODE_WITHOUT_READ_ROUNDS
            .hit(rng)
            .then(|| 1 + rng.below(u64::from(super::SIM_NODES)) as u8);
        let wal_zero_ahead = odds::WAL_ZEROS_AHEAD.hit(rng);
        Swarm {
            keyed_percent: 0,
            snapshot_deltas: false,
            snapshot_turns: false,
            read_checks_unspoken_by,
            wal_zero_ahead,
            spares,
            pipeline,
            mode,
            hedge_after,
            fsync_error_permille,
            snapshot_every,
            lagging_entries_max,
            snapshot_retain_ticks,
            snapshot_log_percent,
            client_timeout,
            loss_permille: 0,
            duplication_permille: 0,
        }
    }
}

impl Swarm {
    /// Draws whether and how often the seed's clients send keys, from `keys`, the keys' own
    /// generator: the main one draws nothing for them, so that a seed without keys runs as
    /// it did before keys existed (seeds found to reach a rare case still reach it).
    pub(super) fn draw_keys(&mut self, keys: &mut Rng) {
        let older_node = self.read_checks_unspoken_by.is_some();
        self.keyed_percent = if !older_node && odds::KEYED_CLIENTS.hit(keys) {
            KEYED_PERCENT_MIN + keys.below(101 - KEYED_PERCENT_MIN)
        } else {
            0
        };
    }
}

/// Zero when `odds` hits, else what `draw` draws (from the same generator, after the odds).
fn zero_or(odds: Odds, rng: &mut Rng, draw: impl FnOnce(&mut Rng) -> u64) -> u64 {
    match odds.hit(rng) {
        true => 0,
        false => draw(rng),
    }
}

impl fmt::Display for Swarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} mode, snapshots every {} entries (kept {} ticks, log percent {}, deltas {}, turns {}), lagging allowance {} entries, client timeout {:.1} ms, hedge after {}, fsync errors {}‰, loss {}‰, duplication {}‰, {} in flight per client, {} spare nodes, read rounds {}, WAL zeros ahead {}, keys in {}% of requests",
            self.mode,
            self.snapshot_every,
            self.snapshot_retain_ticks,
            self.snapshot_log_percent,
            self.snapshot_deltas,
            self.snapshot_turns,
            self.lagging_entries_max,
            self.client_timeout as f64 / 10.0,
            self.hedge_after.map_or("never".to_string(), |t| format!(
                "{:.1} ms",
                t as f64 / 10.0
            )),
            self.fsync_error_permille,
            self.loss_permille,
            self.duplication_permille,
            self.pipeline,
            self.spares,
            self.read_checks_unspoken_by
                .map_or("spoken by all".to_string(), |n| format!(
                    "not spoken by node {n}"
                )),
            self.wal_zero_ahead,
            self.keyed_percent
        )
    }
}
