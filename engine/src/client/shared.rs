//! A client many callers share: [`SharedClient`] is `Clone + Send + Sync`, and each call
//! submits one command (or a few) and gets exactly its own outcomes back. Concurrent calls
//! join one engine request (up to `batch_max` commands), sent on a pool of client sessions
//! with at most `inflight` requests in flight; each session retries its request as sent, so
//! every command still applies exactly once. A command the handler refuses is its own
//! transaction: it affects no other caller's command. A caller's commands are never split
//! between two requests.
//!
//! While every session is busy, callers queue, and the next request takes what queued at
//! once: under load, requests fill by themselves. With a session free, the first caller waits
//! at most `linger` for others (zero by default: an idle client adds no latency). Reads and
//! writes share one queue: a read-only call rides in the next request with the writes, which
//! applies it in the log's order, and a request that formed of reads only is answered off
//! the log ([`Client::submit`]). A request costs the cluster more than a command does, so a
//! read that waited for a request of its own would cost more than the log's few bytes.
//!
//! A call may carry its caller's key ([`SharedClient::submit_keyed`]): its commands still join
//! the next request, as a keyed run the cluster applies once per key, whichever request,
//! client or gateway carries it.

use super::{Client, ClientConfig, ClientError};
use crate::apply::KeyedOutcome;
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, RequestNumber};
use net::message::KeyRun;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::time::Instant;

/// Commands a shared client holds waiting or in flight at most, over every caller, by
/// default; past it a call fails at once ([`SharedError::QueueFull`]) rather than queue
/// without bound.
pub const SHARED_QUEUED_COMMANDS_MAX: usize = 65_536;

/// Engine requests a shared client has in flight at most by default (each on a session of
/// its own).
pub const SHARED_INFLIGHT_DEFAULT: usize = 4;

/// Seconds a pooled session may stay unused before it is dropped rather than used again.
pub const SHARED_SESSION_IDLE_S: u64 = 20;

/// Seconds a shared client's request is retried at most before it gives up (its outcome is
/// then unknown): a shorter [`ClientConfig::give_up_after`] is kept, a longer one (or none)
/// is cut to this.
pub const SHARED_GIVE_UP_S_MAX: u64 = 30;

// The cluster expires a session idle for `session_retention_s` (at least
// SESSION_RETENTION_S_MIN): a pooled session, idle and then retrying, must never meet its own
// expiry.
const _: () =
    assert!(SHARED_SESSION_IDLE_S + SHARED_GIVE_UP_S_MAX < crate::apply::SESSION_RETENTION_S_MIN);

/// What a call gets: its outcomes, in order, or why there are none.
pub type SharedAnswer<H> = Result<Vec<OutcomeOf<H>>, SharedError>;

/// Told each formed request's command count and how long its first caller waited.
pub type OnFormed = Arc<dyn Fn(usize, Duration) + Send + Sync>;

/// Why a call has no outcomes.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SharedError {
    /// The client holds as many commands as it may: nothing was sent; try again later.
    #[error("{max} commands are already waiting in this client; nothing was sent")]
    QueueFull {
        /// The limit ([`SharedOptions::queued_max`]).
        max: usize,
    },
    /// The call holds more commands than the client may hold at once: it can never be sent
    /// as it is; split it.
    #[error("{count} commands in one call, over the {max} this client holds at once")]
    TooMany {
        /// Commands in the call.
        count: usize,
        /// The limit ([`SharedOptions::queued_max`]).
        max: usize,
    },
    /// The client's tasks stopped (its runtime is shutting down) before the call's request
    /// was answered: if it had left, its outcome is unknown.
    #[error("the shared client stopped; the outcome is unknown")]
    Stopped,
    /// The engine request that carried the call's commands failed, for every caller in it.
    #[error("{0}")]
    Client(Arc<ClientError>),
    /// The call's key was used before with other commands: these did not run.
    #[error("the key was used before with other commands; these did not run")]
    KeyReused,
    /// The cluster no longer keeps the call's key: its commands did not run now, and whether
    /// they ran before is not known.
    #[error("the cluster no longer keeps this key; the commands did not run now")]
    KeyExpired,
}

impl SharedError {
    /// The client error behind it, if the cluster's answer (or its silence) is the reason.
    pub fn client_error(&self) -> Option<&ClientError> {
        match self {
            SharedError::Client(error) => Some(error),
            SharedError::QueueFull { .. }
            | SharedError::TooMany { .. }
            | SharedError::Stopped
            | SharedError::KeyReused
            | SharedError::KeyExpired => None,
        }
    }
}

/// How a shared client forms its requests.
#[derive(Clone)]
pub struct SharedOptions {
    /// Commands per engine request at most (1 to the engine's request limit).
    pub batch_max: usize,
    /// Engine requests in flight at most, each on a session of its own.
    pub inflight: usize,
    /// How long the first caller of a request waits for others while a session is free.
    pub linger: Duration,
    /// Commands waiting or in flight at most.
    pub queued_max: usize,
    /// Told of each request formed (for metrics).
    pub on_formed: Option<OnFormed>,
}

impl SharedOptions {
    /// Requests of up to `batch_max` commands, [`SHARED_INFLIGHT_DEFAULT`] in flight, no
    /// linger, [`SHARED_QUEUED_COMMANDS_MAX`] commands held.
    pub fn new(batch_max: usize) -> Self {
        SharedOptions {
            batch_max,
            inflight: SHARED_INFLIGHT_DEFAULT,
            linger: Duration::ZERO,
            queued_max: SHARED_QUEUED_COMMANDS_MAX,
            on_formed: None,
        }
    }
}

impl std::fmt::Debug for SharedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedOptions")
            .field("batch_max", &self.batch_max)
            .field("inflight", &self.inflight)
            .field("linger", &self.linger)
            .field("queued_max", &self.queued_max)
            .finish_non_exhaustive()
    }
}

/// One caller's commands, waiting for an engine request.
struct Pending<H: Handler> {
    commands: Vec<H::Command>,
    /// The caller's key's session, for a keyed call.
    key: Option<ClientId>,
    reply: oneshot::Sender<SharedAnswer<H>>,
    /// The commands' room in the queue's bound, held until they are answered, whether or not
    /// the caller still waits.
    room: OwnedSemaphorePermit,
}

/// A client shared by any number of tasks and threads: clone it freely, every clone feeds
/// the same requests. Made with [`SharedClient::start`] inside a tokio runtime, whose tasks
/// carry its requests.
pub struct SharedClient<H: Handler> {
    inner: Arc<Inner<H>>,
}

impl<H: Handler> Clone for SharedClient<H> {
    fn clone(&self) -> Self {
        SharedClient {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<H: Handler> {
    /// Every call that does not fill a request by itself.
    queue: mpsc::UnboundedSender<Pending<H>>,
    queued: Arc<Semaphore>,
    in_flight: Arc<Semaphore>,
    sessions: Sessions,
    options: SharedOptions,
}

impl<H: Handler> SharedClient<H> {
    /// Starts the client's forming task on the current tokio runtime; sessions connect on
    /// first use.
    pub fn start(config: ClientConfig, options: SharedOptions) -> Self {
        let request_max = net::entry::REQUEST_COMMANDS_MAX as usize;
        assert!(
            (1..=request_max).contains(&options.batch_max)
                && options.inflight >= 1
                && options.queued_max >= 1,
            "{options:?}"
        );
        let most = Duration::from_secs(SHARED_GIVE_UP_S_MAX);
        let give_up = config.give_up_after.map_or(most, |given| given.min(most));
        let sessions = Sessions::new(ClientConfig {
            give_up_after: Some(give_up),
            ..config
        });
        let in_flight = Arc::new(Semaphore::new(options.inflight));
        let (queue, waiting) = mpsc::unbounded_channel();
        let former = Former {
            in_flight: in_flight.clone(),
            sessions: sessions.clone(),
            options: options.clone(),
        };
        tokio::spawn(form(waiting, former));
        let queued = Arc::new(Semaphore::new(options.queued_max));
        let inner = Inner {
            queue,
            queued,
            in_flight,
            sessions,
            options,
        };
        SharedClient {
            inner: Arc::new(inner),
        }
    }

    /// Submits `commands` (one, or a few; a call of `batch_max` or more goes alone, as a
    /// request of its own) with other callers' and waits for their outcomes, in order. A
    /// caller that stops waiting leaves its commands to be sent and answered all the same.
    pub async fn submit(&self, commands: Vec<H::Command>) -> SharedAnswer<H> {
        self.submit_maybe_keyed(None, commands).await
    }

    /// Submits `commands` as [`SharedClient::submit`] does, under the key whose session is
    /// `key` ([`key_session`](crate::client::key_session) of the caller's key, as the
    /// gateway derives it from an idempotency key): the cluster applies them once for that key, and answers a call with
    /// the same key and commands, from this client or any other, with the outcomes they had.
    /// A key used with other commands is [`SharedError::KeyReused`]; one the cluster no longer
    /// keeps, [`SharedError::KeyExpired`]. A call whose every command is read-only goes
    /// without its key: running it again changes nothing.
    pub async fn submit_keyed(&self, key: ClientId, commands: Vec<H::Command>) -> SharedAnswer<H> {
        self.submit_maybe_keyed(Some(key), commands).await
    }

    async fn submit_maybe_keyed(
        &self,
        key: Option<ClientId>,
        commands: Vec<H::Command>,
    ) -> SharedAnswer<H> {
        assert!(!commands.is_empty(), "a call submits at least one command");
        let inner = &self.inner;
        let room = self.room(commands.len())?;
        let key = key.filter(|_| !commands.iter().all(H::read_only));
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            commands,
            key,
            reply,
            room,
        };
        if pending.commands.len() >= inner.options.batch_max {
            return self.submit_alone(pending).await;
        }
        inner
            .queue
            .send(pending)
            .map_err(|_| SharedError::Stopped)?;
        answer.await.unwrap_or(Err(SharedError::Stopped))
    }

    /// Submits one command: [`SharedClient::submit`] of one.
    pub async fn submit_one(&self, command: H::Command) -> Result<OutcomeOf<H>, SharedError> {
        let mut outcomes = self.submit(vec![command]).await?;
        assert_eq!(outcomes.len(), 1, "the client checks an answer's count");
        Ok(outcomes.remove(0))
    }

    /// Room for `count` commands in the client's bound, held until they are answered.
    fn room(&self, count: usize) -> Result<OwnedSemaphorePermit, SharedError> {
        let max = self.inner.options.queued_max;
        let too_many = SharedError::TooMany { count, max };
        let count = u32::try_from(count).map_err(|_| too_many.clone())?;
        if count as usize > max {
            return Err(too_many);
        }
        let room = self.inner.queued.clone().try_acquire_many_owned(count);
        room.map_err(|_| SharedError::QueueFull { max })
    }

    /// A caller's commands that fill an engine request by themselves go at once, without the
    /// hops through a forming task: nobody could share the request.
    async fn submit_alone(&self, mut pending: Pending<H>) -> SharedAnswer<H> {
        let permit = self.inner.in_flight.clone().acquire_owned().await;
        let permit = permit.expect("the semaphore is never closed");
        if let Some(on_formed) = &self.inner.options.on_formed {
            on_formed(pending.commands.len(), Duration::ZERO);
        }
        let sessions = self.inner.sessions.clone();
        let (reply, answer) = oneshot::channel();
        pending.reply = reply;
        tokio::spawn(async move {
            send(vec![pending], &sessions).await;
            drop(permit);
        });
        answer.await.unwrap_or(Err(SharedError::Stopped))
    }
}

/// Idle client sessions, each with its own random id and when its last answered write was
/// sent (`None`: it has written nothing, so the cluster keeps nothing of it to expire), the most
/// recently used last: one engine request at a time each. Only a write refreshes a session
/// at the cluster, so only a write refreshes it here.
///
/// Sessions are taken in rotation, the least recently used first: the cluster evicts the
/// least recently active session when new ones (callers' keys, other clients) fill its
/// `sessions_max`, so a session left idle while the others served would be the first to go,
/// and its next request would be answered that the session expired.
#[derive(Clone)]
struct Sessions {
    config: ClientConfig,
    idle: Arc<Mutex<VecDeque<Pooled>>>,
}

/// An idle session, and when its last answered write was sent.
type Pooled = (Client, Option<Instant>);

impl Sessions {
    fn new(config: ClientConfig) -> Self {
        Sessions {
            config,
            idle: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// The least recently used idle session whose last write is within
    /// [`SHARED_SESSION_IDLE_S`] (staler ones are dropped), or a new one.
    fn take(&self) -> Result<(Client, Option<Instant>), ClientError> {
        let fresh = |wrote: &Option<Instant>| {
            wrote.is_none_or(|at| at.elapsed() < Duration::from_secs(SHARED_SESSION_IDLE_S))
        };
        let mut idle = self.idle.lock().expect("not poisoned");
        while let Some((client, wrote)) = idle.pop_front() {
            if fresh(&wrote) {
                return Ok((client, wrote));
            }
        }
        drop(idle);
        let id = ClientId::random().map_err(ClientError::NoRandomness)?;
        Ok((Client::new(self.config.clone(), id, RequestNumber(1)), None))
    }

    /// Gives a session back for the next request, with when its last answered write was sent.
    fn put(&self, client: Client, wrote: Option<Instant>) {
        self.idle
            .lock()
            .expect("not poisoned")
            .push_back((client, wrote));
    }

    /// Sends `commands` as one engine request on a pooled session, with keyed `runs` if
    /// any; a session the cluster no longer keeps, whose numbers another process took, or
    /// whose request gave up (its number may or may not be logged), is dropped.
    async fn submit<H: Handler>(&self, commands: &[H::Command], runs: Vec<KeyRun>) -> Keyed<H> {
        let (mut client, wrote) = self.take().map_err(|e| SharedError::Client(Arc::new(e)))?;
        let writes = !commands.iter().all(H::read_only);
        // The cluster counts a session's age from when its write applied, which is after it
        // was first sent however long the answer took: the send time errs on the safe side.
        let sent = Instant::now();
        let answer = match runs.is_empty() {
            true => (client.submit::<H>(commands).await)
                .map(|outcomes| outcomes.into_iter().map(KeyedOutcome::Ran).collect()),
            false => client.submit_keyed::<H>(commands, runs).await,
        };
        if keeps_session(&answer) {
            let answered_write = writes && answer.is_ok();
            self.put(client, if answered_write { Some(sent) } else { wrote });
        }
        answer.map_err(|error| SharedError::Client(Arc::new(error)))
    }
}

/// True when the session that sent a request answered so may send the next one: one the
/// cluster forgot, whose number it holds for other commands, or whose request gave up, is
/// dropped.
fn keeps_session<T>(answer: &Result<T, ClientError>) -> bool {
    !matches!(
        answer,
        Err(ClientError::SessionExpired(_)
            | ClientError::Reused(_)
            | ClientError::Stale(_)
            | ClientError::GaveUp { .. }
            | ClientError::Rejected(net::message::Rejection::OlderMembers))
    )
}

/// What a forming task works with.
struct Former {
    in_flight: Arc<Semaphore>,
    sessions: Sessions,
    options: SharedOptions,
}

/// A forming task: engine requests from one queue until every caller is gone.
async fn form<H: Handler>(mut waiting: mpsc::UnboundedReceiver<Pending<H>>, former: Former) {
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
        let permit = former.in_flight.clone().acquire_owned().await;
        let permit = permit.expect("the semaphore is never closed");
        let batch = gather(first, &mut waiting, &mut carried, &former.options, since).await;
        if let Some(on_formed) = &former.options.on_formed {
            on_formed(
                batch.iter().map(|p| p.commands.len()).sum(),
                since.elapsed(),
            );
        }
        let sessions = former.sessions.clone();
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
    options: &SharedOptions,
    since: Instant,
) -> Vec<Pending<H>> {
    let mut commands = first.commands.len();
    let mut batch = vec![first];
    let deadline = since + options.linger;
    while commands < options.batch_max {
        let next = match waiting.try_recv() {
            Ok(next) => Some(next),
            Err(_) if options.linger.is_zero() => None,
            Err(_) => tokio::time::timeout_at(deadline, waiting.recv())
                .await
                .ok()
                .flatten(),
        };
        let Some(next) = next else { break };
        if commands + next.commands.len() > options.batch_max {
            *carried = Some(next);
            break;
        }
        commands += next.commands.len();
        batch.push(next);
    }
    batch
}

/// What an engine request's commands got, keyed or not (an unkeyed command always ran).
type Keyed<H> = Result<Vec<KeyedOutcome<OutcomeOf<H>>>, SharedError>;

/// Sends the callers' commands as one engine request, each keyed caller's as a keyed run,
/// and hands each caller its outcomes.
async fn send<H: Handler>(mut batch: Vec<Pending<H>>, sessions: &Sessions) {
    loop {
        let mut counts = Vec::with_capacity(batch.len());
        let mut commands = Vec::new();
        let mut runs = Vec::new();
        for pending in &mut batch {
            let (first, count) = (commands.len() as u32, pending.commands.len() as u32);
            if let Some(key) = pending.key {
                runs.push(KeyRun { key, first, count });
            }
            counts.push(pending.commands.len());
            commands.append(&mut pending.commands);
        }
        let keyed = !runs.is_empty();
        let answer = sessions.submit::<H>(&commands, runs).await;
        if keyed && refused_for_older_members(&answer) && batch.iter().any(|p| p.key.is_none()) {
            batch = answer_keyed_alone(batch, commands, &counts, &answer);
            continue;
        }
        let (replies, rooms): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|p| (p.reply, p.room)).unzip();
        hand_out::<H>(answer, &counts, replies);
        // Only now do the callers' commands leave the queue's bound.
        drop(rooms);
        return;
    }
}

/// True when the leader refused a request for its keys: a member predates keyed runs.
fn refused_for_older_members<T>(answer: &Result<T, SharedError>) -> bool {
    use net::message::Rejection::OlderMembers;
    matches!(answer, Err(SharedError::Client(error)) if matches!(**error, ClientError::Rejected(OlderMembers)))
}

/// After a refusal for the keys alone: the keyed callers get it, and the others get their
/// `commands` back (laid out by `counts`), to go again without keys.
fn answer_keyed_alone<H: Handler>(
    batch: Vec<Pending<H>>,
    commands: Vec<H::Command>,
    counts: &[usize],
    refusal: &Keyed<H>,
) -> Vec<Pending<H>> {
    let refusal = refusal.as_ref().expect_err("a refusal");
    let mut commands = commands.into_iter();
    let mut again = Vec::new();
    for (mut pending, &count) in batch.into_iter().zip(counts) {
        let own: Vec<H::Command> = commands.by_ref().take(count).collect();
        match pending.key {
            // A caller that went away needs no answer.
            Some(_) => drop(pending.reply.send(Err(refusal.clone()))),
            None => {
                pending.commands = own;
                again.push(pending);
            }
        }
    }
    again
}

/// One caller's answer from its part of a request's outcomes: a key used with other
/// commands, or forgotten, fails the call (nothing of it ran now).
fn caller_answer<H: Handler>(outcomes: Vec<KeyedOutcome<OutcomeOf<H>>>) -> SharedAnswer<H> {
    let mut ran = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        match outcome {
            KeyedOutcome::Ran(outcome) => ran.push(outcome),
            KeyedOutcome::Reused => return Err(SharedError::KeyReused),
            KeyedOutcome::Expired => return Err(SharedError::KeyExpired),
        }
    }
    Ok(ran)
}

/// Splits an engine request's outcomes among its callers, in order; or gives each the
/// failure.
fn hand_out<H: Handler>(
    answer: Keyed<H>,
    counts: &[usize],
    replies: Vec<oneshot::Sender<SharedAnswer<H>>>,
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
                let answer = caller_answer::<H>(outcomes.by_ref().take(count).collect());
                // A caller that went away needs no answer.
                let _ = reply.send(answer);
            }
        }
        Err(failure) => {
            for reply in replies {
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        let address: std::net::SocketAddr = "127.0.0.1:9".parse().expect("an address");
        Sessions::new(ClientConfig::new(9, [address]))
    }

    /// Proves the pool hands out a session that has written nothing, or whose last answered
    /// write was sent within `SHARED_SESSION_IDLE_S`, and drops one whose write is older,
    /// whatever reads it served since: the cluster ages a session from its last write.
    #[tokio::test(start_paused = true)]
    async fn a_pooled_session_is_as_fresh_as_its_last_write() {
        let pool = sessions();
        let (client, wrote) = pool.take().expect("a new session");
        assert_eq!(wrote, None);
        let id = client.id();
        pool.put(client, None);
        let (client, _) = pool.take().expect("the same session");
        assert_eq!(client.id(), id, "a session that wrote nothing never ages");
        pool.put(client, Some(Instant::now()));
        tokio::time::advance(Duration::from_secs(SHARED_SESSION_IDLE_S - 1)).await;
        let (client, wrote) = pool.take().expect("the same session");
        assert_eq!(client.id(), id, "written within the limit");
        pool.put(client, wrote);
        tokio::time::advance(Duration::from_secs(2)).await;
        let (client, wrote) = pool.take().expect("a new session");
        assert_ne!(client.id(), id, "written too long ago: dropped");
        assert_eq!(wrote, None);
    }

    /// Proves pooled sessions are taken in rotation, the least recently used first, so that
    /// none sits idle while the others serve (the cluster evicts the least recently active).
    #[test]
    fn pooled_sessions_are_taken_in_rotation() {
        let pool = sessions();
        let (first, _) = pool.take().expect("a new session");
        let (second, _) = pool.take().expect("a new session");
        let (first_id, second_id) = (first.id(), second.id());
        pool.put(first, None);
        pool.put(second, None);
        let (taken, _) = pool.take().expect("a pooled session");
        assert_eq!(taken.id(), first_id, "the least recently used");
        pool.put(taken, None);
        let (taken, _) = pool.take().expect("a pooled session");
        assert_eq!(taken.id(), second_id, "then the next");
    }

    /// Proves a session whose request gave up (its number may or may not be logged) leaves
    /// the pool, as one the cluster forgot does, and one refused for other reasons stays.
    #[test]
    fn a_session_whose_request_gave_up_leaves_the_pool() {
        let gave_up: Result<(), ClientError> = Err(ClientError::GaveUp {
            attempts: 3,
            seconds: 1.0,
            last_rejection: None,
        });
        assert!(!keeps_session(&gave_up));
        let expired: Result<(), ClientError> = Err(ClientError::SessionExpired(RequestNumber(2)));
        assert!(!keeps_session(&expired));
        assert!(keeps_session(&Ok::<(), ClientError>(())));
        let busy = Err::<(), _>(ClientError::Rejected(net::message::Rejection::Busy));
        assert!(keeps_session(&busy));
    }
}
