//! The replicated state: [`ACCOUNTS`] accounts in a dense array indexed by id, one cache line
//! each, and the transfer every replica executes. The cheapest state layout there is, so that
//! the probe prices the path, not a data structure.

use crate::wire::Transfer;

/// Accounts every replica holds, as in the reference workload.
pub const ACCOUNTS: u32 = 2_000_000;
/// Each account's balance at the start: no transfer of the probe can exhaust it.
const OPENING_BALANCE: u64 = 1 << 40;
/// A command's status in a reply: applied.
pub const STATUS_DONE: u8 = 0;
/// A command's status in a reply: refused (same account, unknown account, no funds, overflow).
pub const STATUS_FAILED: u8 = 1;

/// One account: 32 bytes of fields, aligned to a 64-byte cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Account {
    balance: u64,
    debits: u64,
    credits: u64,
    version: u64,
}

const _: () = assert!(std::mem::size_of::<Account>() == 64);

/// The accounts of one replica.
pub struct Ledger {
    accounts: Vec<Account>,
}

impl Ledger {
    /// [`ACCOUNTS`] accounts, each with the opening balance (allocated and written now, so that
    /// no page fault falls inside the measurement).
    pub fn open() -> Ledger {
        let account = Account {
            balance: OPENING_BALANCE,
            debits: 0,
            credits: 0,
            version: 0,
        };
        Ledger {
            accounts: vec![account; ACCOUNTS as usize],
        }
    }

    /// Executes `batch` in order, each command on its own, and writes one status byte per
    /// command into `statuses` (cleared first).
    pub fn execute(&mut self, batch: &[Transfer], statuses: &mut Vec<u8>) {
        statuses.clear();
        for transfer in batch {
            statuses.push(match self.transfer(transfer) {
                true => STATUS_DONE,
                false => STATUS_FAILED,
            });
        }
    }

    /// One transfer: both accounts changed, or (false) neither.
    fn transfer(&mut self, transfer: &Transfer) -> bool {
        let ids = [transfer.from as usize, transfer.to as usize];
        let Ok([from, to]) = self.accounts.get_disjoint_mut(ids) else {
            return false;
        };
        let (Some(debited), Some(credited)) = (
            from.balance.checked_sub(transfer.amount),
            to.balance.checked_add(transfer.amount),
        ) else {
            return false;
        };
        from.balance = debited;
        from.debits += transfer.amount;
        from.version += 1;
        to.balance = credited;
        to.credits += transfer.amount;
        to.version += 1;
        true
    }

    /// The sum of every balance (transfers keep it unchanged).
    #[cfg(test)]
    fn total(&self) -> u128 {
        self.accounts.iter().map(|a| u128::from(a.balance)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(from: u32, to: u32, amount: u64) -> Transfer {
        Transfer {
            id: 1,
            from,
            to,
            amount,
        }
    }

    /// Proves transfers apply whole or not at all, and keep the total.
    #[test]
    fn transfers_apply_whole_or_not_at_all() {
        let mut ledger = Ledger::open();
        let total = ledger.total();
        let batch = [
            transfer(1, 2, 500),
            transfer(3, 3, 1),
            transfer(4, ACCOUNTS, 1),
            transfer(5, 6, OPENING_BALANCE + 1),
            transfer(2, 1, 200),
        ];
        let mut statuses = Vec::new();
        ledger.execute(&batch, &mut statuses);
        let failed = STATUS_FAILED;
        assert_eq!(statuses, [STATUS_DONE, failed, failed, failed, STATUS_DONE]);
        assert_eq!(ledger.total(), total);
        let one = ledger.accounts[1];
        assert_eq!((one.balance, one.version), (OPENING_BALANCE - 300, 2));
        assert_eq!(ledger.accounts[5].version, 0);
    }
}
