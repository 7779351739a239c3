//! After commit, on the leader: each command either reuses its simulation (Performance mode,
//! when its reads are verified unchanged) or is executed, and in Verify mode compared with its
//! simulation.

use super::{ApplyError, Mode, Reuse, StateMachine};
use crate::codec;
use crate::handler::{Handler, OutcomeOf};
use crate::state::Step;

impl<H: Handler> StateMachine<H> {
    /// Runs command `step` of the entry being applied, appending its encoded outcome to
    /// `results`.
    pub(super) fn run_command(
        &mut self,
        step: Step,
        now_ms: u64,
        results: &mut Vec<u8>,
        reuse: &mut Reuse,
    ) -> Result<(), ApplyError> {
        let at = step.command as usize;
        let simulated = reuse
            .simulation
            .as_ref()
            .and_then(|s| s.commands.get(at))
            .cloned();
        let Some(simulated) = simulated else {
            self.execute(now_ms, at, results);
            return Ok(());
        };
        match self.mode {
            Mode::Performance => {
                let valid = reuse.exact || self.overlay.verify_reads(step, &self.state);
                if !valid {
                    self.overlay.drop_through(step);
                    reuse.exact = false;
                    self.execute(now_ms, at, results);
                    return Ok(());
                }
                self.overlay.skip_reads(step);
                if self.overlay.apply_writes(step, &mut self.state).is_err() {
                    return Err(ApplyError::MemoryExhausted {
                        index: step.entry,
                        command: step.command,
                    });
                }
                let simulation = reuse.simulation.as_ref().expect("simulated");
                self.counters.reused += 1;
                self.state
                    .record_extra(&simulation.stream[simulated.stream]);
                results.extend_from_slice(&simulation.outcomes[simulated.outcome]);
            }
            Mode::Verify => {
                self.overlay.drop_through(step);
                let stream_mark = self.state.stream_mark();
                let results_mark = results.len();
                self.execute(now_ms, at, results);
                if !reuse.exact {
                    return Ok(());
                }
                let simulation = reuse.simulation.as_ref().expect("simulated");
                let same_writes =
                    self.state.stream_since(stream_mark) == &simulation.stream[simulated.stream];
                let same_outcome =
                    results[results_mark..] == simulation.outcomes[simulated.outcome.clone()];
                if !(same_writes && same_outcome) {
                    return Err(ApplyError::Nondeterministic {
                        index: step.entry,
                        command: step.command,
                        simulated: describe::<H>(&simulation.outcomes[simulated.outcome]),
                        executed: describe::<H>(&results[results_mark..]),
                        writes: if same_writes { "the same" } else { "different" },
                    });
                }
                self.counters.verified += 1;
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
