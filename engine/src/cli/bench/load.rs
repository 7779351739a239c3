//! One timed run: `--inflight` load clients, each with its own session and generator,
//! sending the workload's requests until the run's end; latencies into one histogram.

use super::report::{LatencyMs, Run};
use super::{BENCH_BATCH_MAX, BenchArgs, BenchWorkload, new_client};
use crate::client::{Client, ClientConfig, ClientError};
use crate::handler::Outcome;
use crate::rng::Rng;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Latencies recorded: 1 us to 60 s, three significant digits.
const LATENCY_US_MAX: u64 = 60_000_000;
/// Milliseconds between two updates of the progress bar.
const PROGRESS_MS: u64 = 200;

/// What one load client saw in the measured window.
#[derive(Default)]
struct Tally {
    /// Commands answered (done or refused by the business).
    commands: u64,
    /// Commands the business refused (a result, not an error).
    refused: u64,
    /// Commands that failed: invalid, or in a request the cluster did not take.
    errors: u64,
    /// Commands of requests that went unanswered (their outcome is unknown).
    unknown: u64,
    first_done: Option<Instant>,
    last_done: Option<Instant>,
}

/// What every load client of a run shares.
struct Shared<'a, W> {
    config: &'a ClientConfig,
    args: &'a BenchArgs,
    workload: &'a RefCell<W>,
    latency_us: RefCell<Histogram<u64>>,
    warm_until: Instant,
    stop_at: Instant,
}

/// Run `run` (from 0): warm-up, then `args.duration` seconds measured.
pub async fn measure<W: BenchWorkload>(
    config: &ClientConfig,
    args: &BenchArgs,
    workload: &RefCell<W>,
    run: u32,
) -> anyhow::Result<Run> {
    let warm_until = Instant::now() + Duration::from_secs_f64(args.warmup);
    let shared = Shared {
        config,
        args,
        workload,
        latency_us: RefCell::new(Histogram::new_with_bounds(1, LATENCY_US_MAX, 3)?),
        warm_until,
        stop_at: warm_until + Duration::from_secs_f64(args.duration),
    };
    let bar = progress(args, run);
    let ticker = async {
        while Instant::now() < shared.stop_at {
            tokio::time::sleep(Duration::from_millis(PROGRESS_MS)).await;
            bar.set_position(bar.elapsed().as_millis() as u64);
        }
    };
    let load = async {
        match args.rate {
            Some(rate) => Ok(vec![open_loop(&shared, run, rate).await]),
            None => closed_loop(&shared, run).await,
        }
    };
    let (tallies, ()) = futures::join!(load, ticker);
    let tallies = tallies?;
    bar.finish_and_clear();
    let first = tallies.iter().filter_map(|t| t.first_done).min();
    let last = tallies.iter().filter_map(|t| t.last_done).max();
    let seconds = match (first, last) {
        (Some(first), Some(last)) if last > first => (last - first).as_secs_f64(),
        _ => 0.0,
    };
    let commands = tallies.iter().map(|t| t.commands).sum();
    Ok(Run {
        run: run + 1,
        batch: args.batch,
        inflight: args.inflight,
        offered_requests_per_s: args.rate,
        commands,
        seconds,
        commands_per_s: if seconds > 0.0 {
            commands as f64 / seconds
        } else {
            0.0
        },
        latency_ms: LatencyMs::from_us(&shared.latency_us.borrow()),
        refused: tallies.iter().map(|t| t.refused).sum(),
        errors: tallies.iter().map(|t| t.errors).sum(),
        unknown: tallies.iter().map(|t| t.unknown).sum(),
    })
}

/// The progress bar of a run (drawn only on a terminal), in milliseconds.
fn progress(args: &BenchArgs, run: u32) -> ProgressBar {
    let total_ms = ((args.warmup + args.duration) * 1000.0) as u64;
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

/// `--inflight` load clients, each with a session of its own.
async fn closed_loop<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
) -> anyhow::Result<Vec<Tally>> {
    let sessions: Vec<Client> = (0..shared.args.inflight)
        .map(|_| new_client(shared.config))
        .collect::<anyhow::Result<_>>()?;
    let clients = (0..shared.args.inflight)
        .zip(sessions)
        .map(|(client, session)| load_client(shared, run, client, session));
    Ok(futures::future::join_all(clients).await)
}

/// The open loop (`--rate`): requests due at fixed times from the warm-up's start, drawn as
/// load client 0's; those due after the warm-up are measured, latency from their due time.
async fn open_loop<W: BenchWorkload>(shared: &Shared<'_, W>, run: u32, rate: f64) -> Tally {
    let rng = RefCell::new(Rng::new(client_seed(shared.args.seed, run, 0)));
    let tally = RefCell::new(Tally::default());
    let batch = shared.args.batch;
    let send = |mut session: Client, due: tokio::time::Instant| {
        let commands = shared
            .workload
            .borrow_mut()
            .next_request(0, &mut rng.borrow_mut(), batch);
        async move {
            let answer = session.submit::<W::H>(&commands).await;
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
    tally.into_inner()
}

/// One load client: a session of its own, one request in flight, until the run ends.
async fn load_client<W: BenchWorkload>(
    shared: &Shared<'_, W>,
    run: u32,
    client: u32,
    mut session: Client,
) -> Tally {
    let mut rng = Rng::new(client_seed(shared.args.seed, run, client));
    let batch = shared.args.batch;
    let mut tally = Tally::default();
    while Instant::now() < shared.stop_at {
        let commands = shared
            .workload
            .borrow_mut()
            .next_request(client, &mut rng, batch);
        let count = commands.len() as u64;
        assert!(
            (1..=u64::from(BENCH_BATCH_MAX)).contains(&count),
            "the workload's request has {count} commands"
        );
        let sent = Instant::now();
        let answer = session.submit::<W::H>(&commands).await;
        let done = Instant::now();
        if done >= shared.warm_until {
            tally.record(shared, count, answer, done - sent);
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
        answer: Result<Vec<crate::handler::OutcomeOf<W::H>>, ClientError>,
        latency: Duration,
    ) {
        match answer {
            Ok(outcomes) => {
                count_outcomes(self, &outcomes);
                let latency_us = latency.as_micros() as u64;
                shared.latency_us.borrow_mut().saturating_record(latency_us);
            }
            Err(ClientError::GaveUp { .. }) => self.unknown += count,
            Err(_) => self.errors += count,
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
