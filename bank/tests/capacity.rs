//! The Bank's reference prefill under the default capacity, now that the account counts the
//! slot arrays (free slots included) rather than encoded bytes.

use bank::workload::open_command;
use bank::{Bank, BankCommand, BankOutput};
use engine::state::STATE_BYTES_DEFAULT;
use engine::{Outcome, Sandbox};

/// Accounts the reference workload prefills (runner local, bench, matrix and the benches).
const ACCOUNTS_REFERENCE: u64 = 2_000_000;
/// Commands per entry of the prefill.
const PREFILL_ENTRY_COMMANDS: u64 = 1_024;

/// Proves two million accounts open under the default capacity, every one of them, with the
/// account at the slot array it really holds: 4,194,304 slots of 64 bytes (256 MiB of 2 GiB).
#[test]
fn the_reference_prefill_fits_the_default_capacity() {
    let mut sandbox = Sandbox::new(Bank, STATE_BYTES_DEFAULT);
    let mut next = 0;
    while next < ACCOUNTS_REFERENCE {
        let end = (next + PREFILL_ENTRY_COMMANDS).min(ACCOUNTS_REFERENCE);
        let commands: Vec<BankCommand> = (next..end).map(open_command).collect();
        for outcome in sandbox.run(&commands).expect("the prefill applies") {
            assert!(
                matches!(outcome, Outcome::Done(BankOutput::Account(_))),
                "{outcome:?} after {next} accounts"
            );
        }
        next = end;
    }
    let state = sandbox.state();
    assert_eq!(state.bytes_used(), state.allocated_bytes() as u64);
    assert_eq!(state.bytes_used(), 4_194_304 * 64);
    assert!(state.bytes_used() <= STATE_BYTES_DEFAULT / 4);
}
