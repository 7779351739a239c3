//! Open-loop load: request `k` of a run is due at `start + k / rate`, whether or not earlier
//! requests have been answered, and its latency counts from that due time. A closed loop
//! (each client sends its next request when the last is answered) slows down with the system
//! it measures and so hides the queueing a real client population would see ("coordinated
//! omission"); this does not. A request due while [`OPEN_LOOP_OUTSTANDING_MAX`] are still
//! unanswered waits for a session, and that wait is in its latency too.

use crate::client::Client;
use futures::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::time::Duration;
// tokio's clock, so that the scheduler runs under a paused clock in tests.
use tokio::time::Instant;

/// Requests outstanding at once at most, each on its own client session (a cluster keeps
/// 4,096 sessions by default).
pub const OPEN_LOOP_OUTSTANDING_MAX: usize = 1024;

/// How the open loop waits for a request's due time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacer {
    /// tokio's timer: its wheel ticks every millisecond and rounds a deadline up to the next
    /// tick, so a request leaves up to 1 ms after its due time, and that lateness is in its
    /// latency. Runs under tokio's paused clock (tests).
    Tokio,
    /// A thread of its own that sleeps until each due time (`nanosleep`: tens of
    /// microseconds late) and signals it: the request leaves as soon as the event loop hears.
    Thread,
}

/// The due times as a thread signals them, one message per due time from `start` on.
struct Ticks(tokio::sync::mpsc::UnboundedReceiver<()>);

impl Ticks {
    fn start(start: Instant, interval: Duration, stop_at: Instant) -> Ticks {
        let (tick, ticks) = tokio::sync::mpsc::unbounded_channel();
        let (mut due, stop_at) = (start.into_std(), stop_at.into_std());
        std::thread::spawn(move || {
            while due < stop_at {
                std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
                if tick.send(()).is_err() {
                    return;
                }
                due += interval;
            }
        });
        Ticks(ticks)
    }
}

/// Returns once `due` has come: the next tick when a thread signals them, else tokio's timer.
async fn until(ticks: &mut Option<Ticks>, due: Instant) {
    match ticks {
        Some(Ticks(ticks)) => {
            // The thread signals every due time in order, and each is awaited once: the
            // channel closes only after the last.
            let _ = ticks.recv().await;
        }
        None => tokio::time::sleep_until(due).await,
    }
}

/// Sends requests due every `1 / rate` seconds from `start` until `stop_at` (waiting with
/// `pacer`), each on an idle
/// session (a new one from `new_session` while fewer than [`OPEN_LOOP_OUTSTANDING_MAX`]
/// exist), and hands every answer to `answered` with the request's due time. `send` takes a
/// session and the due time and gives the session back with what the request produced.
/// Returns once every request sent has been answered; the sessions made. Times are tokio's
/// ([`Instant::from_std`] converts).
pub async fn open_loop<T, Send, Fut>(
    pacer: Pacer,
    rate: f64,
    start: Instant,
    stop_at: Instant,
    mut new_session: impl FnMut() -> Client,
    mut send: Send,
    mut answered: impl FnMut(Instant, T),
) -> usize
where
    Send: FnMut(Client, Instant) -> Fut,
    Fut: Future<Output = (Client, Instant, T)>,
{
    assert!(rate > 0.0 && rate.is_finite(), "a positive request rate");
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut idle: Vec<Client> = Vec::new();
    let mut sessions = 0usize;
    let mut pending = FuturesUnordered::new();
    let mut due = start;
    let mut ticks = (pacer == Pacer::Thread).then(|| Ticks::start(start, interval, stop_at));
    loop {
        let free = !idle.is_empty() || sessions < OPEN_LOOP_OUTSTANDING_MAX;
        let more = due < stop_at;
        if !more && pending.is_empty() {
            return sessions;
        }
        tokio::select! {
            () = until(&mut ticks, due), if more && free => {
                let session = idle.pop().unwrap_or_else(|| {
                    sessions += 1;
                    new_session()
                });
                pending.push(send(session, due));
                due += interval;
            }
            Some((session, was_due, output)) = pending.next(), if !pending.is_empty() => {
                answered(was_due, output);
                idle.push(session);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;
    use crate::ids::{ClientId, RequestNumber};

    fn session() -> Client {
        let config = ClientConfig::new(1, ["127.0.0.1:1".parse::<std::net::SocketAddr>().unwrap()]);
        Client::new(config, ClientId(1), RequestNumber(1))
    }

    /// A "system" that takes 30 ms per request, one at a time, offered 100 requests a
    /// second: a closed loop would see 30 ms each; the open loop sees the queue grow, and
    /// every request is still sent at or after its due time, 10 ms apart.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn latency_counts_from_the_due_time_and_the_queue_shows() {
        let start = Instant::now();
        let stop_at = start + Duration::from_millis(200);
        let busy_until = std::cell::Cell::new(start);
        let mut latencies = Vec::new();
        let mut dues = Vec::new();
        let sessions = open_loop(
            Pacer::Tokio,
            100.0,
            start,
            stop_at,
            session,
            |client, due| {
                let sent = Instant::now();
                assert!(sent >= due, "sent before its due time");
                let begin = busy_until.get().max(sent);
                let done = begin + Duration::from_millis(30);
                busy_until.set(done);
                async move {
                    tokio::time::sleep_until(done).await;
                    (client, due, ())
                }
            },
            |due, ()| {
                dues.push(due);
                latencies.push(Instant::now() - due);
            },
        )
        .await;
        assert_eq!(dues.len(), 20, "every due request sent and answered");
        dues.sort();
        for pair in dues.windows(2) {
            assert_eq!(pair[1] - pair[0], Duration::from_millis(10));
        }
        latencies.sort();
        assert_eq!(latencies[0], Duration::from_millis(30));
        // The last of 20 requests waits behind 19 others of 30 ms: 20 x 30 - 190 ms.
        assert_eq!(latencies[19], Duration::from_millis(410));
        assert!(sessions > 1 && sessions <= 20, "{sessions} sessions");
    }
}
