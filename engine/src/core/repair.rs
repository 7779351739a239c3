//! Repair of damage: a replica whose disk lost entries it may have acknowledged waits, voting
//! as if it still held them and never leading, until a leader has made its log durable through
//! them again, or until it has heard that no other replica that may hold them does (then none
//! of them was committed). What it must hear is where the others' logs end: a vote request
//! says where the candidate's ends, and [`LogEnd`] messages ask and answer it, so that replicas
//! that never campaign (no member in a log the damage cut, or rebuilt knowing no members) are
//! heard too.

use super::{Action, Core, LostVotes, MemberSet};
use crate::ids::EntryIndex;
use net::message::{LogEnd, PeerMessage, Role};

impl Core {
    /// Ends a repair once the log is durable through the index the damage may have cost:
    /// everything up to it now comes from a leader.
    pub(super) fn repaired(&mut self, out: &mut Vec<Action>) {
        if self
            .hard
            .repair
            .is_some_and(|repair| self.durable >= repair.index)
        {
            self.hard.repair = None;
            // The lists gathered during the repair give way to the log's again.
            self.hard.members = Some(MemberSet::of(self.members().ids()));
            out.push(Action::PersistHardState(self.hard));
        }
    }

    /// A replica that may lack entries it acknowledged, or may have cast votes it lost, never
    /// leads; lost votes it bounded are in terms at or above its own.
    pub(super) fn check_repair(&self) {
        if self.hard.repair.is_some() || self.hard.votes_lost.is_some() {
            assert_ne!(
                self.role,
                Role::Leader,
                "a leader with repair {:?} and lost votes {:?}",
                self.hard.repair,
                self.hard.votes_lost
            );
        }
        if let Some(LostVotes::Through(lost)) = self.hard.votes_lost {
            assert!(
                lost >= self.hard.term,
                "votes lost through term {lost}, below the current term {}",
                self.hard.term
            );
        }
    }

    /// Ends a repair when every other replica, heard since this one started, has a log that
    /// ends before this one's durable log: none holds an entry this one lost, so none of those
    /// entries was committed (a committed entry is on a majority and never leaves a log), and
    /// there is nothing to wait for. Unless the entries beyond the damage said the first lost
    /// one was committed: then every copy of it is lost ([`Action::Unrecoverable`]). Entries
    /// held only in memory do not count: a crash before their fsync would leave the log
    /// without them and without the repair.
    pub(super) fn release_unheld_repair(&mut self, out: &mut Vec<Action>) {
        // A replica that knows no members it is one of does not know who else may hold what
        // it lost: it waits for a leader.
        let Some(judges) = self.judges().filter(|_| self.hard.repair.is_some()) else {
            return;
        };
        let end = self.durable_end();
        let unheld = judges
            .iter()
            .all(|n| self.log_ends.get(n).is_some_and(|&(_, last)| last <= end));
        let Some(repair) = self.hard.repair.filter(|_| unheld) else {
            return;
        };
        let first_lost = end.next();
        if first_lost <= repair.committed {
            // One last round of vote requests tells the others where this log ends, so that
            // each of them can come to the same conclusion before this replica halts.
            self.campaign(out);
            assert_ne!(self.role, Role::Leader, "a replica repairing damage won");
            out.push(Action::Unrecoverable(first_lost));
        } else {
            // The lost entries are nowhere: the members they may have named are gone with them.
            self.hard.repair = None;
            self.hard.members = Some(MemberSet::of(self.members().ids()));
            out.push(Action::PersistHardState(self.hard));
        }
    }

    /// The election timer of a repairing replica ran out: it asks every replica whose log may
    /// hold what it lost where that log ends, unless it heard an end that holds none of it
    /// (an end heard beyond its own is asked again: that log may have been cut since).
    pub(super) fn ask_log_ends(&mut self, out: &mut Vec<Action>) {
        if self.hard.repair.is_none() {
            return;
        }
        let Some(judges) = self.judges() else {
            return;
        };
        let end = self.durable_end();
        for to in judges {
            if self.log_ends.get(&to).is_none_or(|&(_, last)| last > end) {
                out.push(Action::Send {
                    to,
                    message: PeerMessage::LogEnd(self.log_end(true)),
                });
            }
        }
    }

    /// A replica whose lost votes are unknown asks every other replica it has not heard since
    /// it started where its log ends, once per election timeout: the answers carry their
    /// terms. A follower of a live leader never campaigns, so its pre-votes would never ask,
    /// and until it has heard them all it acknowledges nothing beyond the commit.
    pub(super) fn ask_terms(&mut self, out: &mut Vec<Action>) {
        if self.hard.votes_lost != Some(LostVotes::Unknown) || self.role == Role::Leader {
            return;
        }
        let Some(judges) = self.term_judges() else {
            return;
        };
        for to in judges {
            if !self.heard_terms.contains_key(&to) {
                out.push(Action::Send {
                    to,
                    message: PeerMessage::LogEnd(self.log_end(true)),
                });
            }
        }
    }

    /// The end of the log that is durable: what a crash would leave.
    fn durable_end(&self) -> EntryIndex {
        self.durable.min(self.log.last_index())
    }

    /// Notes where the sender's log ends (as a vote request's end is noted), answers when
    /// asked, and ends this replica's repair if that was the last end it waited for.
    pub(super) fn on_log_end(&mut self, end: LogEnd, out: &mut Vec<Action>) {
        self.log_ends
            .insert(end.from, (end.last_term, end.last_index));
        if end.ask {
            out.push(Action::Send {
                to: end.from,
                message: PeerMessage::LogEnd(self.log_end(false)),
            });
        }
        self.release_unheld_repair(out);
    }

    fn log_end(&self, ask: bool) -> LogEnd {
        LogEnd {
            term: self.hard.term,
            from: self.config.id,
            last_index: self.log.last_index(),
            last_term: self.log.last_term(),
            ask,
        }
    }
}
