//! Helpers shared by the Bank's tests: driving a state machine with whole-request entries.

use bank::{Bank, BankCommand, BankError, BankOutput};
use engine::entry::{Entry, Request, encode_commands};
use engine::{
    ClientId, EntryIndex, Outcome, ReplyStatus, RequestNumber, StateMachine, Term, decode_outcomes,
};

/// A state machine plus the bookkeeping to feed it entries.
pub struct Driver {
    pub machine: StateMachine<Bank>,
    prev_hash: engine::entry::EntryHash,
    next_request: u64,
}

impl Driver {
    pub fn new(capacity_bytes: u64) -> Self {
        Driver {
            machine: StateMachine::new(Bank, capacity_bytes),
            prev_hash: Default::default(),
            next_request: 1,
        }
    }

    /// Applies one entry holding `requests` (each a list of commands) from client 1; returns
    /// each command's outcome in order.
    pub fn entry(&mut self, requests: &[&[BankCommand]]) -> Vec<Outcome<BankOutput, BankError>> {
        let encoded: Vec<Vec<u8>> = requests.iter().map(|r| encode_commands(r)).collect();
        let requests: Vec<Request<'_>> = requests
            .iter()
            .zip(&encoded)
            .map(|(commands, bytes)| {
                let number = RequestNumber(self.next_request);
                self.next_request += 1;
                Request {
                    client: ClientId(1),
                    number,
                    command_count: commands.len() as u32,
                    commands: bytes,
                }
            })
            .collect();
        let index = EntryIndex(self.machine.applied_index().0 + 1);
        let entry = Entry::whole_requests(index, Term(1), &self.prev_hash, 0, &requests);
        self.prev_hash = entry.header.hash;
        let applied = self.machine.apply(&entry).expect("entry applies");
        assert_eq!(
            applied.replies.len(),
            requests.len(),
            "every request finished"
        );
        applied
            .replies
            .iter()
            .flat_map(|reply| match &reply.status {
                ReplyStatus::Results(bytes) => {
                    decode_outcomes::<Bank>(bytes, reply.command_count).unwrap()
                }
                ReplyStatus::Stale => panic!("fresh request reported stale"),
            })
            .collect()
    }
}
