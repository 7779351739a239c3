//! Where each entry's time goes (the replica's one clock read, for statistics only):
//! waiting in the batcher, the WAL fsync, the replication round trip, simulation, apply.

use crate::ids::EntryIndex;
use net::message::Stages;
use std::collections::VecDeque;
use std::time::Instant;

/// Entries tracked at once; older ones are forgotten (their stages are simply not counted).
const TRACKED_ENTRIES_MAX: usize = 4096;

fn micros(since: Instant, now: Instant) -> u64 {
    now.saturating_duration_since(since).as_micros() as u64
}

/// The driver's stopwatch.
#[derive(Default)]
pub(crate) struct Timing {
    pub(crate) stages: Stages,
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
            self.stages.batch_wait_us += micros(since, now);
        }
        self.waiting_since = more_waiting.then_some(now);
        if self.proposed.len() == TRACKED_ENTRIES_MAX {
            self.proposed.pop_front();
        }
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
            self.stages.wal_us += micros(*at, now);
            *fsynced = true;
        }
        while self.received.front().is_some_and(|(i, _)| *i <= index) {
            let (_, at) = self.received.pop_front().expect("checked");
            self.stages.follower_wal_us += micros(at, now);
        }
    }

    pub(crate) fn committed(&mut self, index: EntryIndex) {
        let now = Instant::now();
        while self.proposed.front().is_some_and(|(i, _, _)| *i <= index) {
            let (_, at, _) = self.proposed.pop_front().expect("checked");
            self.stages.quorum_us += micros(at, now);
        }
    }

    pub(crate) fn simulated(&mut self, started: Instant) {
        self.stages.simulate_us += micros(started, Instant::now());
    }

    pub(crate) fn applied(&mut self, started: Instant) {
        self.stages.applied += 1;
        self.stages.apply_us += micros(started, Instant::now());
    }

    /// Leadership changed hands: what was in flight will not be timed.
    pub(crate) fn forget(&mut self) {
        self.proposed.clear();
        self.received.clear();
        self.waiting_since = None;
    }
}
