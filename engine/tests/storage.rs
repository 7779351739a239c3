//! The storage conformance suite: the real file system ([`Files`]) and the simulator's disk
//! ([`SimDisk`]) keep the same promises of [`Storage`], so that what the simulator proves of
//! the WAL, the hard state and the snapshot files over one holds over the other. Then what
//! only the simulated disk does: crashes that keep exactly what was synced, and faults.

#![cfg(feature = "sim")]

mod common;

use engine::internals::entry::{
    Entry, EntryHash, EntryKind, FragmentHeader, PayloadBuilder, RequestDigest,
};
use engine::internals::storage::{Access, Files, SimDisk, Storage, StorageFile};
use engine::internals::wal::{PREPARED_SEGMENT_NAME, Wal, prepare_segment};
use engine::rng::Rng;
use engine::{ClientId, EntryIndex, RequestNumber, Term};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Every promise of the interface, in one run over `storage` under the empty directory
/// `root`.
fn conformance<S: Storage>(storage: &S, root: &Path) {
    let dir = root.join("a/b");
    storage.create_dir_all(&dir).unwrap();
    storage.create_dir_all(&dir).unwrap();
    assert!(storage.is_dir(&dir) && storage.exists(&dir).unwrap());
    assert!(storage.list(&dir).unwrap().is_empty());
    files_read_and_write(storage, &dir);
    names_list_rename_remove(storage, &dir);
    durable_writes_replace_whole_files(storage, &dir);
    new_files_never_replace_old_ones(storage, &dir);
    let missing = root.join("missing");
    assert!(!storage.exists(&missing).unwrap() && !storage.is_dir(&missing));
    assert_eq!(
        storage.list(&missing).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        storage.read(&missing).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let kind = storage.open(&missing, Access::ReadOnly).unwrap_err().kind();
    assert_eq!(kind, ErrorKind::NotFound);
    let orphan = storage.create_new(&missing.join("file")).unwrap_err();
    assert_eq!(
        orphan.kind(),
        ErrorKind::NotFound,
        "no file outside a directory"
    );
}

fn files_read_and_write<S: Storage>(storage: &S, dir: &Path) {
    let path = dir.join("segment");
    let file = storage.create_new(&path).unwrap();
    let taken = storage.create_new(&path).unwrap_err().kind();
    assert_eq!(taken, ErrorKind::AlreadyExists);
    assert_eq!(file.size().unwrap(), 0);
    file.write_all_at(b"hello", 0).unwrap();
    file.write_all_at(b"world", 8).unwrap();
    assert_eq!(file.size().unwrap(), 13);
    assert_eq!(storage.read(&path).unwrap(), b"hello\0\0\0world");
    let mut buf = [0; 5];
    file.read_exact_at(&mut buf, 8).unwrap();
    assert_eq!(&buf, b"world");
    let past = file.read_exact_at(&mut buf, 10).unwrap_err().kind();
    assert_eq!(past, ErrorKind::UnexpectedEof);
    file.sync_data().unwrap();
    file.set_len(4).unwrap();
    file.set_len(6).unwrap();
    file.sync_all().unwrap();
    assert_eq!(storage.read(&path).unwrap(), b"hell\0\0");
    drop(file);
    let read_only = storage.open(&path, Access::ReadOnly).unwrap();
    assert!(
        read_only.write_all_at(b"x", 0).is_err(),
        "opened for reading"
    );
    let mut buf = [0; 4];
    read_only.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"hell");
    let writable = storage.open(&path, Access::ReadWrite).unwrap();
    writable.write_all_at(b"J", 0).unwrap();
    read_only.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"Jell", "one file, whatever handle reads it");
}

fn names_list_rename_remove<S: Storage>(storage: &S, dir: &Path) {
    let names = |storage: &S| -> Vec<PathBuf> {
        let mut names = storage.list(dir).unwrap();
        names.sort();
        names
    };
    storage.create_dir_all(&dir.join("sub")).unwrap();
    drop(storage.create_new(&dir.join("other")).unwrap());
    assert_eq!(names(storage), [dir.join("other"), dir.join("segment")]);
    storage
        .rename(&dir.join("other"), &dir.join("segment"))
        .unwrap();
    assert_eq!(names(storage), [dir.join("segment")], "a rename replaces");
    assert!(storage.read(&dir.join("segment")).unwrap().is_empty());
    storage.sync_dir(dir).unwrap();
    storage.remove_file(&dir.join("segment")).unwrap();
    let again = storage.remove_file(&dir.join("segment")).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::NotFound);
    assert!(names(storage).is_empty(), "directories are not listed");
}

fn durable_writes_replace_whole_files<S: Storage>(storage: &S, dir: &Path) {
    let path = dir.join("hard_state");
    storage.write_durably(&path, b"term 1").unwrap();
    storage.write_durably(&path, b"term 2, voted").unwrap();
    assert_eq!(storage.read(&path).unwrap(), b"term 2, voted");
    // A temporary file an interrupted write left is replaced, not appended to.
    let temporary = dir.join("hard_state.tmp");
    let left = storage.create_new(&temporary).unwrap();
    left.write_all_at(b"left by a crash, longer than the next", 0)
        .unwrap();
    storage.write_durably(&path, b"term 3").unwrap();
    assert_eq!(storage.read(&path).unwrap(), b"term 3");
    assert!(!storage.exists(&temporary).unwrap());
    storage.remove_file(&path).unwrap();
}

fn new_files_never_replace_old_ones<S: Storage>(storage: &S, dir: &Path) {
    let path = dir.join("cluster.toml");
    storage.write_new(&path, b"the first").unwrap();
    let taken = storage.write_new(&path, b"the second").unwrap_err();
    assert_eq!(taken.kind(), ErrorKind::AlreadyExists);
    assert_eq!(storage.read(&path).unwrap(), b"the first");
    assert!(
        !storage.exists(&dir.join("cluster.toml.tmp")).unwrap(),
        "the refused write leaves no temporary file"
    );
    let other = dir.join("other");
    let linked = storage.hard_link(&path, &other);
    linked.unwrap();
    assert_eq!(storage.read(&other).unwrap(), b"the first");
    let again = storage.hard_link(&other, &path).unwrap_err();
    assert_eq!(again.kind(), ErrorKind::AlreadyExists);
    let sub = dir.join("wal");
    storage.create_dir(&sub).unwrap();
    assert!(storage.is_dir(&sub));
    let twice = storage.create_dir(&sub).unwrap_err();
    assert_eq!(twice.kind(), ErrorKind::AlreadyExists);
    let orphan = storage.create_dir(&dir.join("no/parent")).unwrap_err();
    assert_eq!(orphan.kind(), ErrorKind::NotFound);
    for name in [&path, &other] {
        storage.remove_file(name).unwrap();
    }
}

/// Proves the real file system keeps the interface's promises.
#[test]
fn the_file_system_conforms() {
    let root = tempfile::tempdir().unwrap();
    conformance(&Files, root.path());
}

/// Proves the simulated disk keeps the same promises.
#[test]
fn the_simulated_disk_conforms() {
    conformance(&SimDisk::new(), Path::new("/disk"));
}

/// Proves a crash keeps everything synced, whatever the draw, and of the unsynced writes only
/// what could have reached the disk: a prefix, in order, the first lost write possibly torn
/// at page boundaries.
#[test]
fn a_crash_keeps_what_was_synced() {
    let mut rng = Rng::new(1);
    let (mut torn, mut lost) = (0, 0);
    for _ in 0..500 {
        let disk = SimDisk::new();
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        let file = disk.create_new(&dir.join("f")).unwrap();
        disk.sync_dir(dir).unwrap();
        file.write_all_at(&[1; 5000], 0).unwrap();
        file.sync_data().unwrap();
        file.write_all_at(&[2; 9000], 5000).unwrap();
        file.write_all_at(&[3; 100], 14000).unwrap();
        let crash = disk.crash(&mut rng);
        assert!(
            file.size().is_err(),
            "a handle from before the crash is dead"
        );
        let data = disk.read(&dir.join("f")).unwrap();
        assert_eq!(&data[..5000], &[1; 5000][..], "synced bytes survive");
        check_prefix(&data[5000..]);
        torn += crash.torn;
        lost += crash.lost;
    }
    assert!(
        torn > 50 && lost > 100,
        "the draws tear and lose writes: {torn} {lost}"
    );
}

/// After the synced part, the 9,000 bytes of 2s and then the 100 bytes of 3s: the 3s only
/// when all the 2s made it, and the 2s in whole pages (a page is 4,096 bytes of the file).
fn check_prefix(rest: &[u8]) {
    if rest.len() > 9000 {
        assert!(
            rest[..9000].iter().all(|&b| b == 2),
            "a later write only after the earlier"
        );
        return;
    }
    // Pages of the file end at 8,192 and 12,288: 3,192 and 7,288 bytes into the 2s.
    let bounds = [0, 3192, 7288, 9000];
    for (page, span) in bounds.windows(2).enumerate() {
        let bytes = &rest[span[0].min(rest.len())..span[1].min(rest.len())];
        let Some(&first) = bytes.first() else {
            continue;
        };
        let whole = bytes.iter().all(|&b| b == first);
        assert!(
            whole && (first == 0 || first == 2),
            "page {page}: {bytes:?}"
        );
    }
}

/// Proves a name is durable only once its directory is synced: a file created and written,
/// synced but not its directory, is gone after a crash; a removal not synced is undone.
#[test]
fn names_need_a_directory_sync() {
    let disk = SimDisk::new();
    let dir = Path::new("/d");
    disk.create_dir_all(dir).unwrap();
    let kept = disk.create_new(&dir.join("kept")).unwrap();
    kept.write_all_at(b"k", 0).unwrap();
    kept.sync_all().unwrap();
    disk.sync_dir(dir).unwrap();
    let new = disk.create_new(&dir.join("new")).unwrap();
    new.write_all_at(b"n", 0).unwrap();
    new.sync_all().unwrap();
    disk.remove_file(&dir.join("kept")).unwrap();
    let crash = disk.crash(&mut Rng::new(7));
    assert_eq!(crash.names_undone, 2);
    assert_eq!(disk.list(dir).unwrap(), [dir.join("kept")]);
    assert_eq!(disk.read(&dir.join("kept")).unwrap(), b"k");
}

/// Proves the faults the simulator draws: a failed sync makes nothing durable, a full disk
/// refuses to grow a file but lets it be overwritten, and a bit flipped at rest is read back
/// and kept by a crash.
#[test]
fn faults_on_demand() {
    let disk = SimDisk::new();
    let dir = Path::new("/d");
    disk.create_dir_all(dir).unwrap();
    let path = dir.join("f");
    let file = disk.create_new(&path).unwrap();
    disk.sync_dir(dir).unwrap();
    file.write_all_at(b"abcd", 0).unwrap();
    disk.fail_syncs(1);
    assert!(file.sync_data().is_err());
    assert_eq!(
        disk.unsynced_bytes(),
        4,
        "a failed sync made nothing durable"
    );
    file.sync_data().unwrap();
    disk.set_full(true);
    assert_eq!(
        file.write_all_at(b"e", 4).unwrap_err().kind(),
        ErrorKind::StorageFull
    );
    file.write_all_at(b"A", 0).unwrap();
    file.sync_data().unwrap();
    disk.set_full(false);
    assert!(disk.flip_bit(&path, 1, 0));
    assert!(!disk.flip_bit(&path, 4, 0), "no byte there");
    disk.crash(&mut Rng::new(3));
    assert_eq!(disk.read(&path).unwrap(), b"Accd");
    assert_eq!(disk.files_under(Path::new("/")), [(path, 4)]);
}

/// Proves a log that finds the disk full gives back the room of the prepared segment it holds
/// (its zeros only): the file is removed, and the same append succeeds once the disk has
/// room, the log making its next segment itself.
#[test]
fn a_full_disk_takes_back_the_prepared_segment() {
    let disk = SimDisk::new();
    let dir = Path::new("/node/wal");
    let (mut wal, _) = Wal::open_in(disk.clone(), dir, TEST_SEGMENT_BYTES).unwrap();
    wal.set_zero_ahead(1024);
    let mut prev = EntryHash::default();
    let first = entry(1, &prev, 100);
    wal.append(&first).unwrap();
    prev = first.header.hash;
    let prepared = prepare_segment(&disk, dir, TEST_SEGMENT_BYTES).unwrap();
    assert!(wal.offer_prepared(prepared).is_none());
    let waiting = dir.join(PREPARED_SEGMENT_NAME);
    assert!(disk.exists(&waiting).unwrap());
    disk.set_full(true);
    let second = entry(2, &prev, 3000);
    let error = wal.append(&second).unwrap_err();
    assert!(error.is_storage_full(), "{error}");
    assert!(
        !disk.exists(&waiting).unwrap(),
        "the prepared room is given back"
    );
    assert!(wal.wants_prepared(), "the log holds none now");
    disk.set_full(false);
    wal.append(&second).unwrap();
    assert_eq!(wal.last_index(), EntryIndex(2));
    assert_eq!(wal.read(EntryIndex(2)).unwrap(), second);
}

/// An entry of about `bytes` bytes of commands, chained to `prev`.
fn entry(index: u64, prev: &EntryHash, bytes: usize) -> Entry {
    let commands: Vec<u8> = (0..bytes).map(|i| (i as u64 * index + 1) as u8).collect();
    let mut payload = PayloadBuilder::new(index);
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
    let term = Term(1 + index / 8);
    let kind = EntryKind::Commands;
    Entry::seal(
        EntryIndex(index),
        term,
        kind,
        EntryIndex::ZERO,
        count,
        payload,
        prev,
    )
}

/// Segments small enough that a few entries roll them over.
const TEST_SEGMENT_BYTES: u64 = 16 * 1024;

/// Proves the product's WAL, over a disk that crashes, loses and tears unsynced writes at
/// page granularity, always reopens to a log that holds every synced entry, byte for byte,
/// and only entries that were written; damage it reports lies past the synced entries: with and without zeros written ahead,
/// with and without prepared segments, across segment roll-overs and truncations, over several
/// crashes of one disk.
#[test]
fn the_wal_on_a_crashing_disk_keeps_every_synced_entry() {
    let dir = Path::new("/node/wal");
    let (mut torn_tails, mut damaged, mut prepared) = (0, 0, 0);
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let disk = SimDisk::new();
        let mut wal = Wal::open_in(disk.clone(), dir, TEST_SEGMENT_BYTES)
            .unwrap()
            .0;
        let zeros = rng.chance(1, 2);
        let mut written: Vec<Entry> = Vec::new();
        for round in 0..4 {
            if zeros {
                wal.set_zero_ahead(8192);
            }
            let synced = write_some(&mut wal, &mut written, &mut rng, &mut prepared);
            drop(wal);
            disk.crash(&mut rng);
            let (mut reopened, recovery) =
                Wal::open_repairing_in(disk.clone(), dir, TEST_SEGMENT_BYTES).unwrap();
            let context = format!("seed {seed} round {round}: {recovery:?}");
            if let Some(damage) = &recovery.damage {
                // A torn record whose header holds looks like an acknowledged one gone bad:
                // the node repairs it from the leader. Never a synced one.
                assert!(damage.index.0 as usize > synced, "{context}");
                reopened.cut_damage().unwrap();
                damaged += 1;
            }
            let last = reopened.last_index().0 as usize;
            assert!(last >= synced && last <= written.len(), "{context}");
            for (at, expected) in written[..last].iter().enumerate() {
                let read = reopened.read(EntryIndex(at as u64 + 1)).unwrap();
                assert_eq!(&read, expected, "{context}");
            }
            torn_tails += u64::from(recovery.torn_tail_bytes > 0);
            written.truncate(last);
            wal = reopened;
        }
    }
    assert!(torn_tails > 100, "crashes tore the tail {torn_tails} times");
    assert!(damaged > 0, "some torn records keep their header");
    assert!(
        prepared > 100,
        "segments started from a prepared file {prepared} times"
    );
}

/// Writes up to 30 entries of up to 6,000 bytes, syncing now and then and truncating once in
/// a while; returns how many entries are durable.
fn write_some(
    wal: &mut Wal<SimDisk>,
    written: &mut Vec<Entry>,
    rng: &mut Rng,
    prepared: &mut u64,
) -> usize {
    let mut synced = written.len();
    for _ in 0..rng.below(30) {
        // A log that writes zeros ahead takes the next segment from a preparer when one is
        // ready (a node's thread makes it meanwhile; a crash may fall before or after).
        if wal.wants_prepared() && rng.chance(1, 3) {
            let storage = wal.storage().clone();
            let bytes = wal.segment_bytes_max();
            let segment = prepare_segment(&storage, wal.dir(), bytes).unwrap();
            assert!(
                wal.offer_prepared(segment).is_none(),
                "a wanted segment is taken"
            );
        }
        let index = written.len() as u64 + 1;
        let prev = written
            .last()
            .map_or(EntryHash::default(), |e| e.header.hash);
        let entry = entry(index, &prev, rng.below(6000) as usize + 1);
        let waiting = wal.dir().join(PREPARED_SEGMENT_NAME);
        let held = wal.storage().exists(&waiting).unwrap();
        wal.write(&entry).unwrap();
        // The write started a segment from the prepared file: renamed, so gone.
        *prepared += u64::from(held && !wal.storage().exists(&waiting).unwrap());
        written.push(entry);
        if rng.chance(1, 3) {
            wal.sync().unwrap();
            synced = written.len();
        }
        if rng.chance(1, 20) && written.len() > 2 {
            let from = written.len() as u64 - rng.below(2);
            wal.truncate_from(EntryIndex(from)).unwrap();
            written.truncate(from as usize - 1);
            synced = synced.min(written.len());
        }
    }
    synced
}

/// Proves a node rebuilt after its hard state was lost starts at the term its old log had
/// reached (here 3, its last entry's), with its votes lost and a repair obligation for that
/// log: at term 0 it would take appends of a leader of an older term and acknowledge them, a
/// majority for entries a later leader had replaced with committed ones (simulator seed
/// 122209, I4). The term counts the entries readable beyond damage in that log too (here the
/// log is cut at entry 10, of term 2, and entries up to 20, of term 3, lie beyond it): seed
/// 165093 rebuilt a node at the term before the damage, which then acknowledged appends of a
/// term below the one whose committed entries it had acknowledged. A hard state missing beside
/// the log is lost as much as a damaged one: its vote went with it.
#[test]
fn a_rebuild_after_a_lost_hard_state_starts_at_its_logs_last_term() {
    let cases = [(None, true), (Some(EntryIndex(10)), true), (None, false)];
    for (damaged, hard_state_kept) in cases {
        let disk = SimDisk::new();
        let dir = Path::new("/data");
        disk.create_dir_all(dir).unwrap();
        write_log_damaging(&disk, &dir.join("wal"), 20, damaged);
        if hard_state_kept {
            disk.write_durably(&dir.join("hard_state"), b"not a hard state")
                .unwrap();
        }
        let hard = rebuilt_hard_state(&disk, dir);
        let case = format!("{damaged:?}, hard state kept damaged: {hard_state_kept}");
        assert_eq!(hard.term, Term(3), "{case}: {hard:?}");
        assert_eq!(
            hard.votes_lost,
            Some(engine::internals::core::LostVotes::Unknown),
            "{case}"
        );
        assert_eq!(hard.repair.map(|r| r.index), Some(EntryIndex(20)), "{case}");
    }
}

/// Writes entries 1 to `last` of [`entry`] (term `1 + index / 8`) to a WAL in `dir`, then, if
/// asked, flips a bit inside entry `damaged`'s record.
fn write_log_damaging(disk: &SimDisk, dir: &Path, last: u64, damaged: Option<EntryIndex>) {
    let (mut wal, _) = Wal::open_in(disk.clone(), dir, TEST_SEGMENT_BYTES).unwrap();
    let mut prev = EntryHash::default();
    let mut record_at = None;
    for index in 1..=last {
        let before = segment_bytes(disk, dir);
        let e = entry(index, &prev, 100);
        wal.append(&e).unwrap();
        prev = e.header.hash;
        if damaged == Some(EntryIndex(index)) {
            let after = segment_bytes(disk, dir);
            let first = (0..after.len()).find(|&i| before.get(i) != after.get(i));
            record_at = first.map(|offset| offset as u64 + 24);
        }
    }
    assert_eq!(wal.last_term(), Term(1 + last / 8));
    drop(wal);
    if let Some(offset) = record_at {
        let segments = disk.list(dir).unwrap();
        assert_eq!(segments.len(), 1, "one segment holds them all");
        assert!(disk.flip_bit(&segments[0], offset, 3));
    }
}

/// The bytes of the one segment in `dir` (none before the first append).
fn segment_bytes(disk: &SimDisk, dir: &Path) -> Vec<u8> {
    let segments = disk.list(dir).unwrap_or_default();
    segments
        .first()
        .map_or_else(Vec::new, |path| disk.read(path).unwrap())
}

/// What the tests' starts recover with: a small state, the tests' segment size, no owner to
/// check, the operator's rebuild when `rebuild_from_leader`.
fn start_options(rebuild_from_leader: bool) -> engine::node::recovery::RecoveryOptions {
    use engine::apply::{SESSION_RETENTION_S_DEFAULT, SESSIONS_MAX_DEFAULT};
    engine::node::recovery::RecoveryOptions {
        capacity_bytes: 16 << 20,
        sessions_max: SESSIONS_MAX_DEFAULT,
        session_retention_s: SESSION_RETENTION_S_DEFAULT,
        wal_segment_bytes: TEST_SEGMENT_BYTES,
        owner: None,
        rebuild_from_leader,
        keep_outcomes_after: None,
    }
}

/// Starts the node in `dir` with the operator's rebuild and returns its hard state; it starts
/// with an empty log.
fn rebuilt_hard_state(disk: &SimDisk, dir: &Path) -> engine::internals::core::HardState {
    use engine::node::recovery::recover_on;
    let options = start_options(true);
    let started = recover_on(disk, dir, common::Ledger, &options, None, |_| {}).unwrap();
    assert_eq!(started.wal.last_index(), EntryIndex(0), "it starts empty");
    started.core.hard_state
}

/// A disk holding `old` (when given) durably at `path`, its process stopped after `steps`
/// changes.
fn disk_stopping_after(steps: u64, path: &Path, old: Option<&[u8]>) -> SimDisk {
    let disk = SimDisk::new();
    disk.create_dir_all(path.parent().unwrap()).unwrap();
    if let Some(old) = old {
        disk.write_durably(path, old).unwrap();
    }
    disk.stop_after(steps);
    disk
}

/// Proves a whole-file write (every operator file, the hard state, the identity, the mode)
/// stopped at any step and followed by a crash, whatever the crash keeps, leaves the old file
/// or the new one, never a mix, and the new one once the write returned.
#[test]
fn a_crash_at_any_step_of_a_durable_write_leaves_the_old_file_or_the_new() {
    let path = Path::new("/d/identity");
    let new = vec![7u8; 3 * 4096 + 100];
    for draw in 0..8 {
        for steps in 0.. {
            let disk = disk_stopping_after(steps, path, Some(b"the old identity"));
            let written = disk.write_durably(path, &new);
            disk.crash(&mut Rng::new(steps * 8 + draw));
            let read = disk.read(path).unwrap();
            assert!(
                read == new || read == b"the old identity",
                "stopped after {steps} steps: a mix of {} bytes",
                read.len()
            );
            if written.is_ok() {
                assert_eq!(read, new, "a write that returned is durable");
                break;
            }
        }
    }
}

/// Proves a new file's write (a cluster file, a client file, a backup) stopped at any step
/// and followed by a crash leaves no file or the whole one, and never replaces one that was
/// there.
#[test]
fn a_crash_at_any_step_of_a_new_files_write_leaves_nothing_or_the_whole_file() {
    let path = Path::new("/d/cluster.toml");
    let new = vec![3u8; 5000];
    for draw in 0..8 {
        for steps in 0.. {
            let disk = disk_stopping_after(steps, path, None);
            let written = disk.write_new(path, &new);
            disk.crash(&mut Rng::new(steps * 8 + draw));
            match disk.read(path) {
                Ok(read) => assert_eq!(read, new, "stopped after {steps} steps"),
                Err(error) => {
                    assert_eq!(error.kind(), ErrorKind::NotFound);
                    assert!(written.is_err(), "a write that returned is durable");
                }
            }
            if written.is_ok() {
                break;
            }
        }
        let disk = disk_stopping_after(u64::MAX, path, Some(b"an earlier backup"));
        assert!(disk.write_new(path, &new).is_err());
        disk.crash(&mut Rng::new(draw));
        assert_eq!(disk.read(path).unwrap(), b"an earlier backup");
    }
}

/// Proves the record of known members round-trips over the simulated disk, a damaged one is
/// reported and left in place, and the product's write stopped at any step and followed by
/// a crash leaves the old record or the new one, whole: never a torn one.
#[test]
fn the_record_of_known_members_survives_a_crash_old_or_new() {
    use engine::internals::core::KnownMembers;
    use engine::internals::storage::members_file::{
        MEMBERS_FILE, MembersFileError, read_known_members_on, write_known_members_on,
    };
    let old = KnownMembers::new(Term(0), [(engine::NodeId(1), Term(3))]);
    let new = KnownMembers::new(Term(0), (1..=9).map(|n| (engine::NodeId(n), Term(20))));
    let dir = Path::new("/data");
    let mut rng = Rng::new(11);
    let (mut olds, mut news) = (0, 0);
    for steps in 0.. {
        let disk = SimDisk::new();
        disk.create_dir_all(dir).unwrap();
        write_known_members_on(&disk, dir, &old).unwrap();
        disk.stop_after(steps);
        let written = write_known_members_on(&disk, dir, &new);
        disk.crash(&mut rng);
        let read = read_known_members_on(&disk, dir)
            .unwrap()
            .expect("a record");
        assert!(
            read == old || read == new,
            "stopped after {steps} steps: {read:?}"
        );
        olds += usize::from(read == old);
        news += usize::from(read == new);
        if written.is_ok() {
            assert_eq!(read, new, "a write that returned is durable");
            break;
        }
    }
    assert!(olds > 0 && news > 0, "both outcomes drawn: {olds} {news}");
    // The product's own write, its fsync failing: the old record, after a crash.
    let disk = SimDisk::new();
    disk.create_dir_all(dir).unwrap();
    write_known_members_on(&disk, dir, &old).unwrap();
    disk.fail_syncs(1);
    assert!(write_known_members_on(&disk, dir, &new).is_err());
    disk.fail_syncs(0);
    disk.crash(&mut rng);
    assert_eq!(read_known_members_on(&disk, dir).unwrap(), Some(old));
    let disk = SimDisk::new();
    disk.create_dir_all(dir).unwrap();
    write_known_members_on(&disk, dir, &new).unwrap();
    let path = dir.join(MEMBERS_FILE);
    let before = disk.read(&path).unwrap();
    assert!(disk.flip_bit(&path, before.len() as u64 - 1, 2));
    let damaged = read_known_members_on(&disk, dir).unwrap_err();
    assert!(
        matches!(damaged, MembersFileError::Damaged { .. }),
        "{damaged}"
    );
    assert!(
        disk.exists(&path).unwrap(),
        "a damaged record is not deleted"
    );
}

/// Proves a start whose record of known members cannot be read (here a directory stands at
/// its name) is refused with the data directory as it was: the record is read before the
/// plan carries anything out (a first start would otherwise make the WAL's directory).
#[test]
fn an_unreadable_record_of_known_members_refuses_the_start_before_any_write() {
    use engine::internals::storage::members_file::MEMBERS_FILE;
    use engine::node::NodeError;
    use engine::node::recovery::recover_on;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    std::fs::create_dir(dir.join(MEMBERS_FILE)).unwrap();
    let options = start_options(false);
    let started = recover_on(&Files, dir, common::Ledger, &options, None, |_| {});
    let Err(NodeError::Refused(refusal)) = started else {
        panic!("the start is refused");
    };
    assert!(refusal.to_string().contains(MEMBERS_FILE), "{refusal}");
    let left: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|item| item.unwrap().path())
        .collect();
    assert_eq!(left, [dir.join(MEMBERS_FILE)], "nothing written");
}
