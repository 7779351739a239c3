//! The other-language callers of `examples/callers/` against a real three-node cluster and a
//! real gateway, run by their real interpreters: Python (standard library only) and Node.js
//! (its own fetch). Each opens accounts, transfers with an idempotency key, retries the same
//! request, is refused a key reused for other commands, and reads the balances.
//!
//! `.ci/run` installs both interpreters and checks they are there, so CI always runs these;
//! on a machine without one, its test says so on stderr and checks nothing else.

mod common;

use common::gateway::{Gateway, TOKEN};
use common::start_cluster;
use std::path::Path;
use std::process::Command;

/// Runs `program script URL TOKEN_FILE` twice against one cluster and gateway (the script
/// picks fresh random accounts when given no first id, so that it can run again); checks each
/// run exited 0 and said ok, that the balances it left are what one transfer of 30 leaves,
/// and that the two runs made no money.
fn run_caller(program: &str, script: &str) {
    if Command::new(program).arg("--version").output().is_err() {
        eprintln!("SKIPPED: {program} is not installed here; .ci/run installs it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _) = start_cluster(dir.path(), |_| {});
    let gateway = Gateway::start(dir.path(), &nodes.cluster_file, "gateway");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/callers")
        .join(script);
    let mut opened = Vec::new();
    for run in 1..=2 {
        let output = Command::new(program)
            .arg(&script)
            .arg(format!("http://{}", gateway.address))
            .arg(&gateway.token_file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "run {run} of {program} {}:\n{stdout}\n{stderr}",
            script.display()
        );
        let said: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(said["ok"], true, "{said}");
        assert_eq!(said["balances"], serde_json::json!([70, 30]), "{said}");
        opened.push(
            said["accounts"][0]
                .as_u64()
                .expect("the first account's id"),
        );
    }
    assert_ne!(opened[0], opened[1], "both runs used the same accounts");
    let body = format!(r#"[{{"Get": {{"id": {}}}}}, "Audit"]"#, opened[0]);
    let (status, read) = gateway.post("/v1/reads", &body, Some(TOKEN), &[]);
    assert_eq!(status, 200, "{read}");
    assert_eq!(read[0]["output"]["Account"]["balance"], 70, "{read}");
    assert_eq!(
        read[1]["output"]["Audit"]["total"], "200",
        "no money made (a u128 is a JSON string everywhere): {read}"
    );
}

/// Proves a Python program with only the standard library calls the Bank exactly once per key,
/// and can run again.
#[test]
fn python_calls_the_bank_through_the_gateway() {
    run_caller("python3", "python/bank.py");
}

/// Proves a Node.js program with no packages calls the Bank exactly once per key, and can run
/// again.
#[test]
fn node_calls_the_bank_through_the_gateway() {
    run_caller("node", "node/bank.mjs");
}
