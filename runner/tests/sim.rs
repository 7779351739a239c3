//! The deterministic simulator through `runner sim`: hundreds of seeds with faults and no
//! invariant violated, and a seed that replays its run exactly.

use std::process::Command;

/// Seeds the test suite runs (the issue asks for at least 200).
const CI_SEEDS: u64 = 1_000;

fn runner() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner"))
}

/// Proves I1-I7 hold on every one of [`CI_SEEDS`] seeds (crashes, partitions, loss,
/// duplication, slow fsyncs), and that the JSON summary says so.
#[test]
fn hundreds_of_seeds_violate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sim.json");
    let output = runner()
        .args([
            "sim",
            "--seeds",
            &CI_SEEDS.to_string(),
            "--seed",
            "1",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "runner sim failed:\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(summary["seeds"], CI_SEEDS);
    assert_eq!(summary["violations"], 0, "{stderr}");
    assert_eq!(summary["failing_seeds"], serde_json::json!([]));
    let table = String::from_utf8_lossy(&output.stdout);
    let crashes = summed(&table, "crashes");
    assert!(crashes > CI_SEEDS, "faults were injected: {table}");
}

/// The column `name` of the summary table `runner sim` prints.
fn summed(table: &str, name: &str) -> u64 {
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let at = header.iter().position(|&h| h == name).unwrap();
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    row[at].parse().unwrap()
}

/// Proves a seed's step-by-step account is written when `RUST_LOG` asks for it, and only
/// then: every entry first seen committed has its line (as many as the summary counts: the
/// log's rate limit drops none), and the role changes are there.
#[test]
fn a_seed_is_traced_step_by_step_on_request() {
    let run = |filter: Option<&str>| {
        let mut command = runner();
        command.args(["sim", "--seeds", "1", "--seed", "77"]);
        command.env_remove("RUST_LOG");
        if let Some(filter) = filter {
            command.env("RUST_LOG", filter);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        (String::from_utf8_lossy(&output.stdout).into_owned(), stderr)
    };
    let (table, traced) = run(Some("engine::sim=trace"));
    let lines = |what: &str| traced.lines().filter(|l| l.contains(what)).count() as u64;
    assert_eq!(lines("committed, first seen"), summed(&table, "committed"));
    assert!(lines(" role ") >= 2, "a candidate, then a leader: {traced}");
    assert_eq!(lines("rate limit"), 0);
    let (_, quiet) = run(None);
    assert!(!quiet.contains("TRACE"), "{quiet}");
}

/// Proves one seed replays the same run: every count of the verbose line is equal.
#[test]
fn a_seed_replays_exactly() {
    let run = || {
        let output = runner()
            .args(["sim", "--seeds", "3", "--seed", "77", "--verbose"])
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .filter(|l| l.starts_with("seed "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let first = run();
    assert_eq!(first.len(), 3, "{first:?}");
    assert_eq!(first, run());
}

/// Seeds past [`CI_SEEDS`] where a replica rebuilt with its votes lost is asked for a vote
/// in a term it may have voted in already: the `forget-lost-votes` mutation (votes as if
/// nothing were lost) makes each of them elect two leaders in one term (I7), and none of the
/// first thousand seeds reaches that. Found by running the mutation over 16,000 seeds from 0
/// (`runner sim --seeds 10000 --seed 0`, then 6,000 from 10000, built with
/// `.ci/mutants/forget-lost-votes`, after the simulated nodes began to keep the apply
/// journal, whose unsynced writes changed what each crash draws): these four fail with I7;
/// when the simulator's draws change, find them again that way.
const LOST_VOTE_SEEDS: [u64; 4] = [5817, 11_600, 11_694, 14_204];

/// Seeds where a replica rebuilt after its hard state was lost (no term, no vote, no members)
/// helped replace committed entries (I4). Found in 10,000 seeds from 120000 (165093 in
/// 5,000 from 165000).
/// - 123335: refilling its log from the start while repairing, it passed members lists older
///   than the one in force when it lost its entries; its judges followed them and left out
///   the one node holding a committed entry it had lost, so it voted for a candidate without
///   it. Its judges now only grow during a repair.
/// - 122209: starting at term 0, it took appends from a leader of an older term and
///   acknowledged them, a majority for entries a later leader had replaced with others it
///   committed. A rebuild now starts at the term of its log's last entry.
/// - 165093: damage cut its log at a term-18 entry while entries of term 21 were readable
///   beyond it; rebuilt at term 18, it acknowledged a cut-off leader of term 20 the same way.
///   The term a rebuild starts at now counts the entries beyond damage.
const REBUILT_NODE_SEEDS: [u64; 3] = [122_209, 123_335, 165_093];

/// Seeds where a client's retry met a copy of its request still queued at a new leader,
/// after an older copy committed and answered it (found in 10,000 seeds from 100000): the
/// retry was queued a second time. It now waits for the queued copy's answer.
const QUEUED_RETRY_SEEDS: [u64; 1] = [104_163];

/// Proves the seeds where a retry meets its request still queued violate nothing.
#[test]
fn seeds_where_a_retry_meets_its_queued_request_violate_nothing() {
    each_seed_violates_nothing(&QUEUED_RETRY_SEEDS);
}

/// Proves the seeds where a rebuilt replica decided an election or a commit violate nothing.
#[test]
fn seeds_where_a_rebuilt_replica_decides_violate_nothing() {
    each_seed_violates_nothing(&REBUILT_NODE_SEEDS);
}

/// Seeds where a replica rebuilt after losing its hard state had won a term, then passed the
/// node that had voted for it (its record of known members showed no vote of its own for
/// that node) and voted for another candidate in that term: two leaders in one term (I7).
/// Found by the first build of the record (`runner sim --seeds 20000 --seed 0`), which did
/// not record a campaign's own vote: 3216, 12832 and 15252. Once the simulated nodes kept the
/// apply journal (its unsynced writes change what each crash draws) those no longer reached
/// the case; `.ci/mutants/forget-own-campaigns` over 20,000 seeds from 0 then failed 16159
/// alone (I7), kept here. No seed of those 20,000 needed the record's nodes beyond the lists
/// (`.ci/mutants/forget-known-members` violated nothing): that case has a unit test only.
const OWN_CAMPAIGN_SEEDS: [u64; 1] = [16_159];

/// Proves the seeds where a rebuilt replica passes the nodes that voted for it violate
/// nothing.
#[test]
fn seeds_where_a_rebuilt_replica_passes_its_voters_violate_nothing() {
    each_seed_violates_nothing(&OWN_CAMPAIGN_SEEDS);
}

/// Proves the seeds where lost votes decide an election violate nothing.
#[test]
fn seeds_where_lost_votes_matter_violate_nothing() {
    each_seed_violates_nothing(&LOST_VOTE_SEEDS);
}

/// Runs `runner sim` on each of `seeds` alone; fails naming the first that violates anything.
fn each_seed_violates_nothing(seeds: &[u64]) {
    for seed in seeds {
        let output = runner()
            .args(["sim", "--seeds", "1", "--seed", &seed.to_string()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "seed {seed}:\n{stderr}");
    }
}
