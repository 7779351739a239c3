//! Real-process chaos through `runner chaos`: node processes killed with SIGKILL, restarted
//! and paused with SIGSTOP under a Bank workload; nothing acknowledged is lost.

mod common;

/// Seconds of faults the test suite runs (`runner chaos --duration 180` is the long run,
/// recorded in notes/reliability.md).
const CI_CHAOS_SECONDS: u64 = 15;

/// Proves that after kills and pauses I1-I7 hold, every request has an outcome, and faults
/// were in fact injected.
#[test]
fn kills_and_pauses_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let seconds = CI_CHAOS_SECONDS.to_string();
    let summary = common::run_json(
        dir.path(),
        &["chaos", "--duration", &seconds, "--seed", "3"],
    );
    assert_eq!(summary["violations"], 0, "{summary}");
    assert_eq!(summary["unknown"], 0, "{summary}");
    assert!(summary["kills"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["acknowledged"].as_u64().unwrap() > 0, "{summary}");
}
