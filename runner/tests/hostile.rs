//! The hostile-client suite through `runner hostile`, against real node processes: every
//! hostile case gets its specific answer or a closed connection, the normal clients keep their
//! throughput, a node fed garbage does not grow, and nothing but valid commands changes state.

use std::process::{Command, Stdio};

/// Seconds of each throughput window in the test suite.
const CI_WINDOW_SECONDS: &str = "6";
/// Seconds of garbage in the test suite (`--garbage-duration 60` is the long run, recorded in
/// notes/reliability.md).
const CI_GARBAGE_SECONDS: &str = "10";

/// Proves every case passes, the normal clients keep at least 80% of their throughput, node 1
/// grows by less than 1 MiB under garbage, and the accounts, hashes and WALs show no
/// violation. The suite's table goes straight to the test's output (the normal clients'
/// throughput figure included).
#[test]
fn hostile_clients_get_their_errors_and_cost_little() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("hostile.json");
    // The child writes to the real stdout, so that its table shows in the CI log.
    let status = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args(["hostile", "--seed", "7", "--duration", CI_WINDOW_SECONDS])
        .args(["--garbage-duration", CI_GARBAGE_SECONDS, "--json"])
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(status.success(), "{summary:#}");
    assert_eq!(summary["failed"], 0, "{summary:#}");
    assert_eq!(
        summary["violations"].as_array().unwrap().len(),
        0,
        "{summary:#}"
    );
    assert!(
        summary["cases"].as_array().unwrap().len() >= 15,
        "{summary:#}"
    );
    assert!(
        summary["throughput"]["share"].as_f64().unwrap() >= 0.8,
        "{summary:#}"
    );
    assert!(
        summary["throughput"]["alone"].as_f64().unwrap() > 0.0,
        "{summary:#}"
    );
    assert!(
        summary["memory"]["growth_kib"].as_u64().unwrap() < 1024,
        "{summary:#}"
    );
    assert!(
        summary["memory"]["connections"].as_u64().unwrap() > 0,
        "{summary:#}"
    );
}
