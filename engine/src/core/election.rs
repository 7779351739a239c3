//! Pre-vote (Raft thesis, section 9.6): before a replica raises its term to campaign, it asks
//! the others whether they would vote for it. A replica grants a pre-vote when it has not
//! heard from a leader within the minimum election timeout and the candidate's log is up to
//! date; answering changes nothing (no term, no vote, no timer). Only a majority of pre-votes
//! starts a real campaign, so a replica cut off from the others keeps its term while it is
//! away, and on its return its messages do not depose a leader the others follow.

use super::{Action, Core};
use net::message::{Role, Vote, VoteReply};

impl Core {
    /// The election timer ran out: ask for pre-votes (a lone replica campaigns at once).
    pub(super) fn ask_pre_votes(&mut self, out: &mut Vec<Action>) {
        assert_ne!(self.role, Role::Leader, "a leader asks for pre-votes");
        self.reset_election_timer();
        self.pre_votes = Some(vec![self.config.id]);
        if self.quorum() <= 1 {
            self.campaign(out);
            return;
        }
        self.request_votes(super::Term(self.hard.term.0 + 1), true, out);
    }

    /// A pre-vote request: granted when this replica would vote for the candidate in the term
    /// it names. Nothing here changes.
    pub(super) fn on_pre_vote(&mut self, vote: Vote, out: &mut Vec<Action>) {
        let up_to_date = self.log_up_to_date(&vote, out);
        let granted = vote.term > self.hard.term
            && !self.leader_is_fresh()
            && up_to_date
            && self.may_vote_in(vote.term);
        self.answer_vote(vote.candidate, true, granted, out);
    }

    /// An answer to this replica's pre-vote request: a majority starts the campaign. (An
    /// answer of a higher term made this replica a follower of it before it got here, which
    /// ended the pre-vote.)
    pub(super) fn on_pre_vote_reply(&mut self, reply: VoteReply, out: &mut Vec<Action>) {
        assert!(reply.pre, "a pre-vote's answer");
        let Some(granted) = self.pre_votes.as_mut().filter(|_| reply.granted) else {
            return;
        };
        assert_ne!(self.role, Role::Leader, "a leader counting pre-votes");
        if self.hard.votes_lost == Some(super::LostVotes::Unknown) {
            // Asked only to learn the others' terms: it does not campaign yet.
            return;
        }
        if !granted.contains(&reply.from) {
            granted.push(reply.from);
        }
        let granted = granted.clone();
        if self.members_among(&granted) >= self.quorum() {
            self.campaign(out);
        }
    }
}
