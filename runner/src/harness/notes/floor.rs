//! `runner local --floor`: the floor report. The bare data path probe (the workspace's `floor`
//! package, `benches/floor/`, built in release into the workspace's target directory) and the
//! main job run in one sitting, alternated, and the engine's throughput is printed as a ratio
//! to the floor's best layout for each shape of the performance targets' table
//! (`notes/benchmarks.md`): absolute numbers on a shared machine move from hour to hour,
//! ratios much less.
//! The order book (`book.rs`) runs in the same sitting on tmpfs, both modes, so that each
//! workload's Performance/Verify ratio is measured beside the other's.

use super::NotesArgs;
use super::book::{self, BookRun, EngineRun};
use crate::notes::matrix::{filesystem, machine, spread};
use anyhow::{Context, anyhow, bail};
use bank::Bank;
use engine::Mode;
use engine::node::local::LocalCluster;
use runner::product::bench::{self, BenchOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Accounts prefilled, as in the reference workload.
const FLOOR_ACCOUNTS: u64 = 2_000_000;
/// Filler bytes per command in the probe, so that a transfer is ~64 bytes as the Bank's are.
const FLOOR_PAD_BYTES: u32 = 40;
/// Batches the probe sends per layout at 256 and 1,024 commands per batch (its README's).
const FLOOR_BATCHES_256: u32 = 20_000;
/// See [`FLOOR_BATCHES_256`].
const FLOOR_BATCHES_1024: u32 = 5_000;
/// Batches of the disk layout (fdatasync on every append is slower).
const FLOOR_BATCHES_DISK: u32 = 2_000;
/// The probe's package in this workspace (`benches/floor/`), and its binary's name.
const FLOOR_PACKAGE: &str = "floor";

/// Options of the floor report (on `runner local`).
#[derive(clap::Args, Debug, Clone)]
pub struct FloorOptions {
    /// Runs the floor report instead of one benchmark: the bare path probe and the main job,
    /// alternated in one sitting, and the engine's throughput as a ratio to the probe's.
    #[arg(long)]
    pub floor: bool,
    /// Leaves out the disk shape (ext4 or whatever --disk-dir lives on).
    #[arg(long)]
    pub floor_no_disk: bool,
    /// Leaves out the order book (the `orderbook` package, built in release).
    #[arg(long)]
    pub floor_no_book: bool,
}

/// One shape of the report: the engine's configuration and the probe's.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    mode: Mode,
    batch: u32,
    inflight: u32,
    disk: bool,
    /// Batches per probe run (None: the shape has no probe counterpart).
    probe_batches: Option<u32>,
    /// Callers of one command each over one shared client (`--callers`), which forms
    /// requests of up to `batch` commands, `inflight` in flight.
    callers: Option<u32>,
}

/// Requests in flight of the order book's shapes (256 commands per request, tmpfs).
const BOOK_INFLIGHT: [u32; 2] = [1, 8];
/// Commands per request of the order book's shapes.
const BOOK_BATCH: u32 = 256;

const SHAPES: [Shape; 7] = [
    Shape::tmpfs(
        "performance 256 x1",
        Mode::Performance,
        256,
        1,
        Some(FLOOR_BATCHES_256),
    ),
    Shape::tmpfs(
        "verify 256 x1",
        Mode::Verify,
        256,
        1,
        Some(FLOOR_BATCHES_256),
    ),
    Shape::tmpfs(
        "performance 1024 x1",
        Mode::Performance,
        1024,
        1,
        Some(FLOOR_BATCHES_1024),
    ),
    Shape::tmpfs("performance 256 x8", Mode::Performance, 256, 8, None),
    Shape::tmpfs("verify 256 x8", Mode::Verify, 256, 8, None),
    Shape {
        name: "disk performance 256 x1",
        mode: Mode::Performance,
        batch: 256,
        inflight: 1,
        disk: true,
        probe_batches: Some(FLOOR_BATCHES_DISK),
        callers: None,
    },
    Shape {
        name: "performance 256 callers x8",
        mode: Mode::Performance,
        batch: 256,
        inflight: 8,
        disk: false,
        probe_batches: None,
        callers: Some(FLOOR_CALLERS),
    },
];

/// Callers of one command each in the report's callers shape, sharing one client.
const FLOOR_CALLERS: u32 = 256;

impl Shape {
    const fn tmpfs(
        name: &'static str,
        mode: Mode,
        batch: u32,
        inflight: u32,
        probe_batches: Option<u32>,
    ) -> Shape {
        Shape {
            name,
            mode,
            batch,
            inflight,
            disk: false,
            probe_batches,
            callers: None,
        }
    }
}

/// One probe run of one layout.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProbeRun {
    /// `ct`, `mt2` or `pernode`.
    pub layout: String,
    /// Commands per second.
    pub commands_per_s: f64,
    /// 99th percentile round trip, in milliseconds.
    pub p99_ms: f64,
}

/// One shape's runs and its ratio.
#[derive(Debug, Serialize)]
struct ShapeReport {
    workload: &'static str,
    shape: String,
    storage: String,
    engine: Vec<EngineRun>,
    probe: Vec<ProbeRun>,
    engine_median: f64,
    engine_p99_ms: f64,
    cpu_s_per_million: f64,
    probe_best_median: Option<f64>,
    probe_best_layout: Option<String>,
    probe_p99_ms: Option<f64>,
    ratio: Option<f64>,
}

/// Runs the report, prints its table, and writes JSON if asked.
pub fn run(args: &NotesArgs) -> anyhow::Result<()> {
    let probe = build_probe()?;
    let book = match args.floor.floor_no_book {
        true => None,
        false => Some(book::build()?),
    };
    let disk_base = args
        .matrix
        .disk_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/floor-data"));
    let mut reports = Vec::new();
    for disk in [false, true] {
        if disk && args.floor.floor_no_disk {
            continue;
        }
        let base = if disk {
            disk_base.clone()
        } else {
            PathBuf::from("/dev/shm")
        };
        let shapes: Vec<Shape> = SHAPES.into_iter().filter(|s| s.disk == disk).collect();
        let book = book.as_deref().filter(|_| !disk);
        reports.extend(on_storage(args, &probe, book, &base, &shapes)?);
    }
    let ratios = performance_over_verify(&reports);
    print_table(&reports, &ratios);
    if let Some(path) = &args.bench.json {
        let document = serde_json::json!({
            "shapes": reports,
            "performance_over_verify": ratios,
        });
        std::fs::write(path, serde_json::to_string_pretty(&document)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Builds the probe (`cargo build --release -p floor`, in this workspace's target directory,
/// run from the workspace's root as the order book's build is); returns its binary.
fn build_probe() -> anyhow::Result<PathBuf> {
    let args = ["-p".as_ref(), FLOOR_PACKAGE.as_ref()];
    super::cargo_release(&args, None, "the floor probe (benches/floor)")?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| "target".into(), PathBuf::from);
    Ok(target.join("release").join(FLOOR_PACKAGE))
}

/// The shapes on one storage: one cluster, prefilled once, and for each of the runs every
/// shape's probe run followed by its engine run, then the order book's runs (given its binary).
fn on_storage(
    args: &NotesArgs,
    probe: &Path,
    book: Option<&Path>,
    base: &Path,
    shapes: &[Shape],
) -> anyhow::Result<Vec<ShapeReport>> {
    std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
    let storage = filesystem(base);
    engine::outln!("== {storage}: {}", base.display());
    let dir = runner::run_dir(Some(base.to_path_buf()))?;
    let cluster = LocalCluster::start(dir.path(), 3, Bank, |config| {
        config.entry_commands_max = args.entry_commands;
        config.pipeline_entries_max = args.pipeline_entries;
        config.capacity_bytes = args.capacity_bytes;
        args.storage.apply(config);
    })?;
    let config = cluster.client_config();
    let operator = cluster.operator_config();
    let probe_dir = dir.path().join("floor-probe");
    std::fs::create_dir_all(&probe_dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(cluster.wait_for_leader(Duration::from_secs(10)))
        .context("no leader elected")?;
    let mut engine: Vec<Vec<EngineRun>> = vec![Vec::new(); shapes.len()];
    let mut probes: Vec<Vec<ProbeRun>> = vec![Vec::new(); shapes.len()];
    let mut books: Vec<Vec<EngineRun>> = vec![Vec::new(); BOOK_INFLIGHT.len()];
    for run in 0..args.bench.runs {
        for (at, shape) in shapes.iter().enumerate() {
            if let Some(batches) = shape.probe_batches {
                probes[at].extend(run_probe(probe, shape, batches, &probe_dir)?);
            }
            let options = engine_options(args, shape, run);
            let runs = runtime.block_on(bench::benchmark(
                &config,
                Some(&operator),
                &options,
                &[Some(shape.mode)],
            ))?;
            engine[at].extend(runs.iter().map(EngineRun::from));
        }
        for (at, inflight) in BOOK_INFLIGHT.into_iter().enumerate() {
            if let Some(binary) = book {
                books[at].extend(book_run(args, binary, base, inflight, run).both_modes()?);
            }
        }
    }
    drop(cluster);
    let mut reports: Vec<ShapeReport> = shapes
        .iter()
        .zip(engine.into_iter().zip(probes))
        .map(|(shape, (engine, probe))| summarize(shape, &storage, engine, probe))
        .collect();
    for (inflight, runs) in BOOK_INFLIGHT.into_iter().zip(books) {
        reports.extend(book_reports(&storage, inflight, runs));
    }
    Ok(reports)
}

fn book_run<'a>(
    args: &NotesArgs,
    binary: &'a Path,
    base: &'a Path,
    inflight: u32,
    run: u32,
) -> BookRun<'a> {
    BookRun {
        binary,
        dir: base,
        batch: BOOK_BATCH,
        inflight,
        duration: args.bench.duration,
        warmup: args.bench.warmup,
        seed: args.bench.seed.wrapping_add(u64::from(run)),
    }
}

/// The order book's runs at one shape, a report per mode (no probe: the floor has no handler).
fn book_reports(storage: &str, inflight: u32, runs: Vec<EngineRun>) -> Vec<ShapeReport> {
    [Mode::Verify, Mode::Performance]
        .into_iter()
        .map(|mode| {
            let of_mode: Vec<EngineRun> = runs
                .iter()
                .filter(|run| run.mode == mode.name())
                .cloned()
                .collect();
            let shape = format!("{mode} {BOOK_BATCH} x{inflight}");
            report("order book", shape, storage, of_mode, Vec::new())
        })
        .filter(|report| !report.engine.is_empty())
        .collect()
}

fn engine_options(args: &NotesArgs, shape: &Shape, run: u32) -> BenchOptions {
    BenchOptions {
        accounts: FLOOR_ACCOUNTS,
        batch: shape.batch,
        inflight: shape.inflight,
        runs: 1,
        seed: args.bench.seed.wrapping_add(u64::from(run)),
        reads: 0,
        reads_in_log: false,
        callers: shape.callers,
        connections: 1,
        json: None,
        ..args.bench.clone()
    }
}

/// One probe run: every layout on tmpfs, the per-node layout on a disk.
fn run_probe(
    probe: &Path,
    shape: &Shape,
    batches: u32,
    dir: &Path,
) -> anyhow::Result<Vec<ProbeRun>> {
    let mut command = Command::new(probe);
    command.args([
        format!("batch={}", shape.batch),
        format!("batches={batches}"),
        format!("pad={FLOOR_PAD_BYTES}"),
        format!("dir={}", dir.display()),
    ]);
    if shape.disk {
        command.arg("layout=pernode");
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", probe.display()))?;
    if !output.status.success() {
        bail!(
            "the floor probe failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let runs = parse_probe(&String::from_utf8_lossy(&output.stdout))?;
    for run in &runs {
        engine::outln!(
            "floor {:<24} {:<8} {:>8.1}K commands/s  p99 {:.3} ms",
            shape.name,
            run.layout,
            run.commands_per_s / 1e3,
            run.p99_ms
        );
    }
    Ok(runs)
}

/// Reads the probe's output: a latency line per layout (`e2e LAYOUT ... p99=  N us ...`) and
/// then its rate (`-> N K cmds/s`).
pub fn parse_probe(output: &str) -> anyhow::Result<Vec<ProbeRun>> {
    let mut runs = Vec::new();
    let mut pending: Option<(String, f64)> = None;
    for line in output.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("e2e ") {
            let layout = rest.split_whitespace().next().unwrap_or_default();
            let p99_us = field(rest, "p99=").ok_or_else(|| anyhow!("no p99 in {line:?}"))?;
            pending = Some((layout.to_string(), p99_us));
        } else if let Some(rest) = line.strip_prefix("-> ") {
            let (layout, p99_us) = pending
                .take()
                .ok_or_else(|| anyhow!("a rate without a layout: {line:?}"))?;
            let thousands: f64 = rest
                .split('K')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| anyhow!("no rate in {line:?}"))?;
            runs.push(ProbeRun {
                layout,
                commands_per_s: thousands * 1e3,
                p99_ms: p99_us / 1e3,
            });
        }
    }
    if runs.is_empty() {
        bail!("the floor probe printed no result");
    }
    Ok(runs)
}

/// The number after `key` (spaces allowed) up to its `us` unit.
fn field(line: &str, key: &str) -> Option<f64> {
    let rest = line.split(key).nth(1)?.trim_start();
    rest.split("us").next()?.trim().parse().ok()
}

fn summarize(
    shape: &Shape,
    storage: &str,
    engine: Vec<EngineRun>,
    probe: Vec<ProbeRun>,
) -> ShapeReport {
    report("bank", shape.name.to_string(), storage, engine, probe)
}

fn report(
    workload: &'static str,
    shape: String,
    storage: &str,
    engine: Vec<EngineRun>,
    probe: Vec<ProbeRun>,
) -> ShapeReport {
    let engine_median = spread(engine.iter().map(|r| r.commands_per_s)).0;
    let best = best_layout(&probe);
    let ratio = best.as_ref().map(|(_, median, _)| engine_median / median);
    ShapeReport {
        workload,
        shape,
        storage: storage.to_string(),
        engine_median,
        engine_p99_ms: spread(engine.iter().map(|r| r.p99_ms)).0,
        cpu_s_per_million: spread(engine.iter().map(|r| r.cpu_s_per_million)).0,
        probe_best_median: best.as_ref().map(|b| b.1),
        probe_p99_ms: best.as_ref().map(|b| b.2),
        probe_best_layout: best.map(|b| b.0),
        ratio,
        engine,
        probe,
    }
}

/// The layout with the highest median rate: (layout, median rate, median p99 in ms).
fn best_layout(probe: &[ProbeRun]) -> Option<(String, f64, f64)> {
    let mut layouts: Vec<&str> = probe.iter().map(|r| r.layout.as_str()).collect();
    layouts.sort_unstable();
    layouts.dedup();
    layouts
        .into_iter()
        .map(|layout| {
            let runs = || probe.iter().filter(move |r| r.layout == layout);
            let rate = spread(runs().map(|r| r.commands_per_s)).0;
            (layout.to_string(), rate, spread(runs().map(|r| r.p99_ms)).0)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// One workload's Performance over Verify at one shape: the ratio of the median rates.
#[derive(Debug, Serialize, PartialEq)]
struct ModeRatio {
    workload: &'static str,
    storage: String,
    /// The shape without its mode (`256 x1`).
    shape: String,
    verify_median: f64,
    performance_median: f64,
    ratio: f64,
}

/// Each shape measured in both modes, Performance over Verify.
fn performance_over_verify(reports: &[ShapeReport]) -> Vec<ModeRatio> {
    let verify = Mode::Verify.name();
    reports
        .iter()
        .filter_map(|v| {
            let size = v.shape.strip_prefix(verify)?.trim();
            let performance = format!("{} {size}", Mode::Performance.name());
            let p = reports.iter().find(|p| {
                p.workload == v.workload && p.storage == v.storage && p.shape == performance
            })?;
            Some(ModeRatio {
                workload: v.workload,
                storage: v.storage.clone(),
                shape: size.to_string(),
                verify_median: v.engine_median,
                performance_median: p.engine_median,
                ratio: p.engine_median / v.engine_median,
            })
        })
        .collect()
}

fn print_table(reports: &[ShapeReport], ratios: &[ModeRatio]) {
    engine::outln!(
        "\nfloor report, {} ({})",
        machine(),
        crate::notes::matrix::today()
    );
    engine::outln!(
        "{:<10} {:<26} {:<6} {:>18} {:>9} {:>8} {:>24} {:>9} {:>6}",
        "workload",
        "shape",
        "store",
        "engine/s (range)",
        "p99 ms",
        "CPU s/M",
        "floor/s best layout",
        "p99 ms",
        "ratio"
    );
    for r in reports {
        let (median, low, high) = spread(r.engine.iter().map(|run| run.commands_per_s));
        let engine = format!("{:.0}K ({:.0}-{:.0})", median / 1e3, low / 1e3, high / 1e3);
        let floor = match (&r.probe_best_layout, r.probe_best_median) {
            (Some(layout), Some(rate)) => format!("{:.0}K {layout}", rate / 1e3),
            _ => "-".into(),
        };
        let optional = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
        };
        engine::outln!(
            "{:<10} {:<26} {:<6} {:>18} {:>9.3} {:>8.2} {:>24} {:>9} {:>6}",
            r.workload,
            r.shape,
            r.storage,
            engine,
            r.engine_p99_ms,
            r.cpu_s_per_million,
            floor,
            optional(r.probe_p99_ms, 3),
            optional(r.ratio, 2)
        );
    }
    engine::outln!("\nperformance over verify (median commands/s)");
    engine::outln!(
        "{:<10} {:<12} {:<6} {:>10} {:>12} {:>6}",
        "workload",
        "shape",
        "store",
        "verify/s",
        "performance/s",
        "ratio"
    );
    for r in ratios {
        engine::outln!(
            "{:<10} {:<12} {:<6} {:>9.0}K {:>12.0}K {:>6.2}",
            r.workload,
            r.shape,
            r.storage,
            r.verify_median / 1e3,
            r.performance_median / 1e3,
            r.ratio
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(mode: Mode, commands_per_s: f64) -> EngineRun {
        EngineRun {
            mode: mode.name().to_string(),
            commands_per_s,
            p99_ms: 1.0,
            max_ms: 2.0,
            cpu_s_per_million: 3.0,
        }
    }

    #[test]
    fn each_workload_has_its_performance_over_verify() {
        let bank = |name: &str, rate: f64, mode: Mode| {
            report(
                "bank",
                name.into(),
                "tmpfs",
                vec![run_of(mode, rate)],
                Vec::new(),
            )
        };
        let mut reports = vec![
            bank("verify 256 x1", 800e3, Mode::Verify),
            bank("performance 256 x1", 840e3, Mode::Performance),
            bank("performance 1024 x1", 1500e3, Mode::Performance),
        ];
        let book = vec![
            run_of(Mode::Verify, 400e3),
            run_of(Mode::Performance, 600e3),
            run_of(Mode::Verify, 500e3),
            run_of(Mode::Performance, 700e3),
        ];
        reports.extend(book_reports("tmpfs", 8, book));
        let ratios = performance_over_verify(&reports);
        assert_eq!(ratios.len(), 2, "the 1024 x1 shape has no verify run");
        assert_eq!(
            (ratios[0].workload, ratios[0].shape.as_str()),
            ("bank", "256 x1")
        );
        assert!((ratios[0].ratio - 1.05).abs() < 1e-9);
        assert_eq!(ratios[1].workload, "order book");
        assert_eq!(ratios[1].shape, "256 x8");
        assert!((ratios[1].verify_median - 450e3).abs() < 1e-6);
        assert!((ratios[1].ratio - 650.0 / 450.0).abs() < 1e-9);
    }

    #[test]
    fn the_probe_output_is_read() {
        let output = "\
# header line
e2e ct batch=256 entry=17000B fexec=1 crc32 dir=/dev/shm n=19000  p50=   140.10us p90=   180.00us p99=   230.50us p99.9=   400.00us max=  1200.0us mean=   150.00us
    -> 1564.2K cmds/s, 6110 batches/s
e2e pernode batch=256 entry=17000B fexec=1 crc32 dir=/dev/shm n=19000  p50=   150.10us p90=   190.00us p99=   250.00us p99.9=   500.00us max=  1300.0us mean=   160.00us
    -> 1400.0K cmds/s, 5468 batches/s
";
        let runs = parse_probe(output).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].layout, "ct");
        assert!((runs[0].commands_per_s - 1_564_200.0).abs() < 1e-6);
        assert!((runs[0].p99_ms - 0.2305).abs() < 1e-9);
        assert_eq!(runs[1].layout, "pernode");
        let best = best_layout(&runs).unwrap();
        assert_eq!(best.0, "ct");
        assert!(parse_probe("nothing here\n").is_err());
        assert!(parse_probe("    -> 1.0K cmds/s\n").is_err());
    }

    /// Proves the report reads what `benches/floor` prints (its output, copied from a run of
    /// `floor batch=256 batches=2000 pad=40` and one on the disk).
    #[test]
    fn the_workspace_probes_output_is_read() {
        let output = "\
e2e ct batch=256 entry=16408B dir=/dev/shm n=2000 p50=   134.35us p90=   152.13us p99=  4218.33us p99.9=  4797.35us max=   8305.6us mean=   213.56us
    -> 1171.4K cmds/s, 4576 batches/s
e2e mt2 batch=256 entry=16408B dir=/dev/shm n=2000 p50=    91.64us p90=   130.06us p99=  4184.12us p99.9=  5925.84us max=   8192.1us mean=   170.15us
    -> 1450.4K cmds/s, 5666 batches/s
e2e pernode batch=256 entry=16408B dir=target n=200 p50=   341.03us p90=  3750.12us p99= 11801.24us p99.9= 28872.48us max=  28872.5us mean=  1150.62us
    -> 221.7K cmds/s, 866 batches/s
";
        let runs = parse_probe(output).unwrap();
        let layouts: Vec<&str> = runs.iter().map(|r| r.layout.as_str()).collect();
        assert_eq!(layouts, ["ct", "mt2", "pernode"]);
        assert!((runs[1].commands_per_s - 1_450_400.0).abs() < 1e-6);
        assert!((runs[1].p99_ms - 4.18412).abs() < 1e-9);
        assert!((runs[2].p99_ms - 11.80124).abs() < 1e-9);
        assert_eq!(best_layout(&runs).unwrap().0, "mt2");
    }
}
