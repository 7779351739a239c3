//! The apply path: committed entries executed in order, each command in its own transaction,
//! each client request exactly once. On the leader, each entry is also simulated as it is
//! proposed, speculatively and in place, before it commits (`speculate`): after commit the
//! simulation is confirmed and reused (Performance mode) or rolled back, executed again and
//! compared (Verify mode).

#![warn(clippy::disallowed_methods)] // sans-IO: no clock, threads or randomness (clippy.toml)

mod invariants;
mod keyed;
#[cfg(test)]
mod keyed_tests;
mod ran;
mod sessions;
mod speculate;
#[cfg(test)]
mod tests;

pub use sessions::{
    EXPIRED_SESSIONS_PER_SESSION, Finished, PIPELINE_REQUESTS_MAX, SESSION_BYTES_FIXED,
    SESSION_RETENTION_S_DEFAULT, SESSION_RETENTION_S_MAX, SESSION_RETENTION_S_MIN,
    SESSIONS_AGED_PER_ENTRY_MAX, SESSIONS_MAX_DEFAULT, SESSIONS_MAX_LIMIT, SESSIONS_MAX_MIN,
    Session, Sessions,
};

pub use ran::{Change, MalformedChanges, Ran, changes};

pub use keyed::{KEYED_EXPIRED, KEYED_RAN, KEYED_REUSED, KeyedOutcome, decode_keyed_outcomes};

use crate::codec;
use crate::entry::EntryHash;
use crate::entry::parse_payload_of;
use crate::entry::{Entry, EntryKind, FragmentHeader, KeyedRun, PayloadError, RequestDigest};
use crate::handler::{Handler, Outcome, OutcomeOf};
use crate::ids::{ClientId, EntryIndex, RequestNumber, Term};
use crate::members::Members;
use crate::snapshot::{self, ScanProgress, Snapshot, SnapshotLink, SnapshotMeta};
use crate::state::{CapacityTooSmall, InstallError, Prefetch, State, StateHash, Tx};
use crate::state::{MIGRATE_SLOTS_PER_SNAPSHOT_TRY, ScanStep};
use sessions::{Decision, SESSION_WRITE_TAG};

/// Tag of a handler version's switch in the write stream, in the place of a table id (above
/// them all, below [`SESSION_WRITE_TAG`]).
const UPGRADE_WRITE_TAG: u8 = u8::MAX - 1;
use speculate::{Pass, Speculation};
use std::collections::VecDeque;

/// What the leader does with its simulation of an entry once the entry commits (a cluster
/// setting, carried on the wire by `runner`).
pub use net::message::{Mode, UnknownMode};

/// The apply loop names the records of the command this far ahead of the one it executes, so
/// that memory latency overlaps with execution (about 100 ns of work per command covers the
/// ~200 ns of a miss on this kind of machine).
const PREFETCH_AHEAD_COMMANDS: usize = 8;

/// Why the apply loop stopped. The node applies nothing after this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// An entry arrived out of order: a bug in the caller.
    #[error("entry {got} applied out of order: expected {expected}")]
    OutOfOrder {
        /// The index expected next.
        expected: EntryIndex,
        /// The index offered.
        got: EntryIndex,
    },
    /// A committed entry whose payload does not parse (its checksums held, so the leader that
    /// formed it has a bug).
    #[error("entry {index}: {error}")]
    Payload {
        /// The entry.
        index: EntryIndex,
        /// What failed.
        error: PayloadError,
    },
    /// The leader's execution of a command differs from its simulation on the same state: the
    /// handler is not deterministic (or the engine has a bug). No result of the entry is
    /// released.
    #[error(
        "entry {index}, command {command}: execution differs from the simulation \
         (simulated {simulated}, executed {executed}, writes {writes})"
    )]
    Nondeterministic {
        /// The entry.
        index: EntryIndex,
        /// The command's position in the entry.
        command: u32,
        /// The simulated outcome.
        simulated: String,
        /// The executed outcome.
        executed: String,
        /// Whether the writes were the same or differed.
        writes: &'static str,
    },
    /// A committed members entry whose list does not decode (its checksums held, so the leader
    /// that formed it has a bug).
    #[error("entry {index}: its members do not decode")]
    Members {
        /// The entry.
        index: EntryIndex,
    },
    /// The handler version committed at this entry is one this build cannot run: the replica
    /// stops here rather than apply under other rules (run a build whose handler supports it).
    #[error(
        "entry {index} puts handler version {version} in force; this build runs versions \
         {oldest} to {newest}: run a build that supports it"
    )]
    UnsupportedHandlerVersion {
        /// The upgrade's entry.
        index: EntryIndex,
        /// The version it puts in force.
        version: u32,
        /// The oldest version this build runs.
        oldest: u32,
        /// The newest version this build runs.
        newest: u32,
    },
    /// A committed upgrade entry whose version does not decode.
    #[error("entry {index}: its handler version does not decode")]
    Upgrade {
        /// The entry.
        index: EntryIndex,
    },
    /// Memory ran out below the configured capacity, while executing this command.
    #[error("memory exhausted at entry {index}, command {command}")]
    MemoryExhausted {
        /// The entry.
        index: EntryIndex,
        /// The command's position in the entry.
        command: u32,
    },
}

/// What a finished request gets back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyStatus {
    /// The outcomes of the request's commands, encoded one after another, in order.
    Results(Vec<u8>),
    /// The client had moved on to a newer request; this one was not applied.
    Stale,
    /// The cluster keeps no session for the client (evicted past the session limit, inactive
    /// for longer than the retention, or a first request that was neither a registration nor
    /// number 1): this request was not applied now, and whether an earlier attempt of it was is
    /// not known.
    Expired,
    /// An earlier request the client still waits for has not run: this one was not applied
    /// (pipelined requests apply in the client's order).
    NotYet,
    /// The request's number was the client's latest, but for other commands: this request was
    /// not applied (see [`crate::entry::RequestDigest`]).
    Reused,
}

/// The answer to one client request, produced when its last fragment applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The client.
    pub client: ClientId,
    /// Its request.
    pub request: RequestNumber,
    /// Commands in the request.
    pub command_count: u32,
    /// What the request's commands were (a waiter for other commands under the same number
    /// is not answered with these results).
    pub digest: RequestDigest,
    /// The results.
    pub status: ReplyStatus,
}

/// What the committed sessions say of a request (see [`StateMachine::committed_answer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommittedAnswer {
    /// The client has gone on to a newer request.
    Stale,
    /// The client's session was evicted or outlived the retention (see
    /// [`ReplyStatus::Expired`]).
    Expired,
    /// The number is the client's latest request's, whose commands were other ones (see
    /// [`ReplyStatus::Reused`]).
    Reused,
    /// The request finished: its command count and encoded outcomes.
    Finished(u32, Vec<u8>),
    /// Neither: it is not committed yet (or never arrived).
    Unknown,
}

/// The result of applying one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The entry applied.
    pub index: EntryIndex,
    /// The state hash after it.
    pub state_hash: StateHash,
    /// Requests that finished in this entry.
    pub replies: Vec<Reply>,
    /// When journaling ([`StateMachine::set_journaling`]): each command's outcome fingerprint
    /// by its position in the entry, and the commands that ran with their outcomes. Empty
    /// otherwise, and for entries without commands.
    pub ran: Ran,
}

/// A command's outcome as the journal keeps it: 32 bits of a hash of its encoded bytes, never 0
/// (0 marks a command not run). A replay compares it to tell which command first answered
/// otherwise.
pub fn outcome_fingerprint(outcome: &[u8]) -> u32 {
    use std::hash::Hasher;
    let mut hasher = rustc_hash::FxHasher::default();
    hasher.write(outcome);
    (hasher.finish() >> 32) as u32 | 1
}

/// How commands were run, since the state machine started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyCounters {
    /// Commands simulated (leader, at proposal).
    pub simulated: u64,
    /// Commands executed on the committed state.
    pub executed: u64,
    /// Commands applied from their simulation without executing again (Performance mode).
    pub reused: u64,
    /// Commands executed and found identical to their simulation (Verify mode).
    pub verified: u64,
}

/// A snapshot in progress: what it covers, the sessions as committed then, and how far the
/// encoding has come.
struct ScanState {
    meta: SnapshotMeta,
    /// A delta's: the file it continues, and each table's removed keys.
    delta: Option<(SnapshotLink, Vec<RemovedKeys>)>,
    /// The state clock as committed then, in ms.
    clock_ms: u64,
    sessions: Vec<(ClientId, Session)>,
    /// Each table's committed slot count, in the schema's order.
    slots: Vec<u64>,
    /// The schema's table being scanned (by order).
    table: usize,
    /// Its start is encoded.
    in_table: bool,
    /// The file's start is encoded.
    head_written: bool,
}

/// A table's keys removed since the last snapshot began, encoded back to back, and their
/// count.
type RemovedKeys = (Vec<u8>, u64);

/// A replica's state machine: the handler, its state and the client sessions.
pub struct StateMachine<H: Handler> {
    handler: H,
    state: State,
    sessions: Sessions,
    /// The last entry applied for good (committed).
    applied: EntryIndex,
    /// Commands of the entry being run, decoded (`None`: bytes that did not decode).
    commands: Vec<Option<H::Command>>,
    /// The state hash after `applied`.
    hash: StateHash,
    /// The term and chained hash of the entry at `applied` (what a snapshot of it records).
    applied_term: Term,
    applied_entry: EntryHash,
    /// Payload bytes of every entry applied for good since this machine started.
    applied_bytes: u64,
    /// A snapshot in progress.
    scan: Option<ScanState>,
    mode: Mode,
    /// Leader: entries applied speculatively and not yet committed, in index order. The state
    /// holds their writes; the undo logs hold what they replaced.
    speculations: VecDeque<Speculation>,
    /// Leader in Verify mode: proposed entries waiting for their turn to be simulated (Verify
    /// keeps one speculation at a time, since it rolls each back after commit).
    unsimulated: VecDeque<Entry>,
    /// What the entry being run is: plain execution, a speculation, or a verification.
    pass: Pass,
    counters: ApplyCounters,
    /// Whether applying produces replies (a follower has nobody to answer).
    replying: bool,
    /// The newest members entry applied: its index and list.
    members: Option<(EntryIndex, Members)>,
    /// The handler version in force (an upgrade entry changes it; never speculatively: upgrade
    /// entries are not simulated, so no speculation runs across one).
    handler_version: u32,
    /// Whether each command's outcome is kept for the journal.
    journaling: bool,
    /// While journaling: whether the commands that ran are kept with their outcomes (the
    /// change stream's), or their fingerprints only.
    keep_changes: bool,
    /// The entry being run, while journaling: what ran and how it answered.
    ran: Ran,
    /// The entry being run, while journaling: its commands' bytes, and where each command
    /// lies in them (by position; an undecodable command's span is empty).
    command_bytes: Vec<u8>,
    command_spans: Vec<(u32, u32)>,
    /// Whole snapshots start tracking the slots written after them (for a delta).
    write_tracking: bool,
    /// An entry failed to apply ([`StateMachine::apply`] returned an error): it may have
    /// stopped part way, its writes left pending. Nothing more applies; only the checks of
    /// what holds at an entry's edge look at it, and pass over what it left.
    stopped: bool,
}

/// A state loaded from a snapshot and checked against its state hash, not yet in force.
pub struct BuiltState {
    state: State,
    hash: StateHash,
    /// The entry the state is after: the newest snapshot built into it.
    index: EntryIndex,
}

impl<H: Handler> StateMachine<H> {
    /// Checks every invariant of the state machine, its sessions and its state; panics naming
    /// the first one broken (see [`crate::replica::Replica::check_invariants`]).
    pub fn check_invariants(&self) {
        self.check_recent_invariants();
        // The digest of the state's stream: up to a page of it hashed again.
        assert_eq!(
            self.hash,
            self.state.hash(),
            "the state hash after entry {} is the state's",
            self.applied
        );
        // An entry that failed part way opened its sessions at its own index.
        let active_max = match self.stopped {
            true => self.speculated_index().next(),
            false => self.speculated_index(),
        };
        self.sessions.check_invariants(active_max);
        self.state.check_invariants();
    }

    /// The invariants of [`StateMachine::check_invariants`] that cost no walk of the
    /// sessions or the tables and no hashing: what was applied and speculated, the scan.
    pub fn check_recent_invariants(&self) {
        self.check_applied();
        self.check_speculations();
        self.check_scan();
    }

    /// A state machine with an empty state of `capacity_bytes`.
    ///
    /// # Panics
    /// When `capacity_bytes` cannot hold the handler's empty tables;
    /// [`StateMachine::try_new`] returns that as an error.
    pub fn new(handler: H, capacity_bytes: u64) -> Self {
        StateMachine::try_new(handler, capacity_bytes).unwrap_or_else(|refused| panic!("{refused}"))
    }

    /// A state machine with an empty state of `capacity_bytes`, or the refusal of a capacity
    /// below the handler's empty tables.
    pub fn try_new(handler: H, capacity_bytes: u64) -> Result<Self, CapacityTooSmall> {
        let state = State::try_new(handler.schema(), capacity_bytes)?;
        Ok(StateMachine {
            handler,
            hash: state.hash(),
            state,
            sessions: Sessions::default(),
            applied: EntryIndex::ZERO,
            applied_term: Term(0),
            applied_entry: EntryHash::default(),
            applied_bytes: 0,
            scan: None,
            commands: Vec::new(),
            mode: Mode::default(),
            speculations: VecDeque::new(),
            unsimulated: VecDeque::new(),
            pass: Pass::Execute,
            counters: ApplyCounters::default(),
            replying: true,
            members: None,
            handler_version: crate::handler::HANDLER_VERSION_FIRST,
            journaling: false,
            keep_changes: true,
            ran: Ran::default(),
            command_bytes: Vec::new(),
            command_spans: Vec::new(),
            stopped: false,
            write_tracking: true,
        })
    }

    /// Keeps what each command answered in [`Applied::ran`] (off by default; a node turns it
    /// on for its journal, a replay to compare with one).
    pub fn set_journaling(&mut self, journaling: bool) {
        self.journaling = journaling;
    }

    /// Whether outcomes are kept.
    pub fn journaling(&self) -> bool {
        self.journaling
    }

    /// While journaling, keeps each command that ran with its outcome (the change stream's;
    /// the default), or only the outcomes' fingerprints: a leader's followers keep the changes,
    /// so a leader spends none of its time on them. Applies from the next entry run.
    pub fn set_keep_changes(&mut self, keep: bool) {
        self.keep_changes = keep;
    }

    /// Keeps at most `limit` live client sessions (the cluster's `sessions_max`; every replica
    /// must have the same, so set it before the first entry applies).
    pub fn set_sessions_max(&mut self, limit: usize) {
        assert!(
            self.sessions.is_empty() && self.applied == EntryIndex::ZERO,
            "the session limit is set before anything applies"
        );
        self.sessions = Sessions::new(limit, self.sessions.retention_s());
    }

    /// Keeps a client session at most `retention_s` seconds inactive, by the state clock (the
    /// cluster's `session_retention_s`; every replica must have the same, so set it before
    /// the first entry applies).
    pub fn set_session_retention_s(&mut self, retention_s: u64) {
        assert!(
            self.sessions.is_empty() && self.applied == EntryIndex::ZERO,
            "the session retention is set before anything applies"
        );
        self.sessions = Sessions::new(self.sessions.limit(), retention_s);
    }

    /// Whether applying produces replies (on by default; a follower turns it off to save the
    /// copies of results nobody waits for).
    pub fn set_replying(&mut self, replying: bool) {
        self.replying = replying;
    }

    /// How commands were run so far.
    pub fn counters(&self) -> ApplyCounters {
        self.counters
    }

    /// Sets what a leader does with its simulations (takes effect with the next proposal).
    pub fn set_mode(&mut self, mode: Mode) {
        if mode != self.mode {
            self.discard_simulations();
            self.mode = mode;
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Gives the handler back, dropping the state.
    pub fn into_handler(self) -> H {
        self.handler
    }

    /// The state (on a leader, with its speculative writes in it).
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Waits for the helper threads of the tables' growths (see [`State::settle_growths`]).
    pub fn settle_growths(&mut self) {
        self.state.settle_growths();
    }

    /// The client sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// What a retry of `client`'s request `request` may be answered with, from the sessions as
    /// committed (a leader's pending simulations left out: their results are not committed
    /// yet): the request is older than the client's last one, or is that one with other
    /// commands than `digest` says, or finished with these results (its command count and
    /// encoded outcomes), or none of these.
    pub fn committed_answer(
        &self,
        client: ClientId,
        request: RequestNumber,
        digest: RequestDigest,
    ) -> CommittedAnswer {
        let pending = self.speculations.iter().map(|s| s.journal());
        let clock_ms = self.sessions.committed_clock_ms(pending.clone());
        match self.sessions.committed_one(client, pending) {
            Some(session) if session.is_expired() => CommittedAnswer::Expired,
            Some(session) if self.sessions.outlived_at(session, clock_ms) => {
                CommittedAnswer::Expired
            }
            Some(session) if request < session.request => match session.earlier(request) {
                Some(finished) if finished.digest != digest => CommittedAnswer::Reused,
                Some(finished) => {
                    CommittedAnswer::Finished(finished.request_commands, finished.results.clone())
                }
                None => CommittedAnswer::Stale,
            },
            Some(session) if request == session.request && session.digest != digest => {
                CommittedAnswer::Reused
            }
            Some(session) if request == session.request && session.is_complete() => {
                CommittedAnswer::Finished(session.request_commands, session.results.clone())
            }
            Some(_) | None => CommittedAnswer::Unknown,
        }
    }

    /// Where `client`'s session stands as committed: the number of its next request (1 when
    /// there is no session), and whether it expired.
    pub fn committed_session(&self, client: ClientId) -> (RequestNumber, bool) {
        let pending = self.speculations.iter().map(|s| s.journal());
        let clock_ms = self.sessions.committed_clock_ms(pending.clone());
        match self.sessions.committed_one(client, pending) {
            Some(session) => {
                let expired = session.is_expired() || self.sessions.outlived_at(session, clock_ms);
                (RequestNumber(session.request.0 + 1), expired)
            }
            None => (RequestNumber(1), false),
        }
    }

    /// The last entry applied for good.
    pub fn applied_index(&self) -> EntryIndex {
        self.applied
    }

    /// The term of the last entry applied for good.
    pub fn applied_term(&self) -> Term {
        self.applied_term
    }

    /// The state hash after the last entry applied for good.
    pub fn state_hash(&self) -> StateHash {
        self.hash
    }

    /// Runs a read's commands (command `i` ends at `ends[i]` in `commands`, as admission found
    /// them) on the state as it stands, changing nothing: every entry applied for good and the
    /// speculations after them, at `now_ms`. Their encoded outcomes, or the position of the
    /// first command that does not decode or that the handler does not mark read-only (then
    /// nothing ran).
    pub fn read(&mut self, commands: &[u8], ends: &[u32], now_ms: u64) -> Result<Vec<u8>, u32> {
        let mut decoded = Vec::with_capacity(ends.len());
        let mut start = 0;
        for (at, &end) in ends.iter().enumerate() {
            let bytes = commands.get(start..end as usize).ok_or(at as u32)?;
            let (command, _) = codec::decode_prefix::<H::Command>(bytes).map_err(|_| at as u32)?;
            if !H::read_only(&command) {
                return Err(at as u32);
            }
            decoded.push(command);
            start = end as usize;
        }
        let before = self.state.begin();
        let mut results = Vec::new();
        for command in &decoded {
            let tx = Tx::begin(&mut self.state, (now_ms, self.handler_version));
            let mut tx = tx.read_only();
            let result = self.handler.execute(&mut tx, command);
            let ok = result.is_ok();
            let outcome = outcome_of::<H>(result, tx.finish(ok));
            codec::encode_into(&outcome, &mut results).expect("outcomes encode into a vector");
        }
        assert_eq!(self.state.begin(), before, "a read changed the state");
        Ok(results)
    }

    /// Applies the next committed entry.
    pub fn apply(&mut self, entry: &Entry) -> Result<Applied, ApplyError> {
        let mut applied = self.apply_members(entry);
        self.stopped |= applied.is_err();
        if let Ok(applied) = applied.as_mut()
            && self.journaling
        {
            applied.ran.version = self.handler_version;
        }
        applied
    }

    fn apply_members(&mut self, entry: &Entry) -> Result<Applied, ApplyError> {
        let applied = self.apply_any(entry)?;
        if entry.kind() == EntryKind::Members {
            let members = Members::decode(&entry.payload).map_err(|_| ApplyError::Members {
                index: entry.index(),
            })?;
            self.members = Some((entry.index(), members));
        }
        Ok(applied)
    }

    /// The newest members entry applied, if any: its index and list.
    pub fn members(&self) -> Option<&(EntryIndex, Members)> {
        self.members.as_ref()
    }

    /// The handler version in force after the last entry applied.
    pub fn handler_version(&self) -> u32 {
        self.handler_version
    }

    /// Puts the version of upgrade entry `index` in force, if this build runs it; the switch
    /// goes into the write stream, so that the state hash covers the version in force.
    fn upgrade(&mut self, index: EntryIndex, payload: &[u8]) -> Result<(), ApplyError> {
        let version: u32 = codec::decode(payload).map_err(|_| ApplyError::Upgrade { index })?;
        if !H::VERSIONS.contains(&version) {
            return Err(ApplyError::UnsupportedHandlerVersion {
                index,
                version,
                oldest: *H::VERSIONS.start(),
                newest: *H::VERSIONS.end(),
            });
        }
        self.handler_version = version;
        let mut write = vec![UPGRADE_WRITE_TAG];
        write.extend_from_slice(&version.to_le_bytes());
        self.state.record_extra(&[&write]);
        Ok(())
    }

    fn apply_any(&mut self, entry: &Entry) -> Result<Applied, ApplyError> {
        let index = entry.index();
        if index != self.applied.next() {
            return Err(ApplyError::OutOfOrder {
                expected: self.applied.next(),
                got: index,
            });
        }
        if let Some(front) = self.speculations.front() {
            if front.matches(entry) {
                return match self.mode {
                    Mode::Performance => {
                        self.applied_bytes += entry.payload.len() as u64;
                        Ok(self.confirm())
                    }
                    Mode::Verify => self.verify(entry),
                };
            }
            // Another entry committed at this index (another leader's): everything speculated
            // from here on is void.
            self.discard_simulations();
        }
        self.pass = Pass::Execute;
        let replies = self.run_entry(entry)?;
        self.settle(entry);
        self.hash = self.state.finish_entry();
        Ok(Applied {
            index,
            state_hash: self.hash,
            replies,
            ran: std::mem::take(&mut self.ran),
        })
    }

    /// Records `entry` as the last applied for good.
    fn settle(&mut self, entry: &Entry) {
        assert_eq!(
            entry.index(),
            self.applied.next(),
            "the entries applied go forward one at a time"
        );
        self.applied = entry.index();
        self.applied_term = entry.term();
        self.applied_entry = entry.header.hash;
        self.applied_bytes += entry.payload.len() as u64;
    }

    /// Starts a snapshot of the committed state after the last applied entry: a copy-on-write
    /// scan that [`StateMachine::snapshot_step`] carries on a slice at a time while entries
    /// keep being applied (and simulated). `None` when one is in progress, or when it cannot
    /// start now (a pending speculation removed records, or a table's growth is still moving
    /// records, which this call moves a slice further; a later call can).
    pub fn begin_snapshot(&mut self) -> Option<SnapshotMeta> {
        self.begin_any_snapshot(None)
    }

    /// Whether a whole snapshot starts tracking the slots written after it, so that a delta
    /// can follow it (on by default; each write then sets a bit).
    pub fn set_write_tracking(&mut self, tracking: bool) {
        self.write_tracking = tracking;
        if !tracking {
            self.state.forget_written();
        }
    }

    /// True when every table knows what it wrote since the last snapshot's start (none was
    /// abandoned since, and no table grew): a delta over that snapshot can be taken.
    pub fn can_take_delta(&self) -> bool {
        self.state.can_delta()
    }

    /// The bytes a delta taken now would write, estimated from a whole snapshot of
    /// `whole_bytes`: its share of the records written since the last snapshot began (each
    /// record taken as the whole's average). `None` when no delta can be taken.
    pub fn delta_bytes_estimate(&self, whole_bytes: u64) -> Option<u64> {
        let (written, held) = self.state.written()?;
        let share = u128::from(whole_bytes) * u128::from(written) / u128::from(held.max(1));
        Some(u64::try_from(share).unwrap_or(u64::MAX))
    }

    /// Starts a delta over the snapshot `previous` names, which must be the last one started
    /// (and completed) on this machine: as [`StateMachine::begin_snapshot`], but the scan
    /// covers only what was written since that one started
    /// (`notes/decisions/snapshot-deltas.md`). Only when [`StateMachine::can_take_delta`].
    pub fn begin_delta_snapshot(&mut self, previous: SnapshotLink) -> Option<SnapshotMeta> {
        assert!(
            self.can_take_delta(),
            "a delta of tables that know what they wrote"
        );
        self.begin_any_snapshot(Some(previous))
    }

    fn begin_any_snapshot(&mut self, previous: Option<SnapshotLink>) -> Option<SnapshotMeta> {
        if self.scan.is_some() || !self.state.can_scan() {
            return None;
        }
        if !self.state.advance_growths(MIGRATE_SLOTS_PER_SNAPSHOT_TRY) {
            return None;
        }
        if previous.is_some() && !self.state.can_delta() {
            // A growth ended while moving its records: the positions changed.
            return None;
        }
        let journals: Vec<&sessions::Journal> =
            self.speculations.iter().map(|s| s.journal()).collect();
        let sessions = self.sessions.committed(&journals);
        let clock_ms = (self.sessions).committed_clock_ms(journals.iter().copied());
        let slots = self.state.committed_slots();
        let (hasher, delta) = match previous {
            Some(link) => {
                let (hasher, removed) = self.state.begin_delta_scan();
                (hasher, Some((link, removed)))
            }
            None => (self.state.begin_scan(self.write_tracking), None),
        };
        let meta = SnapshotMeta {
            index: self.applied,
            term: self.applied_term,
            entry_hash: self.applied_entry,
            state_hash: self.hash,
            hasher,
            members: self.members.as_ref().map(|(_, m)| m.clone()),
            handler_version: self.handler_version,
        };
        self.scan = Some(ScanState {
            meta: meta.clone(),
            delta,
            clock_ms,
            sessions,
            slots,
            table: 0,
            in_table: false,
            head_written: false,
        });
        Some(meta)
    }

    /// Encodes up to `slots` more slots of the snapshot in progress onto `out` (the file's
    /// bytes, in order, all but the digest).
    pub fn snapshot_step(&mut self, slots: usize, out: &mut Vec<u8>) -> ScanProgress {
        let Some(scan) = self.scan.as_mut() else {
            return ScanProgress::Idle;
        };
        let tables = self.state.table_ids().to_vec();
        if !scan.head_written {
            let previous = scan.delta.as_ref().map(|(link, _)| link);
            snapshot::encode_head(&scan.meta, previous, tables.len(), out);
            scan.head_written = true;
        }
        if let Some(&id) = tables.get(scan.table) {
            if !scan.in_table {
                snapshot::encode_table_start(id, scan.slots[scan.table], out);
                if let Some((_, removed)) = &scan.delta {
                    let (keys, count) = &removed[scan.table];
                    snapshot::encode_block(out, |out| {
                        out.extend_from_slice(keys);
                        ((), *count)
                    });
                    snapshot::encode_table_end(out);
                }
                scan.in_table = true;
            }
            let state = &mut self.state;
            let step = snapshot::encode_block(out, |out| state.scan_step(id, slots, out));
            match step {
                ScanStep::More => {}
                ScanStep::Done => {
                    snapshot::encode_table_end(out);
                    scan.table += 1;
                    scan.in_table = false;
                }
                ScanStep::Void => {
                    self.abort_snapshot();
                    return ScanProgress::Void;
                }
            }
            return ScanProgress::More;
        }
        snapshot::encode_sessions(scan.clock_ms, &scan.sessions, out);
        let meta = scan.meta.clone();
        self.scan = None;
        ScanProgress::Done(meta)
    }

    /// Abandons the snapshot in progress, if any.
    pub fn abort_snapshot(&mut self) {
        self.scan = None;
        self.state.end_scan();
    }

    /// True while a snapshot is in progress.
    pub fn snapshotting(&self) -> bool {
        self.scan.is_some()
    }

    /// A whole snapshot file of the committed state, taken at once (for tests and tools; a
    /// node takes its snapshots a slice at a time): what it covers and its bytes.
    pub fn snapshot_file(&mut self) -> Option<(SnapshotMeta, Vec<u8>)> {
        self.any_snapshot_file(None)
    }

    /// A delta over the file `previous` names (the last snapshot this machine took), taken
    /// at once as [`StateMachine::snapshot_file`] takes a whole one; `None` when no delta can
    /// be taken now ([`StateMachine::can_take_delta`]).
    pub fn delta_snapshot_file(
        &mut self,
        previous: SnapshotLink,
    ) -> Option<(SnapshotMeta, Vec<u8>)> {
        self.any_snapshot_file(Some(previous))
    }

    fn any_snapshot_file(
        &mut self,
        previous: Option<SnapshotLink>,
    ) -> Option<(SnapshotMeta, Vec<u8>)> {
        if self.scan.is_none() {
            self.state.advance_growths(usize::MAX);
        }
        if previous.is_some() && !self.can_take_delta() {
            return None;
        }
        self.begin_any_snapshot(previous)?;
        let mut bytes = Vec::new();
        loop {
            match self.snapshot_step(usize::MAX, &mut bytes) {
                ScanProgress::More => {}
                ScanProgress::Done(meta) => {
                    let digest = blake3::hash(&bytes);
                    bytes.extend_from_slice(digest.as_bytes());
                    // Debug builds only: it parses the whole file.
                    debug_assert_eq!(
                        snapshot::parse_snapshot(&bytes).map(|s| s.meta).as_ref(),
                        Ok(&meta),
                        "a snapshot file reads back as what it covers"
                    );
                    return Some((meta, bytes));
                }
                ScanProgress::Idle | ScanProgress::Void => return None,
            }
        }
    }

    /// Payload bytes of the entries applied for good since this machine started.
    pub fn applied_bytes(&self) -> u64 {
        self.applied_bytes
    }

    /// A state machine holding what `snapshot` holds: its tables, sessions and hasher, checked
    /// against the state hash the snapshot recorded.
    pub fn restore(
        handler: H,
        capacity_bytes: u64,
        snapshot: Snapshot,
    ) -> Result<Self, InstallError> {
        let mut machine = StateMachine::try_new(handler, capacity_bytes).map_err(|refused| {
            InstallError::Capacity {
                needed_bytes: refused.empty_bytes,
                capacity_bytes: refused.capacity_bytes,
            }
        })?;
        machine.install(snapshot)?;
        Ok(machine)
    }

    /// Checks, before anything is loaded, that `snapshot` can be installed here: every table
    /// it holds is in the handler's schema and its state fits the capacity.
    pub fn check_install(&self, snapshot: &Snapshot) -> Result<(), InstallError> {
        let schema = self.handler.schema();
        if let Some(table) = snapshot.tables.iter().find(|t| !schema.declares(t.id)) {
            return Err(InstallError::UnknownTable { table: table.id.0 });
        }
        let version = snapshot.meta.handler_version;
        if !H::VERSIONS.contains(&version) {
            return Err(InstallError::HandlerVersion {
                version,
                oldest: *H::VERSIONS.start(),
                newest: *H::VERSIONS.end(),
            });
        }
        // The slot arrays are allocated first, when the tables load: check them now (the whole
        // account is checked again once they are loaded). A refusal names the whole account,
        // records' heap bytes included, so that raising the capacity to it is enough.
        let slots = snapshot.tables.iter().map(|t| (t.id, t.slots));
        let array_bytes = State::install_array_bytes(&schema, slots);
        let capacity_bytes = self.state.capacity_bytes();
        if array_bytes > capacity_bytes {
            let records = snapshot.tables.iter();
            let records = records.map(|t| (t.id, t.bytes.as_slice(), t.records));
            let needed_bytes =
                array_bytes.saturating_add(State::install_heap_bytes(&schema, records));
            return Err(InstallError::Capacity {
                needed_bytes,
                capacity_bytes,
            });
        }
        Ok(())
    }

    /// Replaces the whole state, the sessions and any speculation with what `snapshot` holds,
    /// checked against the state hash it recorded; on error nothing changed.
    pub fn install(&mut self, snapshot: Snapshot) -> Result<(), InstallError> {
        let built = self.build_state(&snapshot)?;
        self.install_built(snapshot, built);
        Ok(())
    }

    /// The state `snapshot` holds, loaded and checked against the state hash it recorded,
    /// without putting it in force: a recovery builds it while the log is scanned, before it
    /// knows whether the log continues that snapshot.
    pub fn build_state(&self, snapshot: &Snapshot) -> Result<BuiltState, InstallError> {
        self.check_install(snapshot)?;
        let mut state = State::new(self.handler.schema(), self.state.capacity_bytes());
        for table in &snapshot.tables {
            state.load_table(table.id, &table.bytes, table.records, table.slots)?;
        }
        checked_state(state, &snapshot.meta)
    }

    /// `built` with `delta` applied (its removed keys out, its records in), checked against
    /// the state hash the delta recorded: the state of a chain, built one file at a time from
    /// its whole snapshot on. `built` must be the state of the file the delta continues.
    pub fn build_on(
        &self,
        built: BuiltState,
        delta: &Snapshot,
    ) -> Result<BuiltState, InstallError> {
        let link = delta.previous.expect("a delta continues a file");
        if link.index != built.index {
            return Err(InstallError::NotContinued {
                continues: link.index,
                applied: built.index,
            });
        }
        self.check_install(delta)?;
        let mut state = built.state;
        for table in &delta.tables {
            let removed = (table.removed_bytes.as_slice(), table.removed);
            let records = (table.bytes.as_slice(), table.records);
            state.apply_delta_table(table.id, table.slots, removed, records)?;
        }
        checked_state(state, &delta.meta)
    }

    /// Forgets what the state wrote since the last snapshot began: the next one must be
    /// whole (the last one was not kept, so no delta can continue it).
    pub fn forget_delta_base(&mut self) {
        self.state.forget_written();
    }

    /// Puts in force the state [`StateMachine::build_state`] built from `snapshot`, with the
    /// snapshot's sessions, in place of the whole state and any speculation.
    pub fn install_built(&mut self, snapshot: Snapshot, built: BuiltState) {
        assert!(
            snapshot.meta.index >= self.applied,
            "a snapshot of entry {} would take the machine back from entry {}",
            snapshot.meta.index,
            self.applied
        );
        assert_eq!(
            built.hash, snapshot.meta.state_hash,
            "a state built from another snapshot"
        );
        assert_eq!(
            built.index, snapshot.meta.index,
            "a state built from another snapshot"
        );
        let BuiltState { state, hash, .. } = built;
        self.scan = None;
        self.state = state;
        let limits = (self.sessions.limit(), self.sessions.retention_s());
        self.sessions = Sessions::from_records(limits, snapshot.clock_ms, snapshot.sessions);
        self.speculations.clear();
        self.unsimulated.clear();
        self.pass = Pass::Execute;
        self.applied = snapshot.meta.index;
        self.applied_term = snapshot.meta.term;
        self.applied_entry = snapshot.meta.entry_hash;
        self.hash = hash;
        self.members = (snapshot.meta.members.clone()).map(|m| (snapshot.meta.index, m));
        self.handler_version = snapshot.meta.handler_version;
    }

    /// Runs the entry's commands in the current pass; returns the requests it finished.
    fn run_entry(&mut self, entry: &Entry) -> Result<Vec<Reply>, ApplyError> {
        self.ran.start(0, self.journaling && self.keep_changes);
        let replies = match entry.header.kind {
            EntryKind::Noop | EntryKind::Members => Vec::new(),
            EntryKind::Upgrade => {
                self.upgrade(entry.index(), &entry.payload)?;
                Vec::new()
            }
            kind @ (EntryKind::Commands | EntryKind::KeyedCommands) => {
                self.apply_commands((entry.index(), kind), &entry.payload)?
            }
        };
        self.sessions.debug_assert_bytes();
        Ok(replies)
    }

    fn apply_commands(
        &mut self,
        (index, kind): (EntryIndex, EntryKind),
        payload: &[u8],
    ) -> Result<Vec<Reply>, ApplyError> {
        let (header, fragments, runs) = parse_payload_of(kind, payload)
            .map_err(|error| ApplyError::Payload { index, error })?;
        self.sessions.advance_clock(header.now_ms, index);
        self.decode_commands(&fragments);
        if self.journaling {
            self.ran.start(self.commands.len(), self.keep_changes);
        }
        for at in 0..PREFETCH_AHEAD_COMMANDS {
            self.prefetch(at);
        }
        let mut replies = Vec::new();
        let mut first = 0;
        let mut runs: &[KeyedRun] = &runs;
        for (at, (fragment, _)) in fragments.iter().enumerate() {
            let commands = first..first + fragment.command_count as usize;
            first = commands.end;
            let own = runs.partition_point(|keyed| keyed.fragment as usize == at);
            let (own, rest) = runs.split_at(own);
            runs = rest;
            let reply = self.apply_fragment((index, header.now_ms), (fragment, own), commands)?;
            replies.extend(reply);
        }
        assert_eq!(
            first,
            self.commands.len(),
            "entry {index}: every command decoded belongs to a fragment"
        );
        Ok(replies)
    }

    /// Decodes every fragment's commands into `self.commands`, one slot per command the
    /// fragment declares. A command that does not decode, and every later one of its fragment
    /// (their boundaries are lost), becomes `None`; so do all of a fragment whose bytes and count
    /// disagree.
    fn decode_commands(&mut self, fragments: &[(FragmentHeader, &[u8])]) {
        self.commands.clear();
        self.command_bytes.clear();
        self.command_spans.clear();
        for (fragment, bytes) in fragments {
            let start = self.commands.len();
            let mut rest: &[u8] = bytes;
            let mut whole = true;
            let mut end = self.command_bytes.len();
            let spans = self.journaling && self.keep_changes;
            if spans {
                self.command_bytes.extend_from_slice(bytes);
            }
            for _ in 0..fragment.command_count {
                let decoded = whole
                    .then(|| codec::decode_prefix::<H::Command>(rest).ok())
                    .flatten();
                whole = decoded.is_some();
                let before = rest.len();
                self.commands.push(decoded.map(|(command, used)| {
                    rest = &rest[used..];
                    command
                }));
                if spans {
                    // An undecodable command's span is empty: its bytes have no known end.
                    let start = end;
                    end += before - rest.len();
                    self.command_spans.push((start as u32, end as u32));
                }
            }
            if whole && !rest.is_empty() {
                self.commands[start..].fill_with(|| None);
            }
            assert_eq!(
                self.commands.len() - start,
                fragment.command_count as usize,
                "a fragment gets one slot per command it declares"
            );
        }
    }

    fn apply_fragment(
        &mut self,
        (index, now_ms): (EntryIndex, u64),
        (fragment, runs): (&FragmentHeader, &[KeyedRun]),
        commands: std::ops::Range<usize>,
    ) -> Result<Option<Reply>, ApplyError> {
        let skip = match self.sessions.decide(fragment) {
            Decision::Execute { skip } => skip as usize,
            Decision::Duplicate => return Ok(self.reply_if_complete(fragment)),
            Decision::Stale => return Ok(self.skipped(fragment, ReplyStatus::Stale)),
            Decision::Expired => return Ok(self.skipped(fragment, ReplyStatus::Expired)),
            Decision::Reused => return Ok(self.skipped(fragment, ReplyStatus::Reused)),
            Decision::NotYet => return Ok(self.skipped(fragment, ReplyStatus::NotYet)),
        };
        assert!(
            skip <= commands.len(),
            "a fragment of {} commands skips {skip}",
            commands.len()
        );
        let commands = commands.start + skip..commands.end;
        self.sessions.open(fragment, index);
        // Debug builds only: a second lookup of the session per fragment.
        let opened = self
            .sessions
            .get(fragment.client)
            .map(|s| s.applied_commands);
        debug_assert_eq!(
            opened,
            Some(fragment.first_command + skip as u32),
            "the session opened stands where the decision to run the fragment found it"
        );
        // The sessions count in the capacity, as they stand before this fragment's results.
        self.state.set_outside_bytes(self.sessions.bytes());
        let mut results = self.sessions.take_results(fragment.client);
        // The session is put back together below; nothing in between touches it (keyed runs
        // touch their keys' sessions only).
        let first_position = fragment.first_command + skip as u32;
        if runs.is_empty() {
            self.run_commands((index, now_ms), commands.clone(), &mut results)?;
        } else {
            let place = (first_position, commands.clone());
            self.run_keyed_fragment((index, now_ms), runs, place, &mut results)?;
        }
        let applied = commands.len() as u32;
        if let Some(session) = self.sessions.put_results(fragment.client, results, applied) {
            record_session(&mut self.state, fragment, session);
        }
        Ok(self.reply_if_complete(fragment))
    }

    /// Runs the entry's commands in `slots`, appending their outcomes to `results`.
    fn run_commands(
        &mut self,
        (index, now_ms): (EntryIndex, u64),
        slots: std::ops::Range<usize>,
        results: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        for at in slots {
            self.prefetch(at + PREFETCH_AHEAD_COMMANDS);
            self.run_command(index, at, now_ms, results)?;
            if self.state.memory_fault() {
                return Err(ApplyError::MemoryExhausted {
                    index,
                    command: at as u32,
                });
            }
        }
        Ok(())
    }

    /// Runs the slots of a fragment with keyed runs, the first at request position
    /// `position`: the unkeyed commands as [`StateMachine::run_commands`] does, each keyed run's
    /// part through its key's session.
    fn run_keyed_fragment(
        &mut self,
        now: (EntryIndex, u64),
        runs: &[KeyedRun],
        (mut position, slots): (u32, std::ops::Range<usize>),
        results: &mut Vec<u8>,
    ) -> Result<(), ApplyError> {
        let end = position + slots.len() as u32;
        let mut at = slots.start;
        let mut runs = runs.iter().peekable();
        while at < slots.end {
            while runs.next_if(|keyed| keyed.run.end() <= position).is_some() {}
            let next = runs.peek().copied();
            let unkeyed_end = next.map_or(end, |keyed| keyed.run.first.clamp(position, end));
            if unkeyed_end > position {
                let count = (unkeyed_end - position) as usize;
                self.run_commands(now, at..at + count, results)?;
                (at, position) = (at + count, unkeyed_end);
                continue;
            }
            let keyed = next.expect("a keyed run starts here");
            let part_end = keyed.run.end().min(end);
            self.apply_keyed(now, keyed, position..part_end, at, results)?;
            at += (part_end - position) as usize;
            position = part_end;
        }
        Ok(())
    }

    /// Starts loading the records command `at` of the entry will touch, if there is one.
    fn prefetch(&self, at: usize) {
        if let Some(Some(command)) = self.commands.get(at) {
            self.handler
                .prefetch(command, &mut Prefetch::new(&self.state));
        }
    }

    /// Executes command `at` of the entry and encodes its outcome.
    fn execute(&mut self, now_ms: u64, at: usize, results: &mut Vec<u8>) {
        let outcome = match &self.commands[at] {
            Some(command) => {
                let mut tx = Tx::begin(&mut self.state, (now_ms, self.handler_version));
                if H::read_only(command) {
                    tx = tx.read_only();
                }
                let result = self.handler.execute(&mut tx, command);
                let ok = result.is_ok();
                outcome_of::<H>(result, tx.finish(ok))
            }
            None => Outcome::Invalid,
        };
        codec::encode_into(&outcome, results).expect("outcomes encode into a vector");
    }

    /// The answer to a fragment skipped with `status`: once, at its request's last fragment.
    fn skipped(&self, fragment: &FragmentHeader, status: ReplyStatus) -> Option<Reply> {
        (fragment.is_last() && self.replying).then(|| reply(fragment, status))
    }

    fn reply_if_complete(&self, fragment: &FragmentHeader) -> Option<Reply> {
        if !self.replying {
            return None;
        }
        if !fragment.is_last() {
            return None;
        }
        let (_, results) = self
            .sessions
            .finished_results(fragment.client, fragment.request)?;
        Some(reply(fragment, ReplyStatus::Results(results.to_vec())))
    }
}

/// A command's outcome from the handler's result and the first write that failed, if any (a
/// handler that ignored a failed write gets its command refused anyway).
fn outcome_of<H: Handler>(
    result: Result<H::Output, H::Error>,
    failed_write: Option<crate::state::StateError>,
) -> OutcomeOf<H> {
    match (result, failed_write) {
        (Ok(output), None) => Outcome::Done(output),
        (Ok(_), Some(error)) => Outcome::Failed(error.into()),
        (Err(error), _) => Outcome::Failed(error),
    }
}

/// `state`, its records loaded from the file `meta` describes, checked against the capacity
/// and, with the hasher's state the file kept, against the state hash it recorded.
fn checked_state(mut state: State, meta: &SnapshotMeta) -> Result<BuiltState, InstallError> {
    state.check_capacity()?;
    state.restore_hasher(meta.hasher.clone());
    let hash = state.hash();
    if hash != meta.state_hash {
        return Err(InstallError::StateHash {
            computed: hash,
            recorded: meta.state_hash,
        });
    }
    let index = meta.index;
    Ok(BuiltState { state, hash, index })
}

/// Puts a finished request's session update into the write stream: once per request, not
/// per fragment, so that the hash does not depend on how requests were split into entries.
fn record_session(state: &mut State, fragment: &FragmentHeader, session: &Session) {
    assert!(session.is_complete(), "a finished request's session");
    state.record_extra(&[
        &[SESSION_WRITE_TAG],
        &fragment.client.0.to_le_bytes(),
        &fragment.request.0.to_le_bytes(),
        &fragment.request_commands.to_le_bytes(),
        &fragment.digest.0,
        &session.results,
    ]);
}

fn reply(fragment: &FragmentHeader, status: ReplyStatus) -> Reply {
    Reply {
        client: fragment.client,
        request: fragment.request,
        command_count: fragment.request_commands,
        digest: fragment.digest,
        status,
    }
}

/// Decodes the outcomes of a reply's results.
pub fn decode_outcomes<H: Handler>(
    results: &[u8],
    count: u32,
) -> Result<Vec<OutcomeOf<H>>, codec::CodecError> {
    let mut outcomes = Vec::with_capacity(count.min(crate::entry::REQUEST_COMMANDS_MAX) as usize);
    let mut at = 0;
    for _ in 0..count {
        let (outcome, used) = codec::decode_prefix::<OutcomeOf<H>>(&results[at..])?;
        outcomes.push(outcome);
        at += used;
    }
    match results.len() - at {
        0 => Ok(outcomes),
        trailing => Err(codec::CodecError::Trailing { trailing }),
    }
}
