//! The single-node job: the Bank on one node with its WAL, prefilled, then timed transfers.

use crate::product::report::{self, LatencyMs, Run};
use anyhow::{Context, bail};
use bank::workload::{PREFILL_BALANCE, Transfers, open_command};
use bank::{Bank, BankCommand, BankOutput};
use clap::Args;
use engine::internals::entry::{Request, encode_commands};
use engine::internals::single::SingleNode;
use engine::state::STATE_BYTES_DEFAULT;
use engine::{ClientId, Outcome, ReplyStatus, RequestNumber, decode_outcomes};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Commands per entry during prefill.
const PREFILL_BATCH_COMMANDS: u64 = 1024;
/// Latency histogram range: 1 us to 60 s, 3 significant digits.
const LATENCY_US_MAX: u64 = 60_000_000;

/// Options of `runner local`.
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// Accounts to prefill before timing.
    #[arg(long, default_value_t = 2_000_000)]
    pub accounts: u64,
    /// Commands per request.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub batch: u32,
    /// Seconds to measure (ignored when --commands is given).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Commands to measure instead of a duration.
    #[arg(long)]
    pub commands: Option<u64>,
    /// Seed of the transfer stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Base directory for data (a fresh directory is made under it and removed after).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write the runs as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// State capacity per node, in bytes.
    #[arg(long, default_value_t = STATE_BYTES_DEFAULT)]
    pub capacity_bytes: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({per_sec}, {eta})")
        .expect("valid template")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

/// One client that numbers its requests.
struct Client {
    id: ClientId,
    next: u64,
}

impl Client {
    /// Sends `commands` as one request; returns the decoded outcomes.
    fn submit(
        &mut self,
        node: &mut SingleNode<Bank>,
        commands: &[BankCommand],
    ) -> anyhow::Result<Vec<Outcome<BankOutput, bank::BankError>>> {
        let bytes = encode_commands(commands);
        let request = Request {
            client: self.id,
            number: RequestNumber(self.next),
            command_count: commands.len() as u32,
            commands: &bytes,
        };
        self.next += 1;
        let applied = node.submit(now_ms(), &[request])?;
        let reply = applied.replies.into_iter().next().context("no reply")?;
        match reply.status {
            ReplyStatus::Results(results) => {
                Ok(decode_outcomes::<Bank>(&results, reply.command_count)?)
            }
            ReplyStatus::Stale => bail!("request {} reported stale", request.number),
            ReplyStatus::Expired => bail!("request {}: the session expired", request.number),
            ReplyStatus::Reused => bail!("request {}: its number was reused", request.number),
            ReplyStatus::NotYet => bail!("request {}: an earlier one had not run", request.number),
        }
    }
}

/// Runs the single-node job.
pub fn run(args: LocalArgs) -> anyhow::Result<()> {
    let dir = crate::run_dir(args.dir.clone())?;
    let (mut node, _) = SingleNode::open(dir.path(), Bank, args.capacity_bytes)?;
    let mut client = Client {
        id: ClientId(1),
        next: 1,
    };
    let prefill_s = prefill(&mut node, &mut client, args.accounts)?;
    let run = measure(&mut node, &mut client, &args)?;
    let audit = audit(&mut node, &mut client)?;
    engine::outln!(
        "prefilled {} accounts in {:.2} s; data in {} (removed at exit)",
        args.accounts,
        prefill_s,
        dir.path().display()
    );
    report::print_table(std::slice::from_ref(&run));
    let expected_total = u128::from(args.accounts) * u128::from(PREFILL_BALANCE);
    engine::outln!(
        "audit: {} accounts, total {} (expected {}): {}; state hash {}",
        audit.0,
        audit.1,
        expected_total,
        if audit.1 == expected_total {
            "ok"
        } else {
            "MISMATCH"
        },
        node.machine().state_hash()
    );
    if let Some(path) = &args.json {
        report::write_json(path, std::slice::from_ref(&run))?;
    }
    if audit.1 != expected_total || audit.0 != args.accounts {
        bail!("audit mismatch");
    }
    Ok(())
}

fn prefill(node: &mut SingleNode<Bank>, client: &mut Client, accounts: u64) -> anyhow::Result<f64> {
    let started = Instant::now();
    let bar = bar(accounts, "prefill");
    let mut next = 0;
    while next < accounts {
        let end = (next + PREFILL_BATCH_COMMANDS).min(accounts);
        let commands: Vec<BankCommand> = (next..end).map(open_command).collect();
        let outcomes = client.submit(node, &commands)?;
        if let Some(bad) = outcomes.iter().find(|o| !matches!(o, Outcome::Done(_))) {
            bail!("prefill open failed: {bad:?}");
        }
        bar.inc(end - next);
        next = end;
    }
    bar.finish_and_clear();
    Ok(started.elapsed().as_secs_f64())
}

fn measure(
    node: &mut SingleNode<Bank>,
    client: &mut Client,
    args: &LocalArgs,
) -> anyhow::Result<Run> {
    let mut transfers = Transfers::new(args.seed, args.accounts);
    let mut latency = Histogram::<u64>::new_with_bounds(1, LATENCY_US_MAX, 3)?;
    let target = args.commands.unwrap_or(u64::MAX);
    let duration = Duration::from_secs_f64(args.duration);
    let bar = bar(
        args.commands.unwrap_or((args.duration * 1000.0) as u64),
        "transfers",
    );
    let started = Instant::now();
    let cpu_before = engine::cli::process_cpu_seconds();
    let mut completed = 0u64;
    let mut failed = 0u64;
    let mut batch = Vec::with_capacity(args.batch as usize);
    while completed < target && (args.commands.is_some() || started.elapsed() < duration) {
        batch.clear();
        batch.extend((0..args.batch).map(|_| transfers.next_command()));
        let sent = Instant::now();
        let outcomes = client.submit(node, &batch)?;
        latency.saturating_record(sent.elapsed().as_micros() as u64);
        failed += outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Invalid))
            .count() as u64;
        completed += outcomes.len() as u64;
        match args.commands {
            Some(_) => bar.set_position(completed),
            None => bar.set_position(started.elapsed().as_millis() as u64),
        }
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    Ok(Run {
        mode: "single-node".into(),
        batch: args.batch,
        inflight: 1,
        accounts: args.accounts,
        commands: completed,
        seconds,
        commands_per_s: completed as f64 / seconds,
        cpu_s_per_million: (engine::cli::process_cpu_seconds() - cpu_before)
            / (completed.max(1) as f64 / 1e6),
        reads_percent: 0,
        offered_requests_per_s: None,
        callers: None,
        connections: None,
        send_late_ms: None,
        latency_ms: LatencyMs::from_us(&latency),
        failed,
        unknown: 0,
        replicas_converged: true,
        stages: Default::default(),
        state_hashes: vec![node.machine().state_hash().to_hex()],
    })
}

fn audit(node: &mut SingleNode<Bank>, client: &mut Client) -> anyhow::Result<(u64, u128)> {
    match client.submit(node, &[BankCommand::Audit])?.pop() {
        Some(Outcome::Done(BankOutput::Audit { accounts, total })) => Ok((accounts, total)),
        other => bail!("audit returned {other:?}"),
    }
}
