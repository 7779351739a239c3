//! What a timed run cost beyond its latency: the CPU this process used per command, and where
//! the nodes' entries spent their time (from the counters every node reports in its status).
//! `bench`, `local` and the Bank's benchmark (`runner local`, `runner bench`) all report
//! these, with the one stage table.

use crate::apply::Mode;
use crate::client::{ClientConfig, node_status};
use net::message::{NodeStatus, Role, Stages};
use serde::Serialize;
use std::time::Duration;

/// Milliseconds one node has to answer a look at its counters.
const STATUS_TIMEOUT_MS: u64 = 1_000;

/// Average microseconds per entry in each stage over a run: the leader's entries (batcher wait,
/// own WAL fsync, replication round trip to a quorum, simulation, apply) and the followers'.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageAverages {
    /// Entries the leader proposed in the run.
    pub entries: u64,
    /// Commands per entry the leader proposed, on average (it simulates every command it
    /// proposes, in either mode).
    pub commands_per_entry: f64,
    /// Waiting in the leader's batcher.
    pub batch_wait_us: f64,
    /// Proposal to the leader's own fsync.
    pub wal_us: f64,
    /// Proposal to commit.
    pub quorum_us: f64,
    /// Simulation on the leader.
    pub simulate_us: f64,
    /// Apply on the leader (execution or reuse, replies included).
    pub apply_us: f64,
    /// Arrival to fsync on a follower.
    pub follower_wal_us: f64,
    /// Apply on a follower.
    pub follower_apply_us: f64,
    /// Commands the leader simulated, executed, reused and verified during the run.
    pub leader_commands: [u64; 4],
}

impl StageAverages {
    /// The averages over the interval between two snapshots of every node's counters.
    pub fn between(before: &[Stages], after: &[Stages]) -> Self {
        let delta = |f: fn(&Stages) -> u64, leader: bool| -> (u64, u64) {
            before
                .iter()
                .zip(after)
                .filter(|(b, a)| (a.proposed > b.proposed) == leader)
                .map(|(b, a)| (f(a).saturating_sub(f(b)), 1))
                .fold((0, 0), |(s, n), (v, c)| (s + v, n + c))
        };
        let (entries, _) = delta(|s| s.proposed, true);
        let (applied, _) = delta(|s| s.applied, true);
        let per = |(sum, _): (u64, u64), count: u64| {
            if count == 0 {
                0.0
            } else {
                sum as f64 / count as f64
            }
        };
        let (received, _) = delta(|s| s.received, false);
        let (follower_applied, _) = delta(|s| s.applied, false);
        StageAverages {
            entries,
            commands_per_entry: per(delta(|s| s.simulated_commands, true), entries),
            batch_wait_us: per(delta(|s| s.batch_wait_us, true), entries),
            wal_us: per(delta(|s| s.wal_us, true), entries),
            quorum_us: per(delta(|s| s.quorum_us, true), entries),
            simulate_us: per(delta(|s| s.simulate_us, true), entries),
            apply_us: per(delta(|s| s.apply_us, true), applied),
            follower_wal_us: per(delta(|s| s.follower_wal_us, false), received),
            follower_apply_us: per(delta(|s| s.apply_us, false), follower_applied),
            leader_commands: [
                delta(|s| s.simulated_commands, true).0,
                delta(|s| s.executed_commands, true).0,
                delta(|s| s.reused_commands, true).0,
                delta(|s| s.verified_commands, true).0,
            ],
        }
    }
}

/// CPU seconds (user and system, every thread's) this process has used. The process clock
/// counts in nanoseconds where `/proc/self/stat` counts in clock ticks (10 ms), too coarse for
/// a short run; rustix asks it without `unsafe`.
pub fn process_cpu_seconds() -> f64 {
    let used = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    used.tv_sec as f64 + used.tv_nsec as f64 / 1e9
}

/// CPU seconds per million commands of a run that measured `commands` in `measured_s`
/// seconds after `warmup_s` seconds of warm-up, having used `cpu_s`: the warm-up is in the
/// CPU time and not in the count, so the CPU is scaled to the measured part.
pub fn cpu_s_per_million(cpu_s: f64, measured_s: f64, warmup_s: f64, commands: u64) -> f64 {
    let measured_part = measured_s / (measured_s + warmup_s).max(f64::MIN_POSITIVE);
    cpu_s * measured_part / (commands.max(1) as f64 / 1e6)
}

/// Every node's status now, in the client configuration's order (`None`: no answer).
pub async fn node_statuses(config: &ClientConfig) -> Vec<Option<NodeStatus>> {
    let timeout = Duration::from_millis(STATUS_TIMEOUT_MS);
    let mut statuses = Vec::with_capacity(config.nodes.len());
    for address in &config.nodes {
        statuses.push(node_status(config, address, timeout).await.ok());
    }
    statuses
}

/// Every node's cumulative stage counters now (a node that does not answer counts as zero).
pub async fn node_stages(config: &ClientConfig) -> Vec<Stages> {
    stages_of(&node_statuses(config).await)
}

/// The stage counters of each status (zero for a node that did not answer).
pub fn stages_of(statuses: &[Option<NodeStatus>]) -> Vec<Stages> {
    let stages = |status: &Option<NodeStatus>| status.as_ref().map(|s| s.stages);
    statuses
        .iter()
        .map(|s| stages(s).unwrap_or_default())
        .collect()
}

/// The mode the cluster runs commands in: the leader's (a node's mode applies when it leads),
/// else the first answering node's; `None` when no node answered.
pub fn reported_mode(statuses: &[Option<NodeStatus>]) -> Option<Mode> {
    let answered = || statuses.iter().flatten();
    let leader = answered().find(|s| s.role == Role::Leader);
    leader.or_else(|| answered().next()).map(|s| s.mode)
}

/// Prints where an entry's time went in each run, a row per `(mode, averages)`.
pub fn print_stage_table<'a>(rows: impl IntoIterator<Item = (&'a str, &'a StageAverages)>) {
    crate::outln!();
    crate::outln!(
        "where an entry's time goes (us per entry; leader: batcher wait, own fsync, quorum, simulate, apply; followers: fsync, apply)"
    );
    crate::outln!(
        "{:<12} {:>8} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8} {:>30}",
        "mode",
        "entries",
        "batcher",
        "wal",
        "quorum",
        "simulate",
        "apply",
        "f.wal",
        "f.apply",
        "leader: simulated/executed/reused/verified"
    );
    for (mode, s) in rows {
        crate::outln!(
            "{:<12} {:>8} {:>8.1} {:>7.1} {:>7.1} {:>8.1} {:>7.1} {:>7.1} {:>8.1} {:>30}",
            mode,
            s.entries,
            s.batch_wait_us,
            s.wal_us,
            s.quorum_us,
            s.simulate_us,
            s.apply_us,
            s.follower_wal_us,
            s.follower_apply_us,
            s.leader_commands.map(|c| c.to_string()).join("/")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the averages are the leader's (the node whose proposals rose) and the
    /// followers', each over its own entries.
    #[test]
    fn averages_split_the_leader_from_the_followers() {
        let before = [Stages::default(); 3];
        let leader = Stages {
            proposed: 10,
            wal_us: 100,
            quorum_us: 500,
            applied: 10,
            apply_us: 50,
            simulated_commands: 80,
            reused_commands: 80,
            ..Stages::default()
        };
        let follower = Stages {
            received: 10,
            follower_wal_us: 200,
            applied: 5,
            apply_us: 100,
            ..Stages::default()
        };
        let averages = StageAverages::between(&before, &[follower, leader, follower]);
        assert_eq!(averages.entries, 10);
        assert_eq!(
            averages.commands_per_entry, 8.0,
            "the leader simulates every command"
        );
        assert_eq!((averages.wal_us, averages.quorum_us), (10.0, 50.0));
        assert_eq!(averages.apply_us, 5.0);
        assert_eq!(averages.follower_wal_us, 20.0);
        assert_eq!(averages.follower_apply_us, 20.0);
        assert_eq!(averages.leader_commands, [80, 0, 80, 0]);
    }

    /// Proves the CPU figure leaves the warm-up out and that the process clock moves with work.
    #[test]
    fn cpu_per_million_scales_to_the_measured_part() {
        assert_eq!(cpu_s_per_million(2.0, 3.0, 1.0, 500_000), 3.0);
        assert_eq!(cpu_s_per_million(1.0, 1.0, 0.0, 0), 1e6);
        let (before, started) = (process_cpu_seconds(), std::time::Instant::now());
        while process_cpu_seconds() - before < 0.001 && started.elapsed().as_secs() < 5 {}
        assert!(
            process_cpu_seconds() - before >= 0.001,
            "the process clock did not move"
        );
    }
}
