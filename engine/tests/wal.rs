//! The write-ahead log: durability across reopen, torn tails, corruption reports, truncation.

use bytes::Bytes;
use engine::internals::entry::{
    Entry, EntryHash, EntryKind, FragmentHeader, PayloadBuilder, RequestDigest,
};
use engine::internals::wal::{PREPARED_SEGMENT_NAME, Wal, WalError, prepare_segment};
use engine::{ClientId, EntryIndex, RequestNumber, Term};
use std::fs;
use std::path::{Path, PathBuf};

/// An entry whose payload size varies with its index, chained to `prev`.
fn entry(index: u64, prev: &EntryHash) -> Entry {
    let commands: Vec<u8> = (0..(index as usize * 37) % 300 + 1)
        .map(|i| (i as u64 * index) as u8)
        .collect();
    let mut payload = PayloadBuilder::new(index * 1000);
    let fragment = FragmentHeader {
        client: ClientId(u128::from(index % 3)),
        request: RequestNumber(index),
        oldest_pending: RequestNumber(index),
        request_commands: 1,
        first_command: 0,
        command_count: 1,
        command_bytes: commands.len() as u32,
        digest: RequestDigest::of(1, &commands),
    };
    payload.push(&fragment, &commands);
    let (payload, count, _) = payload.finish();
    Entry::seal(
        EntryIndex(index),
        Term(1 + index / 4),
        EntryKind::Commands,
        EntryIndex::ZERO,
        count,
        payload,
        prev,
    )
}

/// Appends entries 1..=count to a new log in `dir`; returns them.
fn fill(dir: &Path, count: u64, segment_bytes: u64) -> Vec<Entry> {
    fill_ahead(dir, count, segment_bytes, 0)
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
}

/// Proves appended entries survive a reopen byte for byte, across several segments.
#[test]
fn reopen_reads_back_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill(dir.path(), 40, 2048);
    assert!(segments(dir.path()).len() > 3, "small segments roll over");
    let (wal, recovery) = Wal::open(dir.path()).unwrap();
    assert_eq!(recovery.entries, 40);
    assert_eq!(recovery.torn_tail_bytes, 0);
    assert_eq!(wal.last_index(), EntryIndex(40));
    assert_eq!(wal.last_hash(), entries[39].header.hash);
    for e in &entries {
        assert_eq!(&wal.read(e.index()).unwrap(), e);
        assert_eq!(wal.term_at(e.index()), Some(e.term()));
    }
}

/// Proves a crash that cut the last entry at any byte offset recovers to the entry before it,
/// and the log then takes new appends.
#[test]
fn torn_tail_at_every_offset_is_cut_back() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill(dir.path(), 6, 1 << 20);
    let path = segments(dir.path()).pop().unwrap();
    let full = fs::read(&path).unwrap();
    let last_start = full.len() - record_len(&entries[5]);
    for cut in last_start..full.len() {
        fs::write(&path, &full[..cut]).unwrap();
        let (mut wal, recovery) = Wal::open(dir.path()).unwrap();
        assert_eq!(recovery.last_index, EntryIndex(5), "cut at {cut}");
        assert_eq!(recovery.torn_tail_bytes, (cut - last_start) as u64);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            last_start as u64,
            "tail cut off on disk"
        );
        wal.append(&entries[5]).unwrap();
        assert_eq!(wal.last_index(), EntryIndex(6));
    }
    let (wal, _) = Wal::open(dir.path()).unwrap();
    assert_eq!(wal.read(EntryIndex(6)).unwrap(), entries[5]);
}

fn record_len(e: &Entry) -> usize {
    4 + engine::internals::entry::ENTRY_HEADER_BYTES + 4 + e.payload.len()
}

/// Proves a flipped bit anywhere in a middle entry is reported as corruption at its index, in
/// the last segment and in an earlier one, and never silently dropped.
#[test]
fn flipped_bit_in_a_middle_entry_is_reported_with_its_index() {
    for segment_bytes in [1 << 20, 1500] {
        let dir = tempfile::tempdir().unwrap();
        let entries = fill(dir.path(), 12, segment_bytes);
        let (target, path, start) = locate(dir.path(), &entries, 5);
        let original = fs::read(&path).unwrap();
        let len = record_len(&entries[target]);
        for offset in (0..len).step_by(7).chain([len - 1]) {
            let mut damaged = original.clone();
            damaged[start + offset] ^= 0x10;
            fs::write(&path, &damaged).unwrap();
            match Wal::open(dir.path()) {
                Err(WalError::Corruption { index, .. }) => {
                    assert_eq!(index, entries[target].index(), "bit at offset {offset}")
                }
                Err(other) => panic!("offset {offset}: unexpected error {other}"),
                Ok(_) => panic!("offset {offset}: damage went unnoticed"),
            }
        }
        fs::write(&path, &original).unwrap();
        assert_eq!(Wal::open(dir.path()).unwrap().1.entries, 12);
    }
}

/// Finds the segment and offset of the entry at position `want` (0-based) or the first entry
/// after it that is not the last of its segment (so valid records follow it).
fn locate(dir: &Path, entries: &[Entry], want: usize) -> (usize, PathBuf, usize) {
    let mut at = 0;
    for path in segments(dir) {
        let bytes = fs::metadata(&path).unwrap().len() as usize;
        let mut offset = 0;
        while offset < bytes {
            if at >= want && offset + record_len(&entries[at]) < bytes {
                return (at, path, offset);
            }
            offset += record_len(&entries[at]);
            at += 1;
        }
    }
    panic!("no middle entry found");
}

/// Proves truncating a suffix is durable and the log continues from the cut with a new chain.
#[test]
fn truncate_from_removes_the_suffix_durably() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill(dir.path(), 30, 2048);
    let (mut wal, _) = Wal::open_with(dir.path(), 2048).unwrap();
    wal.truncate_from(EntryIndex(11)).unwrap();
    assert_eq!(wal.last_index(), EntryIndex(10));
    assert_eq!(wal.last_hash(), entries[9].header.hash);
    assert!(matches!(
        wal.read(EntryIndex(11)),
        Err(WalError::Missing(EntryIndex(11)))
    ));
    let replacement = Entry::seal(
        EntryIndex(11),
        Term(9),
        EntryKind::Noop,
        EntryIndex::ZERO,
        0,
        Bytes::new(),
        &wal.last_hash(),
    );
    wal.append(&replacement).unwrap();
    drop(wal);
    let (wal, recovery) = Wal::open(dir.path()).unwrap();
    assert_eq!(recovery.last_index, EntryIndex(11));
    assert_eq!(wal.read(EntryIndex(11)).unwrap(), replacement);
    assert_eq!(wal.read(EntryIndex(10)).unwrap(), entries[9]);
}

/// Proves appends out of order or not chained to the last entry are refused.
#[test]
fn unchained_appends_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 3, 1 << 20);
    let (mut wal, _) = Wal::open(dir.path()).unwrap();
    let skip = entry(5, &wal.last_hash());
    assert!(matches!(wal.append(&skip), Err(WalError::Unchained { .. })));
    assert_eq!(wal.last_index(), EntryIndex(3));
}

/// Proves compaction removes only whole segments covered by the index, keeps the rest readable
/// and chained across a reopen, and that a reset continues the log after a new base.
#[test]
fn compaction_and_reset() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill(dir.path(), 40, 2048);
    let (mut wal, _) = Wal::open_with(dir.path(), 2048).unwrap();
    let before = segments(dir.path()).len();
    let freed = wal.compact_through(EntryIndex(20)).unwrap();
    assert!(freed > 0 && segments(dir.path()).len() < before);
    let first = wal.first_index();
    assert!(
        first > EntryIndex(1) && first <= EntryIndex(21),
        "first kept index {first}"
    );
    for index in first.0..=40 {
        assert_eq!(
            wal.read(EntryIndex(index)).unwrap(),
            entries[index as usize - 1]
        );
    }
    assert!(matches!(wal.read(first.prev()), Err(WalError::Missing(_))));
    drop(wal);
    let (mut wal, recovery) = Wal::open_with(dir.path(), 2048).unwrap();
    assert_eq!(
        (wal.first_index(), recovery.last_index),
        (first, EntryIndex(40))
    );
    assert_eq!(wal.last_hash(), entries[39].header.hash);

    let base_hash = EntryHash([3; 32]);
    wal.reset_to(EntryIndex(50), base_hash).unwrap();
    assert_eq!(
        (wal.first_index(), wal.last_index(), wal.last_hash()),
        (EntryIndex(51), EntryIndex(50), base_hash)
    );
    let next = entry(51, &base_hash);
    wal.append(&next).unwrap();
    drop(wal);
    let (wal, _) = Wal::open_with(dir.path(), 2048).unwrap();
    assert_eq!(
        (wal.first_index(), wal.last_index()),
        (EntryIndex(51), EntryIndex(51))
    );
    assert_eq!(wal.read(EntryIndex(51)).unwrap(), next);
}

/// A tmpfs of a few pages mounted for one test, so that the file system really fills up
/// (ENOSPC). Mounting needs root (or CAP_SYS_ADMIN): the test is `#[ignore = "needs root"]`,
/// which `.ci/run` runs as root.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path, bytes: u64) -> SmallDisk {
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            mounted,
            "cannot mount a tmpfs at {}: this test needs root (run `cargo test -- --ignored` as \
             root)",
            path.display()
        );
        SmallDisk {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// Proves a WAL on a full file system refuses the append with a storage-full error, keeps
/// every entry written before it, and takes the same append once space returns; a reopen
/// then reads back every entry.
#[test]
#[ignore = "needs root: mounts a tmpfs"]
fn a_full_disk_refuses_the_append_and_takes_it_once_space_returns() {
    // Zeros written ahead that do not fit are skipped: the disk is as full either way.
    for ahead in [0, 64 * 1024] {
        full_disk_refuses_then_takes(ahead);
    }
}

fn full_disk_refuses_then_takes(ahead: u64) {
    let dir = tempfile::tempdir().unwrap();
    let _disk = SmallDisk::mount(dir.path(), 256 * 1024);
    let ballast = dir.path().join("ballast");
    fs::write(&ballast, vec![7u8; 64 * 1024]).unwrap();
    let wal_dir = dir.path().join("wal");
    let (mut wal, _) = Wal::open_with(&wal_dir, 16 * 1024).unwrap();
    wal.set_zero_ahead(ahead);
    let mut entries = Vec::new();
    let full = loop {
        let e = entry(entries.len() as u64 + 1, &wal.last_hash());
        match wal.append(&e) {
            Ok(()) => entries.push(e),
            Err(error) => break (e, error),
        }
        assert!(entries.len() < 100_000, "the disk never filled");
    };
    assert!(full.1.is_storage_full(), "{}", full.1);
    assert_eq!(wal.last_index(), EntryIndex(entries.len() as u64));
    fs::remove_file(&ballast).unwrap();
    wal.append(&full.0).unwrap();
    entries.push(full.0);
    drop(wal);
    let (wal, recovery) = Wal::open_with(&wal_dir, 16 * 1024).unwrap();
    assert_eq!(recovery.torn_tail_bytes, 0);
    assert_eq!(wal.last_index(), EntryIndex(entries.len() as u64));
    for e in &entries {
        assert_eq!(&wal.read(e.index()).unwrap(), e);
    }
}

/// Proves a repairing open takes a last record whose bytes are there but wrong (here its
/// magic) for damage that may have been acknowledged, reporting its index, while a record
/// cut short by the end of the file stays a torn write.
#[test]
fn a_repairing_open_tells_a_damaged_last_record_from_a_torn_one() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill(dir.path(), 12, 1 << 20);
    let path = segments(dir.path()).pop().unwrap();
    let original = fs::read(&path).unwrap();
    let last = original.len() - record_len(&entries[11]);

    let mut damaged = original.clone();
    damaged[last] ^= 0x01;
    fs::write(&path, &damaged).unwrap();
    let (wal, recovery) = Wal::open_repairing(dir.path(), 1 << 20).unwrap();
    let damage = recovery.damage.expect("damage, not a torn write");
    assert_eq!(damage.index, EntryIndex(12));
    assert_eq!(wal.last_index(), EntryIndex(11));
    drop(wal);

    fs::write(&path, &original[..original.len() - 3]).unwrap();
    let (wal, recovery) = Wal::open_repairing(dir.path(), 1 << 20).unwrap();
    assert_eq!(recovery.damage, None);
    assert_eq!(wal.last_index(), EntryIndex(11));
    assert!(recovery.torn_tail_bytes > 0);
}

/// Proves an intact record whose header this build cannot read (an entry kind a newer build
/// wrote: the kind field holds 99, the header checksum matches) refuses the open as written by
/// a newer build, naming the entry, in the middle of the log and at its end alike, and leaves
/// every byte as it was (it is not damage: nothing is cut, nothing is repaired).
#[test]
fn an_entry_of_a_newer_build_is_refused_not_cut() {
    let header_bytes = engine::internals::entry::ENTRY_HEADER_BYTES;
    for target in [4usize, 5] {
        let dir = tempfile::tempdir().unwrap();
        let entries = fill(dir.path(), 6, 1 << 20);
        let path = segments(dir.path()).remove(0);
        let mut bytes = fs::read(&path).unwrap();
        let start: usize = entries[..target].iter().map(record_len).sum();
        // The header: index (8 bytes), term (8), kind (a u32).
        let kind = start + 4 + 16;
        bytes[kind..kind + 4].copy_from_slice(&99u32.to_le_bytes());
        let crc = crc32fast::hash(&bytes[start + 4..start + 4 + header_bytes]);
        let crc_at = start + 4 + header_bytes;
        bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        fs::write(&path, &bytes).unwrap();
        match Wal::open(dir.path()) {
            Err(WalError::Newer { index, .. }) => {
                assert_eq!(index, entries[target].index())
            }
            Err(other) => panic!("entry {target}: unexpected error {other}"),
            Ok(_) => panic!("entry {target}: an unreadable entry was accepted"),
        }
        let error = Wal::open(dir.path()).err().unwrap().to_string();
        assert!(error.contains("written by a newer build"), "{error}");
        assert_eq!(fs::read(&path).unwrap(), bytes, "the log was changed");
    }
}

/// Appends entries 1..=count to a new log in `dir` that writes `ahead` bytes of zeros ahead
/// of its appends; returns them.
fn fill_ahead(dir: &Path, count: u64, segment_bytes: u64, ahead: u64) -> Vec<Entry> {
    let (mut wal, _) = Wal::open_with(dir, segment_bytes).unwrap();
    wal.set_zero_ahead(ahead);
    let mut entries = Vec::new();
    for index in 1..=count {
        let e = entry(index, &wal.last_hash());
        wal.append(&e).unwrap();
        entries.push(e);
    }
    entries
}

/// Proves zeros written ahead change nothing a reader sees: each segment holds the same
/// records as a log written without them, a closed segment is cut to its records, the zeros
/// after the last record are neither entries nor a torn tail (a reopen keeps them and appends
/// over them), and every entry reads back after reopens.
#[test]
fn zeros_written_ahead_stay_out_of_the_log() {
    let plain = tempfile::tempdir().unwrap();
    let ahead = tempfile::tempdir().unwrap();
    fill(plain.path(), 40, 2048);
    let mut entries = fill_ahead(ahead.path(), 40, 2048, 1000);
    let (plain_files, ahead_files) = (segments(plain.path()), segments(ahead.path()));
    assert!(ahead_files.len() > 3, "small segments roll over");
    assert_eq!(plain_files.len(), ahead_files.len());
    for (n, (p, a)) in plain_files.iter().zip(&ahead_files).enumerate() {
        let (p, a) = (fs::read(p).unwrap(), fs::read(a).unwrap());
        match n + 1 == ahead_files.len() {
            true => {
                assert!(a.len() > p.len(), "the last segment has zeros ahead");
                assert_eq!(&a[..p.len()], &p[..]);
                assert!(a[p.len()..].iter().all(|&b| b == 0));
            }
            false => assert_eq!(a, p, "closed segment {n} is cut to its records"),
        }
    }
    let last_len = fs::metadata(ahead_files.last().unwrap()).unwrap().len();
    let (mut wal, recovery) = Wal::open_repairing(ahead.path(), 2048).unwrap();
    assert_eq!((recovery.entries, recovery.torn_tail_bytes), (40, 0));
    assert_eq!(recovery.damage, None);
    let kept = fs::metadata(ahead_files.last().unwrap()).unwrap().len();
    assert_eq!(kept, last_len, "the zeros stay");
    wal.set_zero_ahead(1000);
    for index in 41..=45 {
        let e = entry(index, &wal.last_hash());
        wal.append(&e).unwrap();
        entries.push(e);
    }
    drop(wal);
    let (wal, recovery) = Wal::open(ahead.path()).unwrap();
    assert_eq!((recovery.entries, recovery.torn_tail_bytes), (45, 0));
    for e in &entries {
        assert_eq!(&wal.read(e.index()).unwrap(), e);
    }
}

/// Proves a log given prepared segments (files of zeros made ahead) starts each new segment
/// from one: no append grows a segment's file, a closed segment is cut to its records and
/// holds what a log without them writes, the file waiting under the prepared name is no
/// part of the log, and every entry reads back after a reopen. A leftover file of that name
/// (here not zeros) is replaced by the next preparation, and one of another size is refused.
#[test]
fn prepared_segments_take_the_growth_off_the_appends() {
    let (plain, dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fill(plain.path(), 40, 2048);
    let (mut wal, _) = Wal::open_with(dir.path(), 2048).unwrap();
    wal.set_zero_ahead(1000);
    let odd = prepare_segment(wal.storage(), dir.path(), 4096).unwrap();
    assert!(wal.offer_prepared(odd).is_some(), "another size is refused");
    let leftover = dir.path().join(PREPARED_SEGMENT_NAME);
    fs::write(&leftover, b"left by a crash").unwrap();
    let mut entries = Vec::new();
    for index in 1..=40 {
        if wal.wants_prepared() {
            let prepared = prepare_segment(wal.storage(), dir.path(), 2048).unwrap();
            assert_eq!(fs::read(&leftover).unwrap(), vec![0; 2048]);
            assert!(wal.offer_prepared(prepared).is_none());
        }
        let e = entry(index, &wal.last_hash());
        wal.append(&e).unwrap();
        entries.push(e);
        // Every segment began as a prepared file of 2048 bytes: none ever grew.
        let last = last_segment_len(dir.path());
        assert_eq!(
            last,
            Some(2048),
            "entry {index}: the segment is its prepared size"
        );
    }
    assert!(!wal.wants_prepared(), "the next segment is prepared");
    drop(wal);
    let (plain_files, files) = (segments(plain.path()), wal_segments(dir.path()));
    assert_eq!(plain_files.len(), files.len());
    for (p, f) in plain_files[..files.len() - 1].iter().zip(&files) {
        assert_eq!(
            fs::read(p).unwrap(),
            fs::read(f).unwrap(),
            "{}",
            f.display()
        );
    }
    let (wal, recovery) = Wal::open(dir.path()).unwrap();
    assert_eq!((recovery.entries, recovery.torn_tail_bytes), (40, 0));
    for e in &entries {
        assert_eq!(&wal.read(e.index()).unwrap(), e);
    }
}

/// Proves a log opened for writing removes a file of zeros left under the prepared name (a
/// crash while preparing), so that a log that never prepares (in memory) does not keep it,
/// and leaves one that holds anything else (not provably garbage); the log it opens is whole.
#[test]
fn a_leftover_prepared_file_is_removed_when_the_log_opens() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill(dir.path(), 5, 1 << 20);
    let leftover = dir.path().join(PREPARED_SEGMENT_NAME);
    fs::write(&leftover, b"not zeros").unwrap();
    drop(Wal::open(dir.path()).unwrap());
    assert_eq!(
        fs::read(&leftover).unwrap(),
        b"not zeros",
        "a file not of zeros stays"
    );
    fs::write(&leftover, vec![0; 4096]).unwrap();
    let (wal, recovery) = Wal::open(dir.path()).unwrap();
    assert_eq!(recovery.entries, 5);
    assert!(!leftover.exists(), "the zeros stay");
    assert_eq!(wal.read(EntryIndex(5)).unwrap(), entries[4]);
}

/// The log's segment files in `dir` (the prepared one left out), in order.
fn wal_segments(dir: &Path) -> Vec<PathBuf> {
    let mut found = segments(dir);
    found.retain(|path| path.extension().is_some_and(|e| e == "wal"));
    found
}

/// The length of the newest segment file in `dir`, if there is one.
fn last_segment_len(dir: &Path) -> Option<u64> {
    let last = wal_segments(dir).pop()?;
    Some(fs::metadata(last).unwrap().len())
}

/// Proves an append over zeros that a kill cut short is a torn write whatever part of its
/// payload reached the file, since the header is written last: a repairing open ends the log
/// before it with no damage reported, cuts it, and takes the entry again. A record whose
/// header reached the file but whose payload did not stays damage to a repairing open (it
/// may have been acknowledged).
#[test]
fn an_append_over_zeros_cut_short_is_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let entries = fill_ahead(dir.path(), 6, 1 << 20, 64 * 1024);
    let path = segments(dir.path()).pop().unwrap();
    let full = fs::read(&path).unwrap();
    let len = record_len(&entries[5]);
    let start = (0..5).map(|i| record_len(&entries[i])).sum::<usize>();
    let header = len - entries[5].payload.len();
    for written in (0..entries[5].payload.len()).step_by(13) {
        let mut torn = full.clone();
        torn[start..start + header].fill(0);
        torn[start + header + written..start + len].fill(0);
        fs::write(&path, &torn).unwrap();
        let (mut wal, recovery) = Wal::open_repairing(dir.path(), 1 << 20).unwrap();
        assert_eq!(recovery.damage, None, "{written} payload bytes written");
        assert_eq!(wal.last_index(), EntryIndex(5));
        wal.set_zero_ahead(64 * 1024);
        wal.append(&entries[5]).unwrap();
        drop(wal);
        let (wal, recovery) = Wal::open(dir.path()).unwrap();
        assert_eq!((recovery.entries, recovery.torn_tail_bytes), (6, 0));
        assert_eq!(wal.read(EntryIndex(6)).unwrap(), entries[5]);
    }
    let mut headed = full.clone();
    headed[start + header..start + len].fill(0);
    fs::write(&path, &headed).unwrap();
    let (_, recovery) = Wal::open_repairing(dir.path(), 1 << 20).unwrap();
    assert_eq!(recovery.damage.map(|d| d.index), Some(EntryIndex(6)));
}

/// Where each record starts in a one-segment log of `entries`, and where the last one ends.
fn record_starts(entries: &[Entry]) -> Vec<usize> {
    let mut starts = vec![0];
    for e in entries {
        starts.push(starts.last().unwrap() + record_len(e));
    }
    starts
}

/// Proves the torn-write rule stays narrow: a header cut short at a page boundary (the rest of
/// it zeros) is a torn write, to a strict open as to a repairing one, while a header of zeros
/// followed by a record whose own header still reads is damage to a repairing open, and a
/// closed segment that ends in zeros is corruption.
#[test]
fn only_a_header_never_written_makes_a_torn_write() {
    const PAGE: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let entries = fill_ahead(dir.path(), 200, 1 << 20, 64 * 1024);
    let path = segments(dir.path()).pop().unwrap();
    let full = fs::read(&path).unwrap();
    let starts = record_starts(&entries);
    let header = record_len(&entries[0]) - entries[0].payload.len();
    // A record whose header crosses a page boundary, cut there.
    let k = (0..entries.len())
        .find(|&k| !starts[k].is_multiple_of(PAGE) && starts[k] % PAGE + header > PAGE)
        .expect("a header across a page boundary");
    let mut torn = full[..starts[k + 1]].to_vec();
    torn[starts[k].next_multiple_of(PAGE)..starts[k] + header].fill(0);
    torn.resize(full.len(), 0);
    fs::write(&path, &torn).unwrap();
    let (wal, recovery) = Wal::open_repairing(dir.path(), 1 << 20).unwrap();
    assert_eq!(recovery.damage, None);
    assert_eq!(wal.last_index(), EntryIndex(k as u64));
    drop(wal);
    // A header of zeros with a readable header after it: damage, nothing taken as torn.
    let mut hidden = full[..starts[7]].to_vec();
    hidden[starts[5]..starts[5] + header].fill(0);
    hidden[starts[7] - 1] ^= 0x40;
    hidden.resize(full.len(), 0);
    fs::write(&path, &hidden).unwrap();
    let (_, recovery) = Wal::open_repairing(dir.path(), 1 << 20).unwrap();
    let damage = recovery.damage.expect("damage, not a torn write");
    assert_eq!(damage.index, EntryIndex(6));
    assert_eq!(damage.last.map(|(index, _)| index), Some(EntryIndex(7)));
    // The same torn write to a strict open.
    hidden[starts[6]..starts[7]].fill(0);
    fs::write(&path, &hidden).unwrap();
    let (wal, recovery) = Wal::open(dir.path()).unwrap();
    assert_eq!((wal.last_index(), recovery.damage), (EntryIndex(5), None));
    // Zeros after a closed segment's records.
    let dir = tempfile::tempdir().unwrap();
    fill_ahead(dir.path(), 40, 2048, 1000);
    let first = segments(dir.path()).remove(0);
    let mut closed = fs::read(&first).unwrap();
    closed.extend_from_slice(&[0; 512]);
    fs::write(&first, closed).unwrap();
    assert!(matches!(
        Wal::open(dir.path()),
        Err(WalError::Corruption { .. })
    ));
}
