//! Simulation: as the leader proposes an entry, it executes the entry's commands against the
//! overlay (the committed state plus every entry simulated and not yet applied), while the
//! entry is being fsynced and replicated. Each command's outcome and write stream are kept,
//! and the overlay keeps its reads and writes, for use after commit.

use super::{Reuse, StateMachine, outcome_of};
use crate::codec;
use crate::entry::{Entry, EntryHash, EntryKind, parse_payload};
use crate::handler::{Handler, Outcome};
use crate::ids::EntryIndex;
use crate::state::{StateHash, Step, Tx};
use std::ops::Range;

/// What a simulation started from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Base {
    /// The committed state after `applied`, whose hash was `hash`.
    Committed {
        applied: EntryIndex,
        hash: StateHash,
    },
    /// The state the simulation of entry `on` produced.
    Chained { on: EntryIndex },
}

/// One simulated command: where its outcome and its write stream lie in the simulation's
/// buffers.
#[derive(Clone, Debug, Default)]
pub(crate) struct SimulatedCommand {
    pub(crate) outcome: Range<usize>,
    pub(crate) stream: Range<usize>,
}

/// The simulation of one entry. Its buffers are reused from entry to entry.
#[derive(Debug)]
pub(crate) struct Simulation {
    pub(crate) index: EntryIndex,
    hash: EntryHash,
    base: Base,
    pub(crate) commands: Vec<SimulatedCommand>,
    pub(crate) stream: Vec<u8>,
    pub(crate) outcomes: Vec<u8>,
}

impl<H: Handler> StateMachine<H> {
    /// Simulates `entry`, which this replica just proposed as leader. Call in index order.
    pub fn simulate(&mut self, entry: &Entry) {
        let base = match self.simulations.back() {
            Some(last) => Base::Chained { on: last.index },
            None => Base::Committed {
                applied: self.applied,
                hash: self.hash,
            },
        };
        let mut simulation = self.spare.pop().unwrap_or_else(|| Simulation {
            index: EntryIndex::ZERO,
            hash: EntryHash::default(),
            base,
            commands: Vec::new(),
            stream: Vec::new(),
            outcomes: Vec::new(),
        });
        simulation.index = entry.index();
        simulation.hash = entry.header.hash;
        simulation.base = base;
        simulation.commands.clear();
        simulation.outcomes.clear();
        std::mem::swap(&mut simulation.stream, &mut self.overlay.stream);
        self.overlay.stream.clear();
        if entry.header.kind == EntryKind::Commands {
            self.simulate_commands(entry, &mut simulation);
        }
        std::mem::swap(&mut simulation.stream, &mut self.overlay.stream);
        self.simulations.push_back(simulation);
    }

    fn simulate_commands(&mut self, entry: &Entry, simulation: &mut Simulation) {
        // An unparsable payload is left without simulated commands: apply executes it.
        let Ok((header, fragments)) = parse_payload(&entry.payload) else {
            return;
        };
        self.decode_commands(&fragments);
        for at in 0..self.commands.len() {
            self.prefetch(at + super::PREFETCH_AHEAD_COMMANDS);
            let step = Step {
                entry: entry.index(),
                command: at as u32,
            };
            self.counters.simulated += 1;
            let outcome_start = simulation.outcomes.len();
            let stream_start = self.overlay.stream.len();
            let outcome = match &self.commands[at] {
                Some(command) => {
                    let mut tx = Tx::simulate(&self.state, &mut self.overlay, step, header.now_ms);
                    let result = self.handler.execute(&mut tx, command);
                    let ok = result.is_ok();
                    outcome_of::<H>(result, tx.finish(ok))
                }
                None => Outcome::Invalid,
            };
            codec::encode_into(&outcome, &mut simulation.outcomes).expect("outcomes encode");
            simulation.commands.push(SimulatedCommand {
                outcome: outcome_start..simulation.outcomes.len(),
                stream: stream_start..self.overlay.stream.len(),
            });
        }
    }

    /// Forgets every simulation (leadership lost: what was simulated may never commit).
    pub fn discard_simulations(&mut self) {
        self.overlay.clear();
        self.spare.extend(self.simulations.drain(..));
    }

    /// Simulations waiting for their entries to commit.
    pub fn pending_simulations(&self) -> usize {
        self.simulations.len()
    }

    /// The simulation of `entry` if there is one for exactly this entry, with whether it
    /// started from exactly the committed state as it stands now.
    pub(super) fn take_simulation(&mut self, entry: &Entry) -> Reuse {
        while self
            .simulations
            .front()
            .is_some_and(|s| s.index < entry.index())
        {
            let stale = self.simulations.pop_front().expect("checked");
            self.overlay.drop_through(Step {
                entry: stale.index,
                command: u32::MAX,
            });
            self.spare.push(stale);
        }
        let found = self
            .simulations
            .front()
            .is_some_and(|s| s.index == entry.index());
        if !found {
            return Reuse {
                simulation: None,
                exact: false,
            };
        }
        if self
            .simulations
            .front()
            .is_some_and(|s| s.hash != entry.header.hash)
        {
            // Another leader's entry at this index: every simulation from here on is void.
            self.discard_simulations();
            return Reuse {
                simulation: None,
                exact: false,
            };
        }
        let simulation = self.simulations.pop_front().expect("checked");
        let exact = match simulation.base {
            Base::Committed { applied, hash } => applied == self.applied && hash == self.hash,
            Base::Chained { on } => on == self.applied && self.exact_through == self.applied,
        };
        Reuse {
            simulation: Some(simulation),
            exact,
        }
    }

    /// Consumes what is left of the entry's simulation and notes whether the committed state
    /// now equals what the simulation produced.
    pub(super) fn finish_reuse(&mut self, index: EntryIndex, reuse: Reuse) {
        self.overlay.drop_through(Step {
            entry: index,
            command: u32::MAX,
        });
        if let Some(simulation) = reuse.simulation {
            if reuse.exact {
                self.exact_through = index;
            }
            self.spare.push(simulation);
        }
    }

    /// The commands before `end` were not applied (a duplicate or stale fragment, or commands
    /// a retry repeats): their simulated effects are dropped and the rest of the entry is no
    /// longer exact.
    pub(super) fn skip_simulated(&mut self, index: EntryIndex, end: usize, reuse: &mut Reuse) {
        if reuse.simulation.is_some() && end > 0 {
            self.overlay.drop_through(Step {
                entry: index,
                command: end as u32 - 1,
            });
            reuse.exact = false;
        }
    }
}
