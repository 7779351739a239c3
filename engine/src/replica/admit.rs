//! Admission: a client's request is answered at once (refused, not the leader, or known to the
//! committed sessions) or waits in the batcher for its entry.

use super::{Io, Replica};
use crate::apply::CommittedAnswer;
use crate::batcher::{Queued, command_ends, keyed_runs};
use crate::entry::RequestDigest;
use crate::handler::Handler;
use crate::ids::ClientId;
use bytes::Bytes;
use net::message::{
    ClientReply, KeyRun, PROTOCOL_VERSION_KEYED, Rejection, Role, Submit, SubmitKeyed,
};

impl<H: Handler, T> Replica<H, T> {
    /// A client's request, to be answered through `token`: at once, or once its entry applied.
    pub fn admit(&mut self, submit: Submit, token: T, out: &mut Vec<Io<T>>) {
        match self.admission(submit, &[], token) {
            Ok(()) => {}
            Err((token, reply)) => out.push(Io::Answer { to: token, reply }),
        }
    }

    /// A client's request with keyed runs, to be answered through `token` as
    /// [`Replica::admit`] answers a request.
    pub fn admit_keyed(&mut self, keyed: SubmitKeyed, token: T, out: &mut Vec<Io<T>>) {
        let request = keyed.submit.request;
        let answer = if self.keys_spoken() {
            self.admission(keyed.submit, &keyed.runs, token)
        } else {
            let reason = Rejection::OlderMembers;
            Err((token, ClientReply::Rejected { request, reason }))
        };
        if let Err((token, reply)) = answer {
            out.push(Io::Answer { to: token, reply });
        }
    }

    /// False when a member is known to speak a protocol that cannot decode keyed entries.
    /// A member not heard yet is taken to speak this build's: nodes are upgraded before the
    /// callers that send keys (`notes/operations.md`).
    fn keys_spoken(&self) -> bool {
        let me = self.core.id();
        let members = self.core.members().ids().filter(|&n| n != me);
        members
            .filter_map(|n| self.peer_protocols.get(&n))
            .all(|&version| version >= PROTOCOL_VERSION_KEYED)
    }

    /// Takes a request into the batcher (or re-attaches a retry of one in flight), or gives
    /// back the token with the answer to send at once.
    fn admission(
        &mut self,
        submit: Submit,
        runs: &[KeyRun],
        token: T,
    ) -> Result<(), (T, ClientReply)> {
        let request = submit.request;
        let reject = |token, reason| Err((token, ClientReply::Rejected { request, reason }));
        if self.halted.is_some() {
            return reject(token, Rejection::Halted);
        }
        if self.core.role() != Role::Leader {
            return Err((token, self.not_leader()));
        }
        let ends = match command_ends::<H>(request, &submit.commands, submit.command_count) {
            Ok(ends) => ends,
            Err(reason) => return reject(token, reason),
        };
        let (runs, digest) = match checked_runs(&submit, runs, &ends) {
            Ok(checked) => checked,
            Err(reason) => return reject(token, reason),
        };
        // From committed state only: a retry is never answered with what a simulation left.
        let known = match self
            .machine
            .committed_answer(submit.client, request, digest)
        {
            CommittedAnswer::Stale => Some(ClientReply::Stale { request }),
            CommittedAnswer::Expired => Some(ClientReply::Expired { request }),
            CommittedAnswer::Reused => Some(ClientReply::Reused { request }),
            CommittedAnswer::Finished(command_count, results) => Some(ClientReply::Results {
                client: submit.client,
                request,
                command_count,
                results,
            }),
            CommittedAnswer::Unknown => None,
        };
        if let Some(reply) = known {
            return Err((token, reply));
        }
        let key = (submit.client, request);
        match self.waiters.get_mut(&key) {
            // A retry of a request in flight: answer on the newest connection.
            Some((waiting, waiter)) if *waiting == digest => {
                *waiter = token;
                return Ok(());
            }
            Some(_) => return Err((token, ClientReply::Reused { request })),
            None => {}
        }
        // A retry of a request still queued whose waiter was answered meanwhile, by an earlier
        // copy that committed (the committed sessions may not show it yet while its
        // speculation is pending): it waits for the queued copy's answer, never queued twice.
        match self.batcher.queued_digest(submit.client, request) {
            Some(queued) if queued == digest => {
                self.waiters.insert(key, (digest, token));
                return Ok(());
            }
            Some(_) => return Err((token, ClientReply::Reused { request })),
            None => {}
        }
        // Only a request the sessions and the log do not know of is refused for a full disk:
        // one they know is answered (or waited for) as any retry is.
        if self.storage_full {
            return reject(token, Rejection::StorageFull);
        }
        let queued = Queued {
            client: submit.client,
            request,
            oldest_pending: submit.oldest_pending,
            commands: Bytes::from(submit.commands),
            ends,
            digest,
            runs,
        };
        if self.batcher.push(queued).is_err() {
            return reject(token, Rejection::Busy);
        }
        self.timing.request_queued();
        let replaced = self.waiters.insert(key, (digest, token));
        // A second waiter would silently take the first one's answer.
        assert!(replaced.is_none(), "request {request} waited for twice");
        Ok(())
    }

    /// A client asks where its session stands: answered once everything the leader's log
    /// holds now has applied (so every request committed before is counted), from the
    /// sessions as committed.
    pub fn resume(&mut self, client: ClientId, token: T, out: &mut Vec<Io<T>>) {
        if self.halted.is_some() || self.core.role() != Role::Leader {
            out.push(Io::Answer {
                to: token,
                reply: self.not_leader(),
            });
            return;
        }
        let at = self.core.last_index();
        assert!(
            self.resumes.last().is_none_or(|(index, ..)| *index <= at),
            "the leader's log shrank below a resume"
        );
        self.resumes.push((at, client, token));
        self.answer_resumes(out);
    }

    /// Answers the resumes whose entry has applied.
    pub(super) fn answer_resumes(&mut self, out: &mut Vec<Io<T>>) {
        let applied = self.machine.applied_index();
        let (due, waiting) = std::mem::take(&mut self.resumes)
            .into_iter()
            .partition(|(index, _, _)| *index <= applied);
        self.resumes = waiting;
        for (_, client, token) in due {
            let (next_request, expired) = self.machine.committed_session(client);
            let reply = ClientReply::Session {
                client,
                next_request,
                expired,
            };
            out.push(Io::Answer { to: token, reply });
        }
    }

    /// "Not the leader", with the leader and its client address when known.
    pub(super) fn not_leader(&self) -> ClientReply {
        let leader = self.core.leader().filter(|&l| l != self.config.core.id);
        let address = leader.and_then(|l| self.config.client_addresses.get(&l).cloned());
        ClientReply::NotLeader { leader, address }
    }

    /// Answers every waiting client "not the leader" (they retry at the new leader; sessions
    /// make the retry exactly-once).
    pub(super) fn abandon_waiters(&mut self, out: &mut Vec<Io<T>>) {
        self.batcher.drain();
        let answer = self.not_leader();
        let resumes = std::mem::take(&mut self.resumes).into_iter();
        for waiter in std::mem::take(&mut self.waiters)
            .into_values()
            .map(|(_, waiter)| waiter)
            .chain(resumes.map(|(_, _, waiter)| waiter))
            .chain(self.reads.drain())
        {
            out.push(Io::Answer {
                to: waiter,
                reply: answer.clone(),
            });
        }
    }
}

/// A request's keyed runs, checked against its commands, each with its commands' digest; and
/// the request's digest (over its runs too, when it has any).
fn checked_runs(
    submit: &Submit,
    runs: &[KeyRun],
    ends: &[u32],
) -> Result<(Vec<(KeyRun, RequestDigest)>, RequestDigest), Rejection> {
    let (count, commands) = (submit.command_count, &submit.commands);
    if runs.is_empty() {
        return Ok((Vec::new(), RequestDigest::of(count, commands)));
    }
    let checked = keyed_runs(runs, commands, ends)?;
    Ok((checked, RequestDigest::of_keyed(count, commands, runs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::EntryKind;
    use crate::ids::{NodeId, RequestNumber};
    use crate::replica::tests::{N3, appended, leader, submit};

    fn keyed(number: u64, runs: &[(u128, u32, u32)]) -> SubmitKeyed {
        let runs = (runs.iter())
            .map(|&(key, first, count)| KeyRun {
                key: ClientId(key),
                first,
                count,
            })
            .collect();
        SubmitKeyed {
            submit: submit(number, &[7, 8, 9]),
            runs,
        }
    }

    fn answers(out: &[Io<u32>]) -> Vec<&ClientReply> {
        (out.iter())
            .filter_map(|io| {
                let Io::Answer { reply, .. } = io else {
                    return None;
                };
                Some(reply)
            })
            .collect()
    }

    /// Proves a keyed request is logged in an entry of the keyed kind (a plain one keeps the
    /// plain kind), that runs out of place are refused as malformed, and that a member known
    /// to speak an older protocol stops keyed requests, not plain ones.
    #[test]
    fn keyed_requests_are_logged_keyed_checked_and_held_back_for_older_members() {
        let mut replica = leader();
        let mut out = Vec::new();
        replica.admit_keyed(keyed(1, &[(77, 1, 2)]), 9, &mut out);
        replica.propose(1_000, &mut out);
        let entry = appended(&out).expect("the keyed request's entry");
        assert_eq!(entry.kind, EntryKind::KeyedCommands);

        out.clear();
        replica.admit_keyed(keyed(2, &[(77, 2, 2)]), 9, &mut out);
        let refused = ClientReply::Rejected {
            request: RequestNumber(2),
            reason: Rejection::Malformed { command: 2 },
        };
        assert_eq!(answers(&out), [&refused], "a run past the request");

        out.clear();
        replica.peer_protocol(N3, PROTOCOL_VERSION_KEYED - 1);
        replica.admit_keyed(keyed(2, &[(78, 0, 1)]), 9, &mut out);
        let refused = ClientReply::Rejected {
            request: RequestNumber(2),
            reason: Rejection::OlderMembers,
        };
        assert_eq!(answers(&out), [&refused]);
        replica.admit(submit(2, &[7]), 9, &mut out);
        replica.propose(2_000, &mut out);
        let plain = appended(&out).expect("the plain request's entry");
        assert_eq!(plain.kind, EntryKind::Commands);
        replica.peer_protocol(NodeId(3), PROTOCOL_VERSION_KEYED);
        out.clear();
        replica.admit_keyed(keyed(3, &[(78, 0, 1)]), 9, &mut out);
        assert!(
            answers(&out).is_empty(),
            "taken once every member speaks keys"
        );
    }
}
