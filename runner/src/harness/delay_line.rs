//! Delay lines: one loopback listener per directed link between two nodes, forwarding every
//! byte to the destination a one-way delay after it arrived, with microsecond precision (tokio's
//! timers count milliseconds; a placement group's one-way delay is 25-50 us).
//!
//! Each direction of each connection has a reader thread, which stamps every chunk it reads
//! with its due time (its arrival plus a delay drawn from the range, never before the previous
//! chunk's: a stream keeps its order), and a writer thread, which sleeps (with a 1 us timer
//! slack) until a chunk is nearly due, spins the last few microseconds, and writes it. Bytes in
//! flight do not wait for each other: a link carries as much as it would without the delay.

use crate::faults::RelayListeners;
use engine::rng::Rng;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Bytes a delay line reads at once.
pub const DELAY_LINE_BUFFER_BYTES: usize = 256 * 1024;
/// A writer spins, instead of sleeping, for the last this many microseconds before a chunk is
/// due (a sleep with 1 us of timer slack overshoots by a few microseconds).
pub const SPIN_LAST_US: u64 = 15;

/// One-way delays, drawn uniformly from `min_us..=max_us` per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayRange {
    /// Least delay, in microseconds.
    pub min_us: u64,
    /// Largest delay, in microseconds.
    pub max_us: u64,
}

/// Why a text is not a [`DelayRange`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DelayRangeError {
    /// One end is not a number of microseconds.
    #[error("{text:?} is not a number of microseconds: {error}")]
    NotANumber {
        /// The end as written.
        text: String,
        /// The parser's error.
        error: std::num::ParseIntError,
    },
    /// The least delay is more than the largest.
    #[error("{min_us} us is more than {max_us} us")]
    Reversed {
        /// The least delay, in microseconds.
        min_us: u64,
        /// The largest delay, in microseconds.
        max_us: u64,
    },
}

impl std::str::FromStr for DelayRange {
    type Err = DelayRangeError;

    /// `40` or `25-50` (microseconds).
    fn from_str(text: &str) -> Result<Self, DelayRangeError> {
        let number = |s: &str| {
            s.trim()
                .parse::<u64>()
                .map_err(|error| DelayRangeError::NotANumber {
                    text: s.to_owned(),
                    error,
                })
        };
        let (min_us, max_us) = match text.split_once('-') {
            Some((low, high)) => (number(low)?, number(high)?),
            None => (number(text)?, number(text)?),
        };
        if min_us > max_us {
            return Err(DelayRangeError::Reversed { min_us, max_us });
        }
        Ok(DelayRange { min_us, max_us })
    }
}

impl DelayRange {
    /// The mean delay, in microseconds.
    pub fn mean_us(&self) -> f64 {
        (self.min_us + self.max_us) as f64 / 2.0
    }

    fn draw(&self, rng: &mut Rng) -> Duration {
        Duration::from_micros(self.min_us + rng.below(self.max_us - self.min_us + 1))
    }
}

impl std::fmt::Display for DelayRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.min_us == self.max_us {
            write!(f, "{} us", self.min_us)
        } else {
            write!(f, "{}-{} us", self.min_us, self.max_us)
        }
    }
}

/// The delay lines between the nodes of a cluster; they run until the process ends.
pub struct DelayLines {
    addresses: BTreeMap<(u8, u8), SocketAddr>,
}

impl DelayLines {
    /// A line from every node to every other, each forwarding to the destination's address in
    /// `peers` (node id to real peer address), the line `(from, to)` on
    /// `listeners[&(from, to)]`.
    pub fn start(
        peers: &BTreeMap<u8, SocketAddr>,
        listeners: RelayListeners,
        delay: DelayRange,
        seed: u64,
    ) -> std::io::Result<Self> {
        let mut addresses = BTreeMap::new();
        for ((from, to), listener) in listeners {
            let target = peers[&to];
            addresses.insert((from, to), listener.local_addr()?);
            let seed = seed ^ (u64::from(from) << 8 | u64::from(to));
            thread::Builder::new()
                .name(format!("line-{from}-{to}"))
                .spawn(move || serve(listener, target, delay, seed))?;
        }
        Ok(DelayLines { addresses })
    }

    /// The address node `from` dials to reach node `to`.
    pub fn address(&self, from: u8, to: u8) -> SocketAddr {
        self.addresses[&(from, to)]
    }
}

fn serve(listener: TcpListener, target: SocketAddr, delay: DelayRange, seed: u64) {
    let mut connection = 0u64;
    for inbound in listener.incoming() {
        let Ok(inbound) = inbound else { continue };
        let Ok(outbound) = TcpStream::connect(target) else {
            continue;
        };
        connection += 1;
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        let (Ok(inbound_copy), Ok(outbound_copy)) = (inbound.try_clone(), outbound.try_clone())
        else {
            continue;
        };
        let seed = seed.wrapping_add(connection.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        line(inbound, outbound, delay, seed);
        line(outbound_copy, inbound_copy, delay, seed ^ 1);
    }
}

/// Carries `from` to `to` with the delay, on a reader and a writer thread.
fn line(mut from: TcpStream, mut to: TcpStream, delay: DelayRange, seed: u64) {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    let _ = thread::Builder::new()
        .name("line-read".into())
        .spawn(move || {
            let mut rng = Rng::new(seed);
            let mut buffer = vec![0u8; DELAY_LINE_BUFFER_BYTES];
            let mut last_due = Instant::now();
            while let Ok(length @ 1..) = from.read(&mut buffer) {
                last_due = last_due.max(Instant::now() + delay.draw(&mut rng));
                if chunks.send((last_due, buffer[..length].to_vec())).is_err() {
                    break;
                }
            }
        });
    let _ = thread::Builder::new()
        .name("line-write".into())
        .spawn(move || {
            fine_timer_slack();
            for (at, chunk) in due {
                wait_until(at);
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Both);
        });
}

/// Sleeps until `at` is a few microseconds away, then spins.
fn wait_until(at: Instant) {
    let spin = Duration::from_micros(SPIN_LAST_US);
    loop {
        let now = Instant::now();
        if now >= at {
            return;
        }
        let left = at - now;
        if left > spin {
            thread::sleep(left - spin);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Asks the kernel to wake this thread's sleeps within 1 us of their time (the default slack,
/// 50 us, is as long as the delays emulated). std has no way to set it, hence prctl(2).
#[allow(unsafe_code)]
fn fine_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer and changes only this thread's timer slack;
    // no memory of ours is touched.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves ranges parse and bad ones are refused.
    #[test]
    fn ranges_parse() {
        assert_eq!(
            "25-50".parse::<DelayRange>(),
            Ok(DelayRange {
                min_us: 25,
                max_us: 50
            })
        );
        assert_eq!("40".parse::<DelayRange>().map(|d| d.mean_us()), Ok(40.0));
        assert!("50-25".parse::<DelayRange>().is_err());
        assert!("fast".parse::<DelayRange>().is_err());
    }

    /// Proves a line carries bytes in order, each no sooner than the least delay after it was
    /// sent.
    #[test]
    fn a_line_delays_and_keeps_order() {
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let peers = BTreeMap::from([
            (1u8, "127.0.0.1:9".parse().unwrap()),
            (2u8, target.local_addr().unwrap()),
        ]);
        let delay = DelayRange {
            min_us: 2_000,
            max_us: 3_000,
        };
        let listeners = RelayListeners::from([((1, 2), TcpListener::bind("127.0.0.1:0").unwrap())]);
        let lines = DelayLines::start(&peers, listeners, delay, 7).unwrap();
        let mut sender = TcpStream::connect(lines.address(1, 2)).unwrap();
        let (mut receiver, _) = target.accept().unwrap();
        for round in 0u8..20 {
            let sent = Instant::now();
            sender.write_all(&[round; 100]).unwrap();
            let mut got = [0u8; 100];
            receiver.read_exact(&mut got).unwrap();
            assert!(
                sent.elapsed() >= Duration::from_micros(delay.min_us),
                "round {round}"
            );
            assert_eq!(got, [round; 100]);
        }
    }
}
