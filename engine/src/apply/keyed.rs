//! Keyed runs: commands a caller sent with its key, inside a request that carries other
//! callers' commands too. A run is applied as request 1 of the key's own session would be,
//! through the same sessions (`sessions::decide`), so that a key is applied once whichever
//! request, client or gateway carries it, and a key sent alone (an older gateway's request 1
//! of the key's session) and the same key in a run are one. The carrying request's results
//! hold, at each keyed command's place, a status byte and, when it ran, its outcome.

use super::sessions::Decision;
use super::{ApplyError, PREFETCH_AHEAD_COMMANDS, StateMachine};
use crate::codec;
use crate::entry::{FragmentHeader, KeyedRun};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::{EntryIndex, RequestNumber};
use std::ops::Range;

/// A keyed command's status byte in its request's results: it ran (now or in an earlier
/// request carrying the same key and commands), and its outcome follows.
pub const KEYED_RAN: u8 = 0;
/// The key is older than the cluster keeps keys (its session expired): the command did not
/// run now, and whether it ran before is not known.
pub const KEYED_EXPIRED: u8 = 1;
/// The key was used before with other commands: this command did not run.
pub const KEYED_REUSED: u8 = 2;

/// What a keyed command got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyedOutcome<O> {
    /// It ran, now or in an earlier request with the same key and commands: its outcome.
    Ran(O),
    /// The cluster no longer keeps the key: not run now; whether it ran before is not known.
    Expired,
    /// The key was used with other commands: not run.
    Reused,
}

impl<H: Handler> StateMachine<H> {
    /// Applies the part `positions` (request positions, within one fragment) of keyed run
    /// `keyed`, whose first command sits at slot `at` of the entry, appending each command's
    /// status and outcome to the carrying request's `results`.
    pub(super) fn apply_keyed(
        &mut self,
        (index, now_ms): (EntryIndex, u64),
        keyed: &KeyedRun,
        positions: Range<u32>,
        at: usize,
        results: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        let run = keyed.run;
        let part = FragmentHeader {
            client: run.key,
            request: RequestNumber(1),
            oldest_pending: RequestNumber(1),
            request_commands: run.count,
            first_command: positions.start - run.first,
            command_count: positions.end - positions.start,
            command_bytes: 0,
            digest: keyed.digest,
        };
        let count = part.command_count as usize;
        match self.sessions.decide(&part) {
            Decision::Execute { skip } => {
                self.execute_keyed((index, now_ms), &part, skip as usize, at, results)?;
            }
            Decision::Duplicate => {
                let kept = self.sessions.results_of(run.key, RequestNumber(1));
                let kept = kept.expect("a duplicate's session keeps its request");
                let ran = ran_outcomes::<H>(kept, part.first_command as usize, count);
                results.extend_from_slice(&ran);
            }
            Decision::Expired => results.extend(std::iter::repeat_n(KEYED_EXPIRED, count)),
            // A key's session only ever has request 1, which runs at once: a request of
            // another number under it (an id taken for a client's) is another's.
            Decision::Reused | Decision::Stale | Decision::NotYet => {
                results.extend(std::iter::repeat_n(KEYED_REUSED, count));
            }
        }
        Ok(())
    }

    /// Runs a keyed run's part from its command `skip` on in the key's session (the ones
    /// before ran in an earlier request carrying the key: their outcomes are copied).
    fn execute_keyed(
        &mut self,
        (index, now_ms): (EntryIndex, u64),
        part: &FragmentHeader,
        skip: usize,
        at: usize,
        results: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        let count = part.command_count as usize;
        assert!(
            skip <= count,
            "a keyed part of {count} commands skips {skip}"
        );
        self.sessions.open(part, index);
        self.state.set_outside_bytes(self.sessions.bytes());
        let mut key_results = self.sessions.take_results(part.client);
        let copied = ran_outcomes::<H>(&key_results, part.first_command as usize, skip);
        results.extend_from_slice(&copied);
        for slot in at + skip..at + count {
            self.prefetch(slot + PREFETCH_AHEAD_COMMANDS);
            let start = key_results.len();
            self.run_command(index, slot, now_ms, &mut key_results)?;
            results.push(KEYED_RAN);
            results.extend_from_slice(&key_results[start..]);
            if self.state.memory_fault() {
                let command = slot as u32;
                return Err(ApplyError::MemoryExhausted { index, command });
            }
        }
        let applied = (count - skip) as u32;
        if let Some(session) = self.sessions.put_results(part.client, key_results, applied) {
            super::record_session(&mut self.state, part, session);
        }
        Ok(())
    }
}

/// The outcomes `first..first + count` of encoded `outcomes`, each behind [`KEYED_RAN`].
fn ran_outcomes<H: Handler>(outcomes: &[u8], first: usize, count: usize) -> Vec<u8> {
    let mut copied = Vec::new();
    let mut at = 0;
    for position in 0..first + count {
        let (_, used) = codec::decode_prefix::<OutcomeOf<H>>(&outcomes[at..])
            .expect("a session keeps the outcomes it encoded");
        if position >= first {
            copied.push(KEYED_RAN);
            copied.extend_from_slice(&outcomes[at..at + used]);
        }
        at += used;
    }
    copied
}

/// Decodes a keyed request's results: `keyed(position)` says which commands were keyed.
pub fn decode_keyed_outcomes<H: Handler>(
    results: &[u8],
    count: u32,
    keyed: impl Fn(u32) -> bool,
) -> Result<Vec<KeyedOutcome<OutcomeOf<H>>>, codec::CodecError> {
    let mut outcomes = Vec::with_capacity(count.min(crate::entry::REQUEST_COMMANDS_MAX) as usize);
    let mut at = 0;
    for position in 0..count {
        let status = match keyed(position) {
            true => {
                let end = codec::DecodeError::UnexpectedEnd { needed: 1, left: 0 };
                let status = *results.get(at).ok_or(end)?;
                at += 1;
                status
            }
            false => KEYED_RAN,
        };
        let outcome = match status {
            KEYED_RAN => {
                let (outcome, used) = codec::decode_prefix::<OutcomeOf<H>>(&results[at..])?;
                at += used;
                KeyedOutcome::Ran(outcome)
            }
            KEYED_EXPIRED => KeyedOutcome::Expired,
            KEYED_REUSED => KeyedOutcome::Reused,
            found => {
                return Err(codec::DecodeError::UnexpectedVariant {
                    type_name: "keyed status",
                    found: u32::from(found),
                    max: u32::from(KEYED_REUSED),
                }
                .into());
            }
        };
        outcomes.push(outcome);
    }
    match results.len() - at {
        0 => Ok(outcomes),
        trailing => Err(codec::CodecError::Trailing { trailing }),
    }
}
