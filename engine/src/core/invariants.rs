//! The consensus state's invariants, stated where a bug would break them first: the order of
//! the log's indexes, what each role implies, the timers and a leader's view of its peers.
//! [`Core::check_invariants`] calls these (with the log's, the member lists', the read
//! rounds' and the repair's own checks).

use super::{Core, HASH_HISTORY_ENTRIES};
use crate::ids::{EntryIndex, NodeId};
use net::message::Role;

impl Core {
    /// base <= applied <= commit <= last, durable <= last, what is left to apply is in memory,
    /// and the hash history ends at the entry applied.
    pub(super) fn check_indexes(&self) {
        let base = self.log.base().index;
        let applied = self.applied.map_or(EntryIndex::ZERO, |a| a.index);
        let last = self.log.last_index();
        assert!(
            base <= applied && applied <= self.commit && self.commit <= last,
            "indexes out of order: base {base}, applied {applied}, commit {}, last {last}",
            self.commit
        );
        assert!(
            self.durable <= last,
            "durable {} past the log's last index {last}",
            self.durable
        );
        assert!(
            self.log.window_start() <= applied.next(),
            "entries after the applied {applied} left memory (window starts at {})",
            self.log.window_start()
        );
        assert!(
            self.history.len() <= HASH_HISTORY_ENTRIES,
            "hash history of {} entries",
            self.history.len()
        );
        assert_eq!(
            self.history.back().copied(),
            self.applied,
            "the hash history ends at the entry applied"
        );
        for (node, remote) in &self.pending_checks {
            assert!(
                remote.index > applied,
                "a pending hash check of node {node} at {} is due (applied {applied})",
                remote.index
            );
        }
        self.check_follower_indexes();
    }

    /// What a follower showed to match and acknowledged is in its log; a replica that vouches
    /// for no leader acknowledged only what is committed.
    fn check_follower_indexes(&self) {
        let last = self.log.last_index();
        assert!(
            self.confirmed <= last,
            "confirmed {} past the log's last index {last}",
            self.confirmed
        );
        assert!(
            self.acknowledged <= last,
            "acknowledged {} past the log's last index {last}",
            self.acknowledged
        );
        assert!(
            self.vouches() || self.acknowledged <= self.commit,
            "acknowledged {} beyond the commit {}, vouching for no leader",
            self.acknowledged,
            self.commit
        );
    }

    /// What each role implies of the known leader, the vote and the peers.
    pub(super) fn check_role(&self) {
        let id = self.config.id;
        if let Some(pre_votes) = &self.pre_votes {
            assert_eq!(pre_votes.first(), Some(&id), "pre-votes start with its own");
            assert_ne!(self.role, Role::Leader, "a leader asking for pre-votes");
        }
        if self.role != Role::Leader {
            assert!(
                self.peers.is_empty(),
                "a {:?} tracks {} peers",
                self.role,
                self.peers.len()
            );
        }
        match self.role {
            Role::Leader => self.check_leader(),
            Role::Candidate => {
                assert_eq!(self.leader, None, "a candidate knows a leader");
                assert_eq!(
                    self.hard.voted_for,
                    Some(id),
                    "a candidate of term {} did not vote for itself",
                    self.hard.term
                );
                assert!(self.votes.contains(&id), "a candidate's votes lack its own");
                assert_eq!(self.hard.votes_lost, None, "a candidate with lost votes");
            }
            Role::Follower => {
                assert_ne!(self.leader, Some(id), "a follower of itself");
            }
        }
    }

    /// A leader leads itself in a term it voted for itself in, holds an entry of that term
    /// last, has nothing to repair, and is a member (or its removal is not committed yet).
    fn check_leader(&self) {
        let (id, term) = (self.config.id, self.hard.term);
        assert_eq!(self.leader, Some(id), "a leader that knows another leader");
        assert_eq!(
            self.hard.voted_for,
            Some(id),
            "the leader of term {term} voted for another"
        );
        assert_eq!(
            self.log.last_term(),
            term,
            "the leader's last entry is of another term"
        );
        assert_eq!(self.hard.repair, None, "a leader repairing damage");
        assert_eq!(self.hard.votes_lost, None, "a leader with lost votes");
        assert!(
            self.is_member() || self.configs.has_pending(),
            "leader {id} is no member, and no change is pending"
        );
    }

    /// The election and heartbeat timers stay within their timeouts.
    pub(super) fn check_timers(&self) {
        let min = self.config.election_ticks_min;
        assert!(
            (min..2 * min).contains(&self.election_timeout),
            "election timeout {} outside {min}..{}",
            self.election_timeout,
            2 * min
        );
        assert!(
            self.election_elapsed < self.election_timeout,
            "election timer at {} of {} without an election",
            self.election_elapsed,
            self.election_timeout
        );
        if self.role == Role::Leader {
            assert!(
                self.heartbeat_elapsed < self.config.heartbeat_ticks,
                "heartbeat timer at {} of {}",
                self.heartbeat_elapsed,
                self.config.heartbeat_ticks
            );
        }
        assert!(
            self.last_leader_contact.is_none_or(|t| t <= self.ticks),
            "leader contact in the future"
        );
    }

    /// A leader's peers are the other members, each with match < next <= last + 1.
    pub(super) fn check_peers(&self) {
        if self.role != Role::Leader {
            return;
        }
        let others = self.others();
        let peers: Vec<NodeId> = self.peers.keys().copied().collect();
        assert_eq!(
            peers, others,
            "the leader's peers are not the other members"
        );
        let last = self.log.last_index();
        for (peer, progress) in &self.peers {
            assert!(
                progress.matched < progress.next && progress.next <= last.next(),
                "peer {peer}: match {} next {} with last {last}",
                progress.matched,
                progress.next
            );
            assert!(
                progress.last_heard <= self.ticks,
                "peer {peer} heard in the future"
            );
            if let Some((sent, at)) = progress.snapshot {
                assert!(
                    progress.matched < sent && sent <= last && at <= self.ticks,
                    "peer {peer}: snapshot of {sent} at tick {at} with match {} (last {last})",
                    progress.matched
                );
            }
        }
    }
}
