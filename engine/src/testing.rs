//! Determinism checks for a handler's own tests: what every handler author should test, in
//! one call.
//!
//! A cluster promises that every replica ends with the same outcomes and the same state, and
//! that how the leader packs requests into log entries never changes an outcome. That holds
//! only if the handler is deterministic: no clock but [`crate::Tx::now_ms`], no randomness,
//! no iteration over a `HashMap` with a random seed, no global state. [`check_determinism`]
//! runs a stream of requests the way a cluster would, several ways, and compares:
//!
//! - packed into entries of at most each of the given command counts (a request is never
//!   split: one larger than the size has an entry to itself);
//! - in each of Verify and Performance mode, through a leader that simulates up to
//!   [`SIMULATED_AHEAD_ENTRIES`] entries before they commit and then applies them, beside a
//!   follower that only executes; the two must answer alike and end every entry with the
//!   same state hash, and in Verify mode the leader's second execution must match its
//!   simulation;
//! - across packings, every request's outcomes and the final state hash must be equal.
//!
//! ```
//! use engine::codec::{Decode, Encode};
//! use engine::state::{Schema, Table};
//! use engine::{Handler, StateError, Tx};
//!
//! static COUNTERS: Table<u64, u64> = Table::new(1, "counters");
//!
//! #[derive(Clone)]
//! struct Counters;
//!
//! #[derive(Debug, Encode, Decode)]
//! struct Add { counter: u64, amount: u64 }
//!
//! #[derive(Debug, Encode, Decode)]
//! struct Overflow;
//!
//! impl From<StateError> for Overflow {
//!     fn from(_: StateError) -> Self { Overflow }
//! }
//!
//! impl Handler for Counters {
//!     type Command = Add;
//!     type Output = u64;
//!     type Error = Overflow;
//!
//!     fn schema(&self) -> Schema {
//!         Schema::new().table(&COUNTERS)
//!     }
//!
//!     fn execute(&self, tx: &mut Tx<'_>, add: &Add) -> Result<u64, Overflow> {
//!         let now = tx.get(&COUNTERS, &add.counter).unwrap_or(0);
//!         let next = now.checked_add(add.amount).ok_or(Overflow)?;
//!         tx.put(&COUNTERS, add.counter, next)?;
//!         Ok(next)
//!     }
//! }
//!
//! let requests: Vec<Vec<Add>> = (0..200)
//!     .map(|n| (0..5).map(|k| Add { counter: (n + k) % 7, amount: n }).collect())
//!     .collect();
//! let checked = engine::testing::check_determinism(Counters, &requests, &[16, 1024]).unwrap();
//! assert_eq!(checked.outcomes.len(), 200);
//! ```

use crate::apply::{Applied, ApplyError, Mode, ReplyStatus, StateMachine, decode_outcomes};
use crate::entry::{ENTRY_COMMANDS_MAX, whole_requests_entry};
use crate::entry::{Entry, EntryHash, REQUEST_COMMANDS_MAX, Request, encode_commands};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{ClientId, EntryIndex, RequestNumber, Term};
use crate::state::{CapacityTooSmall, STATE_BYTES_DEFAULT, StateHash};

/// Entries a checking leader simulates before it applies them (a leader's pipeline: entries
/// proposed and not yet committed).
pub const SIMULATED_AHEAD_ENTRIES: usize = 4;
/// Clients whose requests take turns in a checked stream, each numbering its own from 1.
pub const CHECK_CLIENTS: u64 = 4;
/// The time every checked entry carries ([`crate::Tx::now_ms`]): one value for all, since
/// the entries of two packings could not carry the same times otherwise.
pub const CHECK_NOW_MS: u64 = 1_700_000_000_000;

/// What a determinism check found equal everywhere.
pub struct Checked<H: Handler> {
    /// Each request's outcomes, in request order.
    pub outcomes: Vec<Vec<OutcomeOf<H>>>,
    /// The state hash after the last request.
    pub state_hash: StateHash,
}

// By hand: a derive would ask the handler type itself to be `Debug`.
impl<H: Handler> std::fmt::Debug for Checked<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("outcomes", &self.outcomes)
            .field("state_hash", &self.state_hash)
            .finish()
    }
}

/// Where a handler was found not to be deterministic (or the check could not run).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NotDeterministic {
    /// The capacity cannot hold the handler's empty tables.
    #[error(transparent)]
    Capacity(#[from] CapacityTooSmall),
    /// A request has no command or more than a request may hold.
    #[error(
        "request {request} has {commands} commands: a request holds 1 to {REQUEST_COMMANDS_MAX}"
    )]
    RequestSize {
        /// The request's position in the stream.
        request: usize,
        /// Its commands.
        commands: usize,
    },
    /// An entry size outside 1 to [`ENTRY_COMMANDS_MAX`].
    #[error("entries of {0} commands: an entry holds 1 to {ENTRY_COMMANDS_MAX}")]
    EntrySize(u32),
    /// No entry size was given: nothing would be checked.
    #[error("no entry size given: name at least one (16 and 1,024 are a good pair)")]
    NoEntrySizes,
    /// Applying an entry failed: in Verify mode, the leader's execution differed from its
    /// simulation ([`ApplyError::Nondeterministic`] names the command).
    #[error("entry {index}, {run}: {error}")]
    Apply {
        /// The packing and mode.
        run: Run,
        /// The entry.
        index: EntryIndex,
        /// What failed.
        error: ApplyError,
    },
    /// The simulating leader and the executing follower answered an entry otherwise, or
    /// ended it with another state hash.
    #[error(
        "entry {index}, {run}: the leader that simulated it and a follower that executed it \
         {what}"
    )]
    Replicas {
        /// The packing and mode.
        run: Run,
        /// The entry.
        index: EntryIndex,
        /// What differed.
        what: Disagreement,
    },
    /// Two runs (packings or modes) answered a request otherwise.
    #[error("request {request} was answered otherwise {first} and {second}")]
    Outcomes {
        /// The request's position in the stream.
        request: usize,
        /// One run.
        first: Run,
        /// The other.
        second: Run,
    },
    /// Two runs ended with other state hashes (the outcomes were equal: the writes were not).
    #[error("the state hashes differ {first} and {second}")]
    StateHash {
        /// One run.
        first: Run,
        /// The other.
        second: Run,
    },
}

/// What a leader and a follower disagreed on, for one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Disagreement {
    /// They answered its requests otherwise.
    #[error("answered otherwise")]
    Replies,
    /// They ended it with other state hashes.
    #[error("ended with other state hashes")]
    StateHash,
}

/// One way a checked stream ran: its packing and its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Commands per entry at most.
    pub entry_commands: u32,
    /// The leader's mode.
    pub mode: Mode,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "in entries of {} commands in {} mode",
            self.entry_commands, self.mode
        )
    }
}

/// Runs `requests` through `handler` packed into entries of at most each of
/// `entry_commands` commands, in both modes, through a simulating leader and an executing
/// follower, and compares everything (see the [module](self) documentation); the state may
/// hold [`STATE_BYTES_DEFAULT`] bytes. Returns what was equal everywhere, or the first
/// difference.
pub fn check_determinism<H: Handler + Clone>(
    handler: H,
    requests: &[Vec<H::Command>],
    entry_commands: &[u32],
) -> Result<Checked<H>, NotDeterministic> {
    check_determinism_within(handler, requests, entry_commands, STATE_BYTES_DEFAULT)
}

/// [`check_determinism`] with a state of `capacity_bytes` (a handler whose outcomes depend on
/// running out of room is checked at the capacity its tests use).
pub fn check_determinism_within<H: Handler + Clone>(
    handler: H,
    requests: &[Vec<H::Command>],
    entry_commands: &[u32],
    capacity_bytes: u64,
) -> Result<Checked<H>, NotDeterministic> {
    if entry_commands.is_empty() {
        return Err(NotDeterministic::NoEntrySizes);
    }
    let stream = Stream::encode(requests)?;
    let mut first: Option<(Run, Vec<Vec<u8>>, StateHash)> = None;
    for &size in entry_commands {
        if !(1..=ENTRY_COMMANDS_MAX).contains(&size) {
            return Err(NotDeterministic::EntrySize(size));
        }
        let entries = stream.entries(size);
        for mode in Mode::ALL {
            let run = Run {
                entry_commands: size,
                mode,
            };
            let (replies, hash) = Pair::new(&handler, capacity_bytes, run)?.apply_all(&entries)?;
            match &first {
                None => first = Some((run, replies, hash)),
                Some(earlier) => {
                    compare((earlier.0, &earlier.1, &earlier.2), (run, &replies, &hash))?
                }
            }
        }
    }
    let (replies, state_hash) = match first {
        Some((_, replies, hash)) => (replies, hash),
        None => (
            Vec::new(),
            StateMachine::try_new(handler, capacity_bytes)?.state_hash(),
        ),
    };
    let outcomes = replies
        .iter()
        .zip(requests)
        .map(|(bytes, request)| {
            decode_outcomes::<H>(bytes, request.len() as u32)
                .expect("outcomes the engine encoded decode")
        })
        .collect();
    Ok(Checked {
        outcomes,
        state_hash,
    })
}

/// The first difference between two runs' replies and hashes.
fn compare(
    (first, first_replies, first_hash): (Run, &[Vec<u8>], &StateHash),
    (second, replies, hash): (Run, &[Vec<u8>], &StateHash),
) -> Result<(), NotDeterministic> {
    debug_assert_eq!(
        first_replies.len(),
        replies.len(),
        "every request is answered"
    );
    if let Some(request) = first_replies.iter().zip(replies).position(|(a, b)| a != b) {
        return Err(NotDeterministic::Outcomes {
            request,
            first,
            second,
        });
    }
    match first_hash == hash {
        true => Ok(()),
        false => Err(NotDeterministic::StateHash { first, second }),
    }
}

/// A stream's requests, encoded, each with its client and number.
struct Stream {
    requests: Vec<(ClientId, RequestNumber, Vec<u8>, u32)>,
}

impl Stream {
    /// Encodes `requests`, the clients taking turns.
    fn encode<C: crate::codec::Encode>(requests: &[Vec<C>]) -> Result<Self, NotDeterministic> {
        let mut encoded = Vec::with_capacity(requests.len());
        for (n, request) in requests.iter().enumerate() {
            if request.is_empty() || request.len() > REQUEST_COMMANDS_MAX as usize {
                return Err(NotDeterministic::RequestSize {
                    request: n,
                    commands: request.len(),
                });
            }
            let n = n as u64;
            let client = ClientId(u128::from(n % CHECK_CLIENTS + 1));
            let number = RequestNumber(n / CHECK_CLIENTS + 1);
            encoded.push((
                client,
                number,
                encode_commands(request),
                request.len() as u32,
            ));
        }
        Ok(Stream { requests: encoded })
    }

    /// The entries of the stream, whole requests packed up to `size` commands each.
    fn entries(&self, size: u32) -> Vec<Entry> {
        let mut entries = Vec::new();
        let mut prev = EntryHash::default();
        let mut group: Vec<Request<'_>> = Vec::new();
        let mut commands = 0;
        for (client, number, bytes, count) in &self.requests {
            if !group.is_empty() && commands + count > size {
                let entry = Self::seal(entries.len(), &prev, &group);
                prev = entry.header.hash;
                entries.push(entry);
                group.clear();
                commands = 0;
            }
            group.push(Request {
                client: *client,
                number: *number,
                command_count: *count,
                commands: bytes,
            });
            commands += count;
        }
        if !group.is_empty() {
            entries.push(Self::seal(entries.len(), &prev, &group));
        }
        entries
    }

    fn seal(before: usize, prev: &EntryHash, group: &[Request<'_>]) -> Entry {
        let index = EntryIndex(before as u64 + 1);
        whole_requests_entry(index, Term(1), prev, CHECK_NOW_MS, group)
    }
}

/// A leader that simulates in the run's mode and a follower that executes, side by side.
struct Pair<H: Handler> {
    leader: StateMachine<H>,
    follower: StateMachine<H>,
    run: Run,
}

impl<H: Handler + Clone> Pair<H> {
    fn new(handler: &H, capacity_bytes: u64, run: Run) -> Result<Self, CapacityTooSmall> {
        let mut leader = StateMachine::try_new(handler.clone(), capacity_bytes)?;
        leader.set_mode(run.mode);
        let follower = StateMachine::try_new(handler.clone(), capacity_bytes)?;
        Ok(Pair {
            leader,
            follower,
            run,
        })
    }

    /// Applies `entries` on both, the leader simulating ahead; every reply's results in
    /// request order, and the final state hash.
    fn apply_all(
        mut self,
        entries: &[Entry],
    ) -> Result<(Vec<Vec<u8>>, StateHash), NotDeterministic> {
        let mut results = Vec::new();
        for chunk in entries.chunks(SIMULATED_AHEAD_ENTRIES) {
            for entry in chunk {
                self.leader.simulate(entry);
            }
            for entry in chunk {
                let applied = self.apply(entry)?;
                for reply in applied.replies {
                    match reply.status {
                        ReplyStatus::Results(bytes) => results.push(bytes),
                        ReplyStatus::Stale
                        | ReplyStatus::Expired
                        | ReplyStatus::Reused
                        | ReplyStatus::NotYet => {
                            unreachable!("each client's requests are numbered in order, from 1")
                        }
                    }
                }
            }
        }
        Ok((results, self.follower.state_hash()))
    }

    /// One entry on both; the leader's outcome when both agree.
    fn apply(&mut self, entry: &Entry) -> Result<Applied, NotDeterministic> {
        let failed = |error| NotDeterministic::Apply {
            run: self.run,
            index: entry.index(),
            error,
        };
        let leader = self.leader.apply(entry).map_err(failed)?;
        let follower = self.follower.apply(entry).map_err(failed)?;
        let differ = |what| NotDeterministic::Replicas {
            run: self.run,
            index: entry.index(),
            what,
        };
        if leader.state_hash != follower.state_hash {
            return Err(differ(Disagreement::StateHash));
        }
        if leader.replies != follower.replies {
            return Err(differ(Disagreement::Replies));
        }
        Ok(leader)
    }
}
