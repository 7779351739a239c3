//! The state machine's invariants as code: what it applied and hashed, the snapshot scan in
//! progress, and (through their own checks) its speculations, sessions and state. Checked
//! after every simulator event and by a node in debug builds: each walks bounded structures
//! only (sessions, speculations, the tables' metadata), never the records.

use super::speculate::Pass;
use super::{ScanState, StateMachine};
use crate::entry::EntryHash;
use crate::handler::{HANDLER_VERSION_FIRST, Handler};
use crate::ids::{EntryIndex, Term};

impl<H: Handler> StateMachine<H> {
    /// What holds of the last entry applied and the machine's bookkeeping around it.
    pub(super) fn check_applied(&self) {
        if self.applied == EntryIndex::ZERO {
            assert!(
                self.applied_term == Term(0) && self.applied_entry == EntryHash::default(),
                "before the first entry, no term ({:?}) and no hash ({:?})",
                self.applied_term,
                self.applied_entry
            );
        }
        if let Some((index, _)) = &self.members {
            assert!(
                *index <= self.applied,
                "the members in force come from entry {index}, after the last applied ({})",
                self.applied
            );
        }
        assert!(
            self.handler_version == HANDLER_VERSION_FIRST
                || H::VERSIONS.contains(&self.handler_version),
            "handler version {} in force, which this build does not run",
            self.handler_version
        );
        let counters = self.counters;
        assert!(
            counters.reused + counters.verified <= counters.simulated,
            "{} commands reused and {} verified of {} simulated",
            counters.reused,
            counters.verified,
            counters.simulated
        );
        assert!(
            self.journaling || self.ran.is_empty(),
            "outcome fingerprints kept without journaling"
        );
        assert!(
            self.stopped || matches!(self.pass, Pass::Execute),
            "between entries the pass is plain execution"
        );
    }

    /// What holds of the snapshot scan in progress, if any, and of the tables' scans.
    pub(super) fn check_scan(&self) {
        let tables = self.state.table_ids().len();
        let Some(scan) = &self.scan else {
            self.state.check_scans(tables);
            return;
        };
        let meta = &scan.meta;
        assert!(
            meta.index <= self.applied && meta.term <= self.applied_term,
            "a snapshot of entry {} (term {}) beyond the last applied, {} (term {})",
            meta.index,
            meta.term.0,
            self.applied,
            self.applied_term.0
        );
        if meta.index == self.applied {
            assert_eq!(
                meta.state_hash, self.hash,
                "a snapshot of entry {} records its state hash",
                meta.index
            );
        }
        check_scan_position(scan, tables);
        assert!(
            scan.sessions.windows(2).all(|w| w[0].0 < w[1].0),
            "a snapshot's sessions are in client order"
        );
        let active = scan.sessions.iter().map(|(_, s)| s.last_active).max();
        assert!(
            active.is_none_or(|active| active <= meta.index),
            "a snapshot of entry {} holds a session active at {active:?}",
            meta.index
        );
        // The state clock never goes back, so the committed one is not ahead of the state's.
        assert!(
            scan.clock_ms <= self.sessions.clock_ms(),
            "a snapshot's state clock {} ms is ahead of the state's {} ms",
            scan.clock_ms,
            self.sessions.clock_ms()
        );
        self.state.check_scans(scan.table);
    }
}

/// Where a snapshot's encoding stands: a slot count per table, at a table of the schema (or
/// past the last), inside one only once the file's start is written.
fn check_scan_position(scan: &ScanState, tables: usize) {
    assert_eq!(
        scan.slots.len(),
        tables,
        "a snapshot records the slot count of each of the {tables} tables"
    );
    assert!(
        scan.table < tables || scan.table == tables && !scan.in_table,
        "a snapshot at table {} of {tables} (inside it: {})",
        scan.table,
        scan.in_table
    );
    assert!(
        scan.head_written || scan.table == 0 && !scan.in_table,
        "a snapshot at table {} before its start is written",
        scan.table
    );
}
