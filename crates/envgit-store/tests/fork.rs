//! `fork` writes a snapshot into a new directory (in parallel, one task per directory): the
//! result is the snapshot byte for byte, with its modes, symlinks, empty directories and
//! executable bits, sparse files still sparse, no hard links, and the replaced root file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use envgit_store::{ForkOptions, ScanConfig, StepDraft, Store, WorkTree};

#[macro_use]
mod support;
use support::backends::Backend;
use support::bytes::noise;

// The origin's objects in either backend; a fork's own store is in packs.
on_every_backend!(
    a_fork_is_the_snapshot_byte_for_byte,
    a_fork_of_a_step_on_tree_deltas_copies_their_bases
);

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A file of `len` bytes that is a hole except for `data` written at each offset.
fn sparse(path: &Path, len: u64, data: &[(u64, &[u8])]) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(len).unwrap();
    for (at, bytes) in data {
        f.write_all_at(bytes, *at).unwrap();
    }
}

/// A project with every kind of entry a fork must reproduce.
fn project(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    for d in 0..60 {
        let dir = root.join(format!("d{d:02}/sub{}", d % 3));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..8 {
            let text = format!("dir {d} file {f}\n").repeat(1 + d * f);
            std::fs::write(dir.join(format!("f{f}.c")), text).unwrap();
        }
    }
    std::fs::write(root.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
    set_mode(&root.join("run.sh"), 0o755);
    std::fs::write(root.join("private"), "mine").unwrap();
    set_mode(&root.join("private"), 0o600);
    std::fs::write(root.join("owner-exec"), "x").unwrap();
    set_mode(&root.join("owner-exec"), 0o700);
    std::fs::write(root.join("empty-file"), "").unwrap();
    // Modes the umask would narrow at creation.
    std::fs::write(root.join("world-writable"), "w").unwrap();
    set_mode(&root.join("world-writable"), 0o666);
    std::fs::write(root.join("group-exec"), "g").unwrap();
    set_mode(&root.join("group-exec"), 0o775);
    symlink("run.sh", root.join("link-to-file")).unwrap();
    symlink("d00", root.join("link-to-dir")).unwrap();
    symlink("/nonexistent/target", root.join("dangling")).unwrap();
    std::fs::create_dir_all(root.join("empty/nested/deeper")).unwrap();
    std::fs::create_dir(root.join("closed")).unwrap();
    std::fs::write(root.join("closed/inside"), "in").unwrap();
    set_mode(&root.join("closed"), 0o750);
    // Holes: in the middle, at the end, and a chunked (over 1 MiB) file with holes.
    sparse(
        &root.join("holes.img"),
        8 << 20,
        &[(0, b"head"), (3 << 20, b"middle")],
    );
    sparse(
        &root.join("tail-hole.img"),
        1 << 20,
        &[(0, b"only at the start")],
    );
    let pattern: Vec<u8> = (0..(300u32 << 10)).map(|i| (i % 251) as u8).collect();
    sparse(
        &root.join("big-sparse.img"),
        40 << 20,
        &[
            (0, &pattern),
            (20 << 20, &pattern),
            ((40 << 20) - 5, b"tail!"),
        ],
    );
    // Two names for one file in the source: the fork gets two independent files.
    std::fs::write(root.join("linked-a"), "shared content").unwrap();
    std::fs::hard_link(root.join("linked-a"), root.join("linked-b")).unwrap();
}

struct Seen {
    what: String,
    blocks: u64,
    nlink: u64,
    ino: u64,
}

/// Every path below `root`: its kind, permission bits and content (or link target).
fn walk(root: &Path) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let rel = rel.join(e.unwrap().file_name());
            let path = root.join(&rel);
            let m = std::fs::symlink_metadata(&path).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if m.is_dir() {
                todo.push(rel.clone());
                format!("dir {:o}", m.mode() & 0o7777)
            } else {
                let bytes = std::fs::read(&path).unwrap();
                format!(
                    "file {:o} {} bytes blake3 {}",
                    m.mode() & 0o7777,
                    bytes.len(),
                    blake3::hash(&bytes).to_hex()
                )
            };
            out.insert(
                rel.display().to_string(),
                Seen {
                    what,
                    blocks: m.blocks(),
                    nlink: m.nlink(),
                    ino: m.ino(),
                },
            );
        }
    }
    out
}

fn a_fork_is_the_snapshot_byte_for_byte(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    project(&root);
    std::fs::write(root.join("envgit.yaml"), "old policy\n").unwrap();
    let mut store = backend.create(&tmp.path().join("s"), &root);
    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    let (tree, _) = wt.full_scan(&store, None).unwrap();
    let mut g = store.begin_step("x").unwrap();
    store.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);

    let forked = tmp.path().join("fork");
    let (new_store, fork_tree, _) = envgit_store::fork(
        &store,
        &forked,
        &tmp.path().join("fs"),
        &ForkOptions {
            step: 1,
            replace_root_file: Some(("envgit.yaml", b"new policy\n")),
            policy_hash: None,
            clone_from: None,
        },
    )
    .unwrap();

    let src = walk(&root);
    let dst = walk(&forked);
    let names = |m: &BTreeMap<String, Seen>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&src), names(&dst));
    for (path, s) in &src {
        let d = &dst[path];
        if path == "envgit.yaml" {
            assert_eq!(
                std::fs::read(forked.join(path)).unwrap(),
                b"new policy\n",
                "the root file given replaces the snapshot's"
            );
            continue;
        }
        assert_eq!(s.what, d.what, "{path}");
        if d.what.starts_with("file") {
            assert_eq!(d.nlink, 1, "{path} is hard-linked in the fork");
            // Never denser than the source (a sparse file stays sparse).
            assert!(
                d.blocks <= s.blocks + 8,
                "{path}: {} blocks in the fork, {} in the source",
                d.blocks,
                s.blocks
            );
        }
    }
    assert_ne!(dst["linked-a"].ino, dst["linked-b"].ino);
    assert!(dst["holes.img"].blocks * 512 < 64 << 10);
    assert!(dst["big-sparse.img"].blocks * 512 < 2 << 20);
    assert!(dst["tail-hole.img"].blocks * 512 < 64 << 10);

    // The fork's own store holds everything its first step needs, and reads it back.
    let report = envgit_store::fsck(&new_store, None).unwrap();
    assert!(report.bad_objects.is_empty(), "{:?}", report.bad_objects);
    let yaml = new_store
        .read_tree(&fork_tree)
        .unwrap()
        .get(b"envgit.yaml")
        .unwrap()
        .id;
    assert_eq!(new_store.read_file(&yaml).unwrap(), b"new policy\n");
}

fn a_fork_of_a_step_on_tree_deltas_copies_their_bases(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    project(&root);
    let mut store = backend.create(&tmp.path().join("s"), &root);
    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    for step in 0..6 {
        std::fs::write(root.join("d07/sub1/f3.c"), format!("version {step}\n")).unwrap();
        let (tree, _) = wt.full_scan(&store, None).unwrap();
        let mut g = store.begin_step("x").unwrap();
        store.commit(&mut g, StepDraft::default(), tree).unwrap();
    }
    let head = store.step_tree(6).unwrap();
    assert!(store.tree_depth(&head).unwrap() >= 5, "the root is a delta");
    let forked = tmp.path().join("fork");
    let (new_store, tree, draft) = envgit_store::fork(
        &store,
        &forked,
        &tmp.path().join("fs"),
        &ForkOptions {
            step: 6,
            replace_root_file: None,
            policy_hash: None,
            clone_from: None,
        },
    )
    .unwrap();
    assert_eq!(tree, head);
    let mut new_store = new_store;
    let mut g = new_store.begin_step("fork").unwrap();
    new_store.commit(&mut g, draft, tree).unwrap();
    drop(g);
    let cold = Store::open(new_store.dir()).unwrap();
    let report = envgit_store::fsck(&cold, None).unwrap();
    assert!(report.is_clean(), "{:?}", report.bad_objects);
    assert_eq!(
        std::fs::read(forked.join("d07/sub1/f3.c")).unwrap(),
        b"version 5\n"
    );
}

/// The pack files of the store at `dir`, by inode.
fn packs_by_inode(dir: &Path) -> BTreeMap<u64, PathBuf> {
    std::fs::read_dir(dir.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (std::fs::metadata(&p).unwrap().ino(), p))
        .collect()
}

/// A step of `root` as it is now, committed to `store`.
fn commit_now(store: &mut Store, root: &Path) {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    let (tree, _) = wt.full_scan(store, None).unwrap();
    let mut g = store.begin_step("x").unwrap();
    store.commit(&mut g, StepDraft::default(), tree).unwrap();
}

/// `envgit fork` of step `step` into `tmp/fork` (its store in `tmp/fs`), its first step
/// committed; the fork's store and directory.
fn fork_and_commit(origin: &Store, tmp: &Path, step: u64) -> (Store, PathBuf) {
    let forked = tmp.join("fork");
    let (mut fork_store, tree, draft) = envgit_store::fork(
        origin,
        &forked,
        &tmp.join("fs"),
        &ForkOptions {
            step,
            replace_root_file: None,
            policy_hash: None,
            clone_from: None,
        },
    )
    .unwrap();
    let mut g = fork_store.begin_step("fork").unwrap();
    fork_store.commit(&mut g, draft, tree).unwrap();
    drop(g);
    (fork_store, forked)
}

/// A fork does not write its origin's packs again: it hard-links them. Neither store writes
/// over a shared pack's bytes afterwards (two writers in one pack would also show in `fsck`,
/// which checks every object by its id), and the fork keeps everything once the origin is
/// gone.
#[test]
fn a_fork_shares_the_origins_packs_and_neither_writes_into_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    project(&root);
    let origin_dir = tmp.path().join("s");
    let mut store = Store::create(&origin_dir, &root).unwrap();
    commit_now(&mut store, &root);

    let (fork_store, forked) = fork_and_commit(&store, tmp.path(), 1);

    let origin_packs = packs_by_inode(&origin_dir);
    let fork_packs = packs_by_inode(fork_store.dir());
    let shared: Vec<(PathBuf, Vec<u8>)> = fork_packs
        .iter()
        .filter(|(ino, _)| origin_packs.contains_key(ino))
        .map(|(_, p)| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    assert!(!shared.is_empty(), "no pack shared: {fork_packs:?}");

    // New objects on both sides, from more than one process's view of each store. The
    // origin's first writer lets go of its pack, so a later writer could take it over.
    std::fs::write(root.join("new-in-origin"), noise(1, 200 << 10)).unwrap();
    commit_now(&mut store, &root);
    drop(store);
    std::fs::write(forked.join("new-in-fork"), noise(2, 200 << 10)).unwrap();
    let mut fork_again = Store::open(fork_store.dir()).unwrap();
    commit_now(&mut fork_again, &forked);
    let mut origin_again = Store::open(&origin_dir).unwrap();
    std::fs::write(root.join("more-in-origin"), noise(3, 100 << 10)).unwrap();
    commit_now(&mut origin_again, &root);
    // What was shared is as it was. (The origin's writer of this process held one of those
    // packs before the fork and appends past it: bytes the fork's journal never names.)
    for (path, bytes) in &shared {
        assert!(
            std::fs::read(path).unwrap().starts_with(bytes),
            "{} was written into",
            path.display()
        );
    }
    for dir in [&origin_dir, fork_store.dir()] {
        let report = envgit_store::fsck(&Store::open(dir).unwrap(), None).unwrap();
        assert!(
            report.is_clean(),
            "{}: {:?}",
            dir.display(),
            report.bad_objects
        );
    }

    // The origin gone, the fork still has every object of both its steps.
    drop(origin_again);
    std::fs::remove_dir_all(&origin_dir).unwrap();
    let cold = Store::open(fork_store.dir()).unwrap();
    let report = envgit_store::fsck(&cold, None).unwrap();
    assert!(report.is_clean(), "{:?}", report.bad_objects);
    let head = cold.step_tree(2).unwrap();
    let id = cold
        .read_tree(&head)
        .unwrap()
        .get(b"new-in-fork")
        .unwrap()
        .id;
    assert_eq!(cold.read_file(&id).unwrap(), noise(2, 200 << 10));
}

/// A pack mostly made of other steps' objects is not shared: the objects the forked step
/// needs are copied out of it, checked on the way, and the fork's store stands alone.
#[test]
fn a_fork_that_needs_little_of_a_pack_copies_from_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("src/main.c"), "int main() { return 0; }\n").unwrap();
    std::fs::write(root.join("big.bin"), noise(4, 4 << 20)).unwrap();
    let origin_dir = tmp.path().join("s");
    let mut store = Store::create(&origin_dir, &root).unwrap();
    commit_now(&mut store, &root);
    std::fs::remove_file(root.join("big.bin")).unwrap();
    commit_now(&mut store, &root);

    let (fork_store, forked) = fork_and_commit(&store, tmp.path(), 2);
    let origin_packs = packs_by_inode(&origin_dir);
    let fork_packs = packs_by_inode(fork_store.dir());
    assert!(
        fork_packs.keys().all(|ino| !origin_packs.contains_key(ino)),
        "a pack of 4 MiB the step does not need was shared"
    );
    drop(store);
    std::fs::remove_dir_all(&origin_dir).unwrap();
    let cold = Store::open(fork_store.dir()).unwrap();
    assert!(envgit_store::fsck(&cold, None).unwrap().is_clean());
    assert_eq!(
        std::fs::read(forked.join("src/main.c")).unwrap(),
        b"int main() { return 0; }\n"
    );
}

/// gc on either side of a fork: the fork's gc copies out what it needs of a shared pack (the
/// rest is the origin's) and lets go of its link; the origin's pack stays as it was, and
/// both stores check clean and read their files.
#[test]
fn gc_on_either_side_of_a_fork_leaves_the_other_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    project(&root);
    let origin_dir = tmp.path().join("s");
    let mut store = Store::create(&origin_dir, &root).unwrap();
    // Step 1's version of `second` is in the shared pack but not in the step forked.
    std::fs::write(root.join("second"), noise(5, 300 << 10)).unwrap();
    commit_now(&mut store, &root);
    std::fs::write(root.join("second"), noise(6, 300 << 10)).unwrap();
    commit_now(&mut store, &root);
    drop(store);
    let store = Store::open(&origin_dir).unwrap();

    let (fork_store, _) = fork_and_commit(&store, tmp.path(), 2);
    drop(store);
    let origin_packs = packs_by_inode(&origin_dir);
    let before: Vec<(PathBuf, Vec<u8>)> = origin_packs
        .values()
        .map(|p| (p.clone(), std::fs::read(p).unwrap()))
        .collect();
    assert!(
        packs_by_inode(fork_store.dir())
            .keys()
            .any(|ino| origin_packs.contains_key(ino)),
        "nothing shared to begin with"
    );

    let keep = envgit_store::GcOptions {
        budget: u64::MAX,
        keep_recent: usize::MAX,
        purge: Vec::new(),
    };
    let mut fork_again = Store::open(fork_store.dir()).unwrap();
    let report = envgit_store::gc(&mut fork_again, &keep).unwrap();
    assert!(report.packs_compacted > 0, "{report:?}");
    assert!(
        packs_by_inode(fork_store.dir())
            .keys()
            .all(|ino| !origin_packs.contains_key(ino)),
        "the fork's gc kept its link to a pack with the origin's records"
    );
    let mut origin = Store::open(&origin_dir).unwrap();
    envgit_store::gc(&mut origin, &keep).unwrap();
    for (path, bytes) in &before {
        if let Ok(now) = std::fs::read(path) {
            assert!(now == *bytes, "{} changed", path.display());
        }
    }
    for (dir, file, want) in [
        (&origin_dir, "second", noise(6, 300 << 10)),
        (
            &fork_store.dir().to_path_buf(),
            "second",
            noise(6, 300 << 10),
        ),
    ] {
        let s = Store::open(dir).unwrap();
        let report = envgit_store::fsck(&s, None).unwrap();
        assert!(
            report.is_clean(),
            "{}: {:?}",
            dir.display(),
            report.bad_objects
        );
        let head = s.head().unwrap().tree.unwrap();
        let id = s.read_tree(&head).unwrap().get(file.as_bytes()).unwrap().id;
        assert_eq!(s.read_file(&id).unwrap(), want);
    }
}
