//! The log's invariants as code: its index of entries against its segments. Checked after
//! every scan, and by the simulator on the open log: its last segment after every event, the
//! whole index (one [`Located`] per entry held, bounded by compaction) every few; never the
//! files.

use super::record::RECORD_HEADER_BYTES;
use super::{Located, Segment, Wal};
use crate::entry::{ENTRY_PAYLOAD_BYTES_MAX, EntryHash};
use crate::ids::EntryIndex;
use crate::storage::Storage;

/// Entries at the end of the last segment that a check of recent work walks (the ones a batch
/// can have appended); a whole check walks every segment.
const WAL_CHECK_RECENT_ENTRIES: usize = 64;

/// Bytes of the largest record: its header and the largest payload.
const RECORD_BYTES_MAX: u64 = RECORD_HEADER_BYTES as u64 + ENTRY_PAYLOAD_BYTES_MAX as u64;

impl<S: Storage> Wal<S> {
    /// The log's start, its segments' lengths, and where each entry lives.
    pub(super) fn check_index(&self) {
        self.check_start();
        self.check_segments();
        let mut at = 0;
        for (position, segment) in self.segments.iter().enumerate() {
            at = self.check_segment_entries(position, segment, at);
        }
        assert_eq!(
            at,
            self.entries.len(),
            "entries from {} on lie in no segment held",
            self.first_index.0 + at as u64
        );
    }

    /// [`Wal::check_index`] for the end of the last segment (where appends and cuts happen):
    /// its last [`WAL_CHECK_RECENT_ENTRIES`] entries are the index's last ones, each where the
    /// one before it ended, and they end where its records do.
    pub(super) fn check_last_segment(&self) {
        self.check_start();
        let Some(segment) = self.segments.last() else {
            return;
        };
        let position = self.segments.len() - 1;
        let number = position + self.segments_removed;
        let tail = self.entries.len().saturating_sub(WAL_CHECK_RECENT_ENTRIES);
        let first = tail + self.entries[tail..].partition_point(|entry| entry.segment != number);
        let at = self.check_segment_entries(position, segment, first);
        assert_eq!(
            at,
            self.entries.len(),
            "entries from {} on lie past the last segment",
            self.first_index.0 + at as u64
        );
    }

    fn check_start(&self) {
        assert!(
            self.first_index >= EntryIndex(1),
            "the log starts at entry {}",
            self.first_index
        );
        assert!(
            self.first_index > EntryIndex(1) || self.base_hash == EntryHash::default(),
            "a log from entry 1 chains its first entry to no hash, not {:?}",
            self.base_hash
        );
        assert!(
            !self.segments.is_empty() || self.entries.is_empty(),
            "{} entries without a segment",
            self.entries.len()
        );
    }

    /// Only the last segment may have bytes past its records (zeros written ahead, a torn
    /// tail not cut yet), and a torn tail is all of them.
    fn check_segments(&self) {
        let last = self.segments.len().saturating_sub(1);
        for (position, segment) in self.segments.iter().enumerate() {
            assert!(
                segment.bytes <= segment.len,
                "{}: {} bytes of records in a file of {}",
                segment.path.display(),
                segment.bytes,
                segment.len
            );
            assert!(
                position == last || segment.len == segment.bytes,
                "{}: a closed segment of {} bytes holds {} bytes of records",
                segment.path.display(),
                segment.len,
                segment.bytes
            );
        }
        let tail = self.segments.last().map_or(0, |s| s.len - s.bytes);
        assert!(
            self.torn_tail_bytes == 0 || self.torn_tail_bytes == tail,
            "a torn tail of {} bytes, {tail} bytes after the last record",
            self.torn_tail_bytes
        );
    }

    /// The entries of the segment at `position`, from `entries[first]` on: their records
    /// follow each other from the segment's start to exactly its end. Returns the position
    /// of the first entry after them.
    fn check_segment_entries(
        &self,
        position: usize,
        segment: &Segment<S::File>,
        first: usize,
    ) -> usize {
        let number = position + self.segments_removed;
        // Where the entry before the first one checked ended, in this segment.
        let before = first.checked_sub(1).and_then(|at| self.entries.get(at));
        let mut end = before
            .filter(|entry| entry.segment == number)
            .map_or(0, |entry| entry.offset + u64::from(entry.record_bytes));
        let mut at = first;
        while let Some(entry) = self.entries.get(at).filter(|e| e.segment == number) {
            check_record(entry, end, segment);
            end = entry.offset + u64::from(entry.record_bytes);
            at += 1;
        }
        assert_eq!(
            end,
            segment.bytes,
            "{}: its entries' records end at byte {end}, its records at byte {}",
            segment.path.display(),
            segment.bytes
        );
        at
    }
}

/// One entry's record: at `offset` (where the record before it ended), of a record's size,
/// inside its segment's records.
fn check_record<F>(entry: &Located, offset: u64, segment: &Segment<F>) {
    assert_eq!(
        entry.offset,
        offset,
        "{}: a record at byte {}, where the one before it ended at {offset}",
        segment.path.display(),
        entry.offset
    );
    let bytes = u64::from(entry.record_bytes);
    assert!(
        (RECORD_HEADER_BYTES as u64..=RECORD_BYTES_MAX).contains(&bytes),
        "{}: a record of {bytes} bytes at byte {offset}",
        segment.path.display()
    );
    assert!(
        offset + bytes <= segment.bytes,
        "{}: a record at byte {offset} of {bytes} bytes, past the records' end at {}",
        segment.path.display(),
        segment.bytes
    );
}
