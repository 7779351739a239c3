//! One node without replication: the WAL and the state machine, driven synchronously. The
//! foundation's apply path, used by tests, benchmarks and the single-node runner; the replicated
//! node adds consensus around the same two parts.

use crate::apply::{Applied, ApplyError, StateMachine};
use crate::entry::{ENTRY_COMMANDS_MAX, Request, whole_requests_entry};
use crate::handler::Handler;
use crate::ids::Term;
use crate::wal::{Recovery, Wal, WalError};
use std::path::Path;

/// A single-node failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SingleNodeError {
    /// The log failed.
    #[error(transparent)]
    Wal(#[from] WalError),
    /// The apply loop stopped.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The capacity cannot hold the handler's empty tables.
    #[error(transparent)]
    Capacity(#[from] crate::state::CapacityTooSmall),
    /// A batch broke a limit.
    #[error("batch of {commands} commands is over the entry limit {ENTRY_COMMANDS_MAX}")]
    BatchTooLarge {
        /// Commands offered.
        commands: u32,
    },
}

/// A node that logs and applies entries itself.
pub struct SingleNode<H: Handler> {
    wal: Wal,
    machine: StateMachine<H>,
}

impl<H: Handler> SingleNode<H> {
    /// Opens the log in `dir`, recovers it and replays every entry into a fresh state.
    pub fn open(
        dir: &Path,
        handler: H,
        capacity_bytes: u64,
    ) -> Result<(Self, Recovery), SingleNodeError> {
        let (wal, recovery) = Wal::open(dir)?;
        let mut machine = StateMachine::try_new(handler, capacity_bytes)?;
        for index in wal.first_index().0..=wal.last_index().0 {
            machine.apply(&wal.read(crate::ids::EntryIndex(index))?)?;
        }
        Ok((SingleNode { wal, machine }, recovery))
    }

    /// The state machine.
    pub fn machine(&self) -> &StateMachine<H> {
        &self.machine
    }

    /// Packs `requests` into one entry stamped `now_ms`, makes it durable, applies it.
    pub fn submit(
        &mut self,
        now_ms: u64,
        requests: &[Request<'_>],
    ) -> Result<Applied, SingleNodeError> {
        let commands: u32 = requests.iter().map(|r| r.command_count).sum();
        if commands > ENTRY_COMMANDS_MAX {
            return Err(SingleNodeError::BatchTooLarge { commands });
        }
        let index = self.wal.last_index().next();
        let entry = whole_requests_entry(index, Term(1), &self.wal.last_hash(), now_ms, requests);
        self.wal.append(&entry)?;
        Ok(self.machine.apply(&entry)?)
    }
}
