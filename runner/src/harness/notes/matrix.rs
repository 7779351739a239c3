//! `runner local --matrix`: the benchmark matrix as one command, written into
//! `notes/benchmarks.md` (between its matrix markers) with SVG plots in `notes/plots/`.
//!
//! Both modes x {256, 1,024} commands per request x {1, 8} requests in flight, on tmpfs and on
//! a disk, 2,000,000 accounts, snapshots on (every 64 entries, kept 1,000 ms), two runs of
//! `--matrix-duration` each; then, on tmpfs, a sweep of commands per request (16, 64, 256,
//! 1,024; Performance mode, one in flight) and a contended mix in the shape of a well-known
//! ledger benchmark (2,000 accounts, half single-account reads, half transfers).

use super::NotesArgs;
use anyhow::{Context, anyhow};
use bank::Bank;
use engine::Mode;
use engine::node::local::LocalCluster;
use plotters::prelude::*;
use runner::product::bench::{self, BenchOptions};
use runner::product::report::Run;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Accounts prefilled for the matrix and the sweep.
const MATRIX_ACCOUNTS: u64 = 2_000_000;
/// Accounts of the contended mix.
const CONTENDED_ACCOUNTS: u64 = 2_000;
/// Percent of reads in the contended mix.
const CONTENDED_READS_PERCENT: u64 = 50;
/// Runs per configuration.
const MATRIX_RUNS: u32 = 2;
/// Commands per request in the matrix.
const MATRIX_BATCHES: [u32; 2] = [256, 1024];
/// Requests in flight in the matrix.
const MATRIX_INFLIGHT: [u32; 2] = [1, 8];
/// Commands per request in the sweep.
const SWEEP_BATCHES: [u32; 4] = [16, 64, 256, 1024];
/// Where the matrix section of the notes begins and ends.
const BEGIN_MARKER: &str = "<!-- matrix:begin (written by `runner local --matrix`) -->";
/// See [`BEGIN_MARKER`].
const END_MARKER: &str = "<!-- matrix:end -->";

/// Options of the matrix (on `runner local`).
#[derive(clap::Args, Debug, Clone)]
pub struct MatrixOptions {
    /// Runs the benchmark matrix (and the sweep and the contended mix) instead of one
    /// benchmark, and writes the tables and plots into the notes.
    #[arg(long)]
    pub matrix: bool,
    /// Seconds per run in the matrix (the reference ran 60).
    #[arg(long, default_value_t = 60.0, alias = "matrix-seconds")]
    pub matrix_duration: f64,
    /// A directory on a disk for the disk half of the matrix (default ./target/matrix-data).
    #[arg(long)]
    pub disk_dir: Option<PathBuf>,
    /// The notes directory: `benchmarks.md` gets the tables, `plots/` the plots.
    #[arg(long, default_value = "notes")]
    pub notes: PathBuf,
}

/// One measured run and where it belongs.
struct Measured {
    storage: String,
    group: Group,
    run: Run,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Matrix,
    Sweep,
    Contended,
}

/// Runs the matrix, prints every run as it goes, and writes the notes.
pub fn run(args: &NotesArgs) -> anyhow::Result<()> {
    let options = &args.matrix;
    let disk = options
        .disk_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/matrix-data"));
    let mut measured = Vec::new();
    for (storage, base, extras) in [
        ("tmpfs", PathBuf::from("/dev/shm"), true),
        ("disk", disk, false),
    ] {
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        let kind = filesystem(&base);
        let label = if kind == storage {
            kind
        } else {
            format!("{storage} ({kind})")
        };
        engine::outln!("== {label}: {}", base.display());
        measured.extend(on_storage(args, &label, &base, extras)?);
    }
    let machine = machine();
    let date = today();
    let markdown = markdown(&measured, options.matrix_duration, &machine, &date);
    write_section(
        &options.notes.join("benchmarks.md"),
        &markdown,
        (BEGIN_MARKER, END_MARKER),
    )?;
    let plots = options.notes.join("plots");
    std::fs::create_dir_all(&plots)?;
    plot_configurations(&plots.join("matrix-throughput.svg"), &measured)?;
    plot_latency(&plots.join("matrix-latency.svg"), &measured)?;
    plot_sweep(&plots.join("batch-sweep.svg"), &measured)?;
    engine::outln!(
        "wrote the matrix section of {} and the plots in {}",
        options.notes.join("benchmarks.md").display(),
        plots.display()
    );
    Ok(())
}

/// The matrix on one storage (and, when `extras`, the sweep and the contended mix).
fn on_storage(
    args: &NotesArgs,
    storage: &str,
    base: &Path,
    extras: bool,
) -> anyhow::Result<Vec<Measured>> {
    let dir = runner::run_dir(Some(base.to_path_buf()))?;
    let cluster = LocalCluster::start(dir.path(), 3, Bank, |config| {
        config.entry_commands_max = engine::internals::entry::ENTRY_COMMANDS_MAX;
        config.capacity_bytes = args.capacity_bytes;
        args.storage.apply(config);
    })?;
    let config = cluster.client_config();
    let operator = cluster.operator_config();
    let options =
        |batch, inflight, accounts, reads| matrix_options(args, (batch, inflight), accounts, reads);
    let both = [Some(Mode::Verify), Some(Mode::Performance)];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut measured = Vec::new();
    let mut keep = |group, runs: Vec<Run>| {
        measured.extend(runs.into_iter().map(|run| Measured {
            storage: storage.to_string(),
            group,
            run,
        }));
    };
    runtime.block_on(async {
        cluster
            .wait_for_leader(Duration::from_secs(10))
            .await
            .context("no leader elected")?;
        for batch in MATRIX_BATCHES {
            for inflight in MATRIX_INFLIGHT {
                let runs = bench::benchmark(
                    &config,
                    Some(&operator),
                    &options(batch, inflight, MATRIX_ACCOUNTS, 0),
                    &both,
                )
                .await?;
                keep(Group::Matrix, runs);
            }
        }
        if extras {
            for batch in SWEEP_BATCHES {
                let sweep = options(batch, 1, MATRIX_ACCOUNTS, 0);
                let runs =
                    bench::benchmark(&config, Some(&operator), &sweep, &[Some(Mode::Performance)])
                        .await?;
                keep(Group::Sweep, runs);
            }
            let contended = options(256, 1, CONTENDED_ACCOUNTS, CONTENDED_READS_PERCENT);
            keep(
                Group::Contended,
                bench::benchmark(&config, Some(&operator), &contended, &both).await?,
            );
        }
        anyhow::Ok(())
    })?;
    drop(cluster);
    Ok(measured)
}

/// The benchmark of one cell: `batch` commands per request, `inflight` requests in flight,
/// `accounts` accounts and `reads` percent of reads.
fn matrix_options(
    args: &NotesArgs,
    (batch, inflight): (u32, u32),
    accounts: u64,
    reads: u64,
) -> BenchOptions {
    BenchOptions {
        accounts,
        batch,
        inflight,
        duration: args.matrix.matrix_duration,
        commands: None,
        runs: MATRIX_RUNS,
        warmup: 1.0,
        seed: args.bench.seed,
        json: None,
        reads,
        reads_in_log: false,
        callers: None,
        connections: 1,
        rate: None,
        prefill_rate: None,
    }
}

/// The file system type `path` lives on, from /proc/mounts.
pub(crate) fn filesystem(path: &Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            path.starts_with(point)
                .then(|| (point.len(), kind.to_string()))
        })
        .max()
        .map_or_else(|| "unknown".into(), |(_, kind)| kind)
}

/// CPU model, cores and memory, from /proc.
pub(crate) fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_string();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    format!("{model}, {cores} cores, {memory_gib:.0} GiB")
}

/// Today's date (UTC), from the clock.
pub(crate) fn today() -> String {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    now.split('T').next().unwrap_or(&now).to_string()
}

/// Median, least and largest of some values.
pub(crate) fn spread(values: impl Iterator<Item = f64>) -> (f64, f64, f64) {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (median, values[0], values[n - 1])
}

/// One configuration's runs summarized.
struct Row {
    label: String,
    storage: String,
    mode: String,
    batch: u32,
    inflight: u32,
    rate: (f64, f64, f64),
    p50: (f64, f64, f64),
    p99: (f64, f64, f64),
    cpu: f64,
    runs: usize,
}

fn rows(measured: &[Measured], group: Group) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for m in measured.iter().filter(|m| m.group == group) {
        let same = |r: &Row| {
            r.storage == m.storage
                && r.mode == m.run.mode
                && r.batch == m.run.batch
                && r.inflight == m.run.inflight
        };
        if rows.iter().any(same) {
            continue;
        }
        let runs: Vec<&Run> = measured
            .iter()
            .filter(|o| {
                o.group == group
                    && o.storage == m.storage
                    && o.run.mode == m.run.mode
                    && o.run.batch == m.run.batch
                    && o.run.inflight == m.run.inflight
            })
            .map(|o| &o.run)
            .collect();
        let storage_short = m.storage.split_whitespace().next().unwrap_or("");
        rows.push(Row {
            label: format!(
                "{storage_short} {} {}x{}",
                m.run.mode, m.run.batch, m.run.inflight
            ),
            storage: m.storage.clone(),
            mode: m.run.mode.clone(),
            batch: m.run.batch,
            inflight: m.run.inflight,
            rate: spread(runs.iter().map(|r| r.commands_per_s)),
            p50: spread(runs.iter().map(|r| r.latency_ms.p50)),
            p99: spread(runs.iter().map(|r| r.latency_ms.p99)),
            cpu: spread(runs.iter().map(|r| r.cpu_s_per_million)).0,
            runs: runs.len(),
        });
    }
    rows
}

fn thousands(rate: f64) -> String {
    format!("{:.1}K", rate / 1e3)
}

fn table(out: &mut String, rows: &[Row]) {
    let _ = writeln!(
        out,
        "| storage | mode | per request | in flight | runs | completed commands/s median (range) | p50 ms | p99 ms (range) | CPU s per M commands |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} ({}-{}) | {:.3} | {:.3} ({:.3}-{:.3}) | {:.2} |",
            r.storage,
            r.mode,
            r.batch,
            r.inflight,
            r.runs,
            thousands(r.rate.0),
            thousands(r.rate.1),
            thousands(r.rate.2),
            r.p50.0,
            r.p99.0,
            r.p99.1,
            r.p99.2,
            r.cpu
        );
    }
}

fn markdown(measured: &[Measured], seconds: f64, machine: &str, date: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{BEGIN_MARKER}");
    let _ = writeln!(out);
    let _ = writeln!(out, "## The benchmark matrix, {date}");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "`cargo run --release -p runner -- local --matrix --matrix-duration {seconds}` on {machine}: three \
         nodes in one process over loopback TCP, {MATRIX_ACCOUNTS} prefilled accounts, snapshots every 64 \
         entries kept 1,000 ms, {MATRIX_RUNS} runs of {seconds} s per configuration after 1 s of warm-up. \
         CPU seconds are the whole process's (three nodes and the client) per million completed \
         commands. Every run ended with the audit unchanged and the replicas converged (the runner \
         stops otherwise)."
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "![throughput per configuration](plots/matrix-throughput.svg)"
    );
    let _ = writeln!(
        out,
        "![latency per configuration](plots/matrix-latency.svg)"
    );
    let _ = writeln!(out);
    table(&mut out, &rows(measured, Group::Matrix));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "### Commands per request (tmpfs, Performance mode, one request in flight)"
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "![throughput per batch size](plots/batch-sweep.svg)");
    let _ = writeln!(out);
    table(&mut out, &rows(measured, Group::Sweep));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "### Contended mix ({CONTENDED_ACCOUNTS} accounts, {CONTENDED_READS_PERCENT}% single-account reads, the rest transfers; tmpfs, one request in flight)"
    );
    let _ = writeln!(out);
    table(&mut out, &rows(measured, Group::Contended));
    let _ = writeln!(out);
    let _ = writeln!(out, "{END_MARKER}");
    out
}

/// Replaces the section of `path` between `markers` (or appends `section`, which begins and
/// ends with them).
pub(crate) fn write_section(
    path: &Path,
    section: &str,
    (begin_marker, end_marker): (&str, &str),
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let updated = match (text.find(begin_marker), text.find(end_marker)) {
        (Some(begin), Some(end)) if end > begin => {
            let after = end + end_marker.len();
            format!("{}{}{}", &text[..begin], section.trim_end(), &text[after..])
        }
        _ => format!("{}\n{section}", text.trim_end()),
    };
    std::fs::write(path, updated).with_context(|| format!("writing {}", path.display()))
}

pub(crate) fn plot_error<E: std::fmt::Display>(error: E) -> anyhow::Error {
    anyhow!("plotting: {error}")
}

/// Horizontal bars: median throughput per configuration, the range as a line.
fn plot_configurations(path: &Path, measured: &[Measured]) -> anyhow::Result<()> {
    let rows = rows(measured, Group::Matrix);
    let bars: Vec<(String, f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            (
                r.label.clone(),
                r.rate.0 / 1e6,
                r.rate.1 / 1e6,
                r.rate.2 / 1e6,
            )
        })
        .collect();
    horizontal_bars(
        path,
        "Completed commands/s per configuration (millions; line: range)",
        "million commands/s",
        &bars,
    )
}

/// Horizontal bars: p50 and p99 per configuration.
fn plot_latency(path: &Path, measured: &[Measured]) -> anyhow::Result<()> {
    let rows = rows(measured, Group::Matrix);
    let bars: Vec<(String, f64, f64, f64)> = rows
        .iter()
        .map(|r| (format!("{} p99", r.label), r.p99.0, r.p99.1, r.p99.2))
        .chain(
            rows.iter()
                .map(|r| (format!("{} p50", r.label), r.p50.0, r.p50.1, r.p50.2)),
        )
        .collect();
    horizontal_bars(
        path,
        "Completion latency per configuration (ms; median of runs, line: range)",
        "ms",
        &bars,
    )
}

fn horizontal_bars(
    path: &Path,
    title: &str,
    unit: &str,
    bars: &[(String, f64, f64, f64)],
) -> anyhow::Result<()> {
    let n = bars.len().max(1);
    let top = bars.iter().map(|b| b.3).fold(0.0, f64::max).max(1e-9);
    let height = 28 * n as u32 + 90;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(8)
        .build_cartesian_2d(0.0..top * 1.6, 0.0..n as f64)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(unit)
        .draw()
        .map_err(plot_error)?;
    let row = |i: usize| (n - 1 - i) as f64;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            Rectangle::new(
                [(0.0, row(i) + 0.15), (b.1, row(i) + 0.85)],
                BLUE.mix(0.55).filled(),
            )
        }))
        .map_err(plot_error)?;
    chart
        .draw_series(
            bars.iter().enumerate().map(|(i, b)| {
                PathElement::new(vec![(b.2, row(i) + 0.5), (b.3, row(i) + 0.5)], BLACK)
            }),
        )
        .map_err(plot_error)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            Text::new(
                format!("{}: {:.3}", b.0, b.1),
                (b.3 + top * 0.02, row(i) + 0.75),
                ("sans-serif", 13),
            )
        }))
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

/// Throughput and p99 against commands per request.
fn plot_sweep(path: &Path, measured: &[Measured]) -> anyhow::Result<()> {
    let rows = rows(measured, Group::Sweep);
    let points: Vec<(f64, f64, f64)> = rows
        .iter()
        .map(|r| (f64::from(r.batch).log2(), r.rate.0 / 1e6, r.p99.0))
        .collect();
    let top = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Commands per request: throughput (Performance mode, one in flight)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(3.5..11.8, 0.0..top * 1.25)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_labels(8)
        .x_label_formatter(&|x| format!("{:.0}", 2f64.powf(*x)))
        .x_desc("commands per request (log scale)")
        .y_desc("million commands/s")
        .draw()
        .map_err(plot_error)?;
    chart
        .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), BLUE))
        .map_err(plot_error)?;
    chart
        .draw_series(
            points
                .iter()
                .map(|p| Circle::new((p.0, p.1), 4, BLUE.filled())),
        )
        .map_err(plot_error)?;
    chart
        .draw_series(points.iter().map(|p| {
            Text::new(
                format!("{:.2}M, p99 {:.2} ms", p.1, p.2),
                (p.0 + 0.1, p.1 + top * 0.03),
                ("sans-serif", 13),
            )
        }))
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the section replaces itself between its markers and is appended otherwise.
    #[test]
    fn the_section_replaces_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("benchmarks.md");
        std::fs::write(&path, "# Benchmarks\n\nolder text\n").unwrap();
        write_section(
            &path,
            &format!("{BEGIN_MARKER}\none\n{END_MARKER}\n"),
            (BEGIN_MARKER, END_MARKER),
        )
        .unwrap();
        write_section(
            &path,
            &format!("{BEGIN_MARKER}\ntwo\n{END_MARKER}\n"),
            (BEGIN_MARKER, END_MARKER),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Benchmarks\n\nolder text\n"), "{text}");
        assert!(text.contains("two") && !text.contains("one"), "{text}");
        assert_eq!(text.matches(BEGIN_MARKER).count(), 1);
    }

    /// Proves medians and ranges, the file system lookup and the date's shape.
    #[test]
    fn spread_and_names() {
        assert_eq!(spread([3.0, 1.0, 2.0].into_iter()), (2.0, 1.0, 3.0));
        assert_eq!(spread([4.0, 1.0].into_iter()), (2.5, 1.0, 4.0));
        assert!(!filesystem(Path::new("/")).is_empty());
        assert_eq!(today().len(), 10);
    }
}
