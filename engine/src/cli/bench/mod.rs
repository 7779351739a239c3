//! `bench`: a benchmark of a running cluster with the handler author's workload
//! ([`BenchWorkload`]): its prefill once, then timed runs of its requests from `--inflight`
//! client sessions at once, then its check and a check that every replica holds the same
//! state hash. A table for people, `--json` for programs. The timed runs are the one load
//! client of the project ([`measure`]): the Bank's benchmark (`runner local`, `runner bench`)
//! runs it too, with the same option names and measures.

mod load;
pub mod open_loop;
mod report;

pub use load::{LATENCY_US_MAX, Load, Measured, measure};
pub use report::LatencyMs;

use super::runtime;
use crate::client::{Client, ClientConfig, node_status};
use crate::handler::{Handler, Outcome, OutcomeOf};
use crate::ids::{ClientId, RequestNumber};
use crate::rng::Rng;
use anyhow::{Context, bail};
use clap::Args;
use report::{BenchReport, Convergence, Prefill, Run};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Commands per request at most (the engine's limit on a request).
pub const BENCH_BATCH_MAX: u32 = 1024;
/// Requests in flight at most (each is a client session and a connection).
pub const BENCH_INFLIGHT_MAX: u32 = 1024;
/// Seconds a benchmark request may go unanswered before its outcome counts as unknown.
const BENCH_GIVE_UP_S: u64 = 30;
/// Seconds to wait for every replica to apply the last committed entry.
const CONVERGENCE_WAIT_S: u64 = 30;

/// What a handler author implements to have their handler benchmarked by `bench`: the
/// requests that prepare the state, the requests of the load, and a check at the end. One
/// value serves every load client (they run on one thread, one request at a time each).
pub trait BenchWorkload {
    /// The handler the cluster runs.
    type H: Handler;

    /// Requests sent once, in order, before anything is timed (accounts opened, a book
    /// seeded); none by default. A business refusal of one is counted, not fatal (a rerun
    /// against the same cluster may find its records there already).
    fn prefill(&mut self) -> Vec<Vec<<Self::H as Handler>::Command>> {
        Vec::new()
    }

    /// The `commands` commands (1 to [`BENCH_BATCH_MAX`]) of load client `client`'s next
    /// request, drawn from that client's own generator (seeded from `--seed`, the run and the
    /// client, so a seed gives every client the same stream again).
    fn next_request(
        &mut self,
        client: u32,
        rng: &mut Rng,
        commands: u32,
    ) -> Vec<<Self::H as Handler>::Command>;

    /// One request sent after the last run, whose outcomes [`BenchWorkload::check`] judges
    /// (reads of totals, say); none by default.
    fn final_request(&mut self) -> Vec<<Self::H as Handler>::Command> {
        Vec::new()
    }

    /// Judges the outcomes of [`BenchWorkload::final_request`]: an error fails the
    /// benchmark. Passes by default.
    fn check(&self, outcomes: &[OutcomeOf<Self::H>]) -> Result<(), String> {
        let _ = outcomes;
        Ok(())
    }
}

/// Options of `bench` (named as `runner bench`'s).
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The cluster file, or a client file (`client-file` writes one).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// Commands per request.
    #[arg(long, default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(BENCH_BATCH_MAX)))]
    pub batch: u32,
    /// Requests in flight (each from its own client session).
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(BENCH_INFLIGHT_MAX)))]
    pub inflight: u32,
    /// Seconds measured per run (ignored when --commands is given).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Commands measured per run, instead of a duration.
    #[arg(long)]
    pub commands: Option<u64>,
    /// Runs.
    #[arg(long, default_value_t = 2)]
    pub runs: u32,
    /// Seconds of warm-up before each run's measurement.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Seed of the load clients' generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Open loop: requests per second, sent at fixed times whether or not earlier ones were
    /// answered, with latency counted from each request's due time (--inflight is then
    /// ignored: as many sessions as the queue needs, up to 1,024).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Sends requests of read-only commands through the log as any request, instead of as
    /// reads answered off the log, for comparison.
    #[arg(long)]
    pub reads_in_log: bool,
    /// The table, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Runs the benchmark with `workload` against the cluster of `args.cluster`: prefill, runs,
/// the workload's check, convergence; prints the table (or JSON) and fails when a command
/// failed or went unanswered, a run completed nothing, the check failed or the replicas
/// differ.
pub fn bench<W: BenchWorkload>(args: BenchArgs, mut workload: W) -> anyhow::Result<()> {
    check_args(&args)?;
    let mut config = crate::cli::read_client_file(&args.cluster)?.client_config()?;
    config.give_up_after = Some(Duration::from_secs(BENCH_GIVE_UP_S));
    let report = runtime()?.block_on(async {
        let prefill = prefill(&config, &mut workload).await.context("prefill")?;
        let mut runs = Vec::new();
        let workload = std::cell::RefCell::new(workload);
        let load = args.load();
        for run in 0..args.runs {
            let measured = load::measure(&config, &load, &workload, run).await?;
            runs.push(Run::new(&load, run, &measured));
        }
        let mut workload = workload.into_inner();
        let check = final_check(&config, &mut workload).await?;
        let convergence = converge(&config).await;
        anyhow::Ok(BenchReport::new(&args, prefill, runs, check, convergence))
    })?;
    args.output.emit(&report.to_json(), || report.print())?;
    report.verdict()
}

impl BenchArgs {
    /// The shape of each timed run.
    fn load(&self) -> Load {
        Load {
            batch: self.batch,
            inflight: self.inflight,
            warmup_s: self.warmup,
            duration_s: self.duration,
            commands: self.commands,
            seed: self.seed,
            rate: self.rate,
            reads_in_log: self.reads_in_log,
        }
    }
}

/// Refuses options no run could use.
fn check_args(args: &BenchArgs) -> anyhow::Result<()> {
    if !(args.duration.is_finite() && args.duration > 0.0) {
        bail!("--duration must be above 0 seconds, not {}", args.duration);
    }
    if !(args.warmup.is_finite() && args.warmup >= 0.0) {
        bail!("--warmup must be 0 seconds or more, not {}", args.warmup);
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if let Some(rate) = args.rate
        && !(rate.is_finite() && rate > 0.0)
    {
        bail!("--rate must be above 0 requests per second, not {rate}");
    }
    if args.rate.is_some() && args.commands.is_some() {
        bail!("--rate runs for --duration; it does not take --commands");
    }
    Ok(())
}

/// A new client session with a random id (sessions are per client id, so every run starts
/// fresh; the first request opens the session, with no registration round trip before the
/// timed run). Every client the load uses comes from here.
fn new_client(config: &ClientConfig) -> anyhow::Result<Client> {
    let id = ClientId::random().context("drawing a client id")?;
    Ok(Client::new(config.clone(), id, RequestNumber(1)))
}

/// Sends the workload's prefill requests in order from one client; counts their commands
/// and refusals. An invalid command (one the handler could not decode) is fatal.
async fn prefill<W: BenchWorkload>(
    config: &ClientConfig,
    workload: &mut W,
) -> anyhow::Result<Prefill> {
    let requests = workload.prefill();
    let started = Instant::now();
    let mut client = new_client(config)?;
    let mut counted = Prefill::default();
    for request in requests {
        for outcome in client.submit::<W::H>(&request).await? {
            match outcome {
                Outcome::Done(_) => {}
                Outcome::Failed(_) => counted.refused += 1,
                Outcome::Invalid => bail!("a prefill command was invalid"),
            }
        }
        counted.requests += 1;
        counted.commands += request.len() as u64;
    }
    counted.seconds = started.elapsed().as_secs_f64();
    Ok(counted)
}

/// Sends the workload's final request (if any) and has the workload judge its outcomes.
async fn final_check<W: BenchWorkload>(
    config: &ClientConfig,
    workload: &mut W,
) -> anyhow::Result<Result<(), String>> {
    let request = workload.final_request();
    if request.is_empty() {
        return Ok(Ok(()));
    }
    let outcomes = new_client(config)?
        .submit::<W::H>(&request)
        .await
        .context("the final check's request")?;
    Ok(workload.check(&outcomes))
}

/// Waits until every node answers with the same applied entry and state hash, having
/// applied all it knows committed (or [`CONVERGENCE_WAIT_S`] passes).
async fn converge(config: &ClientConfig) -> Convergence {
    let started = Instant::now();
    loop {
        let mut hashes = Vec::new();
        let mut same = true;
        for address in &config.nodes {
            let status = node_status(config, address, Duration::from_secs(1)).await;
            let Ok(status) = status else {
                same = false;
                continue;
            };
            same &= status.applied_index >= status.commit_index;
            hashes.push((status.applied_index, status.state_hash));
        }
        same &= hashes.len() == config.nodes.len() && hashes.windows(2).all(|w| w[0] == w[1]);
        if same || started.elapsed() > Duration::from_secs(CONVERGENCE_WAIT_S) {
            return Convergence {
                converged: same,
                state_hashes: hashes.iter().map(|(_, hash)| hash.to_hex()).collect(),
            };
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
