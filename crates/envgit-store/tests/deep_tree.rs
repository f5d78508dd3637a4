//! A directory chain far deeper than any stack or descriptor budget: it is snapshotted (down to
//! the depth limit, the rest recorded as a `too_deep` marker), restored by `fork` and `rewind`,
//! and later steps keep working. The test binary holds only this test and runs it with
//! RLIMIT_NOFILE lowered to 256, so a walk that holds a descriptor per level fails with EMFILE.
//! Most of its time is the filesystem removing 10,000 directories (rmdir costs milliseconds on
//! the test machine's ext4), not envgit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use envgit_store::{
    EntryKind, Excludes, ForkOptions, MarkerReason, RewindOptions, ScanConfig, StepDraft, WorkTree,
    fork, rewind_apply, rewind_start,
};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

const DEPTH: usize = 10_000;

fn open_dir(dir: impl AsFd, name: &std::ffi::CStr) -> OwnedFd {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// `root/d/d/…/d` `depth` levels deep, a file `f` at every 1000th level; one fd at a time.
fn make_chain(root: &Path, depth: usize) {
    let mut cur = open_dir(
        rustix::fs::CWD,
        &std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).unwrap(),
    );
    for level in 1..=depth {
        rustix::fs::mkdirat(&cur, c"d", Mode::from_raw_mode(0o755)).unwrap();
        cur = open_dir(&cur, c"d");
        if level % 1000 == 0 {
            let f = rustix::fs::openat(
                &cur,
                c"f",
                OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .unwrap();
            rustix::io::write(&f, format!("level {level}\n").as_bytes()).unwrap();
        }
    }
}

/// How many `d` levels are below `root`, walking one fd at a time.
fn chain_depth(root: &Path) -> usize {
    let mut cur = open_dir(
        rustix::fs::CWD,
        &std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).unwrap(),
    );
    let mut n = 0;
    loop {
        match rustix::fs::openat(
            &cur,
            c"d",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => {
                cur = fd;
                n += 1;
            }
            Err(_) => return n,
        }
    }
}

/// Remove a chain bottom-up through `..` (std's remove_dir_all holds a descriptor per level).
fn remove_chain(root: &Path) {
    let mut cur = open_dir(
        rustix::fs::CWD,
        &std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).unwrap(),
    );
    let mut depth = 0;
    while let Ok(fd) = rustix::fs::openat(
        &cur,
        c"d",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        cur = fd;
        depth += 1;
    }
    for _ in 0..depth {
        let _ = rustix::fs::unlinkat(&cur, c"f", AtFlags::empty());
        let parent = open_dir(&cur, c"..");
        rustix::fs::unlinkat(&parent, c"d", AtFlags::REMOVEDIR).unwrap();
        cur = parent;
    }
}

#[macro_use]
mod support;
use support::backends::Backend;

on_every_backend!(a_ten_thousand_deep_tree_is_recorded_restored_and_later_steps_work);

fn a_ten_thousand_deep_tree_is_recorded_restored_and_later_steps_work(backend: Backend) {
    if std::env::var_os("ENVGIT_TEST_KEEP_NOFILE").is_none() {
        let lim = getrlimit(Resource::Nofile);
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(256),
                maximum: lim.maximum,
            },
        )
        .unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("p");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("top"), "1").unwrap();
    make_chain(&project, DEPTH);
    let store_dir = tmp.path().join("s");
    let mut store = backend.create(&store_dir, &project);
    let mut wt = WorkTree::new(&project, ScanConfig::default(), None).unwrap();

    let t0 = std::time::Instant::now();
    let (tree, report) = wt.full_scan(&store, None).unwrap();
    eprintln!("scan of {DEPTH} levels: {:?}", t0.elapsed());
    // The part below the limit is a marker that names its path, never silently dropped.
    let limit = envgit_store::MAX_TREE_DEPTH;
    assert!(limit < DEPTH);
    assert_eq!(report.too_deep.len(), 1, "{:?}", report.too_deep.len());
    let deep = &report.too_deep[0];
    assert_eq!(
        deep.matches('/').count() + 1,
        limit + 1,
        "marker sits one below the limit"
    );
    let mut g = store.begin_step("deep").unwrap();
    store.commit(&mut g, StepDraft::default(), tree).unwrap();
    drop(g);
    let marker = envgit_store::entry_at(&store, &tree, deep)
        .unwrap()
        .unwrap();
    assert_eq!(marker.kind, EntryKind::Marker(MarkerReason::TooDeep));

    // fork materializes every level the snapshot has.
    let forked = tmp.path().join("fork");
    let t0 = std::time::Instant::now();
    fork(
        &store,
        &forked,
        &tmp.path().join("fs"),
        &ForkOptions {
            step: 1,
            replace_root_file: None,
            policy_hash: None,
            clone_from: None,
        },
    )
    .unwrap();
    eprintln!("fork of {limit} levels: {:?}", t0.elapsed());
    assert_eq!(chain_depth(&forked), limit);
    let f = (0..1000).map(|_| "d/").collect::<String>() + "f";
    assert_eq!(
        std::fs::read_to_string(forked.join(&f)).unwrap(),
        "level 1000\n"
    );

    // A later step works, and a rewind to the deep step restores it (the marker part is kept).
    std::fs::write(project.join("top"), "2").unwrap();
    remove_chain(&project);
    let (tree2, report2) = wt.full_scan(&store, None).unwrap();
    assert!(report2.too_deep.is_empty());
    let mut g = store.begin_step("after").unwrap();
    store.commit(&mut g, StepDraft::default(), tree2).unwrap();
    drop(g);
    let t0 = std::time::Instant::now();
    let opts = RewindOptions {
        target: 1,
        protected: &[],
        excludes: &Excludes::none(),
        policy_hash: None,
        known_changes: None,
    };
    let mut g = store.begin_step("rewind").unwrap();
    let start = rewind_start(&store, &mut wt, &g, &opts).unwrap();
    if let Some(d) = start.record_first.clone() {
        store.commit(&mut g, d, start.current).unwrap();
    }
    let done = rewind_apply(&store, &mut wt, start, &opts).unwrap();
    store.commit(&mut g, done.draft, done.tree).unwrap();
    drop(g);
    eprintln!("rewind of {limit} levels: {:?}", t0.elapsed());
    assert_eq!(chain_depth(&project), limit);
    assert_eq!(std::fs::read_to_string(project.join("top")).unwrap(), "1");
    let (tree3, _) = wt.full_scan(&store, None).unwrap();
    assert_eq!(
        envgit_store::diff_trees(&store, Some(&tree), Some(&tree3))
            .unwrap()
            .len(),
        1
    );
    envgit_store::fsck(&store, None)
        .map(|r| assert!(r.is_clean()))
        .unwrap();

    remove_chain(&project);
    remove_chain(&forked);
}
