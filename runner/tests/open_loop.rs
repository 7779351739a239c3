//! `runner local --rate`: the open loop sends at fixed times whatever the answers. Over real
//! processes' worth of machinery (three nodes, TCP, WALs) the number of requests measured is
//! set by the clock, not by how fast the cluster answers: those due in the measured window,
//! every one answered.

mod common;

use common::run_json;

/// Requests per second offered.
const RATE: f64 = 40.0;
/// Seconds measured.
const SECONDS: f64 = 2.0;
/// Commands per request.
const BATCH: u64 = 16;

#[test]
fn the_open_loop_sends_what_is_due_and_counts_it_all() {
    let dir = tempfile::tempdir().unwrap();
    let summary = run_json(
        dir.path(),
        &[
            "local",
            "--mode",
            "performance",
            "--accounts",
            "1000",
            "--batch",
            &BATCH.to_string(),
            "--rate",
            &RATE.to_string(),
            "--duration",
            &SECONDS.to_string(),
            "--warmup",
            "0.5",
            "--runs",
            "1",
        ],
    );
    let run = &summary["runs"][0];
    assert_eq!(run["offered_requests_per_s"].as_f64(), Some(RATE), "{run}");
    assert_eq!(run["failed"].as_u64(), Some(0), "{run}");
    assert_eq!(run["unknown"].as_u64(), Some(0), "{run}");
    let requests = run["commands"].as_u64().unwrap() / BATCH;
    // Due every 25 ms from the warm-up's start; those due in the 2 s after it are measured.
    let due = (RATE * SECONDS) as u64;
    assert!(
        requests.abs_diff(due) <= 1,
        "{requests} requests measured, {due} due: {run}"
    );
    assert!(run["latency_ms"]["p50"].as_f64().unwrap() > 0.0, "{run}");
}

/// Proves the closed loop of the one load client ends a run at `--commands` answered
/// commands, sends `--reads` as reads off the log (and through it with `--reads-in-log`),
/// and that every one is answered with the total unchanged (the run fails otherwise).
#[test]
fn a_counted_run_with_reads_answers_them_all() {
    const COMMANDS: u64 = 4_000;
    for in_log in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["local", "--mode", "performance", "--accounts", "1000"];
        args.extend(["--batch", "16", "--inflight", "4", "--reads", "50"]);
        args.extend(["--commands", "4000", "--warmup", "0", "--runs", "1"]);
        if in_log {
            args.push("--reads-in-log");
        }
        let summary = run_json(dir.path(), &args);
        let run = &summary["runs"][0];
        let commands = run["commands"].as_u64().unwrap();
        // The run stops once the count is reached; requests still in flight then add theirs.
        assert!(
            (COMMANDS..COMMANDS + 4 * 16).contains(&commands),
            "{commands} commands: {run}"
        );
        assert_eq!(run["reads_percent"].as_u64(), Some(50), "{run}");
        assert_eq!(run["failed"].as_u64(), Some(0), "{run}");
        assert_eq!(run["unknown"].as_u64(), Some(0), "{run}");
    }
}
