//! The simulator drives a handler other than the Bank: a toy store of registers and counters
//! ([`Toy`]), with a business invariant of its own and an independent oracle ([`ToyOracle`]: a
//! plain `BTreeMap` with client sessions of its own), over many seeds with faults; and the
//! oracle catches a handler with a planted bug ([`BrokenToy`]). In the seeds that send
//! callers' keys, the oracle decides the keyed runs with its own sessions too.

#![cfg(feature = "sim")]

use engine::apply::KeyedOutcome;
use engine::codec::{Decode, Encode};
use engine::internals::entry::{FragmentHeader, KeyedRun, RequestDigest};
use engine::rng::Rng;
use engine::sim::check::{Answer, Logged};
use engine::sim::violation::Invariant;
use engine::sim::{SimOptions, SimReport, Workload};
use engine::{ClientId, EntryIndex, RequestNumber, Sandbox};
use engine::{Handler, Outcome, Prefetch, Schema, State, StateError, Table, Tx};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::marker::PhantomData;
use std::rc::Rc;
use std::time::Instant;

// The toy handler.

/// The toy's only table: one register per key.
const REGISTERS: Table<u64, u64> = Table::new(0, "registers");

/// A toy command.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
enum ToyCommand {
    /// Sets a register; outputs what it held before.
    Put { key: u64, value: u64 },
    /// Adds `delta` to a register that exists, refusing a result below zero or past `u64::MAX`.
    Add { key: u64, delta: i64 },
    /// Reads a register.
    Read { key: u64 },
    /// Removes a register; outputs what it held.
    Delete { key: u64 },
    /// Counts the registers and sums them: a read of the whole table.
    Sum,
}

/// What a toy command that applied returns.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
enum ToyOutput {
    /// What the register held before a put or a delete.
    Previous(Option<u64>),
    /// The register's value after an add.
    Now(u64),
    /// The register as read.
    Read(Option<u64>),
    /// The registers there are and their sum.
    Sum { registers: u64, total: u128 },
}

/// Why a toy command was refused. It changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
enum ToyError {
    /// An add to a register that does not exist.
    Missing(u64),
    /// An add that would take the register below zero or past `u64::MAX`.
    OutOfRange { value: u64, delta: i64 },
    /// The state has no room for another register.
    Full,
}

impl From<StateError> for ToyError {
    fn from(_: StateError) -> Self {
        ToyError::Full
    }
}

/// The toy outcome of a command.
type ToyOutcome = Outcome<ToyOutput, ToyError>;

/// The toy handler.
#[derive(Clone, Copy, Debug, Default)]
struct Toy;

impl Handler for Toy {
    type Command = ToyCommand;
    type Output = ToyOutput;
    type Error = ToyError;

    fn schema(&self) -> Schema {
        Schema::new().table(&REGISTERS)
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &ToyCommand) -> Result<ToyOutput, ToyError> {
        match *command {
            ToyCommand::Put { key, value } => {
                let previous = tx.get(&REGISTERS, &key);
                tx.put(&REGISTERS, key, value)?;
                Ok(ToyOutput::Previous(previous))
            }
            ToyCommand::Add { key, delta } => add(tx, key, delta, u64::checked_add_signed),
            ToyCommand::Read { key } => Ok(ToyOutput::Read(tx.get(&REGISTERS, &key))),
            ToyCommand::Delete { key } => Ok(ToyOutput::Previous(tx.delete(&REGISTERS, &key)?)),
            ToyCommand::Sum => Ok(sum(tx)),
        }
    }

    fn prefetch(&self, command: &ToyCommand, keys: &mut Prefetch<'_>) {
        match command {
            ToyCommand::Put { key, .. }
            | ToyCommand::Add { key, .. }
            | ToyCommand::Read { key }
            | ToyCommand::Delete { key } => keys.key(&REGISTERS, key),
            ToyCommand::Sum => {}
        }
    }
}

/// Adds `delta` to register `key` with `arithmetic` (`None`: out of range).
fn add(
    tx: &mut Tx<'_>,
    key: u64,
    delta: i64,
    arithmetic: fn(u64, i64) -> Option<u64>,
) -> Result<ToyOutput, ToyError> {
    let value = tx.get(&REGISTERS, &key).ok_or(ToyError::Missing(key))?;
    let now = arithmetic(value, delta).ok_or(ToyError::OutOfRange { value, delta })?;
    tx.put(&REGISTERS, key, now)?;
    Ok(ToyOutput::Now(now))
}

fn sum(tx: &mut Tx<'_>) -> ToyOutput {
    let (mut registers, mut total) = (0u64, 0u128);
    tx.for_each_unordered(&REGISTERS, |_, value| {
        registers += 1;
        total += u128::from(*value);
    });
    ToyOutput::Sum { registers, total }
}

/// The toy with a planted bug: its add wraps around instead of refusing an out-of-range result.
#[derive(Clone, Copy, Debug, Default)]
struct BrokenToy;

impl Handler for BrokenToy {
    type Command = ToyCommand;
    type Output = ToyOutput;
    type Error = ToyError;

    fn schema(&self) -> Schema {
        Toy.schema()
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &ToyCommand) -> Result<ToyOutput, ToyError> {
        if let ToyCommand::Add { key, delta } = *command {
            add(tx, key, delta, |value, delta| {
                Some(value.wrapping_add_signed(delta))
            })
        } else {
            Toy.execute(tx, command)
        }
    }
}

/// A handler of the toy's commands, outputs and errors (the toy or its broken twin).
trait ToyHandler:
    Handler<Command = ToyCommand, Output = ToyOutput, Error = ToyError> + Default + Debug
{
}

impl<H> ToyHandler for H where
    H: Handler<Command = ToyCommand, Output = ToyOutput, Error = ToyError> + Default + Debug
{
}

// The workload.

/// Registers the clients use: few, so that their requests conflict.
const TOY_KEYS: u64 = 8;
/// Commands in one request, at most (one more than a simulated entry holds, so that some
/// requests are split between entries).
const TOY_REQUEST_COMMANDS_MAX: u64 = 17;
/// Ordinary put values, at most; add deltas lie within plus or minus this.
const TOY_VALUE_MAX: u64 = 1_000;

/// What the workload counted, shared with the test (the simulator consumes the workload).
#[derive(Debug, Default)]
struct Tally {
    /// Commands observed done.
    done: Cell<u64>,
    /// Commands observed refused with [`ToyError::Missing`].
    missing: Cell<u64>,
    /// Commands observed refused with [`ToyError::OutOfRange`].
    out_of_range: Cell<u64>,
    /// Logged fragments that carry only part of their request.
    partial: Cell<u64>,
    /// Logged fragments that start where an earlier one of the same request did (retries
    /// logged twice).
    copies: Cell<u64>,
    /// Logged fragments with keyed runs.
    keyed: Cell<u64>,
}

/// Adds one to a counter of the tally.
fn bump(counter: &Cell<u64>) {
    counter.set(counter.get() + 1);
}

/// The toy under simulation: random commands over a few registers; the invariant I3 that the
/// registers' count and sum are what the effects of the commands done (never of those
/// refused) add up to, counted once per request; and the oracle, fed the committed log.
#[derive(Debug)]
struct ToyWorkload<H> {
    /// The registers' sum, from the effects of the commands observed done.
    total: i128,
    /// The registers there are, from the same.
    registers: i64,
    /// An output that does not fit its command, as observed (I3 reports it).
    unfit: Option<String>,
    oracle: ToyOracle,
    /// Every logged fragment's client, request and first command.
    seen: BTreeSet<(u128, u64, u32)>,
    tally: Rc<Tally>,
    handler: PhantomData<fn() -> H>,
}

impl<H> ToyWorkload<H> {
    fn new(tally: &Rc<Tally>) -> Self {
        ToyWorkload {
            total: 0,
            registers: 0,
            unfit: None,
            oracle: ToyOracle::default(),
            seen: BTreeSet::new(),
            tally: Rc::clone(tally),
            handler: PhantomData,
        }
    }

    /// Takes in the effect of a command done.
    fn take_effect(&mut self, command: &ToyCommand, output: &ToyOutput) {
        match effect(command, output) {
            Some((total, registers)) => {
                self.total += total;
                self.registers += registers;
            }
            None => {
                let unfit = format!("{command:?} was answered {output:?}");
                self.unfit.get_or_insert(unfit);
            }
        }
    }
}

/// What a command done changes of the registers' sum and count (`None`: the output does not
/// fit the command).
fn effect(command: &ToyCommand, output: &ToyOutput) -> Option<(i128, i64)> {
    let held = |previous: &Option<u64>| previous.map_or(0, i128::from);
    match (command, output) {
        (ToyCommand::Put { value, .. }, ToyOutput::Previous(previous)) => Some((
            i128::from(*value) - held(previous),
            i64::from(previous.is_none()),
        )),
        (ToyCommand::Add { delta, .. }, ToyOutput::Now(_)) => Some((i128::from(*delta), 0)),
        (ToyCommand::Delete { .. }, ToyOutput::Previous(previous)) => {
            Some((-held(previous), -i64::from(previous.is_some())))
        }
        (ToyCommand::Read { .. }, ToyOutput::Read(_))
        | (ToyCommand::Sum, ToyOutput::Sum { .. }) => Some((0, 0)),
        (
            ToyCommand::Put { .. }
            | ToyCommand::Add { .. }
            | ToyCommand::Read { .. }
            | ToyCommand::Delete { .. }
            | ToyCommand::Sum,
            ToyOutput::Previous(_) | ToyOutput::Now(_) | ToyOutput::Read(_) | ToyOutput::Sum { .. },
        ) => None,
    }
}

/// What the toy's checks find wrong, in words: all a test needs of it is the message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Broken(String);

impl<H: ToyHandler> Workload for ToyWorkload<H> {
    type H = H;
    type Error = Broken;

    fn handler(&self) -> H {
        H::default()
    }

    fn next_request(&mut self, rng: &mut Rng) -> Vec<ToyCommand> {
        let count = 1 + rng.below(TOY_REQUEST_COMMANDS_MAX);
        (0..count).map(|_| random_command(rng)).collect()
    }

    fn observe(&mut self, command: &ToyCommand, outcome: &ToyOutcome) {
        match outcome {
            Outcome::Done(output) => {
                bump(&self.tally.done);
                self.take_effect(command, output);
            }
            Outcome::Failed(ToyError::Missing(_)) => bump(&self.tally.missing),
            Outcome::Failed(ToyError::OutOfRange { .. }) => bump(&self.tally.out_of_range),
            Outcome::Failed(ToyError::Full) | Outcome::Invalid => {}
        }
    }

    fn check(&self, state: &State) -> Result<(), Broken> {
        if let Some(unfit) = &self.unfit {
            return Err(Broken(unfit.clone()));
        }
        let total: i128 = state
            .iter_unordered(&REGISTERS)
            .map(|(_, value)| i128::from(*value))
            .sum();
        let registers = state.len(&REGISTERS) as i64;
        if (total, registers) != (self.total, self.registers) {
            return Err(Broken(format!(
                "{registers} registers sum to {total}; the commands done add up to {} summing to {}",
                self.registers, self.total
            )));
        }
        Ok(())
    }

    fn logged(&mut self, logged: Logged<'_, H>) -> Result<(), Broken> {
        let fragment = &logged.fragment;
        if fragment.command_count != fragment.request_commands {
            bump(&self.tally.partial);
        }
        let start = (
            fragment.client.0,
            fragment.request.0,
            fragment.first_command,
        );
        if !self.seen.insert(start) {
            bump(&self.tally.copies);
        }
        if !logged.runs.is_empty() {
            bump(&self.tally.keyed);
        }
        self.oracle.logged(logged).map_err(Broken)
    }

    fn check_model(&self, state: &State) -> Result<(), Broken> {
        self.oracle.check_state(state).map_err(Broken)
    }
}

/// A random command: puts (one in eight near `u64::MAX`, so that adds overflow), adds (often
/// below zero, or to a register that does not exist), reads, deletes and sums.
fn random_command(rng: &mut Rng) -> ToyCommand {
    let key = rng.below(TOY_KEYS);
    let small = rng.below(TOY_VALUE_MAX + 1);
    match rng.below(14) {
        0..=3 if rng.chance(1, 8) => ToyCommand::Put {
            key,
            value: u64::MAX - small,
        },
        0..=3 => ToyCommand::Put { key, value: small },
        4..=9 => ToyCommand::Add {
            key,
            delta: rng.below(2 * TOY_VALUE_MAX + 1) as i64 - TOY_VALUE_MAX as i64,
        },
        10..=11 => ToyCommand::Read { key },
        12 => ToyCommand::Delete { key },
        _ => ToyCommand::Sum,
    }
}

// The oracle.

/// What a command got: `Ran` with its outcome (every command outside keyed runs, and a keyed
/// one whose key's session ran it, now or before), or why a keyed one did not run.
type Got = KeyedOutcome<ToyOutcome>;

/// One client's session in the oracle (or a key's): its latest request, the commands in it,
/// and what those of them that ran got, in order.
#[derive(Debug)]
struct OracleSession {
    request: u64,
    commands: u32,
    /// What the request's commands were (as its fragments say).
    digest: RequestDigest,
    outcomes: Vec<Got>,
    /// Finished requests before `request`, oldest first, as many as the engine documents it
    /// keeps (`PIPELINE_REQUESTS_MAX` - 1): number, digest, outcomes.
    earlier: Vec<(u64, RequestDigest, Vec<Got>)>,
}

/// What the oracle makes of a logged fragment.
#[derive(Clone, Copy, Debug)]
enum Fate {
    /// Its commands that have not run yet run (none, for a copy of what ran already).
    Run,
    /// Its client has moved on, or it does not continue its request where the session
    /// stands: nothing runs.
    Stale,
    /// Its client has no session and it does not start request 1: nothing runs.
    Expired,
    /// It has its session's request number but other commands: nothing runs.
    Reused,
    /// A finished request the session still keeps: nothing runs, answered with its outcomes.
    Earlier,
    /// A new request sent while others before it were in flight, one of which has not run
    /// whole: nothing runs, answered "not yet".
    Waits,
}

/// The toy by hand: registers in a `BTreeMap` and each client's session, written from the
/// toy's rules and the exactly-once rules the engine documents (`engine::ReplyStatus`); it
/// shares no code with the engine's apply or sessions, nor with [`Toy::execute`].
#[derive(Debug, Default)]
struct ToyOracle {
    registers: BTreeMap<u64, u64>,
    sessions: BTreeMap<u128, OracleSession>,
}

impl ToyOracle {
    /// Takes in one fragment of the committed log: runs what the rules say runs and, if the
    /// fragment ends its request, compares the reference's answer with its own.
    fn logged<H: ToyHandler>(&mut self, logged: Logged<'_, H>) -> Result<(), String> {
        let fragment = logged.fragment;
        let name = format!(
            "entry {}: client {} request {}",
            logged.index.0, fragment.client.0, fragment.request.0
        );
        let fate = self.admit(&fragment);
        if let Fate::Run = fate {
            self.run_fragment(&fragment, logged.commands, logged.runs);
        }
        match (fragment.is_last(), &logged.answer) {
            (false, None) => Ok(()),
            (false, Some(answer)) => Err(format!("{name}: answered {answer:?} before its end")),
            (true, None) => Err(format!("{name}: its last fragment got no answer")),
            (true, Some(answer)) => self.compare(&name, &fragment, fate, answer),
        }
    }

    /// Decides a fragment's fate; opens a fresh session when it starts a newer request (a
    /// client's first request is number 1).
    fn admit(&mut self, fragment: &FragmentHeader) -> Fate {
        let (client, request) = (fragment.client.0, fragment.request.0);
        let session = self.sessions.get(&client);
        let opens = fragment.first_command == 0
            && session.map_or(request == 1, |session| request > session.request);
        // Requests before this one its client still waits for: each must have run whole, and
        // a request that waits runs only from its start.
        let waits = fragment.oldest_pending.0 < request
            && (fragment.first_command > 0
                || session.is_none_or(|s| {
                    s.request + 1 != request || s.outcomes.len() as u32 != s.commands
                }));
        if waits && session.is_none_or(|s| request > s.request) {
            return Fate::Waits;
        }
        if opens {
            let mut earlier = Vec::new();
            if let Some(old) = self.sessions.remove(&client) {
                earlier = old.earlier;
                if old.outcomes.len() as u32 == old.commands {
                    earlier.push((old.request, old.digest, old.outcomes));
                }
                let keep = engine::apply::PIPELINE_REQUESTS_MAX - 1;
                earlier.drain(..earlier.len().saturating_sub(keep));
                let oldest = fragment.oldest_pending.min(fragment.request).0;
                earlier.retain(|(request, _, _)| *request >= oldest);
            }
            let fresh = OracleSession {
                request,
                commands: fragment.request_commands,
                digest: fragment.digest,
                outcomes: Vec::new(),
                earlier,
            };
            self.sessions.insert(client, fresh);
            return Fate::Run;
        }
        let Some(session) = session else {
            return Fate::Expired;
        };
        if let Some((_, digest, _)) = session.earlier.iter().find(|(r, _, _)| *r == request) {
            return if *digest == fragment.digest {
                Fate::Earlier
            } else {
                Fate::Reused
            };
        }
        if session.request == request && session.digest != fragment.digest {
            return Fate::Reused;
        }
        let continues = session.request == request
            && session.commands == fragment.request_commands
            && fragment.first_command as usize <= session.outcomes.len();
        if continues { Fate::Run } else { Fate::Stale }
    }

    /// Runs the fragment's commands past those of its request that ran already: each outside
    /// the keyed runs `runs` on the registers, each run's part as its key's session decides.
    fn run_fragment(
        &mut self,
        fragment: &FragmentHeader,
        commands: &[ToyCommand],
        runs: &[KeyedRun],
    ) {
        let client = fragment.client.0;
        let first = fragment.first_command as usize;
        let end = first + commands.len();
        let mut position = first.max(self.sessions[&client].outcomes.len());
        while position < end {
            let at = position - first;
            let covering = runs.iter().find(|keyed| {
                (keyed.run.first as usize..keyed.run.end() as usize).contains(&position)
            });
            let got = match covering {
                Some(keyed) => {
                    let part_end = (keyed.run.end() as usize).min(end);
                    self.keyed_part(keyed, position as u32, &commands[at..part_end - first])
                }
                None => vec![KeyedOutcome::Ran(model_run(
                    &mut self.registers,
                    &commands[at],
                ))],
            };
            position += got.len();
            let session = self.sessions.get_mut(&client);
            session
                .expect("a fragment that runs has a session")
                .outcomes
                .extend(got);
        }
    }

    /// What the commands `part` of keyed run `keyed`, from request position `start` on, get:
    /// admitted as request 1 of the key's session would be, they run when that runs them,
    /// and each gets what the key's session holds for it, or why it did not run.
    fn keyed_part(&mut self, keyed: &KeyedRun, start: u32, part: &[ToyCommand]) -> Vec<Got> {
        let run = keyed.run;
        let header = FragmentHeader {
            client: run.key,
            request: RequestNumber(1),
            oldest_pending: RequestNumber(1),
            request_commands: run.count,
            first_command: start - run.first,
            command_count: part.len() as u32,
            command_bytes: 0,
            digest: keyed.digest,
        };
        match self.admit(&header) {
            Fate::Run => {
                self.run_fragment(&header, part, &[]);
                let held = self.sessions[&run.key.0].outcomes.iter();
                let held = held.skip(header.first_command as usize);
                held.take(part.len()).cloned().collect()
            }
            Fate::Expired => vec![KeyedOutcome::Expired; part.len()],
            // A key's session only ever has request 1: any other fate is another's.
            Fate::Stale | Fate::Reused | Fate::Earlier | Fate::Waits => {
                vec![KeyedOutcome::Reused; part.len()]
            }
        }
    }

    /// Compares the reference's answer to a request with the oracle's.
    fn compare<H: ToyHandler>(
        &self,
        name: &str,
        fragment: &FragmentHeader,
        fate: Fate,
        answer: &Answer<H>,
    ) -> Result<(), String> {
        match (fate, answer) {
            (Fate::Stale, Answer::Stale)
            | (Fate::Expired, Answer::Expired)
            | (Fate::Reused, Answer::Reused)
            | (Fate::Waits, Answer::NotYet) => Ok(()),
            (fate @ (Fate::Run | Fate::Earlier), Answer::Results(reference)) => {
                let ran: Vec<Got> = reference.iter().cloned().map(KeyedOutcome::Ran).collect();
                self.compare_outcomes(name, fragment, fate, &ran)
            }
            (fate @ (Fate::Run | Fate::Earlier), Answer::Keyed(reference)) => {
                self.compare_outcomes(name, fragment, fate, reference)
            }
            (
                Fate::Run
                | Fate::Stale
                | Fate::Expired
                | Fate::Reused
                | Fate::Earlier
                | Fate::Waits,
                Answer::Results(_)
                | Answer::Keyed(_)
                | Answer::Stale
                | Answer::Expired
                | Answer::Reused
                | Answer::NotYet
                | Answer::Undecodable,
            ) => Err(format!(
                "{name}: the reference answered {answer:?}, the oracle expects {fate:?}"
            )),
        }
    }

    /// Compares the reference's outcomes of a request whose fate was to run (or to be a
    /// finished earlier one) with the oracle's.
    fn compare_outcomes(
        &self,
        name: &str,
        fragment: &FragmentHeader,
        fate: Fate,
        reference: &[Got],
    ) -> Result<(), String> {
        let session = &self.sessions[&fragment.client.0];
        let earlier = session.earlier.iter();
        let ours = match fate {
            Fate::Earlier => earlier
                .filter(|(r, _, _)| *r == fragment.request.0)
                .map(|(_, _, outcomes)| outcomes)
                .next()
                .expect("the earlier request the fate found"),
            Fate::Run | Fate::Stale | Fate::Expired | Fate::Reused | Fate::Waits => {
                &session.outcomes
            }
        };
        if ours.len() != reference.len() {
            return Err(format!(
                "{name}: the reference has {} outcomes, the oracle {}",
                reference.len(),
                ours.len()
            ));
        }
        match ours.iter().zip(reference).position(|(o, r)| o != r) {
            Some(k) => Err(format!(
                "{name} command {k}: the reference says {:?}, the oracle {:?}",
                reference[k], ours[k]
            )),
            None => Ok(()),
        }
    }

    /// Compares the oracle's registers with the `REGISTERS` table of a committed state.
    fn check_state(&self, state: &State) -> Result<(), String> {
        let held = state.len(&REGISTERS);
        if held != self.registers.len() {
            return Err(format!(
                "the state holds {held} registers, the oracle {}: {:?}",
                self.registers.len(),
                self.registers
            ));
        }
        for (key, value) in &self.registers {
            let found = state.get(&REGISTERS, key);
            if found != Some(value) {
                return Err(format!(
                    "register {key}: the state holds {found:?}, the oracle {value}"
                ));
            }
        }
        Ok(())
    }
}

/// One toy command on the oracle's registers (adds in `i128`, range-checked by conversion).
fn model_run(registers: &mut BTreeMap<u64, u64>, command: &ToyCommand) -> ToyOutcome {
    match *command {
        ToyCommand::Put { key, value } => {
            Outcome::Done(ToyOutput::Previous(registers.insert(key, value)))
        }
        ToyCommand::Add { key, delta } => {
            let Some(value) = registers.get_mut(&key) else {
                return Outcome::Failed(ToyError::Missing(key));
            };
            match u64::try_from(i128::from(*value) + i128::from(delta)) {
                Ok(now) => {
                    *value = now;
                    Outcome::Done(ToyOutput::Now(now))
                }
                Err(_) => Outcome::Failed(ToyError::OutOfRange {
                    value: *value,
                    delta,
                }),
            }
        }
        ToyCommand::Read { key } => Outcome::Done(ToyOutput::Read(registers.get(&key).copied())),
        ToyCommand::Delete { key } => Outcome::Done(ToyOutput::Previous(registers.remove(&key))),
        ToyCommand::Sum => Outcome::Done(ToyOutput::Sum {
            registers: registers.len() as u64,
            total: registers.values().map(|v| u128::from(*v)).sum(),
        }),
    }
}

// The tests.

/// Seeds the standard-run test runs.
const TOY_SEEDS: u64 = 600;
/// Seeds the broken handler runs on (each must be caught).
const BROKEN_SEEDS: u64 = 3;
/// Room for the sandbox test's registers.
const TEST_STATE_BYTES: u64 = 1 << 20;

/// Adds a run's fault and progress counts to `totals`.
fn add_up(totals: &mut SimReport, report: &SimReport) {
    totals.crashes += report.crashes;
    totals.snapshots += report.snapshots;
    totals.installs += report.installs;
    totals.damaged += report.damaged;
    totals.partitions += report.partitions;
    totals.disks_full += report.disks_full;
    totals.committed += report.committed;
    totals.acknowledged += report.acknowledged;
    totals.events += report.events;
}

/// Proves standard simulated runs of the toy, with faults, pass every check over many seeds
/// (the toy's I3 and its oracle's comparison of every answer and committed state included),
/// and that the runs saw crashes, snapshots, installs, commands refused by the handler,
/// requests split between entries, retried requests logged twice and keyed runs.
#[test]
fn the_simulator_runs_a_handler_other_than_the_bank() {
    let started = Instant::now();
    let tally = Rc::new(Tally::default());
    let mut totals = SimReport::default();
    for seed in 0..TOY_SEEDS {
        let report = engine::sim::run(ToyWorkload::<Toy>::new(&tally), SimOptions::new(seed));
        assert!(report.committed > 0, "seed {seed} committed nothing");
        assert_eq!(
            report.violations,
            Vec::new(),
            "seed {seed} ({})",
            report.swarm
        );
        add_up(&mut totals, &report);
    }
    eprintln!(
        "{TOY_SEEDS} seeds in {:.1} s: {} crashes, {} snapshots, {} installs, {} damaged, {} partitions, {} disks full, {} committed, {} acknowledged, {} events; {} commands done, {} missing, {} out of range; {} partial fragments, {} copies, {} keyed",
        started.elapsed().as_secs_f64(),
        totals.crashes,
        totals.snapshots,
        totals.installs,
        totals.damaged,
        totals.partitions,
        totals.disks_full,
        totals.committed,
        totals.acknowledged,
        totals.events,
        tally.done.get(),
        tally.missing.get(),
        tally.out_of_range.get(),
        tally.partial.get(),
        tally.copies.get(),
        tally.keyed.get()
    );
    assert!(totals.crashes > 0, "no node crashed");
    assert!(totals.snapshots > 0, "no snapshot was taken");
    assert!(totals.installs > 0, "no snapshot was installed");
    assert!(tally.done.get() > 0, "no command was done");
    assert!(tally.missing.get() > 0, "no add found its register missing");
    assert!(tally.out_of_range.get() > 0, "no add was out of range");
    assert!(
        tally.partial.get() > 0,
        "no request was split between entries"
    );
    assert!(
        tally.copies.get() > 0,
        "no retried request was logged twice"
    );
    assert!(tally.keyed.get() > 0, "no fragment carried keyed runs");
}

/// Proves the toy's oracle catches wrong engine answers in a run: with a handler whose add
/// wraps around instead of refusing, the replicas agree with one another, but the oracle
/// reports the add's answer.
#[test]
fn the_toy_oracle_catches_a_handler_that_wraps_instead_of_refusing() {
    let tally = Rc::new(Tally::default());
    for seed in 0..BROKEN_SEEDS {
        let mut options = SimOptions::new(seed);
        options.faults = false;
        let report = engine::sim::run(ToyWorkload::<BrokenToy>::new(&tally), options);
        // An add in a keyed run may change the state entries before its request's answer:
        // the state's difference may be reported first.
        let caught = report
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::Oracle && v.detail.contains("Now("));
        assert!(caught, "seed {seed}: {:?}", report.violations);
        let diverged = report
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::Diverged);
        assert!(!diverged, "seed {seed}: {:?}", report.violations);
    }
}

/// Client 1's request 1, whole, logged in entry `index` and answered `answer`.
fn logged<H: ToyHandler>(index: u64, commands: &[ToyCommand], answer: Answer<H>) -> Logged<'_, H> {
    let count = commands.len() as u32;
    let fragment = FragmentHeader {
        client: ClientId(1),
        request: RequestNumber(1),
        oldest_pending: RequestNumber(1),
        request_commands: count,
        first_command: 0,
        command_count: count,
        command_bytes: 0,
        digest: RequestDigest::default(),
    };
    Logged {
        index: EntryIndex(index),
        fragment,
        commands,
        runs: &[],
        answer: Some(answer),
    }
}

/// Proves the oracle runs a retried request once: a copy answered with the first copy's
/// results passes; one answered with a second execution's results is a violation naming the
/// entry, client, request and command; and so is a committed state holding its effect twice.
#[test]
fn the_toy_oracle_refuses_a_retried_request_applied_twice() {
    let mut oracle = ToyOracle::default();
    let request = [
        ToyCommand::Put { key: 3, value: 5 },
        ToyCommand::Add { key: 3, delta: 2 },
        ToyCommand::Add { key: 3, delta: -9 },
    ];
    let first = vec![
        Outcome::Done(ToyOutput::Previous(None)),
        Outcome::Done(ToyOutput::Now(7)),
        Outcome::Failed(ToyError::OutOfRange {
            value: 7,
            delta: -9,
        }),
    ];
    for index in [1, 2] {
        let answer = Answer::<Toy>::Results(first.clone());
        let found = oracle.logged(logged(index, &request, answer));
        found.expect("both copies get the first copy's results");
    }
    let twice = vec![
        Outcome::Done(ToyOutput::Previous(Some(7))),
        Outcome::Done(ToyOutput::Now(7)),
        Outcome::Failed(ToyError::OutOfRange {
            value: 7,
            delta: -9,
        }),
    ];
    let found = oracle
        .logged(logged::<Toy>(3, &request, Answer::Results(twice)))
        .expect_err("a second execution is a violation");
    assert!(
        found.contains("entry 3: client 1 request 1 command 0"),
        "{found}"
    );
    let mut sandbox = Sandbox::new(Toy, TEST_STATE_BYTES);
    assert_eq!(sandbox.run(&request).expect("the sandbox applies"), first);
    oracle
        .check_state(sandbox.state())
        .expect("the state with the request once matches");
    sandbox.run(&request[1..2]).expect("the sandbox applies");
    let found = oracle
        .check_state(sandbox.state())
        .expect_err("a state with the add twice is a violation");
    assert!(
        found.contains("register 3: the state holds Some(9)"),
        "{found}"
    );
}
