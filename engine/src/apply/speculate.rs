//! Simulation on the leader, in place: as the leader proposes an entry it applies it
//! speculatively to its state (the undo logs keep what each write replaced, the session
//! journal what each session was, the hasher leaves its writes unabsorbed), while the entry is
//! fsynced and replicated. That speculative state is the overlay: the committed state is the
//! speculative one minus the undo records of entries not yet committed.
//!
//! After commit:
//! - Performance mode *reuses* the simulation when it is verified: the committed entry is the
//!   one simulated (same hash), and the simulation's base was exactly the committed state
//!   (every entry before it was committed as simulated, since speculations are applied in index
//!   order on top of each other and the first mismatch voids them all). The writes are already
//!   in place; the results are released without executing again.
//! - Verify mode rolls the simulation back, executes the entry for real, and compares each
//!   command's result and writes with the simulation's; a difference stops the node.
//! - A leader change, or an entry that is not the one simulated, voids every speculation: the
//!   state is rolled back and the committed entries are executed.

use super::{Applied, ApplyError, Mode, Reply, StateMachine};
use crate::codec;
use crate::entry::{Entry, EntryHash, chain_hash};
use crate::handler::{Handler, OutcomeOf};
use crate::ids::EntryIndex;
use crate::state::TxMark;
use std::ops::Range;

/// Each command's encoded outcome and write stream as one run produced them, in run order.
#[derive(Debug, Default)]
pub(super) struct Recording {
    outcomes: Vec<u8>,
    streams: Vec<u8>,
    commands: Vec<(u32, Range<usize>, Range<usize>)>,
}

impl Recording {
    fn push(&mut self, at: usize, outcome: &[u8], stream: &[u8]) {
        let o = self.outcomes.len()..self.outcomes.len() + outcome.len();
        let w = self.streams.len()..self.streams.len() + stream.len();
        self.outcomes.extend_from_slice(outcome);
        self.streams.extend_from_slice(stream);
        self.commands.push((at as u32, o, w));
    }
}

/// What the entry being run is.
#[derive(Debug, Default)]
pub(super) enum Pass {
    /// Committed, executed once (a follower, or a leader without a valid simulation).
    #[default]
    Execute,
    /// Proposed, simulated in place; in Verify mode each command is recorded.
    Speculate(Recording),
    /// Committed, executed after its simulation was rolled back, each command compared with the
    /// simulation's recording (`next`: the next recorded command to compare with).
    Check { recording: Recording, next: usize },
}

/// An entry applied speculatively and not yet committed.
#[derive(Debug)]
pub(super) struct Speculation {
    index: EntryIndex,
    term: crate::ids::Term,
    hash: EntryHash,
    /// The state before and after it.
    start: TxMark,
    end: TxMark,
    /// The sessions it changed, as they were before, and the state clock before it.
    sessions: super::sessions::Journal,
    replies: Vec<Reply>,
    commands: u64,
    recording: Recording,
    /// What ran and how it answered, when journaling.
    ran: super::Ran,
}

impl Speculation {
    /// What the speculation changed in the sessions, as they were before.
    pub(super) fn journal(&self) -> &super::sessions::Journal {
        &self.sessions
    }

    /// True when `entry` is the entry this speculation simulated.
    pub(super) fn matches(&self, entry: &Entry) -> bool {
        self.index == entry.index() && self.hash == entry.header.hash
    }
}

impl<H: Handler> StateMachine<H> {
    /// Simulates `entry`, which this replica just proposed as leader (call in index order).
    /// Performance mode applies it speculatively at once; Verify mode keeps one speculation at
    /// a time and queues the rest.
    pub fn simulate(&mut self, entry: &Entry) {
        match self.mode {
            Mode::Performance => {
                if entry.index() == self.speculated_index().next() {
                    self.speculate(entry);
                }
            }
            Mode::Verify => {
                self.unsimulated.push_back(entry.clone());
                self.simulate_next();
            }
        }
    }

    /// The last entry the state as it stands holds: the newest speculation, or the last
    /// entry applied for good.
    pub fn speculated_index(&self) -> EntryIndex {
        self.speculations.back().map_or(self.applied, |s| s.index)
    }

    /// Entries simulated and not yet applied for good.
    pub fn pending_simulations(&self) -> usize {
        self.speculations.len()
    }

    /// Verify mode: speculates the oldest proposed entry not simulated yet, when none is
    /// speculative and it is the next to apply.
    fn simulate_next(&mut self) {
        if !self.speculations.is_empty() {
            return;
        }
        while self
            .unsimulated
            .front()
            .is_some_and(|e| e.index() <= self.applied)
        {
            self.unsimulated.pop_front();
        }
        if let Some(entry) = self.unsimulated.pop_front()
            && entry.index() == self.applied.next()
        {
            self.speculate(&entry);
        }
    }

    /// Applies `entry` speculatively; on any failure the attempt leaves no trace (apply will
    /// execute the entry when it commits).
    fn speculate(&mut self, entry: &Entry) {
        assert_eq!(
            entry.index(),
            self.speculated_index().next(),
            "speculations run in index order, on top of each other"
        );
        // Debug builds only: it hashes the payload again. The leader sealed the entry on top
        // of the log the state stands at.
        let previous = self
            .speculations
            .back()
            .map_or(self.applied_entry, |s| s.hash);
        debug_assert_eq!(
            chain_hash(&previous, &entry.header, &entry.payload),
            entry.header.hash,
            "entry {} chains to the entry the state stands at",
            entry.index()
        );
        let start = self.state.begin();
        let previous_end = self.speculations.back().map_or(start, |s| s.end);
        assert_eq!(
            start, previous_end,
            "a speculation starts where the one before it ended"
        );
        self.sessions.journal_start();
        self.pass = Pass::Speculate(Recording::default());
        let simulated_before = self.counters.simulated;
        let result = self.run_entry(entry);
        let recording = match std::mem::take(&mut self.pass) {
            Pass::Speculate(recording) => recording,
            Pass::Execute | Pass::Check { .. } => unreachable!("the pass is ours"),
        };
        let sessions = self.sessions.journal_take();
        match result {
            Ok(replies) => self.speculations.push_back(Speculation {
                index: entry.index(),
                term: entry.term(),
                hash: entry.header.hash,
                start,
                end: self.state.begin(),
                sessions,
                replies,
                commands: self.counters.simulated - simulated_before,
                recording,
                ran: std::mem::take(&mut self.ran),
            }),
            Err(_) => {
                self.sessions.restore(sessions);
                self.state.rollback(start);
            }
        }
    }

    /// Performance mode: the committed entry is the oldest speculation: its writes become final
    /// and its results are released without executing again.
    pub(super) fn confirm(&mut self) -> Applied {
        let speculation = self
            .speculations
            .pop_front()
            .expect("a speculation to confirm");
        assert_eq!(
            speculation.index,
            self.applied.next(),
            "the speculation confirmed is the next entry"
        );
        self.hash = self.state.confirm_through(speculation.end);
        self.applied = speculation.index;
        self.applied_term = speculation.term;
        self.applied_entry = speculation.hash;
        self.counters.reused += speculation.commands;
        Applied {
            index: speculation.index,
            state_hash: self.hash,
            replies: speculation.replies,
            ran: speculation.ran,
        }
    }

    /// Verify mode: rolls the speculation back, executes the committed entry comparing every
    /// command with the simulation, then simulates the next proposed entry.
    pub(super) fn verify(&mut self, entry: &Entry) -> Result<Applied, ApplyError> {
        let speculation = self
            .speculations
            .pop_front()
            .expect("a speculation to verify");
        assert!(
            self.speculations.is_empty(),
            "Verify mode keeps one speculation at a time"
        );
        self.sessions.restore(speculation.sessions);
        // The same commands run again at once: they grow the tables again.
        self.state.rollback_keeping_slots(speculation.start);
        self.pass = Pass::Check {
            recording: speculation.recording,
            next: 0,
        };
        let replies = self.run_entry(entry)?;
        if let Pass::Check { recording, next } = std::mem::take(&mut self.pass)
            && next != recording.commands.len()
        {
            return Err(ApplyError::Nondeterministic {
                index: entry.index(),
                command: next as u32,
                simulated: format!("{} commands run", recording.commands.len()),
                executed: format!("{next} commands run"),
                writes: "different",
            });
        }
        self.settle(entry);
        self.hash = self.state.finish_entry();
        self.counters.verified += speculation.commands;
        // Taken before the next simulation starts: it runs its entry into `self.ran`.
        let ran = std::mem::take(&mut self.ran);
        self.simulate_next();
        Ok(Applied {
            index: entry.index(),
            state_hash: self.hash,
            replies,
            ran,
        })
    }

    /// Forgets every simulation (leadership lost, or another leader's entry committed): the
    /// state is rolled back to exactly the committed one.
    pub fn discard_simulations(&mut self) {
        let committed = self.speculations.front().map(|s| s.start);
        while let Some(speculation) = self.speculations.pop_back() {
            self.sessions.restore(speculation.sessions);
            self.state.rollback(speculation.start);
        }
        assert!(
            committed.is_none_or(|start| start == self.state.begin()),
            "discarded speculations leave the committed state"
        );
        self.unsimulated.clear();
    }

    /// What holds of the speculations: Verify keeps one at a time and Performance queues
    /// none; they follow the last entry applied without a gap, in terms that never go back,
    /// each starting where the one before ended, the oldest at the committed end of the
    /// state, the newest where the state stands now.
    pub(super) fn check_speculations(&self) {
        assert!(
            self.mode == Mode::Performance || self.speculations.len() <= 1,
            "Verify mode keeps one speculation at a time, not {}",
            self.speculations.len()
        );
        assert!(
            self.mode == Mode::Verify || self.unsimulated.is_empty(),
            "Performance mode queues no entry to simulate ({} are)",
            self.unsimulated.len()
        );
        let (mut index, mut term, mut end) = (self.applied, self.applied_term, None);
        for speculation in &self.speculations {
            assert_eq!(
                speculation.index,
                index.next(),
                "speculations follow the last entry applied without a gap"
            );
            assert!(
                speculation.term >= term,
                "speculation {} of term {} after term {}",
                speculation.index,
                speculation.term.0,
                term.0
            );
            assert!(
                end.is_none_or(|end| end == speculation.start),
                "speculation {} starts where the one before it ended",
                speculation.index
            );
            (index, term, end) = (speculation.index, speculation.term, Some(speculation.end));
        }
        if self.stopped {
            // An entry that failed part way left its writes: nothing is at an entry's edge.
            return;
        }
        assert!(
            end.is_none_or(|end| end == self.state.begin()),
            "the state stands at the end of the newest speculation"
        );
        (self.state).check_pending_since(self.speculations.front().map(|s| s.start));
    }

    /// Runs command `at` of entry `index` in the current pass, appending its encoded outcome to
    /// `results`; in a Verify check, a difference from the simulation is an error.
    pub(super) fn run_command(
        &mut self,
        index: EntryIndex,
        at: usize,
        now_ms: u64,
        results: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        let outcome_start = results.len();
        let mark = self.state.begin();
        self.execute(now_ms, at, results);
        let outcome = &results[outcome_start..];
        if self.journaling {
            let (bytes, spans) = (&self.command_bytes, &self.command_spans);
            let command = || {
                let (start, end) = spans[at];
                &bytes[start as usize..end as usize]
            };
            self.ran.push(at, command, outcome);
        }
        match &mut self.pass {
            Pass::Execute => self.counters.executed += 1,
            Pass::Speculate(recording) => {
                self.counters.simulated += 1;
                if self.mode == Mode::Verify {
                    recording.push(at, outcome, self.state.stream_since(mark));
                }
            }
            Pass::Check { recording, next } => {
                self.counters.executed += 1;
                let writes = self.state.stream_since(mark);
                let recorded = recording.commands.get(*next).cloned();
                *next += 1;
                let same = recorded.as_ref().map(|(command, o, w)| {
                    (
                        *command as usize == at,
                        recording.outcomes[o.clone()] == *outcome,
                        recording.streams[w.clone()] == *writes,
                    )
                });
                if let Some((true, true, true)) = same {
                    return Ok(());
                }
                let simulated = recorded.map_or("nothing".into(), |(_, o, _)| {
                    describe::<H>(&recording.outcomes[o])
                });
                return Err(ApplyError::Nondeterministic {
                    index,
                    command: at as u32,
                    simulated,
                    executed: describe::<H>(outcome),
                    writes: if same.is_some_and(|(_, _, w)| w) {
                        "the same"
                    } else {
                        "different"
                    },
                });
            }
        }
        Ok(())
    }
}

/// A readable form of one encoded outcome, for reports.
fn describe<H: Handler>(bytes: &[u8]) -> String {
    match codec::decode::<OutcomeOf<H>>(bytes) {
        Ok(outcome) => format!("{outcome:?}"),
        Err(error) => format!("<undecodable: {error}>"),
    }
}
