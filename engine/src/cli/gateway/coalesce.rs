//! Batching across callers: the commands of concurrent HTTP requests, queued here, leave as one
//! engine request of up to `batch_max` commands, from a pool of client sessions with at most
//! `inflight` requests in flight. A caller's commands are never split between two engine
//! requests, and each caller gets exactly its own outcomes back, in order. Every command is
//! its own transaction in the engine whatever request carries it, so batching changes no
//! outcome: a caller cannot tell.
//!
//! While every session is busy the queue grows, and the next request takes what queued (up to
//! `batch_max`) at once: under load batches fill by themselves. With a session free, the first
//! caller waits at most `linger` for others to join it.

use super::answer::Failure;
use super::metrics::GatewayMetrics;
use crate::client::{Client, ClientConfig};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, RequestNumber};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

/// Commands queued for an engine request at most, over every caller; past it a caller is
/// answered 503 at once rather than buffered without bound.
pub const GATEWAY_QUEUED_COMMANDS_MAX: usize = 65_536;

/// Keyed requests (each its own session, never coalesced) in flight at once at most: each
/// holds a connection to the leader, which counts its clients' connections.
pub const GATEWAY_KEYED_INFLIGHT_MAX: usize = 256;

/// What one caller's commands get: their outcomes, or why there are none.
pub type Answer<H> = Result<Vec<OutcomeOf<H>>, Failure>;

/// One caller's commands, waiting for an engine request.
struct Pending<H: Handler> {
    commands: Vec<H::Command>,
    reply: oneshot::Sender<Answer<H>>,
    /// The commands' room in the queue's bound, held until they are answered, whether or not
    /// the caller still waits.
    room: OwnedSemaphorePermit,
}

/// How engine requests are formed.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Commands per engine request at most.
    pub batch_max: usize,
    /// How long the first caller of a request waits for others while a session is free.
    pub linger: Duration,
    /// Engine requests in flight at most (each on its own session).
    pub inflight: usize,
}

/// The callers' side of a coalescer: queue commands and await their outcomes.
pub struct Coalescer<H: Handler> {
    queue: mpsc::UnboundedSender<Pending<H>>,
    queued: Arc<Semaphore>,
    /// Engine requests in flight, shared with the coalescer's task.
    in_flight: Arc<Semaphore>,
    /// Keyed requests in flight.
    keyed: Arc<Semaphore>,
    sessions: Sessions,
    shape: Shape,
    metrics: Arc<GatewayMetrics>,
}

impl<H: Handler> Coalescer<H> {
    /// Starts the coalescer's task on the current runtime.
    pub fn start(config: ClientConfig, shape: Shape, metrics: Arc<GatewayMetrics>) -> Self {
        assert!(shape.batch_max >= 1 && shape.inflight >= 1, "{shape:?}");
        let (queue, waiting) = mpsc::unbounded_channel();
        let sessions = Sessions::new(config);
        let in_flight = Arc::new(Semaphore::new(shape.inflight));
        let task = Task {
            in_flight: in_flight.clone(),
            sessions: sessions.clone(),
            shape,
            metrics: metrics.clone(),
        };
        tokio::spawn(coalesce(waiting, task));
        Coalescer {
            queue,
            queued: Arc::new(Semaphore::new(GATEWAY_QUEUED_COMMANDS_MAX)),
            in_flight,
            keyed: Arc::new(Semaphore::new(GATEWAY_KEYED_INFLIGHT_MAX)),
            sessions,
            shape,
            metrics,
        }
    }

    /// Queues `commands` (1 to the engine's request limit) and waits for their outcomes.
    pub async fn submit(&self, commands: Vec<H::Command>) -> Answer<H> {
        let count = u32::try_from(commands.len()).map_err(|_| Failure::QueueFull)?;
        // Held until the answer: what waits in the queue or in flight stays bounded.
        let Ok(room) = self.queued.clone().try_acquire_many_owned(count) else {
            return Err(Failure::QueueFull);
        };
        if commands.len() >= self.shape.batch_max {
            return self.submit_alone(commands, room).await;
        }
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            commands,
            reply,
            room,
        };
        if self.queue.send(pending).is_err() {
            return Err(Failure::Stopped);
        }
        answer.await.unwrap_or(Err(Failure::Stopped))
    }

    /// Sends `commands` as request 1 of session `id` (an idempotency key's), on a pooled
    /// session's connection; counted in the queue's bound like any caller's commands. The
    /// session's own answers (expired, reused) are the caller's, not the pool's.
    pub async fn submit_keyed(&self, id: ClientId, commands: Vec<H::Command>) -> Answer<H> {
        let count = u32::try_from(commands.len()).map_err(|_| Failure::QueueFull)?;
        let Ok(room) = self.queued.clone().try_acquire_many_owned(count) else {
            return Err(Failure::QueueFull);
        };
        let permit = self.keyed.clone().acquire_owned().await;
        let permit = permit.expect("the semaphore is never closed");
        let sessions = self.sessions.clone();
        let work = async move { sessions.submit_as::<H>(id, &commands).await };
        detached::<H, _>((room, permit), work).await
    }

    /// Sends a caller's commands that fill an engine request by themselves at once, without
    /// the hops through the coalescer's task: nobody could share the request.
    async fn submit_alone(
        &self,
        commands: Vec<H::Command>,
        room: OwnedSemaphorePermit,
    ) -> Answer<H> {
        let permit = self.in_flight.clone().acquire_owned().await;
        let permit = permit.expect("the semaphore is never closed");
        self.metrics.formed(commands.len(), Duration::ZERO);
        let sessions = self.sessions.clone();
        let work = async move { sessions.submit::<H>(&commands).await };
        detached::<H, _>((room, permit), work).await
    }
}

/// Runs `work` (an engine request) in a task of its own that holds `bounds` until it ends, and
/// waits for its answer: a caller that goes away (its connection closed) leaves the request
/// to finish, still counted in the bounds, rather than cut off mid-exchange.
async fn detached<H: Handler, B: Send + 'static>(
    bounds: B,
    work: impl Future<Output = Answer<H>> + Send + 'static,
) -> Answer<H> {
    let (reply, answer) = oneshot::channel();
    tokio::spawn(async move {
        let answered = work.await;
        drop(bounds);
        // A caller that went away needs no answer.
        let _ = reply.send(answered);
    });
    answer.await.unwrap_or(Err(Failure::Stopped))
}

/// Seconds a pooled session may stay unused before it is dropped rather than used again: the
/// cluster expires a session idle for `session_retention_s` (at least
/// `SESSION_RETENTION_S_MIN`), and a pooled session must never meet its own expiry, even
/// with a request retried until [`super::GATEWAY_GIVE_UP_S`].
pub const GATEWAY_SESSION_IDLE_S: u64 = 30;

const _: () = assert!(
    GATEWAY_SESSION_IDLE_S + super::GATEWAY_GIVE_UP_S < crate::apply::SESSION_RETENTION_S_MIN
);

/// Idle client sessions, each with its own random id and when it was last used, the most
/// recently used last: one engine request at a time each.
#[derive(Clone)]
struct Sessions {
    config: ClientConfig,
    idle: Arc<Mutex<Vec<(Client, Instant)>>>,
}

impl Sessions {
    fn new(config: ClientConfig) -> Self {
        Sessions {
            config,
            idle: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The most recently used idle session, or a new one when none was used within
    /// [`GATEWAY_SESSION_IDLE_S`] (those are dropped).
    fn take(&self) -> Result<Client, Failure> {
        let mut idle = self.idle.lock().expect("not poisoned");
        if let Some((client, used)) = idle.pop() {
            if used.elapsed() < Duration::from_secs(GATEWAY_SESSION_IDLE_S) {
                return Ok(client);
            }
            // Every other idle session was used before this one.
            idle.clear();
        }
        drop(idle);
        let id = ClientId::random().map_err(|_| Failure::NoRandomness)?;
        Ok(Client::new(self.config.clone(), id, RequestNumber(1)))
    }

    /// Gives a session back for the next request (a session the cluster no longer keeps is
    /// dropped: the next request starts a new one).
    fn put(&self, client: Client) {
        let used = Instant::now();
        self.idle.lock().expect("not poisoned").push((client, used));
    }

    /// Sends `commands` as request 1 of session `id` on a pooled session's connection, which
    /// goes back to the pool after.
    async fn submit_as<H: Handler>(&self, id: ClientId, commands: &[H::Command]) -> Answer<H> {
        let mut pooled = self.take()?;
        let mut keyed = pooled.lend(id, RequestNumber(1));
        let answer = keyed.submit::<H>(commands).await;
        pooled.reclaim(keyed);
        self.put(pooled);
        answer.map_err(Failure::from)
    }

    /// Sends `commands` as one engine request on a pooled session.
    async fn submit<H: Handler>(&self, commands: &[H::Command]) -> Answer<H> {
        let mut client = self.take()?;
        let answer = client.submit::<H>(commands).await;
        if Failure::keeps_session(&answer) {
            self.put(client);
        }
        answer.map_err(Failure::pooled)
    }
}

/// What the coalescer's task works with.
struct Task {
    in_flight: Arc<Semaphore>,
    sessions: Sessions,
    shape: Shape,
    metrics: Arc<GatewayMetrics>,
}

/// The coalescer's task: forms engine requests from the queue until every caller is gone.
async fn coalesce<H: Handler>(mut waiting: mpsc::UnboundedReceiver<Pending<H>>, task: Task) {
    let Task {
        in_flight,
        sessions,
        shape,
        metrics,
    } = task;
    let mut carried = None;
    loop {
        let first = match carried.take() {
            Some(first) => first,
            None => match waiting.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let since = Instant::now();
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let batch = gather(first, &mut waiting, &mut carried, shape, since).await;
        metrics.formed(
            batch.iter().map(|p| p.commands.len()).sum(),
            since.elapsed(),
        );
        let sessions = sessions.clone();
        tokio::spawn(async move {
            send(batch, &sessions).await;
            drop(permit);
        });
    }
}

/// The callers of one engine request: `first`, what queued meanwhile and what arrives within
/// the linger from `since`, up to `batch_max` commands. A caller that would pass the limit
/// is `carried` to the next request (whole: a caller is never split).
async fn gather<H: Handler>(
    first: Pending<H>,
    waiting: &mut mpsc::UnboundedReceiver<Pending<H>>,
    carried: &mut Option<Pending<H>>,
    shape: Shape,
    since: Instant,
) -> Vec<Pending<H>> {
    let mut commands = first.commands.len();
    let mut batch = vec![first];
    let deadline = since + shape.linger;
    while commands < shape.batch_max {
        let next = match waiting.try_recv() {
            Ok(next) => Some(next),
            Err(_) => tokio::time::timeout_at(deadline, waiting.recv())
                .await
                .ok()
                .flatten(),
        };
        let Some(next) = next else { break };
        if commands + next.commands.len() > shape.batch_max {
            *carried = Some(next);
            break;
        }
        commands += next.commands.len();
        batch.push(next);
    }
    batch
}

/// Sends the callers' commands as one engine request and hands each caller its outcomes.
async fn send<H: Handler>(batch: Vec<Pending<H>>, sessions: &Sessions) {
    let mut counts = Vec::with_capacity(batch.len());
    let mut replies = Vec::with_capacity(batch.len());
    let mut rooms = Vec::with_capacity(batch.len());
    let mut commands = Vec::new();
    for pending in batch {
        counts.push(pending.commands.len());
        commands.extend(pending.commands);
        replies.push(pending.reply);
        rooms.push(pending.room);
    }
    let answer = sessions.submit::<H>(&commands).await;
    hand_out::<H>(answer, &counts, replies);
    // Only now do the callers' commands leave the queue's bound.
    drop(rooms);
}

/// Splits an engine request's outcomes among its callers, in order; or gives each the
/// failure.
fn hand_out<H: Handler>(
    answer: Answer<H>,
    counts: &[usize],
    replies: Vec<oneshot::Sender<Answer<H>>>,
) {
    match answer {
        Ok(outcomes) => {
            assert_eq!(
                outcomes.len(),
                counts.iter().sum::<usize>(),
                "the client checks an answer's outcome count"
            );
            let mut outcomes = outcomes.into_iter();
            for (reply, &count) in replies.into_iter().zip(counts) {
                // A caller that went away (its connection closed) needs no answer.
                let _ = reply.send(Ok(outcomes.by_ref().take(count).collect()));
            }
        }
        Err(failure) => {
            for reply in replies {
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}
