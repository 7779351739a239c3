//! `bench`: a benchmark of a running cluster with the handler author's workload
//! ([`BenchWorkload`]): its prefill once, then timed runs of its requests from `--inflight`
//! client sessions at once, then its check and a check that every replica holds the same
//! state hash. `local` runs the same against three nodes it starts in this process. Tables
//! for people (the runs with the mode and the CPU per command, where an entry's time went, a
//! summary per mode), `--json` for programs. The timed runs are the one load client of the
//! project ([`measure`]): the Bank's benchmark (`runner local`, `runner bench`) runs it too,
//! with the same option names and measures, and the same stage table ([`cost`]).

pub mod cost;
mod load;
pub mod local;
pub mod open_loop;
mod report;

pub use load::{Callers, LATENCY_US_MAX, Load, Measured, measure};
pub use report::{
    BenchFailed, LatencyMs, Summary, SummaryRow, print_summary as print_run_summary, run_load,
    summarize as summarize_runs,
};

use super::mode::ModeChoice;
use super::{Exit, coded, mode_name, runtime};
use crate::apply::Mode;
use crate::client::{Client, ClientConfig, OperatorConfig, node_status, set_node_mode};
use crate::handler::{Handler, Outcome, OutcomeOf};
use crate::ids::{ClientId, RequestNumber};
use crate::node::ClusterFile;
use crate::rng::Rng;
use anyhow::{Context, bail};
use clap::Args;
use cost::StageAverages;
use report::{Around, BenchReport, CPU_OF_CLIENT, CheckFailed, Convergence, Found, Prefill, Run};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Commands per request at most (the engine's limit on a request).
pub const BENCH_BATCH_MAX: u32 = 1024;
/// Requests in flight at most (each is a client session and a connection).
pub const BENCH_INFLIGHT_MAX: u32 = 1024;
/// Callers (`--callers`) and shared clients (`--connections`) at most.
pub const BENCH_CALLERS_MAX: u32 = 65_536;
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
    /// What [`BenchWorkload::check`] finds wrong (`std::convert::Infallible` for a workload
    /// that checks nothing).
    type Error: std::error::Error + Send + Sync + 'static;

    /// Requests sent once, in order, before anything is timed (accounts opened, a book
    /// seeded); none by default. A business refusal of one is counted, not fatal (a rerun
    /// against the same cluster may find its records there already).
    fn prefill(&mut self) -> Vec<Vec<<Self::H as Handler>::Command>> {
        Vec::new()
    }

    /// The `commands` commands (1 to [`BENCH_BATCH_MAX`]) of load client `client`'s next
    /// request, drawn from that client's own generator (seeded from `--seed`, the run and the
    /// client, so a seed gives every client the same stream again). `client` is below
    /// `--inflight`, or below `--callers` (up to [`BENCH_CALLERS_MAX`]) for a caller's one
    /// command.
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
    fn check(&self, outcomes: &[OutcomeOf<Self::H>]) -> Result<(), Self::Error> {
        let _ = outcomes;
        Ok(())
    }
}

/// The timed runs' options, the same for `bench` and `local` (named as `runner bench`'s).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
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
    /// Runs (of each mode, when `local` runs both).
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
    /// Many callers of one command each (a web service's request handlers) instead of load
    /// clients of --batch commands: N concurrent callers sharing --connections clients, each
    /// client forming requests of up to --batch commands with up to --inflight in flight.
    #[arg(long, value_name = "N", conflicts_with_all = ["rate", "reads_in_log"], value_parser = clap::value_parser!(u32).range(1..=i64::from(BENCH_CALLERS_MAX)))]
    pub callers: Option<u32>,
    /// With --callers: the shared clients the callers use (think: application processes).
    #[arg(long, value_name = "K", default_value_t = 1, requires = "callers",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(BENCH_CALLERS_MAX)))]
    pub connections: u32,
}

/// Options of `bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// The cluster file, or a client file (`client-file` writes one; --mode needs the
    /// cluster file).
    #[arg(long, env = crate::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// Sets every node's mode before the runs, with the operator credential of the cluster
    /// file (default: leave each node's as it is).
    #[arg(long, value_enum)]
    pub mode: Option<ModeChoice>,
    /// The runs.
    #[command(flatten)]
    pub run: RunArgs,
    /// The tables, or one JSON document.
    #[command(flatten)]
    pub output: super::OutputArgs,
}

/// Runs the benchmark with `workload` against the cluster of `args.cluster`: prefill, runs,
/// the workload's check, convergence; prints the tables (or JSON) and fails when a command
/// failed or went unanswered, a run completed nothing, the check failed or the replicas
/// differ ([`BenchFailed`]: exit 1).
pub fn bench<W: BenchWorkload>(args: BenchArgs, workload: W) -> anyhow::Result<()> {
    args.run.check()?;
    let mut config = crate::cli::read_client_file(&args.cluster)?.client_config()?;
    config.give_up_after = Some(Duration::from_secs(BENCH_GIVE_UP_S));
    let modes = match args.mode {
        None => ModePlan::Leave,
        Some(mode) => ModePlan::Cycle(mode_operator(&args.cluster)?, vec![mode.into()]),
    };
    let found = runtime()?.block_on(benchmark(&config, &modes, &args.run, workload))?;
    let report = BenchReport::new(args.run.seed, CPU_OF_CLIENT, found);
    args.output.emit(&report.to_json(), || report.print())?;
    Ok(report.verdict()?)
}

/// The operator credential `bench --mode` needs, from the cluster file at `path` (or an
/// operator file); a client file, which `bench` takes otherwise, has none.
fn mode_operator(path: &Path) -> anyhow::Result<OperatorConfig> {
    if ClusterFile::parse(path).is_err() {
        let refusal = anyhow::anyhow!(
            "--mode sets every node's mode, which takes the operator credential: give --cluster \
             the cluster file (or the operator file `client-file --operator` writes), not the \
             client file {}",
            path.display()
        );
        return Err(coded(Exit::Usage, refusal));
    }
    Ok(crate::cli::read_cluster_file(path)?.operator_config()?)
}

/// What a benchmark does with the nodes' mode before each run.
pub(crate) enum ModePlan {
    /// Leaves each node's mode as it is.
    Leave,
    /// Sets the next of these modes on every node before each run, as the operator, cycling
    /// through them: each round of runs has one run of each, so alternated modes share the
    /// cluster's conditions of the moment.
    Cycle(OperatorConfig, Vec<Mode>),
}

impl ModePlan {
    /// What to set before each run of a round: one entry per run, `None` to set nothing.
    fn round(&self) -> Vec<Option<(&OperatorConfig, Mode)>> {
        match self {
            ModePlan::Leave => vec![None],
            ModePlan::Cycle(operator, modes) => {
                modes.iter().map(|&mode| Some((operator, mode))).collect()
            }
        }
    }
}

/// Sets `mode` on every node, as the operator `operator`.
async fn set_mode(operator: &OperatorConfig, mode: Mode) -> anyhow::Result<()> {
    let timeout = Duration::from_millis(super::mode::MODE_TIMEOUT_MS);
    for address in &operator.nodes {
        set_node_mode(operator, address, mode, timeout)
            .await
            .with_context(|| format!("setting {} on {address}", mode_name(mode)))?;
    }
    Ok(())
}

/// The benchmark with `workload`: its prefill, `run.runs` rounds of timed runs (one per mode
/// of `modes` each), its check, and the replicas' convergence.
pub(crate) async fn benchmark<W: BenchWorkload>(
    config: &ClientConfig,
    modes: &ModePlan,
    run: &RunArgs,
    mut workload: W,
) -> anyhow::Result<Found> {
    let prefill = prefill(config, &mut workload).await.context("prefill")?;
    let workload = std::cell::RefCell::new(workload);
    let load = run.load();
    let mut runs = Vec::new();
    for round in 0..run.runs {
        for step in modes.round() {
            if let Some((operator, mode)) = step {
                set_mode(operator, mode).await?;
            }
            // The round seeds the load clients: each mode's run of a round sends the same
            // requests.
            let number = runs.len() as u32 + 1;
            runs.push(timed_run(config, &load, &workload, round, number).await?);
        }
    }
    let mut workload = workload.into_inner();
    let check = final_check(config, &mut workload).await?;
    let convergence = converge(config).await;
    Ok(Found {
        prefill,
        runs,
        check,
        convergence,
    })
}

/// One timed run of `load` (its load clients seeded by `round`), numbered `number`: the
/// mode the nodes reported before it, the CPU this process used and the nodes' stage
/// averages around it.
async fn timed_run<W: BenchWorkload>(
    config: &ClientConfig,
    load: &Load,
    workload: &std::cell::RefCell<W>,
    round: u32,
    number: u32,
) -> anyhow::Result<Run> {
    let before = cost::node_statuses(config).await;
    let mode = cost::reported_mode(&before)
        .map_or("-", mode_name)
        .to_string();
    let cpu_before = cost::process_cpu_seconds();
    let measured = load::measure(config, load, workload, round).await?;
    let cpu_s = cost::process_cpu_seconds() - cpu_before;
    let after = cost::node_stages(config).await;
    let stages = StageAverages::between(&cost::stages_of(&before), &after);
    let around = Around {
        mode,
        cpu_s,
        stages,
    };
    Ok(Run::new(load, number, &measured, around))
}

impl RunArgs {
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
            callers: self.callers.map(|callers| load::Callers {
                callers,
                clients: self.connections,
            }),
        }
    }

    /// Refuses options no run could use (a bad command line: exit 3).
    fn check(&self) -> anyhow::Result<()> {
        self.problem().map_or(Ok(()), |problem| {
            Err(coded(Exit::Usage, anyhow::anyhow!(problem)))
        })
    }

    /// What is wrong with the options, if anything.
    fn problem(&self) -> Option<String> {
        if !(self.duration.is_finite() && self.duration > 0.0) {
            return Some(format!(
                "--duration must be above 0 seconds, not {}",
                self.duration
            ));
        }
        if !(self.warmup.is_finite() && self.warmup >= 0.0) {
            return Some(format!(
                "--warmup must be 0 seconds or more, not {}",
                self.warmup
            ));
        }
        if self.runs == 0 {
            return Some("--runs must be at least 1".into());
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Some(format!(
                "--rate must be above 0 requests per second, not {rate}"
            ));
        }
        if self.rate.is_some() && self.commands.is_some() {
            return Some("--rate runs for --duration; it does not take --commands".into());
        }
        None
    }
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
) -> anyhow::Result<Result<(), CheckFailed>> {
    let request = workload.final_request();
    if request.is_empty() {
        return Ok(Ok(()));
    }
    let outcomes = new_client(config)?
        .submit::<W::H>(&request)
        .await
        .context("the final check's request")?;
    Ok(workload.check(&outcomes).map_err(CheckFailed::new))
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
