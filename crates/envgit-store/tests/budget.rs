//! The store's budget at step time: new content that would take the store past
//! `snapshot.budget` is recorded as `over_budget` markers, never written; content the store
//! already has is captured whatever the budget; a file left out is tried again once there is
//! room, and is not reread while nothing changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use envgit_store::{
    BudgetLimit, EntryKind, MarkerReason, ScanConfig, StepDraft, Store, WorkTree, fsck,
};

#[path = "support/bytes.rs"]
mod bytes;
use bytes::noise;

fn config(budget: u64) -> ScanConfig {
    ScanConfig::default().with_budget(Some(budget))
}

fn commit(store: &mut Store, tree: envgit_store::ObjectId) {
    let mut g = store.begin_step("t").unwrap();
    store.commit(&mut g, StepDraft::default(), tree).unwrap();
}

fn kind_of(store: &Store, tree: &envgit_store::ObjectId, name: &str) -> EntryKind {
    store
        .read_tree(tree)
        .unwrap()
        .get(name.as_bytes())
        .unwrap()
        .kind
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.txt"), "small").unwrap();
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    (tmp, root, store)
}

fn write_big(root: &Path, n: usize, each: usize) {
    for i in 0..n {
        std::fs::write(root.join(format!("big{i}.bin")), noise(i as u64 + 7, each)).unwrap();
    }
}

#[test]
fn new_content_over_the_budget_becomes_markers_and_the_store_stays_under_it() {
    let (_t, root, mut store) = setup();
    let budget = 2 << 20;
    let mut wt = WorkTree::new(&root, config(budget), None).unwrap();
    let (t1, r1) = wt.full_scan(&store, None).unwrap();
    assert!(r1.over_budget.is_empty());
    commit(&mut store, t1);
    // 10 MiB of incompressible data in five files, against a 2 MiB budget.
    write_big(&root, 5, 2 << 20);
    let (t2, r2) = wt.full_scan(&store, None).unwrap();
    commit(&mut store, t2);
    let left_out: Vec<&str> = r2.over_budget.iter().map(|(p, _)| p.as_str()).collect();
    assert!(
        left_out.len() >= 4,
        "at most one 2 MiB file fits a 2 MiB budget: {left_out:?}"
    );
    assert!(r2.over_budget.iter().all(|(_, size)| *size == 2 << 20));
    assert!(matches!(
        r2.budget_limit,
        Some(BudgetLimit::Budget { budget: b, .. }) if b == budget
    ));
    for p in &left_out {
        assert_eq!(
            kind_of(&store, &t2, p),
            EntryKind::Marker(MarkerReason::OverBudget)
        );
    }
    let used = store.disk_usage().unwrap();
    assert!(
        used <= budget + (64 << 10),
        "the store holds {used} bytes against a budget of {budget}"
    );
    assert!(fsck(&store, None).unwrap().is_clean());

    // Unchanged and still no room: not read again.
    let (t3, r3) = wt.full_scan(&store, None).unwrap();
    assert_eq!(t3, t2);
    // (Only files captured within the racy-timestamp margin are read again: at most the big
    // file that fit and small.txt.)
    assert!(r3.hashed <= 2, "files left out were read again: {r3:?}");
    assert_eq!(r3.over_budget.len(), left_out.len());

    // Room again (a bigger budget): captured at the next scan.
    let mut wt = WorkTree::new(&root, config(64 << 20), None).unwrap();
    let (t4, r4) = wt.full_scan(&store, None).unwrap();
    assert!(r4.over_budget.is_empty());
    for p in &left_out {
        assert_eq!(kind_of(&store, &t4, p), EntryKind::File);
    }
    commit(&mut store, t4);
    assert!(fsck(&store, None).unwrap().is_clean());
}

#[test]
fn content_the_store_has_is_captured_whatever_the_budget() {
    let (_t, root, mut store) = setup();
    write_big(&root, 2, 3 << 20);
    std::fs::write(root.join("copy-small.txt"), noise(99, 100_000)).unwrap();
    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    let (t1, _) = wt.full_scan(&store, None).unwrap();
    commit(&mut store, t1);
    // Copies of stored content (what a rewind writes back) under a budget already used up.
    std::fs::copy(root.join("big0.bin"), root.join("again.bin")).unwrap();
    std::fs::copy(root.join("copy-small.txt"), root.join("again-small.txt")).unwrap();
    std::fs::write(root.join("new.bin"), noise(1234, 300_000)).unwrap();
    let mut wt = WorkTree::new(&root, config(1 << 20), None).unwrap();
    let before = store.disk_usage().unwrap();
    let (t2, r2) = wt.full_scan(&store, None).unwrap();
    assert_eq!(kind_of(&store, &t2, "again.bin"), EntryKind::File);
    assert_eq!(kind_of(&store, &t2, "again-small.txt"), EntryKind::File);
    assert_eq!(
        kind_of(&store, &t2, "new.bin"),
        EntryKind::Marker(MarkerReason::OverBudget)
    );
    assert_eq!(
        r2.over_budget
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>(),
        ["new.bin"]
    );
    // Only trees were written.
    assert!(store.disk_usage().unwrap() - before < 4096);
    commit(&mut store, t2);
    assert!(fsck(&store, None).unwrap().is_clean());
}

#[test]
fn the_watcher_tries_a_left_out_file_again() {
    let (_t, root, store) = setup();
    let mut live =
        envgit_store::LiveTree::new(&root, config(1 << 20), Some(&root.join("none"))).unwrap();
    live.snapshot(&store).unwrap();
    std::fs::write(root.join("big.bin"), noise(5, 2 << 20)).unwrap();
    let (t, r, _) = live.snapshot(&store).unwrap();
    assert_eq!(r.over_budget.len(), 1);
    assert_eq!(
        kind_of(&store, &t, "big.bin"),
        EntryKind::Marker(MarkerReason::OverBudget)
    );
    // Nothing changed on disk, yet the next snapshot looks at it again.
    let (_, r, _) = live.snapshot(&store).unwrap();
    assert_eq!(r.over_budget.len(), 1, "{r:?}");
}
