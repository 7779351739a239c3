//! Reads off the log (`notes/decisions/reads.md`). A read, a request of commands the handler
//! marks read-only, runs on the leader's state as it stands: every entry applied and the
//! speculations after them. It is answered with no entry of its own, once two things hold:
//! no newer leader existed when it arrived, and the entries it saw have committed (applied
//! here). When every other member speaks [`PROTOCOL_VERSION_READ_CHECK`], a read round shows
//! the first (a majority answered a round started after the read arrived), and the read
//! waits for the last entry it saw to apply. Otherwise an entry the leader proposes after the
//! read shows both once it has applied. Before the leader has applied its own first entry of
//! its term, reads wait: entries an earlier leader committed may not be applied yet. A retry
//! of a read still held (the same client and read count) takes over its answer, as a retried
//! request takes over its waiter.

use super::{Io, Replica};
use crate::batcher::command_ends;
use crate::handler::Handler;
use crate::ids::{ClientId, EntryIndex, NodeId, RequestNumber};
use net::message::{ClientReply, PROTOCOL_VERSION_READ_CHECK, Read, Rejection, Role};
use std::collections::{BTreeMap, VecDeque};

/// A read, by its client and the client's count of reads.
type ReadKey = (ClientId, u64);

/// Answers of reads a leader keeps after sending them, the newest, for retries whose attempt
/// timed out before the answer came: such a retry is answered at once. Without them a client
/// whose timeout is shorter than a commit would start its read over at every retry, for ever.
pub const READS_ANSWERED_KEPT: usize = 1024;
/// Bytes of kept answers at most (an answer may be as large as a frame).
pub const READS_ANSWERED_BYTES_MAX: usize = 64 << 20;
/// Reads a leader holds at once (waiting to run, or run and waiting for their entry); a new
/// read past them is refused `Busy`, as a request is when the batcher is full.
pub const READS_HELD_MAX: usize = 4096;

/// What releases a read's answer, once it has run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    /// This entry, proposed after the read ran, has applied.
    Entry(EntryIndex),
    /// This read round, started as the read ran, is confirmed, and this entry, the last the
    /// read saw (applied or speculated), has applied.
    Round { round: u64, saw: EntryIndex },
}

/// The leader's reads in progress.
pub(super) struct Reads<T> {
    /// Reads that arrived before this leader applied an entry of its term.
    waiting: Vec<Read>,
    /// Reads run, each with what releases its answer; in the order they ran, so in the order
    /// of their entries and rounds.
    run: VecDeque<(Release, ReadKey, ClientReply)>,
    /// The highest entry a read run waits for by [`Release::Entry`].
    entry_wanted: EntryIndex,
    /// The replica's tick when it last started a read round.
    round_started_tick: u64,
    /// Who waits for each read held (the newest attempt's).
    tokens: BTreeMap<ReadKey, T>,
    /// The newest answers sent (at most [`READS_ANSWERED_KEPT`]), oldest first in `sent`.
    answered: BTreeMap<ReadKey, ClientReply>,
    sent: VecDeque<ReadKey>,
    /// Bytes of the answers in `answered`.
    answered_bytes: usize,
}

impl<T> Default for Reads<T> {
    fn default() -> Self {
        Reads {
            waiting: Vec::new(),
            run: VecDeque::new(),
            entry_wanted: EntryIndex::ZERO,
            round_started_tick: 0,
            tokens: BTreeMap::new(),
            answered: BTreeMap::new(),
            sent: VecDeque::new(),
            answered_bytes: 0,
        }
    }
}

impl<T> Reads<T> {
    /// Every read's token, the reads forgotten (they are answered elsewhere).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = T> + use<T> {
        self.waiting.clear();
        self.run.clear();
        self.entry_wanted = EntryIndex::ZERO;
        self.answered.clear();
        self.sent.clear();
        self.answered_bytes = 0;
        std::mem::take(&mut self.tokens).into_values()
    }

    /// Every read held waits to run or has run, once, with its token; the answers kept are
    /// counted right and within their bounds. With `recent`, only the counts, no walk.
    fn check_held(&self, recent: bool) {
        assert!(
            self.tokens.len() <= READS_HELD_MAX,
            "{} reads held",
            self.tokens.len()
        );
        assert_eq!(
            self.tokens.len(),
            self.waiting.len() + self.run.len(),
            "reads held: {} tokens for {} waiting and {} run",
            self.tokens.len(),
            self.waiting.len(),
            self.run.len()
        );
        assert!(
            self.answered.len() == self.sent.len() && self.sent.len() <= READS_ANSWERED_KEPT,
            "{} answers kept, {} in their order",
            self.answered.len(),
            self.sent.len()
        );
        if recent {
            // The walks below grow with the reads held and the answers kept.
            return;
        }
        let waiting = self.waiting.iter().map(|read| (read.client, read.read));
        for key in waiting.chain(self.run.iter().map(|(_, key, _)| *key)) {
            assert!(
                self.tokens.contains_key(&key),
                "read {} of client {} held without a token",
                key.1,
                key.0
            );
        }
        let bytes: usize = self.answered.values().map(reply_bytes).sum();
        assert!(
            self.answered_bytes == bytes && bytes <= READS_ANSWERED_BYTES_MAX,
            "answers kept counted as {} bytes, hold {bytes}",
            self.answered_bytes
        );
    }

    /// True when a new read (one not held already) must be refused: [`READS_HELD_MAX`] are.
    fn full(&self, key: &ReadKey) -> bool {
        self.tokens.len() >= READS_HELD_MAX && !self.tokens.contains_key(key)
    }

    /// Keeps `reply` as `key`'s answer for retries, dropping the oldest past
    /// [`READS_ANSWERED_KEPT`] answers or [`READS_ANSWERED_BYTES_MAX`] bytes.
    fn keep(&mut self, key: ReadKey, reply: ClientReply) {
        self.answered_bytes += reply_bytes(&reply);
        if let Some(earlier) = self.answered.insert(key, reply) {
            self.answered_bytes -= reply_bytes(&earlier);
        } else {
            self.sent.push_back(key);
        }
        while self.sent.len() > READS_ANSWERED_KEPT
            || self.answered_bytes > READS_ANSWERED_BYTES_MAX
        {
            let Some(oldest) = self.sent.pop_front() else {
                break;
            };
            if let Some(dropped) = self.answered.remove(&oldest) {
                self.answered_bytes -= reply_bytes(&dropped);
            }
        }
        assert!(
            self.answered_bytes <= READS_ANSWERED_BYTES_MAX
                && self.answered.len() == self.sent.len(),
            "answers kept: {} bytes, {} answers, {} in their order",
            self.answered_bytes,
            self.answered.len(),
            self.sent.len()
        );
    }
}

/// The bytes an answer kept holds (its outcomes; the rest is a few words).
fn reply_bytes(reply: &ClientReply) -> usize {
    if let ClientReply::ReadResults { results, .. } = reply {
        results.len()
    } else {
        0
    }
}

impl<H: Handler, T> Replica<H, T> {
    /// The reads held: none on a replica that does not lead or halted; none waiting to run
    /// once this leader applied an entry of its term; each run waiting for an entry or a round
    /// that can still come.
    pub(super) fn check_reads(&self, recent: bool) {
        let reads = &self.reads;
        reads.check_held(recent);
        let leading = self.core.role() == Role::Leader && self.halted.is_none();
        if !leading {
            assert!(
                reads.tokens.is_empty() && reads.answered.is_empty(),
                "a replica that does not lead holds {} reads, {} answers",
                reads.tokens.len(),
                reads.answered.len()
            );
        }
        // Reads wait for the round out to come back, or for a leader's first entry.
        if self.machine.applied_term() == self.core.term() && self.round_free() {
            assert!(
                reads.waiting.is_empty(),
                "{} reads wait to run though this leader applied an entry of its term and \
                 no read round is out",
                reads.waiting.len()
            );
        }
        let last = self.core.last_index();
        assert!(
            reads.entry_wanted <= last.next(),
            "a read waits for entry {}, past the next to propose (last {last})",
            reads.entry_wanted
        );
        let started = self.core.read_round_started();
        for (release, key, _) in &reads.run {
            let ok = match *release {
                Release::Entry(at) => at <= reads.entry_wanted,
                Release::Round { round, .. } => round <= started,
            };
            assert!(ok, "read {} waits for {release:?}", key.1);
        }
        assert!(
            reads.round_started_tick <= self.ticks,
            "a read round started in the future"
        );
    }

    /// A client's read, to be answered through `token`: refused at once, or run now (or once
    /// this leader applied an entry of its term) and answered once an entry proposed after
    /// it has applied.
    pub fn read(&mut self, read: Read, token: T, out: &mut Vec<Io<T>>) {
        let reply = if self.halted.is_some() {
            refused(Rejection::Halted)
        } else if self.core.role() != Role::Leader {
            self.not_leader()
        } else {
            let key = (read.client, read.read);
            if let Some(reply) = self.reads.answered.get(&key) {
                out.push(Io::Answer {
                    to: token,
                    reply: reply.clone(),
                });
                return;
            }
            if self.reads.full(&key) {
                out.push(Io::Answer {
                    to: token,
                    reply: refused(Rejection::Busy),
                });
                return;
            }
            if self.reads.tokens.insert(key, token).is_none() {
                self.reads.waiting.push(read);
                self.serve_reads(out);
            }
            assert!(
                self.reads.tokens.len() <= READS_HELD_MAX,
                "reads held past the bound"
            );
            return;
        };
        out.push(Io::Answer { to: token, reply });
    }

    /// Runs the reads that wait, once this leader applied an entry of its term, and answers
    /// those whose release came.
    pub(super) fn serve_reads(&mut self, out: &mut Vec<Io<T>>) {
        let leading = self.core.role() == Role::Leader && self.halted.is_none();
        if leading
            && self.machine.applied_term() == self.core.term()
            && !self.reads.waiting.is_empty()
            && self.round_free()
        {
            self.run_waiting_reads(out);
        }
        let applied = self.machine.applied_index();
        let confirmed = self.core.read_round_confirmed();
        let due = |release: &Release| match *release {
            Release::Entry(at) => at <= applied,
            Release::Round { round, saw } => round <= confirmed && saw <= applied,
        };
        while self.reads.run.front().is_some_and(|(at, ..)| due(at)) {
            let (_, key, reply) = self.reads.run.pop_front().expect("a read is due");
            self.answer_read(key, reply, out);
        }
    }

    /// Runs every waiting read on the state as it stands. With a read round (one started
    /// now, after they all arrived: one round for the reads of this step) when every other
    /// member speaks it; otherwise each waits for the entry after the log's end.
    fn run_waiting_reads(&mut self, out: &mut Vec<Io<T>>) {
        let release = if self.read_checks_spoken() {
            Release::Round {
                round: self.start_read_round(out),
                saw: self.machine.speculated_index(),
            }
        } else {
            let at = self.core.last_index().next();
            self.reads.entry_wanted = self.reads.entry_wanted.max(at);
            Release::Entry(at)
        };
        for read in std::mem::take(&mut self.reads.waiting) {
            let key = (read.client, read.read);
            assert!(
                self.reads.tokens.contains_key(&key),
                "read {} of client {} runs for nobody",
                key.1,
                key.0
            );
            match self.run_read(&read) {
                Ok(reply) => self.reads.run.push_back((release, key, reply)),
                Err(reason) => self.answer_read(key, refused(reason), out),
            }
        }
    }

    /// True when every other member has shown, by its handshake, that it answers read rounds.
    fn read_checks_spoken(&self) -> bool {
        let me = self.core.id();
        self.core.members().ids().filter(|&n| n != me).all(|n| {
            self.peer_protocols
                .get(&n)
                .is_some_and(|&v| v >= PROTOCOL_VERSION_READ_CHECK)
        })
    }

    /// True when waiting reads may run now: without rounds (they wait for an entry), or with
    /// no round of this leadership outstanding. Reads that arrive while a round is out wait
    /// for it and then share the next one, so that a leader sends a round per round trip
    /// rather than one per read. A round unconfirmed a heartbeat after it started (a check
    /// or an answer lost) no longer holds them back.
    fn round_free(&self) -> bool {
        if !self.read_checks_spoken() {
            return true;
        }
        let outstanding = self.core.read_round_confirmed() < self.core.read_round_started();
        let heartbeat = u64::from(self.config.core.heartbeat_ticks);
        !outstanding || self.ticks - self.reads.round_started_tick >= heartbeat
    }

    /// Starts a read round; its checks go out. A round confirmed at once (a cluster of one)
    /// is seen by the caller, which looks at the confirmed round next.
    fn start_read_round(&mut self, out: &mut Vec<Io<T>>) -> u64 {
        let mut actions = Vec::new();
        let round = self.core.start_read_round(&mut actions);
        assert_eq!(
            round,
            self.core.read_round_started(),
            "the round just started"
        );
        self.reads.round_started_tick = self.ticks;
        self.take_actions(actions, out);
        round
    }

    /// Reads whose round is not confirmed a heartbeat after the last round started (a check
    /// or an answer was lost, the members changed) wait for a new round instead; when a
    /// member no longer speaks rounds (it came back on an older build), for the next entry.
    /// Either comes after the reads ran, so it shows what their own round would have.
    pub(super) fn renew_read_rounds(&mut self, out: &mut Vec<Io<T>>) {
        let confirmed = self.core.read_round_confirmed();
        let unconfirmed = |release: &Release| matches!(release, Release::Round { round, .. } if *round > confirmed);
        let heartbeat = u64::from(self.config.core.heartbeat_ticks);
        if self.core.role() != Role::Leader
            || self.halted.is_some()
            || self.ticks - self.reads.round_started_tick < heartbeat
            || !self
                .reads
                .run
                .iter()
                .any(|(release, ..)| unconfirmed(release))
        {
            return;
        }
        let at = self.core.last_index().next();
        let renewed = if self.read_checks_spoken() {
            Some(self.start_read_round(out))
        } else {
            self.reads.entry_wanted = self.reads.entry_wanted.max(at);
            None
        };
        for (release, ..) in self.reads.run.iter_mut() {
            if let Release::Round { round, saw } = release
                && *round > confirmed
            {
                *release = match renewed {
                    Some(round) => Release::Round { round, saw: *saw },
                    None => Release::Entry(at),
                };
            }
        }
    }

    /// A peer connected speaking protocol `version`: what it shows it understands.
    pub fn peer_protocol(&mut self, peer: NodeId, version: u16) {
        self.peer_protocols.insert(peer, version);
    }

    /// Sends a read's answer, and keeps it for a retry that may come after.
    fn answer_read(&mut self, key: ReadKey, reply: ClientReply, out: &mut Vec<Io<T>>) {
        assert_eq!(
            self.core.role(),
            Role::Leader,
            "a read answered by a replica that does not lead"
        );
        self.reads.keep(key, reply.clone());
        if let Some(to) = self.reads.tokens.remove(&key) {
            out.push(Io::Answer { to, reply });
        }
    }

    /// Runs `read` on the state as it stands: its answer, or why it is refused.
    fn run_read(&mut self, read: &Read) -> Result<ClientReply, Rejection> {
        // Numbered as a first request so that only the commands are checked.
        let ends = command_ends::<H>(RequestNumber(1), &read.commands, read.command_count)?;
        let results = self
            .machine
            .read(&read.commands, &ends, self.now_ms)
            .map_err(|command| Rejection::NotReadOnly { command })?;
        Ok(ClientReply::ReadResults {
            command_count: read.command_count,
            results,
        })
    }

    /// True when a read waits for an entry past the end of the log: the leader proposes an
    /// empty one when no request waits to make it.
    pub(super) fn reads_need_entry(&self) -> bool {
        self.reads.entry_wanted > self.core.last_index()
    }
}

/// A read refused for `reason` (a read has no request number: 0).
fn refused(reason: Rejection) -> ClientReply {
    ClientReply::Rejected {
        request: RequestNumber(0),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClientId, Term};
    use crate::replica::tests::{Echo, HEARTBEAT_TICKS, N2, N3, appended, matched};
    use net::message::{PeerMessage, ReadCheckReply};

    /// Node 1 leading term 1, with every peer speaking read rounds.
    fn leader() -> Replica<Echo, u32> {
        let mut replica = crate::replica::tests::leader();
        for peer in [N2, N3] {
            replica.peer_protocol(peer, PROTOCOL_VERSION_READ_CHECK);
        }
        replica
    }

    /// A client's read of one command.
    fn one_read() -> Read {
        Read {
            client: ClientId(5),
            read: 1,
            command_count: 1,
            commands: crate::entry::encode_commands(&[42u64]),
        }
    }

    /// The rounds of the checks in `out`, and the answers.
    fn checks_and_answers(out: &[Io<u32>]) -> (Vec<u64>, Vec<&ClientReply>) {
        let checks = out.iter().filter_map(|io| {
            let Io::Send {
                message: PeerMessage::ReadCheck(check),
                ..
            } = io
            else {
                return None;
            };
            Some(check.round)
        });
        let answers = out.iter().filter_map(|io| {
            let Io::Answer { reply, .. } = io else {
                return None;
            };
            Some(reply)
        });
        (checks.collect(), answers.collect())
    }

    /// Proves reads that arrive while a round is out start no round of their own: they wait
    /// for it to come back and then share the next one, which answers them all.
    #[test]
    fn reads_arriving_during_a_round_share_the_next() {
        let mut replica = leader();
        let mut out = Vec::new();
        replica.read(one_read(), 9, &mut out);
        let (checks, _) = checks_and_answers(&out);
        let first = checks[0];
        out.clear();
        for read in 2..5 {
            replica.read(Read { read, ..one_read() }, 9, &mut out);
        }
        let (checks, answers) = checks_and_answers(&out);
        assert!(
            checks.is_empty() && answers.is_empty(),
            "{checks:?} {answers:?}"
        );
        let confirm = |round| {
            let (term, from) = (Term(1), NodeId(3));
            PeerMessage::ReadCheckReply(ReadCheckReply { term, from, round })
        };
        replica.receive(NodeId(3), confirm(first), &mut out);
        let (checks, answers) = checks_and_answers(&out);
        assert_eq!(answers.len(), 1, "the first read: {answers:?}");
        assert_eq!(checks.len(), 2, "one round for the three that waited");
        let next = checks[0];
        out.clear();
        replica.receive(NodeId(3), confirm(next), &mut out);
        let (checks, answers) = checks_and_answers(&out);
        assert_eq!((checks.len(), answers.len()), (0, 3), "{answers:?}");
    }

    /// Proves a read is answered once a majority answered a round started when it ran, not
    /// before, and that when every check or answer of its round is lost the leader starts a
    /// new round for it a heartbeat later, instead of holding it until another read comes.
    #[test]
    fn a_read_whose_round_is_lost_gets_a_new_one() {
        let mut replica = leader();
        let mut out = Vec::new();
        replica.read(one_read(), 9, &mut out);
        let (checks, answers) = checks_and_answers(&out);
        assert_eq!(checks.len(), 2, "a check to each other member");
        assert!(answers.is_empty(), "no answer before a majority confirms");
        let lost = checks[0];
        out.clear();
        for _ in 0..HEARTBEAT_TICKS {
            replica.tick(0, &mut out);
        }
        let (renewed, answers) = checks_and_answers(&out);
        assert!(answers.is_empty());
        let round = *renewed.first().expect("a new round after a heartbeat");
        assert!(round > lost);
        out.clear();
        let answer = PeerMessage::ReadCheckReply(ReadCheckReply {
            term: Term(1),
            from: NodeId(3),
            round,
        });
        replica.receive(NodeId(3), answer, &mut out);
        let (_, answers) = checks_and_answers(&out);
        assert!(
            matches!(
                answers[..],
                [ClientReply::ReadResults {
                    command_count: 1,
                    ..
                }]
            ),
            "{answers:?}"
        );
    }

    fn answer(bytes: usize) -> ClientReply {
        ClientReply::ReadResults {
            command_count: 1,
            results: vec![0; bytes],
        }
    }

    /// Proves the answers kept for retries are bounded in number and in bytes, the oldest
    /// dropped first, and that the held reads are bounded (a read already held is not new).
    #[test]
    fn kept_answers_and_held_reads_are_bounded() {
        let mut reads = Reads::<u32>::default();
        let key = |n: u64| (ClientId(1), n);
        for n in 0..READS_ANSWERED_KEPT as u64 + 10 {
            reads.keep(key(n), answer(8));
        }
        assert_eq!(reads.answered.len(), READS_ANSWERED_KEPT);
        assert!(!reads.answered.contains_key(&key(9)));
        assert!(reads.answered.contains_key(&key(10)));
        let big = READS_ANSWERED_BYTES_MAX / 2 + 1;
        reads.keep(key(100_000), answer(big));
        reads.keep(key(100_001), answer(big));
        assert!(reads.answered_bytes <= READS_ANSWERED_BYTES_MAX);
        assert_eq!(reads.answered.len(), 1, "only the newest large answer fits");
        assert!(reads.answered.contains_key(&key(100_001)));
        reads.keep(key(100_001), answer(8));
        assert_eq!(
            (reads.answered_bytes, reads.sent.len()),
            (8, 1),
            "kept once"
        );
        for n in 0..READS_HELD_MAX as u64 {
            reads.tokens.insert(key(n), 0);
        }
        assert!(reads.full(&key(u64::MAX)));
        assert!(!reads.full(&key(3)), "a retry of a held read takes it over");
    }

    /// Proves a read whose round is not confirmed when a member turns out to speak an older
    /// protocol (it came back on an earlier build) waits for the next entry instead: the
    /// leader proposes an empty one and answers once it has applied.
    #[test]
    fn a_read_falls_back_to_the_next_entry_when_a_member_goes_back_a_version() {
        let mut replica = leader();
        let mut out = Vec::new();
        replica.read(one_read(), 9, &mut out);
        replica.peer_protocol(NodeId(3), net::message::PROTOCOL_VERSION_OLDEST);
        out.clear();
        for _ in 0..HEARTBEAT_TICKS {
            replica.tick(0, &mut out);
        }
        let (checks, answers) = checks_and_answers(&out);
        assert!(
            checks.is_empty() && answers.is_empty(),
            "{checks:?} {answers:?}"
        );
        let noop = appended(&out).expect("an empty entry for the read");
        replica.persisted(noop.index, noop.term, &mut out);
        out.clear();
        replica.receive(NodeId(2), matched(N2, noop.index), &mut out);
        let (_, answers) = checks_and_answers(&out);
        assert!(
            matches!(answers[..], [ClientReply::ReadResults { .. }]),
            "{answers:?}"
        );
    }
}
