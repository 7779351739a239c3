//! Rounds of confirmation for reads off the log (`notes/decisions/reads.md`). A leader starts
//! a round by sending [`ReadCheck`] to the other members; a round is confirmed once a
//! majority (the leader counting itself) answered it, or a later round, in the leader's term.
//! A member answers only while its term is the leader's (it takes a newer term from the
//! check itself, as from an append), so a majority that answered a round started at time t
//! shows that no newer leader had been elected by then: a newer leader needs one of them to
//! vote in a newer term first. Rounds are counted for the replica's whole run, so an answer
//! to a round of an earlier leadership can never confirm one of this.

use super::{Action, Core};
use crate::ids::NodeId;
use net::message::{PeerMessage, ReadCheck, ReadCheckReply, Role};
use std::collections::BTreeMap;

/// The round of an answer that confirms none: a leader's first round is 1.
pub const NO_ROUND: u64 = 0;

/// A leader's rounds.
#[derive(Debug, Default)]
pub(super) struct ReadRounds {
    /// The last round started (by this replica, in any term).
    started: u64,
    /// The first round of this leadership: answers to earlier ones do not count.
    first: u64,
    /// The highest round each member answered in this leadership.
    answered: BTreeMap<NodeId, u64>,
    /// The highest round a majority answered in this leadership.
    confirmed: u64,
}

impl Core {
    /// As leader, starts a read round: every other member is asked to confirm this term.
    /// Returns the round; [`Action::ReadsConfirmed`] follows once a majority answered it. In
    /// a cluster of one it is confirmed at once, which [`Core::read_round_confirmed`] shows
    /// (no action: the caller is the one waiting for it).
    pub fn start_read_round(&mut self, out: &mut Vec<Action>) -> u64 {
        assert_eq!(self.role, Role::Leader, "only a leader starts read rounds");
        let rounds = &mut self.read_rounds;
        rounds.started += 1;
        let check = ReadCheck {
            term: self.hard.term,
            leader: self.config.id,
            round: rounds.started,
        };
        for &to in self.peers.keys() {
            out.push(Action::Send {
                to,
                message: PeerMessage::ReadCheck(check.clone()),
            });
        }
        self.confirm_read_rounds();
        check.round
    }

    /// The highest read round a majority confirmed in this leadership (0 before any).
    pub fn read_round_confirmed(&self) -> u64 {
        self.read_rounds.confirmed
    }

    /// The last read round started (0 before any).
    pub fn read_round_started(&self) -> u64 {
        self.read_rounds.started
    }

    /// A new leadership: no answer of an earlier one counts.
    pub(super) fn begin_read_rounds(&mut self) {
        let rounds = &mut self.read_rounds;
        assert!(
            rounds.first <= rounds.started + 1,
            "rounds counted back: first {} after started {}",
            rounds.first,
            rounds.started
        );
        rounds.first = rounds.started + 1;
        rounds.confirmed = rounds.started;
        rounds.answered.clear();
    }

    /// Rounds only move forward: first - 1 <= confirmed <= started, and every answer counted
    /// is of a round of this leadership that was started.
    pub(super) fn check_read_rounds(&self) {
        let rounds = &self.read_rounds;
        assert!(
            rounds.first <= rounds.started + 1
                && rounds.first.saturating_sub(1) <= rounds.confirmed
                && rounds.confirmed <= rounds.started,
            "read rounds out of order: first {}, confirmed {}, started {}",
            rounds.first,
            rounds.confirmed,
            rounds.started
        );
        for (node, &round) in &rounds.answered {
            assert!(
                (rounds.first..=rounds.started).contains(&round),
                "node {node} answered round {round} outside {}..={}",
                rounds.first,
                rounds.started
            );
        }
    }

    /// A member's answer to a leader's check: its term, taken from the check if newer (the
    /// message's handling did that already). The round is echoed only to a check of that
    /// term: an answer of a newer term to an older check is round 0, which confirms nothing
    /// and only deposes. (A leader that restarted counts its rounds from 0 again, in a newer
    /// term; an answer carrying its new term and an old round of its earlier run, sent before
    /// its new round began, would otherwise confirm that round.) A replica that may not vouch
    /// for the leader of its term (`Core::vouches`) confirms nothing either.
    pub(super) fn on_read_check(&mut self, check: ReadCheck, out: &mut Vec<Action>) {
        let confirms = check.term == self.hard.term && self.vouches();
        if confirms {
            // A confirmation vouches for the leader: recorded before it leaves.
            self.vouch_known(check.leader, check.term, out);
        }
        let reply = ReadCheckReply {
            term: self.hard.term,
            from: self.config.id,
            round: if confirms { check.round } else { NO_ROUND },
        };
        out.push(Action::Send {
            to: check.leader,
            message: PeerMessage::ReadCheckReply(reply),
        });
    }

    /// The leader counts an answer of its term to a round of this leadership.
    pub(super) fn on_read_check_reply(&mut self, reply: ReadCheckReply, out: &mut Vec<Action>) {
        let rounds = &self.read_rounds;
        if self.role != Role::Leader
            || reply.term != self.hard.term
            || reply.round == NO_ROUND
            || reply.round < rounds.first
            || reply.round > rounds.started
        {
            return;
        }
        let Some(progress) = self.peers.get_mut(&reply.from) else {
            return;
        };
        progress.last_heard = self.ticks;
        let answered = self.read_rounds.answered.entry(reply.from).or_default();
        *answered = (*answered).max(reply.round);
        if self.confirm_read_rounds() {
            out.push(Action::ReadsConfirmed(self.read_rounds.confirmed));
        }
    }

    /// Moves the confirmed round to the highest a majority answered (the leader answers every
    /// round it starts, when it is a member); true when it moved.
    fn confirm_read_rounds(&mut self) -> bool {
        let rounds = &self.read_rounds;
        let before = rounds.first.saturating_sub(1);
        let mut answered: Vec<u64> = self
            .peers
            .keys()
            .map(|p| rounds.answered.get(p).copied().unwrap_or(before))
            .collect();
        if self.is_member() {
            answered.push(rounds.started);
        }
        let confirmed = super::quorum_index(&mut answered);
        assert!(
            confirmed <= rounds.started,
            "a round confirmed before it started"
        );
        let moved = confirmed > rounds.confirmed;
        self.read_rounds.confirmed = confirmed.max(rounds.confirmed);
        assert!(
            self.read_rounds.confirmed >= self.read_rounds.first.saturating_sub(1),
            "confirmed a round before this leadership"
        );
        moved
    }
}
