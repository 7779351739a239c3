//! Bytes as WAL segment files, then the recovery scans a restarting node runs: the strict open,
//! the repairing open with its cut, and a strict reopen after the cut, which must find the log
//! the repair left; every entry recovered must read back. Ok or a clear error, never a panic.
//!
//! Mode byte, modulo 4: 0 writes the data as the segment of entry 1, 1 as the segment of entry
//! 5 (a log compacted behind a snapshot); 2 and 3 build a real log with `Wal::append` (data[0]
//! gives the number of entries, data[2..] their payload sizes, and what follows is damage:
//! 3-byte ops of offset and XOR over the segments end to end), and 3 also cuts the last
//! segment short (at data[1]/256 of its length). A built log must never read back an entry
//! other than the one written at that index.

#![no_main]

use bytes::Bytes;
use engine::internals::entry::{Entry, EntryKind};
use engine::internals::wal::{WAL_SEGMENT_BYTES_MIN, Wal};
use engine::{EntryIndex, Term};
use engine_fuzz::{damage, mode, scratch_dir};
use libfuzzer_sys::fuzz_target;
use std::fs;
use std::path::{Path, PathBuf};

/// Most entries a built log holds.
const ENTRIES_MAX: usize = 24;

fuzz_target!(|input: &[u8]| {
    let Some((mode, data)) = mode(input) else {
        return;
    };
    let dir = scratch_dir();
    let wal_dir = dir.path().join("wal");
    let written = match mode % 4 {
        0 | 1 => {
            fs::create_dir_all(&wal_dir).unwrap();
            let first = if mode % 4 == 0 { 1 } else { 5 };
            fs::write(wal_dir.join(format!("{first:020}.wal")), data).unwrap();
            Vec::new()
        }
        _ => build(&wal_dir, data, mode % 4 == 3),
    };
    recover(&wal_dir, &written);
});

/// Writes a log of entries shaped by `data` with the real WAL, then damages its files as
/// `data` says; returns the entries written.
fn build(dir: &Path, data: &[u8], cut: bool) -> Vec<Entry> {
    let count = data.first().map_or(1, |&b| 1 + b as usize % ENTRIES_MAX);
    let cut_at = data.get(1).copied().unwrap_or(0);
    let sizes = data.get(2..).unwrap_or(&[]);
    let (mut wal, _) = Wal::open_with(dir, WAL_SEGMENT_BYTES_MIN).unwrap();
    let mut written = Vec::with_capacity(count);
    for i in 0..count {
        let size = sizes.get(i).map_or(0, |&b| b as usize * 4);
        let payload: Vec<u8> = (0..size).map(|b| (b * 7 + i) as u8).collect();
        let index = EntryIndex(i as u64 + 1);
        let entry = Entry::seal(
            index,
            Term(1 + i as u64 / 5),
            EntryKind::Commands,
            index.prev(),
            1,
            Bytes::from(payload),
            &wal.last_hash(),
        );
        wal.append(&entry).unwrap();
        written.push(entry);
    }
    drop(wal);
    let ops = sizes.get(count..).unwrap_or(&[]);
    let files = segments(dir);
    let mut all: Vec<u8> = files.iter().flat_map(|p| fs::read(p).unwrap()).collect();
    damage(&mut all, ops);
    let mut at = 0;
    for path in &files {
        let bytes = fs::metadata(path).unwrap().len() as usize;
        fs::write(path, &all[at..at + bytes]).unwrap();
        at += bytes;
    }
    if cut {
        let last = files.last().expect("at least one segment");
        let bytes = fs::metadata(last).unwrap().len();
        let file = fs::OpenOptions::new().write(true).open(last).unwrap();
        file.set_len(bytes * cut_at as u64 / 256).unwrap();
    }
    written
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    paths
}

/// The scans of a restart, with what each must find.
fn recover(dir: &Path, written: &[Entry]) {
    let strict = Wal::open_with(dir, WAL_SEGMENT_BYTES_MIN).map(|(wal, _)| wal.last_index());
    let (mut wal, recovery) = match Wal::open_repairing(dir, WAL_SEGMENT_BYTES_MIN) {
        Ok(opened) => opened,
        Err(_) => return,
    };
    assert_eq!(recovery.last_index, wal.last_index());
    if let Ok(last) = strict {
        assert_eq!(recovery.damage, None, "a strict open found no damage");
        assert_eq!(last, wal.last_index(), "both scans find the same log");
    }
    let Ok(()) = wal.cut_damage() else {
        return;
    };
    let repaired = wal.last_index();
    drop(wal);
    let (wal, again) = Wal::open_with(dir, WAL_SEGMENT_BYTES_MIN)
        .expect("a strict open after the repair's cut finds no damage");
    assert_eq!(again.last_index, repaired, "the cut log reopens as left");
    for index in wal.first_index().0..=wal.last_index().0 {
        let entry = wal
            .read(EntryIndex(index))
            .expect("a recovered entry reads back");
        assert_eq!(entry.index(), EntryIndex(index));
        if let Some(original) = written.get(index as usize - 1) {
            assert_eq!(&entry, original, "entry {index} is the one written");
        }
    }
}
