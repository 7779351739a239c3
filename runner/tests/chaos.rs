//! Real-process chaos through `runner chaos`: node processes killed with SIGKILL, restarted
//! and paused with SIGSTOP under a Bank workload; nothing acknowledged is lost.

mod common;

use std::path::Path;

/// Seconds of faults the test suite runs (`runner chaos --duration 180` is the long run,
/// recorded in notes/reliability.md).
const CI_CHAOS_SECONDS: u64 = 15;

/// Proves that after kills and pauses I1-I7 hold, every request has an outcome, and faults
/// were in fact injected, with the WAL on its own thread in each node.
#[test]
fn kills_and_pauses_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    chaos_loses_nothing(dir.path(), 3, "thread");
    assert!(
        node_logs(dir.path()).contains("WAL writes and fsyncs run on the WAL's own thread"),
        "the nodes ran their WAL on its thread"
    );
}

/// Proves the same with the WAL's writes and fsyncs on each node's own thread (`--wal-io
/// inline`, under the temporary directory, a disk's file system here, where each fsync holds
/// the node): a node killed or paused in the middle of its WAL work loses nothing
/// acknowledged.
#[test]
fn kills_and_pauses_lose_nothing_with_the_wal_on_the_node_thread() {
    let dir = tempfile::tempdir().unwrap();
    chaos_loses_nothing(dir.path(), 4, "inline");
    assert!(
        node_logs(dir.path()).contains("WAL writes and fsyncs run on the node's thread"),
        "the nodes ran their WAL inline"
    );
}

/// Runs `runner chaos` with `seed` and `--wal-io wal_io`, keeping its run directory under
/// `dir`, and checks its summary: no violation, no unknown outcome, kills and acknowledged
/// requests both happened.
fn chaos_loses_nothing(dir: &Path, seed: u64, wal_io: &str) {
    let seconds = CI_CHAOS_SECONDS.to_string();
    let seed = seed.to_string();
    let summary = common::run_json(
        dir,
        &[
            "chaos",
            "--duration",
            &seconds,
            "--seed",
            &seed,
            "--wal-io",
            wal_io,
            "--keep",
        ],
    );
    assert_eq!(summary["violations"], 0, "{summary}");
    assert_eq!(summary["unknown"], 0, "{summary}");
    assert!(summary["kills"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["acknowledged"].as_u64().unwrap() > 0, "{summary}");
}

/// Every node log of the run directories under `dir`, one after the other.
fn node_logs(dir: &Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .flat_map(|run| {
            std::fs::read_dir(run.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|f| f.file_name().to_string_lossy().ends_with(".log"))
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect()
}
