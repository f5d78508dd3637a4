//! The watcher reads only the names inotify reports; this proves its tree is the one a cold full
//! rescan gives, on a large tree, after every kind of edit an agent makes: edits (also of the
//! same size with the mtime set back), renames of files and of directories within and across
//! directories, deletions, new nested directories, mode changes, symlinks, files and
//! directories replacing each other, moves in from and out to outside the project, a directory
//! moved away, written in and moved back, and a real queue overflow (a burst of more events
//! than `fs.inotify.max_queued_events`).
//!
//! The same holds for a one-shot command fed by the watching daemon's log (`ChangeLog`): each
//! step loads the stat index and the token saved with it, takes the changes since, and its tree
//! is compared with a cold rescan before the command and after it.
//!
//! The normal suite runs it at 15,000 files; a release run (`cargo test --release`) at 100,000.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use envgit_store::{
    ChangeLog, Excludes, LiveTree, ObjectId, ScanConfig, SnapshotMode, Store, WorkTree, diff_trees,
};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn config() -> ScanConfig {
    ScanConfig {
        excludes: Excludes::new(&["ignored/".into()]).unwrap(),
        ..Default::default()
    }
}

/// `files` small files in about `files / 14` directories two levels deep (a flat loop).
fn generate(root: &Path, files: usize) {
    let dirs = (files / 14).max(1);
    let tops = (dirs as f64).sqrt().ceil() as usize;
    for d in 0..dirs {
        std::fs::create_dir_all(root.join(format!("t{}/d{d}", d % tops))).unwrap();
    }
    for f in 0..files {
        let d = f % dirs;
        let p = root.join(format!("t{}/d{d}/f{f}.txt", d % tops));
        std::fs::write(p, format!("file {f}\n")).unwrap();
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != "ignored")
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A random directory: a walk down from the root that stops at each level with some chance.
fn some_dir(root: &Path, rng: &mut Rng) -> PathBuf {
    let mut cur = root.to_path_buf();
    loop {
        let subs = subdirs(&cur);
        if subs.is_empty() || (cur != root && rng.below(3) == 0) {
            return cur;
        }
        cur = subs[rng.below(subs.len())].clone();
    }
}

fn some_file(root: &Path, rng: &mut Rng) -> Option<PathBuf> {
    for _ in 0..8 {
        let files = files_in(&some_dir(root, rng));
        if !files.is_empty() {
            return Some(files[rng.below(files.len())].clone());
        }
    }
    None
}

fn some_subdir(root: &Path, rng: &mut Rng) -> Option<PathBuf> {
    let d = some_dir(root, rng);
    (d != root).then_some(d)
}

/// One random edit; returns what it did.
fn mutate(root: &Path, outside: &Path, rng: &mut Rng, n: usize) -> &'static str {
    match rng.below(19) {
        0 => {
            if let Some(f) = some_file(root, rng) {
                std::fs::write(&f, format!("edited {n} with a different length\n")).unwrap();
            }
            "edit"
        }
        1 => {
            // The same size, the mtime set back: only ctime (and inotify) tell.
            if let Some(f) = some_file(root, rng) {
                let old = std::fs::metadata(&f).unwrap();
                let mut bytes = std::fs::read(&f).unwrap();
                if let Some(b) = bytes.first_mut() {
                    *b = b'A' + (n % 26) as u8;
                }
                std::fs::write(&f, &bytes).unwrap();
                let file = std::fs::File::options().write(true).open(&f).unwrap();
                file.set_modified(old.modified().unwrap()).unwrap();
            }
            "same-size edit, mtime set back"
        }
        2 => {
            if let Some(f) = some_file(root, rng) {
                let _ = std::fs::rename(&f, f.with_file_name(format!("renamed{n}")));
            }
            "mv file within its directory"
        }
        3 => {
            if let Some(f) = some_file(root, rng) {
                let to = some_dir(root, rng).join(format!("moved{n}"));
                let _ = std::fs::rename(&f, to);
            }
            "mv file across directories"
        }
        4 => {
            if let Some(d) = some_subdir(root, rng) {
                let _ = std::fs::rename(&d, d.with_file_name(format!("dmoved{n}")));
            }
            "mv dir within its parent"
        }
        5 => {
            if let Some(d) = some_subdir(root, rng) {
                let parent = some_dir(root, rng);
                if !parent.starts_with(&d) {
                    let _ = std::fs::rename(&d, parent.join(format!("dacross{n}")));
                }
            }
            "mv dir across directories"
        }
        6 => {
            if let Some(f) = some_file(root, rng) {
                std::fs::remove_file(f).unwrap();
            }
            "rm file"
        }
        7 => {
            if let Some(d) = some_subdir(root, rng) {
                std::fs::remove_dir_all(d).unwrap();
            }
            "rm -r dir"
        }
        8 => {
            let base = some_dir(root, rng).join(format!("new{n}"));
            std::fs::create_dir_all(base.join("a/b/c")).unwrap();
            for (i, sub) in ["", "a", "a/b", "a/b/c"].iter().enumerate() {
                std::fs::write(base.join(sub).join(format!("x{i}")), format!("{n} {i}")).unwrap();
            }
            "mkdir -p nested + files"
        }
        9 => {
            if let Some(f) = some_file(root, rng) {
                let mode = if rng.below(2) == 0 { 0o755 } else { 0o600 };
                std::fs::set_permissions(f, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            "chmod file"
        }
        10 => {
            let d = some_dir(root, rng);
            let _ = std::fs::remove_file(d.join("link"));
            symlink(format!("../target{n}"), d.join("link")).unwrap();
            "symlink (new or retargeted)"
        }
        11 => {
            if let Some(f) = some_file(root, rng) {
                std::fs::remove_file(&f).unwrap();
                std::fs::create_dir(&f).unwrap();
                std::fs::write(f.join("inside"), "now a directory").unwrap();
            }
            "file replaced by a directory"
        }
        12 => {
            if let Some(d) = some_subdir(root, rng) {
                std::fs::remove_dir_all(&d).unwrap();
                std::fs::write(&d, "now a file").unwrap();
            }
            "directory replaced by a file"
        }
        13 => {
            if let Some(d) = some_subdir(root, rng) {
                let mode = if rng.below(2) == 0 { 0o700 } else { 0o755 };
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            "chmod dir"
        }
        14 => {
            let d = some_dir(root, rng).join("ignored");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(format!("x{n}")), "never captured").unwrap();
            "write below an excluded dir"
        }
        15 => {
            if let Some(d) = some_subdir(root, rng) {
                let _ = std::fs::rename(&d, outside.join(format!("out{n}")));
            }
            "mv dir out of the project"
        }
        16 => {
            let from = outside.join(format!("in{n}"));
            std::fs::create_dir_all(from.join("sub")).unwrap();
            std::fs::write(from.join("sub/f"), format!("from outside {n}")).unwrap();
            let _ = std::fs::rename(&from, some_dir(root, rng).join(format!("in{n}")));
            "mv dir in from outside"
        }
        17 => {
            if let Some(d) = some_subdir(root, rng) {
                let away = d.with_file_name(format!("away{n}"));
                std::fs::rename(&d, &away).unwrap();
                std::fs::write(away.join(format!("while-away{n}")), "x").unwrap();
                std::fs::rename(&away, &d).unwrap();
            }
            "mv dir away, write in it, mv it back"
        }
        _ => {
            std::fs::create_dir_all(some_dir(root, rng).join(format!("empty{n}"))).unwrap();
            "empty dir"
        }
    }
}

/// Every file's mode flipped, over and over, until more events than the queue holds were made.
fn overflow_burst(root: &Path) -> usize {
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        files.extend(files_in(&d));
        dirs.extend(subdirs(&d));
    }
    assert!(!files.is_empty());
    let mut made = 0;
    let mut round = 0u32;
    while made <= limit + 1024 {
        for f in &files {
            let mode = if round.is_multiple_of(2) {
                0o640
            } else {
                0o644
            };
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(mode)).unwrap();
            made += 1;
        }
        round += 1;
    }
    made
}

/// A generated project of `files` files (`p`), a directory outside it, and its store.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    store_dir: PathBuf,
    store: Store,
}

fn fixture(files: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    let outside = tmp.path().join("outside");
    let store_dir = tmp.path().join("store");
    std::fs::create_dir_all(&outside).unwrap();
    generate(&root, files);
    let store = Store::create(&store_dir, &root).unwrap();
    Fixture {
        _tmp: tmp,
        root,
        outside,
        store_dir,
        store,
    }
}

impl Fixture {
    /// Panics unless `id` is the tree a cold full rescan (no stat cache: the ground truth)
    /// gives, naming the paths that differ.
    fn assert_rescan_gives(&self, id: ObjectId, context: &dyn std::fmt::Display) {
        let mut fresh = WorkTree::new(&self.root, config(), Some(&self.store_dir)).unwrap();
        let (fresh_id, _) = fresh.full_scan(&self.store, None).unwrap();
        if id != fresh_id {
            let diff = diff_trees(&self.store, Some(&fresh_id), Some(&id)).unwrap();
            let paths: Vec<String> = diff.iter().map(|c| format!("{c:?}")).collect();
            panic!("{context}: the tree differs from a rescan at {paths:#?}");
        }
    }
}

fn equal_to_rescan(files: usize, steps: usize, seed: u64) {
    let f = fixture(files);
    let (root, outside, store_dir, store) = (&f.root, &f.outside, &f.store_dir, &f.store);
    let mut live = LiveTree::new(root, config(), Some(store_dir)).unwrap();
    let (_, _, first) = live.snapshot(store).unwrap();
    assert_eq!(first, SnapshotMode::FullRescan);
    let mut rng = Rng(seed);
    let overflow_at = steps / 2;
    for step in 0..steps {
        let mut did = Vec::new();
        if step == overflow_at {
            did.push("overflow burst");
            let made = overflow_burst(root);
            eprintln!("step {step}: {made} events in one burst");
        }
        for k in 0..(4 + rng.below(12)) {
            did.push(mutate(root, outside, &mut rng, step * 100 + k));
        }
        let (live_id, _, mode) = live.snapshot(store).unwrap();
        f.assert_rescan_gives(live_id, &format!("step {step} after {did:?} ({mode:?})"));
        if live.is_degraded() {
            eprintln!("step {step}: out of inotify watches, the watcher rescans (degraded)");
        } else if step == overflow_at {
            assert_eq!(mode, SnapshotMode::FullRescan, "the burst did not overflow");
        } else {
            assert_eq!(mode, SnapshotMode::Incremental, "step {step} after {did:?}");
        }
    }
    // Nothing changed since: the watcher agrees (the directories it read before their watches
    // existed are read once more).
    let (a, _, _) = live.snapshot(store).unwrap();
    let (b, _, mode) = live.snapshot(store).unwrap();
    assert_eq!((a, mode), (b, SnapshotMode::Incremental));
}

#[test]
fn the_watcher_equals_a_rescan_at_15k_files() {
    equal_to_rescan(15_000, 24, 0x9e37_79b9_7f4a_7c15);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "100,000 files: run with `cargo test --release -p envgit-store --test watcher_scale`"
)]
fn the_watcher_equals_a_rescan_at_100k_files() {
    equal_to_rescan(100_000, 24, 0x2545_f491_4f6c_dd1d);
}

/// The daemon's log in this process; each step a one-shot command as `envgit run` makes it: a
/// new tree from the stat index, fed the changes since the index's token, edits in the middle
/// of the step (the command), fed again, index and token saved.
fn fed_equal_to_rescan(files: usize, steps: usize, seed: u64) {
    let f = fixture(files);
    let (root, outside, store_dir, store) = (&f.root, &f.outside, &f.store_dir, &f.store);
    let mut log = ChangeLog::start(root, config(), Some(store_dir)).unwrap();
    let mut rng = Rng(seed);
    let overflow_at = steps / 2;
    let check = |live: &mut LiveTree, step: usize, did: &[&str]| -> SnapshotMode {
        let (live_id, _, mode) = live.snapshot(store).unwrap();
        f.assert_rescan_gives(
            live_id,
            &format!("step {step} after {did:?} ({mode:?}), fed"),
        );
        mode
    };
    for step in 0..steps {
        let mut did = Vec::new();
        if step == overflow_at {
            did.push("overflow burst");
            overflow_burst(root);
        }
        for k in 0..(2 + rng.below(8)) {
            did.push(mutate(root, outside, &mut rng, step * 100 + k));
        }
        let mut live = LiveTree::new(root, config(), Some(store_dir)).unwrap();
        live.tree_mut().load_index(store);
        let saved = live.tree().watch_token(store_dir);
        assert_eq!(
            saved.is_some(),
            step > 0,
            "step {step}: the token saved with the index"
        );
        let since = log.since(saved).unwrap();
        let vouched = since.changes.is_some();
        live.feed(since.changes);
        let before = check(&mut live, step, &did);
        if step == 0 || step == overflow_at {
            assert!(
                !vouched,
                "step {step}: no token, or one from before the overflow"
            );
            assert_eq!(before, SnapshotMode::FullRescan);
        } else {
            assert!(
                vouched,
                "step {step}: the log vouches for the time since its token"
            );
            assert_eq!(
                before,
                SnapshotMode::Incremental,
                "step {step} after {did:?}"
            );
        }
        // The command.
        for k in 0..(1 + rng.below(6)) {
            did.push(mutate(root, outside, &mut rng, step * 100 + 50 + k));
        }
        let after = log.since(Some(since.token)).unwrap();
        assert!(
            after.changes.is_some(),
            "step {step}: no overflow within the step"
        );
        live.feed(after.changes);
        assert_eq!(check(&mut live, step, &did), SnapshotMode::Incremental);
        live.tree().save_index(store).unwrap();
        live.tree().save_watch_token(store, after.token).unwrap();
    }
    // A token of another daemon is never taken for this one's.
    let mut other = ChangeLog::start(root, config(), Some(store_dir)).unwrap();
    let mine = log.since(None).unwrap().token;
    assert!(other.since(Some(mine)).unwrap().changes.is_none());
}

#[test]
fn the_daemon_fed_tree_equals_a_rescan_at_15k_files() {
    fed_equal_to_rescan(15_000, 16, 0x5851_f42d_4c95_7f2d);
}
