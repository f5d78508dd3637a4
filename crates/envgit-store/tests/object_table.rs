//! The object table (`objects.table`): a store opened through it finds every object where
//! the journal put it, and a table that does not match the journal as it is (damaged, another
//! store's, ahead of a journal cut back, or from before gc rewrote the journal) is ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use envgit_store::{GcOptions, ScanConfig, StepDraft, Store, WorkTree};

/// Files with distinct contents: objects enough that a commit writes a table.
const FILES: usize = 1200;

fn write_files(root: &Path, prefix: &str, n: usize) {
    for i in 0..n {
        let dir = root.join(format!("{prefix}{}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), format!("{prefix} {i}\n")).unwrap();
    }
}

fn commit_snapshot(store: &mut Store, root: &Path) {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    let tree = wt.full_scan(store, None).unwrap().0;
    let mut g = store.begin_step("t").unwrap();
    store.commit(&mut g, StepDraft::default(), tree).unwrap();
}

/// Every object the store knows and where, as an ordered map (id in hex).
fn objects(store: &Store) -> BTreeMap<String, String> {
    store
        .packs()
        .unwrap()
        .index()
        .iter()
        .map(|(id, loc)| (id.hex(), format!("{loc:?}")))
        .collect()
}

fn table(store_dir: &Path) -> PathBuf {
    store_dir.join("objects.table")
}

/// A project of [`FILES`] files committed as one step, and its store's directory.
fn project(tmp: &Path, name: &str) -> (PathBuf, PathBuf) {
    let root = tmp.join(name);
    write_files(&root, name, FILES);
    let dir = tmp.join(format!("{name}.store"));
    let mut store = Store::create(&dir, &root).unwrap();
    commit_snapshot(&mut store, &root);
    (root, dir)
}

/// What the journal alone says: the store opened with no table there.
fn without_table(dir: &Path) -> BTreeMap<String, String> {
    let kept = std::fs::read(table(dir)).ok();
    let _ = std::fs::remove_file(table(dir));
    let from_journal = objects(&Store::open(dir).unwrap());
    if let Some(bytes) = kept {
        std::fs::write(table(dir), bytes).unwrap();
    }
    from_journal
}

#[test]
fn a_store_opened_through_its_table_finds_every_object_where_the_journal_put_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a");
    assert!(table(&dir).exists(), "no table after {FILES} objects");
    // Objects after the point the table covers come from the journal.
    write_files(&root, "more", 30);
    let mut store = Store::open(&dir).unwrap();
    commit_snapshot(&mut store, &root);
    let reopened = Store::open(&dir).unwrap();
    assert_eq!(objects(&reopened), without_table(&dir));
    assert_eq!(objects(&reopened).len(), reopened.object_count());
    assert!(envgit_store::fsck(&reopened, None).unwrap().is_clean());
}

#[test]
fn a_table_that_does_not_match_the_journal_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, a) = project(tmp.path(), "a");
    let (_, b) = project(tmp.path(), "b");
    let b_objects = without_table(&b);

    // Another store's table: its journal is another file.
    std::fs::copy(table(&a), table(&b)).unwrap();
    assert_eq!(objects(&Store::open(&b).unwrap()), b_objects);

    // A damaged table: one bit of the last entry's pack offset (an entry is the id, its
    // kind, then the pack and the offset), the checksum left as it was.
    let a_objects = without_table(&a);
    let mut bytes = std::fs::read(table(&a)).unwrap();
    let at = bytes.len() - 4 - 61 + 41;
    bytes[at] ^= 1;
    std::fs::write(table(&a), &bytes).unwrap();
    assert_eq!(objects(&Store::open(&a).unwrap()), a_objects);
}

/// The same journal file cut back to before the point the table covers (a table can only be
/// ahead of its journal by such a cut): the table is ignored, and the store is what the
/// journal holds.
#[test]
fn a_table_ahead_of_its_journal_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a");
    let journal = dir.join("journal");
    let first = std::fs::metadata(&journal).unwrap().len();
    let after_first = objects(&Store::open(&dir).unwrap());
    write_files(&root, "second", FILES);
    let mut store = Store::open(&dir).unwrap();
    commit_snapshot(&mut store, &root);
    drop(store);
    let covering_both = std::fs::read(table(&dir)).unwrap();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&journal).unwrap());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(first)
        .unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&journal).unwrap()),
        inode
    );
    assert_eq!(std::fs::read(table(&dir)).unwrap(), covering_both);
    assert_eq!(objects(&Store::open(&dir).unwrap()), after_first);
}

#[test]
fn gc_removes_the_table_of_the_journal_it_replaces() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a");
    let table_before = std::fs::read(table(&dir)).unwrap();
    for _ in 0..3 {
        write_files(&root, "churn", 20);
        let mut store = Store::open(&dir).unwrap();
        commit_snapshot(&mut store, &root);
        std::fs::remove_dir_all(root.join("churn0")).unwrap();
    }
    let mut store = Store::open(&dir).unwrap();
    envgit_store::gc(
        &mut store,
        &GcOptions {
            budget: 0,
            keep_recent: 1,
            purge: Vec::new(),
        },
    )
    .unwrap();
    assert!(
        std::fs::read(table(&dir)).ok().as_ref() != Some(&table_before),
        "the table of the replaced journal is still there"
    );
    let reopened = Store::open(&dir).unwrap();
    assert_eq!(objects(&reopened), without_table(&dir));
    assert!(envgit_store::fsck(&reopened, None).unwrap().is_clean());
}

/// Opening through the table skips the journal's older objects frames; fsck reads them, and
/// reports damage there as opening without a table does.
#[test]
fn fsck_reports_damage_in_the_objects_frames_the_table_covers() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a");
    write_files(&root, "more", 5);
    let mut store = Store::open(&dir).unwrap();
    commit_snapshot(&mut store, &root);
    drop(store);
    let journal = dir.join("journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    // Inside the first objects frame (the import's), well past its header.
    bytes[1000] ^= 0x40;
    std::fs::write(&journal, &bytes).unwrap();
    let store = Store::open(&dir).expect("opens through the table");
    let e = envgit_store::fsck(&store, None).unwrap_err().to_string();
    assert!(
        e.contains("journal") && e.contains("byte 0") && e.contains("damaged"),
        "{e}"
    );
    let _ = std::fs::remove_file(table(&dir));
    let e = Store::open(&dir)
        .err()
        .expect("damage reported")
        .to_string();
    assert!(e.contains("byte 0"), "{e}");
}

/// A long-lived process (an agent's supervisor) that wrote a new table looks objects up in
/// it from then on: its later commits do not write the table again.
#[test]
fn a_process_that_wrote_a_table_does_not_write_it_again_at_its_next_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, dir) = project(tmp.path(), "a");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let first = inode(&table(&dir));
    let mut store = Store::open(&dir).unwrap();
    write_files(&root, "second", FILES);
    commit_snapshot(&mut store, &root);
    let second = inode(&table(&dir));
    assert_ne!(second, first, "no new table after {FILES} more objects");
    for round in 0..3 {
        write_files(&root, &format!("small{round}"), 3);
        commit_snapshot(&mut store, &root);
        assert_eq!(
            inode(&table(&dir)),
            second,
            "written again at commit {round}"
        );
    }
    assert_eq!(objects(&store), without_table(&dir));
    assert_eq!(objects(&Store::open(&dir).unwrap()), without_table(&dir));
}

/// A table that passed its checks is not checked again at each open of this boot (a note
/// beside it says so), but damaged in place afterwards (its stamps move) it is checked again,
/// and ignored.
#[test]
fn a_table_damaged_after_it_was_checked_is_checked_again_and_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = project(tmp.path(), "a");
    let from_journal = without_table(&dir);
    let note = dir.join("objects.table.checked");
    let _ = std::fs::remove_file(&note);
    assert_eq!(objects(&Store::open(&dir).unwrap()), from_journal);
    assert!(note.exists(), "no note after the table's checks");
    // Taken on the note's word: the same objects.
    assert_eq!(objects(&Store::open(&dir).unwrap()), from_journal);

    let mut bytes = std::fs::read(table(&dir)).unwrap();
    let at = bytes.len() - 4 - 61 + 41;
    bytes[at] ^= 1;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(table(&dir))
        .unwrap();
    std::io::Write::write_all(&mut f, &bytes).unwrap();
    // Within one tick of the file clock a write can leave the stamps as they were; the
    // store never writes these files in place, so this damage moves the mtime itself.
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1))
        .unwrap();
    drop(f);
    assert_eq!(objects(&Store::open(&dir).unwrap()), from_journal);
}
