//! Where each entry's time goes (the replica's one clock read, for statistics only):
//! waiting in the batcher, the WAL fsync, the replication round trip, simulation, apply.

// The stage table's timings decide nothing, so the sans-IO replica may read the clock here.
#![allow(clippy::disallowed_methods)]

use crate::ids::EntryIndex;
use net::message::Stages;
use std::collections::VecDeque;
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
        self.waiting_since = None;
    }
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
}
