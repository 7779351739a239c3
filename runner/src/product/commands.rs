//! `runner client` (the Bank's commands, typed) and `runner local`.

use crate::product::bench::{self, BenchOptions};
use crate::product::tls::LocalCertificates;
use anyhow::{Context, bail};
use bank::{AccountId, Bank, BankCommand, BankError, BankOutput};
use clap::{Args, Subcommand};
use engine::cli::StorageOptions;
use engine::node::ClusterFile;
use engine::node::local::LocalCluster;
use engine::state::STATE_BYTES_DEFAULT;
use engine::{Mode, Outcome};
use net::tls::Tls;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Options of `runner client`.
#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The cluster file, or a client file (`runner client-file` writes one).
    #[arg(long, env = engine::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// Seconds to keep trying before giving up (the outcome is then unknown: exit 2,
    /// unreachable).
    #[arg(long, value_name = "SECS", value_parser = engine::cli::timeout_seconds,
          default_value_t = engine::cli::CLIENT_GIVE_UP_SECS_DEFAULT)]
    pub timeout: f64,
    /// Exit 0 (success) even when the Bank refused the command (the outcome says so); without
    /// it, a refused command makes it exit 1 (negative).
    #[arg(long)]
    pub allow_refused: bool,
    /// What standard output holds: `json` (the default: one JSON document, the outcome) or
    /// `table` (one line for a person).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = engine::cli::Output::Json)]
    pub output: engine::cli::Output,
    /// Send as this client id (decimal, or hexadecimal after `0x`; up to 128 bits) instead of
    /// a fresh random one: the session goes on where the cluster left it. An id whose
    /// session expired is refused (exit 4, refused).
    #[arg(long, value_name = "ID", value_parser = engine::cli::client_id)]
    pub client_id: Option<engine::ClientId>,
    /// Send the command under this key (an order number, a payment id): the cluster runs it
    /// once for the key, whoever sends it and however often, and answers the same key with
    /// the same command again with its first outcome. The same key with another command, or
    /// one the cluster no longer keeps, runs nothing (exit 4, refused).
    #[arg(long, value_name = "KEY", value_parser = engine::cli::key, conflicts_with = "client_id")]
    pub key: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: ClientCommand,
}

/// One Bank command.
#[derive(Subcommand, Debug, Clone)]
pub enum ClientCommand {
    /// Open an account.
    Open {
        /// The account id (nonzero).
        id: u64,
        /// Opening balance.
        #[arg(long, default_value_t = 0)]
        balance: u64,
        /// Flags stored with the account.
        #[arg(long, default_value_t = 0)]
        flags: u32,
    },
    /// Add to an account.
    Deposit {
        /// The account.
        id: u64,
        /// The amount.
        amount: u64,
    },
    /// Take from an account.
    Withdraw {
        /// The account.
        id: u64,
        /// The amount.
        amount: u64,
    },
    /// Move an amount between two accounts.
    Transfer {
        /// The account debited.
        from: u64,
        /// The account credited.
        to: u64,
        /// The amount.
        amount: u64,
    },
    /// Read an account.
    Get {
        /// The account.
        id: u64,
    },
    /// Count accounts and sum balances.
    Audit,
}

impl ClientCommand {
    fn to_bank(&self) -> BankCommand {
        match *self {
            ClientCommand::Open { id, balance, flags } => BankCommand::Open {
                id: AccountId(id),
                balance,
                flags,
            },
            ClientCommand::Deposit { id, amount } => BankCommand::Deposit {
                id: AccountId(id),
                amount,
            },
            ClientCommand::Withdraw { id, amount } => BankCommand::Withdraw {
                id: AccountId(id),
                amount,
            },
            ClientCommand::Transfer { from, to, amount } => BankCommand::Transfer {
                from: AccountId(from),
                to: AccountId(to),
                amount,
            },
            ClientCommand::Get { id } => BankCommand::Get { id: AccountId(id) },
            ClientCommand::Audit => BankCommand::Audit,
        }
    }
}

fn output_json(output: &BankOutput) -> Value {
    match output {
        BankOutput::Account(a) => {
            json!({ "balance": a.balance, "version": a.version, "flags": a.flags })
        }
        BankOutput::Transferred {
            from_balance,
            to_balance,
        } => {
            json!({ "from_balance": from_balance, "to_balance": to_balance })
        }
        BankOutput::Audit { accounts, total } => {
            json!({ "accounts": accounts, "total": total.to_string() })
        }
    }
}

/// The JSON form of one command's outcome: `{"outcome": "done", "output": {...}}`,
/// `{"outcome": "failed", "error": <the BankError as serde writes it>, "message": "..."}`
/// or `{"outcome": "invalid"}`.
pub fn outcome_json(outcome: &Outcome<BankOutput, BankError>) -> Value {
    match outcome {
        Outcome::Done(output) => json!({ "outcome": "done", "output": output_json(output) }),
        Outcome::Failed(error) => {
            let value = serde_json::to_value(error).unwrap_or_else(|e| json!(e.to_string()));
            json!({ "outcome": "failed", "error": value, "message": error.to_string() })
        }
        Outcome::Invalid => json!({ "outcome": "invalid" }),
    }
}

/// Sends one command and prints its outcome as JSON; a refused command exits 1 unless
/// `--allow-refused`.
pub fn client(args: ClientArgs) -> anyhow::Result<()> {
    let mut config = engine::cli::read_client_file(&args.cluster)?.client_config()?;
    let timeout = Duration::from_secs_f64(args.timeout);
    config.give_up_after = Some(timeout);
    let command = args.command.to_bank();
    let runtime = runtime()?;
    let outcome = match &args.key {
        Some(key) => {
            let sent =
                engine::cli::submit_keyed::<Bank>(config, key, std::slice::from_ref(&command));
            runtime.block_on(sent)?
        }
        None => {
            let session = engine::cli::session(config, args.client_id);
            let mut client = runtime.block_on(engine::cli::within(timeout, session))?;
            let submitted = client.submit::<Bank>(std::slice::from_ref(&command));
            runtime.block_on(engine::cli::within(timeout, submitted))?
        }
    };
    let Some(outcome) = outcome.first() else {
        bail!("no outcome")
    };
    let value = outcome_json(outcome);
    match args.output {
        engine::cli::Output::Json => engine::outln!("{}", serde_json::to_string_pretty(&value)?),
        engine::cli::Output::Table => match outcome {
            Outcome::Done(output) => engine::outln!("done: {}", output_json(output)),
            Outcome::Failed(error) => engine::outln!("refused: {error}"),
            Outcome::Invalid => engine::outln!("invalid"),
        },
    }
    if engine::cli::is_refused(outcome) && !args.allow_refused {
        let refused = engine::cli::ClientRefused {
            refused: 1,
            commands: 1,
        };
        return Err(refused.into());
    }
    Ok(())
}

/// Options of `runner local`.
#[derive(Args, Debug)]
pub struct LocalArgs {
    /// Base directory for the three nodes' data (a fresh directory is made under it).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the data directory after the run.
    #[arg(long)]
    pub keep: bool,
    /// Most commands per log entry (16 to 1,024).
    #[arg(long, default_value_t = engine::internals::entry::ENTRY_COMMANDS_MAX)]
    pub entry_commands: u32,
    /// Most entries the leader keeps in flight (appended, not yet committed).
    #[arg(long, default_value_t = engine::node::PIPELINE_ENTRIES_DEFAULT, value_parser = clap::value_parser!(u64).range(1..))]
    pub pipeline_entries: u64,
    /// State capacity per node, in bytes.
    #[arg(long, default_value_t = STATE_BYTES_DEFAULT)]
    pub capacity_bytes: u64,
    /// Execution mode; without it, both modes run one after the other on the same cluster.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// TLS on every link: a throwaway CA and a certificate per node, made with openssl in
    /// the run's directory.
    #[arg(long)]
    pub tls: bool,
    /// Snapshots and the WAL.
    #[command(flatten)]
    pub storage: StorageOptions,
    /// The benchmark.
    #[command(flatten)]
    pub bench: BenchOptions,
}

/// `--mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Execute again after commit and compare with the simulation.
    Verify,
    /// Reuse verified simulations after commit.
    Performance,
}

impl From<ModeArg> for Mode {
    fn from(mode: ModeArg) -> Mode {
        match mode {
            ModeArg::Verify => Mode::Verify,
            ModeArg::Performance => Mode::Performance,
        }
    }
}

/// Refuses options of `local` that do not fit together.
pub fn check_local(args: &LocalArgs) -> anyhow::Result<()> {
    let range = engine::internals::entry::ENTRY_COMMANDS_CONFIG_MIN
        ..=engine::internals::entry::ENTRY_COMMANDS_MAX;
    if !range.contains(&args.entry_commands) {
        bail!("--entry-commands must lie in {range:?}");
    }
    Ok(())
}

/// Three nodes in this process over loopback TCP, then the benchmark against them.
pub fn local(args: LocalArgs) -> anyhow::Result<()> {
    check_local(&args)?;
    let dir = crate::run_dir(args.dir.clone())?;
    let modes: Vec<Option<Mode>> = match args.mode {
        Some(mode) => vec![Some(mode.into())],
        None => vec![Some(Mode::Verify), Some(Mode::Performance)],
    };
    let certificates = match args.tls {
        true => Some(LocalCertificates::make(&dir.path().join("tls"), 3)?),
        false => None,
    };
    let node_tls: Vec<Option<Tls>> = (1..=3)
        .map(|id| certificates.as_ref().map(|c| c.node(id)).transpose())
        .collect::<anyhow::Result<_>>()?;
    let cluster = LocalCluster::start(dir.path(), 3, Bank, |config| {
        config.entry_commands_max = args.entry_commands;
        config.pipeline_entries_max = args.pipeline_entries;
        config.capacity_bytes = args.capacity_bytes;
        config.mode = modes[0].unwrap_or_default();
        config
            .tls
            .clone_from(&node_tls[usize::from(config.id.0) - 1]);
        args.storage.apply(config);
    })?;

    engine::outln!(
        "three nodes in this process, data in {}",
        dir.path().display()
    );
    let disk = DiskWatch::start(dir.path().to_path_buf());
    let result = runtime()?.block_on(async {
        cluster
            .wait_for_leader(Duration::from_secs(10))
            .await
            .context("no leader elected")?;
        let operator = cluster.operator_config();
        bench::benchmark(
            &cluster.client_config(),
            Some(&operator),
            &args.bench,
            &modes,
        )
        .await
    });
    drop(cluster);
    let (peak, last) = disk.stop();
    engine::outln!(
        "data directory: peak {:.0} MiB (sampled every {DISK_SAMPLE_MS} ms), {:.0} MiB at the end",
        peak as f64 / MIB,
        last as f64 / MIB
    );
    if args.keep {
        engine::outln!("data kept in {}", dir.keep().display());
    }
    result.map(|_| ())
}

/// Options of `runner bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The cluster file, or a client file (`runner client-file` writes one).
    #[arg(long, env = engine::cli::CLUSTER_FILE_ENV, visible_alias = "client-file")]
    pub cluster: PathBuf,
    /// Sets every node's execution mode before the runs (default: leave it as it is).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// The benchmark.
    #[command(flatten)]
    pub bench: BenchOptions,
}

/// The benchmark against a running cluster.
pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let file = engine::cli::read_client_file(&args.cluster)?;
    // A cluster file (not a client file) gives the operator credential that --mode needs;
    // without --mode none is read (the host may hold the cluster file but not its secrets).
    let operator = match (args.mode, ClusterFile::parse(&args.cluster)) {
        (Some(_), Ok(_)) => Some(engine::cli::read_cluster_file(&args.cluster)?.operator_config()?),
        (Some(_), Err(_)) | (None, _) => None,
    };
    runtime()?
        .block_on(bench::benchmark(
            &file.client_config()?,
            operator.as_ref(),
            &args.bench,
            &[args.mode.map(Mode::from)],
        ))
        .map(|_| ())
}

/// Bytes in a mebibyte, for printing.
const MIB: f64 = 1024.0 * 1024.0;
/// How often `runner local` samples its data directory's size.
pub const DISK_SAMPLE_MS: u64 = 1_000;

/// Samples a directory's size on a thread of its own until stopped; keeps the peak.
struct DiskWatch {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl DiskWatch {
    fn start(dir: PathBuf) -> Self {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                let now = dir_bytes(&dir);
                peak = peak.max(now);
                match stopped.recv_timeout(Duration::from_millis(DISK_SAMPLE_MS)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        return (peak, now);
                    }
                }
            }
        });
        DiskWatch { stop, thread }
    }

    /// Stops sampling; the peak and the last sample, in bytes.
    fn stop(self) -> (u64, u64) {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or((0, 0))
    }
}

/// Bytes of the files under `dir` (files that vanish while counted count as nothing).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|item| match item.file_type() {
            Ok(kind) if kind.is_dir() => dir_bytes(&item.path()),
            Ok(_) => item.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
