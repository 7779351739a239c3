//! The faults the simulator injects (crashes, partitions, clogged links, full disks, stopped
//! processes, failing acknowledgement connections, damaged entries found at restart), the
//! restarts that recover a node with the product's own recovery over its simulated disk
//! (`node::recovery::recover_on`), and the healing at the end.

use super::odds::{self, Fault, Odds};
use super::*;
use crate::members::{Member, MemberChange};
use crate::node::recovery::CatchUp;

/// Time after which faults end even if clients have not sent everything (60 s; a healthy
/// run takes a few seconds).
pub const FAULTS_UNITS_MAX: Time = 600_000;

/// The longest a simulated process stays stopped.
pub const STALL_UNITS_MAX: Time = 5_000;
/// Of the restarts whose hard state is damaged, one in this many has its record of known
/// members damaged as well.
pub const KNOWN_MEMBERS_DAMAGED_ONE_IN: u64 = 4;

impl<W: Workload> Sim<W> {
    /// Ends every fault: links whole, every node up. Clients then settle.
    pub(super) fn heal(&mut self) {
        self.healed = true;
        self.report.time = self.now;
        self.links = Links::default();
        self.links_changed = self.now;
        for id in self.node_ids() {
            self.space_back(id);
            // A stopped process resumes when its stall ends (at most `STALL_UNITS_MAX` on).
            self.node(id).acks_down_until = 0;
            if self.node(id).live.is_none() {
                self.restart(id);
            }
        }
    }

    /// Draws one fault: a crash (of the leader more often than not), a partition, a clogged
    /// link, a full disk, a stopped process, failing acknowledgement connections, or a
    /// restart of everything down.
    pub(super) fn inject_fault(&mut self) {
        let leader = self.nodes.iter().find_map(|n| {
            n.live
                .as_ref()
                .filter(|l| l.replica.core().role() == Role::Leader)
                .map(|_| n.id)
        });
        let count = self.nodes.len() as u8;
        if self.swarm.spares > 0 && odds::MEMBER_CHANGE.hit(&mut self.rng) {
            return self.change_members(leader);
        }
        let random_node = NodeId(1 + self.rng.below(u64::from(count)) as u8);
        match odds::draw_fault(&mut self.rng) {
            Fault::CrashLeader => self.crash_for_a_while(leader.unwrap_or(random_node)),
            Fault::CrashAny => self.crash_for_a_while(random_node),
            Fault::PowerCut => self.power_cut(),
            Fault::IsolateOne => self.isolate_one(leader, random_node),
            Fault::OnePeerOnly => {
                // A node that reaches only one peer.
                let a = random_node;
                let b = NodeId(1 + a.0 % count);
                self.links.cut.insert((a, b));
                self.links.cut.insert((b, a));
                self.partitioned();
            }
            Fault::Clog => {
                let a = random_node;
                let b = NodeId(1 + (a.0 + self.rng.below(2) as u8) % count);
                self.links.clogged.insert((a, b));
                self.partitioned();
            }
            Fault::FullDisks => self.fill_disks(random_node),
            Fault::Stall => self.stall(leader, random_node),
            Fault::AcksDown => {
                // The WAL thread's acknowledgement connections of one node fail.
                let lasting = 50 + self.rng.below(3_000);
                let now = self.now;
                self.node(random_node).acks_down_until = now + lasting;
                self.report.acks_down += 1;
            }
            Fault::RestartDown => {
                for id in self.node_ids() {
                    if self.node(id).live.is_none() {
                        self.restart(id);
                    }
                }
            }
        }
    }

    /// Crashes `victim` and restarts it after a while.
    fn crash_for_a_while(&mut self, victim: NodeId) {
        self.crash(victim);
        let down = 10 + self.rng.below(3_000);
        self.schedule(down, SimEvent::Restart(victim));
    }

    /// Everything crashes at once (a power cut), each node back after a while of its own.
    fn power_cut(&mut self) {
        for id in self.node_ids() {
            self.crash(id);
            let down = 10 + self.rng.below(1_000);
            self.schedule(down, SimEvent::Restart(id));
        }
    }

    /// Isolates one node (the leader more often than not), both ways or one way.
    fn isolate_one(&mut self, leader: Option<NodeId>, random_node: NodeId) {
        let isolated = leader
            .filter(|_| odds::LEADER_TARGETED.hit(&mut self.rng))
            .unwrap_or(random_node);
        let one_way = self.rng.below(3);
        for other in self.node_ids().into_iter().filter(|&n| n != isolated) {
            if one_way != 1 {
                self.links.cut.insert((isolated, other));
            }
            if one_way != 2 {
                self.links.cut.insert((other, isolated));
            }
        }
        self.partitioned();
    }

    /// Counts the links just cut or clogged, and heals them after a while.
    fn partitioned(&mut self) {
        self.report.partitions += 1;
        self.links_changed = self.now;
        let lasting = 50 + self.rng.below(5_000);
        self.schedule(lasting, SimEvent::Heal);
    }

    /// A full disk on one, two or all nodes, from `first` on.
    fn fill_disks(&mut self, first: NodeId) {
        let count = self.nodes.len() as u8;
        let full = 1 + self.rng.below(u64::from(count)) as u8;
        for k in 0..full {
            let id = NodeId(1 + (first.0 - 1 + k) % count);
            self.node(id).disk.full = true;
            let lasting = 50 + self.rng.below(3_000);
            self.schedule(lasting, SimEvent::SpaceBack(id));
        }
        self.report.disks_full += 1;
    }

    /// A stopped process (the leader more often than not): everything sent to it waits, and
    /// it resumes where it was.
    fn stall(&mut self, leader: Option<NodeId>, random_node: NodeId) {
        let stalled = leader
            .filter(|_| odds::LEADER_TARGETED.hit(&mut self.rng))
            .unwrap_or(random_node);
        let lasting = 10 + self.rng.below(STALL_UNITS_MAX - 10);
        let until = self.now + lasting;
        let node = self.node(stalled);
        node.stopped = true;
        node.stalled_until = node.stalled_until.max(until);
        let resume = node.stalled_until - self.now;
        self.schedule(resume, SimEvent::Resume(stalled));
        self.report.stalls += 1;
        if Some(stalled) == leader && odds::STALLED_LEADER_CUT_OFF.hit(&mut self.rng) {
            // Cut off as well: it resumes believing it leads, hearing nothing of the leader
            // elected meanwhile, with clients' reads waiting for it.
            let lasting = resume + self.rng.below(1_000);
            self.isolate(stalled, lasting);
        }
    }

    /// A change of members through the leader, if there is one: a node that is none joins
    /// (while fewer than the most), or a member leaves (while more than the fewest; the leader
    /// itself as likely as any). The leader refuses while a change is not committed, or before
    /// it has committed an entry of its term.
    fn change_members(&mut self, leader: Option<NodeId>) {
        let Some(leader) = leader.filter(|&l| !self.node(l).stopped) else {
            return;
        };
        let members = self
            .live(leader)
            .expect("a leader runs")
            .replica
            .core()
            .members()
            .clone();
        let others: Vec<NodeId> = self
            .node_ids()
            .into_iter()
            .filter(|&n| !members.contains(n))
            .collect();
        let (fewest, most) = SIM_MEMBERS_RANGE;
        let add = !others.is_empty()
            && (members.len() <= fewest
                || (members.len() < most && odds::MEMBER_ADDED.hit(&mut self.rng)));
        let change = if add {
            let id = others[self.rng.below(others.len() as u64) as usize];
            let address = format!("sim-node-{}", id.0);
            MemberChange::Add(Member {
                id,
                peer_address: address.clone(),
                client_address: address,
            })
        } else if members.len() > fewest {
            let ids: Vec<NodeId> = members.ids().collect();
            MemberChange::Remove(ids[self.rng.below(ids.len() as u64) as usize])
        } else {
            return;
        };
        let mut proposed = None;
        self.drive(leader, |r, out| {
            proposed = Some(r.propose_members(&change, out))
        });
        match proposed {
            Some(Ok(_)) => self.report.member_changes += 1,
            Some(Err(_)) | None => self.report.member_changes_refused += 1,
        }
    }

    /// Node `id`'s process continues, if its latest stop ends now: what reached it meanwhile
    /// is handled in the order it arrived.
    pub(super) fn resume(&mut self, id: NodeId) {
        let now = self.now;
        let node = self.node(id);
        if !node.stopped || now < node.stalled_until {
            return;
        }
        node.stopped = false;
        while let Some(event) = self.node(id).waiting.pop_front() {
            self.handle(event);
        }
    }

    /// Whether the fsync completing now fails instead (at the seed's rate, while faults last).
    pub(super) fn fsync_fails(&mut self) -> bool {
        self.options.faults
            && !self.healed
            && self.rng.below(1_000) < self.swarm.fsync_error_permille
    }

    /// The WAL of node `id` failed where the faults explain it (an fsync that failed, a write
    /// that found the disk full where the log could not wait): as the node's driver does, the
    /// replica halts (its waiting clients are told to go elsewhere) and the process exits,
    /// with what was written and not synced in an unknown state (a crash keeps a random part
    /// of it). The operator restarts it.
    pub(super) fn wal_failed(&mut self, id: NodeId, failure: WalFailure) {
        if matches!(failure, WalFailure::Sync(_)) {
            self.report.fsync_errors += 1;
        }
        self.node(id).wal_failed = true;
        let halt = Halt::WalFailed(failure);
        self.drive(id, |r, out| r.halt(halt, out));
        self.crash(id);
        let down = 10 + self.rng.below(2_000);
        self.schedule(down, SimEvent::Restart(id));
    }

    /// Node `id` cannot start from its disk where the faults do not explain it.
    fn unusable(&mut self, id: NodeId, reason: &NodeError) {
        self.checker
            .violation(Invariant::Storage, format!("node {}: {reason}", id.0));
    }

    pub(super) fn crash(&mut self, id: NodeId) {
        let now = self.now;
        let mut keep = Rng::new(self.rng.next_u64());
        let node = self.node(id);
        if node.live.take().is_none() {
            return;
        }
        tracing::trace!(now, node = id.0, "crash");
        node.incarnation += 1;
        node.stopped = false;
        node.stalled_until = 0;
        node.waiting.clear();
        node.disk.crash(&mut keep);
        self.report.crashes += 1;
        self.checker.crashed(id);
        self.transfers_broken_by(id);
        // A crash loses what was not durable: perhaps the last copy of an entry that damage
        // took from the others.
        self.note_copies_lost();
    }

    /// What damage a restart finds, drawn from the seed: a damaged entry, found by the
    /// recovery scan; one time in four also while another node still repairs its own damage
    /// (then every copy of an entry may be lost, and the cluster may stop for good: no
    /// violation, see `copies_lost`); a damaged snapshot; a damaged hard state, only while no
    /// node repairs (the hard state holds the obligation of earlier damage, and losing it too
    /// is a limit of the design: notes/reliability.md).
    fn draw_damage(&mut self) -> Damage {
        let repairing = self.nodes.iter().any(|n| n.disk.hard.repair.is_some());
        let damage = self.options.faults && !self.healed && !repairing;
        let rng = &mut self.rng;
        let together = self.options.faults
            && !self.healed
            && repairing
            && odds::DAMAGE_WHILE_REPAIRING.hit(rng);
        let mut draw = |odds: Odds| odds.hit(rng).then(|| rng.next_u64());
        let entry = (damage || together)
            .then(|| draw(odds::DAMAGED_ENTRY))
            .flatten();
        let snapshot = damage.then(|| draw(odds::DAMAGED_SNAPSHOT)).flatten();
        let hard_state = damage.then(|| draw(odds::DAMAGED_HARD_STATE)).flatten();
        Damage {
            entry,
            snapshot,
            hard_state,
            together,
        }
    }

    /// Strikes node `id`'s disk with `damage` (bits flipped in its files) and starts it with
    /// the node's own recovery; a refusal that the damage explains is followed by the
    /// operator's rebuild (`--rebuild-from-leader`).
    fn recover_damaged(
        &mut self,
        id: NodeId,
        damage: &Damage,
    ) -> Result<Restored<W::H>, NodeError> {
        let node = &mut self.nodes[usize::from(id.0 - 1)];
        node.incarnation += 1;
        node.wal_failed = false;
        let disk = &node.disk;
        let struck_log = damage.entry.is_some_and(|draw| disk.damage_log(draw));
        let struck_snapshot = damage
            .snapshot
            .is_some_and(|draw| disk.damage_snapshot(draw));
        let struck_hard = damage
            .hard_state
            .is_some_and(|draw| disk.damage_hard_state(draw));
        // One time in KNOWN_MEMBERS_DAMAGED_ONE_IN, the record of known members beside it
        // too, from the same draw (no draw of its own, so that every other seed runs as it
        // did): the start falls back to the lists alone.
        let struck_known = damage.hard_state.is_some_and(|draw| {
            (draw >> 40).is_multiple_of(KNOWN_MEMBERS_DAMAGED_ONE_IN)
                && disk.damage_known_members(draw.rotate_left(23))
        });
        tracing::trace!(struck_known, "record of known members damaged");
        self.report.snapshots_damaged += u64::from(struck_snapshot);
        self.report.hard_states_damaged += u64::from(struck_hard);
        let mut options = RecoveryOptions {
            capacity_bytes: SIM_STATE_BYTES,
            sessions_max: SESSIONS_MAX_DEFAULT,
            session_retention_s: SESSION_RETENTION_S_DEFAULT,
            wal_segment_bytes: SIM_WAL_SEGMENT_BYTES,
            owner: None,
            rebuild_from_leader: false,
            keep_outcomes_after: None,
        };
        let refusal = match self.start_from_disk(id, &options) {
            Err(NodeError::Refused(refusal)) => refusal,
            other => return self.count_damage(other, damage.together),
        };
        // Only damage explains a refusal: the operator rebuilds the node.
        let explained = struck_log || struck_snapshot || struck_hard;
        if !(explained && refusal.rebuild_applies()) {
            return Err(NodeError::Refused(refusal));
        }
        self.report.rebuilds += 1;
        options.rebuild_from_leader = true;
        let rebuilt = self.start_from_disk(id, &options);
        self.count_damage(rebuilt, damage.together)
    }

    /// Counts the damage a start found in the log.
    fn count_damage(
        &mut self,
        started: Result<Restored<W::H>, NodeError>,
        together: bool,
    ) -> Result<Restored<W::H>, NodeError> {
        if let Ok(restored) = &started
            && restored.damage_found
        {
            self.report.damaged += 1;
            self.report.damaged_together += u64::from(together);
        }
        started
    }

    /// Node `id`'s recovery from its disk, by the node's own code.
    fn start_from_disk(
        &mut self,
        id: NodeId,
        options: &RecoveryOptions,
    ) -> Result<Restored<W::H>, NodeError> {
        let handler = self.workload.handler();
        let disk = &mut self.nodes[usize::from(id.0 - 1)].disk;
        let mut replayed = Vec::new();
        let device = disk.device.clone();
        // The apply journal caught up with the replay, as a node's start does.
        let mut journal = CatchUp::open(device.clone(), disk::data_dir());
        let options = &RecoveryOptions {
            keep_outcomes_after: journal.as_ref().map(CatchUp::written),
            ..options.clone()
        };
        let started = recover_on(&device, disk::data_dir(), handler, options, None, |done| {
            replayed.push(AppliedHash {
                index: done.index,
                hash: done.state_hash,
            });
            if let Some(journal) = journal.as_mut() {
                journal.replayed(done);
            }
        })?;
        if let Some(journal) = journal {
            journal.finish();
        }
        let mut wal = started.wal;
        if self.swarm.wal_zero_ahead {
            wal.set_zero_ahead(disk::SIM_WAL_ZERO_AHEAD_BYTES);
        }
        disk.open(wal, started.core.hard_state);
        let snapshot = started
            .snapshot
            .map(|durable| (durable.meta, durable.bytes));
        if let Some((meta, _)) = &snapshot {
            let installed = AppliedHash {
                index: meta.index,
                hash: meta.state_hash,
            };
            replayed.insert(0, installed);
        }
        Ok(Restored {
            machine: started.machine,
            recovered: started.core,
            latest: snapshot.map(|(meta, bytes)| (meta.index, bytes)),
            replayed,
            damage_found: started.report.damage.is_some(),
        })
    }

    /// Cuts `node` off from every other node, both ways, for `lasting`.
    fn isolate(&mut self, node: NodeId, lasting: Time) {
        for other in self.node_ids().into_iter().filter(|&n| n != node) {
            self.links.cut.insert((node, other));
            self.links.cut.insert((other, node));
        }
        self.report.partitions += 1;
        self.links_changed = self.now;
        self.schedule(lasting, SimEvent::Heal);
    }

    /// Starts node `id` from its disk with the node's own recovery rules ([`disk::recover`]):
    /// the newest snapshot the log reaches (the log emptied when it conflicts with it), then
    /// the entries the log shows committed.
    pub(super) fn restart(&mut self, id: NodeId) {
        let seed = self.rng.next_u64();
        let now = self.now;
        let swarm = self.swarm.clone();
        let damage = self.draw_damage();
        tracing::trace!(
            now,
            node = id.0,
            entry = damage.entry.is_some(),
            snapshot = damage.snapshot.is_some(),
            hard_state = damage.hard_state.is_some(),
            "restart, damage drawn"
        );
        let restored = match self.recover_damaged(id, &damage) {
            Ok(restored) => restored,
            Err(error) => return self.unusable(id, &error),
        };
        let together = damage.together;
        let node = &mut self.nodes[usize::from(id.0 - 1)];
        let device = node.disk.device.clone();
        let Restored {
            mut machine,
            recovered,
            latest,
            replayed,
            ..
        } = restored;
        machine.set_mode(swarm.mode);
        machine.set_journaling(true);
        let committed = machine.applied_index();
        let first_members: Vec<NodeId> = match self.checker.committed_members() {
            Some(members) => members.ids().collect(),
            None => (1..=SIM_NODES).map(NodeId).collect(),
        };
        let config = replica_config(id, seed, &swarm, first_members);
        let mut replica = Replica::new(config, recovered, machine, latest);
        tell_peer_versions(&mut replica, &swarm);
        node.live = Some(Live {
            replica,
            up_since: now,
            leading_since: None,
            members_since: now,
            commit_before: committed,
            snapshots: SnapshotFiles::new(device.clone(), disk::snapshot_dir()),
            intake: Intake::new(device, disk::snapshot_dir()),
        });
        for done in replayed {
            self.checker.node_applied(id, done.index, done.hash);
        }
        self.checker.restarted(id, committed);
        let first_tick = 1 + self.rng.below(TICK_UNITS);
        let incarnation = self.node(id).incarnation;
        self.schedule(
            first_tick,
            SimEvent::Tick {
                node: id,
                incarnation,
            },
        );
        if together {
            self.note_copies_lost();
        }
    }
}

/// The configuration of node `id`'s replica, started with `seed`: the first members start
/// from the cluster file's list (`first_members`, which the operator keeps up to date with
/// the committed members); the others join.
fn replica_config(
    id: NodeId,
    seed: u64,
    swarm: &Swarm,
    first_members: Vec<NodeId>,
) -> ReplicaConfig {
    ReplicaConfig {
        core: CoreConfig {
            id,
            nodes: match id.0 <= SIM_NODES {
                true => first_members,
                false => Vec::new(),
            },
            election_ticks_min: ELECTION_TICKS_MIN_DEFAULT,
            heartbeat_ticks: HEARTBEAT_TICKS_DEFAULT,
            seed,
            lagging_entries_max: swarm.lagging_entries_max,
            pre_vote: true,
        },
        entry_commands_max: SIM_ENTRY_COMMANDS_MAX,
        pipeline_entries_max: SIM_PIPELINE_ENTRIES_MAX,
        snapshot_every: swarm.snapshot_every,
        snapshot_deltas: swarm.snapshot_deltas,
        snapshot_turns: swarm.snapshot_turns,
        snapshot_retain_ticks: swarm.snapshot_retain_ticks,
        changes_retain_entries: 0,
        change_stream: true,
        snapshot_log_percent: swarm.snapshot_log_percent,
        snapshot_slice_slots: SIM_SNAPSHOT_SLICE_SLOTS,
        snapshot_write_bytes: SIM_SNAPSHOT_WRITE_BYTES,
        client_addresses: BTreeMap::new(),
    }
}

/// The damage one restart finds (see `Sim::draw_damage`): bits flipped where the draws say.
struct Damage {
    /// In the log.
    entry: Option<u64>,
    /// In the newest snapshot.
    snapshot: Option<u64>,
    /// In the hard state.
    hard_state: Option<u64>,
    /// Another node still repairs its own damage.
    together: bool,
}

/// What a simulated node starts from.
struct Restored<H: Handler> {
    machine: StateMachine<H>,
    recovered: Recovered,
    /// The snapshot started from: its index and file size.
    latest: Option<(EntryIndex, u64)>,
    /// The snapshot installed (if any) and each entry replayed, with the state hash after it.
    replayed: Vec<AppliedHash>,
    /// The recovery scan found damage in the log.
    damage_found: bool,
}

/// Tells a starting replica the protocol version of every other node's connections: the
/// newest, except the node the seed drew as one of an earlier build.
fn tell_peer_versions<H: Handler>(replica: &mut Replica<H, Token>, swarm: &Swarm) {
    for peer in 1..=SIM_NODES + swarm.spares {
        let version = if swarm.read_checks_unspoken_by == Some(peer) {
            net::message::PROTOCOL_VERSION_OLDEST
        } else {
            net::message::PROTOCOL_VERSION
        };
        replica.peer_protocol(NodeId(peer), version);
    }
}
