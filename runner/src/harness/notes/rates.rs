//! `runner local --rate-sweep R1,R2,...`: open-loop runs (`--rate`) at each offered rate in
//! requests per second, one cluster on tmpfs, Performance mode; the latency against the
//! completed throughput goes into `notes/benchmarks.md` (between its rates markers) and
//! `notes/plots/rate-latency.svg`, beside the matrix's plots.

use super::NotesArgs;
use crate::notes::matrix::{machine, plot_error, spread, today, write_section};
use anyhow::Context;
use bank::Bank;
use engine::Mode;
use engine::node::local::LocalCluster;
use plotters::prelude::*;
use runner::product::bench::{self, BenchOptions};
use runner::product::report::Run;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// Where the rates section of the notes begins and ends.
const BEGIN_MARKER: &str = "<!-- rates:begin (written by `runner local --rate-sweep`) -->";
/// See [`BEGIN_MARKER`].
const END_MARKER: &str = "<!-- rates:end -->";

/// Options of the sweep (on `runner local`).
#[derive(clap::Args, Debug, Clone)]
pub struct RateOptions {
    /// Runs open-loop runs at each of these rates (requests per second, comma-separated)
    /// instead of one benchmark, and writes latency against throughput into the notes.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub rate_sweep: Vec<f64>,
}

/// One offered rate's runs summarized: (median, least, largest) of each measure.
struct Point {
    offered: f64,
    completed: (f64, f64, f64),
    p50: (f64, f64, f64),
    p99: (f64, f64, f64),
    p999: (f64, f64, f64),
    max: (f64, f64, f64),
    /// The client's lateness in sending (inside the latencies), p99 in ms.
    late_p99: (f64, f64, f64),
    runs: usize,
}

/// Runs the sweep, prints every run as it goes, and writes the notes.
pub fn run(args: &NotesArgs) -> anyhow::Result<()> {
    let rates = &args.rates.rate_sweep;
    if let Some(bad) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        anyhow::bail!("--rate-sweep: {bad} is not a positive number of requests per second");
    }
    let dir = runner::run_dir(args.dir.clone())?;
    let cluster = LocalCluster::start(dir.path(), 3, Bank, |config| {
        config.entry_commands_max = args.entry_commands;
        config.pipeline_entries_max = args.pipeline_entries;
        config.capacity_bytes = args.capacity_bytes;
        config.mode = Mode::Performance;
        args.storage.apply(config);
    })?;
    let config = cluster.client_config();
    let operator = cluster.operator_config();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut runs: Vec<Run> = Vec::new();
    runtime.block_on(async {
        cluster
            .wait_for_leader(Duration::from_secs(10))
            .await
            .context("no leader elected")?;
        for &rate in rates {
            let options = BenchOptions {
                rate: Some(rate),
                json: None,
                ..args.bench.clone()
            };
            let modes = [Some(Mode::Performance)];
            runs.extend(bench::benchmark(&config, Some(&operator), &options, &modes).await?);
        }
        anyhow::Ok(())
    })?;
    drop(cluster);
    let points = points(&runs);
    let notes = &args.matrix.notes;
    let section = markdown(&points, &args.bench);
    let markers = (BEGIN_MARKER, END_MARKER);
    write_section(&notes.join("benchmarks.md"), &section, markers)?;
    let plots = notes.join("plots");
    std::fs::create_dir_all(&plots)?;
    plot(&plots.join("rate-latency.svg"), &points, args.bench.batch)?;
    engine::outln!(
        "wrote the rates section of {} and {}",
        notes.join("benchmarks.md").display(),
        plots.join("rate-latency.svg").display()
    );
    Ok(())
}

/// The runs grouped by offered rate, in the order given.
fn points(runs: &[Run]) -> Vec<Point> {
    let mut offered: Vec<f64> = Vec::new();
    for rate in runs.iter().filter_map(|r| r.offered_requests_per_s) {
        if !offered.contains(&rate) {
            offered.push(rate);
        }
    }
    offered
        .into_iter()
        .map(|rate| {
            let same: Vec<&Run> = runs
                .iter()
                .filter(|r| r.offered_requests_per_s == Some(rate))
                .collect();
            let of = |f: fn(&Run) -> f64| spread(same.iter().map(|r| f(r)));
            Point {
                offered: rate,
                completed: of(|r| r.commands_per_s),
                p50: of(|r| r.latency_ms.p50),
                p99: of(|r| r.latency_ms.p99),
                p999: of(|r| r.latency_ms.p999),
                max: of(|r| r.latency_ms.max),
                late_p99: of(|r| r.send_late_ms.as_ref().map_or(0.0, |l| l.p99)),
                runs: same.len(),
            }
        })
        .collect()
}

fn markdown(points: &[Point], options: &BenchOptions) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{BEGIN_MARKER}");
    let _ = writeln!(
        out,
        "## Open loop: latency against throughput ({}, {})\n",
        today(),
        machine()
    );
    let _ = writeln!(
        out,
        "`runner local --rate-sweep ...`: Performance mode, {} commands per request, {} accounts, \
         tmpfs, {} runs of {} s per rate. Requests are sent at fixed times whatever the answers, \
         and latency counts from each request's due time (coordinated omission corrected); \
         \"sent late\" is how long after its due time the client sent a request (a pacing \
         thread and the client's event loop), which is inside the latency.\n",
        options.batch, options.accounts, options.runs, options.duration
    );
    let _ = writeln!(
        out,
        "| offered requests/s | offered commands/s | completed commands/s median (range) | p50 ms | p99 ms (range) | p99.9 ms | max ms | sent late, p99 ms | runs |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for p in points {
        let _ = writeln!(
            out,
            "| {:.0} | {:.0}K | {:.0}K ({:.0}-{:.0}K) | {:.3} | {:.3} ({:.3}-{:.3}) | {:.3} | {:.3} | {:.3} | {} |",
            p.offered,
            p.offered * f64::from(options.batch) / 1e3,
            p.completed.0 / 1e3,
            p.completed.1 / 1e3,
            p.completed.2 / 1e3,
            p.p50.0,
            p.p99.0,
            p.p99.1,
            p.p99.2,
            p.p999.0,
            p.max.0,
            p.late_p99.0,
            p.runs
        );
    }
    let _ = writeln!(
        out,
        "\n![latency against throughput](plots/rate-latency.svg)"
    );
    let _ = writeln!(out, "{END_MARKER}");
    out
}

/// One line of the plot: its label, its value at a point, its colour.
type Line = (&'static str, fn(&Point) -> f64, RGBColor);

/// p50, p99 and p99.9 (log scale) against completed commands per second.
fn plot(path: &Path, points: &[Point], batch: u32) -> anyhow::Result<()> {
    let right = points
        .iter()
        .map(|p| p.completed.0 / 1e6)
        .fold(0.0, f64::max);
    let top = points
        .iter()
        .map(|p| p.p999.0)
        .fold(0.0, f64::max)
        .max(0.01);
    let bottom = points
        .iter()
        .map(|p| p.p50.0)
        .fold(top, f64::min)
        .max(0.001);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let caption = format!("Open loop: latency against throughput ({batch} per request)");
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            0.0..(right * 1.1).max(1e-6),
            (bottom / 1.5..top * 1.5).log_scale(),
        )
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("completed million commands/s")
        .y_desc("latency from due time, ms (log scale)")
        .draw()
        .map_err(plot_error)?;
    let lines: [Line; 3] = [
        ("p50", |p| p.p50.0, BLUE),
        ("p99", |p| p.p99.0, RED),
        ("p99.9", |p| p.p999.0, BLACK),
    ];
    for (label, value, color) in lines {
        let series = points.iter().map(|p| (p.completed.0 / 1e6, value(p)));
        chart
            .draw_series(LineSeries::new(series, color))
            .map_err(plot_error)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)?;
    root.present().map_err(plot_error)?;
    Ok(())
}
