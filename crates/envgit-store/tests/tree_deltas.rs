//! Trees stored as deltas against their directory's previous version: they round-trip whatever
//! the shape, their chains stay bounded, fsck checks a delta by its id once resolved, gc keeps
//! the bases a live delta needs, and a store written before deltas existed still opens, rewinds
//! and takes new steps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use envgit_store::{
    EntryKind, Excludes, GcOptions, ObjectId, ObjectKind, RestoreOptions, RewindOptions,
    ScanConfig, StepDraft, Store, Tree, TreeEntry, WorkTree,
};

/// A file entry whose content (stored, so fsck finds it) names the file and its version.
fn file_entry(store: &Store, name: &str, version: u64) -> TreeEntry {
    let content = format!("{name} {version}");
    TreeEntry {
        name: name.as_bytes().to_vec(),
        kind: EntryKind::File,
        mode: 0o644,
        size: content.len() as u64,
        id: store.put(ObjectKind::Blob, content.as_bytes()).unwrap(),
    }
}

/// A directory of `n` files, all at version 0.
fn directory(store: &Store, n: usize) -> Tree {
    Tree {
        entries: (0..n)
            .map(|i| file_entry(store, &format!("f{i:06}"), 0))
            .collect(),
    }
}

#[macro_use]
mod support;
use support::backends::{Backend, reopen};

fn new_store(tmp: &Path, backend: Backend) -> Store {
    let root = tmp.join("p");
    std::fs::create_dir_all(&root).unwrap();
    backend.create(&tmp.join("s"), &root)
}

fn commit(store: &mut Store, tree: ObjectId) -> u64 {
    let mut g = store.begin_step("t").unwrap();
    let step = store.commit(&mut g, StepDraft::default(), tree).unwrap();
    step.number
}

fn stored_len(store: &Store, id: &ObjectId) -> u32 {
    store.object_info(id).unwrap().stored_len
}

on_every_backend!(
    a_huge_directory_edited_stores_small_deltas_and_reads_back_cold,
    chains_are_bounded_and_every_version_reads_back
);

fn a_huge_directory_edited_stores_small_deltas_and_reads_back_cold(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = new_store(tmp.path(), backend);
    let mut tree = directory(&store, 50_000);
    let first = store.put_tree(&tree, None).unwrap();
    commit(&mut store, first);
    let mut versions = vec![(first, tree.clone())];
    for v in 1..=5u64 {
        let i = (v as usize * 9_973) % tree.entries.len();
        let name = String::from_utf8(tree.entries[i].name.clone()).unwrap();
        tree.entries[i] = file_entry(&store, &name, v);
        let prev = versions.last().unwrap().0;
        let id = store.put_tree(&tree, Some(&prev)).unwrap();
        commit(&mut store, id);
        versions.push((id, tree.clone()));
    }
    let whole = stored_len(&store, &first);
    for (id, _) in &versions[1..] {
        let len = stored_len(&store, id);
        assert!(
            len < 512,
            "a one-entry edit of a 50,000-entry directory stored {len} bytes (whole: {whole})"
        );
    }
    // A fresh open has nothing cached: every version is resolved from the backend.
    let cold = reopen(&store);
    for (depth, (id, t)) in versions.iter().enumerate().rev() {
        assert_eq!(&cold.read_tree(id).unwrap(), t);
        assert_eq!(usize::from(cold.tree_depth(id).unwrap()), depth);
    }
}

fn chains_are_bounded_and_every_version_reads_back(backend: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let mut store = new_store(tmp.path(), backend);
    let max = usize::from(Store::MAX_DELTA_CHAIN);
    let mut tree = directory(&store, 300);
    let mut ids: Vec<ObjectId> = Vec::new();
    let mut trees = Vec::new();
    for v in 0..(3 * max + 5) as u64 {
        let i = v as usize % tree.entries.len();
        let name = String::from_utf8(tree.entries[i].name.clone()).unwrap();
        tree.entries[i] = file_entry(&store, &name, v + 1);
        // Entries come and go too, not only change.
        if v % 7 == 3 {
            let gone = format!("extra{}", v.wrapping_sub(7));
            tree.entries.retain(|e| e.name != gone.as_bytes());
            let extra = file_entry(&store, &format!("extra{v}"), v);
            let at = tree.entries.partition_point(|e| e.name < extra.name);
            tree.entries.insert(at, extra);
        }
        let id = store.put_tree(&tree, ids.last()).unwrap();
        ids.push(id);
        trees.push(tree.clone());
        if v % 10 == 9 {
            commit(&mut store, id);
        }
    }
    commit(&mut store, *ids.last().unwrap());
    let cold = reopen(&store);
    let depths: Vec<usize> = ids
        .iter()
        .map(|id| usize::from(cold.tree_depth(id).unwrap()))
        .collect();
    assert!(depths.iter().all(|&d| d <= max), "{depths:?}");
    // Each version is one deeper than the last, until the bound starts a whole one.
    for w in depths.windows(2) {
        assert!(w[1] == w[0] + 1 || (w[0] == max && w[1] == 0), "{depths:?}");
    }
    assert_eq!(
        depths.iter().filter(|&&d| d == 0).count(),
        depths.len().div_ceil(max + 1)
    );
    // Read newest first on a cold store: the longest chains resolve from the backend.
    let cold = reopen(&store);
    for (id, t) in ids.iter().zip(&trees).rev() {
        assert_eq!(&cold.read_tree(id).unwrap(), t);
    }
    let report = envgit_store::fsck(&cold, None).unwrap();
    assert!(report.is_clean(), "{:?}", report.bad_objects);
}

/// Where a record's content starts in its pack: after the 52-byte header.
const RECORD_HEADER: u64 = 52;

#[test]
fn fsck_finds_a_delta_that_resolves_to_the_wrong_bytes() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let mut store = new_store(tmp.path(), Backend::Packs);
    let mut tree = directory(&store, 200);
    let mut ids = Vec::new();
    let mut trees = Vec::new();
    for v in 0..5u64 {
        let name = format!("f{:06}", v * 17);
        let i = tree
            .entries
            .iter()
            .position(|e| e.name == name.as_bytes())
            .unwrap();
        tree.entries[i] = file_entry(&store, &name, v + 1);
        let id = store.put_tree(&tree, ids.last()).unwrap();
        commit(&mut store, id);
        ids.push(id);
        trees.push(tree.clone());
    }
    let report = envgit_store::fsck(&store, None).unwrap();
    assert!(report.is_clean(), "{:?}", report.bad_objects);
    // Change one byte of step 3's delta and make its checksum match again: only resolving it
    // and hashing the result can tell.
    let victim = ids[2];
    assert_eq!(store.tree_depth(&victim).unwrap(), 2);
    let loc = store.packs().unwrap().index()[&victim];
    let pack = store.packs_dir().join(format!("{:016x}.pack", loc.pack));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&pack)
        .unwrap();
    let mut rec = vec![0u8; loc.record_len() as usize];
    f.read_exact_at(&mut rec, loc.offset).unwrap();
    let body_end = rec.len() - 4;
    // A byte whose change still decompresses (a literal), to other bytes.
    let frame_at = (RECORD_HEADER + 33) as usize;
    let base_raw = trees[1].encode();
    let raw = trees[2].encode();
    let decodes_to = |frame: &[u8]| {
        zstd::bulk::Decompressor::with_dictionary(&base_raw)
            .unwrap()
            .decompress(frame, raw.len())
            .ok()
    };
    assert_eq!(decodes_to(&rec[frame_at..body_end]).as_ref(), Some(&raw));
    let at = (frame_at..body_end)
        .rev()
        .find(|&i| {
            let mut frame = rec[frame_at..body_end].to_vec();
            frame[i - frame_at] ^= 0x01;
            decodes_to(&frame).is_some_and(|out| out != raw)
        })
        .expect("a literal byte in the delta");
    rec[at] ^= 0x01;
    let crc = crc32c::crc32c(&rec[..body_end]);
    rec[body_end..].copy_from_slice(&crc.to_le_bytes());
    f.write_all_at(&rec, loc.offset).unwrap();
    drop(f);

    let cold = Store::open(store.dir()).unwrap();
    let report = envgit_store::fsck(&cold, None).unwrap();
    assert!(!report.is_clean());
    // The damaged delta, and the deltas built on it, are bad; their bases are not.
    for id in &ids[2..] {
        assert!(
            report.bad_objects.contains_key(&id.hex()),
            "{id:?} not reported: {:?}",
            report.bad_objects
        );
    }
    assert_eq!(report.bad_objects.len(), 3, "{:?}", report.bad_objects);
    let why = &report.bad_objects[&victim.hex()];
    assert!(why.contains("does not match its id"), "{why}");
    let broken: Vec<u64> = report.broken_steps.keys().copied().collect();
    assert_eq!(broken, vec![3, 4, 5]);
}

/// Every path under `root` with what it is: content, link target or directory, and mode.
fn listing(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let rel = rel.join(e.file_name());
            let path = root.join(&rel);
            let m = std::fs::symlink_metadata(&path).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&path).unwrap().display())
            } else if m.is_dir() {
                todo.push(rel.clone());
                format!("dir {:o}", m.mode() & 0o777)
            } else {
                format!(
                    "file {:o} {}",
                    m.mode() & 0o777,
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap())
                )
            };
            out.insert(rel.display().to_string(), what);
        }
    }
    out
}

/// The store an envgit of format 1 wrote (tests/fixtures/make-format1-store.sh), copied.
fn format1_store(tmp: &Path) -> PathBuf {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format1-store");
    let dir = tmp.join("old-store");
    for sub in ["packs", "inflight", "tmp"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    for name in ["store.json", "journal"] {
        std::fs::copy(fixture.join(name), dir.join(name)).unwrap();
    }
    for e in std::fs::read_dir(fixture.join("packs")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("packs").join(e.file_name())).unwrap();
    }
    dir
}

#[test]
fn a_format_1_store_opens_rewinds_and_takes_delta_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = format1_store(tmp.path());
    let mut store = Store::open(&dir).unwrap();
    assert_eq!(store.format(), 1);
    assert_eq!(store.step_count(), 3);
    assert!(envgit_store::fsck(&store, None).unwrap().is_clean());

    // Step 3 as the project, then rewound to step 1 through the store.
    let root = tmp.path().join("p");
    std::fs::create_dir(&root).unwrap();
    let opts = RestoreOptions {
        excludes: &Excludes::none(),
        protected: &[],
        clone_from: None,
    };
    let fd = std::fs::File::open(&root).unwrap();
    envgit_store::restore(
        &store,
        fd.as_fd(),
        None,
        &store.step_tree(3).unwrap(),
        &opts,
    )
    .unwrap();
    let at3 = listing(&root);
    assert_eq!(at3["src/f21"], "file 644 file 21 version 3\n");
    assert_eq!(at3["src/f07"], "file 644 file 07 version 2\n");
    assert_eq!(at3["src/f30"], "file 600 file 30 version 1\n");
    assert_eq!(at3["src/run.sh"], "file 755 #!/bin/sh\necho hi\n");
    assert_eq!(at3["src/link"], "link f00");
    assert_eq!(at3["empty"], "dir 755");
    assert!(!at3.contains_key("src/f13"));

    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    let ropts = RewindOptions {
        target: 1,
        protected: &[],
        excludes: &Excludes::none(),
        policy_hash: None,
        known_changes: None,
    };
    let mut g = store.begin_step("rewind").unwrap();
    let start = envgit_store::rewind_start(&store, &mut wt, &g, &ropts).unwrap();
    assert!(start.record_first.is_none(), "the tree is step 3's");
    let done = envgit_store::rewind_apply(&store, &mut wt, start, &ropts).unwrap();
    store.commit(&mut g, done.draft, done.tree).unwrap();
    drop(g);
    let at1 = listing(&root);
    assert_eq!(at1["src/f13"], "file 644 file 13 version 1\n");
    assert_eq!(at1["src/f21"], "file 644 file 21 version 1\n");
    assert_eq!(at1["src/f30"], "file 644 file 30 version 1\n");
    assert!(!at1.contains_key("src/new.txt"));
    assert_eq!(store.step_tree(4).unwrap(), store.step_tree(1).unwrap());
    assert_eq!(store.format(), 1, "nothing new was written yet");

    // A new step: the edited directory's tree is a delta against the format-1 tree.
    std::fs::write(root.join("src/f40"), "file 40 version 2\n").unwrap();
    let (tree, _) = wt.full_scan(&store, None).unwrap();
    commit(&mut store, tree);
    let src = store.read_tree(&tree).unwrap().get(b"src").unwrap().id;
    assert_eq!(store.tree_depth(&src).unwrap(), 1);
    assert_eq!(store.format(), 2);

    let again = Store::open(&dir).unwrap();
    assert_eq!(again.format(), 2);
    assert_eq!(again.step_count(), 5);
    assert!(envgit_store::fsck(&again, None).unwrap().is_clean());
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("store.json")).unwrap()).unwrap();
    assert_eq!(json["format"], 2);
    assert_eq!(
        json["project"], "/tmp/fx/p",
        "the rest of store.json is kept"
    );
}

#[test]
fn gc_keeps_the_bases_of_live_deltas() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    for i in 0..150 {
        std::fs::write(root.join(format!("d/f{i:03}")), format!("{i} v0\n")).unwrap();
    }
    std::fs::write(root.join("d/e/x"), "x").unwrap();
    let dir = tmp.path().join("s");
    let mut store = Store::create(&dir, &root).unwrap();
    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    let mut expected: BTreeMap<u64, BTreeMap<String, String>> = BTreeMap::new();
    for v in 0..30u64 {
        let name = format!("d/f{:03}", (v * 37) % 150);
        std::fs::write(root.join(&name), format!("{name} v{}\n", v + 1)).unwrap();
        if v % 5 == 0 {
            std::fs::write(root.join(format!("d/e/new{v}")), "n").unwrap();
        }
        let (tree, _) = wt.full_scan(&store, None).unwrap();
        let n = commit(&mut store, tree);
        expected.insert(n, listing(&root));
    }
    let d_of = |s: &Store, n: u64| {
        let t = s.read_tree(&s.step_tree(n).unwrap()).unwrap();
        t.get(b"d").unwrap().id
    };
    assert!(store.tree_depth(&d_of(&store, 30)).unwrap() > 5);

    // A budget nothing fits in: every step but the newest 4 is pruned, packs compacted.
    let report = envgit_store::gc(
        &mut store,
        &GcOptions {
            budget: 1,
            keep_recent: 4,
            purge: Vec::new(),
        },
    )
    .unwrap();
    assert!(report.pruned_steps.len() >= 20, "{report:?}");
    assert!(report.objects_dropped > 0, "{report:?}");
    assert!(report.packs_compacted > 0, "{report:?}");

    let cold = Store::open(&dir).unwrap();
    let fsck = envgit_store::fsck(&cold, None).unwrap();
    assert!(fsck.is_clean(), "{fsck:?}");
    let kept: Vec<u64> = cold
        .steps()
        .unwrap()
        .iter()
        .filter(|s| s.tree.is_some())
        .map(|s| s.number)
        .collect();
    assert_eq!(kept, vec![27, 28, 29, 30]);
    // The kept steps still sit on deltas whose bases belonged to pruned steps.
    assert!(cold.tree_depth(&d_of(&cold, 27)).unwrap() > 5);
    for n in kept {
        let out = tmp.path().join(format!("out{n}"));
        std::fs::create_dir(&out).unwrap();
        let fd = std::fs::File::open(&out).unwrap();
        let opts = RestoreOptions {
            excludes: &Excludes::none(),
            protected: &[],
            clone_from: None,
        };
        envgit_store::restore(&cold, fd.as_fd(), None, &cold.step_tree(n).unwrap(), &opts).unwrap();
        assert_eq!(listing(&out), expected[&n], "step {n}");
    }
    // A second gc compacts again without losing a base.
    drop(cold);
    let mut store = Store::open(&dir).unwrap();
    envgit_store::gc(
        &mut store,
        &GcOptions {
            budget: 1,
            keep_recent: 2,
            purge: Vec::new(),
        },
    )
    .unwrap();
    let cold = Store::open(&dir).unwrap();
    assert!(envgit_store::fsck(&cold, None).unwrap().is_clean());
    assert_eq!(
        cold.read_tree(&cold.step_tree(30).unwrap())
            .unwrap()
            .entries
            .len(),
        1
    );
}
