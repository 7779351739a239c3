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
    /// now, after they all arrived) when every other member speaks it; otherwise each waits
    /// for the entry after the log's end.
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

    /// Starts a read round; its checks go out. A round confirmed at once (a cluster of one)
    /// is seen by the caller, which looks at the confirmed round next.
    fn start_read_round(&mut self, out: &mut Vec<Io<T>>) -> u64 {
        let mut actions = Vec::new();
        let round = self.core.start_read_round(&mut actions);
        self.take_actions(actions, out);
        round
    }

    /// A peer connected speaking protocol `version`: what it shows it understands.
    pub fn peer_protocol(&mut self, peer: NodeId, version: u16) {
        self.peer_protocols.insert(peer, version);
    }

    /// Sends a read's answer, and keeps it for a retry that may come after.
    fn answer_read(&mut self, key: ReadKey, reply: ClientReply, out: &mut Vec<Io<T>>) {
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
    use crate::ids::ClientId;

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
}
