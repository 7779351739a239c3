//! The load client: one timed run of `inflight` load clients (each with its own session and
//! generator) or of an open loop, sending a [`BenchWorkload`]'s requests until the run's end;
//! latencies into one histogram. `bench` and the Bank's benchmark (`runner local`, `runner
//! bench`) both measure with it.

use super::{BENCH_BATCH_MAX, BenchWorkload, new_client};
use crate::client::{Client, ClientConfig, ClientError, SharedClient, SharedError, SharedOptions};
use crate::entry::encode_commands;
use crate::handler::{Handler, Outcome, OutcomeOf};
use crate::rng::Rng;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

/// Latencies recorded: 1 us to 60 s, three significant digits.
pub const LATENCY_US_MAX: u64 = 60_000_000;
/// Milliseconds between two updates of the progress bar.
const PROGRESS_MS: u64 = 200;
/// Seconds a run given a command count instead of a duration may last at most.
const COUNTED_RUN_S_MAX: u64 = 3600;

/// The shape of one timed run.
#[derive(Debug, Clone)]
pub struct Load {
    /// Commands per request (1 to [`BENCH_BATCH_MAX`]).
    pub batch: u32,
    /// Load clients, each with one request in flight (closed loop).
    pub inflight: u32,
    /// Seconds before the measured window, whose answers are not counted.
    pub warmup_s: f64,
    /// Seconds measured (unless `commands` is given).
    pub duration_s: f64,
    /// Commands measured, instead of a duration: the run ends once they are answered.
    pub commands: Option<u64>,
    /// Seed of the load clients' generators.
    pub seed: u64,
    /// Open loop: requests per second, at fixed due times, latency from each due time.
    pub rate: Option<f64>,
    /// Sends requests of read-only commands through the log, as any request, instead of as
    /// reads answered off the log (to compare the two).
    pub reads_in_log: bool,
    /// Many callers of one command each, sharing clients, instead of load clients of
    /// `batch` commands each.
    pub callers: Option<Callers>,
}

/// Callers of one command each, as a web service's request handlers are: `callers` tasks
/// over `clients` [`SharedClient`]s (callers spread evenly), each client forming requests of
/// up to [`Load::batch`] commands with up to [`Load::inflight`] in flight.
#[derive(Debug, Clone, Copy)]
pub struct Callers {
    /// Concurrent callers, each with one command in flight.
    pub callers: u32,
    /// Shared clients the callers use (think: application processes).
    pub clients: u32,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Commands answered in the measured window (done or refused by the business).
    pub commands: u64,
    /// Commands the business refused (results, not errors).
    pub refused: u64,
    /// Commands that failed: invalid ones, and those of requests the cluster did not take.
    pub errors: u64,
    /// Commands of requests that went unanswered: their outcome is unknown.
    pub unknown: u64,
    /// The first measured request's start to the last one's answer; 0 when none completed.
    pub seconds: f64,
    /// Each measured request's completion latency, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Open loop: how late after its due time each measured request left, in microseconds.
    pub send_late_us: Option<Histogram<u64>>,
}

impl Measured {
    /// Answered commands per second (0 when nothing was measured).
    pub fn commands_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.commands as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// What one load client saw in the measured window.
#[derive(Default)]
struct Tally {
    commands: u64,
    refused: u64,
    errors: u64,
    unknown: u64,
    first_done: Option<Instant>,
    last_done: Option<Instant>,
    send_late_us: Option<Histogram<u64>>,
}

/// What every load client of a run shares.
struct Shared<'a, W> {
    config: &'a ClientConfig,
    load: &'a Load,
    workload: &'a RefCell<W>,
    latency_us: RefCell<Histogram<u64>>,
    /// Commands answered in the measured window so far, over every client.
    measured: Cell<u64>,
    warm_until: Instant,
    stop_at: Instant,
}

impl<W> Shared<'_, W> {
    fn running(&self) -> bool {
        Instant::now() < self.stop_at
            && self.measured.get() < self.load.commands.unwrap_or(u64::MAX)
    }
}

/// Run `run` (from 0) of `load`: warm-up, then the measured window.
pub async fn measure<W: BenchWorkload>(
    config: &ClientConfig,
    load: &Load,
    workload: &RefCell<W>,
    run: u32,
) -> anyhow::Result<Measured> {
    let warm_until = Instant::now() + Duration::from_secs_f64(load.warmup_s);
    let length = match load.commands {
        Some(_) => Duration::from_secs(COUNTED_RUN_S_MAX),
        None => Duration::from_secs_f64(load.duration_s),
    };
    let shared = Shared {
        config,
        load,
        workload,
        latency_us: RefCell::new(Histogram::new_with_bounds(1, LATENCY_US_MAX, 3)?),
        measured: Cell::new(0),
        warm_until,
        stop_at: warm_until + length,
    };
    let bar = progress(load, run);
    let ticker = async {
        while shared.running() {
            tokio::time::sleep(Duration::from_millis(PROGRESS_MS)).await;
            bar.set_position(bar.elapsed().as_millis() as u64);
        }
    };
    let runs = async {
        match (load.rate, load.callers) {
            (Some(rate), _) => Ok(vec![open_loop(&shared, run, rate).await?]),
            (None, Some(callers)) => Ok(shared_callers(&shared, run, callers).await),
            (None, None) => closed_loop(&shared, run).await,
        }
    };
    let (tallies, ()) = futures::join!(runs, ticker);
    bar.finish_and_clear();
    Ok(sum(tallies?, shared.latency_us.into_inner()))
}

/// The run's measure from its load clients' tallies.
fn sum(tallies: Vec<Tally>, latency_us: Histogram<u64>) -> Measured {
    let first = tallies.iter().filter_map(|t| t.first_done).min();
    let last = tallies.iter().filter_map(|t| t.last_done).max();
    let seconds = match (first, last) {
        (Some(first), Some(last)) if last > first => (last - first).as_secs_f64(),
        _ => 0.0,
    };
    Measured {
        commands: tallies.iter().map(|t| t.commands).sum(),
        refused: tallies.iter().map(|t| t.refused).sum(),
        errors: tallies.iter().map(|t| t.errors).sum(),
        unknown: tallies.iter().map(|t| t.unknown).sum(),
        seconds,
        latency_us,
        send_late_us: tallies.into_iter().find_map(|t| t.send_late_us),
    }
}

/// The progress bar of a run (drawn only on a terminal), in milliseconds.
fn progress(load: &Load, run: u32) -> ProgressBar {
    let total_ms = ((load.warmup_s + load.duration_s) * 1000.0) as u64;
    let bar = ProgressBar::new(total_ms);
    let style = ProgressStyle::with_template("{msg:>8} [{bar:40}] {elapsed}/{duration}")
        .expect("a valid template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(format!("run {}", run + 1));
    bar
}

/// The generator seed of `client` in `run`: every client of every run its own stream.
fn client_seed(seed: u64, run: u32, client: u32) -> u64 {
    let salt = (u64::from(run) << 32) | u64::from(client);
    seed ^ salt.wrapping_add(1).wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// `inflight` load clients, each with a session of its own.
async fn closed_loop<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
) -> anyhow::Result<Vec<Tally>> {
    let sessions: Vec<Client> = (0..shared.load.inflight)
        .map(|_| new_client(shared.config))
        .collect::<anyhow::Result<_>>()?;
    let clients = (0..shared.load.inflight)
        .zip(sessions)
        .map(|(client, session)| load_client(shared, run, client, session));
    Ok(futures::future::join_all(clients).await)
}

/// The next request of load client `client`, of `count` commands, checked against the
/// engine's limit.
fn next_request<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    client: u32,
    rng: &mut Rng,
    count: u32,
) -> Vec<<W::H as Handler>::Command> {
    let commands = shared
        .workload
        .borrow_mut()
        .next_request(client, rng, count);
    assert!(
        (1..=BENCH_BATCH_MAX as usize).contains(&commands.len()),
        "the workload's request has {} commands",
        commands.len()
    );
    commands
}

/// Sends `commands` as one request: as a read when the handler marks every one read-only
/// (unless `reads_in_log`), else through the log.
async fn send<H: Handler>(
    session: &mut Client,
    commands: &[H::Command],
    reads_in_log: bool,
) -> Result<Vec<OutcomeOf<H>>, ClientError> {
    if !reads_in_log {
        return session.submit::<H>(commands).await;
    }
    let count = commands.len() as u32;
    let (count, results) = session
        .submit_encoded(encode_commands(commands), count)
        .await?;
    Ok(crate::apply::decode_outcomes::<H>(&results, count)?)
}

/// The open loop (`rate`): requests due at fixed times from the warm-up's start, drawn as
/// load client 0's; those due after the warm-up are measured, latency from their due time.
async fn open_loop<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
    rate: f64,
) -> anyhow::Result<Tally> {
    let rng = RefCell::new(Rng::new(client_seed(shared.load.seed, run, 0)));
    let tally = RefCell::new(Tally {
        send_late_us: Some(Histogram::new_with_bounds(1, LATENCY_US_MAX, 3)?),
        ..Tally::default()
    });
    let send = |mut session: Client, due: tokio::time::Instant| {
        let commands = next_request(shared, 0, &mut rng.borrow_mut(), shared.load.batch);
        tally.borrow_mut().note_send(shared, due.into_std());
        async move {
            let answer = send::<W::H>(&mut session, &commands, shared.load.reads_in_log).await;
            let answer = answer.map_err(|error| Failed::of(&error));
            (session, due, (commands.len() as u64, answer))
        }
    };
    let answered = |due: tokio::time::Instant, (count, answer)| {
        let (due, done) = (due.into_std(), Instant::now());
        if due >= shared.warm_until {
            let mut tally = tally.borrow_mut();
            tally.record(shared, count, answer, done - due);
            tally.first_done.get_or_insert(shared.warm_until);
            tally.last_done = Some(done);
        }
    };
    // A session's id is drawn from the operating system's random bytes, as every client's.
    let new_session =
        || new_client(shared.config).expect("the operating system gives random bytes");
    let to_tokio = tokio::time::Instant::from_std;
    let (start, stop_at) = (to_tokio(Instant::now()), to_tokio(shared.stop_at));
    let pacer = crate::cli::Pacer::Thread;
    crate::cli::open_loop(pacer, rate, start, stop_at, new_session, send, answered).await;
    Ok(tally.into_inner())
}

/// One load client: a session of its own, one request in flight, until the run ends.
async fn load_client<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
    client: u32,
    mut session: Client,
) -> Tally {
    let mut rng = Rng::new(client_seed(shared.load.seed, run, client));
    let mut tally = Tally::default();
    while shared.running() {
        let commands = next_request(shared, client, &mut rng, shared.load.batch);
        let sent = Instant::now();
        let answer = send::<W::H>(&mut session, &commands, shared.load.reads_in_log).await;
        let answer = answer.map_err(|error| Failed::of(&error));
        let done = Instant::now();
        if done >= shared.warm_until {
            tally.record(shared, commands.len() as u64, answer, done - sent);
            tally.first_done.get_or_insert(sent.max(shared.warm_until));
            tally.last_done = Some(done);
        }
    }
    tally
}

/// How a request without outcomes failed, as a run counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failed {
    /// No answer in time: the outcome is unknown.
    Unknown,
    /// The cluster (or the client) refused it: nothing ran.
    Error,
}

impl Failed {
    fn of(error: &ClientError) -> Failed {
        match error {
            ClientError::GaveUp { .. } => Failed::Unknown,
            ClientError::Rejected(_)
            | ClientError::Stale(_)
            | ClientError::SessionExpired(_)
            | ClientError::Reused(_)
            | ClientError::OutcomeCount { .. }
            | ClientError::Decode(_)
            | ClientError::NoRandomness(_)
            | ClientError::Unreachable(_)
            | ClientError::Refused(_) => Failed::Error,
        }
    }

    fn of_shared(error: &SharedError) -> Failed {
        match error {
            SharedError::Client(error) => Failed::of(error),
            SharedError::Stopped => Failed::Unknown,
            SharedError::QueueFull { .. }
            | SharedError::TooMany { .. }
            | SharedError::KeyReused
            | SharedError::KeyExpired => Failed::Error,
        }
    }
}

/// `callers` callers of one command each over shared clients, until the run ends.
async fn shared_callers<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
    callers: Callers,
) -> Vec<Tally> {
    let options = SharedOptions {
        inflight: shared.load.inflight as usize,
        ..SharedOptions::new(shared.load.batch as usize)
    };
    let clients: Vec<SharedClient<W::H>> = (0..callers.clients.max(1))
        .map(|_| SharedClient::start(shared.config.clone(), options.clone()))
        .collect();
    let calls = (0..callers.callers).map(|caller| {
        let client = &clients[(caller as usize) % clients.len()];
        caller_loop(shared, run, caller, client)
    });
    futures::future::join_all(calls).await
}

/// One caller: one command at a time through its shared client, until the run ends.
async fn caller_loop<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
    caller: u32,
    client: &SharedClient<W::H>,
) -> Tally {
    let mut rng = Rng::new(client_seed(shared.load.seed, run, caller));
    let mut tally = Tally::default();
    while shared.running() {
        let commands = next_request(shared, caller, &mut rng, 1);
        let sent = Instant::now();
        let answer = client.submit(commands).await;
        let answer = answer.map_err(|error| Failed::of_shared(&error));
        let done = Instant::now();
        if done >= shared.warm_until {
            tally.record(shared, 1, answer, done - sent);
            tally.first_done.get_or_insert(sent.max(shared.warm_until));
            tally.last_done = Some(done);
        }
    }
    tally
}

impl Tally {
    /// Counts one request's answer of `count` commands, and its latency when it has one.
    fn record<W: BenchWorkload>(
        &mut self,
        shared: &Shared<'_, W>,
        count: u64,
        answer: Result<Vec<OutcomeOf<W::H>>, Failed>,
        latency: Duration,
    ) {
        match answer {
            Ok(outcomes) => {
                let before = self.commands;
                count_outcomes(self, &outcomes);
                shared
                    .measured
                    .set(shared.measured.get() + self.commands - before);
                let latency_us = latency.as_micros() as u64;
                shared.latency_us.borrow_mut().saturating_record(latency_us);
            }
            Err(Failed::Unknown) => self.unknown += count,
            Err(Failed::Error) => self.errors += count,
        }
    }

    /// Open loop: notes how late after `due` a measured request leaves.
    fn note_send<W>(&mut self, shared: &Shared<'_, W>, due: Instant) {
        if due < shared.warm_until {
            return;
        }
        let late = Instant::now().saturating_duration_since(due);
        if let Some(histogram) = self.send_late_us.as_mut() {
            histogram.saturating_record(late.as_micros() as u64);
        }
    }
}

/// Adds one answered request's outcomes to the tally.
fn count_outcomes<O, E>(tally: &mut Tally, outcomes: &[Outcome<O, E>]) {
    for outcome in outcomes {
        match outcome {
            Outcome::Done(_) => tally.commands += 1,
            Outcome::Failed(_) => {
                tally.commands += 1;
                tally.refused += 1;
            }
            Outcome::Invalid => tally.errors += 1,
        }
    }
}
