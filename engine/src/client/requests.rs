//! A client's decisions without IO: its request numbers, which node to ask, what an answer
//! means for the request, whether to try again and after how long, and when a number is given
//! back. The async [`Client`](super::Client) and the simulator's clients both run this code;
//! `A` is how a node is addressed (a socket address, or a simulated node's id).

use super::{ClientError, RETRY_BACKOFF_MS_MAX, RETRY_BACKOFF_MS_MIN};
use crate::ids::{ClientId, NodeId, RequestNumber};
use net::message::{ClientReply, Refusal, Rejection, Submit};

/// What a node said about the request in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer<A> {
    /// Its command count and encoded outcomes.
    Results(u32, Vec<u8>),
    /// Not the leader; the leader, where the node knows it.
    Redirect(Option<A>),
    /// Refused without being applied.
    Refused(Rejection),
    /// The client had moved past this number.
    Stale,
    /// The cluster keeps no session for this client.
    Expired,
    /// The number was used for other commands.
    Reused,
    /// An earlier pending request of the client has not run yet; this one did not.
    NotYet,
    /// The node closed the connection, saying why.
    Closed(Refusal),
}

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt<A> {
    /// The node answered.
    Answered(Answer<A>),
    /// No answer: the connection failed, or the attempt timed out.
    NoAnswer,
    /// The node refuses this client for good (another cluster, version or key).
    RefusedForGood(Refusal),
}

/// What to do after an attempt.
#[derive(Debug)]
pub enum Next {
    /// The request is over: its command count and encoded outcomes, or why it has none.
    Done(Result<(u32, Vec<u8>), ClientError>),
    /// Try again at [`Requests::target`] after this many milliseconds (0: at once).
    Retry {
        /// The pause.
        after_ms: u64,
    },
}

/// The request in flight: what its attempts have learned.
#[derive(Clone, Debug)]
struct InFlight {
    request: RequestNumber,
    /// Commands the request carries: an answer must hold as many outcomes.
    command_count: u32,
    attempts: u32,
    backoff_ms: u64,
    redirects: u32,
    /// Nodes in a row that refused this client for good.
    refused_by: usize,
    /// The last refusal that asked to try again.
    last_rejection: Option<Rejection>,
    /// Hedges of the attempt under way so far.
    hedges: usize,
    /// A read: it took no number.
    read: bool,
}

impl InFlight {
    fn new(request: RequestNumber, command_count: u32, read: bool) -> Self {
        InFlight {
            request,
            command_count,
            attempts: 0,
            backoff_ms: RETRY_BACKOFF_MS_MIN,
            redirects: 0,
            refused_by: 0,
            last_rejection: None,
            hedges: 0,
            read,
        }
    }
}

/// A client session's numbering and retry logic: one id, requests numbered from the first,
/// one request in flight.
#[derive(Clone, Debug)]
pub struct Requests<A> {
    id: ClientId,
    next_request: u64,
    /// Reads begun.
    reads: u64,
    nodes: Vec<A>,
    target: A,
    rotation: usize,
    /// The connection to the target must be made anew.
    reconnect: bool,
    current: Option<InFlight>,
}

impl<A: Clone + PartialEq> Requests<A> {
    /// A session with id `id` whose next request is numbered `first`, asking `nodes[0]` first.
    pub fn new(nodes: Vec<A>, id: ClientId, first: RequestNumber) -> Self {
        assert!(!nodes.is_empty(), "a cluster has nodes");
        Requests {
            id,
            next_request: first.0,
            reads: 0,
            target: nodes[0].clone(),
            nodes,
            rotation: 0,
            reconnect: false,
            current: None,
        }
    }

    /// The client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// The number the next request will take.
    pub fn next_request(&self) -> RequestNumber {
        RequestNumber(self.next_request)
    }

    /// The node to ask next.
    pub fn target(&self) -> &A {
        &self.target
    }

    /// Asks `node` next (another session's known leader, for a request of the same client).
    pub fn aim_at(&mut self, node: A) {
        if let Some(at) = self.nodes.iter().position(|n| *n == node) {
            self.rotation = at;
        }
        self.target = node;
        self.reconnect = true;
    }

    /// Numbers the next request `next` (requests before it were sent by other lanes of the
    /// same client). Never goes back.
    pub fn skip_to(&mut self, next: RequestNumber) {
        assert!(next.0 >= self.next_request, "request numbers only go up");
        self.next_request = next.0;
    }

    /// True once after the target changed or its connection failed: open a new one.
    pub fn take_reconnect(&mut self) -> bool {
        std::mem::take(&mut self.reconnect)
    }

    /// Starts a request: it takes the next number, which it keeps across every attempt.
    pub fn begin(&mut self, command_count: u32, commands: Vec<u8>) -> Submit {
        self.begin_after(None, command_count, commands)
    }

    /// [`Requests::begin`] for one of several requests in flight: `oldest_pending` is the
    /// client's oldest request still unanswered (`None`: this one), which must run before it.
    pub fn begin_after(
        &mut self,
        oldest_pending: Option<RequestNumber>,
        command_count: u32,
        commands: Vec<u8>,
    ) -> Submit {
        let request = RequestNumber(self.next_request);
        self.next_request += 1;
        self.current = Some(InFlight::new(request, command_count, false));
        Submit {
            client: self.id,
            request,
            oldest_pending: oldest_pending.unwrap_or(request),
            command_count,
            commands,
        }
    }

    /// Starts a read of `command_count` commands: it takes no request number (its answers
    /// are told apart as those of number 0, which no request of a registered client has),
    /// only the next of the client's count of reads, which it keeps across every attempt.
    pub fn begin_read(&mut self, command_count: u32) -> u64 {
        self.current = Some(InFlight::new(RequestNumber(0), command_count, true));
        self.reads = self.reads.wrapping_add(1);
        self.reads
    }

    /// Counts this client's reads on from `count`: a client that may run again under the
    /// same id starts from a random count, so that a leader never takes one of its reads for
    /// one of an earlier run's (a leader answers a read it holds, or answered lately, again).
    pub fn count_reads_from(&mut self, count: u64) {
        self.reads = count;
    }

    /// The request in flight, if any.
    pub fn in_flight(&self) -> Option<RequestNumber> {
        self.current.as_ref().map(|c| c.request)
    }

    /// The attempt at the target has waited another hedge delay without an answer: the node
    /// to send the same request to as well (the other nodes in turn, in the rotation's order;
    /// a later hedge replaces the one before); None when there is no other node. A leader that
    /// stopped without closing its connections is then passed over once another node knows
    /// of a new leader, without waiting out the attempt's timeout; the same number makes every
    /// copy exactly-once, as any retry.
    pub fn hedge(&mut self) -> Option<A> {
        let current = self.current.as_mut()?;
        let others: Vec<&A> = (1..self.nodes.len())
            .map(|step| &self.nodes[(self.rotation + step) % self.nodes.len()])
            .filter(|node| **node != self.target)
            .collect();
        if others.is_empty() {
            return None;
        }
        let node = others[current.hedges % others.len()].clone();
        current.hedges += 1;
        Some(node)
    }

    /// Whether the hedge's `attempt` ends the attempt; if not, the attempt goes on waiting for
    /// the target. A hedge that failed says nothing about the target, and one that points back
    /// at it says that the target still leads.
    pub fn hedge_decides(&self, attempt: &Attempt<A>) -> bool {
        match attempt {
            Attempt::Answered(Answer::Redirect(Some(leader))) => *leader != self.target,
            Attempt::Answered(_) => true,
            Attempt::NoAnswer | Attempt::RefusedForGood(_) => false,
        }
    }

    /// What the hedge's answer from `node` means, when [`Requests::hedge_decides`]: `node`
    /// becomes the target (the driver keeps its connection), then as [`Requests::on_attempt`].
    pub fn on_hedge(
        &mut self,
        node: A,
        attempt: Attempt<A>,
        elapsed_ms: u64,
        give_up_after_ms: Option<u64>,
    ) -> Next {
        if let Some(at) = self.nodes.iter().position(|n| *n == node) {
            self.rotation = at;
        }
        self.target = node;
        self.on_attempt(attempt, elapsed_ms, give_up_after_ms)
    }

    /// What an attempt's end means: the request is over, or where and when to try again.
    /// `elapsed_ms` is the time since [`Requests::begin`]; past `give_up_after_ms` a request
    /// that would be tried again gives up instead (its number stays used: it may be logged).
    pub fn on_attempt(
        &mut self,
        attempt: Attempt<A>,
        elapsed_ms: u64,
        give_up_after_ms: Option<u64>,
    ) -> Next {
        let Some(mut current) = self.current.take() else {
            panic!("an attempt ended with no request in flight");
        };
        current.attempts += 1;
        current.hedges = 0;
        if !matches!(&attempt, Attempt::RefusedForGood(_)) {
            current.refused_by = 0;
        }
        let next = match self.decide(attempt, &mut current) {
            Decision::Done(result) => return Next::Done(result),
            Decision::Now => Next::Retry { after_ms: 0 },
            Decision::BackOff if give_up_after_ms.is_some_and(|limit| elapsed_ms > limit) => {
                return Next::Done(Err(ClientError::GaveUp {
                    attempts: current.attempts,
                    seconds: elapsed_ms as f64 / 1e3,
                    last_rejection: current.last_rejection,
                }));
            }
            Decision::BackOff => {
                let after_ms = current.backoff_ms;
                current.backoff_ms = (current.backoff_ms * 2).min(RETRY_BACKOFF_MS_MAX);
                Next::Retry { after_ms }
            }
        };
        self.current = Some(current);
        next
    }

    /// A request refused for its own bytes, everywhere alike and every time (an attempt that
    /// was logged passed the same checks): the number was never used, and the next request
    /// takes it (sessions start at 1). A read took none.
    fn refused_for_its_bytes(&mut self, current: &InFlight, reason: Rejection) -> Decision {
        if !current.read {
            self.next_request -= 1;
        }
        Decision::Done(Err(ClientError::Rejected(reason)))
    }

    fn decide(&mut self, attempt: Attempt<A>, current: &mut InFlight) -> Decision {
        let request = current.request;
        let answer = match attempt {
            Attempt::Answered(answer) => answer,
            Attempt::NoAnswer => {
                self.move_on();
                return Decision::BackOff;
            }
            // One misconfigured node is not the cluster: give up only when every node in a
            // row refuses this client for good.
            Attempt::RefusedForGood(refusal) => {
                current.refused_by += 1;
                if current.refused_by >= self.nodes.len() {
                    return Decision::Done(Err(ClientError::Refused(refusal)));
                }
                self.move_on();
                return Decision::Now;
            }
        };
        match answer {
            Answer::Results(count, results) if count == current.command_count => {
                Decision::Done(Ok((count, results)))
            }
            // Not this request's answer (a cluster that broke its promise): never passed on.
            Answer::Results(count, _) => Decision::Done(Err(ClientError::OutcomeCount {
                request,
                sent: current.command_count,
                answered: count,
            })),
            // Try again: a full queue or a full disk passes. Neither proves the number unused
            // (an earlier attempt may have been logged), so it is never given back.
            Answer::Refused(reason @ (Rejection::Busy | Rejection::StorageFull)) => {
                current.last_rejection = Some(reason);
                Decision::BackOff
            }
            // A halted node applies nothing more, but the others may: ask them.
            Answer::Refused(Rejection::Halted) => {
                self.move_on();
                Decision::BackOff
            }
            Answer::Refused(
                reason @ (Rejection::Empty
                | Rejection::TooManyCommands { .. }
                | Rejection::Malformed { .. }
                | Rejection::NotReadOnly { .. }),
            ) => self.refused_for_its_bytes(current, reason),
            // No retry waits out an upgrade; an earlier attempt may be logged: number kept.
            Answer::Refused(r @ Rejection::OlderMembers) => {
                Decision::Done(Err(ClientError::Rejected(r)))
            }
            Answer::Stale => Decision::Done(Err(ClientError::Stale(request))),
            Answer::Expired => Decision::Done(Err(ClientError::SessionExpired(request))),
            Answer::Reused => Decision::Done(Err(ClientError::Reused(request))),
            // Not applied, and it will be once the earlier ones have: send it again.
            Answer::NotYet => Decision::BackOff,
            Answer::Redirect(Some(leader)) => {
                self.move_to(leader);
                current.redirects += 1;
                // Follow the first redirect at once; nodes whose hints point at each other go
                // through the back-off.
                if current.redirects == 1 {
                    Decision::Now
                } else {
                    Decision::BackOff
                }
            }
            // The connection timed out (it sat idle, or a frame stalled): the node is fine,
            // try it again on a new connection.
            Answer::Closed(Refusal::IdleTimeout | Refusal::ReadTimeout) => {
                self.reconnect = true;
                Decision::Now
            }
            // A node of a build before reads off the log cannot decode a read: it ends here,
            // and the client sends the same commands as a request through the log.
            Answer::Closed(refusal @ Refusal::Undecodable) if current.read => {
                Decision::Done(Err(ClientError::Refused(refusal)))
            }
            Answer::Redirect(None) | Answer::Closed(_) => {
                self.move_on();
                Decision::BackOff
            }
        }
    }

    fn move_to(&mut self, leader: A) {
        if leader != self.target {
            self.target = leader;
            self.reconnect = true;
        }
    }

    fn move_on(&mut self) {
        self.rotation = (self.rotation + 1) % self.nodes.len();
        self.target = self.nodes[self.rotation].clone();
        self.reconnect = true;
    }
}

/// What an attempt's end decides, before the back-off and the time limit.
enum Decision {
    Done(Result<(u32, Vec<u8>), ClientError>),
    Now,
    BackOff,
}

/// The answer `reply` gives to `request`, if it is about that request; `locate` turns a
/// "not the leader" hint (the leader's id and client address) into where to ask.
pub fn answer_to<A>(
    reply: ClientReply,
    request: RequestNumber,
    locate: impl FnOnce(Option<NodeId>, Option<String>) -> Option<A>,
) -> Option<Answer<A>> {
    if let Some(refusal) = reply.refusal() {
        return Some(Answer::Closed(refusal.clone()));
    }
    if let ClientReply::NotLeader { leader, address } = reply {
        return Some(Answer::Redirect(locate(leader, address)));
    }
    // A read is request 0; any other answer names the request it is about.
    let about = match matches!(reply, ClientReply::ReadResults { .. }) {
        true => Some(RequestNumber(0)),
        false => reply.request(),
    };
    if about != Some(request) {
        return None;
    }
    match reply {
        ClientReply::Results {
            command_count,
            results,
            ..
        }
        | ClientReply::ReadResults {
            command_count,
            results,
        } => Some(Answer::Results(command_count, results)),
        ClientReply::Rejected { reason, .. } => Some(Answer::Refused(reason)),
        ClientReply::Stale { .. } => Some(Answer::Stale),
        ClientReply::Expired { .. } => Some(Answer::Expired),
        ClientReply::Reused { .. } => Some(Answer::Reused),
        ClientReply::NotYet { .. } => Some(Answer::NotYet),
        // Not about a request: ruled out above.
        ClientReply::NotLeader { .. }
        | ClientReply::Refused(_)
        | ClientReply::Session { .. }
        | ClientReply::Status(_)
        | ClientReply::ModeSet(_)
        | ClientReply::MembersChanging { .. }
        | ClientReply::MembersRefused(_)
        | ClientReply::BackupChunk(_)
        | ClientReply::NoBackup { .. }
        | ClientReply::Upgrading { .. }
        | ClientReply::UpgradeRefused(_)
        | ClientReply::Versions(_)
        | ClientReply::Build(_)
        | ClientReply::Changes(_)
        | ClientReply::NoChanges(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests() -> Requests<u8> {
        let mut requests = Requests::new(vec![1, 2, 3], ClientId(7), RequestNumber(1));
        requests.begin(1, vec![0]);
        requests
    }

    #[test]
    fn hedges_go_to_the_other_nodes_in_turn() {
        // Proves each hedge goes to a node other than the target, the others in turn, and that
        // the next attempt starts the turn again after its own target.
        let mut requests = requests();
        assert_eq!(requests.hedge(), Some(2));
        assert_eq!(requests.hedge(), Some(3));
        assert_eq!(requests.hedge(), Some(2));
        let next = requests.on_attempt(Attempt::NoAnswer, 400, None);
        assert!(matches!(next, Next::Retry { .. }));
        assert_eq!(*requests.target(), 2);
        assert_eq!(requests.hedge(), Some(3));
        assert_eq!(requests.hedge(), Some(1));
        let mut alone = Requests::new(vec![1u8], ClientId(8), RequestNumber(1));
        alone.begin(1, vec![0]);
        assert_eq!(alone.hedge(), None);
    }

    #[test]
    fn a_hedge_pointing_back_at_the_target_does_not_decide() {
        // Proves the attempt keeps waiting for a target that the hedge says still leads, and
        // for one whose hedge failed; any other answer decides.
        let requests = requests();
        let back = Attempt::Answered(Answer::Redirect(Some(1)));
        assert!(!requests.hedge_decides(&back));
        assert!(!requests.hedge_decides(&Attempt::NoAnswer));
        assert!(requests.hedge_decides(&Attempt::Answered(Answer::Redirect(Some(3)))));
        assert!(requests.hedge_decides(&Attempt::Answered(Answer::Redirect(None))));
        assert!(requests.hedge_decides(&Attempt::Answered(Answer::Results(1, vec![]))));
    }

    #[test]
    fn the_hedge_that_answers_becomes_the_target() {
        // Proves a redirect from the hedge leads to the leader it names at once, and results
        // from the hedge end the request with the number kept.
        let mut requests = requests();
        requests.hedge();
        let next = requests.on_hedge(2, Attempt::Answered(Answer::Redirect(Some(3))), 150, None);
        assert!(matches!(next, Next::Retry { after_ms: 0 }));
        assert_eq!(*requests.target(), 3);
        requests.hedge();
        let done = requests.on_hedge(1, Attempt::Answered(Answer::Results(1, vec![9])), 300, None);
        assert!(matches!(done, Next::Done(Ok((1, _)))));
        assert_eq!(*requests.target(), 1);
        assert_eq!(requests.next_request(), RequestNumber(2));
    }

    #[test]
    fn an_answer_with_another_outcome_count_is_not_passed_on() {
        // Proves results for 1 command, answered to a request of 3, end the request with an
        // error (not this request's answer) and the number stays used.
        let mut requests = Requests::new(vec![1u8], ClientId(7), RequestNumber(1));
        requests.begin(3, vec![0, 0, 0]);
        let done = requests.on_attempt(Attempt::Answered(Answer::Results(1, vec![9])), 5, None);
        assert!(matches!(
            done,
            Next::Done(Err(ClientError::OutcomeCount {
                request: RequestNumber(1),
                sent: 3,
                answered: 1
            }))
        ));
        assert_eq!(requests.next_request(), RequestNumber(2));
    }

    #[test]
    fn a_reused_number_ends_the_request() {
        // Proves "reused" ends the request with its own error, the number kept used.
        let mut requests = requests();
        let done = requests.on_attempt(Attempt::Answered(Answer::Reused), 5, None);
        assert!(matches!(
            done,
            Next::Done(Err(ClientError::Reused(RequestNumber(1))))
        ));
        assert_eq!(requests.next_request(), RequestNumber(2));
    }

    #[test]
    fn a_read_a_node_cannot_decode_ends_so_that_it_goes_through_the_log() {
        // Proves a read refused as undecodable (a node of a build before reads off the log)
        // ends at once with that refusal, taking no number, so that the client sends it as a
        // request instead of asking the nodes in turn for ever; a request so refused is tried
        // elsewhere as before.
        let mut requests = Requests::new(vec![1, 2, 3], ClientId(7), RequestNumber(1));
        requests.begin_read(1);
        let closed = || Attempt::Answered(Answer::Closed(Refusal::Undecodable));
        assert!(matches!(
            requests.on_attempt(closed(), 5, None),
            Next::Done(Err(ClientError::Refused(Refusal::Undecodable)))
        ));
        assert_eq!(requests.next_request(), RequestNumber(1));
        requests.begin(1, vec![0]);
        assert!(matches!(
            requests.on_attempt(closed(), 5, None),
            Next::Retry { .. }
        ));
    }
}
