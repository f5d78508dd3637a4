//! `gc` and `restore` on real stores and real directories: gc drops what no step can reach
//! and nothing else, prunes only old steps, purges a path from every snapshot; a
//! restore brings back modes and symlinks exactly, never a setuid bit, and never writes
//! through a symlink planted where the snapshot has a directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::AsFd;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use envgit_store::{
    EntryKind, Excludes, GcOptions, MarkerReason, ObjectId, ObjectKind, RestoreOptions, ScanConfig,
    StepDraft, Store, StoreError, WorkTree, fsck, gc, restore,
};

struct Project {
    tmp: tempfile::TempDir,
    root: PathBuf,
    store: PathBuf,
}

fn project() -> Project {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    let store = tmp.path().join("s");
    Store::create(&store, &root).unwrap();
    Project { tmp, root, store }
}

fn snapshot(store: &Store, root: &Path) -> ObjectId {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    wt.full_scan(store, None).unwrap().0
}

/// Commits the project as it is; `extra` runs inside the step (with the store open).
fn commit_with(p: &Project, extra: impl FnOnce(&Store)) -> u64 {
    let mut store = Store::open(&p.store).unwrap();
    let mut g = store.begin_step("t").unwrap();
    extra(&store);
    let tree = snapshot(&store, &p.root);
    store
        .commit(&mut g, StepDraft::default(), tree)
        .unwrap()
        .number
}

fn commit(p: &Project) -> u64 {
    commit_with(p, |_| {})
}

#[path = "support/bytes.rs"]
mod bytes;
use bytes::noise;

fn file_at(store: &Store, step: u64, name: &str) -> Vec<u8> {
    let tree = store.read_tree(&store.step_tree(step).unwrap()).unwrap();
    store
        .read_file(&tree.get(name.as_bytes()).unwrap().id)
        .unwrap()
}

fn keep_everything() -> GcOptions {
    GcOptions {
        budget: u64::MAX,
        keep_recent: usize::MAX,
        purge: Vec::new(),
    }
}

#[test]
fn gc_drops_an_object_no_step_reaches_and_keeps_every_snapshot() {
    let p = project();
    std::fs::write(p.root.join("f"), "kept").unwrap();
    let orphan = b"written during a step, named by no tree".to_vec();
    let orphan_id = ObjectId::of(ObjectKind::Blob, &orphan);
    commit_with(&p, |s| {
        s.put(ObjectKind::Blob, &orphan).unwrap();
    });
    std::fs::write(p.root.join("f"), "kept too").unwrap();
    commit(&p);
    let mut s = Store::open(&p.store).unwrap();
    assert!(s.has(&orphan_id), "committed with its step");
    let report = gc(&mut s, &keep_everything()).unwrap();
    assert_eq!(report.objects_dropped, 1, "{report:?}");
    assert!(report.pruned_steps.is_empty());
    let s = Store::open(&p.store).unwrap();
    assert!(!s.has(&orphan_id));
    assert!(s.read_object(&orphan_id).is_err());
    assert_eq!(file_at(&s, 1, "f"), b"kept");
    assert_eq!(file_at(&s, 2, "f"), b"kept too");
    assert!(fsck(&s, None).unwrap().is_clean());
    // Nothing left to drop.
    let mut s = Store::open(&p.store).unwrap();
    assert_eq!(gc(&mut s, &keep_everything()).unwrap().objects_dropped, 0);
}

#[test]
fn gc_refuses_a_store_whose_objects_are_not_in_packs_and_leaves_it_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("f"), "kept").unwrap();
    let memory = Box::new(envgit_store::MemoryBackend::default());
    let mut s = Store::create_with(&tmp.path().join("s"), &root, memory).unwrap();
    let tree = snapshot(&s, &root);
    let mut g = s.begin_step("x").unwrap();
    s.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);
    let err = gc(&mut s, &keep_everything()).unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err}");
    assert!(err.to_string().contains("packs"), "{err}");
    assert_eq!(s.step_count(), 1);
    assert!(fsck(&s, None).unwrap().is_clean());
    assert_eq!(
        s.read_file(&s.read_tree(&tree).unwrap().get(b"f").unwrap().id)
            .unwrap(),
        b"kept"
    );
}

#[test]
fn gc_over_budget_prunes_old_steps_and_keeps_the_recent_ones() {
    let p = project();
    for i in 0..6u64 {
        std::fs::write(p.root.join("f"), noise(i, 64 << 10)).unwrap();
        commit(&p);
    }
    let mut s = Store::open(&p.store).unwrap();
    let report = gc(
        &mut s,
        &GcOptions {
            budget: 1,
            keep_recent: 2,
            purge: Vec::new(),
        },
    )
    .unwrap();
    assert_eq!(report.pruned_steps, [1, 2, 3, 4], "{report:?}");
    assert!(report.bytes_after < report.bytes_before, "{report:?}");
    let s = Store::open(&p.store).unwrap();
    assert_eq!(s.step_count(), 6, "pruned steps stay in the log");
    for n in 1..=4 {
        assert!(
            matches!(s.step_tree(n), Err(StoreError::Pruned(m)) if m == n),
            "step {n}"
        );
    }
    assert_eq!(file_at(&s, 5, "f"), noise(4, 64 << 10));
    assert_eq!(file_at(&s, 6, "f"), noise(5, 64 << 10));
    assert!(fsck(&s, None).unwrap().is_clean());
}

#[test]
fn gc_purge_removes_a_path_from_every_snapshot_and_nothing_else() {
    let p = project();
    std::fs::create_dir_all(p.root.join("d")).unwrap();
    std::fs::write(p.root.join("d/secret"), "token-1").unwrap();
    std::fs::write(p.root.join("d/other"), "o").unwrap();
    commit(&p);
    std::fs::write(p.root.join("d/secret"), "token-2").unwrap();
    commit(&p);
    let secrets = [b"token-1", b"token-2"].map(|t| ObjectId::of(ObjectKind::Blob, t));
    let mut s = Store::open(&p.store).unwrap();
    let report = gc(
        &mut s,
        &GcOptions {
            purge: vec!["d/secret".into()],
            ..keep_everything()
        },
    )
    .unwrap();
    assert_eq!(report.purged_steps, [1, 2]);
    let s = Store::open(&p.store).unwrap();
    for n in [1, 2] {
        let d = s.read_tree(&s.step_tree(n).unwrap()).unwrap();
        let d = s.read_tree(&d.get(b"d").unwrap().id).unwrap();
        // A marker says the path was purged; its content is gone.
        let secret = d.get(b"secret").unwrap();
        assert_eq!(
            secret.kind,
            EntryKind::Marker(MarkerReason::Purged),
            "step {n}"
        );
        assert_eq!(s.read_file(&d.get(b"other").unwrap().id).unwrap(), b"o");
    }
    assert!(
        secrets.iter().all(|id| !s.has(id)),
        "the content is gone too"
    );
    assert!(fsck(&s, None).unwrap().is_clean());
    // A path that leaves the project is refused, and nothing is changed.
    let mut s = Store::open(&p.store).unwrap();
    let bad = GcOptions {
        purge: vec!["../elsewhere".into()],
        ..keep_everything()
    };
    assert!(gc(&mut s, &bad).is_err());
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn restore_brings_back_modes_and_symlinks_and_never_writes_through_a_planted_link() {
    let p = project();
    let r = &p.root;
    let set = |name: &str, m: u32| {
        std::fs::set_permissions(r.join(name), std::fs::Permissions::from_mode(m)).unwrap()
    };
    std::fs::write(r.join("exec"), "#!/bin/sh\n").unwrap();
    set("exec", 0o755);
    std::fs::write(r.join("ro"), "read only").unwrap();
    set("ro", 0o444);
    std::fs::write(r.join("suid"), "x").unwrap();
    set("suid", 0o4755);
    std::fs::create_dir(r.join("d")).unwrap();
    std::fs::write(r.join("d/inner"), "inner").unwrap();
    set("d", 0o700);
    symlink("exec", r.join("ln")).unwrap();
    symlink("nowhere", r.join("dangling")).unwrap();
    symlink("/etc/passwd", r.join("abs")).unwrap();
    let step = commit(&p);

    // The agent changes everything, and plants a link where `d` was.
    let outside = p.tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    set("exec", 0o644);
    set("ro", 0o644);
    std::fs::remove_file(r.join("ro")).unwrap();
    std::fs::remove_file(r.join("ln")).unwrap();
    std::fs::write(r.join("ln"), "now a file").unwrap();
    std::fs::remove_file(r.join("dangling")).unwrap();
    std::fs::remove_file(r.join("abs")).unwrap();
    symlink("/tmp", r.join("abs")).unwrap();
    set("d", 0o755);
    std::fs::remove_dir_all(r.join("d")).unwrap();
    symlink(&outside, r.join("d")).unwrap();
    std::fs::remove_file(r.join("suid")).unwrap();
    std::fs::write(r.join("extra"), "new").unwrap();

    let s = Store::open(&p.store).unwrap();
    let current = snapshot(&s, r);
    let target = s.step_tree(step).unwrap();
    let root = std::fs::File::open(r).unwrap();
    let excludes = Excludes::none();
    let opts = RestoreOptions {
        excludes: &excludes,
        protected: &[],
        clone_from: None,
    };
    restore(&s, root.as_fd(), Some(&current), &target, &opts).unwrap();

    assert_eq!(mode(&r.join("exec")), 0o755);
    assert_eq!(mode(&r.join("ro")), 0o444);
    assert_eq!(std::fs::read(r.join("ro")).unwrap(), b"read only");
    assert_eq!(mode(&r.join("suid")), 0o755, "never a setuid bit");
    let d = std::fs::symlink_metadata(r.join("d")).unwrap();
    assert!(d.is_dir(), "the planted link is replaced by the directory");
    assert_eq!(mode(&r.join("d")), 0o700);
    assert_eq!(std::fs::read(r.join("d/inner")).unwrap(), b"inner");
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written through the link"
    );
    for (name, to) in [
        ("ln", "exec"),
        ("dangling", "nowhere"),
        ("abs", "/etc/passwd"),
    ] {
        assert_eq!(
            std::fs::read_link(r.join(name)).unwrap(),
            Path::new(to),
            "{name}"
        );
    }
    assert!(!r.join("extra").exists());
    // The restored tree is the snapshot again.
    assert_eq!(snapshot(&s, r), target);
}
