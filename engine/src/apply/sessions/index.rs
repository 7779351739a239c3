//! The sessions in order of last activity: picking the session to evict or to expire is a
//! look at the front of an ordered set, O(log n), where it used to be a scan of every session.

use super::Session;
use crate::ids::{ClientId, EntryIndex};
use std::collections::BTreeSet;

/// Where a session stands, which decides the order it is kept in: count eviction takes the
/// least recently active finished session (a session in the middle of a request is kept for
/// its retry), and forgetting takes the oldest expired mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    /// Live, its latest request finished.
    Finished,
    /// Live, in the middle of a request (some of its commands not applied yet).
    Unfinished,
    /// An expired mark.
    Expired,
}

impl Session {
    pub(super) fn standing(&self) -> Standing {
        match (self.expired, self.is_complete()) {
            (true, _) => Standing::Expired,
            (false, true) => Standing::Finished,
            (false, false) => Standing::Unfinished,
        }
    }

    /// The session's place in its order: its last activity, ties broken by client id so that
    /// every replica picks the same.
    fn age_key(&self, client: ClientId) -> (EntryIndex, ClientId) {
        (self.last_active, client)
    }
}

/// Every session's age key, one ordered set per [`Standing`]. Kept in step with the map of
/// sessions by [`super::Sessions`], which removes a session's key before changing the session
/// and puts it back after.
#[derive(Clone, Debug, Default)]
pub(super) struct AgeIndex {
    finished: BTreeSet<(EntryIndex, ClientId)>,
    unfinished: BTreeSet<(EntryIndex, ClientId)>,
    expired: BTreeSet<(EntryIndex, ClientId)>,
}

impl AgeIndex {
    fn order(&self, standing: Standing) -> &BTreeSet<(EntryIndex, ClientId)> {
        match standing {
            Standing::Finished => &self.finished,
            Standing::Unfinished => &self.unfinished,
            Standing::Expired => &self.expired,
        }
    }

    fn order_mut(&mut self, standing: Standing) -> &mut BTreeSet<(EntryIndex, ClientId)> {
        match standing {
            Standing::Finished => &mut self.finished,
            Standing::Unfinished => &mut self.unfinished,
            Standing::Expired => &mut self.expired,
        }
    }

    /// Adds `client`'s session, which the index does not hold yet.
    pub(super) fn insert(&mut self, client: ClientId, session: &Session) {
        let added = (self.order_mut(session.standing())).insert(session.age_key(client));
        assert!(added, "client {client:?}: its session is indexed once");
    }

    /// Removes `client`'s session as the index holds it (before the session changes).
    pub(super) fn remove(&mut self, client: ClientId, session: &Session) {
        let removed = (self.order_mut(session.standing())).remove(&session.age_key(client));
        assert!(
            removed,
            "client {client:?}: its session was indexed as it stands"
        );
    }

    /// The least recently active session of `standing` (the lowest client id of those
    /// active at the same entry).
    pub(super) fn oldest(&self, standing: Standing) -> Option<ClientId> {
        self.order(standing).first().map(|(_, client)| *client)
    }

    /// The key of the least recently active session of `standing`.
    pub(super) fn oldest_key(&self, standing: Standing) -> Option<(EntryIndex, ClientId)> {
        self.order(standing).first().copied()
    }

    /// The keys of `standing`, least recently active first.
    pub(super) fn iter(
        &self,
        standing: Standing,
    ) -> impl Iterator<Item = &(EntryIndex, ClientId)> + '_ {
        self.order(standing).iter()
    }

    /// Sessions of `standing`.
    pub(super) fn len(&self, standing: Standing) -> usize {
        self.order(standing).len()
    }

    /// True when `client`'s session is indexed as it stands.
    pub(super) fn holds(&self, client: ClientId, session: &Session) -> bool {
        (self.order(session.standing())).contains(&session.age_key(client))
    }

    /// Sessions indexed, of every standing.
    pub(super) fn total(&self) -> usize {
        self.finished.len() + self.unfinished.len() + self.expired.len()
    }
}
