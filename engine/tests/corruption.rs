//! Damage on disk is found, never read as different data: any single flipped bit, or any burst
//! of flipped bits inside a window of up to 32 bits, in a WAL segment is reported as damage
//! (or cut as a torn tail when it lies in the last record) at exactly the entry it hit, and
//! every entry before it reads back as written; the same damage in a snapshot file makes its
//! digest refuse it. A segment or a snapshot cut at any byte never panics and never yields a
//! wrong entry or snapshot. A zeroed sector anywhere in a segment is found as damage too (or cut
//! as a torn tail when it reaches only the last record).
//!
//! Why the WAL holds: a record is `magic | header | crc32 of header | payload`, and the header
//! carries the payload's crc32; a burst of up to 32 bits inside the header, inside the payload,
//! or over the stored crc32 (which then no longer matches) is caught for certain, and one that
//! reaches the magic breaks the magic.

mod common;

use common::{Ledger, entries};
use engine::internals::entry::{ENTRY_HEADER_BYTES, Entry};
use engine::internals::snapshot::parse_snapshot;
use engine::internals::wal::{WAL_SEGMENT_BYTES_MIN, Wal, WalError};
use engine::{EntryIndex, StateMachine};
use proptest::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Bytes of a WAL record before its payload: magic, entry header, header crc32.
const RECORD_HEADER_BYTES: usize = 4 + ENTRY_HEADER_BYTES + 4;

/// A small real log: its entries, its segment files (name, bytes), and where each record
/// starts in the segments laid end to end.
struct Log {
    entries: Vec<Entry>,
    segments: Vec<(String, Vec<u8>)>,
    record_starts: Vec<usize>,
}

impl Log {
    fn bytes(&self) -> Vec<u8> {
        self.segments.iter().flat_map(|(_, b)| b.clone()).collect()
    }

    /// Bytes of all segments.
    fn total_bytes(&self) -> usize {
        self.segments.iter().map(|(_, b)| b.len()).sum()
    }

    /// The entry whose record holds byte `at` of the segments laid end to end.
    fn entry_at(&self, at: usize) -> EntryIndex {
        let records_before = self.record_starts.partition_point(|&start| start <= at);
        EntryIndex(records_before as u64)
    }

    /// Writes `bytes` (the segments laid end to end, possibly damaged) back as segment files
    /// in `dir`, each file `cut` to its length in bytes when given.
    fn write(&self, dir: &Path, bytes: &[u8], cut: Option<(usize, usize)>) {
        fs::create_dir_all(dir).unwrap();
        let mut at = 0;
        for (n, (name, original)) in self.segments.iter().enumerate() {
            let mut end = at + original.len();
            if let Some((segment, keep)) = cut
                && segment == n
            {
                end = at + keep;
            }
            fs::write(dir.join(name), &bytes[at..end]).unwrap();
            at += original.len();
        }
    }
}

static LOG: LazyLock<Log> = LazyLock::new(|| {
    let dir = scratch_dir();
    let entries = entries(5, 16);
    let (mut wal, _) = Wal::open_with(dir.path(), WAL_SEGMENT_BYTES_MIN).unwrap();
    for entry in &entries {
        wal.append(entry).unwrap();
    }
    drop(wal);
    let mut paths: Vec<PathBuf> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let segments: Vec<(String, Vec<u8>)> = paths
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (name, fs::read(p).unwrap())
        })
        .collect();
    assert!(segments.len() >= 2, "the log spans segments");
    let mut record_starts = Vec::new();
    let mut at = 0;
    for entry in &entries {
        record_starts.push(at);
        at += RECORD_HEADER_BYTES + entry.payload.len();
    }
    let total: usize = segments.iter().map(|(_, b)| b.len()).sum();
    assert_eq!(at, total, "records lie back to back");
    Log {
        entries,
        segments,
        record_starts,
    }
});

/// A directory for one case's files: in memory where Linux offers it (opens fsync).
fn scratch_dir() -> tempfile::TempDir {
    match tempfile::tempdir_in("/dev/shm") {
        Ok(dir) => dir,
        Err(_) => tempfile::tempdir().unwrap(),
    }
}

/// Every entry `wal` holds reads back as written.
fn assert_entries_as_written(wal: &Wal) -> Result<(), TestCaseError> {
    for index in 1..=wal.last_index().0 {
        let entry = wal.read(EntryIndex(index));
        prop_assert_eq!(entry.as_ref().ok(), Some(&LOG.entries[index as usize - 1]));
    }
    Ok(())
}

/// How recovery must take the damage.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// As damage: the strict open fails naming the entry, the repairing open reports it.
    Damage,
    /// As a torn tail (nothing whole follows it): the strict open cuts it; the repairing open
    /// may cut it or report it (written bytes that may have been acknowledged).
    Torn,
    /// As a torn tail by both opens (a record cut short by the end of the file).
    TornOnly,
}

/// Opens a damaged log strictly and repairing: both must stop right before `first_lost`,
/// taking the damage as `expect` says, and every entry before it must read back as written.
fn assert_recovery(
    bytes: &[u8],
    cut: Option<(usize, usize)>,
    first_lost: EntryIndex,
    expect: Expect,
) -> Result<(), TestCaseError> {
    let dir = scratch_dir();
    let strict_dir = dir.path().join("strict");
    let repair_dir = dir.path().join("repair");
    LOG.write(&strict_dir, bytes, cut);
    LOG.write(&repair_dir, bytes, cut);
    match (Wal::open_with(&strict_dir, WAL_SEGMENT_BYTES_MIN), expect) {
        (Ok((wal, _)), Expect::Torn | Expect::TornOnly) => {
            prop_assert_eq!(
                wal.last_index(),
                first_lost.prev(),
                "the torn tail is cut there"
            );
            assert_entries_as_written(&wal)?;
        }
        (Err(WalError::Corruption { index, .. }), Expect::Damage) => {
            prop_assert_eq!(index, first_lost)
        }
        (Ok(_), Expect::Damage) => prop_assert!(false, "damage taken for a torn tail"),
        (Err(other), _) => prop_assert!(false, "strict open: {other}"),
    }
    let (wal, recovery) = Wal::open_repairing(&repair_dir, WAL_SEGMENT_BYTES_MIN)
        .map_err(|e| TestCaseError::fail(format!("repairing open: {e}")))?;
    prop_assert_eq!(wal.last_index(), first_lost.prev());
    match (&recovery.damage, expect) {
        (Some(damage), Expect::Damage | Expect::Torn) => {
            prop_assert_eq!(damage.index, first_lost)
        }
        (None, Expect::Torn | Expect::TornOnly) => {}
        (Some(damage), Expect::TornOnly) => prop_assert!(false, "a cut record: {damage:?}"),
        (None, Expect::Damage) => prop_assert!(false, "damage not reported"),
    }
    assert_entries_as_written(&wal)
}

/// How recovery must take damage to the bytes `first..=last` of the segments laid end to end:
/// as a torn tail only when it reaches the log's last entry and starts in the last segment
/// (a segment before it was complete, and fsynced, before the next one began: damage there
/// is never a torn write, even when the bytes laid end to end run on into the last entry).
fn expect_for(first: usize, last: usize) -> Expect {
    let last_segment = LOG.segments.last().expect("segments").1.len();
    let last_segment_start = LOG.total_bytes() - last_segment;
    let reaches_end = LOG.entry_at(last).0 == LOG.entries.len() as u64;
    match reaches_end && first >= last_segment_start {
        true => Expect::Torn,
        false => Expect::Damage,
    }
}

/// XORs `pattern` (bit 0 first) into `bytes` from bit `start` on, as far as the bytes reach;
/// returns the first and last bytes changed.
fn flip_bits(bytes: &mut [u8], start: usize, pattern: u32) -> Option<(usize, usize)> {
    let bits = bytes.len() * 8;
    let mut changed: Option<(usize, usize)> = None;
    for i in 0..32 {
        let bit = start + i;
        if pattern >> i & 1 == 1 && bit < bits {
            bytes[bit / 8] ^= 1 << (bit % 8);
            let first = changed.map_or(bit / 8, |(first, _)| first);
            changed = Some((first, bit / 8));
        }
    }
    changed
}

/// A burst within a window of up to 32 bits from `start`, kept to the `bits` there are (never
/// all zero).
fn burst(bits: usize, start: usize, pattern: u32, window: u32) -> u32 {
    let reach = window.min((bits - start) as u32);
    match pattern & (u32::MAX >> (32 - reach)) {
        0 => 1,
        pattern => pattern,
    }
}

/// Bytes of the sectors [`wal_zeroed_sectors_are_found`] zeroes (each aligned in its file).
const SECTOR_BYTES: usize = 512;

/// The sector `at` picks among every segment's sectors: its first and past-the-end bytes in
/// the segments laid end to end (the last sector of a file may be short).
fn sector(at: prop::sample::Index) -> (usize, usize) {
    let mut sectors = Vec::new();
    let mut segment_start = 0;
    for (_, segment) in &LOG.segments {
        for offset in (0..segment.len()).step_by(SECTOR_BYTES) {
            let start = segment_start + offset;
            sectors.push((
                start,
                (start + SECTOR_BYTES).min(segment_start + segment.len()),
            ));
        }
        segment_start += segment.len();
    }
    sectors[at.index(sectors.len())]
}

static SNAPSHOT: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut machine = StateMachine::new(Ledger, 1 << 20);
    for entry in entries(9, 12) {
        machine.apply(&entry).unwrap();
    }
    let (_, bytes) = machine.snapshot_file().unwrap();
    assert!(parse_snapshot(&bytes).is_ok());
    bytes
});

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// Proves a single flipped bit anywhere in the WAL is found at the entry it hit.
    #[test]
    fn wal_single_bit_flips_are_found(at in any::<prop::sample::Index>()) {
        let mut bytes = LOG.bytes();
        let bit = at.index(bytes.len() * 8);
        let (first, last) = flip_bits(&mut bytes, bit, 1).unwrap();
        let expect = expect_for(first, last);
        assert_recovery(&bytes, None, LOG.entry_at(first), expect)?;
    }

    /// Proves a burst of flipped bits within 32 bits anywhere in the WAL is found at the
    /// first entry it hit.
    #[test]
    fn wal_bursts_up_to_32_bits_are_found(
        at in any::<prop::sample::Index>(),
        pattern in 1..=u32::MAX,
        window in 1..=32u32,
    ) {
        let mut bytes = LOG.bytes();
        let bits = bytes.len() * 8;
        let start = at.index(bits);
        let burst = burst(bits, start, pattern, window);
        let (first, last) = flip_bits(&mut bytes, start, burst).unwrap();
        let expect = expect_for(first, last);
        assert_recovery(&bytes, None, LOG.entry_at(first), expect)?;
    }

    /// Proves a zeroed sector (a misdirected or lost write, as a drive reports zeros for it)
    /// anywhere in a WAL segment is found at the first entry it changed, never taken for the
    /// end of the log while whole records follow it.
    #[test]
    fn wal_zeroed_sectors_are_found(at in any::<prop::sample::Index>()) {
        let mut bytes = LOG.bytes();
        let (start, end) = sector(at);
        let changed: Vec<usize> = (start..end).filter(|&i| bytes[i] != 0).collect();
        prop_assume!(!changed.is_empty());
        bytes[start..end].fill(0);
        let (first, last) = (changed[0], changed[changed.len() - 1]);
        let expect = expect_for(first, last);
        assert_recovery(&bytes, None, LOG.entry_at(first), expect)?;
    }

    /// Proves a single flipped bit anywhere in a snapshot file makes it refused.
    #[test]
    fn snapshot_single_bit_flips_are_refused(at in any::<prop::sample::Index>()) {
        let mut bytes = SNAPSHOT.clone();
        let bit = at.index(bytes.len() * 8);
        flip_bits(&mut bytes, bit, 1).unwrap();
        prop_assert!(parse_snapshot(&bytes).is_err());
    }

    /// Proves a burst of flipped bits within 32 bits anywhere in a snapshot file makes it
    /// refused.
    #[test]
    fn snapshot_bursts_up_to_32_bits_are_refused(
        at in any::<prop::sample::Index>(),
        pattern in 1..=u32::MAX,
        window in 1..=32u32,
    ) {
        let mut bytes = SNAPSHOT.clone();
        let bits = bytes.len() * 8;
        let start = at.index(bits);
        flip_bits(&mut bytes, start, burst(bits, start, pattern, window)).unwrap();
        prop_assert!(parse_snapshot(&bytes).is_err());
    }
}

/// Proves a WAL segment cut at any byte loses exactly the entries from the first one not
/// whole: the last segment's cut is a torn tail, an earlier segment's is damage (the later
/// segments no longer follow on).
#[test]
fn wal_cut_at_every_byte() {
    let bytes = LOG.bytes();
    let mut segment_start = 0;
    for (n, (_, segment)) in LOG.segments.iter().enumerate() {
        for keep in 0..segment.len() {
            // The record holding the first byte cut off is the first entry lost (whether the
            // cut falls at its start or inside it).
            let first_lost = LOG.entry_at(segment_start + keep);
            let expect = match n + 1 == LOG.segments.len() {
                true => Expect::TornOnly,
                false => Expect::Damage,
            };
            assert_recovery(&bytes, Some((n, keep)), first_lost, expect)
                .unwrap_or_else(|e| panic!("segment {n} cut to {keep} bytes: {e}"));
        }
        segment_start += segment.len();
    }
}

/// Proves a snapshot file cut at any byte is refused.
#[test]
fn snapshot_cut_at_every_byte() {
    for cut in 0..SNAPSHOT.len() {
        assert!(parse_snapshot(&SNAPSHOT[..cut]).is_err(), "cut at {cut}");
    }
}
