//! The simulated clients: each runs the client library's own numbering and retry logic
//! ([`Requests`]) over the simulated network and reports what it is answered to the checker.
//! A client keeps the seed's [`super::swarm::Swarm::pipeline`] requests in flight, as
//! [`crate::client::Client::submit_pipelined`] does: one lane a request, each lane its own
//! [`Requests`] under the client's id, numbered in turn, every one naming the batch's first
//! as its oldest pending; the next batch starts once every lane was answered. In seeds with
//! keys, some write requests carry callers' keys, and a lane sometimes sends a key alone
//! ([`super::keys`]).

use super::violation::Invariant;
use super::{SIM_NODES, Sim, SimEvent, Time, Workload};
use crate::client::{Answer, Attempt, ClientError, Next, Requests, answer_to};
use crate::entry::encode_commands;
use crate::handler::Handler;
use crate::ids::{ClientId, NodeId, RequestNumber};
use net::message::{ClientReply, KeyRun, Submit};
use std::ops::Range;

/// Who waits for an answer at a node: the lane and its attempt.
pub(super) type Token = (usize, u64);

/// One client's requests in flight together: which lanes it sends them on, and how far it is.
pub(super) struct Window {
    /// The client's lanes (indices of [`Sim::clients`]).
    lanes: Range<usize>,
    /// Requests begun.
    pub(super) sent: u32,
    /// Lanes of the batch in flight not answered yet.
    open: u32,
    /// The number the next batch begins with.
    next: RequestNumber,
}

impl Window {
    /// A client's window of `width` lanes, from lane `first`.
    pub(super) fn new(first: usize, width: u32) -> Self {
        Window {
            lanes: first..first + width as usize,
            sent: 0,
            open: 0,
            next: RequestNumber(1),
        }
    }
}

/// One lane of a simulated client: one request in flight.
pub(super) struct SimClient {
    /// Its client's window (an index of [`Sim::windows`]).
    window: usize,
    /// The library's decisions: numbers, target, retries.
    pub(super) requests: Requests<NodeId>,
    /// The request outstanding, as sent on every attempt.
    pub(super) current: Option<Submit>,
    /// The keyed runs of the request outstanding (none: sent as a plain request).
    pub(super) runs: Vec<KeyRun>,
    /// The nodes in the order this lane asks them.
    pub(super) nodes: Vec<NodeId>,
    /// The lane's own numbering while it sends a key alone (`requests` is then the key's).
    pub(super) parked: Option<Requests<NodeId>>,
    /// It is a read (sent as [`net::message::Read`], number 0), with the client's count of
    /// reads: a single lane's request whose commands the handler all marks read-only.
    pub(super) read: Option<u64>,
    /// When it began.
    began: Time,
    /// The attempt in flight (replies and timeouts of earlier ones are ignored).
    pub(super) attempt: u64,
    /// The attempt's latest hedge, if it has one: its own attempt number and the node it went
    /// to (a later hedge replaces the one before, as in the async client).
    hedge: Option<(u64, NodeId)>,
    /// When the attempt in flight was sent.
    attempt_at: Time,
    /// Hedges sent so far (each gets its own attempt number).
    hedges_sent: u64,
}

/// Set in a hedge's attempt number (the client's count of hedges below it), so that its
/// answers are told from the target's and from earlier hedges'.
const HEDGE_ATTEMPT_BIT: u64 = 1 << 63;

impl SimClient {
    /// A lane of client `k` (of id `k + 1`, its window `k`) of a cluster of `count` nodes,
    /// asking node `1 + k % 3` first (one of the first members).
    pub(super) fn new(k: u32, count: u8) -> Self {
        let first = k % u32::from(SIM_NODES);
        let count = u32::from(count);
        let nodes: Vec<NodeId> = (0..count)
            .map(|i| NodeId(1 + ((first + i) % count) as u8))
            .collect();
        let id = ClientId(u128::from(k) + 1);
        SimClient {
            window: k as usize,
            requests: Requests::new(nodes.clone(), id, RequestNumber(1)),
            current: None,
            runs: Vec::new(),
            nodes,
            parked: None,
            read: None,
            began: 0,
            attempt: 0,
            hedge: None,
            attempt_at: 0,
            hedges_sent: 0,
        }
    }
}

impl<W: Workload> Sim<W> {
    /// A node answers a client (the answer may be lost).
    pub(super) fn reply(&mut self, (client, attempt): Token, reply: ClientReply) {
        if self.rng.below(1000) < self.links.loss {
            return;
        }
        let delay = 1 + self.rng.below(10);
        self.schedule(
            delay,
            SimEvent::Reply {
                client,
                attempt,
                reply,
            },
        );
    }

    /// Client `window` begins its next batch of requests, one a lane, if it has any left to
    /// send; with more than one lane each names the batch's first as its oldest pending.
    pub(super) fn next_batch(&mut self, window: usize) {
        let w = &self.windows[window];
        let width = (w.lanes.len() as u32).min(self.options.requests - w.sent);
        let (first, lanes) = (w.next, w.lanes.start);
        let oldest_pending = (w.lanes.len() > 1).then_some(first);
        // Reads go off the log only from single-lane clients, as the client library sends
        // them (a pipelined read keeps its place in the log's order); they take no number,
        // nor does a key sent alone.
        let single = w.lanes.len() == 1;
        let mut numbered = 0;
        for lane in 0..width {
            let client = lanes + lane as usize;
            let c = &mut self.clients[client];
            c.began = self.now;
            c.read = None;
            if self.begin_alone(client) {
                self.send_request(client);
                continue;
            }
            let commands = self.workload.next_request(&mut self.rng);
            if single && commands.iter().all(<W::H as Handler>::read_only) {
                self.begin_read(client, commands);
            } else {
                let number = RequestNumber(first.0 + numbered);
                numbered += 1;
                self.begin_write(client, (number, oldest_pending), commands);
            }
            self.send_request(client);
        }
        let w = &mut self.windows[window];
        w.sent += width;
        w.open = width;
        w.next = RequestNumber(first.0 + numbered);
    }

    /// Lane `client` begins a read of `commands` (off the log, numbered 0).
    fn begin_read(&mut self, client: usize, commands: Vec<<W::H as Handler>::Command>) {
        let bytes = encode_commands(&commands);
        let count = commands.len() as u32;
        let c = &mut self.clients[client];
        c.read = Some(c.requests.begin_read(count));
        let client_id = c.requests.id();
        self.checker.read_sent(client, &commands);
        c.current = Some(Submit {
            client: client_id,
            request: RequestNumber(0),
            oldest_pending: RequestNumber(0),
            command_count: count,
            commands: bytes,
        });
        c.runs = Vec::new();
    }

    /// Lane `client` begins its client's request `number` (naming `oldest_pending`) of
    /// `drawn`, the seed's share of them with keyed runs among the commands.
    fn begin_write(
        &mut self,
        client: usize,
        (number, oldest_pending): (RequestNumber, Option<RequestNumber>),
        drawn: Vec<<W::H as Handler>::Command>,
    ) {
        let (commands, runs) = self.with_keys(drawn);
        let bytes = encode_commands(&commands);
        let count = commands.len() as u32;
        let at = self.report.events;
        let c = &mut self.clients[client];
        c.requests.skip_to(number);
        let submit = c.requests.begin_after(oldest_pending, count, bytes);
        self.checker
            .requested(submit.client, submit.request, (commands, runs.clone()), at);
        c.current = Some(submit);
        c.runs = runs;
    }

    /// A lane's request is over: the client's next batch starts once every lane's is.
    fn lane_done(&mut self, client: usize) {
        let window = self.clients[client].window;
        let w = &mut self.windows[window];
        w.open -= 1;
        if w.open == 0 {
            self.next_batch(window);
        }
    }

    /// An attempt: the request to the client's target (it may be lost), and its timeout.
    pub(super) fn send_request(&mut self, client: usize) {
        let c = &mut self.clients[client];
        let Some(submit) = &c.current else {
            return;
        };
        let request = submit.request;
        c.attempt += 1;
        let (node, attempt) = (*c.requests.target(), c.attempt);
        c.attempt_at = self.now;
        self.send_attempt(node, client, attempt, request);
        let timeout = self.swarm.client_timeout;
        self.schedule(timeout, SimEvent::ClientTimeout { client, attempt });
        if let Some(after) = self.swarm.hedge_after.filter(|&after| after < timeout) {
            self.schedule(after, SimEvent::ClientHedge { client, attempt });
        }
    }

    /// The request of `client`'s attempt `attempt` on its way to `node` (it may be lost).
    fn send_attempt(&mut self, node: NodeId, client: usize, attempt: u64, request: RequestNumber) {
        if self.rng.below(1000) >= self.links.loss {
            let delay = 1 + self.rng.below(10);
            self.schedule(
                delay,
                SimEvent::Request {
                    node,
                    client,
                    attempt,
                    request,
                },
            );
        }
    }

    /// The attempt in flight has waited another hedge delay: the library may send it to
    /// another node as well ([`Requests::hedge`]), and the next hedge is due a delay later
    /// while the attempt lasts.
    pub(super) fn on_hedge(&mut self, client: usize, attempt: u64) {
        let c = &mut self.clients[client];
        let Some(request) = c.current.as_ref().map(|s| s.request) else {
            return;
        };
        if c.attempt != attempt {
            return;
        }
        let Some(other) = c.requests.hedge() else {
            return;
        };
        c.hedges_sent += 1;
        let hedge = HEDGE_ATTEMPT_BIT | c.hedges_sent;
        c.hedge = Some((hedge, other));
        let ends = c.attempt_at + self.swarm.client_timeout;
        self.report.hedges += 1;
        self.send_attempt(other, client, hedge, request);
        if let Some(after) = self
            .swarm
            .hedge_after
            .filter(|&after| self.now + after < ends)
        {
            self.schedule(after, SimEvent::ClientHedge { client, attempt });
        }
    }

    /// The attempt in flight timed out.
    pub(super) fn on_timeout(&mut self, client: usize, attempt: u64) {
        let c = &self.clients[client];
        if c.attempt == attempt && c.current.is_some() {
            self.attempt_ended(client, None, Attempt::NoAnswer);
        }
    }

    /// A node's answer reaches the client.
    pub(super) fn on_reply(&mut self, client: usize, attempt: u64, reply: ClientReply) {
        let c = &self.clients[client];
        let Some(current) = c.current.as_ref().map(|s| s.request) else {
            return;
        };
        let hedge = c
            .hedge
            .filter(|&(hedge, _)| hedge == attempt)
            .map(|(_, node)| node);
        if c.attempt != attempt && hedge.is_none() {
            return;
        }
        let Some(answer) = answer_to(reply, current, |leader, _| leader) else {
            return;
        };
        if matches!(answer, Answer::NotYet) {
            self.report.not_yet += 1;
        }
        let answered = Attempt::Answered(answer);
        match hedge {
            None => self.attempt_ended(client, None, answered),
            Some(node) if c.requests.hedge_decides(&answered) => {
                self.attempt_ended(client, Some(node), answered);
            }
            // The hedge points back at the target: the attempt waits for it.
            Some(_) => {}
        }
    }

    /// What the library decides after an attempt (decided by the hedge's answer from `hedge`,
    /// if given): the request is over, or tried again.
    fn attempt_ended(&mut self, client: usize, hedge: Option<NodeId>, attempt: Attempt<NodeId>) {
        let c = &mut self.clients[client];
        let elapsed_ms = (self.now - c.began) / 10;
        let next = match hedge {
            Some(node) => c.requests.on_hedge(node, attempt, elapsed_ms, None),
            None => c.requests.on_attempt(attempt, elapsed_ms, None),
        };
        // Invalidates the attempt's timeout, its hedge and any late reply to either.
        c.attempt += 1;
        c.hedge = None;
        match next {
            Next::Retry { after_ms } => {
                let attempt = c.attempt;
                let after = (after_ms * 10).max(1);
                self.schedule(after, SimEvent::ClientRetry { client, attempt });
            }
            Next::Done(result) => {
                let submit = c.current.take().expect("a request in flight");
                let alone = c.parked.take().map(|own| c.requests = own).is_some();
                match result {
                    Ok((_, results)) if c.read.is_some() => {
                        self.report.acknowledged += 1;
                        self.report.reads += 1;
                        self.checker.read_answered(client, &results);
                    }
                    Ok((_, results)) => {
                        self.report.acknowledged += 1;
                        let at = self.report.events;
                        self.checker
                            .acknowledged(submit.client, submit.request, results, at);
                    }
                    // A key sent alone after a copy with other commands ran first: so it must
                    // be answered (the oracle checks it from the log).
                    Err(ClientError::Reused(_)) if alone => self.report.keyed_reused += 1,
                    Err(error) => self.client_failed(&submit, &error),
                }
                self.lane_done(client);
            }
        }
    }

    /// A request ended without results: here that is always a violation (fewer clients than
    /// sessions, well-formed commands, no time limit, one cluster).
    fn client_failed(&mut self, submit: &Submit, error: &ClientError) {
        let (client, request) = (submit.client.0, submit.request.0);
        let why = match error {
            ClientError::Stale(_) => "answered stale, but the client never moved past it",
            ClientError::SessionExpired(_) => "answered that its session expired",
            ClientError::Rejected(_) => "refused for its own bytes, which are well formed",
            ClientError::Reused(_) => "answered that its number was used for other commands",
            ClientError::OutcomeCount { .. } => "answered with another request's outcome count",
            ClientError::Decode(_)
            | ClientError::GaveUp { .. }
            | ClientError::Unreachable(_)
            | ClientError::NoRandomness(_)
            | ClientError::Refused(_) => "failed",
        };
        self.checker.violation(
            Invariant::Client,
            format!("client {client} request {request}: {why} ({error})"),
        );
    }
}
