//! Exactly-once client sessions, part of the replicated state: per client, the request being
//! applied (or last applied) and its results so far.

use crate::codec::{Decode, Encode};
use crate::entry::{FragmentHeader, RequestDigest};
use crate::ids::{ClientId, EntryIndex, RequestNumber};
pub use age::SESSIONS_AGED_PER_ENTRY_MAX;
pub use age::{SESSION_RETENTION_S_DEFAULT, SESSION_RETENTION_S_MAX, SESSION_RETENTION_S_MIN};
use index::{AgeIndex, Standing};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

mod age;
mod index;

/// Client sessions the state keeps unless the cluster file says otherwise (`sessions_max`); a
/// new client beyond the limit evicts the least recently active one (ties broken by client
/// id, so every replica evicts the same).
pub const SESSIONS_MAX_DEFAULT: usize = 4096;
/// Fewest sessions a cluster may be configured to keep.
pub const SESSIONS_MAX_MIN: usize = 16;
/// Most sessions a cluster may be configured to keep. Picking a session to evict looks at the
/// front of an ordered index (O(log n)), so the bound is memory, not time: at the limit, with
/// [`EXPIRED_SESSIONS_PER_SESSION`] expired marks per live session, the sessions alone count
/// about 1.3 GB ([`SESSION_BYTES_FIXED`] each) of the state's capacity, which must fit in the
/// default capacity beside the tables (asserted below). A snapshot copies the sessions when it
/// starts, which also grows with their number.
pub const SESSIONS_MAX_LIMIT: usize = 1 << 20;
/// Expired sessions remembered (a client id and its last request, no results), per live
/// session allowed, so that such a client is told its session expired rather than having a
/// retry run again as a new client's first request; past this the oldest is forgotten.
///
/// A session expires when evicted (a new client beyond `sessions_max`) or when inactive for
/// longer than the retention (`session_retention_s`). While its mark is kept, every request
/// of it is answered `Expired` (the gateway's 410 for an idempotency key). The marks are
/// bounded in count only: a mark lasts until this many times `sessions_max` sessions expired
/// after it, so at `r` new clients (keys) a second about `4 * sessions_max / r` seconds.
/// After that the id is unknown again, and its request 1 would run as a new client's.
pub const EXPIRED_SESSIONS_PER_SESSION: usize = 4;
/// Bytes a session is counted in the state's capacity besides its results: its map entry, the
/// session itself, its key in the age index and the allocator's share (measured: the
/// `capacity_allocation` tests, 233 to 245 bytes a session at 200,000 to 20,000 sessions).
pub const SESSION_BYTES_FIXED: u64 = 240;

// The sessions at the largest limit, expired marks included, fit in three fifths of the
// default capacity.
const _: () = assert!(
    SESSIONS_MAX_LIMIT as u64 * (1 + EXPIRED_SESSIONS_PER_SESSION as u64) * SESSION_BYTES_FIXED
        <= crate::state::STATE_BYTES_DEFAULT * 3 / 5
);

/// Requests a client may have in flight at once: a session keeps the results of this many of
/// its latest requests, so that a retry of any of them is answered with its results.
pub const PIPELINE_REQUESTS_MAX: usize = 8;

/// Tag of a session update in the write stream, in the place of a table id (above them all).
pub(crate) const SESSION_WRITE_TAG: u8 = u8::MAX;

/// One client's session.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Session {
    pub(crate) request: RequestNumber,
    pub(crate) request_commands: u32,
    /// What the request's commands are: another request under the same number is refused.
    pub(crate) digest: RequestDigest,
    pub(crate) applied_commands: u32,
    /// Encoded outcomes of the applied commands of `request`, in order.
    pub(crate) results: Vec<u8>,
    pub(crate) last_active: EntryIndex,
    /// The state clock when it was last active: the highest leader's time applied up to
    /// `last_active`, in ms since the Unix epoch (0: no time applied yet).
    pub(crate) last_active_ms: u64,
    /// Evicted, or inactive longer than the retention: the client is answered that its
    /// session expired.
    pub(crate) expired: bool,
    /// The requests that finished before `request`, oldest first (at most
    /// [`PIPELINE_REQUESTS_MAX`] - 1).
    pub(crate) earlier: Vec<Finished>,
}

/// A finished request a session still answers retries of.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
#[codec(crate = "crate::codec")]
pub struct Finished {
    pub(crate) request: RequestNumber,
    pub(crate) request_commands: u32,
    pub(crate) digest: RequestDigest,
    pub(crate) results: Vec<u8>,
}

impl Session {
    pub(crate) fn is_complete(&self) -> bool {
        self.applied_commands == self.request_commands
    }

    /// An evicted session, remembered.
    pub(crate) fn is_expired(&self) -> bool {
        self.expired
    }

    /// Checks one session's numbers (`client`'s): no more commands applied than its request
    /// has, active no later than `active_max` nor after the state clock `clock_ms`, the
    /// finished requests it keeps older than its own, in order and within the window, each
    /// applied command's outcome kept (an outcome encodes to a byte at least), and an expired
    /// session stripped to its numbers.
    fn check_invariants(&self, client: ClientId, (active_max, clock_ms): (EntryIndex, u64)) {
        assert!(
            self.applied_commands <= self.request_commands,
            "client {client:?}: {} commands applied of request {}'s {}",
            self.applied_commands,
            self.request.0,
            self.request_commands
        );
        assert!(
            self.last_active <= active_max,
            "client {client:?}: active at entry {}, after entry {active_max}",
            self.last_active
        );
        assert!(
            self.last_active_ms <= clock_ms,
            "client {client:?}: active at {} ms, after the state clock's {clock_ms} ms",
            self.last_active_ms
        );
        assert!(
            self.earlier.len() < PIPELINE_REQUESTS_MAX,
            "client {client:?}: {} finished requests kept",
            self.earlier.len()
        );
        let mut requests = self.earlier.iter().map(|f| f.request.0);
        let ordered = requests
            .clone()
            .zip(requests.clone().skip(1))
            .all(|(a, b)| a < b);
        assert!(
            ordered
                && requests
                    .next_back()
                    .is_none_or(|last| last < self.request.0),
            "client {client:?}: finished requests {:?} before request {}",
            self.earlier.iter().map(|f| f.request.0).collect::<Vec<_>>(),
            self.request.0
        );
        if self.expired {
            // A session expired by age may have been in the middle of a request.
            assert!(
                self.results.is_empty() && self.earlier.is_empty(),
                "client {client:?}: an expired session keeps only its numbers"
            );
            return;
        }
        assert!(
            self.results.len() >= self.applied_commands as usize,
            "client {client:?}: {} bytes of results for {} commands applied",
            self.results.len(),
            self.applied_commands
        );
        assert!(
            (self.earlier.iter()).all(|f| f.results.len() >= f.request_commands as usize),
            "client {client:?}: a finished request keeps fewer bytes of results than commands"
        );
    }

    /// Bytes of the results it keeps.
    fn results_bytes(&self) -> u64 {
        let earlier: usize = self.earlier.iter().map(|f| f.results.len()).sum();
        (self.results.len() + earlier) as u64
    }

    /// The finished request `request` older than the latest, if the session still keeps it.
    pub(crate) fn earlier(&self, request: RequestNumber) -> Option<&Finished> {
        self.earlier.iter().find(|f| f.request == request)
    }

    /// Before request `next` starts: moves the finished latest request into `earlier` (a
    /// registration excepted), and keeps there only the requests the client may still wait
    /// for (from `oldest_pending` on), at most the window's; returns the bytes of results
    /// dropped. A client with one request in flight keeps none: it has every earlier answer.
    fn retire_latest(&mut self, oldest_pending: RequestNumber) -> u64 {
        let mut dropped = 0;
        let waited_for = oldest_pending <= self.request;
        if self.is_complete() && self.request != RequestNumber(0) && waited_for {
            self.earlier.push(Finished {
                request: self.request,
                request_commands: self.request_commands,
                digest: self.digest,
                results: std::mem::take(&mut self.results),
            });
        } else {
            dropped += self.results.len() as u64;
            self.results.clear();
        }
        let excess = self.earlier.len().saturating_sub(PIPELINE_REQUESTS_MAX - 1);
        for finished in self.earlier.drain(..excess) {
            dropped += finished.results.len() as u64;
        }
        self.earlier.retain(|finished| {
            let keep = finished.request >= oldest_pending;
            dropped += u64::from(!keep) * finished.results.len() as u64;
            keep
        });
        assert!(
            self.earlier.len() < PIPELINE_REQUESTS_MAX,
            "{} finished requests kept, the window is {PIPELINE_REQUESTS_MAX}",
            self.earlier.len()
        );
        dropped
    }

    /// Moves the session to the request a fragment to execute at entry `index` starts or
    /// continues, the state clock then at `clock_ms`; returns the bytes of results dropped.
    fn start(&mut self, fragment: &FragmentHeader, (index, clock_ms): (EntryIndex, u64)) -> u64 {
        let mut dropped = 0;
        if fragment.request != self.request {
            dropped += self.retire_latest(fragment.oldest_pending.min(fragment.request));
        }
        if fragment.request != self.request || self.applied_commands == 0 {
            self.request = fragment.request;
            self.request_commands = fragment.request_commands;
            self.digest = fragment.digest;
            self.applied_commands = 0;
            dropped += self.results.len() as u64;
            self.results.clear();
        }
        self.last_active = index;
        self.last_active_ms = clock_ms;
        dropped
    }

    /// The session's expired mark, made at entry `at` when the state clock read `clock_ms`:
    /// a mark's time is when it expired, so that marks are forgotten in the order they were
    /// made (a session left in the middle of a request may expire long after its last
    /// activity, and must get a mark's whole life all the same).
    fn expired(&self, at: EntryIndex, clock_ms: u64) -> Session {
        Session {
            request: self.request,
            request_commands: self.request_commands,
            digest: RequestDigest::default(),
            applied_commands: self.applied_commands,
            results: Vec::new(),
            last_active: at.max(self.last_active),
            last_active_ms: clock_ms.max(self.last_active_ms),
            expired: true,
            earlier: Vec::new(),
        }
    }
}

/// What to do with a fragment, given its client's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Execute it from its command `skip` on (the ones before were applied already): the next
    /// fragment of the session's request, or the start of a newer request.
    Execute {
        /// Leading commands of the fragment already applied.
        skip: u32,
    },
    /// Skip it: its commands were already applied (a retry, or a copy from an old leader).
    Duplicate,
    /// Skip it: the client has since moved on to a newer request, or the fragment does not
    /// continue its request where the session stands.
    Stale,
    /// Skip it: the client has no session (it was evicted, or its first request was neither
    /// its registration nor number 1), so whether an earlier attempt of this request was applied is not known.
    Expired,
    /// Skip it: its request number is the session's, but its commands are not that request's
    /// (the number was used again for other commands).
    Reused,
    /// Skip it: an earlier request the client still waits for (from the fragment's
    /// `oldest_pending` on) has not run, and the client's requests run in its order.
    NotYet,
}

/// What a speculative entry changed in the sessions, to be undone: the state clock before it,
/// and the sessions as they were before it changed them, in the order it changed them
/// (restored in reverse).
#[derive(Clone, Debug)]
pub(crate) struct Journal {
    clock_ms: u64,
    sessions: Vec<(ClientId, Option<Session>)>,
}

/// All client sessions.
#[derive(Clone, Debug)]
pub struct Sessions {
    /// Hashed, not ordered: a session is looked up, put and taken out per command, and
    /// nothing replicated depends on the map's order (eviction and expiry go by the age
    /// index, snapshots take the sessions in client order: `committed`). Boxed, so that the
    /// table's slack after it doubles costs a pointer a slot, not a session: what a session
    /// allocates stays near [`SESSION_BYTES_FIXED`] at every count. Fx, as the state's own
    /// tables hash their keys.
    by_client: FxHashMap<ClientId, Box<Session>>,
    /// Every session of `by_client` in order of last activity, by standing.
    index: AgeIndex,
    /// While an entry runs speculatively: what each change replaced.
    journal: Option<Journal>,
    /// Live sessions kept at most.
    limit: usize,
    /// Ms a session is kept inactive before it expires (the cluster's `session_retention_s`).
    retention_ms: u64,
    /// The state clock: the highest leader's time the applied entries carried, in ms since the
    /// Unix epoch (0 before any). Replicated state: it only follows the log, never goes back
    /// (a new leader's clock may be behind its predecessor's) and a snapshot keeps it.
    clock_ms: u64,
    /// Bytes of every session's results.
    results_bytes: u64,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(SESSIONS_MAX_DEFAULT, SESSION_RETENTION_S_DEFAULT)
    }
}

impl Sessions {
    /// No sessions; at most `limit` live ones, each kept at most `retention_s` inactive.
    pub fn new(limit: usize, retention_s: u64) -> Self {
        Sessions {
            by_client: FxHashMap::default(),
            index: AgeIndex::default(),
            journal: None,
            limit,
            retention_ms: retention_s.saturating_mul(1_000),
            clock_ms: 0,
            results_bytes: 0,
        }
    }

    /// Live sessions kept at most.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Seconds a session is kept inactive.
    pub fn retention_s(&self) -> u64 {
        self.retention_ms / 1_000
    }

    /// The state clock, in ms since the Unix epoch (0 before any time was applied).
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// Bytes the sessions are counted in the state's capacity: [`SESSION_BYTES_FIXED`] each
    /// (expired ones included) and their results.
    pub fn bytes(&self) -> u64 {
        self.by_client.len() as u64 * SESSION_BYTES_FIXED + self.results_bytes
    }

    /// Postcondition of every change (checked in debug builds): the running count of the
    /// results' bytes is their sum over the sessions.
    pub(crate) fn debug_assert_bytes(&self) {
        debug_assert_eq!(
            self.results_bytes,
            self.by_client
                .values()
                .map(|session| session.results_bytes())
                .sum::<u64>(),
            "the sessions' results bytes are counted as held"
        );
    }

    /// Checks every session (see [`Session::check_invariants`], none active after entry
    /// `active_max` nor after the state clock), that no journal is open between entries, that
    /// at most [`EXPIRED_SESSIONS_PER_SESSION`] expired sessions per live one allowed are
    /// remembered, that the running count of the results' bytes is their sum, and that the age
    /// index holds every session where it stands and nothing else, their times in its order.
    /// Walks every session.
    pub(crate) fn check_invariants(&self, active_max: EntryIndex) {
        assert!(
            self.journal.is_none(),
            "no session journal is open between entries"
        );
        let (mut expired, mut results_bytes) = (0, 0);
        for (client, session) in &self.by_client {
            session.check_invariants(*client, (active_max, self.clock_ms));
            assert!(
                self.index.holds(*client, session),
                "client {client:?}: the age index holds its session where it stands"
            );
            expired += usize::from(session.is_expired());
            results_bytes += session.results_bytes();
        }
        assert_eq!(
            self.index.total(),
            self.by_client.len(),
            "the age index holds the sessions and nothing else"
        );
        self.check_age_order();
        let expired_max = EXPIRED_SESSIONS_PER_SESSION.saturating_mul(self.limit);
        assert!(
            expired <= expired_max,
            "{expired} expired sessions remembered, at most {expired_max}"
        );
        assert_eq!(
            self.results_bytes, results_bytes,
            "the sessions' results bytes are counted as held"
        );
    }

    /// Sessions held.
    pub fn len(&self) -> usize {
        self.by_client.len()
    }

    /// True when no client has a session.
    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }

    /// The last request number applied (fully or in part) for `client`.
    pub fn last_request(&self, client: ClientId) -> Option<RequestNumber> {
        self.by_client.get(&client).map(|s| s.request)
    }

    /// The results of `client`'s request `request` when it is the session's request and has
    /// finished: its command count and encoded outcomes.
    pub fn finished_results(
        &self,
        client: ClientId,
        request: RequestNumber,
    ) -> Option<(u32, &[u8])> {
        let session = self.by_client.get(&client)?;
        if session.is_expired() {
            return None;
        }
        if let Some(finished) = session.earlier(request) {
            return Some((finished.request_commands, finished.results.as_slice()));
        }
        (session.request == request && session.is_complete())
            .then_some((session.request_commands, session.results.as_slice()))
    }

    /// The results so far of `client`'s request `request`, finished or not, when the session
    /// keeps them (its latest request, or one of the finished ones before it).
    pub(crate) fn results_of(&self, client: ClientId, request: RequestNumber) -> Option<&[u8]> {
        let session = self.by_client.get(&client)?;
        if session.request == request {
            return Some(&session.results);
        }
        session.earlier(request).map(|f| f.results.as_slice())
    }

    pub(crate) fn get(&self, client: ClientId) -> Option<&Session> {
        self.by_client.get(&client).map(|session| &**session)
    }

    /// Takes the results so far out of `client`'s session, which a fragment then extends.
    pub(crate) fn take_results(&mut self, client: ClientId) -> Vec<u8> {
        let session = self.by_client.get_mut(&client).expect("an open session");
        let results = std::mem::take(&mut session.results);
        assert!(
            self.results_bytes >= results.len() as u64,
            "{} bytes of results taken of {} counted",
            results.len(),
            self.results_bytes
        );
        self.results_bytes -= results.len() as u64;
        results
    }

    /// Puts `client`'s results back after a fragment applied `applied` more commands; returns
    /// the session when that finished its request.
    pub(crate) fn put_results(
        &mut self,
        client: ClientId,
        results: Vec<u8>,
        applied: u32,
    ) -> Option<&Session> {
        self.results_bytes += results.len() as u64;
        self.update(client, |session| {
            session.results = results;
            session.applied_commands += applied;
        });
        let session = &self.by_client[&client];
        session.is_complete().then_some(session)
    }

    /// Changes `client`'s session in place with `change`, keeping the age index in step (its
    /// key and standing may change); the caller keeps the count of results' bytes.
    fn update<R>(&mut self, client: ClientId, change: impl FnOnce(&mut Session) -> R) -> R {
        let session = self.by_client.get_mut(&client).expect("an open session");
        self.index.remove(client, session);
        let changed = change(session);
        self.index.insert(client, session);
        changed
    }

    /// Puts `session` in `client`'s place (none: removes it), keeping the age index and the
    /// count of results' bytes in step; returns what it replaced.
    fn replace(&mut self, client: ClientId, session: Option<Session>) -> Option<Session> {
        let replaced = self.by_client.remove(&client).map(|session| *session);
        if let Some(replaced) = &replaced {
            self.index.remove(client, replaced);
            assert!(
                self.results_bytes >= replaced.results_bytes(),
                "client {client:?}: its replaced results were counted"
            );
            self.results_bytes -= replaced.results_bytes();
        }
        if let Some(session) = session {
            self.index.insert(client, &session);
            self.results_bytes += session.results_bytes();
            self.by_client.insert(client, Box::new(session));
        }
        replaced
    }

    /// Starts journaling changes (a speculative entry begins).
    pub(crate) fn journal_start(&mut self) {
        assert!(
            self.journal.is_none(),
            "one speculative entry journals at a time"
        );
        self.journal = Some(Journal {
            clock_ms: self.clock_ms,
            sessions: Vec::new(),
        });
    }

    /// Stops journaling; returns what the changes replaced.
    pub(crate) fn journal_take(&mut self) -> Journal {
        self.journal.take().expect("a journal was started")
    }

    /// `client`'s session as committed: when a pending speculation changed it, the value the
    /// oldest of their journals kept (`pending` oldest first); otherwise the session as it is.
    pub(crate) fn committed_one<'a>(
        &'a self,
        client: ClientId,
        pending: impl IntoIterator<Item = &'a Journal>,
    ) -> Option<&'a Session> {
        for journal in pending {
            if let Some((_, before)) = journal.sessions.iter().find(|(c, _)| *c == client) {
                return before.as_ref();
            }
        }
        self.by_client.get(&client).map(|session| &**session)
    }

    /// The state clock as committed: the one before the oldest pending speculation, if any.
    pub(crate) fn committed_clock_ms<'a>(
        &self,
        mut pending: impl Iterator<Item = &'a Journal>,
    ) -> u64 {
        pending
            .next()
            .map_or(self.clock_ms, |oldest| oldest.clock_ms)
    }

    /// Every session as committed: a session a pending speculation changed has the value its
    /// journal kept (the oldest journal first), in client order.
    pub(crate) fn committed(&self, pending: &[&Journal]) -> Vec<(ClientId, Session)> {
        let mut committed: BTreeMap<ClientId, Session> = (self.by_client.iter())
            .map(|(client, session)| (*client, Session::clone(session)))
            .collect();
        let mut fixed = BTreeSet::new();
        for (client, before) in pending.iter().flat_map(|journal| journal.sessions.iter()) {
            if fixed.insert(*client) {
                match before {
                    Some(session) => committed.insert(*client, session.clone()),
                    None => committed.remove(client),
                };
            }
        }
        committed.into_iter().collect()
    }

    /// Every session and the state clock `clock_ms`, for a snapshot loaded from its records;
    /// at most `limit` live, kept `retention_s` inactive.
    pub(crate) fn from_records(
        (limit, retention_s): (usize, u64),
        clock_ms: u64,
        sessions: impl IntoIterator<Item = (ClientId, Session)>,
    ) -> Self {
        let mut loaded = Sessions::new(limit, retention_s);
        loaded.clock_ms = clock_ms;
        for (client, session) in sessions {
            let replaced = loaded.replace(client, Some(session));
            assert!(replaced.is_none(), "client {client:?}: one session each");
        }
        loaded
    }

    /// Undoes the changes a journal recorded.
    pub(crate) fn restore(&mut self, journal: Journal) {
        for (client, before) in journal.sessions.into_iter().rev() {
            self.replace(client, before);
        }
        self.clock_ms = journal.clock_ms;
        self.debug_assert_bytes();
    }

    /// Makes room for a new client when [`Sessions::limit`] sessions are live: the least
    /// recently active finished one is marked expired; and when more than
    /// [`EXPIRED_SESSIONS_PER_SESSION`] times the limit are expired, the oldest of those is
    /// forgotten.
    fn evict(&mut self, at: EntryIndex) {
        let live = self.index.len(Standing::Finished) + self.index.len(Standing::Unfinished);
        if live >= self.limit
            && let Some(client) = self.index.oldest(Standing::Finished)
        {
            self.expire(client, at);
        }
    }

    /// Turns `client`'s live session into an expired mark at entry `at`; and when more than
    /// [`EXPIRED_SESSIONS_PER_SESSION`] times the limit are then expired, forgets the mark
    /// made first.
    fn expire(&mut self, client: ClientId, at: EntryIndex) {
        let clock_ms = self.clock_ms;
        let before = self.update(client, |session| {
            let mark = session.expired(at, clock_ms);
            std::mem::replace(session, mark)
        });
        self.results_bytes -= before.results_bytes();
        self.noted(client, Some(before));
        if self.index.len(Standing::Expired) > EXPIRED_SESSIONS_PER_SESSION * self.limit
            && let Some(oldest) = self.index.oldest(Standing::Expired)
        {
            let forgotten = self.replace(oldest, None);
            self.noted(oldest, forgotten);
        }
    }

    /// Journals `client`'s session before a change.
    fn note(&mut self, client: ClientId) {
        if self.journal.is_some() {
            let before = self.by_client.get(&client).map(|s| Session::clone(s));
            self.noted(client, before);
        }
    }

    /// Journals that `client`'s session was `before` until the change just made (the session
    /// taken out rather than copied; no other change to it in between).
    fn noted(&mut self, client: ClientId, before: Option<Session>) {
        if let Some(journal) = &mut self.journal {
            journal.sessions.push((client, before));
        }
    }

    pub(crate) fn decide(&self, fragment: &FragmentHeader) -> Decision {
        let first = fragment.first_command;
        let end = first + fragment.command_count;
        match self.by_client.get(&fragment.client) {
            Some(s) if s.is_expired() || self.outlived(s) => Decision::Expired,
            // A client's first request is its registration (number 0, no commands) or number
            // 1: a session that is gone (evicted) is never silently restarted, so nothing it
            // sent before can be applied twice.
            None if first == 0 && fragment.request == RequestNumber(0) && end == 0 => {
                Decision::Execute { skip: 0 }
            }
            None if first == 0 && fragment.request == RequestNumber(1) => {
                Decision::Execute { skip: 0 }
            }
            // Pipelined: the client's first requests may arrive out of order.
            None if fragment.oldest_pending < fragment.request => Decision::NotYet,
            None => Decision::Expired,
            Some(s) if fragment.request > s.request && first == 0 => in_order(s, fragment),
            // A later fragment of a pipelined request whose start was not run (it came before
            // a request it follows had run): the client sends the request again, whole.
            Some(s)
                if fragment.request > s.request && fragment.oldest_pending < fragment.request =>
            {
                Decision::NotYet
            }
            Some(s) if fragment.request < s.request => match s.earlier(fragment.request) {
                Some(finished) if finished.digest != fragment.digest => Decision::Reused,
                Some(_) => Decision::Duplicate,
                None => Decision::Stale,
            },
            Some(s) if fragment.request != s.request => Decision::Stale,
            // The digest covers the command count too.
            Some(s) if fragment.digest != s.digest => Decision::Reused,
            Some(s) if end <= s.applied_commands => Decision::Duplicate,
            // A retry that overlaps what was applied: run only the commands after it.
            Some(s) if first <= s.applied_commands => Decision::Execute {
                skip: s.applied_commands - first,
            },
            Some(_) => Decision::Stale,
        }
    }

    /// Opens the session that a fragment to execute continues or starts; evicts the least
    /// recently active session whose request finished when a new client would exceed
    /// [`Sessions::limit`] (a session in the middle of a request is never evicted).
    pub(crate) fn open(&mut self, fragment: &FragmentHeader, index: EntryIndex) {
        let client = fragment.client;
        let new = !self.by_client.contains_key(&client);
        if new && self.by_client.len() >= self.limit {
            self.evict(index);
        }
        self.note(client);
        if new {
            // Inserted as the start below would leave it, which it then does not touch.
            let session = Session {
                request: fragment.request,
                request_commands: fragment.request_commands,
                digest: fragment.digest,
                applied_commands: 0,
                results: Vec::new(),
                last_active: index,
                last_active_ms: self.clock_ms,
                expired: false,
                earlier: Vec::new(),
            };
            self.index.insert(client, &session);
            let replaced = self.by_client.insert(client, Box::new(session));
            assert!(replaced.is_none(), "client {client:?}: a new session");
            return;
        }
        let now = (index, self.clock_ms);
        let dropped = self.update(client, |session| session.start(fragment, now));
        assert!(
            self.results_bytes >= dropped,
            "{dropped} bytes of results dropped of {} counted",
            self.results_bytes
        );
        self.results_bytes -= dropped;
    }
}

/// Whether a fragment that starts a request newer than the session's may run now: only when
/// every request the client still waits for before it (from its oldest pending on) has run,
/// so that pipelined requests apply in the client's order. A request the client no longer
/// waits for (it gave up on it) holds nothing up; a client with one request in flight is never
/// held up.
fn in_order(session: &Session, fragment: &FragmentHeader) -> Decision {
    let oldest = fragment.oldest_pending.min(fragment.request);
    let latest_pending = !session.is_complete() && oldest <= session.request;
    let first_not_run = oldest.max(RequestNumber(session.request.0 + 1));
    if latest_pending || first_not_run < fragment.request {
        Decision::NotYet
    } else {
        Decision::Execute { skip: 0 }
    }
}
