//! The Bank's benchmark: prefill accounts (or reuse them), then timed runs of random transfers
//! measured by the engine's one load client (`engine::cli::measure_load`, the one `bench`
//! uses for any handler), then an audit and a check that every replica has the same state
//! hash. What is the Bank's own stays here: the prefill, the modes, the audit and the table;
//! the CPU per command and the stage timings are the engine's (`engine::cli::StageAverages`,
//! `process_cpu_seconds`), which its `bench` and `local` report for any handler.

use crate::product::report::{self, LatencyMs, Run, StageAverages};
use anyhow::{Context, bail};
use bank::workload::{PREFILL_BALANCE, TransferMix, account_id, open_command};
use bank::{Bank, BankCommand, BankError, BankOutput};
use clap::Args;
use engine::cli::{
    BenchLoad, BenchMeasured, BenchWorkload, LATENCY_US_MAX, measure_load, node_stages,
    process_cpu_seconds,
};
use engine::client::{
    Client, ClientConfig, ClientError, OperatorConfig, node_status, set_node_mode,
};
use engine::rng::Rng;
use engine::{ClientId, Mode, Outcome, RequestNumber};
use futures::future::join_all;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use net::message::NodeStatus;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Opens per prefill request.
const PREFILL_REQUEST_COMMANDS: u64 = 1024;
/// Prefill requests in flight.
const PREFILL_CLIENTS: usize = 4;
/// A benchmark request that has no answer after this long counts as unknown.
const BENCH_GIVE_UP_S: u64 = 30;
/// How long to wait for every replica to apply the last entry.
const CONVERGENCE_WAIT_S: u64 = 30;

/// Benchmark options, shared by `runner local` and `runner bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchOptions {
    /// Accounts to prefill before timing (reused when the cluster already holds them).
    #[arg(long, default_value_t = 2_000_000)]
    pub accounts: u64,
    /// Commands per request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub batch: u32,
    /// Requests in flight (each from its own client session).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
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
    /// Seed of the transfer streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Percent of the requests that are single-account reads only (each sent as a read,
    /// answered off the log) instead of transfers.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub reads: u64,
    /// Sends the read requests of --reads through the log as any request (how reads went
    /// before they were answered off the log), for comparison.
    #[arg(long)]
    pub reads_in_log: bool,
    /// Many callers of one command each (a web service's request handlers) instead of load
    /// clients of --batch commands: N concurrent callers sharing --connections clients, each
    /// client forming requests of up to --batch commands with up to --inflight in flight.
    #[arg(long, value_name = "N", conflicts_with_all = ["rate", "reads_in_log"], value_parser = clap::value_parser!(u32).range(1..=i64::from(engine::cli::BENCH_CALLERS_MAX)))]
    pub callers: Option<u32>,
    /// With --callers: the shared clients the callers use (think: application processes).
    #[arg(long, value_name = "K", default_value_t = 1, requires = "callers",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(engine::cli::BENCH_CALLERS_MAX)))]
    pub connections: u32,
    /// Open loop: requests per second, sent at fixed times whether or not earlier ones were
    /// answered, with latency counted from each request's due time (--inflight is then
    /// ignored: as many sessions as the queue needs, up to 1,024).
    #[arg(long, value_parser = positive_rate)]
    pub rate: Option<f64>,
    /// Open-loop prefill: requests of 1,024 opens per second, sent at fixed times whether or
    /// not earlier ones were answered, with latency from each request's due time (without it
    /// the prefill sends as fast as the cluster answers). A table's growth shows as the
    /// prefill's slowest request only when the prefill does not queue on its own.
    #[arg(long, value_parser = positive_rate)]
    pub prefill_rate: Option<f64>,
    /// Write the runs as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Why a text is not a `--rate`.
#[derive(Debug, thiserror::Error)]
enum RateError {
    /// Not a number, or not a finite one above zero.
    #[error("{text:?} is not a positive number of requests per second")]
    NotPositive {
        /// The text given.
        text: String,
    },
}

/// `--rate`: a finite number of requests per second above zero.
fn positive_rate(text: &str) -> Result<f64, RateError> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(RateError::NotPositive {
            text: text.to_owned(),
        }),
    }
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({per_sec}, {eta})")
        .expect("valid template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

/// A client with a random id, so that a rerun starts fresh sessions (the first request opens
/// its session: no registration round trip before the timed run).
fn client(config: &ClientConfig) -> Client {
    let mut config = config.clone();
    config.give_up_after = Some(Duration::from_secs(BENCH_GIVE_UP_S));
    let id = ClientId::random().expect("the operating system gives random bytes");
    Client::new(config, id, RequestNumber(1))
}

/// What a prefill took: seconds, and each request's latency (the slowest shows a table's
/// growth: it once rehashed everything at once).
pub struct PrefillTime {
    /// Seconds from the first request to the last answer.
    pub seconds: f64,
    /// Every prefill request's latency, in microseconds.
    pub latency_us: Histogram<u64>,
}

/// Prefills `accounts` accounts unless the cluster already holds them: closed loop, or open
/// loop at `rate` requests per second.
pub async fn prefill(
    config: &ClientConfig,
    accounts: u64,
    rate: Option<f64>,
) -> anyhow::Result<Option<PrefillTime>> {
    let mut probe = client(config);
    let ends = [
        BankCommand::Get { id: account_id(0) },
        BankCommand::Get {
            id: account_id(accounts - 1),
        },
    ];
    let present = probe.submit::<Bank>(&ends).await?;
    if present.iter().all(|o| matches!(o, Outcome::Done(_))) {
        return Ok(None);
    }
    let started = Instant::now();
    let bar = bar(accounts, "prefill");
    let latency_us = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    let latency_us = match rate {
        None => prefill_closed(config, accounts, &bar, latency_us).await?,
        Some(rate) => prefill_open(config, accounts, rate, &bar, latency_us).await?,
    };
    bar.finish_and_clear();
    Ok(Some(PrefillTime {
        seconds: started.elapsed().as_secs_f64(),
        latency_us,
    }))
}

/// Fails on an open's outcome other than done or "exists" (a prefill run again).
fn check_opens(outcomes: Vec<Outcome<BankOutput, BankError>>) -> anyhow::Result<()> {
    for outcome in outcomes {
        match outcome {
            Outcome::Done(_) | Outcome::Failed(BankError::AccountExists(_)) => {}
            other @ (Outcome::Failed(_) | Outcome::Invalid) => {
                bail!("prefill open failed: {other:?}")
            }
        }
    }
    Ok(())
}

/// The closed-loop prefill: [`PREFILL_CLIENTS`] requests in flight.
async fn prefill_closed(
    config: &ClientConfig,
    accounts: u64,
    bar: &ProgressBar,
    latency_us: Histogram<u64>,
) -> anyhow::Result<Histogram<u64>> {
    let next = Cell::new(0u64);
    let latency_us = std::cell::RefCell::new(latency_us);
    let workers = (0..PREFILL_CLIENTS).map(|_| {
        let (next, bar, latency_us) = (&next, &bar, &latency_us);
        async move {
            let mut client = client(config);
            loop {
                let start = next.get();
                if start >= accounts {
                    return Ok::<(), anyhow::Error>(());
                }
                let end = (start + PREFILL_REQUEST_COMMANDS).min(accounts);
                next.set(end);
                let opens: Vec<BankCommand> = (start..end).map(open_command).collect();
                let sent = Instant::now();
                let outcomes = client.submit::<Bank>(&opens).await?;
                let took = sent.elapsed().as_micros() as u64;
                latency_us.borrow_mut().saturating_record(took);
                check_opens(outcomes)?;
                bar.inc(end - start);
            }
        }
    });
    for result in join_all(workers).await {
        result?;
    }
    Ok(latency_us.into_inner())
}

/// The open-loop prefill: one request of [`PREFILL_REQUEST_COMMANDS`] opens due every
/// `1 / rate` seconds, latency from its due time.
async fn prefill_open(
    config: &ClientConfig,
    accounts: u64,
    rate: f64,
    bar: &ProgressBar,
    latency_us: Histogram<u64>,
) -> anyhow::Result<Histogram<u64>> {
    let requests = accounts.div_ceil(PREFILL_REQUEST_COMMANDS);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = tokio::time::Instant::now();
    // Exactly `requests` due times fall before the end: the last one half an interval before.
    let last =
        u32::try_from(requests - 1).context("too many prefill requests for one open loop")?;
    let stop_at = start + interval * last + interval / 2;
    let next = Cell::new(0u64);
    let latency_us = std::cell::RefCell::new(latency_us);
    let failure = std::cell::RefCell::new(None::<anyhow::Error>);
    let send = |mut session: Client, due| {
        let first = next.get();
        let end = (first + PREFILL_REQUEST_COMMANDS).min(accounts);
        next.set(end);
        let opens: Vec<BankCommand> = (first..end).map(open_command).collect();
        async move {
            let answer = session.submit::<Bank>(&opens).await;
            (session, due, (answer, end - first))
        }
    };
    let answered = |due: tokio::time::Instant, (answer, opens): (Result<_, ClientError>, u64)| {
        let took = Instant::now().saturating_duration_since(due.into_std());
        latency_us
            .borrow_mut()
            .saturating_record(took.as_micros() as u64);
        bar.inc(opens);
        if let Err(error) = answer.map_err(anyhow::Error::from).and_then(check_opens) {
            failure.borrow_mut().get_or_insert(error);
        }
    };
    engine::cli::open_loop(
        engine::cli::Pacer::Thread,
        rate,
        start,
        stop_at,
        || client(config),
        send,
        answered,
    )
    .await;
    if let Some(error) = failure.into_inner() {
        return Err(error);
    }
    assert_eq!(next.get(), accounts, "every account was sent once");
    Ok(latency_us.into_inner())
}

/// The Bank's transfer mix as the engine's load client draws it: each load client from its
/// own generator.
struct BankLoad(TransferMix);

impl BenchWorkload for BankLoad {
    type H = Bank;
    type Error = std::convert::Infallible;

    fn next_request(&mut self, _client: u32, rng: &mut Rng, commands: u32) -> Vec<BankCommand> {
        let mut request = Vec::with_capacity(commands as usize);
        self.0.request(rng, commands, &mut request);
        request
    }
}

impl BenchOptions {
    /// The shape of each timed run.
    fn load(&self) -> BenchLoad {
        BenchLoad {
            batch: self.batch,
            inflight: self.inflight,
            warmup_s: self.warmup,
            duration_s: self.duration,
            commands: self.commands,
            seed: self.seed,
            rate: self.rate,
            reads_in_log: self.reads_in_log,
            callers: self.callers.map(|callers| engine::cli::BenchCallers {
                callers,
                clients: self.connections,
            }),
        }
    }
}

/// One timed run, measured by the engine's load client; with the CPU this process took and
/// the nodes' stage timings around it.
pub async fn measure(
    config: &ClientConfig,
    options: &BenchOptions,
    run: u32,
    mode: &str,
) -> anyhow::Result<Run> {
    let mut config = config.clone();
    config.give_up_after = Some(Duration::from_secs(BENCH_GIVE_UP_S));
    let stages_before = node_stages(&config).await;
    let mix = TransferMix::new(options.accounts).with_reads(options.reads);
    let workload = RefCell::new(BankLoad(mix));
    let cpu_before = process_cpu_seconds();
    let measured = measure_load(&config, &options.load(), &workload, run).await?;
    let cpu_seconds = process_cpu_seconds() - cpu_before;
    let stages = StageAverages::between(&stages_before, &node_stages(&config).await);
    tally_run((options, mode), &measured, cpu_seconds, stages)
}

/// A run from what the load client measured and the CPU it took.
fn tally_run(
    (options, mode): (&BenchOptions, &str),
    measured: &BenchMeasured,
    cpu_seconds: f64,
    stages: StageAverages,
) -> anyhow::Result<Run> {
    let (commands, seconds) = (measured.commands, measured.seconds);
    if seconds <= 0.0 {
        bail!("no request completed in the measured window");
    }
    Ok(Run {
        mode: mode.to_string(),
        batch: options.batch,
        inflight: options.inflight,
        accounts: options.accounts,
        commands,
        seconds,
        commands_per_s: measured.commands_per_s(),
        cpu_s_per_million: engine::cli::cpu_s_per_million(
            cpu_seconds,
            seconds,
            options.warmup,
            commands,
        ),
        reads_percent: options.reads,
        offered_requests_per_s: options.rate,
        callers: options.callers,
        connections: options.callers.map(|_| options.connections),
        send_late_ms: measured.send_late_us.as_ref().map(LatencyMs::from_us),
        latency_ms: LatencyMs::from_us(&measured.latency_us),
        failed: measured.errors,
        unknown: measured.unknown,
        replicas_converged: false,
        state_hashes: Vec::new(),
        stages,
    })
}

/// Waits until every node reports the same applied entry and state hash.
pub async fn converge(config: &ClientConfig) -> (bool, Vec<NodeStatus>) {
    let started = Instant::now();
    loop {
        let mut statuses = Vec::new();
        for address in &config.nodes {
            if let Ok(status) = node_status(config, address, Duration::from_secs(1)).await {
                statuses.push(status);
            }
        }
        let same = statuses.len() == config.nodes.len()
            && statuses.iter().all(|s| {
                s.applied_index == statuses[0].applied_index
                    && s.state_hash == statuses[0].state_hash
            })
            && statuses.iter().all(|s| s.applied_index >= s.commit_index);
        if same || started.elapsed() > Duration::from_secs(CONVERGENCE_WAIT_S) {
            return (same, statuses);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Counts the accounts and sums the balances, through the log.
pub async fn audit(config: &ClientConfig) -> anyhow::Result<(u64, u128)> {
    let mut client = client(config);
    match client.submit::<Bank>(&[BankCommand::Audit]).await?.pop() {
        Some(Outcome::Done(BankOutput::Audit { accounts, total })) => Ok((accounts, total)),
        other => bail!("audit answered {other:?}"),
    }
}

/// Prefill, runs, audit, convergence; prints the table and writes JSON if asked.
pub async fn benchmark(
    config: &ClientConfig,
    operator: Option<&OperatorConfig>,
    options: &BenchOptions,
    modes: &[Option<Mode>],
) -> anyhow::Result<Vec<Run>> {
    if options.accounts < 2 {
        bail!("--accounts must be at least 2");
    }
    if options.rate.is_some() && options.commands.is_some() {
        bail!("--rate runs for --duration; it does not take --commands");
    }
    let before = prefilled(config, options).await?;
    let mut runs = Vec::new();
    for &mode in modes {
        let label = set_mode(config, operator, mode).await?;
        for run in 0..options.runs {
            runs.push(measure(config, options, run, &label).await?);
        }
    }
    conclude(config, options, runs, before).await
}

/// Prefills the accounts (or finds them there); the count and total the runs must leave.
async fn prefilled(config: &ClientConfig, options: &BenchOptions) -> anyhow::Result<(u64, u128)> {
    let prefill = prefill(config, options.accounts, options.prefill_rate).await;
    match prefill.context("prefill")? {
        Some(time) => {
            let ms = |us: u64| us as f64 / 1e3;
            engine::outln!(
                "prefilled {} accounts in {:.2} s (requests of {PREFILL_REQUEST_COMMANDS}: p99 {:.1} ms, slowest {:.1} ms)",
                options.accounts,
                time.seconds,
                ms(time.latency_us.value_at_quantile(0.99)),
                ms(time.latency_us.max())
            );
            let total = u128::from(options.accounts) * u128::from(PREFILL_BALANCE);
            Ok((options.accounts, total))
        }
        None => {
            let audit = audit(config).await?;
            engine::outln!("reusing the {} accounts the cluster holds", audit.0);
            Ok(audit)
        }
    }
}

/// After the runs: convergence, the tables, the audit against `before`, the JSON; an error
/// when the total changed or the replicas differ.
async fn conclude(
    config: &ClientConfig,
    options: &BenchOptions,
    mut runs: Vec<Run>,
    (before_accounts, before_total): (u64, u128),
) -> anyhow::Result<Vec<Run>> {
    let (converged, statuses) = converge(config).await;
    let hashes: Vec<String> = statuses.iter().map(|s| s.state_hash.to_hex()).collect();
    for run in &mut runs {
        run.replicas_converged = converged;
        run.state_hashes = hashes.clone();
    }
    report::print_table(&runs);
    report::print_stages(&runs);
    report::print_summary(&runs);
    let (accounts, total) = audit(config).await?;
    let audit_ok = accounts == before_accounts && total == before_total;
    engine::outln!(
        "audit: {accounts} accounts, total {total} ({}); replicas {} (state hash {})",
        if audit_ok { "unchanged" } else { "CHANGED" },
        if converged {
            "converged"
        } else {
            "DID NOT CONVERGE"
        },
        statuses
            .first()
            .map(|s| s.state_hash.to_string())
            .unwrap_or_default()
    );
    if let Some(path) = &options.json {
        report::write_json(path, &runs)?;
    }
    if !audit_ok || !converged {
        bail!("the run ended with a changed total or replicas that differ");
    }
    Ok(runs)
}

/// Sets `mode` on every node (when given), as `operator`; returns the mode's name as the
/// nodes report it.
async fn set_mode(
    config: &ClientConfig,
    operator: Option<&OperatorConfig>,
    mode: Option<Mode>,
) -> anyhow::Result<String> {
    let timeout = Duration::from_secs(2);
    if let Some(mode) = mode {
        let Some(operator) = operator else {
            bail!(
                "--mode needs the operator credential: give the cluster file (or an operator \
                 file), not a client file"
            );
        };
        for address in &operator.nodes {
            set_node_mode(operator, address, mode, timeout).await?;
        }
    }
    let status = node_status(config, &config.nodes[0], timeout).await?;
    Ok(mode_name(status.mode).to_string())
}

/// A mode's name in tables and JSON.
pub fn mode_name(mode: Mode) -> &'static str {
    mode.name()
}
