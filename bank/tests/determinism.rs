//! One seeded stream of Bank commands gives the same results and the same final state hash
//! however its requests are packed into entries and in both modes (the engine's public
//! determinism check, as any handler's tests run it), and the single-node path (the engine's
//! own) recovers the same state from its WAL.

use bank::{Bank, BankCommand};
use engine::internals::entry::{EntryHash, Request, encode_commands, whole_requests_entry};
use engine::internals::single::SingleNode;
use engine::testing::check_determinism;
use engine::{ClientId, EntryIndex, Outcome, RequestNumber, StateHash, StateMachine, Term};

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

/// Proves the Bank deterministic as a cluster runs it (`engine::testing`): 16 and 1,024
/// commands per entry, both modes, a simulating leader beside an executing follower, give
/// identical per-command results and an identical final state hash; a different stream
/// gives a different hash.
#[test]
fn packing_and_modes_do_not_change_results_or_hash() {
    let commands = stream(42);
    let requests: Vec<Vec<BankCommand>> = commands
        .chunks(REQUEST_COMMANDS)
        .map(<[BankCommand]>::to_vec)
        .collect();
    let checked = check_determinism(Bank, &requests, &[16, 1024])
        .unwrap_or_else(|difference| panic!("{difference}"));
    let refused = checked.outcomes.iter().flatten();
    let refused = refused.filter(|o| matches!(o, Outcome::Failed(_))).count();
    assert!(refused > 100, "the stream refuses some commands: {refused}");
    let other = check_determinism(Bank, &[stream(43)[..REQUEST_COMMANDS].to_vec()], &[16]);
    let other = other.unwrap().state_hash;
    assert_ne!(
        checked.state_hash, other,
        "the hash tells different histories apart"
    );
}

/// Applies the stream with `per_entry` requests in each entry; the final state hash.
fn run(commands: &[BankCommand], per_entry: usize) -> StateHash {
    let requests = requests(commands);
    let mut machine = StateMachine::new(Bank, 1 << 30);
    let mut prev = EntryHash::default();
    for (n, group) in requests.chunks(per_entry).enumerate() {
        let group = as_requests(group);
        let entry = whole_requests_entry(EntryIndex(n as u64 + 1), Term(1), &prev, 7, &group);
        prev = entry.header.hash;
        machine.apply(&entry).unwrap();
    }
    machine.state_hash()
}

/// Proves the single-node path (WAL + apply) recovers the same state hash after a reopen.
#[test]
fn single_node_recovers_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let commands = stream(9);
    let commands = &commands[..20_000];
    let expected = run(commands, 1024 / REQUEST_COMMANDS);
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
