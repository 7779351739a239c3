//! Reads off the log (`notes/decisions/reads.md`). A read, a request of commands the handler
//! marks read-only, runs on the leader's state as it stands: every entry applied and the
//! speculations after them. It is answered, with no entry of its own, once an entry the leader
//! proposed after the read arrived has applied. That entry's commit shows that no newer leader
//! existed when the read arrived, and the entries the read saw have committed by then. Before
//! the leader has applied its own first entry of its term, reads wait: entries an earlier
//! leader committed may not be applied yet. A retry of a read still held (the same client and
//! read count) takes over its answer, as a retried request takes over its waiter.

use super::{Io, Replica};
use crate::batcher::command_ends;
use crate::handler::Handler;
use crate::ids::{ClientId, EntryIndex, RequestNumber};
use net::message::{ClientReply, Read, Rejection, Role};
use std::collections::{BTreeMap, VecDeque};

/// A read, by its client and the client's count of reads.
type ReadKey = (ClientId, u64);

/// Answers of reads a leader keeps after sending them, the newest, for retries whose attempt
/// timed out before the answer came: such a retry is answered at once. Without them a client
/// whose timeout is shorter than a commit would start its read over at every retry, for ever.
pub const READS_ANSWERED_KEPT: usize = 1024;

/// The leader's reads in progress.
pub(super) struct Reads<T> {
    /// Reads that arrived before this leader applied an entry of its term.
    waiting: Vec<Read>,
    /// Reads run, each with the entry whose apply releases its answer; in arrival order, so
    /// in the order of those entries.
    run: VecDeque<(EntryIndex, ReadKey, ClientReply)>,
    /// Who waits for each read held (the newest attempt's).
    tokens: BTreeMap<ReadKey, T>,
    /// The newest answers sent (at most [`READS_ANSWERED_KEPT`]), oldest first in `sent`.
    answered: BTreeMap<ReadKey, ClientReply>,
    sent: VecDeque<ReadKey>,
}

impl<T> Default for Reads<T> {
    fn default() -> Self {
        Reads {
            waiting: Vec::new(),
            run: VecDeque::new(),
            tokens: BTreeMap::new(),
            answered: BTreeMap::new(),
            sent: VecDeque::new(),
        }
    }
}

impl<T> Reads<T> {
    /// Every read's token, the reads forgotten (they are answered elsewhere).
    pub(super) fn drain(&mut self) -> impl Iterator<Item = T> + use<T> {
        self.waiting.clear();
        self.run.clear();
        self.answered.clear();
        self.sent.clear();
        std::mem::take(&mut self.tokens).into_values()
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
            if self.reads.tokens.insert(key, token).is_none() {
                self.reads.waiting.push(read);
                self.serve_reads(out);
            }
            return;
        };
        out.push(Io::Answer { to: token, reply });
    }

    /// Runs the reads that wait, once this leader applied an entry of its term, and answers
    /// those whose entry has applied.
    pub(super) fn serve_reads(&mut self, out: &mut Vec<Io<T>>) {
        let leading = self.core.role() == Role::Leader && self.halted.is_none();
        if leading && self.machine.applied_term() == self.core.term() {
            for read in std::mem::take(&mut self.reads.waiting) {
                let key = (read.client, read.read);
                let release_at = self.core.last_index().next();
                match self.run_read(&read) {
                    Ok(reply) => self.reads.run.push_back((release_at, key, reply)),
                    Err(reason) => self.answer_read(key, refused(reason), out),
                }
            }
        }
        let applied = self.machine.applied_index();
        while self
            .reads
            .run
            .front()
            .is_some_and(|(at, ..)| *at <= applied)
        {
            let (_, key, reply) = self.reads.run.pop_front().expect("a read is due");
            self.answer_read(key, reply, out);
        }
    }

    /// Sends a read's answer, and keeps it for a retry that may come after.
    fn answer_read(&mut self, key: ReadKey, reply: ClientReply, out: &mut Vec<Io<T>>) {
        let reads = &mut self.reads;
        if reads.sent.len() == READS_ANSWERED_KEPT
            && let Some(oldest) = reads.sent.pop_front()
        {
            reads.answered.remove(&oldest);
        }
        reads.sent.push_back(key);
        reads.answered.insert(key, reply.clone());
        if let Some(to) = reads.tokens.remove(&key) {
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
        self.reads
            .run
            .back()
            .is_some_and(|(at, ..)| *at > self.core.last_index())
    }
}

/// A read refused for `reason` (a read has no request number: 0).
fn refused(reason: Rejection) -> ClientReply {
    ClientReply::Rejected {
        request: RequestNumber(0),
        reason,
    }
}
