//! Shared set-up for the microbenchmarks: a prefilled Bank state machine and a feeder that
//! forms entries of transfers, as the leader would.

use bank::workload::{Transfers, open_command};
use bank::{Bank, BankCommand};
use engine::internals::entry::{
    Entry, EntryHash, KeyRun, PayloadBuilder, Request, RequestDigest, encode_commands,
    whole_requests_entry,
};
use engine::{ClientId, EntryIndex, RequestNumber, StateMachine, Term};

/// Opens are packed this many to an entry during prefill.
pub const PREFILL_ENTRY_COMMANDS: usize = 1024;

/// Forms chained entries of whole requests from one client.
#[derive(Default)]
pub struct Feeder {
    prev: EntryHash,
    next_index: u64,
    next_request: u64,
}

impl Feeder {
    /// A feeder whose first entry gets index 1.
    pub fn new() -> Self {
        Feeder {
            prev: EntryHash::default(),
            next_index: 1,
            next_request: 1,
        }
    }

    /// The next entry, holding `commands` as one request.
    pub fn entry(&mut self, commands: &[BankCommand]) -> Entry {
        let bytes = encode_commands(commands);
        let request = Request {
            client: ClientId(1),
            number: RequestNumber(self.next_request),
            command_count: commands.len() as u32,
            commands: &bytes,
        };
        let entry = whole_requests_entry(
            EntryIndex(self.next_index),
            Term(1),
            &self.prev,
            0,
            &[request],
        );
        self.prev = entry.header.hash;
        self.next_index += 1;
        self.next_request += 1;
        entry
    }

    /// The next entry, holding `commands` as one request in which each command is a keyed
    /// run of its own under `keys` (one a command), as a shared client or gateway sends its
    /// keyed callers.
    pub fn keyed_entry(&mut self, commands: &[BankCommand], keys: &[ClientId]) -> Entry {
        assert_eq!(commands.len(), keys.len(), "one key a command");
        let runs: Vec<KeyRun> = (keys.iter().enumerate())
            .map(|(at, &key)| KeyRun {
                key,
                first: at as u32,
                count: 1,
            })
            .collect();
        let bytes = encode_commands(commands);
        let count = commands.len() as u32;
        let fragment = Request {
            client: ClientId(1),
            number: RequestNumber(self.next_request),
            command_count: count,
            commands: &bytes,
        }
        .whole_fragment();
        let fragment = engine::internals::entry::FragmentHeader {
            digest: RequestDigest::of_keyed(count, &bytes, &runs),
            ..fragment
        };
        let mut payload = PayloadBuilder::new(0);
        payload.push(&fragment, &bytes);
        for (run, command) in runs.iter().zip(commands) {
            let own = encode_commands(std::slice::from_ref(command));
            payload.push_run(*run, RequestDigest::of(1, &own));
        }
        let (payload, command_count, kind) = payload.finish();
        let index = EntryIndex(self.next_index);
        let entry = Entry::seal(
            index,
            Term(1),
            kind,
            index.prev(),
            command_count,
            payload,
            &self.prev,
        );
        self.prev = entry.header.hash;
        self.next_index += 1;
        self.next_request += 1;
        entry
    }

    /// `count` entries of `per_entry` transfers each.
    pub fn transfers(
        &mut self,
        transfers: &mut Transfers,
        count: usize,
        per_entry: usize,
    ) -> Vec<Entry> {
        (0..count)
            .map(|_| {
                let commands: Vec<BankCommand> =
                    (0..per_entry).map(|_| transfers.next_command()).collect();
                self.entry(&commands)
            })
            .collect()
    }
}

/// A state machine holding `accounts` prefilled accounts, and the feeder that filled it.
pub fn prefilled(accounts: u64) -> (StateMachine<Bank>, Feeder) {
    let mut machine = StateMachine::new(Bank, engine::state::STATE_BYTES_DEFAULT);
    let mut feeder = Feeder::new();
    let mut next = 0;
    while next < accounts {
        let end = (next + PREFILL_ENTRY_COMMANDS as u64).min(accounts);
        let commands: Vec<BankCommand> = (next..end).map(open_command).collect();
        machine
            .apply(&feeder.entry(&commands))
            .expect("prefill applies");
        next = end;
    }
    (machine, feeder)
}
