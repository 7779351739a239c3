//! The handler API: business logic written one command at a time.

use crate::codec::{Decode, Encode};
use crate::state::{Prefetch, Schema, StateError, Tx};
use std::fmt::Debug;
use std::ops::RangeInclusive;

/// The handler version a cluster starts at; later ones are put in force through the log.
pub const HANDLER_VERSION_FIRST: u32 = 1;

/// Business logic for one kind of state machine (a bank, an order book, a booking system).
///
/// The engine calls [`Handler::execute`] once per command, in the global order, inside a
/// transaction of its own: when it returns `Err` (or a write failed), every write it made is
/// rolled back. The handler never sees batches, the log or the network.
///
/// `execute` must be deterministic: the same state and command give the same outcome and the same
/// writes on every replica and in every run. Read time only through [`Tx::now_ms`]; never read
/// clocks, random numbers, thread ids, environment or iteration order of unordered containers.
pub trait Handler: Send + Sync + 'static {
    /// One business command, as a client sends it.
    type Command: Encode + Decode<()> + Debug + Send + Sync + 'static;
    /// The result of a command that applied.
    type Output: Encode + Decode<()> + Debug + Send + 'static;
    /// A business error: the command is refused and changes nothing. It converts from
    /// [`StateError`] so that `tx.put(..)?` works (capacity exhausted is a business result).
    type Error: Encode + Decode<()> + From<StateError> + Debug + Send + 'static;

    /// The handler versions this build can run, oldest to newest. A cluster starts at
    /// [`HANDLER_VERSION_FIRST`]; an operator's `upgrade` commits a newer one at an entry, and
    /// every replica switches there ([`Tx::handler_version`] tells `execute` which rules are
    /// in force). A replica whose build cannot run the version in force stops applying and
    /// says so rather than diverge. Keep the old versions' rules for as long as a log or
    /// snapshot from before the switch may be replayed.
    const VERSIONS: RangeInclusive<u32> = HANDLER_VERSION_FIRST..=HANDLER_VERSION_FIRST;

    /// The tables the handler reads and writes.
    fn schema(&self) -> Schema;

    /// Executes one command against the state.
    fn execute(
        &self,
        tx: &mut Tx<'_>,
        command: &Self::Command,
    ) -> Result<Self::Output, Self::Error>;

    /// True when `command` only reads: every write inside it fails with
    /// [`StateError::ReadOnly`] (and the command with it, whatever `execute` returns), so a
    /// command marked read-only never changes the state. A request of read-only commands only
    /// is answered by the leader without a log entry (`Client::submit` sends it as a read;
    /// `notes/decisions/reads.md`). It depends on the command alone: every replica and the
    /// client library ask it. The default marks none.
    fn read_only(command: &Self::Command) -> bool {
        let _ = command;
        false
    }

    /// Optionally names the records `command` will touch, so that the engine can load a whole
    /// batch's records into cache before executing it. A hint only; the default names none.
    fn prefetch(&self, command: &Self::Command, keys: &mut Prefetch<'_>) {
        let _ = (command, keys);
    }
}

/// The tag of each variant of [`Outcome`]: the `u32` a client reads before the variant's
/// fields, in every language (`notes/protocol.md` lists them).
///
/// Clients decode outcomes from replies and replicas store them in sessions and snapshots, so
/// a tag never changes and is never given to another variant: a new variant takes a number
/// `Outcome` never used. They equal the positions the variants were written with before the
/// tags were explicit, so no byte changed.
pub mod outcome_tags {
    /// [`Outcome::Done`](super::Outcome::Done).
    pub const DONE: u32 = 0;
    /// [`Outcome::Failed`](super::Outcome::Failed).
    pub const FAILED: u32 = 1;
    /// [`Outcome::Invalid`](super::Outcome::Invalid).
    pub const INVALID: u32 = 2;
}

/// What became of one command, as its client learns it.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub enum Outcome<O, E> {
    /// The command applied and returned this output.
    #[codec(tag = outcome_tags::DONE)]
    Done(O),
    /// The handler refused the command with this business error; it changed nothing.
    #[codec(tag = outcome_tags::FAILED)]
    Failed(E),
    /// The command's bytes did not decode as a command of this handler; it changed nothing.
    #[codec(tag = outcome_tags::INVALID)]
    Invalid,
}

/// The outcome type of handler `H`.
pub type OutcomeOf<H> = Outcome<<H as Handler>::Output, <H as Handler>::Error>;
