//! A handler in memory, without log or network: for handler authors' tests and examples.

use crate::apply::{ApplyError, ReplyStatus, StateMachine, decode_outcomes};
use crate::entry::{EntryHash, Request, encode_commands, whole_requests_entry};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, RequestNumber, Term};
use crate::state::{CapacityTooSmall, State};

/// Runs commands through the real apply path (entries, per-command transactions, sessions, the
/// state hash), one request per entry, from one client (`ClientId(1)`, requests numbered from
/// 1).
///
/// The state hash covers the client sessions too (each finished request's client, number,
/// command count, digest and outcomes), so a cluster's hash equals a sandbox's only for the
/// same requests from the same client: the same records alone give equal hashes only when
/// the requests that wrote them were the same. How requests are packed into entries does not
/// change the hash.
pub struct Sandbox<H: Handler> {
    machine: StateMachine<H>,
    prev_hash: EntryHash,
    next_request: u64,
    now_ms: u64,
}

impl<H: Handler> Sandbox<H> {
    /// A sandbox whose state holds at most `capacity_bytes`.
    ///
    /// # Panics
    /// When `capacity_bytes` is below what the handler's empty tables take (the message
    /// gives both numbers): every command would fail with
    /// [`crate::StateError::CapacityExhausted`]. [`Sandbox::try_new`] returns it as an error.
    pub fn new(handler: H, capacity_bytes: u64) -> Self {
        Sandbox::try_new(handler, capacity_bytes).unwrap_or_else(|refused| panic!("{refused}"))
    }

    /// A sandbox whose state holds at most `capacity_bytes`, or the refusal of a capacity
    /// below the handler's empty tables ([`crate::Schema::empty_bytes`]).
    pub fn try_new(handler: H, capacity_bytes: u64) -> Result<Self, CapacityTooSmall> {
        Ok(Sandbox {
            machine: StateMachine::try_new(handler, capacity_bytes)?,
            prev_hash: EntryHash::default(),
            next_request: 1,
            now_ms: 0,
        })
    }

    /// Sets the time stamped on later entries (what [`crate::Tx::now_ms`] returns).
    pub fn set_now_ms(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
    }

    /// Applies `commands` as one request in one entry; returns each command's outcome.
    pub fn run(&mut self, commands: &[H::Command]) -> Result<Vec<OutcomeOf<H>>, ApplyError> {
        let bytes = encode_commands(commands);
        let request = Request {
            client: ClientId(1),
            number: RequestNumber(self.next_request),
            command_count: commands.len() as u32,
            commands: &bytes,
        };
        self.next_request += 1;
        let index = self.machine.applied_index().next();
        let entry = whole_requests_entry(index, Term(1), &self.prev_hash, self.now_ms, &[request]);
        self.prev_hash = entry.header.hash;
        let mut applied = self.machine.apply(&entry)?;
        let reply = applied
            .replies
            .pop()
            .expect("a whole request finishes in its entry");
        match reply.status {
            ReplyStatus::Results(results) => {
                Ok(decode_outcomes::<H>(&results, reply.command_count)
                    .expect("outcomes the engine encoded decode"))
            }
            ReplyStatus::Stale
            | ReplyStatus::Expired
            | ReplyStatus::Reused
            | ReplyStatus::NotYet => {
                unreachable!("the sandbox numbers its requests in order, from 1")
            }
        }
    }

    /// The state, for inspection.
    pub fn state(&self) -> &State {
        self.machine.state()
    }

    /// The state machine.
    pub fn machine(&self) -> &StateMachine<H> {
        &self.machine
    }
}
