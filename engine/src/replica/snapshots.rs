//! Snapshots: when to start one (counted in applied entries, log bytes and ticks) and whether
//! whole or a delta over the last one, its slices, what a durable one lets the log drop,
//! sending one to a follower and installing the leader's.

use super::{Halt, Io, Note, Replica, ReplicaConfig, SnapshotWrite, WalOp};
use crate::core::{Event, LogBase};
use crate::handler::Handler;
use crate::ids::{EntryIndex, NodeId};
use crate::snapshot::{Durable, ScanProgress, Snapshot, SnapshotLink};
use net::message::AppliedHash;

/// Deltas follow a whole snapshot until their bytes add up to this percent of its size; the
/// next snapshot is then whole (a recovery loads the whole snapshot and every delta over it,
/// and the log is kept from the whole snapshot before it).
pub const DELTA_CHAIN_PERCENT: u64 = 100;
/// A delta is taken only while it would write at most this percent of its whole snapshot's
/// bytes; past it the next snapshot is whole, on the whole snapshot's schedule. A delta that
/// rewrites most records costs what a whole snapshot costs, and its chain costs the recovery
/// more (`notes/decisions/snapshot-deltas.md`).
pub const DELTA_SHARE_PERCENT_MAX: u64 = 25;

/// With turns, a node whose snapshot is due (the log since its last start reached the
/// snapshot's cost) starts only in its share of the period, once the log reached this percent
/// of the cost: members then write their snapshots one after another, not at the same entry.
pub const SNAPSHOT_TURN_EARLY_PERCENT: u64 = 50;
/// With turns, a node starts whatever the turn once the log since its last start reached this
/// percent of the snapshot's cost (its turns passed while its writer was busy): the log a
/// restart replays stays bounded.
pub const SNAPSHOT_TURN_LATE_PERCENT: u64 = 200;

/// The stretch of entries over which a member measures the log's bytes an entry for its
/// turns: from one multiple of it to the next, the same entries on every member, so that
/// members estimate the period in entries alike even while the entries' sizes change.
pub const TURN_RATE_ENTRIES: u64 = 256;

/// What decides when a replica starts its next snapshot, and the newest durable one.
pub(super) struct Snapshots {
    /// False when snapshots are off, or the writer stopped.
    enabled: bool,
    /// The applied index at the last start.
    last_start: EntryIndex,
    /// The tick at which the newest snapshot became durable.
    durable_at: Option<u64>,
    /// Its size.
    durable_bytes: u64,
    /// The machine's applied payload bytes at the last start.
    log_bytes_at_start: u64,
    /// The newest durable whole snapshot (the one sent to followers): its entry and size.
    latest: Option<(EntryIndex, u64)>,
    /// The newest durable file, whole or a delta, when it is also the last one started: what
    /// the next delta continues (the state tracks its writes from that start on).
    tip: Option<SnapshotLink>,
    /// Bytes of the deltas since the newest whole snapshot.
    chain_bytes: u64,
    /// A snapshot's scan finished and its file is with the writer, not reported yet.
    writing: bool,
    /// Bytes of the snapshot in progress not handed to the writer yet.
    pending: Vec<u8>,
    /// The last multiple of [`TURN_RATE_ENTRIES`] applied here, and the applied bytes there.
    rate_mark: Option<(EntryIndex, u64)>,
    /// The log's bytes over the last whole stretch of [`TURN_RATE_ENTRIES`] applied here.
    rate_bytes: Option<u64>,
}

impl Snapshots {
    pub(super) fn new(
        config: &ReplicaConfig,
        applied: EntryIndex,
        latest: Option<(EntryIndex, u64)>,
    ) -> Self {
        Snapshots {
            enabled: config.snapshot_every > 0,
            last_start: applied,
            durable_at: latest.map(|_| 0),
            durable_bytes: latest.map_or(0, |(_, bytes)| bytes),
            log_bytes_at_start: 0,
            latest,
            tip: None,
            chain_bytes: 0,
            writing: false,
            pending: Vec::new(),
            rate_mark: None,
            rate_bytes: None,
        }
    }

    pub(super) fn latest(&self) -> Option<(EntryIndex, u64)> {
        self.latest
    }
}

/// A node's place in the rounds of turns at snapshots: `turn` of `turns`.
#[derive(Clone, Copy, Debug)]
struct Turn {
    turn: usize,
    turns: usize,
}

/// The period of `period` bytes in entries, at the bytes an entry of the last stretch of
/// [`TURN_RATE_ENTRIES`] (`stretch_bytes`, more than 0, which every member measures alike).
fn period_entries(stretch_bytes: u64, period: u64) -> u128 {
    u128::from(TURN_RATE_ENTRIES) * u128::from(period) / u128::from(stretch_bytes)
}

/// Whether a node in `turn` starts its snapshot at entry `applied`, `log` bytes after its
/// last start, the period being `period` bytes of log, about `period_entries` entries. The
/// entries are the clock every member shares (they apply the same log); a round of turns is
/// the period in entries, rounded ([`turn_cycle`]).
fn turn_due(turn: Turn, applied: u64, period_entries: u128, log: u64, period: u64) -> bool {
    if log.saturating_mul(100) >= period.saturating_mul(SNAPSHOT_TURN_LATE_PERCENT) {
        return true;
    }
    if log == 0 || log.saturating_mul(100) < period.saturating_mul(SNAPSHOT_TURN_EARLY_PERCENT) {
        return false;
    }
    let cycle = turn_cycle(period_entries, turn.turns);
    let position = u128::from(applied % cycle);
    position * turn.turns as u128 / u128::from(cycle) == turn.turn as u128
}

/// The entries of one round of turns: `entries` (the period's, as this node estimates it)
/// rounded to the nearest of 4, 5, 6, 7 or 8 times a power of two, so that members whose
/// estimates differ a little agree on the rounds, and the period kept stays within 12% of the
/// estimate; at least one entry a turn.
fn turn_cycle(entries: u128, turns: usize) -> u64 {
    let entries = entries.max(1);
    let step = (1u128 << (127 - entries.leading_zeros())) / 4;
    let near = match step {
        0 => entries,
        step => (4..=8u128)
            .map(|m| m * step)
            // The nearer in ratio: the smaller of c / entries and entries / c, compared as
            // c * c against entries * entries.
            .min_by_key(|&c| {
                let (small, large) = (c.min(entries), c.max(entries));
                large * large * 1024 / (small * small)
            })
            .expect("five candidates"),
    };
    u64::try_from(near.max(turns as u128)).unwrap_or(u64::MAX)
}

impl<H: Handler, T> Replica<H, T> {
    /// The snapshot policy's facts: its starts and the newest durable snapshot are at or below
    /// the entry applied, the log's base at or below that snapshot, and bytes wait for the
    /// writer only while a snapshot is scanned, fewer than one write's worth.
    pub(super) fn check_snapshots(&self) {
        let policy = &self.snapshots;
        let applied = self.machine.applied_index();
        let latest = policy.latest.map_or(EntryIndex::ZERO, |(index, _)| index);
        assert!(
            policy.last_start <= applied && latest <= applied,
            "snapshot started at {}, newest durable at {latest}, past the applied {applied}",
            policy.last_start
        );
        let base = self.core.log_base().index;
        assert!(
            base <= latest,
            "the log dropped entries through {base}, past the newest durable snapshot {latest}"
        );
        assert!(
            policy.durable_at.is_none_or(|at| at <= self.ticks),
            "a snapshot durable in the future"
        );
        assert!(
            !(policy.writing && self.machine.snapshotting()),
            "no scan starts while the writer makes the last one's file"
        );
        assert!(
            policy.tip.is_none_or(|tip| tip.index == policy.last_start),
            "a delta continues the last snapshot started"
        );
        if !policy.pending.is_empty() {
            assert!(
                self.machine.snapshotting(),
                "{} snapshot bytes wait with no snapshot in progress",
                policy.pending.len()
            );
            assert!(
                policy.pending.len() < self.config.snapshot_write_bytes,
                "{} snapshot bytes wait, a write is {}",
                policy.pending.len(),
                self.config.snapshot_write_bytes
            );
        }
    }

    /// Starts a snapshot when the applied index crossed a multiple of the snapshot interval
    /// since the last start, the newest durable snapshot has been kept the retention period,
    /// and the log applied since the last start is at least the configured percent of the
    /// newest snapshot's size.
    pub(super) fn maybe_start_snapshot(&mut self, out: &mut Vec<Io<T>>) {
        self.measure_log_rate();
        let every = self.config.snapshot_every;
        let applied = self.machine.applied_index();
        let policy = &self.snapshots;
        let retain = self.config.snapshot_retain_ticks;
        let log = self.machine.applied_bytes() - policy.log_bytes_at_start;
        // What the snapshot would write: a delta its share of the written records, while
        // small; a whole one what the last whole one did.
        let whole = policy.latest.map(|(_, bytes)| bytes);
        let estimate = self.delta_over().and_then(|link| {
            let bytes = self.machine.delta_bytes_estimate(whole.unwrap_or(0))?;
            let small = bytes * 100 <= whole.unwrap_or(0) * DELTA_SHARE_PERCENT_MAX;
            small.then_some((link, bytes))
        });
        let over = estimate.map(|(link, _)| link);
        let cost = estimate.map(|(_, bytes)| bytes);
        let cost = cost.or(whole).unwrap_or(policy.durable_bytes);
        if !policy.enabled
            || self.machine.snapshotting()
            || policy.writing
            || applied.0 / every <= policy.last_start.0 / every
            || policy.durable_at.is_some_and(|at| self.ticks - at < retain)
            || !self.snapshot_due(log, cost)
        {
            return;
        }
        // `None`: a pending speculation is in the way; the next applied entry tries again.
        let started = match over {
            Some(link) => self.machine.begin_delta_snapshot(link),
            None => self.machine.begin_snapshot(),
        };
        if let Some(meta) = started {
            assert_eq!(
                meta.index, applied,
                "a snapshot starts at the entry applied"
            );
            self.snapshots.last_start = applied;
            // Its scan holds the link now; the file it writes is the next one to continue.
            self.snapshots.tip = None;
            self.snapshots.log_bytes_at_start = self.machine.applied_bytes();
            self.snapshots.pending.clear();
            out.push(Io::Snapshot(SnapshotWrite::Begin(meta.index)));
        }
    }

    /// At each multiple of [`TURN_RATE_ENTRIES`], the log's bytes since the one before, when
    /// every entry between them was applied here (not installed).
    fn measure_log_rate(&mut self) {
        let applied = self.machine.applied_index();
        if !applied.0.is_multiple_of(TURN_RATE_ENTRIES) {
            return;
        }
        let bytes = self.machine.applied_bytes();
        let policy = &mut self.snapshots;
        if let Some((mark, at)) = policy.rate_mark
            && mark.0 + TURN_RATE_ENTRIES == applied.0
        {
            policy.rate_bytes = Some(bytes - at);
        }
        policy.rate_mark = Some((applied, bytes));
    }

    /// Whether the snapshot is due, `log` bytes applied since the last start and the snapshot
    /// costing `cost` bytes: when the log reached the configured percent of the cost; with
    /// turns, in this node's turn between [`SNAPSHOT_TURN_EARLY_PERCENT`] and
    /// [`SNAPSHOT_TURN_LATE_PERCENT`] of it.
    fn snapshot_due(&self, log: u64, cost: u64) -> bool {
        let percent = self.config.snapshot_log_percent;
        let rule = log.saturating_mul(100) >= cost.saturating_mul(percent);
        let period = cost.saturating_mul(percent) / 100;
        // Without a stretch measured here (just started or installed) the rule alone: a
        // member's own log since a restart holds the replayed entries, and would convert badly.
        let stretch = self.snapshots.rate_bytes.filter(|&bytes| bytes > 0);
        let (Some(turn), Some(stretch)) = (self.snapshot_turn(), stretch) else {
            return rule;
        };
        if period == 0 {
            return rule;
        }
        let applied = self.machine.applied_index().0;
        turn_due(turn, applied, period_entries(stretch, period), log, period)
    }

    /// This node's place among the members and their number, when snapshots take turns.
    fn snapshot_turn(&self) -> Option<Turn> {
        if !self.config.snapshot_turns {
            return None;
        }
        let members = self.core.members();
        let turn = members.ids().position(|id| id == self.core.id())?;
        let turns = members.len();
        (turns > 1).then_some(Turn { turn, turns })
    }

    /// The file the next snapshot continues as a delta, or `None` when it must be whole: no
    /// durable file is the last one started, the state lost track of its writes (a table grew,
    /// a scan was abandoned, the state was loaded), or the chain's deltas reached
    /// [`DELTA_CHAIN_PERCENT`] of their whole snapshot's size.
    fn delta_over(&self) -> Option<SnapshotLink> {
        let policy = &self.snapshots;
        if !self.config.snapshot_deltas {
            return None;
        }
        let (_, whole_bytes) = policy.latest?;
        let chain_full = policy.chain_bytes * 100 >= whole_bytes * DELTA_CHAIN_PERCENT;
        policy
            .tip
            .filter(|_| !chain_full && self.machine.can_take_delta())
    }

    /// True while a snapshot is being scanned.
    pub fn snapshotting(&self) -> bool {
        self.machine.snapshotting()
    }

    /// Scans a slice of the snapshot in progress; its bytes go to the writer in pieces of the
    /// configured size.
    pub fn snapshot_slice(&mut self, out: &mut Vec<Io<T>>) {
        let pending = &mut self.snapshots.pending;
        let slots = self.config.snapshot_slice_slots;
        match self.machine.snapshot_step(slots, pending) {
            ScanProgress::Idle => {}
            ScanProgress::More => {
                if pending.len() >= self.config.snapshot_write_bytes {
                    out.push(Io::Snapshot(SnapshotWrite::Bytes(std::mem::take(pending))));
                }
            }
            ScanProgress::Done(meta) => {
                out.push(Io::Snapshot(SnapshotWrite::Bytes(std::mem::take(pending))));
                out.push(Io::Snapshot(SnapshotWrite::Finish(meta)));
                self.snapshots.writing = true;
            }
            ScanProgress::Void => {
                pending.clear();
                out.push(Io::Snapshot(SnapshotWrite::Abort));
            }
        }
    }

    /// Abandons the snapshot in progress (the state is about to be replaced).
    fn abort_snapshot(&mut self, out: &mut Vec<Io<T>>) {
        if self.machine.snapshotting() {
            self.machine.abort_snapshot();
            self.snapshots.pending.clear();
            out.push(Io::Snapshot(SnapshotWrite::Abort));
        }
    }

    /// The snapshot writer is gone: no more snapshots (the log is kept whole instead).
    pub fn snapshots_off(&mut self) {
        self.snapshots.enabled = false;
        self.snapshots.pending.clear();
        if self.machine.snapshotting() {
            self.machine.abort_snapshot();
        }
    }

    /// The writer could not write the snapshot in progress or make the last one durable: the
    /// rest of a scan in progress is for nothing (the writer dropped its file, and would
    /// report nothing of it), and no delta can continue it, so the next snapshot is whole.
    pub fn snapshot_failed(&mut self) {
        self.snapshots.writing = false;
        self.snapshots.tip = None;
        self.snapshots.pending.clear();
        if self.machine.snapshotting() {
            self.machine.abort_snapshot();
        }
        self.machine.forget_delta_base();
    }

    /// A snapshot is durable: the next delta continues it. A whole one lets the log behind the
    /// whole one before it go, what followers still need excepted: should this one turn out
    /// damaged after a crash, recovery falls back to that one (and its deltas) and replays
    /// the log after it. A delta lets nothing go: a damaged delta falls back to its whole
    /// snapshot and the log.
    pub fn snapshot_durable(&mut self, durable: &Durable, out: &mut Vec<Io<T>>) {
        let (index, bytes) = (durable.meta.index, durable.bytes);
        self.snapshots.durable_at = Some(self.ticks);
        self.snapshots.durable_bytes = bytes;
        // The writer makes one file at a time, and no scan starts while it does.
        self.snapshots.writing = false;
        if index == self.snapshots.last_start {
            self.snapshots.tip = Some(durable.link());
        }
        if durable.delta {
            self.snapshots.chain_bytes += bytes;
            return;
        }
        self.snapshots.chain_bytes = 0;
        if self.snapshots.latest.is_some_and(|(l, _)| l >= index) {
            return;
        }
        if let Some((previous, _)) = self.snapshots.latest.replace((index, bytes)) {
            let applied = self.machine.applied_index().0;
            let retained = EntryIndex(applied.saturating_sub(self.config.changes_retain_entries));
            let through = self.core.compactable(previous).min(retained);
            // The log is kept from the snapshot before the newest: never past it.
            assert!(
                through <= previous && previous < index,
                "compacting through {through} with snapshots {previous} and {index}"
            );
            if through > self.core.log_base().index {
                self.core.compact(through);
                out.push(Io::Wal(WalOp::Compact(through)));
            }
        }
    }

    /// Sending a snapshot to `peer` failed.
    pub fn snapshot_send_aborted(&mut self, peer: NodeId, out: &mut Vec<Io<T>>) {
        self.step(Event::SnapshotAborted { peer }, out);
    }

    /// Follower: the leader's snapshot is whole, verified and durable (`bytes` long): it
    /// replaces the state and the log, unless the log caught up with it meanwhile.
    pub fn snapshot_received(&mut self, snapshot: Snapshot, bytes: u64, out: &mut Vec<Io<T>>) {
        let meta = snapshot.meta.clone();
        if self.halted.is_some() || meta.index <= self.core.commit_index() {
            return;
        }
        self.abort_snapshot(out);
        if let Err(error) = self.machine.install(snapshot) {
            let index = meta.index;
            self.halt(Halt::Install { index, error }, out);
            return;
        }
        assert_eq!(
            self.machine.applied_index(),
            meta.index,
            "an installed snapshot's state is at its entry"
        );
        let base = LogBase {
            index: meta.index,
            term: meta.term,
            hash: meta.entry_hash,
        };
        out.push(Io::Wal(if self.core.holds(base) {
            WalOp::Compact(meta.index)
        } else {
            WalOp::Reset(base)
        }));
        let applied = AppliedHash {
            index: meta.index,
            hash: meta.state_hash,
        };
        let policy = &mut self.snapshots;
        policy.latest = Some((meta.index, bytes));
        policy.tip = None;
        policy.chain_bytes = 0;
        policy.writing = false;
        policy.last_start = meta.index;
        policy.durable_at = Some(self.ticks);
        policy.durable_bytes = bytes;
        policy.log_bytes_at_start = self.machine.applied_bytes();
        // The next stretch starts after the installed entry.
        policy.rate_mark = None;
        policy.rate_bytes = None;
        self.commit_to = self.commit_to.max(meta.index);
        out.push(Io::Note(Note::Applied(applied)));
        out.push(Io::Note(Note::Installed {
            index: meta.index,
            bytes,
        }));
        let members = meta.members;
        self.step(
            Event::Installed {
                base,
                applied,
                members,
            },
            out,
        );
        assert!(
            self.halted.is_some()
                || (self.core.commit_index() >= meta.index
                    && self.core.log_base().index == meta.index),
            "the snapshot of {} installed: commit {}, base {}",
            meta.index,
            self.core.commit_index(),
            self.core.log_base().index
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where three members start their snapshots over `entries` entries of `entry_bytes`
    /// bytes each, a snapshot costing `period` bytes of log, each one taking no time: the
    /// entries each member starts at.
    fn starts(turns: bool, entries: u64, entry_bytes: u64, period: u64) -> Vec<Vec<u64>> {
        starts_over(turns, entries, |_| entry_bytes, period)
    }

    /// [`starts`] with entries whose size `entry_bytes` gives by index; each member measures
    /// the stretches of [`TURN_RATE_ENTRIES`] as a replica does.
    fn starts_over(
        turns: bool,
        entries: u64,
        entry_bytes: impl Fn(u64) -> u64,
        period: u64,
    ) -> Vec<Vec<u64>> {
        (0..3)
            .map(|turn| {
                let (mut at_last, mut bytes) = (0, 0);
                let (mut mark, mut stretch) = (0, None);
                let mut starts = Vec::new();
                for applied in 1..=entries {
                    bytes += entry_bytes(applied);
                    if applied.is_multiple_of(TURN_RATE_ENTRIES) {
                        stretch = Some(bytes - mark);
                        mark = bytes;
                    }
                    let log = bytes - at_last;
                    let due = match stretch.filter(|_| turns) {
                        Some(stretch) => {
                            let turn = Turn { turn, turns: 3 };
                            let entries = period_entries(stretch, period);
                            turn_due(turn, applied, entries, log, period)
                        }
                        None => log >= period,
                    };
                    if due {
                        starts.push(applied);
                        at_last = bytes;
                    }
                }
                starts
            })
            .collect()
    }

    /// The entries between a member's start and the nearest start of another member.
    fn nearest_other(starts: &[Vec<u64>], member: usize, at: u64) -> u64 {
        let others = starts.iter().enumerate().filter(|(m, _)| *m != member);
        let all = others.flat_map(|(_, s)| s.iter());
        all.map(|s| s.abs_diff(at)).min().expect("other starts")
    }

    /// Proves members taking turns start their snapshots a third of a period apart, where
    /// without turns all three start at the same entry, and that each member still starts
    /// about once a period: within 12% of it once the rounds settle.
    #[test]
    fn members_taking_turns_start_their_snapshots_a_third_of_a_period_apart() {
        let (entries, entry_bytes) = (20_000, 100);
        for period_entries in [96, 100, 150, 181, 250, 333, 1_000] {
            let period = period_entries * entry_bytes;
            let together = starts(false, entries, entry_bytes, period);
            assert_eq!(together[0], together[1]);
            assert_eq!(together[0], together[2]);
            let turns = starts(true, entries, entry_bytes, period);
            let cycle = turn_cycle(u128::from(period_entries), 3);
            // Before the first stretch is measured, the rule alone; turns from the start
            // after the first start past it.
            let measured = |starts: &Vec<u64>| {
                let first = starts.iter().position(|&at| at > TURN_RATE_ENTRIES);
                starts[first.expect("a start past the first stretch") + 1..].to_vec()
            };
            let turns: Vec<Vec<u64>> = turns.iter().map(measured).collect();
            for (member, starts) in turns.iter().enumerate() {
                for pair in starts.windows(2) {
                    let gap = pair[1] - pair[0];
                    assert_eq!(gap, cycle, "member {member}, period {period_entries}");
                    assert!(
                        gap * 100 >= period_entries * 88,
                        "{gap} for {period_entries}"
                    );
                    assert!(
                        gap * 100 <= period_entries * 112,
                        "{gap} for {period_entries}"
                    );
                }
                for &at in starts {
                    let apart = nearest_other(&turns, member, at);
                    assert!(apart * 3 + 3 >= cycle, "member {member} at {at}: {apart}");
                }
            }
        }
    }

    /// Proves members keep their turns apart when the entries' sizes change (a prefill of
    /// large entries, then small ones): they measure the same stretches of entries, so they
    /// agree on the rounds from the stretch after the change on.
    #[test]
    fn members_keep_their_turns_when_the_entries_change_size() {
        let change = 3_000;
        let size = |index: u64| if index <= change { 300 } else { 100 };
        let period = 1_000 * 100;
        let turns = starts_over(true, 20_000, size, period);
        let settled = change + 2 * TURN_RATE_ENTRIES;
        for (member, starts) in turns.iter().enumerate() {
            for &at in starts.iter().filter(|&&at| at > settled) {
                let apart = nearest_other(&turns, member, at);
                // A fifth of the round of 1,024: a member's start late in its turn (its log
                // short of the early bound at the turn's start) comes nearer the next one.
                assert!(
                    apart >= 200,
                    "member {member} at {at}: {apart} apart: {turns:?}"
                );
            }
        }
    }

    /// Proves a member whose turns passed (its writer was busy) starts at the late bound, and
    /// that none starts before the early one.
    #[test]
    fn a_member_past_its_turns_starts_at_the_late_bound() {
        let period = 1_000;
        let turn = Turn { turn: 0, turns: 3 };
        let early = period * SNAPSHOT_TURN_EARLY_PERCENT / 100;
        let late = period * SNAPSHOT_TURN_LATE_PERCENT / 100;
        for applied in 0..64 {
            assert!(!turn_due(turn, applied, 19, early - 1, period));
        }
        // A period of 19 entries makes a round of 20 entries: entry 47 is in the second turn.
        assert!(!turn_due(turn, 47, 19, early + 1, period));
        assert!(turn_due(turn, 47, 19, late, period));
        assert!(turn_due(turn, 42, 19, early + 1, period));
    }
}
