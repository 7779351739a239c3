//! The capacity account through the apply path: a command whose growth would pass the capacity
//! fails as a business error and the node keeps applying; a restored snapshot counts what the
//! state that wrote it counted (a leader's pending growth left out), and one that does not
//! fit is refused with the bytes it needs.

mod common;

use common::tables::{Chain, Command, ORDERS, Refused, Shelves};
use engine::internals::snapshot::{ScanProgress, parse_snapshot};
use engine::{InstallError, Mode, Outcome, StateMachine};

/// Records the orders table's first 16 slots hold before the next insert grows it.
const RECORDS_BEFORE_GROWTH: u64 = 12;

fn orders(ids: std::ops::RangeInclusive<u64>) -> Vec<Command> {
    ids.map(|id| Command::Order { id }).collect()
}

/// Proves a command whose write would grow a table past the capacity fails with the capacity
/// error, allocates nothing and changes no record, and that the node goes on applying.
#[test]
fn a_refused_growth_fails_the_command_and_the_node_goes_on() {
    let mut probe = StateMachine::new(Shelves, 1 << 30);
    let mut chain = Chain::new();
    chain.apply_all(&mut probe, &orders(1..=RECORDS_BEFORE_GROWTH));
    let before = probe.state().bytes_used();
    chain.apply_all(&mut probe, &orders(13..=13));
    // The growth adds 16 slots; while it moves the records, the old 16 are held too; and the
    // client's session counts as it stood before the command.
    let sessions_bytes = probe.state().outside_bytes();
    assert!(sessions_bytes >= engine::apply::SESSION_BYTES_FIXED);
    let needed_bytes = 2 * probe.state().bytes_used() - before + sessions_bytes;

    let mut machine = StateMachine::new(Shelves, needed_bytes - 1);
    let mut chain = Chain::new();
    chain.apply_all(&mut machine, &orders(1..=RECORDS_BEFORE_GROWTH));
    let (bytes, allocated) = (
        machine.state().bytes_used(),
        machine.state().allocated_bytes(),
    );
    let outcomes = chain.apply(&mut machine, &[Command::Order { id: 13 }]);
    assert_eq!(
        outcomes,
        vec![Outcome::Failed(Refused::Full {
            needed_bytes,
            capacity_bytes: needed_bytes - 1
        })]
    );
    assert_eq!(machine.state().bytes_used(), bytes);
    assert_eq!(machine.state().allocated_bytes(), allocated);
    assert_eq!(machine.state().len(&ORDERS), RECORDS_BEFORE_GROWTH as usize);
    assert_eq!(machine.state().get(&ORDERS, &13), None);

    let next = [Command::DeleteOrder { id: 1 }, Command::Order { id: 13 }];
    assert_eq!(
        chain.apply(&mut machine, &next),
        vec![Outcome::Done(11), Outcome::Done(12)],
        "room made, the same write fits"
    );
}

/// A history whose account differs from one of its record count alone: 1,000 orders grown to
/// 2,048 slots, 900 of them deleted (the slots stay), and notes with heap bytes.
fn history() -> Vec<Command> {
    let mut commands = orders(1..=1_000);
    commands.extend((1..=900).map(|id| Command::DeleteOrder { id }));
    commands.extend((1..=50).map(|id| Command::Note { id, bytes: 200 }));
    commands
}

/// Proves a restored state's account, slot arrays and hash are those of the state that wrote
/// the snapshot, that both make the same capacity decisions after it, and that a capacity
/// below the account refuses the snapshot with the bytes it needs.
#[test]
fn a_restored_state_counts_what_its_writer_counted() {
    let mut probe = StateMachine::new(Shelves, 1 << 30);
    Chain::new().apply_all(&mut probe, &history());
    // Room for 1,536 orders in 2,048 slots, not for the growth to 4,096 that the next
    // inserts need: the same inserts are refused on both.
    let slot_bytes = (probe.state().allocated_bytes() as u64 - 64 * 64 - 16 * 64) / 2_048;
    let capacity_bytes = probe.state().bytes_used() + 3_000 * slot_bytes;

    let mut writer = StateMachine::new(Shelves, capacity_bytes);
    let mut chain = Chain::new();
    chain.apply_all(&mut writer, &history());
    let (_, file) = writer.snapshot_file().expect("no snapshot in progress");
    let restore = |capacity_bytes| {
        StateMachine::restore(Shelves, capacity_bytes, parse_snapshot(&file).unwrap())
    };
    let mut restored = restore(capacity_bytes).expect("the snapshot fits");
    assert_eq!(restored.state().bytes_used(), writer.state().bytes_used());
    assert_eq!(
        restored.state().allocated_bytes(),
        writer.state().allocated_bytes()
    );
    assert_eq!(restored.state_hash(), writer.state_hash());

    let mut refused = 0;
    for chunk in orders(2_001..=3_600).chunks(Chain::COMMANDS) {
        let entry = chain.entry(chunk);
        let applied = writer.apply(&entry).unwrap();
        assert_eq!(
            restored.apply(&entry).unwrap(),
            applied,
            "same outcomes and hashes"
        );
    }
    for id in 2_001..=3_600 {
        refused += usize::from(writer.state().get(&ORDERS, &id).is_none());
    }
    assert!(refused > 0, "the growth was refused");
    assert_eq!(restored.state().bytes_used(), writer.state().bytes_used());

    let needed_bytes = probe.state().bytes_used();
    let (_, file) = probe.snapshot_file().unwrap();
    // Refused after loading (the arrays fit, the heap does not), and before loading (the
    // arrays alone do not fit): both name the whole account.
    for capacity_bytes in [needed_bytes - 1, 100_000] {
        let small = StateMachine::restore(Shelves, capacity_bytes, parse_snapshot(&file).unwrap());
        assert_eq!(
            small.err(),
            Some(InstallError::Capacity {
                needed_bytes,
                capacity_bytes
            })
        );
    }
}

/// Proves a snapshot started on a leader whose pending speculation grew a table records the
/// committed slot count: the restored account is the committed state's (a follower's).
#[test]
fn a_snapshot_leaves_a_pending_growth_out() {
    let mut chain = Chain::new();
    let first = chain.entry(&orders(1..=RECORDS_BEFORE_GROWTH));
    let growing = chain.entry(&orders(13..=100));
    for mode in [Mode::Performance, Mode::Verify] {
        let mut leader = StateMachine::new(Shelves, 1 << 30);
        leader.set_mode(mode);
        let mut follower = StateMachine::new(Shelves, 1 << 30);
        leader.simulate(&first);
        leader.apply(&first).unwrap();
        follower.apply(&first).unwrap();
        leader.simulate(&growing);
        assert!(
            leader.state().bytes_used() > follower.state().bytes_used(),
            "{mode:?}: the speculation grew the table"
        );
        let (_, file) = leader.snapshot_file().expect("no removal pending");
        let mut restored =
            StateMachine::restore(Shelves, 1 << 30, parse_snapshot(&file).unwrap()).unwrap();
        assert_eq!(
            restored.state().bytes_used(),
            follower.state().bytes_used(),
            "{mode:?}"
        );
        assert_eq!(
            leader.apply(&growing).unwrap(),
            follower.apply(&growing).unwrap()
        );
        restored.apply(&growing).unwrap();
        for machine in [&leader, &restored] {
            assert_eq!(
                machine.state().bytes_used(),
                follower.state().bytes_used(),
                "{mode:?}"
            );
        }
        // The memory held: the same on the restored machine as on the follower. The leader's
        // snapshot finished moving its growth's records (a scan waits for that), so it no
        // longer holds the old array beside the new: less memory, the same account.
        assert_eq!(
            restored.state().allocated_bytes(),
            follower.state().allocated_bytes()
        );
        assert!(leader.state().allocated_bytes() < follower.state().allocated_bytes());
    }
}

/// Records a 2,048-slot orders table holds before the next insert grows it to 4,096.
const RECORDS_BEFORE_LARGE_GROWTH: u64 = 1_536;

/// Proves a growth that the inserts left half done (the workload turned to updates only) does
/// not hold snapshots back: each snapshot try moves records on, a snapshot starts within a
/// bounded number of entries, and it restores the committed state.
#[test]
fn a_growth_left_half_done_by_the_inserts_does_not_hold_snapshots_back() {
    let mut chain = Chain::new();
    let mut machine = StateMachine::new(Shelves, 1 << 30);
    chain.apply_all(&mut machine, &orders(1..=RECORDS_BEFORE_LARGE_GROWTH + 1));
    let updates = orders(1..=8);
    let mut tries = 0;
    let meta = loop {
        assert!(tries < 64, "no snapshot after {tries} entries of updates");
        chain.apply(&mut machine, &updates);
        tries += 1;
        if let Some(meta) = machine.begin_snapshot() {
            break meta;
        }
    };
    let mut bytes = Vec::new();
    loop {
        match machine.snapshot_step(usize::MAX, &mut bytes) {
            ScanProgress::More => {}
            ScanProgress::Done(done) => {
                assert_eq!(done.index, meta.index);
                break;
            }
            other @ (ScanProgress::Idle | ScanProgress::Void) => {
                panic!("the scan ended with {other:?}")
            }
        }
    }
    let digest = blake3::hash(&bytes);
    bytes.extend_from_slice(digest.as_bytes());
    let restored =
        StateMachine::restore(Shelves, 1 << 30, parse_snapshot(&bytes).unwrap()).unwrap();
    assert_eq!(restored.state_hash(), machine.state_hash());
    assert_eq!(
        restored.state().len(&ORDERS),
        RECORDS_BEFORE_LARGE_GROWTH as usize + 1
    );
}
