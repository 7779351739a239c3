//! The client library: sends requests to the cluster's leader, follows redirects, and retries
//! through timeouts and leader changes until it has the answer. Each request keeps its number
//! across retries, so the cluster applies it exactly once.

use crate::codec::{self, CodecError};
use crate::entry::encode_commands;
use crate::handler::{Handler, OutcomeOf};
use crate::handshake::{HandshakeError, introduce};
use crate::ids::{ClientId, RequestNumber};
use futures::{SinkExt, StreamExt};
use net::auth::Key;
use net::frame::{FrameCodec, FrameError};
use net::message::{
    ClientReply, ClientRequest, Hello, Mode, NodeStatus, PROTOCOL_VERSION, Refusal, Rejection,
    Submit,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// Time to wait for an answer before trying again (possibly elsewhere).
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 1_000;
/// First and largest pause between attempts.
pub const RETRY_BACKOFF_MS_MIN: u64 = 5;
/// See [`RETRY_BACKOFF_MS_MIN`].
pub const RETRY_BACKOFF_MS_MAX: u64 = 500;

/// Where and how a client reaches a cluster.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The cluster's id.
    pub cluster_id: u64,
    /// Every node's client address.
    pub nodes: Vec<SocketAddr>,
    /// Time to wait for one answer.
    pub request_timeout: Duration,
    /// Give up on a request after this long (`None`: never give up).
    pub give_up_after: Option<Duration>,
    /// The client key to prove in the handshake, for a cluster that requires one.
    pub key: Option<Key>,
}

impl ClientConfig {
    /// Defaults: one second per attempt, never give up.
    pub fn new(cluster_id: u64, nodes: Vec<SocketAddr>) -> Self {
        ClientConfig {
            cluster_id,
            nodes,
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS_DEFAULT),
            give_up_after: None,
            key: None,
        }
    }
}

/// Why a request has no results.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The cluster refused the request; nothing of it was applied.
    #[error("rejected: {0:?}")]
    Rejected(Rejection),
    /// The client had already moved past this request number.
    #[error("request {0} is stale")]
    Stale(RequestNumber),
    /// The cluster keeps no session for this client (evicted past its most sessions, or the
    /// client did not start at request 1): the request was not applied now, and whether an
    /// earlier attempt of it was is not known. Start a new client id.
    #[error("request {0}: the client's session expired (earlier attempts' outcome unknown)")]
    SessionExpired(RequestNumber),
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
    /// A one-off request (status) could not reach the node.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The cluster refuses this client (another cluster, version or key): trying again
    /// cannot help.
    #[error("refused: {0}")]
    Refused(Refusal),
}

enum Answer {
    Results(u32, Vec<u8>),
    Redirect(Option<SocketAddr>),
    Refused(Rejection),
    Stale,
    Expired,
    /// The node closed the connection, saying why.
    Closed(Refusal),
}

/// A client session: one id, requests numbered from one, one request in flight.
pub struct Client {
    config: ClientConfig,
    id: ClientId,
    next_request: u64,
    connection: Option<Framed<TcpStream, FrameCodec>>,
    target: SocketAddr,
    rotation: usize,
}

impl Client {
    /// A client with id `id` whose next request is numbered `first_request`.
    pub fn new(config: ClientConfig, id: ClientId, first_request: RequestNumber) -> Self {
        assert!(!config.nodes.is_empty(), "a cluster has nodes");
        let target = config.nodes[0];
        Client {
            config,
            id,
            next_request: first_request.0,
            connection: None,
            target,
            rotation: 0,
        }
    }

    /// The client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// Sends typed commands as one request; returns each command's outcome.
    pub async fn submit<H: Handler>(
        &mut self,
        commands: &[H::Command],
    ) -> Result<Vec<OutcomeOf<H>>, ClientError> {
        let (count, results) = self
            .submit_encoded(encode_commands(commands), commands.len() as u32)
            .await?;
        Ok(crate::apply::decode_outcomes::<H>(&results, count)?)
    }

    /// The number the next request will take.
    pub fn next_request(&self) -> RequestNumber {
        RequestNumber(self.next_request)
    }

    /// Sends already encoded commands as one request; returns the command count and the
    /// encoded outcomes. Retries until it has them (or gives up, if configured to).
    pub async fn submit_encoded(
        &mut self,
        commands: Vec<u8>,
        count: u32,
    ) -> Result<(u32, Vec<u8>), ClientError> {
        let request = RequestNumber(self.next_request);
        self.next_request += 1;
        let message = ClientRequest::Submit(Submit {
            client: self.id,
            request,
            command_count: count,
            commands,
        });
        let started = Instant::now();
        let mut backoff = RETRY_BACKOFF_MS_MIN;
        let mut redirects = 0;
        let mut refused_by = 0;
        let mut last_rejection = None;
        for attempts in 1.. {
            let answer = self.attempt(&message, request).await;
            if !matches!(&answer, Err(HandshakeError::Refused(r)) if r.is_permanent()) {
                refused_by = 0;
            }
            match answer {
                Ok(Answer::Results(count, results)) => return Ok((count, results)),
                // Try again: a full queue or a full disk passes. Neither proves the number
                // unused (an earlier attempt may have been logged), so it is never given back.
                Ok(Answer::Refused(reason @ (Rejection::Busy | Rejection::StorageFull))) => {
                    last_rejection = Some(reason);
                }
                // A halted node applies nothing more, but the others may: ask them.
                Ok(Answer::Refused(Rejection::Halted)) => self.move_on(),
                Ok(Answer::Refused(
                    reason @ (Rejection::Empty
                    | Rejection::TooManyCommands { .. }
                    | Rejection::Malformed { .. }),
                )) => {
                    // Refused for its own bytes, everywhere alike and every time (an attempt
                    // that was logged passed the same checks): the number was never used, and
                    // the next request takes it (sessions start at 1).
                    self.next_request -= 1;
                    return Err(ClientError::Rejected(reason));
                }
                Ok(Answer::Stale) => return Err(ClientError::Stale(request)),
                Ok(Answer::Expired) => return Err(ClientError::SessionExpired(request)),
                Ok(Answer::Redirect(Some(leader))) => {
                    self.move_to(leader);
                    redirects += 1;
                    // Follow the first redirect at once; nodes whose hints point at each other
                    // go through the back-off below.
                    if redirects == 1 {
                        continue;
                    }
                }
                // One misconfigured node is not the cluster: give up only when every node
                // in a row refuses this client for good.
                Err(HandshakeError::Refused(refusal)) if refusal.is_permanent() => {
                    refused_by += 1;
                    if refused_by >= self.config.nodes.len() {
                        return Err(ClientError::Refused(refusal));
                    }
                    self.move_on();
                    continue;
                }
                // The connection timed out (it sat idle, or a frame stalled): the node is
                // fine, try it again on a new connection.
                Ok(Answer::Closed(Refusal::IdleTimeout | Refusal::ReadTimeout)) => {
                    self.connection = None;
                    continue;
                }
                Ok(Answer::Redirect(None)) | Ok(Answer::Closed(_)) | Err(_) => self.move_on(),
            }
            if self
                .config
                .give_up_after
                .is_some_and(|limit| started.elapsed() > limit)
            {
                let seconds = started.elapsed().as_secs_f64();
                return Err(ClientError::GaveUp {
                    attempts,
                    seconds,
                    last_rejection,
                });
            }
            tokio::time::sleep(Duration::from_millis(backoff)).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MS_MAX);
        }
        unreachable!("the loop returns")
    }

    fn move_to(&mut self, leader: SocketAddr) {
        if leader != self.target {
            self.target = leader;
            self.connection = None;
        }
    }

    fn move_on(&mut self) {
        self.rotation = (self.rotation + 1) % self.config.nodes.len();
        self.target = self.config.nodes[self.rotation];
        self.connection = None;
    }

    /// One attempt at the current target: connect if needed, send, wait for this request's
    /// answer (answers to earlier attempts are skipped).
    async fn attempt(
        &mut self,
        message: &ClientRequest,
        request: RequestNumber,
    ) -> Result<Answer, HandshakeError> {
        let timeout = self.config.request_timeout;
        let result = tokio::time::timeout(timeout, async {
            if self.connection.is_none() {
                self.connection = Some(connect(&self.config, self.target).await?);
            }
            let frames = self.connection.as_mut().expect("connected");
            frames.send(message).await?;
            loop {
                let frame = frames
                    .next()
                    .await
                    .ok_or_else(|| FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))??;
                let reply: ClientReply = codec::decode(&frame)?;
                if let Some(answer) = answer_to(reply, request) {
                    return Ok(answer);
                }
            }
        })
        .await;
        match result {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => {
                self.connection = None;
                Err(error)
            }
            Err(_) => {
                self.connection = None;
                Err(FrameError::Io(std::io::ErrorKind::TimedOut.into()).into())
            }
        }
    }
}

/// The answer `reply` gives to `request`, if it is about that request.
fn answer_to(reply: ClientReply, request: RequestNumber) -> Option<Answer> {
    match reply {
        ClientReply::Results {
            request: r,
            command_count,
            results,
            ..
        } if r == request => Some(Answer::Results(command_count, results)),
        ClientReply::Rejected { request: r, reason } if r == request => {
            Some(Answer::Refused(reason))
        }
        ClientReply::Stale { request: r } if r == request => Some(Answer::Stale),
        ClientReply::Expired { request: r } if r == request => Some(Answer::Expired),
        ClientReply::NotLeader { address, .. } => {
            Some(Answer::Redirect(address.and_then(|a| a.parse().ok())))
        }
        ClientReply::Refused(refusal) => Some(Answer::Closed(refusal)),
        ClientReply::Results { .. }
        | ClientReply::Rejected { .. }
        | ClientReply::Stale { .. }
        | ClientReply::Expired { .. }
        | ClientReply::Status(_)
        | ClientReply::ModeSet(_) => None,
    }
}

/// Connects to `address` and introduces the client (with its key, if it has one).
async fn connect(
    config: &ClientConfig,
    address: SocketAddr,
) -> Result<Framed<TcpStream, FrameCodec>, HandshakeError> {
    let stream = TcpStream::connect(address).await.map_err(FrameError::Io)?;
    stream.set_nodelay(true).map_err(FrameError::Io)?;
    let mut frames = Framed::new(stream, FrameCodec::new(config.cluster_id));
    let hello = Hello {
        version: PROTOCOL_VERSION,
        cluster: config.cluster_id,
        node: None,
    };
    introduce(&mut frames, &hello, None, config.key.as_ref()).await?;
    Ok(frames)
}

/// Sets the execution mode of one node (a cluster's operator sets it on every node).
pub async fn set_node_mode(
    config: &ClientConfig,
    address: SocketAddr,
    mode: Mode,
    timeout: Duration,
) -> Result<(), ClientError> {
    let reply = ask(config, address, &ClientRequest::SetMode(mode), timeout).await?;
    if let ClientReply::ModeSet(set) = reply
        && set == mode
    {
        return Ok(());
    }
    Err(unexpected(address, &reply))
}

/// Asks one node for its status.
pub async fn node_status(
    config: &ClientConfig,
    address: SocketAddr,
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
    config: &ClientConfig,
    address: SocketAddr,
    request: &ClientRequest,
    timeout: Duration,
) -> Result<ClientReply, ClientError> {
    let exchange = async {
        let mut frames = connect(config, address).await?;
        frames.send(request).await.map_err(HandshakeError::Frame)?;
        let frame = frames.next().await.ok_or(HandshakeError::Closed)??;
        Ok::<_, HandshakeError>(codec::decode::<ClientReply>(&frame)?)
    };
    let unreachable = |e: String| ClientError::Unreachable(format!("{address}: {e}"));
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(HandshakeError::Refused(refusal))) if refusal.is_permanent() => {
            Err(ClientError::Refused(refusal))
        }
        Ok(Err(error)) => Err(unreachable(error.to_string())),
        Err(_) => Err(unreachable("timed out".into())),
    }
}

fn unexpected(address: SocketAddr, reply: &ClientReply) -> ClientError {
    ClientError::Unreachable(format!("{address}: unexpected answer {reply:?}"))
}
