//! Where each entry's time goes (the replica's one clock read, for statistics only):
//! waiting in the batcher, the WAL fsync, the replication round trip, simulation, apply.

// The stage table's timings decide nothing, so the sans-IO replica may read the clock here.
#![allow(clippy::disallowed_methods)]

use crate::ids::{EntryIndex, NodeId};
use net::message::Stages;
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

/// Entries tracked at once; older ones are forgotten (their stages are simply not counted).
const TRACKED_ENTRIES_MAX: usize = 4096;

/// Now, for a stage's start (the replica's clock reads go through here).
pub(super) fn now() -> Instant {
    Instant::now()
}

fn micros(since: Instant, now: Instant) -> u64 {
    now.saturating_duration_since(since).as_micros() as u64
}

/// Buckets of a [`Latencies`]: bucket `i` holds times up to 2^i microseconds (the last one,
/// 2^23 us = 8.4 s, everything longer too).
pub const LATENCY_BUCKETS: usize = 24;

/// A distribution of times in powers of two of microseconds: a bucket count, a sum and a count,
/// recorded with no allocation or lock (exported as a Prometheus histogram).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Latencies {
    /// Times in each bucket (not cumulative).
    pub buckets: [u64; LATENCY_BUCKETS],
    /// Their sum, in microseconds.
    pub sum_us: u64,
    /// How many.
    pub count: u64,
}

impl Latencies {
    /// Counts one time of `us` microseconds.
    pub fn record(&mut self, us: u64) {
        let bucket = (u64::BITS - us.saturating_sub(1).leading_zeros()) as usize;
        self.buckets[bucket.min(LATENCY_BUCKETS - 1)] += 1;
        self.sum_us += us;
        self.count += 1;
    }

    /// The upper bound of bucket `i`, in microseconds (`None`: unbounded, the last).
    pub fn upper_us(i: usize) -> Option<u64> {
        (i + 1 < LATENCY_BUCKETS).then(|| 1 << i)
    }
}

/// Each stage's distribution of per-entry times, beside the sums of [`Stages`].
#[derive(Clone, Debug, Default)]
pub struct StageLatencies {
    /// Leader: from the first request waiting to the entry's proposal.
    pub batch_wait: Latencies,
    /// Leader: proposal to its own fsync.
    pub wal: Latencies,
    /// Leader: proposal to commit.
    pub quorum: Latencies,
    /// Leader: the entry's simulation.
    pub simulate: Latencies,
    /// Every node: the entry's apply (execution or reuse, replies included).
    pub apply: Latencies,
    /// Follower: receipt to fsync.
    pub follower_wal: Latencies,
}

/// The driver's stopwatch.
#[derive(Default)]
pub(crate) struct Timing {
    pub(crate) stages: Stages,
    pub(crate) latencies: StageLatencies,
    /// When the oldest request still in the batcher arrived.
    waiting_since: Option<Instant>,
    /// Entries this leader proposed and has not seen commit: index, proposal time, fsynced.
    proposed: VecDeque<(EntryIndex, Instant, bool)>,
    /// Entries this follower received and has not seen fsynced.
    received: VecDeque<(EntryIndex, Instant)>,
    /// The entries this leader proposed last, committed or not, with their proposal times:
    /// what a follower's lag in seconds is read from.
    recent: VecDeque<(EntryIndex, Instant)>,
    /// Each follower's replication as this leader saw it.
    peers: BTreeMap<NodeId, PeerTiming>,
}

/// A follower's replication, seen from the leader.
#[derive(Clone, Copy, Debug, Default)]
struct PeerTiming {
    matched: EntryIndex,
    /// From an entry's proposal to the follower's acknowledgement that it is durable there,
    /// for the last entry acknowledged.
    round_trip_us: Option<u64>,
}

/// A follower's replication as the leader sees it, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLag {
    /// The follower.
    pub peer: NodeId,
    /// Entries the leader holds and the follower has not acknowledged.
    pub entries: u64,
    /// How long the oldest entry it has not acknowledged has waited, in microseconds (at
    /// least, when that entry is older than the proposals kept).
    pub us: u64,
    /// From proposal to the follower's acknowledgement, for the last entry acknowledged.
    pub round_trip_us: Option<u64>,
}

impl Timing {
    pub(crate) fn request_queued(&mut self) {
        self.waiting_since.get_or_insert_with(Instant::now);
    }

    pub(crate) fn proposed(&mut self, index: EntryIndex, more_waiting: bool) {
        let now = Instant::now();
        self.stages.proposed += 1;
        if let Some(since) = self.waiting_since {
            let us = micros(since, now);
            self.stages.batch_wait_us += us;
            self.latencies.batch_wait.record(us);
        }
        self.waiting_since = more_waiting.then_some(now);
        if self.proposed.len() == TRACKED_ENTRIES_MAX {
            self.proposed.pop_front();
        }
        assert!(
            self.proposed.back().is_none_or(|(last, ..)| *last < index),
            "entry {index} proposed after a later one in one leadership"
        );
        self.proposed.push_back((index, now, false));
        if self.recent.len() == TRACKED_ENTRIES_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back((index, now));
    }

    /// A follower acknowledged everything up to `matched`.
    pub(crate) fn peer_matched(&mut self, peer: NodeId, matched: EntryIndex) {
        let timing = self.peers.entry(peer).or_default();
        if matched == timing.matched {
            return;
        }
        // Lower than before: the follower was removed and added again, and starts over.
        let advanced = matched > timing.matched;
        timing.matched = matched;
        if advanced && let Some(at) = proposal_time(&self.recent, matched) {
            timing.round_trip_us = Some(micros(at, Instant::now()));
        }
    }

    /// Each follower's lag behind `last` (this leader's last index), given what the followers
    /// acknowledged (`matched`).
    pub(crate) fn peer_lags(
        &self,
        last: EntryIndex,
        matched: impl Iterator<Item = (NodeId, EntryIndex)>,
    ) -> Vec<PeerLag> {
        let now = Instant::now();
        matched
            .map(|(peer, matched)| {
                let entries = last.0.saturating_sub(matched.0);
                let oldest_missing = (entries > 0)
                    .then(|| first_proposed_after(&self.recent, matched))
                    .flatten();
                let us = oldest_missing.map_or(0, |at| micros(at, now));
                let round_trip_us = self.peers.get(&peer).and_then(|t| t.round_trip_us);
                PeerLag {
                    peer,
                    entries,
                    us,
                    round_trip_us,
                }
            })
            .collect()
    }

    pub(crate) fn received(&mut self, index: EntryIndex) {
        self.stages.received += 1;
        if self.received.len() == TRACKED_ENTRIES_MAX {
            self.received.pop_front();
        }
        self.received.push_back((index, Instant::now()));
    }

    pub(crate) fn persisted(&mut self, index: EntryIndex) {
        let now = Instant::now();
        for (proposed, at, fsynced) in self
            .proposed
            .iter_mut()
            .filter(|(i, _, f)| *i <= index && !f)
        {
            let _ = proposed;
            let us = micros(*at, now);
            self.stages.wal_us += us;
            self.latencies.wal.record(us);
            *fsynced = true;
        }
        while self.received.front().is_some_and(|(i, _)| *i <= index) {
            let (_, at) = self.received.pop_front().expect("checked");
            let us = micros(at, now);
            self.stages.follower_wal_us += us;
            self.latencies.follower_wal.record(us);
        }
    }

    pub(crate) fn committed(&mut self, index: EntryIndex) {
        let now = Instant::now();
        while self.proposed.front().is_some_and(|(i, _, _)| *i <= index) {
            let (_, at, _) = self.proposed.pop_front().expect("checked");
            let us = micros(at, now);
            self.stages.quorum_us += us;
            self.latencies.quorum.record(us);
        }
    }

    pub(crate) fn simulated(&mut self, started: Instant) {
        let us = micros(started, Instant::now());
        self.stages.simulate_us += us;
        self.latencies.simulate.record(us);
    }

    pub(crate) fn applied(&mut self, started: Instant) {
        let us = micros(started, Instant::now());
        self.stages.applied += 1;
        self.stages.apply_us += us;
        self.latencies.apply.record(us);
    }

    /// Leadership changed hands: what was in flight will not be timed.
    pub(crate) fn forget(&mut self) {
        self.proposed.clear();
        self.received.clear();
        self.recent.clear();
        self.peers.clear();
        self.waiting_since = None;
    }
}

/// When the entry at `index` was proposed, if it is among the `recent` proposals (ascending;
/// entries the leader appends outside the batcher, members and upgrades, are not there).
fn proposal_time(recent: &VecDeque<(EntryIndex, Instant)>, index: EntryIndex) -> Option<Instant> {
    let position = recent.partition_point(|&(i, _)| i < index);
    recent
        .get(position)
        .filter(|&&(found, _)| found == index)
        .map(|&(_, at)| at)
}

/// When the oldest of the `recent` proposals after `index` was made: the wait of the oldest
/// entry a follower that holds up to `index` lacks (at least that, when it is older than
/// every proposal kept).
fn first_proposed_after(
    recent: &VecDeque<(EntryIndex, Instant)>,
    index: EntryIndex,
) -> Option<Instant> {
    let position = recent.partition_point(|&(i, _)| i <= index);
    recent.get(position).map(|&(_, at)| at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves each time lands in the bucket of the least power of two at or above it, and the
    /// longest ones in the last.
    #[test]
    fn times_land_in_powers_of_two() {
        let mut latencies = Latencies::default();
        for us in [0, 1, 2, 3, 4, 5, 1_000, 1 << 22, 1 << 23, u64::MAX / 2] {
            latencies.record(us);
        }
        let mut expected = [0u64; LATENCY_BUCKETS];
        for bucket in [0, 0, 1, 2, 2, 3, 10, 22, 23, 23] {
            expected[bucket] += 1;
        }
        assert_eq!(latencies.buckets, expected);
        assert_eq!(latencies.count, 10);
        assert_eq!(Latencies::upper_us(10), Some(1_024));
        assert_eq!(Latencies::upper_us(LATENCY_BUCKETS - 1), None);
    }

    /// Proves a follower's lag counts the entries it has not acknowledged and the age of the
    /// oldest of them, and its round trip is set by its acknowledgements.
    #[test]
    fn a_followers_lag_is_the_entries_and_the_wait_it_has_not_acknowledged() {
        let mut timing = Timing::default();
        for index in 1..=5 {
            timing.proposed(EntryIndex(index), false);
        }
        let (fast, slow) = (NodeId(2), NodeId(3));
        timing.peer_matched(fast, EntryIndex(5));
        timing.peer_matched(slow, EntryIndex(2));
        std::thread::sleep(std::time::Duration::from_millis(2));
        let matched = [(fast, EntryIndex(5)), (slow, EntryIndex(2))];
        let lags = timing.peer_lags(EntryIndex(5), matched.into_iter());
        assert_eq!((lags[0].entries, lags[0].us), (0, 0));
        assert!(lags[0].round_trip_us.is_some());
        assert_eq!(lags[1].entries, 3);
        assert!(lags[1].us >= 2_000, "{:?}", lags[1]);
        // Nothing acknowledged since the lag was read keeps the same round trip.
        let before = lags[1].round_trip_us;
        timing.peer_matched(slow, EntryIndex(2));
        let again = timing.peer_lags(EntryIndex(5), matched.into_iter());
        assert_eq!(again[1].round_trip_us, before);
        timing.forget();
        assert!(timing.peer_lags(EntryIndex(5), [].into_iter()).is_empty());
    }

    /// Proves an entry appended outside the batcher (a members or an upgrade entry), which
    /// leaves a gap in the proposals kept, shifts no lookup after it: the round trip of a
    /// later entry is still found, and a follower one entry behind lags by that entry's wait,
    /// not by the oldest proposal's.
    #[test]
    fn a_gap_in_the_proposals_shifts_no_lookup() {
        let mut timing = Timing::default();
        for index in [1, 2, 3] {
            timing.proposed(EntryIndex(index), false);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        // Entry 4 is a members entry: not proposed through the batcher.
        for index in [5, 6] {
            timing.proposed(EntryIndex(index), false);
        }
        let peer = NodeId(2);
        timing.peer_matched(peer, EntryIndex(5));
        let lags = timing.peer_lags(EntryIndex(6), [(peer, EntryIndex(5))].into_iter());
        assert!(
            lags[0].round_trip_us.is_some(),
            "entry 5 is found past the gap"
        );
        assert_eq!(lags[0].entries, 1);
        // A follower that has nothing lags by at least the oldest proposal kept.
        let behind = timing.peer_lags(EntryIndex(6), [(peer, EntryIndex(0))].into_iter());
        assert!(behind[0].us >= 5_000, "{:?}", behind[0]);
        // Entry 1 was proposed 5 ms before entry 6: the one-behind follower's wait is entry
        // 6's, shorter by at least that.
        assert!(lags[0].us + 5_000 <= behind[0].us, "{lags:?} {behind:?}");
    }
}
