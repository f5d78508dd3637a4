//! The watcher's incremental snapshots and a full rescan must give identical trees, whatever the
//! agent does between steps, including when the watcher loses track (moved directories) and
//! has to fall back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use envgit_store::{Excludes, LiveTree, ScanConfig, SnapshotMode, Store, WorkTree};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn config() -> ScanConfig {
    ScanConfig {
        excludes: Excludes::new(&["ignored/".into()]).unwrap(),
        ..Default::default()
    }
}

fn all_dirs(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().unwrap().is_dir() && e.file_name() != "ignored" {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

fn all_files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for d in all_dirs(root) {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if !e.file_type().unwrap().is_dir() {
                files.push(e.path());
            }
        }
    }
    files
}

/// One random edit of the kinds an agent makes.
fn mutate(root: &Path, rng: &mut Rng, n: usize) -> &'static str {
    let dirs = all_dirs(root);
    let dir = &dirs[rng.below(dirs.len())];
    let files = all_files(root);
    match rng.below(11) {
        0 => {
            std::fs::write(dir.join(format!("new{n}.txt")), format!("content {n}")).unwrap();
            "create"
        }
        1 if !files.is_empty() => {
            let f = &files[rng.below(files.len())];
            if f.symlink_metadata().unwrap().is_file() {
                std::fs::write(f, format!("rewritten {n}")).unwrap();
            }
            "modify"
        }
        2 if !files.is_empty() => {
            std::fs::remove_file(&files[rng.below(files.len())]).unwrap();
            "delete"
        }
        3 => {
            std::fs::create_dir_all(dir.join(format!("sub{n}/deeper"))).unwrap();
            std::fs::write(dir.join(format!("sub{n}/deeper/x")), "x").unwrap();
            "mkdir -p + file"
        }
        4 if dirs.len() > 1 => {
            let d = &dirs[1 + rng.below(dirs.len() - 1)];
            std::fs::remove_dir_all(d).unwrap();
            "rm -r"
        }
        5 if dirs.len() > 1 => {
            let d = &dirs[1 + rng.below(dirs.len() - 1)];
            let _ = std::fs::rename(d, root.join(format!("moved{n}")));
            "mv dir"
        }
        6 if !files.is_empty() => {
            let f = &files[rng.below(files.len())];
            if f.symlink_metadata().unwrap().is_file() {
                let mode = if rng.below(2) == 0 { 0o755 } else { 0o644 };
                std::fs::set_permissions(f, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            "chmod"
        }
        7 => {
            let _ = symlink(format!("../target{n}"), dir.join(format!("link{n}")));
            "symlink"
        }
        8 if !files.is_empty() => {
            let f = &files[rng.below(files.len())];
            let _ = std::fs::rename(f, dir.join(format!("renamed{n}")));
            "mv file"
        }
        9 => {
            std::fs::create_dir_all(root.join("ignored")).unwrap();
            std::fs::write(root.join(format!("ignored/x{n}")), "never captured").unwrap();
            "write excluded"
        }
        _ => {
            std::fs::create_dir_all(dir.join(format!("empty{n}"))).unwrap();
            "empty dir"
        }
    }
}

#[test]
fn watcher_and_rescan_give_identical_trees() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    let store_dir = tmp.path().join("store");
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/b/f.txt"), "f").unwrap();
    std::fs::write(root.join("top.txt"), "t").unwrap();
    let store = Store::create(&store_dir, &root).unwrap();
    let mut live = LiveTree::new(&root, config(), Some(&store_dir)).unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut modes = HashSet::new();
    for step in 0..60 {
        let mut did = Vec::new();
        for k in 0..(1 + rng.below(4)) {
            did.push(mutate(&root, &mut rng, step * 10 + k));
        }
        let (live_id, _, mode) = live.snapshot(&store).unwrap();
        modes.insert(mode);
        // A cold full rescan, no stat cache: the ground truth.
        let mut fresh = WorkTree::new(&root, config(), Some(&store_dir)).unwrap();
        let (fresh_id, _) = fresh.full_scan(&store, None).unwrap();
        if live_id != fresh_id {
            let diff = envgit_store::diff_trees(&store, Some(&fresh_id), Some(&live_id)).unwrap();
            panic!("step {step} after {did:?} ({mode:?}): differs at {diff:#?}");
        }
    }
    assert!(
        modes.contains(&SnapshotMode::Incremental),
        "the watcher never ran incrementally"
    );
    assert!(
        modes.contains(&SnapshotMode::FullRescan),
        "the fallback never ran"
    );
}

#[test]
fn an_unchanged_tree_is_one_cheap_step_and_a_change_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    for i in 0..50 {
        std::fs::create_dir_all(root.join(format!("d{i}"))).unwrap();
        std::fs::write(root.join(format!("d{i}/f")), format!("{i}")).unwrap();
    }
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    let mut live = LiveTree::new(&root, ScanConfig::default(), None).unwrap();
    let (a, _, m) = live.snapshot(&store).unwrap();
    assert_eq!(m, SnapshotMode::FullRescan);
    let (b, _, _) = live.snapshot(&store).unwrap();
    let (c, r, m) = live.snapshot(&store).unwrap();
    assert_eq!((a, b), (b, c));
    assert_eq!((m, r.hashed), (SnapshotMode::Incremental, 0));
    std::fs::write(root.join("d7/f"), "changed").unwrap();
    let (d, r, m) = live.snapshot(&store).unwrap();
    assert_ne!(c, d);
    assert_eq!((m, r.hashed), (SnapshotMode::Incremental, 1));
}

/// A directory moved away, changed and moved back between two snapshots is the same inode at
/// the same path, and its old watch reported the change under a path given up meanwhile:
/// it must still be read again, also when its parent is read whole (new at the last
/// snapshot, so not yet vouched for by its watch).
#[test]
fn a_directory_moved_away_changed_and_moved_back_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("top.txt"), "t").unwrap();
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    let mut live = LiveTree::new(&root, ScanConfig::default(), None).unwrap();
    live.snapshot(&store).unwrap();
    std::fs::create_dir_all(root.join("d/n")).unwrap();
    std::fs::write(root.join("d/n/a"), "a").unwrap();
    live.snapshot(&store).unwrap();
    std::fs::rename(root.join("d/n"), root.join("d/x")).unwrap();
    std::fs::write(root.join("d/x/new"), "written while away").unwrap();
    std::fs::rename(root.join("d/x"), root.join("d/n")).unwrap();
    let (live_id, _, mode) = live.snapshot(&store).unwrap();
    assert_eq!(mode, SnapshotMode::Incremental);
    let mut fresh = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    let (fresh_id, _) = fresh.full_scan(&store, None).unwrap();
    assert_eq!(live_id, fresh_id);
    // And once more, now that everything is watched.
    std::fs::rename(root.join("d/n"), root.join("d/x")).unwrap();
    std::fs::write(root.join("d/x/newer"), "again").unwrap();
    std::fs::rename(root.join("d/x"), root.join("d/n")).unwrap();
    let (live_id, _, _) = live.snapshot(&store).unwrap();
    let (fresh_id, _) = fresh.full_scan(&store, None).unwrap();
    assert_eq!(live_id, fresh_id);
}
