//! The sessions' age bound: the state clock, and the expiry of sessions inactive for longer
//! than the retention. Age is judged by the times the applied entries carry, never by a
//! replica's own clock, so that every replica expires the same sessions at the same entry.

use super::index::Standing;
use super::{Session, Sessions};
use crate::entry::ENTRY_COMMANDS_MAX;
use crate::ids::{ClientId, EntryIndex};

/// Seconds a session is kept inactive unless the cluster file says otherwise
/// (`session_retention_s`): a day, so that a caller's retries with one idempotency key over a
/// day are answered from its session.
pub const SESSION_RETENTION_S_DEFAULT: u64 = 86_400;
/// Fewest seconds a cluster may keep an inactive session: longer than any client keeps
/// retrying one request (a gateway gives up after 10 s and drops a pooled session idle for
/// 30 s), so that a retry of a request that applied finds its session alive.
pub const SESSION_RETENTION_S_MIN: u64 = 60;
/// Most seconds a cluster may keep an inactive session: 30 days, longer than any caller keeps
/// retrying, and finite so that a value in milliseconds by mistake is refused.
pub const SESSION_RETENTION_S_MAX: u64 = 30 * 86_400;
/// Sessions past the retention an entry expires at most, so that an entry after a long quiet
/// spell does bounded work; those left expire with the next entries, and meanwhile they are
/// answered as expired all the same (see `Sessions::outlived`). As many as an entry's
/// commands can open, so that expiry keeps up with the sessions a stream of entries opens.
pub const SESSIONS_AGED_PER_ENTRY_MAX: usize = ENTRY_COMMANDS_MAX as usize;

const _: () = assert!(SESSION_RETENTION_S_MIN <= SESSION_RETENTION_S_DEFAULT);
const _: () = assert!(SESSION_RETENTION_S_DEFAULT <= SESSION_RETENTION_S_MAX);
// The retention in ms never overflows.
const _: () = assert!(SESSION_RETENTION_S_MAX.checked_mul(1_000).is_some());

impl Sessions {
    /// True when `session` is live and has been inactive for longer than the retention, by the
    /// state clock: it is answered as expired, whether or not it was marked yet.
    pub(crate) fn outlived(&self, session: &Session) -> bool {
        self.outlived_at(session, self.clock_ms)
    }

    /// [`Sessions::outlived`] with the state clock at `clock_ms` (the committed one, say).
    pub(crate) fn outlived_at(&self, session: &Session, clock_ms: u64) -> bool {
        !session.expired && clock_ms.saturating_sub(session.last_active_ms) > self.retention_ms
    }

    /// A command entry stamped `now_ms` by its leader begins: the state clock moves to it
    /// unless it is behind (a new leader's clock may be), and up to
    /// [`SESSIONS_AGED_PER_ENTRY_MAX`] of the sessions past the retention expire, least
    /// recently active first, into marks made at entry `at`.
    pub(crate) fn advance_clock(&mut self, now_ms: u64, at: EntryIndex) {
        if now_ms <= self.clock_ms {
            return;
        }
        if self.clock_ms == 0 {
            self.stamp_untimed(now_ms);
        }
        self.clock_ms = now_ms;
        for _ in 0..SESSIONS_AGED_PER_ENTRY_MAX {
            match self.oldest_live() {
                Some(client) if self.outlived(&self.by_client[&client]) => self.expire(client, at),
                Some(_) | None => break,
            }
        }
    }

    /// The first time applied: sessions opened before any (by entries stamped 0) or read from a
    /// snapshot that kept no times (format 5 or 6) count as active now, so that they get the
    /// whole retention from here. Once per state, over every session.
    fn stamp_untimed(&mut self, now_ms: u64) {
        assert_eq!(
            self.clock_ms, 0,
            "only sessions before any time are untimed"
        );
        let mut clients: Vec<ClientId> = self.by_client.keys().copied().collect();
        // In client order, as every replica journals them.
        clients.sort_unstable();
        for client in clients {
            self.note(client);
            let session = self.by_client.get_mut(&client).expect("listed");
            assert_eq!(session.last_active_ms, 0, "no time before the first");
            // The age index orders by entry, not time: the key stays.
            session.last_active_ms = now_ms;
        }
    }

    /// The least recently active live session, finished or not (ties by client id).
    fn oldest_live(&self) -> Option<ClientId> {
        let finished = self.index.oldest_key(Standing::Finished);
        let unfinished = self.index.oldest_key(Standing::Unfinished);
        let oldest = match (finished, unfinished) {
            (Some(f), Some(u)) => Some(f.min(u)),
            (one, other) => one.or(other),
        };
        oldest.map(|(_, client)| client)
    }

    /// Checks that in each order of the age index the sessions' times never go back: a
    /// session active at a later entry was active at a later or equal state clock, which is
    /// what lets expiry look at the front of the order only.
    pub(super) fn check_age_order(&self) {
        for standing in [Standing::Finished, Standing::Unfinished, Standing::Expired] {
            let mut previous: Option<(EntryIndex, u64)> = None;
            for (index, client) in self.index.iter(standing) {
                let ms = self.by_client[client].last_active_ms;
                assert!(
                    previous.is_none_or(|(_, before)| before <= ms),
                    "client {client:?}, active at entry {index} at {ms} ms, after a session \
                     active earlier at {previous:?}"
                );
                previous = Some((*index, ms));
            }
        }
    }
}
