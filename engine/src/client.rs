//! The client library: sends requests to the cluster's leader, follows redirects, and retries
//! through timeouts and leader changes until it has the answer. Each request keeps its number
//! across retries, so the cluster applies it exactly once.

use crate::address::Address;
use crate::apply::{KeyedOutcome, PIPELINE_REQUESTS_MAX};
use crate::codec::{self, CodecError};
use crate::entry::encode_commands;
use crate::handler::{Handler, OutcomeOf};
use crate::handshake::{HandshakeError, Offer, introduce};
use crate::ids::{ClientId, RequestNumber};
use futures::{SinkExt, StreamExt};
use net::auth::Key;
use net::frame::{FrameCodec, FrameError};
use net::message::{
    ClientReply, ClientRequest, Hello, KeyRun, Read, Refusal, Rejection, SubmitKeyed,
};
use net::tls::{Stream, Tls};
use std::pin::Pin;
use std::time::{Duration, Instant};
use tokio::time::error::Elapsed;
use tokio_util::codec::Framed;

pub mod blocking;
mod changes;
mod operator;
mod requests;
pub mod shared;

pub use operator::{
    OperatorConfig, OperatorRefused, change_members, set_node_mode, upgrade_handler,
};

pub use changes::{CHANGES_ANSWER_GRACE_MS, CHANGES_ASK_BYTES, ChangeStream, ChangesError};
pub use requests::{Answer, Attempt, Next, Requests, answer_to};
pub use shared::{SharedAnswer, SharedClient, SharedError, SharedOptions};

/// Time to wait for an answer before trying again elsewhere. A leader that stops without
/// closing its connections (paused, or cut off) costs a client this long before it asks the
/// others; a healthy answer takes milliseconds (p99 6 ms at 1,024 commands per request), and
/// an attempt that times out early costs only a redirect back (the session keeps it
/// exactly-once).
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 400;
/// Time an attempt waits for an answer before the same request goes to a second node as well
/// (a hedge, [`Requests::hedge`]): a leader paused or cut off without closing its connections
/// is passed over after this, not after [`REQUEST_TIMEOUT_MS_DEFAULT`]. Well above a healthy
/// answer's time, and about an election's length, so that by then another node knows of a new
/// leader if there is one.
pub const HEDGE_AFTER_MS_DEFAULT: u64 = 150;
/// First and largest pause between attempts. The largest stays below an election's length,
/// so that a client looking for a new leader finds it soon after it is elected.
pub const RETRY_BACKOFF_MS_MIN: u64 = 5;
/// See [`RETRY_BACKOFF_MS_MIN`].
pub const RETRY_BACKOFF_MS_MAX: u64 = 100;

/// Where and how a client reaches a cluster.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The cluster's id.
    pub cluster_id: u64,
    /// Every node's client address (a name is resolved at every connection).
    pub nodes: Vec<Address>,
    /// Time to wait for one answer.
    pub request_timeout: Duration,
    /// Time after which an attempt is also sent to a second node (`None`: never).
    pub hedge_after: Option<Duration>,
    /// Give up on a request after this long (`None`: never give up).
    pub give_up_after: Option<Duration>,
    /// The client key to prove in the handshake, for a cluster that requires one.
    pub key: Option<Key>,
    /// TLS to every node, for a cluster that speaks it (the CA that signs the nodes'
    /// certificates, and this client's own certificate when it presents one).
    pub tls: Option<Tls>,
}

impl ClientConfig {
    /// Defaults: [`REQUEST_TIMEOUT_MS_DEFAULT`] per attempt, hedged after
    /// [`HEDGE_AFTER_MS_DEFAULT`], never give up.
    /// `nodes` are the client addresses: [`std::net::SocketAddr`]s or [`Address`]es.
    pub fn new<A: Into<Address>>(cluster_id: u64, nodes: impl IntoIterator<Item = A>) -> Self {
        ClientConfig {
            cluster_id,
            nodes: nodes.into_iter().map(Into::into).collect(),
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS_DEFAULT),
            hedge_after: Some(Duration::from_millis(HEDGE_AFTER_MS_DEFAULT)),
            give_up_after: None,
            key: None,
            tls: None,
        }
    }
}

/// A node's status (its role, term, indexes, state hash), as [`node_status`] reports it.
pub use net::message::{NodeStatus, Role};

/// Ids [`Client::register`] draws before it gives up (each refused only when the cluster
/// already knows it, a chance of about 2^-128 for a random id).
pub const REGISTER_ATTEMPTS_MAX: u32 = 4;

/// Milliseconds [`Client::resume`] tries for an answer when the configuration never gives up.
pub const RESUME_WAIT_MS_DEFAULT: u64 = 30_000;
/// Milliseconds [`Client::resume`] waits between two questions.
pub const RESUME_RETRY_MS: u64 = 20;

/// Why a request has no results.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The cluster refused the request; nothing of it was applied.
    #[error("rejected: {0:?}")]
    Rejected(Rejection),
    /// The client had already moved past this request number.
    #[error("request {0} is stale")]
    Stale(RequestNumber),
    /// The cluster keeps no session for this client (evicted past its session limit, or the
    /// client started neither with a registration nor at request 1): the request was not
    /// applied now, and whether an earlier attempt of it was is not known. Register again
    /// ([`Client::register`]): the id cannot go on.
    #[error("request {0}: the client's session expired (earlier attempts' outcome unknown)")]
    SessionExpired(RequestNumber),
    /// The request's number was this client id's latest request's, whose commands were other
    /// ones: these were not applied. Another process uses this client id, or the numbers were
    /// given out twice; start a new client id.
    #[error("request {0}: the number was already used for other commands (client id reused?)")]
    Reused(RequestNumber),
    /// The answer held another number of outcomes than the request had commands: it is not
    /// this request's answer, and is not passed on.
    #[error("request {request}: {sent} commands sent, {answered} outcomes answered")]
    OutcomeCount {
        /// The request.
        request: RequestNumber,
        /// Commands it carried.
        sent: u32,
        /// Outcomes in the answer.
        answered: u32,
    },
    /// The answer did not decode.
    #[error("undecodable answer: {0}")]
    Decode(#[from] CodecError),
    /// No answer within the configured time; the outcome is unknown, and the request's number
    /// stays used (it may have been logged).
    #[error(
        "no answer after {attempts} attempts in {seconds:.1} s (last refusal: {last_rejection:?})"
    )]
    GaveUp {
        /// Attempts made.
        attempts: u32,
        /// Seconds spent.
        seconds: f64,
        /// The last refusal that asked to try again (`Busy`, `StorageFull`), if any.
        last_rejection: Option<Rejection>,
    },
    /// The operating system gave no random bytes for a client id.
    #[error("no random client id: {0}")]
    NoRandomness(std::io::Error),
    /// A one-off request (status) could not reach the node.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The cluster refuses this client (another cluster, version or key, or a credential
    /// whose role may not make the request): trying again cannot help.
    #[error("refused: {0}{instead}", instead = instead(.0))]
    Refused(Refusal),
}

/// What to use instead, after a refusal's own message, where the refusal is of the operator
/// credential for a business request.
fn instead(refusal: &Refusal) -> &'static str {
    use net::message::ClientRole::{Application, Operator};
    let operator_for_business = matches!(
        refusal,
        Refusal::Forbidden { role: Operator }
            | Refusal::WrongCredential {
                needs: Application,
                ..
            }
    );
    match operator_for_business {
        true => {
            "; use the application's client file (`client-file --cluster CLUSTER_FILE --out \
             client.toml` writes it), not the operator's"
        }
        false => "",
    }
}

/// A client session: one id, requests numbered from one (after its registration, number
/// 0); one request in flight per [`Client::submit`], up to [`PIPELINE_REQUESTS_MAX`] with
/// [`Client::submit_pipelined`]. A program without tokio uses [`blocking::Client`].
pub struct Client {
    config: ClientConfig,
    requests: Requests<Address>,
    connection: Option<Connection>,
}

impl Client {
    /// A client with id `id` whose next request is numbered `first_request`.
    pub fn new(config: ClientConfig, id: ClientId, first_request: RequestNumber) -> Self {
        let mut requests = Requests::new(config.nodes.clone(), id, first_request);
        requests.count_reads_from(random_read_count());
        Client {
            config,
            requests,
            connection: None,
        }
    }

    /// The client `id` as the cluster left it, for a client restarted with its id: its next
    /// request takes the number after its session's last one (1 when the cluster has no
    /// session of it). Asks the nodes in turn, following the leader's address, until the
    /// leader answers (it answers once it has applied everything committed before the
    /// question) or [`ClientConfig::give_up_after`] (else [`RESUME_WAIT_MS_DEFAULT`]) passes.
    /// An evicted session is [`ClientError::SessionExpired`]: the id cannot go on.
    pub async fn resume(config: ClientConfig, id: ClientId) -> Result<Client, ClientError> {
        let started = Instant::now();
        let limit = (config.give_up_after).unwrap_or(Duration::from_millis(RESUME_WAIT_MS_DEFAULT));
        let (mut target, mut attempts) = (0, 0);
        let mut address = config.nodes[0].clone();
        let question = ClientRequest::Resume(id);
        loop {
            attempts += 1;
            let asked = ask(&config, &address, &question, config.request_timeout);
            let leader = match asked.await {
                Ok(ClientReply::Session {
                    next_request,
                    expired,
                    ..
                }) if !expired => return Ok(Client::new(config, id, next_request)),
                Ok(ClientReply::Session { next_request, .. }) => {
                    return Err(ClientError::SessionExpired(RequestNumber(
                        next_request.0 - 1,
                    )));
                }
                Ok(ClientReply::Refused(refusal)) => return Err(ClientError::Refused(refusal)),
                Ok(ClientReply::NotLeader { address, .. }) => {
                    address.and_then(|a| a.parse::<Address>().ok())
                }
                Ok(_) | Err(_) => None,
            };
            if started.elapsed() > limit {
                return Err(ClientError::GaveUp {
                    attempts,
                    seconds: started.elapsed().as_secs_f64(),
                    last_rejection: None,
                });
            }
            address = leader.unwrap_or_else(|| {
                target = (target + 1) % config.nodes.len();
                config.nodes[target].clone()
            });
            tokio::time::sleep(Duration::from_millis(RESUME_RETRY_MS)).await;
        }
    }

    /// A new client, registered through the log: draws a random 128-bit id and opens its
    /// session with a registration (request number 0, no commands) that the cluster commits
    /// before it answers; the first request is then number 1. An id the cluster already knows
    /// (live or expired) is refused and another is drawn, up to [`REGISTER_ATTEMPTS_MAX`]
    /// times. A client told [`ClientError::SessionExpired`] registers again this way: its
    /// old id cannot go on.
    pub async fn register(config: ClientConfig) -> Result<Client, ClientError> {
        let mut refused = None;
        for _ in 0..REGISTER_ATTEMPTS_MAX {
            let id = ClientId::random().map_err(ClientError::NoRandomness)?;
            let mut client = Client::new(config.clone(), id, RequestNumber(0));
            match client.submit_encoded(Vec::new(), 0).await {
                Ok(_) => return Ok(client),
                Err(
                    error @ (ClientError::Stale(_)
                    | ClientError::SessionExpired(_)
                    | ClientError::Reused(_)),
                ) => refused = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(refused.expect("at least one attempt"))
    }

    /// The client's id.
    pub fn id(&self) -> ClientId {
        self.requests.id()
    }

    /// Sends typed commands as one request; returns each command's outcome. Commands the
    /// handler all marks read-only ([`Handler::read_only`]) go as a read, answered by the
    /// leader without a log entry and with no number of the session.
    pub async fn submit<H: Handler>(
        &mut self,
        commands: &[H::Command],
    ) -> Result<Vec<OutcomeOf<H>>, ClientError> {
        let (encoded, count) = (encode_commands(commands), commands.len() as u32);
        let (count, results) = if is_read::<H>(commands) {
            self.read_encoded(encoded, count).await?
        } else {
            self.submit_encoded(encoded, count).await?
        };
        Ok(crate::apply::decode_outcomes::<H>(&results, count)?)
    }

    /// Sends already encoded commands, every one marked read-only by the handler, as a read
    /// answered off the log (linearizable: see `notes/decisions/reads.md`); returns the
    /// command count and the encoded outcomes. A command not marked read-only refuses the
    /// read ([`Rejection::NotReadOnly`]). Retried as a request is; it takes no number. A node
    /// of a build before reads off the log cannot decode a read: the commands then go as a
    /// request through the log, which takes a number.
    pub async fn read_encoded(
        &mut self,
        commands: Vec<u8>,
        count: u32,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        let read = self.requests.begin_read(count);
        let message = ClientRequest::Read(Read {
            client: self.id(),
            read,
            command_count: count,
            commands,
        });
        match self.exchange_until_done(&message, RequestNumber(0)).await {
            Err(ClientError::Refused(Refusal::Undecodable)) => {
                let ClientRequest::Read(read) = message else {
                    unreachable!("built as a read above")
                };
                self.submit_encoded(read.commands, count).await
            }
            other => other,
        }
    }

    /// The number the next request will take.
    pub fn next_request(&self) -> RequestNumber {
        self.requests.next_request()
    }

    /// Sends already encoded commands as one request; returns the command count and the
    /// encoded outcomes. Retries until it has them (or gives up, if configured to): what an
    /// attempt's end means is decided by [`Requests`].
    pub async fn submit_encoded(
        &mut self,
        commands: Vec<u8>,
        count: u32,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        self.submit_after(None, commands, count).await
    }

    /// Sends `requests` pipelined: up to [`PIPELINE_REQUESTS_MAX`] in flight at once (each on
    /// its own connection), numbered in order. The cluster applies them in that order (a
    /// request that arrives before one it follows is answered "not yet" and sent again), and
    /// the results come back in it, one per request. Every request goes through the log,
    /// read-only ones too, so that reads keep their place in the order. A request given up on (with
    /// [`ClientConfig::give_up_after`]) may hold up the ones after it until they give up too.
    pub async fn submit_pipelined<H: Handler>(
        &mut self,
        requests: &[Vec<H::Command>],
    ) -> Vec<Result<Vec<OutcomeOf<H>>, ClientError>> {
        let mut results = Vec::with_capacity(requests.len());
        for window in requests.chunks(PIPELINE_REQUESTS_MAX) {
            let first = self.next_request();
            let lanes = window.iter().enumerate().map(|(at, commands)| {
                let number = RequestNumber(first.0 + at as u64);
                let mut lane = Client::new(self.config.clone(), self.id(), number);
                lane.requests.aim_at(self.requests.target().clone());
                async move {
                    let encoded = encode_commands(commands);
                    let count = commands.len() as u32;
                    let ended = lane.submit_after(Some(first), encoded, count).await;
                    let outcomes = ended.and_then(|(count, bytes)| {
                        Ok(crate::apply::decode_outcomes::<H>(&bytes, count)?)
                    });
                    (outcomes, lane.requests.target().clone())
                }
            });
            let ended = futures::future::join_all(lanes).await;
            // The next requests go where the first lane was last answered (the leader, as
            // far as it learned).
            if let Some((_, target)) = ended.first()
                && target != self.requests.target()
            {
                self.requests.aim_at(target.clone());
                self.requests.take_reconnect();
                self.connection = None;
            }
            results.extend(ended.into_iter().map(|(outcomes, _)| outcomes));
            self.requests
                .skip_to(RequestNumber(first.0 + window.len() as u64));
        }
        results
    }

    /// Sends typed commands as one request whose `runs` carry their callers' keys (see
    /// [`SubmitKeyed`]); returns each command's outcome, a keyed one's as the cluster's
    /// sessions of its key decided. A node before protocol version 5 cannot decode the
    /// request and refuses it ([`ClientError::Refused`]); a leader whose members are not all
    /// upgraded, with [`Rejection::OlderMembers`].
    pub async fn submit_keyed<H: Handler>(
        &mut self,
        commands: &[H::Command],
        runs: Vec<KeyRun>,
    ) -> Result<Vec<KeyedOutcome<OutcomeOf<H>>>, ClientError> {
        let (encoded, count) = (encode_commands(commands), commands.len() as u32);
        let keyed = keyed_positions(&runs, count);
        let submit = self.requests.begin_after(None, count, encoded);
        let request = submit.request;
        let message = ClientRequest::SubmitKeyed(SubmitKeyed { submit, runs });
        let (count, results) = self.exchange_until_done(&message, request).await?;
        let decoded = crate::apply::decode_keyed_outcomes::<H>(&results, count, |at| {
            keyed.get(at as usize).copied().unwrap_or(false)
        });
        Ok(decoded?)
    }

    async fn submit_after(
        &mut self,
        oldest_pending: Option<RequestNumber>,
        commands: Vec<u8>,
        count: u32,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        let submit = self.requests.begin_after(oldest_pending, count, commands);
        let request = submit.request;
        let message = ClientRequest::Submit(submit);
        self.exchange_until_done(&message, request).await
    }

    /// Sends `message` (the request in flight, numbered `request`) until an attempt ends it.
    async fn exchange_until_done(
        &mut self,
        message: &ClientRequest,
        request: RequestNumber,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        let started = Instant::now();
        let give_up_ms = self.config.give_up_after.map(|d| d.as_millis() as u64);
        loop {
            let (node, attempt) = self.attempt(message, request).await;
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let next = match node {
                Some(node) => self
                    .requests
                    .on_hedge(node, attempt, elapsed_ms, give_up_ms),
                None => self.requests.on_attempt(attempt, elapsed_ms, give_up_ms),
            };
            if self.requests.take_reconnect() {
                self.connection = None;
            }
            match next {
                Next::Done(result) => return result,
                Next::Retry { after_ms: 0 } => {}
                Next::Retry { after_ms } => {
                    tokio::time::sleep(Duration::from_millis(after_ms)).await;
                }
            }
        }
    }

    /// One attempt at the current target, hedged at a second node if the target is silent for
    /// [`ClientConfig::hedge_after`]; returns how it ended, with the hedge's node when the
    /// hedge's answer decided it (its connection is then the one kept).
    async fn attempt(
        &mut self,
        message: &ClientRequest,
        request: RequestNumber,
    ) -> (Option<Address>, Attempt<Address>) {
        let now = tokio::time::Instant::now();
        let deadline = now + self.config.request_timeout;
        let hedge_after = self.config.hedge_after;
        let hedge_at = hedge_after.map(|after| now + after);
        let target = self.requests.target().clone();
        let (config, requests) = (&self.config, &mut self.requests);
        let primary = exchange(config, self.connection.take(), target, message, request);
        let primary = tokio::time::timeout_at(deadline, primary);
        tokio::pin!(primary);
        let mut next_hedge = hedge_at;
        let mut hedge: Option<(Address, Pin<Box<HedgeExchange<'_>>>)> = None;
        let won = loop {
            let hedging = hedge.is_some();
            tokio::select! {
                ended = &mut primary => break Won::Primary(ended),
                () = sleep_until_some(next_hedge), if next_hedge.is_some_and(|at| at < deadline) => {
                    if let Some(other) = requests.hedge() {
                        let exchange = exchange(config, None, other.clone(), message, request);
                        hedge = Some((other, Box::pin(tokio::time::timeout_at(deadline, exchange))));
                    }
                    next_hedge = next_hedge.zip(hedge_after).map(|(at, after)| at + after);
                }
                ended = async { hedge.as_mut().expect("hedging").1.as_mut().await }, if hedging => {
                    let (other, _) = hedge.take().expect("hedging");
                    let (connection, attempt) = attempt_of(ended);
                    if requests.hedge_decides(&attempt) {
                        break Won::Hedge(other, connection, attempt);
                    }
                }
            }
        };
        match won {
            Won::Primary(ended) => {
                let (connection, attempt) = attempt_of(ended);
                self.connection = connection;
                (None, attempt)
            }
            Won::Hedge(other, connection, attempt) => {
                self.connection = connection;
                (Some(other), attempt)
            }
        }
    }
}

/// The context of the derivation of a key's session id: a key names the same session from
/// every gateway and client of every cluster, and nothing else derives ids this way.
const KEY_SESSION_CONTEXT: &str = "engine gateway 2026-12-05 idempotency key session id";

/// The session id of a caller's key (an HTTP Idempotency-Key, an order number): the same
/// from every client and gateway, so that a key sent through any of them is one key.
pub fn key_session(key: &str) -> ClientId {
    let derived = blake3::derive_key(KEY_SESSION_CONTEXT, key.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&derived[..16]);
    ClientId(u128::from_le_bytes(id))
}

/// Which of a request's `count` commands `runs` cover.
fn keyed_positions(runs: &[KeyRun], count: u32) -> Vec<bool> {
    let mut keyed = vec![false; count as usize];
    for run in runs {
        let covered = run.first as usize..(run.end() as usize).min(keyed.len());
        keyed[covered].fill(true);
    }
    keyed
}

/// Where a client's count of reads starts: random, since a client may run again under the
/// same id (the clock's nanoseconds where the system gives no randomness).
fn random_read_count() -> u64 {
    match ClientId::random() {
        Ok(random) => random.0 as u64,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as u64),
    }
}

/// True when `commands` go as a read: there are some, and the handler marks each read-only.
fn is_read<H: Handler>(commands: &[H::Command]) -> bool {
    !commands.is_empty() && commands.iter().all(H::read_only)
}

/// Sleeps until `at`, or for ever.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A hedge's exchange, bounded by the attempt's deadline.
type HedgeExchange<'a> = dyn std::future::Future<Output = Ended> + Send + 'a;

/// A connection to a node.
/// A connection to a node, in clear or in TLS, framed.
pub(crate) type Connection = Framed<Stream, FrameCodec>;

/// How one exchange ended: within the attempt's time or not; with the connection (kept only
/// after an answer) and the answer or why there was none.
type Ended = Result<(Option<Connection>, Result<Answer<Address>, HandshakeError>), Elapsed>;

/// Which exchange of a hedged attempt decided it.
enum Won {
    /// The target's (whatever it was).
    Primary(Ended),
    /// The hedge's, at that node, with its connection and what it means.
    Hedge(Address, Option<Connection>, Attempt<Address>),
}

/// What an exchange's end means for [`Requests`], and the connection to keep.
fn attempt_of(ended: Ended) -> (Option<Connection>, Attempt<Address>) {
    match ended {
        // Refused after the handshake for good (a request the credential's role may not
        // make): as a refusal in the handshake, not a node to try again later.
        Ok((_, Ok(Answer::Closed(refusal)))) if refusal.is_permanent() => {
            (None, Attempt::RefusedForGood(refusal))
        }
        Ok((connection, Ok(answer))) => (connection, Attempt::Answered(answer)),
        Ok((_, Err(HandshakeError::Refused(refusal)))) if refusal.is_permanent() => {
            (None, Attempt::RefusedForGood(refusal))
        }
        Ok((_, Err(_))) | Err(_) => (None, Attempt::NoAnswer),
    }
}

/// Sends `message` to `target` over `connection` (made first if there is none) and waits for
/// this request's answer (answers to earlier attempts are skipped); gives the connection back
/// after an answer. The caller bounds the time.
async fn exchange(
    config: &ClientConfig,
    connection: Option<Connection>,
    target: Address,
    message: &ClientRequest,
    request: RequestNumber,
) -> (Option<Connection>, Result<Answer<Address>, HandshakeError>) {
    let mut frames = match connection {
        Some(frames) => frames,
        None => match connect(config, &target).await {
            Ok(frames) => frames,
            Err(error) => return (None, Err(error)),
        },
    };
    match answer_on(&mut frames, message, request).await {
        Ok(answer) => (Some(frames), Ok(answer)),
        Err(error) => (None, Err(error)),
    }
}

/// Sends `message` on `frames` and reads until this request's answer.
async fn answer_on(
    frames: &mut Connection,
    message: &ClientRequest,
    request: RequestNumber,
) -> Result<Answer<Address>, HandshakeError> {
    frames.send(message).await?;
    loop {
        let frame = frames
            .next()
            .await
            .ok_or_else(|| FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))??;
        let reply: ClientReply = codec::decode(&frame)?;
        let locate = |_, address: Option<String>| address.and_then(|a| a.parse().ok());
        if let Some(answer) = answer_to(reply, request, locate) {
            return Ok(answer);
        }
    }
}

/// What a connection proves, and so what it may ask: an application's configuration
/// ([`ClientConfig`]) or an operator's ([`OperatorConfig`]). Sealed: only these two.
pub trait Connects: private::Sealed {
    /// The cluster's id.
    fn cluster_id(&self) -> u64;
    /// The keys a connection proves, in the order it tries them (`None`: an empty proof).
    fn proofs(&self) -> Vec<Option<&Key>>;
    /// TLS to the nodes, for a cluster that speaks it.
    fn tls(&self) -> Option<&Tls>;
}

mod private {
    pub trait Sealed {}
    impl Sealed for super::ClientConfig {}
    impl Sealed for super::OperatorConfig {}
}

impl Connects for ClientConfig {
    fn cluster_id(&self) -> u64 {
        self.cluster_id
    }

    fn proofs(&self) -> Vec<Option<&Key>> {
        vec![self.key.as_ref()]
    }

    fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }
}

/// Connects to `address` and introduces the caller with the first key `config` proves,
/// offering the newest protocol version; a node of an earlier build that refuses the version
/// is called again with its own, and a node that refuses the key with the next one.
pub(crate) async fn connect(
    config: &impl Connects,
    address: &Address,
) -> Result<Connection, HandshakeError> {
    connect_from(config, address, 0).await
}

/// [`connect`], starting with the key at `first` in `config`'s order.
pub(crate) async fn connect_from(
    config: &impl Connects,
    address: &Address,
    first: usize,
) -> Result<Connection, HandshakeError> {
    let proofs = config.proofs();
    let mut offer = Offer {
        key: first,
        ..Offer::FIRST
    };
    loop {
        let key = proofs.get(offer.key).copied().flatten();
        let to = (address, config.tls());
        match connect_offering(config.cluster_id(), to, offer.version, key).await {
            Err(error) => match offer.after(&error, proofs.len()) {
                Some(next) => offer = next,
                None => return Err(error),
            },
            connected => return connected,
        }
    }
}

async fn connect_offering(
    cluster: u64,
    (address, tls): (&Address, Option<&Tls>),
    version: u16,
    key: Option<&Key>,
) -> Result<Connection, HandshakeError> {
    let stream = crate::address::connect(address)
        .await
        .map_err(FrameError::Io)?;
    stream.set_nodelay(true).map_err(FrameError::Io)?;
    let stream = match tls {
        Some(tls) => tls
            .connect(address.host(), stream)
            .await
            .map_err(FrameError::Io)?,
        None => Stream::Plain(stream),
    };
    let mut frames = Framed::new(stream, FrameCodec::new(cluster));
    let hello = Hello {
        version,
        cluster,
        node: None,
    };
    introduce(&mut frames, &hello, None, key).await?;
    Ok(frames)
}

/// Asks one node which handler versions its build runs and which is in force on it.
pub async fn node_versions(
    config: &impl Connects,
    address: &Address,
    timeout: Duration,
) -> Result<net::message::HandlerVersions, ClientError> {
    let reply = ask(config, address, &ClientRequest::Versions, timeout).await?;
    if let ClientReply::Versions(versions) = reply {
        return Ok(versions);
    }
    Err(unexpected(address, &reply))
}

/// Asks one node which build it runs. A node of a build from before the question existed
/// cannot decode it and refuses it (`Undecodable`): an error here.
pub async fn node_build(
    config: &impl Connects,
    address: &Address,
    timeout: Duration,
) -> Result<net::message::BuildInfo, ClientError> {
    let reply = ask(config, address, &ClientRequest::Build, timeout).await?;
    if let ClientReply::Build(build) = reply {
        return Ok(build);
    }
    Err(unexpected(address, &reply))
}

/// Asks one node for the changes it holds from `request.from` on (the change stream): its
/// batch, or why it has none (a position it no longer keeps, entries it holds no changes
/// of). `timeout` must leave the node its `request.wait_ms`.
pub async fn node_changes(
    config: &impl Connects,
    address: &Address,
    request: net::message::ChangesRequest,
    timeout: Duration,
) -> Result<Result<net::message::ChangeBatch, net::message::ChangesRefusal>, ClientError> {
    let reply = ask(config, address, &ClientRequest::Changes(request), timeout).await?;
    if let ClientReply::Changes(batch) = reply {
        return Ok(Ok(batch));
    }
    if let ClientReply::NoChanges(refusal) = reply {
        return Ok(Err(refusal));
    }
    Err(unexpected(address, &reply))
}

/// Asks one node for its status.
pub async fn node_status(
    config: &impl Connects,
    address: &Address,
    timeout: Duration,
) -> Result<NodeStatus, ClientError> {
    let reply = ask(config, address, &ClientRequest::Status, timeout).await?;
    if let ClientReply::Status(status) = &reply {
        return Ok(NodeStatus::clone(status));
    }
    Err(unexpected(address, &reply))
}

/// One request to one node on a connection of its own, and its reply.
async fn ask(
    config: &impl Connects,
    address: &Address,
    request: &ClientRequest,
    timeout: Duration,
) -> Result<ClientReply, ClientError> {
    let keys = config.proofs().len();
    let mut first = 0;
    loop {
        let reply = ask_from(config, address, request, (timeout, first)).await;
        match &reply {
            Err(ClientError::Refused(refusal))
                if proves_too_little(refusal) && first + 1 < keys =>
            {
                first += 1;
            }
            Ok(_) | Err(_) => return reply,
        }
    }
}

/// True for a refusal that another of a caller's keys may pass: a request an application may
/// not make, from a caller that meant to prove more (an operator whose current key a node not
/// yet told of a rotation took for an application's, where no client secret is set).
pub(crate) fn proves_too_little(refusal: &Refusal) -> bool {
    matches!(
        refusal,
        Refusal::Forbidden {
            role: net::message::ClientRole::Application
        }
    )
}

/// [`ask`], proving the keys from the one at `first` on, within `timeout`.
async fn ask_from(
    config: &impl Connects,
    address: &Address,
    request: &ClientRequest,
    (timeout, first): (Duration, usize),
) -> Result<ClientReply, ClientError> {
    let exchange = async {
        let mut frames = connect_from(config, address, first).await?;
        frames.send(request).await.map_err(HandshakeError::Frame)?;
        let frame = frames.next().await.ok_or(HandshakeError::Closed)??;
        Ok::<_, HandshakeError>(codec::decode::<ClientReply>(&frame)?)
    };
    let unreachable = |e: String| ClientError::Unreachable(format!("{address}: {e}"));
    match tokio::time::timeout(timeout, exchange).await {
        // A refusal that asking again cannot help (a request this credential may not make).
        Ok(Ok(ClientReply::Refused(refusal))) if refusal.is_permanent() => {
            Err(ClientError::Refused(refusal))
        }
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(HandshakeError::Refused(refusal))) if refusal.is_permanent() => {
            Err(ClientError::Refused(refusal))
        }
        Ok(Err(error)) => Err(unreachable(error.to_string())),
        Err(_) => Err(unreachable("timed out".into())),
    }
}

fn unexpected(address: &Address, reply: &ClientReply) -> ClientError {
    ClientError::Unreachable(format!("{address}: unexpected answer {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::message::{Admission, Challenge, PROTOCOL_VERSION, PROTOCOL_VERSION_OLDEST, Proof};

    /// A node of an earlier build: it speaks only the oldest version, refuses any other in
    /// its hello, and admits a caller whose proof holds for that version. Returns the versions
    /// offered to it, connection by connection.
    async fn older_node(listener: tokio::net::TcpListener, key: Key, cluster: u64) -> Vec<u16> {
        let mut offered = Vec::new();
        while offered.last() != Some(&PROTOCOL_VERSION_OLDEST) {
            let (stream, _) = listener.accept().await.unwrap();
            let mut frames = Framed::new(stream, FrameCodec::new(cluster));
            let hello: Hello = codec::decode(&frames.next().await.unwrap().unwrap()).unwrap();
            offered.push(hello.version);
            if hello.version != PROTOCOL_VERSION_OLDEST {
                let refusal = Refusal::Version {
                    theirs: hello.version,
                    ours: PROTOCOL_VERSION_OLDEST,
                };
                frames.send(&Admission::Refused(refusal)).await.unwrap();
                continue;
            }
            let challenge = Challenge {
                nonce: net::auth::fresh_nonce().unwrap(),
            };
            frames.send(&challenge).await.unwrap();
            let proof: Proof = codec::decode(&frames.next().await.unwrap().unwrap()).unwrap();
            let connection = (cluster, PROTOCOL_VERSION_OLDEST);
            assert!(key.verify(connection, None, None, &challenge.nonce, &proof));
            frames.send(&Admission::Accepted).await.unwrap();
        }
        offered
    }

    /// Proves a client offers the newest protocol first and, refused by a node of an earlier
    /// build for a version it speaks too, connects again with that version and is admitted.
    #[tokio::test]
    async fn a_client_falls_back_to_an_older_nodes_version() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let key = Key::client(b"the clients of this cluster know this").unwrap();
        let node = tokio::spawn(older_node(listener, key.clone(), 9));
        let mut config = ClientConfig::new(9, [address]);
        config.key = Some(key);
        let connected = connect(&config, &Address::from(address)).await;
        assert!(connected.is_ok(), "{:?}", connected.err());
        let offered = node.await.unwrap();
        assert_eq!(offered, vec![PROTOCOL_VERSION, PROTOCOL_VERSION_OLDEST]);
    }
}
