//! Partitions between real node processes through our proxy (`runner partition`): in every
//! scenario the majority side keeps committing, an isolated leader steps down, and I1-I7 hold.

mod common;

/// Seconds each partition lasts in the test suite.
const CI_PARTITION_SECONDS: u64 = 3;

/// Proves every scenario passes its checks and reports what it saw.
#[test]
fn every_partition_scenario_keeps_the_majority_committing() {
    let dir = tempfile::tempdir().unwrap();
    let seconds = CI_PARTITION_SECONDS.to_string();
    let summary = common::run_json(
        dir.path(),
        &["partition", "--duration", &seconds, "--seed", "11"],
    );
    assert_eq!(summary["violations"], 0, "{summary}");
    let scenarios = summary["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 8, "{summary}");
    for scenario in scenarios {
        assert!(
            scenario["acknowledged_during_partition"].as_u64().unwrap() > 0,
            "{scenario}"
        );
    }
    let isolated = scenarios
        .iter()
        .find(|s| s["scenario"] == "leader-isolated")
        .unwrap();
    assert!(isolated["leader_stepped_down_ms"].is_u64(), "{isolated}");
}
