//! Handler versions at the state machine: an upgrade entry switches every replica at its
//! index (leaders that simulated across it included); entries before it keep the old rules; a
//! build that cannot run the version stops at that entry; snapshots keep the version in force.

use bank::{
    AccountId, Bank, BankCommand, BankError, BankOutput, FEE_ACCOUNT, TRANSFER_FEE,
    VERSION_TRANSFER_FEE,
};
use engine::codec::encode_to_vec;
use engine::internals::entry::{Entry, EntryHash, EntryKind, Request, whole_requests_entry};
use engine::internals::snapshot::{ScanProgress, parse_snapshot};
use engine::{
    ApplyError, ClientId, EntryIndex, Handler, Mode, Outcome, RequestNumber, Schema, StateMachine,
    Term, Tx, decode_outcomes,
};

const CAPACITY_BYTES: u64 = 1 << 24;

/// Entry `index` of `commands`, one request of client 1 numbered `index`.
fn commands_entry(index: u64, prev: &EntryHash, commands: &[BankCommand]) -> Entry {
    let bytes: Vec<u8> = commands
        .iter()
        .flat_map(|c| encode_to_vec(c).unwrap())
        .collect();
    let request = Request {
        client: ClientId(1),
        number: RequestNumber(index),
        command_count: commands.len() as u32,
        commands: &bytes,
    };
    whole_requests_entry(EntryIndex(index), Term(1), prev, 1_000 + index, &[request])
}

fn upgrade_entry(index: u64, prev: &EntryHash, version: u32) -> Entry {
    let payload = encode_to_vec(&version).unwrap();
    let commit = EntryIndex(index - 1);
    Entry::seal(
        EntryIndex(index),
        Term(1),
        EntryKind::Upgrade,
        commit,
        0,
        payload.into(),
        prev,
    )
}

fn transfer(amount: u64) -> BankCommand {
    BankCommand::Transfer {
        from: AccountId(1),
        to: AccountId(2),
        amount,
    }
}

/// Opens two accounts, transfers 10, upgrades to version 2, transfers 10 again.
fn log() -> Vec<Entry> {
    let open = |id| BankCommand::Open {
        id: AccountId(id),
        balance: 1_000,
        flags: 0,
    };
    let mut entries: Vec<Entry> = Vec::new();
    let prev = |entries: &Vec<Entry>| entries.last().map(|e| e.header.hash).unwrap_or_default();
    entries.push(commands_entry(1, &prev(&entries), &[open(1), open(2)]));
    entries.push(commands_entry(2, &prev(&entries), &[transfer(10)]));
    entries.push(upgrade_entry(3, &prev(&entries), VERSION_TRANSFER_FEE));
    entries.push(commands_entry(4, &prev(&entries), &[transfer(10)]));
    entries
}

/// The debited balance each transfer entry's answer reports.
fn debited_balances(machine: &mut StateMachine<Bank>, entries: &[Entry]) -> Vec<u64> {
    let mut balances = Vec::new();
    for entry in entries {
        for reply in machine.apply(entry).unwrap().replies {
            let engine::ReplyStatus::Results(results) = reply.status else {
                panic!("{reply:?}")
            };
            for outcome in decode_outcomes::<Bank>(&results, reply.command_count).unwrap() {
                if let Outcome::Done(BankOutput::Transferred { from_balance, .. }) = outcome {
                    balances.push(from_balance);
                }
            }
        }
    }
    balances
}

/// Proves the transfer before the upgrade is free and the one after it pays the fee, on a
/// follower and on leaders that simulated every entry before applying (both modes), all
/// ending in one state hash.
#[test]
fn an_upgrade_switches_every_replica_at_its_entry() {
    let entries = log();
    let mut follower = StateMachine::new(Bank, CAPACITY_BYTES);
    let balances = debited_balances(&mut follower, &entries);
    assert_eq!(balances, [990, 990 - 10 - TRANSFER_FEE]);
    assert_eq!(follower.handler_version(), VERSION_TRANSFER_FEE);
    for mode in [Mode::Performance, Mode::Verify] {
        let mut leader = StateMachine::new(Bank, CAPACITY_BYTES);
        leader.set_mode(mode);
        entries.iter().for_each(|e| leader.simulate(e));
        assert_eq!(
            debited_balances(&mut leader, &entries),
            balances,
            "{mode:?}"
        );
        assert_eq!(leader.state_hash(), follower.state_hash(), "{mode:?}");
    }
    // The same log with a no-op where the upgrade was: the second transfer stays free.
    let mut noop = entries[..2].to_vec();
    let prev = noop[1].header.hash;
    let empty = bytes::Bytes::new();
    noop.push(Entry::seal(
        EntryIndex(3),
        Term(1),
        EntryKind::Noop,
        EntryIndex(2),
        0,
        empty,
        &prev,
    ));
    noop.push(commands_entry(4, &noop[2].header.hash, &[transfer(10)]));
    let mut unupgraded = StateMachine::new(Bank, CAPACITY_BYTES);
    assert_eq!(debited_balances(&mut unupgraded, &noop), [990, 980]);
    assert_ne!(unupgraded.state_hash(), follower.state_hash());
}

/// The Bank as a build that knows only its first version.
struct BankV1;

impl Handler for BankV1 {
    type Command = BankCommand;
    type Output = BankOutput;
    type Error = BankError;

    fn schema(&self) -> Schema {
        Bank.schema()
    }

    fn execute(&self, tx: &mut Tx<'_>, command: &BankCommand) -> Result<BankOutput, BankError> {
        Bank.execute(tx, command)
    }
}

/// Proves a build that does not run the version in force stops at the upgrade's entry with an
/// error that names the entry, the version and what it runs, and applies nothing of it.
#[test]
fn a_build_without_the_version_stops_at_its_entry() {
    let entries = log();
    let mut old = StateMachine::new(BankV1, CAPACITY_BYTES);
    old.apply(&entries[0]).unwrap();
    old.apply(&entries[1]).unwrap();
    let before = old.state_hash();
    let error = old.apply(&entries[2]).unwrap_err();
    assert!(
        matches!(
            error,
            ApplyError::UnsupportedHandlerVersion {
                index: EntryIndex(3),
                version: 2,
                oldest: 1,
                newest: 1
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("run a build that supports it"));
    assert_eq!(
        (old.applied_index(), old.state_hash()),
        (EntryIndex(2), before)
    );
}

/// A whole snapshot of `machine` (digest included).
fn snapshot(machine: &mut StateMachine<Bank>) -> Vec<u8> {
    machine.begin_snapshot().expect("nothing in flight");
    let mut bytes = Vec::new();
    while !matches!(
        machine.snapshot_step(1 << 20, &mut bytes),
        ScanProgress::Done(_)
    ) {}
    let digest = blake3::hash(&bytes);
    bytes.extend_from_slice(digest.as_bytes());
    bytes
}

/// Proves a snapshot keeps the version in force (format 7, which every state is written in,
/// holds it in its meta): the first before the upgrade, the fee's after it, restored with the
/// fee in force.
#[test]
fn snapshots_keep_the_version_in_force() {
    let entries = log();
    let mut machine = StateMachine::new(Bank, CAPACITY_BYTES);
    machine.apply(&entries[0]).unwrap();
    let before = snapshot(&mut machine);
    assert_eq!(&before[..8], b"SNAPv007");
    let first = parse_snapshot(&before).unwrap().meta.handler_version;
    assert_eq!(first, engine::handler::HANDLER_VERSION_FIRST);
    entries[1..]
        .iter()
        .for_each(|e| drop(machine.apply(e).unwrap()));
    let after = snapshot(&mut machine);
    assert_eq!(&after[..8], b"SNAPv007");
    let parsed = parse_snapshot(&after).unwrap();
    assert_eq!(parsed.meta.handler_version, VERSION_TRANSFER_FEE);
    let mut restored = StateMachine::restore(Bank, CAPACITY_BYTES, parsed).unwrap();
    assert_eq!(restored.handler_version(), VERSION_TRANSFER_FEE);
    assert_eq!(restored.state_hash(), machine.state_hash());
    let next = commands_entry(5, &entries[3].header.hash, &[transfer(1)]);
    assert_eq!(
        restored.apply(&next).unwrap(),
        machine.apply(&next).unwrap()
    );
    let get = BankCommand::Get { id: FEE_ACCOUNT };
    let read = commands_entry(6, &next.header.hash, &[get]);
    let replies = restored.apply(&read).unwrap().replies;
    let engine::ReplyStatus::Results(results) = &replies[0].status else {
        panic!("{replies:?}")
    };
    let outcomes = decode_outcomes::<Bank>(results, 1).unwrap();
    let Outcome::Done(BankOutput::Account(fees)) = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    assert_eq!(
        fees.balance,
        2 * TRANSFER_FEE,
        "one fee before the snapshot, one after"
    );
    let refused = StateMachine::restore(BankV1, CAPACITY_BYTES, parse_snapshot(&after).unwrap());
    assert!(
        refused.is_err(),
        "a build without version 2 installed its state"
    );
}
