//! `local`: three nodes of the binary's handler in this process, over loopback TCP, and the
//! benchmark against them with the author's [`BenchWorkload`]: what `runner local` is for the
//! Bank, for any handler. Without `--mode` both modes run on the one cluster, alternated run
//! by run (verify, performance, verify, ...), so that both see the machine as it is at the
//! moment: run back to back, all of one mode after all of the other, they would also compare
//! the hour each ran in. The CPU per command covers the nodes too, since they are in this
//! process.

use super::report::{BenchReport, CPU_OF_CLIENT_AND_NODES};
use super::{BENCH_GIVE_UP_S, BenchWorkload, ModePlan, RunArgs, benchmark};
use crate::apply::Mode;
use crate::cli::{ModeChoice, OutputArgs, StorageOptions, binary_name, runtime};
use crate::entry::{ENTRY_COMMANDS_CONFIG_MIN, ENTRY_COMMANDS_MAX};
use crate::node::local::LocalCluster;
use crate::node::{NodeConfig, PIPELINE_ENTRIES_DEFAULT};
use crate::state::STATE_BYTES_DEFAULT;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the nodes' data goes when `--dir` is not given: tmpfs, as `runner local`'s.
pub const LOCAL_DIR_DEFAULT: &str = "/dev/shm";
/// Nodes `local` starts.
pub const LOCAL_NODES: usize = 3;
/// Seconds to wait for the first leader.
const LEADER_WAIT_S: u64 = 10;

/// Options of `local` (named as `runner local`'s).
#[derive(Args, Debug, Clone)]
pub struct LocalArgs {
    /// Base directory for the nodes' data: a fresh directory is made under it, and removed
    /// after the run unless --keep.
    #[arg(long, default_value = LOCAL_DIR_DEFAULT)]
    pub dir: PathBuf,
    /// Keep the data directory after the run.
    #[arg(long)]
    pub keep: bool,
    /// Run this mode only; without it both, alternated run by run on the one cluster
    /// (verify, performance, verify, ...).
    #[arg(long, value_enum)]
    pub mode: Option<ModeChoice>,
    /// Most commands per log entry (16 to 1,024).
    #[arg(long, default_value_t = ENTRY_COMMANDS_MAX,
          value_parser = clap::value_parser!(u32)
              .range(i64::from(ENTRY_COMMANDS_CONFIG_MIN)..=i64::from(ENTRY_COMMANDS_MAX)))]
    pub entry_commands: u32,
    /// Most entries the leader keeps in flight (appended, not yet committed).
    #[arg(long, default_value_t = PIPELINE_ENTRIES_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub pipeline_entries: u64,
    /// State capacity per node, in bytes.
    #[arg(long, default_value_t = STATE_BYTES_DEFAULT)]
    pub capacity_bytes: u64,
    /// Snapshots and the WAL.
    #[command(flatten)]
    pub storage: StorageOptions,
    /// The runs.
    #[command(flatten)]
    pub run: RunArgs,
    /// The tables, or one JSON document.
    #[command(flatten)]
    pub output: OutputArgs,
}

impl LocalArgs {
    /// The modes run, in the order each round runs them.
    fn modes(&self) -> Vec<Mode> {
        match self.mode {
            Some(mode) => vec![mode.into()],
            None => vec![Mode::Verify, Mode::Performance],
        }
    }

    /// Sets the options on a node's configuration; the node starts in `mode`.
    fn tune(&self, config: &mut NodeConfig, mode: Mode) {
        config.entry_commands_max = self.entry_commands;
        config.pipeline_entries_max = self.pipeline_entries;
        config.capacity_bytes = self.capacity_bytes;
        config.mode = mode;
        self.storage.apply(config);
    }
}

/// Starts [`LOCAL_NODES`] nodes with handlers from `make` in this process, with data in a
/// fresh directory under `args.dir`, and runs the benchmark with `workload` against them;
/// prints the tables (or JSON) and fails as `bench` does ([`super::BenchFailed`]: exit 1).
pub fn local<W: BenchWorkload>(
    args: LocalArgs,
    make: impl Fn() -> W::H + Send + Sync + 'static,
    workload: W,
) -> anyhow::Result<()> {
    args.run.check()?;
    let dir = fresh_dir(&args.dir)?;
    let modes = args.modes();
    let first = modes[0];
    let cluster = LocalCluster::start_with(dir.path(), LOCAL_NODES, make, |config| {
        args.tune(config, first);
    })
    .context("starting the nodes")?;
    let shown = dir.path().display();
    eprintln!("{LOCAL_NODES} nodes in this process, data in {shown}");
    let found = runtime()?.block_on(async {
        let leader = cluster.wait_for_leader(Duration::from_secs(LEADER_WAIT_S));
        leader.await.context("no leader elected")?;
        let mut config = cluster.client_config();
        config.give_up_after = Some(Duration::from_secs(BENCH_GIVE_UP_S));
        let plan = ModePlan::Cycle(cluster.operator_config(), modes);
        benchmark(&config, &plan, &args.run, workload).await
    });
    drop(cluster);
    let path = dir.path().to_path_buf();
    match args.keep {
        true => drop(dir.keep()),
        false => dir
            .close()
            .with_context(|| format!("removing {}", path.display()))?,
    }
    let report = BenchReport::new(args.run.seed, CPU_OF_CLIENT_AND_NODES, found?);
    let report = report.with_data_dir(path, args.keep);
    args.output.emit(&report.to_json(), || report.print())?;
    Ok(report.verdict()?)
}

/// A fresh directory under `base` (made if missing), named after this binary.
fn fresh_dir(base: &Path) -> anyhow::Result<tempfile::TempDir> {
    let making = || format!("making a data directory under {}", base.display());
    std::fs::create_dir_all(base).with_context(making)?;
    tempfile::Builder::new()
        .prefix(&format!("{}-local-", binary_name()))
        .tempdir_in(base)
        .with_context(making)
}
