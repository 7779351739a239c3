//! One seeded stream of Bank commands gives the same results and the same final state hash
//! however its requests are packed into entries, and the single-node path recovers the same
//! state from its WAL.

use bank::{Bank, BankCommand};
use engine::internals::entry::{EntryHash, Request, encode_commands, whole_requests_entry};
use engine::internals::single::SingleNode;
use engine::{ClientId, EntryIndex, ReplyStatus, RequestNumber, StateHash, StateMachine, Term};

const COMMANDS: usize = 100_000;
const REQUEST_COMMANDS: usize = 16;
const ACCOUNTS: u64 = 2_000;
const CLIENTS: u64 = 4;

fn stream(seed: u64) -> Vec<BankCommand> {
    bank::workload::mixed_stream(seed, COMMANDS, ACCOUNTS)
}

/// Requests of 16 commands each, from clients taking turns, each numbering its own requests.
fn requests(commands: &[BankCommand]) -> Vec<Encoded> {
    commands
        .chunks(REQUEST_COMMANDS)
        .enumerate()
        .map(|(n, chunk)| {
            let client = ClientId(u128::from(n as u64 % CLIENTS + 1));
            let number = RequestNumber(n as u64 / CLIENTS + 1);
            (client, number, encode_commands(chunk), chunk.len() as u32)
        })
        .collect()
}

type Encoded = (ClientId, RequestNumber, Vec<u8>, u32);

fn as_requests(group: &[Encoded]) -> Vec<Request<'_>> {
    group
        .iter()
        .map(|(client, number, bytes, count)| Request {
            client: *client,
            number: *number,
            command_count: *count,
            commands: bytes,
        })
        .collect()
}

/// Applies the stream with `per_entry` requests in each entry; returns every reply's results in
/// request order and the final state hash.
fn run(commands: &[BankCommand], per_entry: usize) -> (Vec<Vec<u8>>, StateHash) {
    let requests = requests(commands);
    let mut machine = StateMachine::new(Bank, 1 << 30);
    let mut prev = EntryHash::default();
    let mut results = Vec::new();
    for (n, group) in requests.chunks(per_entry).enumerate() {
        let group = as_requests(group);
        let entry = whole_requests_entry(EntryIndex(n as u64 + 1), Term(1), &prev, 7, &group);
        prev = entry.header.hash;
        for reply in machine.apply(&entry).unwrap().replies {
            match reply.status {
                ReplyStatus::Results(bytes) => results.push(bytes),
                ReplyStatus::Stale
                | ReplyStatus::Expired
                | ReplyStatus::Reused
                | ReplyStatus::NotYet => {
                    panic!("{:?} reply", reply.status)
                }
            }
        }
    }
    assert_eq!(results.len(), requests.len());
    (results, machine.state_hash())
}

/// Proves 16 and 1,024 commands per entry give identical per-command results and an identical
/// final state hash, and that a different stream gives a different hash.
#[test]
fn packing_does_not_change_results_or_hash() {
    let commands = stream(42);
    let (results_16, hash_16) = run(&commands, 1);
    let (results_1024, hash_1024) = run(&commands, 1024 / REQUEST_COMMANDS);
    assert!(
        results_16 == results_1024,
        "per-command results differ between packings"
    );
    assert_eq!(hash_16, hash_1024);
    let (_, other_hash) = run(&stream(43), 1);
    assert_ne!(
        hash_16, other_hash,
        "the hash tells different histories apart"
    );
}

/// Proves the single-node path (WAL + apply) recovers the same state hash after a reopen.
#[test]
fn single_node_recovers_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let commands = stream(9);
    let commands = &commands[..20_000];
    let (_, expected) = run(commands, 1024 / REQUEST_COMMANDS);
    let requests = requests(commands);
    {
        let (mut node, recovery) = SingleNode::open(dir.path(), Bank, 1 << 30).unwrap();
        assert_eq!(recovery.entries, 0);
        for group in requests.chunks(1024 / REQUEST_COMMANDS) {
            let group = as_requests(group);
            node.submit(7, &group).unwrap();
        }
        assert_eq!(node.machine().state_hash(), expected);
    }
    let (node, recovery) = SingleNode::open(dir.path(), Bank, 1 << 30).unwrap();
    assert_eq!(
        recovery.last_index,
        EntryIndex(requests.len().div_ceil(64) as u64)
    );
    assert_eq!(node.machine().state_hash(), expected);
}
