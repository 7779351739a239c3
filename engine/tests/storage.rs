//! The storage conformance suite: the real file system ([`Files`]) and the simulator's disk
//! ([`SimDisk`]) keep the same promises of [`Storage`], so that what the simulator proves of
//! the WAL, the hard state and the snapshot files over one holds over the other. Then what
//! only the simulated disk does: crashes that keep exactly what was synced, and faults.

#![cfg(feature = "sim")]

use engine::internals::storage::{Access, Files, SimDisk, Storage, StorageFile};
use engine::rng::Rng;
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
    assert_eq!(file.len().unwrap(), 0);
    file.write_all_at(b"hello", 0).unwrap();
    file.write_all_at(b"world", 8).unwrap();
    assert_eq!(file.len().unwrap(), 13);
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
            file.len().is_err(),
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
