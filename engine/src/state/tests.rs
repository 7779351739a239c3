//! The capacity account at the state: growth is decided and charged before the slot array
//! allocates, rolled back growth is uncounted (and its slots given back), and a snapshot of
//! the committed state records the committed slot counts.

use super::*;

/// ~80-byte records, as an order book keeps them: 128-byte slots.
const ORDERS: Table<u64, [u64; 10]> = Table::new(0, "orders");

/// Records a table of 16 slots holds before its next insert grows it.
const RECORDS_BEFORE_GROWTH: u64 = 12;

fn state(capacity_bytes: u64) -> State {
    State::new(Schema::new().table(&ORDERS), capacity_bytes)
}

fn fill(state: &mut State, records: std::ops::RangeInclusive<u64>) {
    for id in records {
        state.put(&ORDERS, id, [id; 10]).expect("fits");
    }
    state.finish_entry();
}

/// Bytes of one slot of the orders table.
fn slot_bytes() -> u64 {
    slots::slot_bytes::<u64, [u64; 10]>()
}

/// Proves a write whose growth would not fit is refused before the array grows (memory,
/// account, records and hash as before), that the account charges the old array beside the
/// new while records move, and that writes that need no growth still succeed.
#[test]
fn growth_past_the_capacity_is_refused_before_it_allocates() {
    let initial_bytes = 16 * slot_bytes();
    // After the growth: 32 slots; while it moves the records: 16 + 32.
    let needed_bytes = 48 * slot_bytes();
    let mut state = state(needed_bytes - 1);
    assert_eq!(state.bytes_used(), initial_bytes);
    fill(&mut state, 1..=RECORDS_BEFORE_GROWTH);
    let (hash, allocated) = (state.hash(), state.allocated_bytes());
    assert_eq!(
        state.bytes_used(),
        initial_bytes,
        "fixed-size records live in slots"
    );

    let refused = state.put(&ORDERS, 13, [13; 10]);
    assert_eq!(
        refused,
        Err(StateError::CapacityExhausted {
            needed_bytes,
            capacity_bytes: needed_bytes - 1,
        })
    );
    assert_eq!(state.allocated_bytes(), allocated, "nothing was allocated");
    assert_eq!(state.bytes_used(), initial_bytes);
    assert_eq!(state.len(&ORDERS), RECORDS_BEFORE_GROWTH as usize);
    assert_eq!(
        state.finish_entry(),
        hash,
        "the refused write left no trace"
    );

    state
        .put(&ORDERS, 1, [7; 10])
        .expect("a replacement never grows");
    assert_eq!(state.get(&ORDERS, &1), Some(&[7; 10]));

    let mut roomy = self::state(needed_bytes);
    fill(&mut roomy, 1..=RECORDS_BEFORE_GROWTH + 1);
    assert_eq!(roomy.bytes_used(), 32 * slot_bytes());
    // The old array drains over the inserts after the growth: then only the new one is left.
    assert_eq!(roomy.allocated_bytes() as u64, 48 * slot_bytes());
    fill(
        &mut roomy,
        RECORDS_BEFORE_GROWTH + 2..=RECORDS_BEFORE_GROWTH + 9,
    );
    assert_eq!(roomy.bytes_used(), 32 * slot_bytes());
    assert_eq!(roomy.bytes_used(), roomy.allocated_bytes() as u64);
}

/// Proves a rolled back growth is uncounted and its slots given back, so that the account
/// and the memory are those before the write (what a replica that never ran it has).
#[test]
fn rolled_back_growth_is_uncounted_and_given_back() {
    let mut state = state(1 << 20);
    fill(&mut state, 1..=RECORDS_BEFORE_GROWTH);
    let (bytes, allocated, hash) = (state.bytes_used(), state.allocated_bytes(), state.hash());
    let mark = state.begin();
    fill_pending(&mut state, 13..=40);
    assert_eq!(
        state.bytes_used(),
        64 * slot_bytes(),
        "grew twice: 16, 32, 64"
    );
    state.rollback(mark);
    assert_eq!(state.bytes_used(), bytes);
    assert_eq!(state.allocated_bytes(), allocated);
    assert_eq!(state.finish_entry(), hash);

    // Kept for a re-execution: uncounted at once, given back when the entry finishes.
    let mark = state.begin();
    fill_pending(&mut state, 13..=13);
    state.rollback_keeping_slots(mark);
    assert_eq!(state.bytes_used(), bytes);
    // The new array of 32 slots, and the old one of 16 its records are still moving from.
    assert_eq!(state.allocated_bytes() as u64, 48 * slot_bytes());
    state.finish_entry();
    assert_eq!(state.allocated_bytes(), allocated);
}

fn fill_pending(state: &mut State, records: std::ops::RangeInclusive<u64>) {
    for id in records {
        state.put(&ORDERS, id, [id; 10]).expect("fits");
    }
}

/// Proves the slot counts a snapshot records are the committed ones: a pending speculation's
/// growth is left out until it is confirmed.
#[test]
fn committed_slots_leave_pending_growth_out() {
    let mut state = state(1 << 20);
    fill(&mut state, 1..=RECORDS_BEFORE_GROWTH);
    fill_pending(&mut state, 13..=30);
    let end = state.begin();
    assert_eq!(state.committed_slots(), vec![16]);
    state.confirm_through(end);
    assert_eq!(state.committed_slots(), vec![64]);
}

/// Proves the heap bytes of records that reach beyond their slots are charged and given back
/// on delete, and records that fit their slots cost nothing beyond the array.
#[test]
fn heap_bytes_follow_the_records() {
    const NOTES: Table<u64, String> = Table::new(1, "notes");
    let mut state = State::new(Schema::new().table(&NOTES), 1 << 20);
    let empty = state.bytes_used();
    state.put(&NOTES, 1, "short".into()).unwrap();
    assert_eq!(
        state.bytes_used(),
        empty,
        "key and string header fit the slot"
    );
    let long = "x".repeat(100);
    state.put(&NOTES, 2, long).unwrap();
    let inline = size_of::<(u64, String)>() as u64;
    let beyond = 8 + 8 + 100 - inline;
    assert_eq!(
        state.bytes_used(),
        empty + beyond + table::HEAP_RECORD_OVERHEAD_BYTES
    );
    state.delete(&NOTES, &2).unwrap();
    assert_eq!(state.bytes_used(), empty);
}

/// Proves a table declared with a size starts with the slots for it, charged from the start,
/// and does not grow until it holds more; and that a size beyond the capacity is not taken.
#[test]
fn a_sized_table_starts_with_its_slots_and_does_not_grow() {
    let records = 1_000;
    // 1,000 records within the 3/4 load limit: 1,334 slots, so 2,048.
    let sized_bytes = 2_048 * slot_bytes();
    let schema = || Schema::new().table_sized(&ORDERS, records);
    let mut state = State::new(schema(), 1 << 30);
    assert_eq!(state.bytes_used(), sized_bytes);
    assert_eq!(state.allocated_bytes() as u64, sized_bytes);
    fill(&mut state, 1..=records);
    assert_eq!(state.bytes_used(), sized_bytes, "no growth");
    assert_eq!(state.allocated_bytes() as u64, sized_bytes, "no growth");
    state.put(&ORDERS, records + 1, [0; 10]).expect("fits");
    assert_eq!(state.bytes_used(), sized_bytes, "room up to 1,536 records");

    let small = State::new(schema(), sized_bytes - 1);
    assert_eq!(
        small.bytes_used(),
        16 * slot_bytes(),
        "the size did not fit"
    );
    assert_eq!(small.allocated_bytes() as u64, 16 * slot_bytes());
}

/// Proves a table loaded from a snapshot past half full writes no next array ahead when the
/// capacity has no room for its growth: before any put told it the room, a loaded table took
/// the room as unlimited and wrote the doubled array (2 GiB at 12M accounts) on every start.
#[test]
fn a_loaded_table_writes_no_next_array_the_capacity_cannot_take() {
    // 40 records in 64 slots: past half full; the doubling (128 slots) is past the prepare
    // minimum and needs 128 slots of room, which this capacity does not have.
    let (records, slots) = (40u64, 64u64);
    let capacity_bytes = 100 * slot_bytes();
    let mut encoded = Vec::new();
    for id in 1..=records {
        crate::codec::encode_into(&(id, [id; 10]), &mut encoded).unwrap();
    }
    let mut state = state(capacity_bytes);
    state
        .load_table(ORDERS.id(), &encoded, records, slots)
        .expect("the records load");
    assert_eq!(state.growth_bytes(), 0, "no next array written ahead");
    fill(&mut state, records + 1..=records + 2);
    assert_eq!(state.growth_bytes(), 0, "nor once writes tell the room");
}
