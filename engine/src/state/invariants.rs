//! The state's invariants as code, checked by the state machine's `check_invariants` (after
//! every simulator event, and by a node in debug builds). Cheap enough for that: they walk the
//! tables' metadata, the undo log and the growths, never the records (a state can hold
//! gigabytes of them).

use super::table::TABLES_MAX;
use super::{State, TableId, TxMark, array_bytes};

impl State {
    /// Checks what holds of the state at any moment between two calls into it: the tables of
    /// the schema and their internals, the capacity account, the undo log, the growths not yet
    /// final and the write stream's hasher. Panics naming the first invariant broken.
    pub(crate) fn check_invariants(&self) {
        self.check_tables();
        self.check_account();
        self.check_undo();
        self.check_growths();
        self.hasher.check_invariants();
    }

    /// Checks that nothing is pending when `first` is `None` (every write absorbed into the
    /// hash, no undo record, no growth that could still be undone, no slot kept past its
    /// count), or that what is pending starts at `first`: the mark of the oldest speculative
    /// entry sits exactly at the committed end of the stream and of the undo log.
    pub(crate) fn check_pending_since(&self, first: Option<TxMark>) {
        let absorbed = self.hasher.stream_bytes();
        let Some(first) = first else {
            assert_eq!(
                self.hasher.position(),
                absorbed,
                "with nothing pending, every write is absorbed into the state hash"
            );
            assert!(
                self.undo.is_empty(),
                "with nothing pending, no undo record is kept ({} are)",
                self.undo.len()
            );
            assert!(
                self.growths.is_empty(),
                "with nothing pending, no growth is undoable ({} are)",
                self.growths.len()
            );
            assert_eq!(
                self.oversized_tables, 0,
                "with nothing pending, no table keeps slots past its count"
            );
            return;
        };
        assert_eq!(
            first.stream, absorbed,
            "the oldest pending entry starts where the absorbed stream ends"
        );
        assert_eq!(
            first.undo, self.undo_forgotten,
            "the oldest pending entry starts where the final undo records end"
        );
    }

    /// Checks that the tables from position `from` on (in the schema's order) have a
    /// snapshot scan in progress (or one made void, for the scan to find), and the tables
    /// before it none: a snapshot scans the tables one after another, and no scan outlives
    /// its snapshot. `from` is the table count when no snapshot is in progress.
    pub(crate) fn check_scans(&self, from: usize) {
        for (position, &id) in self.table_ids.iter().enumerate() {
            let pending = self.table(id).scan_pending();
            assert_eq!(
                pending,
                position >= from,
                "table {} (position {position}) has a scan pending: {pending}; the snapshot \
                 stands at position {from}",
                id.0
            );
        }
    }

    fn table(&self, id: TableId) -> &dyn super::table::AnyTable {
        let table = self.tables.get(id.0 as usize).and_then(Option::as_deref);
        assert!(table.is_some(), "table {} of the schema is held", id.0);
        table.expect("checked")
    }

    fn check_tables(&self) {
        assert!(
            self.table_ids.len() <= TABLES_MAX,
            "{} tables, at most {TABLES_MAX}",
            self.table_ids.len()
        );
        let held = self.tables.iter().flatten().count();
        assert_eq!(
            held,
            self.table_ids.len(),
            "the tables held are the schema's"
        );
        for &id in &self.table_ids {
            self.table(id).check_invariants(id);
        }
    }

    /// The account charges every table's slot array for its counted slots, and the heap bytes
    /// of records beyond their slots on top: never less than the arrays. It stays within the
    /// capacity, except for a schema whose first arrays alone exceed a tiny capacity (then no
    /// record was ever charged).
    fn check_account(&self) {
        let arrays = self
            .table_ids
            .iter()
            .map(|&id| {
                let table = self.table(id);
                array_bytes(table.slot_bytes(), table.counted_slots())
            })
            .fold(0, u64::saturating_add);
        assert!(
            self.bytes_used >= arrays,
            "the account holds {} bytes, less than the tables' slot arrays ({arrays} bytes)",
            self.bytes_used
        );
        assert!(
            self.bytes_used <= self.capacity_bytes || self.bytes_used == arrays,
            "the account holds {} bytes with records charged, over the capacity of {} bytes",
            self.bytes_used,
            self.capacity_bytes
        );
    }

    /// Every change in the state's undo log has its record in its table's undo log, and the
    /// other way round, table by table; the tables marked as holding undo records, or as
    /// keeping slots past their count, are declared ones.
    fn check_undo(&self) {
        let mut per_table = [0usize; TABLES_MAX];
        for id in &self.undo {
            per_table[id.0 as usize] += 1;
        }
        let mut declared = 0u64;
        for &id in &self.table_ids {
            declared |= 1 << id.0;
            let held = self.table(id).undo_len();
            assert_eq!(
                held, per_table[id.0 as usize],
                "table {} holds {held} undo records, the state's log names it {} times",
                id.0, per_table[id.0 as usize]
            );
            assert!(
                held == 0 || self.undo_tables & (1 << id.0) != 0,
                "table {} holds {held} undo records without being marked as holding any",
                id.0
            );
        }
        assert_eq!(
            (self.undo_tables | self.oversized_tables) & !declared,
            0,
            "only declared tables are marked (undo {:#x}, oversized {:#x}, declared {declared:#x})",
            self.undo_tables,
            self.oversized_tables
        );
    }

    /// The growths not yet final are in the order of their writes, each at the undo record of
    /// the write that grew its table (still in the log), and each table still counts more
    /// slots than it had before.
    fn check_growths(&self) {
        let end = self.undo_forgotten + self.undo.len() as u64;
        let mut first_free = self.undo_forgotten;
        for growth in &self.growths {
            assert!(
                growth.undo >= first_free && growth.undo < end,
                "a growth of table {} at undo record {}, outside {first_free}..{end}",
                growth.table.0,
                growth.undo
            );
            first_free = growth.undo + 1;
            let counted = self.table(growth.table).counted_slots();
            assert!(
                counted > growth.slots_before,
                "table {} counts {counted} slots, not more than the {} before its growth",
                growth.table.0,
                growth.slots_before
            );
        }
    }
}
