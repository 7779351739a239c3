//! Round-trip latencies and their summary, and the small generator the client draws its
//! commands from.

use std::time::Duration;

/// Round-trip times of the measured batches, in nanoseconds.
pub struct Latencies {
    nanos: Vec<u64>,
}

/// The summary the probe prints, in microseconds.
#[derive(Debug, PartialEq)]
pub struct Summary {
    /// Batches measured.
    pub count: usize,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// The slowest.
    pub max_us: f64,
    /// The mean.
    pub mean_us: f64,
}

impl Latencies {
    /// Room for `count` samples, so that recording never allocates.
    pub fn with_capacity(count: usize) -> Latencies {
        Latencies {
            nanos: Vec::with_capacity(count),
        }
    }

    /// Records one round trip.
    pub fn record(&mut self, elapsed: Duration) {
        self.nanos.push(elapsed.as_nanos() as u64);
    }

    /// Percentiles (nearest rank), the maximum and the mean.
    pub fn summary(&self) -> Summary {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        let at = |fraction: f64| -> f64 {
            let Some(last) = sorted.len().checked_sub(1) else {
                return 0.0;
            };
            let rank = (last as f64 * fraction).round() as usize;
            sorted[rank] as f64 / 1e3
        };
        let total: u64 = sorted.iter().sum();
        Summary {
            count: sorted.len(),
            p50_us: at(0.50),
            p90_us: at(0.90),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: at(1.0),
            mean_us: total as f64 / sorted.len().max(1) as f64 / 1e3,
        }
    }
}

/// xorshift64* (Vigna, 2016): 64 bits of state, plenty for picking accounts.
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from `seed` (zero, a fixed point of xorshift, is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed.max(1) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..bound` (`bound` > 0), by multiply-shift.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "an empty range");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the summary's ranks on a known set, and an empty set's zeros.
    #[test]
    fn the_summary_ranks_samples() {
        let mut latencies = Latencies::with_capacity(100);
        for us in (1..=100).rev() {
            latencies.record(Duration::from_micros(us));
        }
        let summary = latencies.summary();
        assert_eq!(summary.count, 100);
        assert_eq!((summary.p50_us, summary.p99_us), (51.0, 99.0));
        assert_eq!((summary.max_us, summary.mean_us), (100.0, 50.5));
        assert_eq!(Latencies::with_capacity(0).summary().p99_us, 0.0);
    }

    /// Proves draws stay in range and a seed replays the same draws.
    #[test]
    fn draws_stay_in_range_and_replay() {
        let (mut one, mut two) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let draw = one.below(10);
            assert!(draw < 10);
            assert_eq!(draw, two.below(10));
        }
        assert_ne!(Rng::new(0).next_u64(), 0);
    }
}
