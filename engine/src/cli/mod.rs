//! The command line of a node binary, for any handler: a handler author's `main` is one call,
//! [`main`], and their binary has `node`, `status`, `check`, `client`, `client-file`,
//! `recover`, `mode`, `member`, `backup`, `restore`, `upgrade` and `replay`.
//!
//! ```no_run
//! # use engine::codec::{Decode, Encode};
//! # use engine::{Handler, Schema, StateError, Tx};
//! # #[derive(Debug, Encode, Decode, serde::Serialize)]
//! # struct Refused;
//! # impl From<StateError> for Refused { fn from(_: StateError) -> Self { Refused } }
//! # struct Counter;
//! # impl Handler for Counter {
//! #     type Command = u64; type Output = u64; type Error = Refused;
//! #     fn schema(&self) -> Schema { Schema::new() }
//! #     fn execute(&self, _: &mut Tx<'_>, c: &u64) -> Result<u64, Refused> { Ok(*c) }
//! # }
//! fn main() -> std::process::ExitCode {
//!     engine::cli::main("A counter on three machines", || Counter)
//! }
//! ```
//!
//! [`App`] adds the commands that need a workload of the author's as well: `sim` (the
//! deterministic simulator, with an `engine::sim::Workload`), and with a [`BenchWorkload`]
//! `bench` (a benchmark of a running cluster; `--mode` sets every node's mode first, given
//! the cluster file) and `local` (three nodes in this process and the same benchmark against
//! them, both modes alternated run by run, with the CPU per command and where an entry's time
//! went: `runner local` for any handler), one builder call each.
//!
//! `examples/orderbook` (a package of the workspace) is a whole one: a limit order book, its `main` an [`App`]
//! with both.
//!
//! A binary with commands of its own (as `runner` has, for the Bank) puts [`Command`] in its
//! own clap command line with `#[command(flatten)]` and calls [`Command::run`].

#![warn(clippy::disallowed_macros)]

mod backup;
mod bench;
mod changes;
mod check;
mod check_tls;
mod client;
mod client_file;
mod exit;
pub mod gateway;
pub mod logging;
mod manual;
mod member;
mod mode;
mod node;
mod output;
#[cfg(feature = "amqp")]
mod publish;
mod recover;
mod replay;
#[cfg(feature = "sim")]
mod sim;
mod status;
pub mod stdout;
mod upgrade;

pub use backup::{
    BACKUP_PIECE_TIMEOUT_MS, BACKUP_RESTARTS_MAX, BackupArgs, BackupFailed, RestoreArgs, backup,
    restore,
};
pub use bench::cost::{
    StageAverages, cpu_s_per_million, node_stages, print_stage_table, process_cpu_seconds,
};
pub use bench::local::{LOCAL_DIR_DEFAULT, LOCAL_NODES, LocalArgs, local};
pub use bench::open_loop::{OPEN_LOOP_OUTSTANDING_MAX, Pacer, open_loop};
pub use bench::{
    BENCH_BATCH_MAX, BENCH_CALLERS_MAX, BENCH_INFLIGHT_MAX, BenchArgs, BenchFailed, BenchWorkload,
    Callers as BenchCallers, LATENCY_US_MAX, LatencyMs, Load as BenchLoad,
    Measured as BenchMeasured, RunArgs as BenchRunArgs, Summary as RunSummary,
    SummaryRow as RunSummaryRow, bench, measure as measure_load, print_run_summary, run_load,
    summarize_runs,
};
pub use changes::{
    CHANGES_CATCH_UP_WAIT_MS, CHANGES_FOLLOW_WAIT_MS, CHANGES_RETRY_MS, CHANGES_STATUS_TIMEOUT_S,
    ChangesArgs, Lines as ChangeLines, PositionError, Publish, Published, Undecodable, changes,
    parse_position, publish_all,
};
pub use check::{CheckArgs, check};
pub use client::{
    CLIENT_GIVE_UP_SECS_DEFAULT, CLIENT_TIMEOUT_GRACE_MS, ClientArgs, ClientIdError, KeyError,
    KeyRefused, Refused as ClientRefused, client, client_id, is_refused, key, outcome_json,
    session, submit_keyed, within,
};
pub use client_file::{ClientFileArgs, client_file};
pub use exit::{
    Coded, EXIT_CODES_HEADING, Exit, coded, exit_code, exit_codes_help, parse_command_line,
    parse_failed, with_exit_codes,
};
pub use gateway::{GatewayArgs, gateway, gateway_publishing};
pub use manual::{CompletionsArgs, ManArgs, completions, man};
pub use member::{MemberAction, MemberArgs, MemberError, member};
pub use mode::{ModeArgs, ModeChoice, mode};
pub use node::{NodeArgs, StorageOptions, node};
pub use output::{JSON_STDOUT, Output, OutputArgs};
#[cfg(feature = "amqp")]
pub use publish::{
    Broker, BrokerError, Lag as PublishLag, Message as PublishMessage, PUBLISH_RECONNECT_MS,
    PUBLISH_ROUTING_KEY_DEFAULT, Per, Progress as PublishProgress, ProgressError, PublishArgs,
    publish,
};
pub use recover::{RecoverArgs, StoppedNode, recover};
pub use replay::{Differs, ReplayArgs, replay};
#[cfg(feature = "sim")]
pub use sim::{SimArgs, sim};
pub use status::{
    STATUS_TIMEOUT_S_DEFAULT, SecondsError, StatusArgs, TIMEOUT_S_MAX, status, timeout_seconds,
};
pub use upgrade::{UpgradeArgs, UpgradeError, upgrade};

use crate::apply::Mode;
use crate::codec::Describe;
use crate::handler::Handler;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::process::ExitCode;

/// A handler the command line can drive: its commands read from JSON and its outcomes print
/// as JSON (derive serde's `Deserialize` on the command type, `Serialize` on the output and
/// error types), described by the gateway's OpenAPI document ([`Describe`], which the `Encode`
/// derive writes). Every such handler is one.
pub trait CliHandler:
    Handler<
        Command: DeserializeOwned + Describe,
        Output: Serialize + Describe,
        Error: Serialize + Describe,
    >
{
}

impl<H> CliHandler for H where
    H: Handler<
            Command: DeserializeOwned + Describe,
            Output: Serialize + Describe,
            Error: Serialize + Describe,
        >
{
}

/// The commands every node binary has.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// One node of a cluster described by a cluster file, until SIGINT or SIGTERM.
    Node(NodeArgs),
    /// Every node's role, term, commit and applied index, and state hash.
    Status(StatusArgs),
    /// Checks a cluster file: what each node would run with, or every error (exit 3, usage).
    Check(CheckArgs),
    /// Commands as JSON, sent to the cluster; outcomes printed as JSON.
    Client(ClientArgs),
    /// Writes the client file of a cluster file: what a client host needs, no peer secret.
    ClientFile(ClientFileArgs),
    /// What a start of a stopped node's data directory would do (or refuse), timed; writes
    /// nothing.
    Recover(RecoverArgs),
    /// Switches every node to Verify or Performance; each keeps it across restarts.
    Mode(ModeArgs),
    /// Changes the members of a running cluster one node at a time: add, remove, replace.
    Member(MemberArgs),
    /// Writes a running cluster's newest durable snapshot (state at a committed index, with
    /// its state hash and digest) to a backup file.
    Backup(BackupArgs),
    /// Seeds the data directories of a new cluster from a backup file.
    Restore(RestoreArgs),
    /// Puts a newer handler version in force through the log (every node's build must run
    /// it); every node switches at the same entry.
    Upgrade(UpgradeArgs),
    /// Re-executes a stopped node's committed log with this build's handler and reports the
    /// first entry and command that differ from what the node recorded; writes nothing.
    Replay(ReplayArgs),
    /// The cluster over HTTP with JSON, for callers in any language: batches concurrent
    /// callers' commands, exactly once across retries by Idempotency-Key.
    Gateway(GatewayArgs),
    /// Prints a shell's completion script for this binary (bash, zsh, fish, elvish,
    /// powershell).
    Completions(CompletionsArgs),
    /// Writes this binary's man pages (one per command) into a directory.
    Man(ManArgs),
}

impl Command {
    /// Runs the command with the handler `make` builds. `completions` and `man` describe the
    /// commands of this enum under the binary's name; a binary with commands of its own
    /// calls [`completions`] and [`man`] with its whole command line instead.
    pub fn run<H: CliHandler>(self, make: impl Fn() -> H) -> anyhow::Result<()> {
        self.run_in(make, with_exit_codes(Cli::command().name(binary_name())))
    }

    /// Runs the command; `completions` and `man` describe `line`, the binary's command line.
    fn run_in<H: CliHandler>(
        self,
        make: impl Fn() -> H,
        line: clap::Command,
    ) -> anyhow::Result<()> {
        match self {
            Command::Node(args) => node(args, make()),
            Command::Status(args) => status(args),
            Command::Check(args) => check(args),
            Command::Client(args) => client::<H>(args),
            Command::ClientFile(args) => client_file(args),
            Command::Recover(args) => recover(args, make()),
            Command::Mode(args) => mode(args),
            Command::Member(args) => member(args),
            Command::Backup(args) => backup(args),
            Command::Restore(args) => restore(args, make()),
            Command::Upgrade(args) => upgrade(args),
            Command::Replay(args) => replay(args, make()),
            Command::Gateway(args) => gateway::<H>(args),
            Command::Completions(args) => completions(args, line),
            Command::Man(args) => man(args, line),
        }
    }
}

/// The whole command line: [`Command`] under the binary's name.
#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: logging::LogArgs,
}

/// A node binary's `main`: parses the command line (`about` is its one-line description),
/// runs the command with the handler `make` builds, and on an error logs it on one line (its
/// causes joined) and exits with the code [`Exit::of`] gives it.
pub fn main<H: CliHandler>(about: &'static str, make: impl Fn() -> H) -> ExitCode {
    App::new(about, make).run()
}

/// [`main`], and a `sim` command that runs the deterministic simulator with the workload
/// `workload` builds (one per seed; its handler must be the one `make` builds). The same as
/// `App::new(about, make).sim(workload).run()`.
#[cfg(feature = "sim")]
pub fn main_with_sim<H: CliHandler, W: crate::sim::Workload<H = H>>(
    about: &'static str,
    make: impl Fn() -> H,
    workload: impl Fn() -> W,
) -> ExitCode {
    App::new(about, make).sim(workload).run()
}

/// What `sim` says of itself in the usage.
#[cfg(feature = "sim")]
const SIM_ABOUT: &str = "The deterministic cluster simulator on many seeds, with the binary's \
                         workload (faults, crashes, invariant checks)";
/// What `bench` says of itself in the usage.
const BENCH_ABOUT: &str = "A benchmark of a running cluster with the binary's workload: \
                           commands/s, latency percentiles, errors, converged replicas";
/// What `local` says of itself in the usage.
const LOCAL_ABOUT: &str = "Three nodes in this process and the benchmark against them, both \
                           modes alternated: commands/s, latency, CPU per command, stages";

/// The two commands that run the author's [`BenchWorkload`].
enum Benchmark {
    /// `bench`: against a running cluster.
    Bench(BenchArgs),
    /// `local`: against three nodes in this process.
    Local(LocalArgs),
}

/// A command run with its parsed options.
type Extra<'a, A> = Box<dyn FnOnce(A) -> anyhow::Result<()> + 'a>;

/// A node binary's command line with the commands that need more of the author than a
/// handler: [`Command`]'s, and `sim`, and `bench` and `local`, when given their workloads.
///
/// ```no_run
/// # use engine::codec::{Decode, Encode};
/// # use engine::{Handler, Schema, StateError, Tx};
/// # use engine::cli::BenchWorkload;
/// # use engine::rng::Rng;
/// # #[derive(Debug, Encode, Decode, serde::Serialize)]
/// # struct Refused;
/// # impl From<StateError> for Refused { fn from(_: StateError) -> Self { Refused } }
/// # struct Counter;
/// # impl Handler for Counter {
/// #     type Command = u64; type Output = u64; type Error = Refused;
/// #     fn schema(&self) -> Schema { Schema::new() }
/// #     fn execute(&self, _: &mut Tx<'_>, c: &u64) -> Result<u64, Refused> { Ok(*c) }
/// # }
/// /// Requests of random numbers.
/// struct Numbers;
///
/// impl BenchWorkload for Numbers {
///     type H = Counter;
///     type Error = std::convert::Infallible;
///     fn next_request(&mut self, _client: u32, rng: &mut Rng, commands: u32) -> Vec<u64> {
///         (0..commands).map(|_| rng.below(1000)).collect()
///     }
/// }
///
/// fn main() -> std::process::ExitCode {
///     engine::cli::App::new("A counter on three machines", || Counter)
///         .bench(Numbers)
///         .run()
/// }
/// ```
///
/// `examples/orderbook` adds both (`.sim(|| BookWorkload).bench(BookBench::default())`).
pub struct App<'a, H: Handler, F> {
    about: &'static str,
    /// Shared with `local`, whose nodes make their handlers on threads of their own.
    make: std::sync::Arc<F>,
    /// The binary's version and commit ([`App::version`]).
    build: Option<(&'static str, &'static str)>,
    #[cfg(feature = "sim")]
    sim: Option<Extra<'a, SimArgs>>,
    bench: Option<Extra<'a, Benchmark>>,
    /// What the change stream publishes of each command ([`App::changes`]).
    changes: Option<Publish<H>>,
    handler: std::marker::PhantomData<fn() -> H>,
}

impl<'a, H: CliHandler, F: Fn() -> H> App<'a, H, F> {
    /// The commands of [`Command`] for the handler `make` builds; `about` is the binary's
    /// one-line description.
    pub fn new(about: &'static str, make: F) -> Self {
        App {
            about,
            make: std::sync::Arc::new(make),
            build: None,
            #[cfg(feature = "sim")]
            sim: None,
            bench: None,
            changes: None,
            handler: std::marker::PhantomData,
        }
    }

    /// Adds the change stream: `changes`, the gateway's `GET /v1/changes` and, with the
    /// feature `amqp`, `publish` to RabbitMQ, each command published as `publish` says
    /// ([`publish_all`] for the command and its outcome, when the command type is
    /// `Serialize`; a function of the author's for a summary, or to leave commands out).
    pub fn changes(mut self, publish: Publish<H>) -> Self {
        self.changes = Some(publish);
        self
    }

    /// Adds `sim`: the deterministic simulator with the workload `workload` builds (one per
    /// seed; its handler must be the one `make` builds).
    #[cfg(feature = "sim")]
    pub fn sim<W: crate::sim::Workload<H = H>>(mut self, workload: impl Fn() -> W + 'a) -> Self {
        self.sim = Some(Box::new(move |args| sim(args, workload)));
        self
    }

    /// Names the binary's build, `(version, commit)`, as [`build_identity!`](crate::build_identity)
    /// gives it: `--version` prints it with the formats, nodes report it to `status` and in
    /// `engine_build_info`. Without it: the engine's version and `unknown`.
    pub fn version(mut self, (version, commit): (&'static str, &'static str)) -> Self {
        self.build = Some((version, commit));
        self
    }

    /// Adds `bench`, a benchmark of a running cluster with `workload`, and `local`, the same
    /// against three nodes in this process with handlers from `make` (hence the bounds: the
    /// nodes run on threads of their own).
    pub fn bench<B: BenchWorkload<H = H> + 'a>(mut self, workload: B) -> Self
    where
        F: Send + Sync + 'static,
    {
        let make = std::sync::Arc::clone(&self.make);
        self.bench = Some(Box::new(move |command| match command {
            Benchmark::Bench(args) => bench(args, workload),
            Benchmark::Local(args) => local(args, move || make(), workload),
        }));
        self
    }

    /// Parses the command line and runs the command; on an error logs it on one line (its
    /// causes joined) and exits with the code [`Exit::of`] gives it (a bad command line:
    /// [`Exit::Usage`]).
    pub fn run(self) -> ExitCode {
        if let Some((version, commit)) = self.build {
            crate::formats::set_binary(version, commit);
        }
        let line = self.command_line();
        let matches = match line.try_get_matches() {
            Ok(matches) => matches,
            Err(error) => return parse_failed(&error),
        };
        let log = match logging::LogArgs::from_arg_matches(&matches) {
            Ok(log) => log,
            Err(error) => return parse_failed(&error),
        };
        let default = match matches.subcommand_name() {
            Some("sim") => logging::SIM_LOG_FILTER_DEFAULT,
            Some(_) | None => logging::LOG_FILTER_DEFAULT,
        };
        logging::init_with(log.log_format, default);
        exit_code(self.dispatch(&matches))
    }

    /// This binary's whole command line.
    fn command_line(&self) -> clap::Command {
        let mut line = command_line(self.about, self.has_sim(), self.bench.is_some());
        if self.changes.is_some() {
            line = with_change_stream(line);
        }
        with_exit_codes(versioned(
            line,
            self.build.unwrap_or_else(crate::formats::binary),
        ))
    }

    #[cfg(feature = "sim")]
    fn has_sim(&self) -> bool {
        self.sim.is_some()
    }

    #[cfg(not(feature = "sim"))]
    fn has_sim(&self) -> bool {
        false
    }

    /// Runs the command `matches` holds.
    fn dispatch(self, matches: &clap::ArgMatches) -> anyhow::Result<()> {
        match matches.subcommand() {
            #[cfg(feature = "sim")]
            Some(("sim", options)) => {
                let run = self
                    .sim
                    .expect("sim is on the command line only when given");
                return run(SimArgs::from_arg_matches(options)?);
            }
            Some(("bench", options)) => {
                let run = self
                    .bench
                    .expect("bench is on the command line only when given");
                return run(Benchmark::Bench(BenchArgs::from_arg_matches(options)?));
            }
            Some(("local", options)) => {
                let run = self
                    .bench
                    .expect("local is on the command line only when given");
                return run(Benchmark::Local(LocalArgs::from_arg_matches(options)?));
            }
            Some((name @ ("changes" | "publish" | "gateway"), options))
                if let Some(publish) = self.changes =>
            {
                return run_change_stream::<H>(name, options, publish);
            }
            Some(_) | None => {}
        }
        let line = self.command_line();
        let cli = Cli::from_arg_matches(matches)?;
        cli.command.run_in(&*self.make, line)
    }
}

/// `line` with `changes` and (feature `amqp`) `publish`.
fn with_change_stream(line: clap::Command) -> clap::Command {
    use clap::Args;
    let about = "Every committed command and its outcome, in commit order, from a position on \
                 (with --follow, and every later commit), read from a follower";
    let line =
        line.subcommand(ChangesArgs::augment_args(clap::Command::new("changes")).about(about));
    #[cfg(feature = "amqp")]
    let line = line.subcommand(
        PublishArgs::augment_args(clap::Command::new("publish")).about(
            "The change stream to a RabbitMQ exchange (AMQP 0.9.1) with publisher confirms, at \
             least once and in order, going on after a restart where the broker confirmed",
        ),
    );
    line
}

/// Runs `changes`, `publish` or `gateway` of a binary with the change stream.
fn run_change_stream<H: CliHandler>(
    name: &str,
    options: &clap::ArgMatches,
    publish: Publish<H>,
) -> anyhow::Result<()> {
    match name {
        "changes" => changes::<H>(ChangesArgs::from_arg_matches(options)?, publish),
        #[cfg(feature = "amqp")]
        "publish" => self::publish::<H>(PublishArgs::from_arg_matches(options)?, publish),
        _ => gateway_publishing::<H>(GatewayArgs::from_arg_matches(options)?, publish),
    }
}

/// `line` with `-V` giving `version` and `--version` the commit and the formats too.
fn versioned(line: clap::Command, (version, commit): (&'static str, &str)) -> clap::Command {
    let formats = crate::formats::describe();
    let long = format!("{version} (commit {commit}; {formats})");
    line.version(version).long_version(long)
}

/// The command line: [`Command`]'s commands, and `sim`, and `bench` and `local`, when asked
/// for.
fn command_line(about: &'static str, with_sim: bool, with_bench: bool) -> clap::Command {
    use clap::Args;
    let mut command = Cli::command().name(binary_name()).about(about);
    #[cfg(feature = "sim")]
    if with_sim {
        // After the options: their struct's doc would replace the command's own.
        let sim = SimArgs::augment_args(clap::Command::new("sim")).about(SIM_ABOUT);
        command = command.subcommand(sim);
    }
    #[cfg(not(feature = "sim"))]
    let _ = with_sim;
    if with_bench {
        let bench = BenchArgs::augment_args(clap::Command::new("bench")).about(BENCH_ABOUT);
        let local = LocalArgs::augment_args(clap::Command::new("local")).about(LOCAL_ABOUT);
        command = command.subcommand(bench).subcommand(local);
    }
    command
}

/// The calling crate's build, for [`App::version`]: its version (`CARGO_PKG_VERSION`) and
/// the commit that `GIT_COMMIT` names at build time (`unknown` when unset). Set it where
/// the binary is built: `GIT_COMMIT=$(git rev-parse HEAD) cargo build --release`.
#[macro_export]
macro_rules! build_identity {
    () => {
        (
            env!("CARGO_PKG_VERSION"),
            match option_env!("GIT_COMMIT") {
                Some(commit) => commit,
                None => "unknown",
            },
        )
    };
}

/// This binary's file name (what its usage lines and replay hints say).
pub fn binary_name() -> String {
    std::env::args()
        .next()
        .and_then(|path| {
            let name = std::path::Path::new(&path).file_name()?;
            Some(name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "node".into())
}

/// The environment variable that gives `--cluster` to every command that reads a cluster
/// file (or a client file) when the option is left out.
pub const CLUSTER_FILE_ENV: &str = "ENGINE_CLUSTER_FILE";

/// The environment variable that gives `node --id` when the option is left out (one unit
/// file for every node of a host's service manager).
pub const NODE_ID_ENV: &str = "ENGINE_NODE_ID";

/// The environment variable that gives `gateway --token-file` when the option is left out.
pub const GATEWAY_TOKEN_FILE_ENV: &str = "ENGINE_GATEWAY_TOKEN_FILE";

/// The environment as the secrets' lookup reads it.
fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The cluster file at `path`, checked, with the secrets it leaves unset taken from the
/// environment (`ENGINE_SECRET`, `ENGINE_CLIENT_SECRET`, `ENGINE_OPERATOR_SECRET`).
pub fn read_cluster_file(path: &std::path::Path) -> anyhow::Result<crate::node::ClusterFile> {
    let mut file = crate::node::ClusterFile::read(path)?;
    warn_if_secrets_open(path, file.has_inline_secret());
    file.take_environment(environment)?;
    Ok(file)
}

/// The client file at `path` (or what a client needs of a cluster file), with the client
/// secret taken from `ENGINE_CLIENT_SECRET` when the file leaves it unset.
pub fn read_client_file(path: &std::path::Path) -> anyhow::Result<crate::node::ClientFile> {
    let mut file = crate::node::ClientFile::read(path)?;
    warn_if_secrets_open(path, file.client_secret.is_some());
    file.take_environment(environment)?;
    Ok(file)
}

/// Warns when a file that holds a secret inline may be read by other users. A warning, not a
/// refusal: files written by hand before secrets had files of their own keep working; the
/// `_file` keys, which are new, refuse such a file.
fn warn_if_secrets_open(path: &std::path::Path, holds_secret: bool) {
    if let (true, Some(mode)) = (holds_secret, crate::storage::files::open_to_others(path)) {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{mode:o}"),
            "the file holds a secret and other users may read it: run chmod 600 on it, or move \
             the secret into a file of its own (the *_file keys)"
        );
    }
}

/// A runtime for one command's client work.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// The mode's name, as the cluster file and `status` spell it.
pub fn mode_name(mode: Mode) -> &'static str {
    mode.name()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves every binary made with `engine::cli` has `completions` and `man`, and that both
    /// describe its whole command line (`sim`, `bench` and `local` included when it has them).
    #[test]
    fn completions_and_man_pages_cover_the_whole_command_line() {
        let line = || command_line("about", true, true).name("book");
        let mut script = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut line(), "book", &mut script);
        let script = String::from_utf8(script).unwrap();
        for word in [
            "status",
            "client",
            "bench",
            "local",
            "completions",
            "man",
            "--output",
        ] {
            assert!(script.contains(word), "the script lacks {word}");
        }
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("man");
        man(ManArgs { out: out.clone() }, line()).unwrap();
        for page in [
            "book.1",
            "book-status.1",
            "book-bench.1",
            "book-local.1",
            "book-completions.1",
        ] {
            assert!(out.join(page).exists(), "no {page}");
        }
    }

    /// Proves a binary's `--version` names the build it was given (version, commit) and the
    /// formats, and `-V` the version alone.
    #[test]
    fn the_version_names_the_build_given() {
        let line = command_line("about", false, false).name("book");
        let line = versioned(line, ("9.8.7", "abc123"));
        let long = line.clone().render_long_version();
        let formats = crate::formats::describe();
        assert_eq!(
            long.trim_end(),
            format!("book 9.8.7 (commit abc123; {formats})")
        );
        assert_eq!(line.render_version().trim_end(), "book 9.8.7");
    }

    /// Proves the command line with `sim`, `bench` and `local` added passes clap's own checks
    /// (a clash of option names panics only in a debug build, at parse time) and that each is
    /// added only when asked for.
    #[test]
    fn the_command_line_with_sim_and_bench_is_consistent() {
        let full = command_line("about", true, true);
        full.clone().debug_assert();
        let names = |c: &clap::Command| -> Vec<String> {
            c.get_subcommands()
                .map(|s| s.get_name().to_string())
                .collect()
        };
        let all = names(&full);
        assert!(all.iter().any(|n| n == "bench") && all.iter().any(|n| n == "node"));
        assert!(all.iter().any(|n| n == "local"));
        assert_eq!(all.iter().any(|n| n == "sim"), cfg!(feature = "sim"));
        let about = |name: &str| {
            let sub = full
                .find_subcommand(name)
                .map(|s| s.get_about().map(|a| a.to_string()));
            sub.flatten().unwrap_or_default()
        };
        assert_eq!(about("bench"), BENCH_ABOUT, "the command's own description");
        assert_eq!(about("local"), LOCAL_ABOUT);
        #[cfg(feature = "sim")]
        assert_eq!(about("sim"), SIM_ABOUT);
        let plain = names(&command_line("about", false, false));
        assert!(
            !plain
                .iter()
                .any(|n| n == "bench" || n == "local" || n == "sim")
        );
        let matches = full.try_get_matches_from(["node", "bench", "--cluster", "c.toml"]);
        let matches = matches.unwrap();
        let (name, options) = matches.subcommand().unwrap();
        assert_eq!(name, "bench");
        let args = BenchArgs::from_arg_matches(options).unwrap();
        assert_eq!(
            (args.run.batch, args.run.inflight, args.run.runs),
            (256, 1, 2)
        );
        assert_eq!((args.output.json, args.mode), (None, None));
        let bench = |extra: &[&str]| {
            let line = ["node", "bench", "--cluster", "c.toml"].iter().chain(extra);
            let matches = command_line("about", true, true).try_get_matches_from(line)?;
            BenchArgs::from_arg_matches(matches.subcommand().unwrap().1)
        };
        let json = bench(&["--json"]).unwrap().output.json.unwrap();
        assert_eq!(json, std::path::Path::new(JSON_STDOUT));
        assert!(bench(&["--batch", "0"]).is_err() && bench(&["--batch", "1025"]).is_err());
        assert_eq!(
            bench(&["--batch", "1024"]).unwrap().run.batch,
            BENCH_BATCH_MAX
        );
        let mode = bench(&["--mode", "performance"]).unwrap().mode;
        assert_eq!(mode, Some(ModeChoice::Performance));
    }

    /// Proves `local`'s defaults are `runner local`'s (data under tmpfs, both modes, entries
    /// of up to 1,024 commands) and that its options are checked as the node checks them.
    #[test]
    fn local_takes_the_runners_options() {
        let local = |extra: &[&str]| {
            let line = ["node", "local"].iter().chain(extra);
            let matches = command_line("about", true, true).try_get_matches_from(line)?;
            LocalArgs::from_arg_matches(matches.subcommand().unwrap().1)
        };
        let args = local(&[]).unwrap();
        assert_eq!(args.dir, std::path::Path::new(LOCAL_DIR_DEFAULT));
        assert_eq!((args.mode, args.keep, args.run.runs), (None, false, 2));
        assert_eq!(args.entry_commands, crate::entry::ENTRY_COMMANDS_MAX);
        let args = local(&["--mode", "verify", "--commands", "10", "--json", "--keep"]).unwrap();
        assert_eq!(
            (args.mode, args.run.commands),
            (Some(ModeChoice::Verify), Some(10))
        );
        assert_eq!((args.output.stdout(), args.keep), (Output::Json, true));
        assert!(local(&["--entry-commands", "15"]).is_err());
        assert!(local(&["--entry-commands", "1025"]).is_err());
        assert!(local(&["--pipeline-entries", "0"]).is_err());
        assert!(local(&["--mode", "fast"]).is_err());
    }
}
