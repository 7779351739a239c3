//! Real-process chaos through `runner chaos`: node processes killed with SIGKILL, restarted
//! and paused with SIGSTOP under a Bank workload; nothing acknowledged is lost.

use std::process::Command;

/// Seconds of faults the test suite runs (`runner chaos --duration 180` is the long run,
/// recorded in notes/reliability.md).
const CI_CHAOS_SECONDS: u64 = 15;

/// Proves that after kills and pauses I1-I7 hold, every request has an outcome, and faults
/// were in fact injected.
#[test]
fn kills_and_pauses_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("chaos.json");
    let output = Command::new(env!("CARGO_BIN_EXE_runner"))
        .args([
            "chaos",
            "--duration",
            &CI_CHAOS_SECONDS.to_string(),
            "--seed",
            "3",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(summary["violations"], 0, "{summary}");
    assert_eq!(summary["unknown"], 0, "{summary}");
    assert!(summary["kills"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["acknowledged"].as_u64().unwrap() > 0, "{summary}");
}
