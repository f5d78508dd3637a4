use super::codec::{decode_base, encode_base};
use super::*;
use crate::worktree::{DirState, ScanConfig};

/// A small tree (`d/e/f`, `d/g`, the link `d/l`) scanned, and its index encoded as a base.
fn scanned_small_tree() -> (tempfile::TempDir, WorkTree, Vec<u8>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("d/e/f"), "f").unwrap();
    std::fs::write(root.join("d/g"), "g").unwrap();
    std::os::unix::fs::symlink("x", root.join("d/l")).unwrap();
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    wt.full_scan(&store, None).unwrap();
    let bytes = encode_base(&wt.dirs, "", 7).bytes;
    (tmp, wt, bytes)
}

#[test]
fn round_trip_and_every_damage_is_refused() {
    let (_tmp, wt, bytes) = scanned_small_tree();
    let decode = |b: &[u8], fp: &str| decode_base(b, fp).map(|(_, dirs, _)| dirs);
    let dirs = decode(&bytes, "").unwrap();
    assert_eq!(dirs.len(), wt.dirs.len());
    for (rel, d) in wt.dirs.iter() {
        let got = dirs.get(rel).expect("decoded");
        assert_eq!((got.tree, got.stamp_ns), (d.tree, d.stamp_ns));
        let pairs = got.entries.iter().zip(&d.entries);
        assert!(
            pairs
                .into_iter()
                .all(|(a, b)| a.entry == b.entry && a.stat == b.stat)
        );
    }
    assert!(decode(&bytes, "another configuration").is_none());
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 1;
        assert!(decode(&bad, "").is_none(), "byte {i} flipped");
        assert!(decode(&bytes[..i], "").is_none(), "cut at {i}");
    }
}

/// What a walk reads of a loaded record without decoding it (its tree, whether its entries are
/// exactly some others) and what it decodes for one read agree with the decoded state, and a
/// difference in any field of any entry is a difference.
#[test]
fn a_record_read_without_decoding_says_what_its_decoded_state_says() {
    let (_tmp, wt, bytes) = scanned_small_tree();
    let (_, loaded, _) = decode_base(&bytes, "").unwrap();
    for (rel, d) in wt.dirs.iter() {
        assert_eq!(loaded.tree_of(rel), Some(d.tree));
        assert_eq!(loaded.stamp_if_same(rel, &d.entries), Some(d.stamp_ns));
        assert!(matches!(loaded.peek(rel), Some(std::borrow::Cow::Owned(_))));
        let peeked = loaded.peek(rel).unwrap();
        assert_eq!((peeked.tree, peeked.stamp_ns), (d.tree, d.stamp_ns));
        assert_eq!(peeked.entries, d.entries);
        let changes: [fn(&mut crate::worktree::CachedEntry); 8] = [
            |e| e.entry.name.push(b'x'),
            |e| e.entry.mode ^= 1,
            |e| e.entry.size += 1,
            |e| e.entry.id.0[0] ^= 1,
            |e| e.stat.mtime_ns += 1,
            |e| e.stat.ino += 1,
            |e| e.stat.nlink += 1,
            |e| e.stat.ctime_ns += 1,
        ];
        for i in 0..d.entries.len() {
            for change in changes {
                let mut other = d.entries.clone();
                change(&mut other[i]);
                assert_eq!(loaded.stamp_if_same(rel, &other), None, "{rel:?} entry {i}");
            }
        }
        let mut fewer = d.entries.clone();
        if fewer.pop().is_some() {
            assert_eq!(loaded.stamp_if_same(rel, &fewer), None);
        }
        let mut more = d.entries.clone();
        more.extend(d.entries.last().cloned());
        assert_eq!(loaded.stamp_if_same(rel, &more), None);
    }
    // Unknown directories are unknown; a decoded one is lent, not decoded again.
    assert_eq!(loaded.tree_of(b"nowhere"), None);
    let _ = loaded.get(b"d");
    assert!(matches!(
        loaded.peek(b"d"),
        Some(std::borrow::Cow::Borrowed(_))
    ));
    assert_eq!(
        loaded.stamp_if_same(b"d", &wt.dirs.get(b"d").unwrap().entries),
        Some(wt.dirs.get(b"d").unwrap().stamp_ns)
    );
}

/// Every file of `root`, its mtime set an hour back; then a wait until the ctime that set
/// moved is older than the racy margin too, so a scan trusts what it records.
fn age_files(root: &Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for e in walk_files(root) {
        std::fs::File::options()
            .write(true)
            .open(&e)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    std::thread::sleep(crate::worktree::racy_settle_time(root));
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// The inodes of the index's base and tail: a file written again has a new one.
fn inodes(store: &Store) -> (Option<u64>, Option<u64>) {
    (
        inode(&store.stat_cache_path()),
        inode(&store.stat_tail_path()),
    )
}

/// A scan that finds nothing changed keeps every directory's stamp, so the index it would
/// save is the one on disk: not written again. An edit that keeps size and mtime is still
/// found (its ctime moved), and the index is written.
#[test]
fn an_unchanged_project_does_not_rewrite_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("d/e/f"), "ffff").unwrap();
    std::fs::write(root.join("g"), "gggg").unwrap();
    age_files(&root);
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    let scan = |store: &Store| {
        let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
        wt.load_index(store);
        let (tree, _) = wt.full_scan(store, None).unwrap();
        wt.save_index(store).unwrap();
        tree
    };
    let first = scan(&store);
    // Twice: the first reload may settle what the first scan found too recent (the
    // directories' own stamps), after that nothing moves.
    scan(&store);
    let settled = inodes(&store);
    assert_eq!(scan(&store), first);
    assert_eq!(
        inodes(&store),
        settled,
        "an unchanged scan rewrote the index"
    );

    let f = root.join("d/e/f");
    let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
    std::fs::write(&f, "FFFF").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let edited = scan(&store);
    assert_ne!(edited, first, "an edit keeping size and mtime was missed");
    assert_ne!(
        inodes(&store),
        settled,
        "the index of a changed tree was not written"
    );
    assert_eq!(scan(&store), edited);
}

/// A project of `n` directories with twelve aged files each (`a`, `b` and ten more), scanned
/// and saved twice (the second save settles what the first found too recent), and its store.
fn settled_project(n: usize) -> (tempfile::TempDir, std::path::PathBuf, Store) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("p");
    for i in 0..n {
        std::fs::create_dir_all(root.join(format!("d{i}"))).unwrap();
        std::fs::write(root.join(format!("d{i}/a")), format!("a{i}")).unwrap();
        std::fs::write(root.join(format!("d{i}/b")), format!("b{i}")).unwrap();
        for j in 0..10 {
            std::fs::write(root.join(format!("d{i}/f{j}")), format!("f{i}.{j}")).unwrap();
        }
    }
    age_files(&root);
    let store = Store::create(&tmp.path().join("s"), &root).unwrap();
    scan_and_save(&root, &store);
    scan_and_save(&root, &store);
    (tmp, root, store)
}

/// A one-shot command's use of the index: load, full scan, save. The state it saved.
fn scan_and_save(root: &Path, store: &Store) -> WorkTree {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    wt.load_index(store);
    wt.full_scan(store, None).unwrap();
    wt.save_index(store).unwrap();
    wt
}

/// The state a new command loads from the store's index.
fn loaded(root: &Path, store: &Store) -> WorkTree {
    let mut wt = WorkTree::new(root, ScanConfig::default(), None).unwrap();
    wt.load_index(store);
    wt
}

fn same_dir(a: &DirState, b: &DirState) -> bool {
    a.tree == b.tree
        && a.stamp_ns == b.stamp_ns
        && a.entries.len() == b.entries.len()
        && a.entries
            .iter()
            .zip(&b.entries)
            .all(|(x, y)| x.entry == y.entry && x.stat == y.stat)
}

fn assert_same_state(a: &WorkTree, b: &WorkTree, what: &str) {
    let mut keys_a: Vec<&Vec<u8>> = a.dirs.keys().collect();
    let mut keys_b: Vec<&Vec<u8>> = b.dirs.keys().collect();
    keys_a.sort();
    keys_b.sort();
    assert_eq!(keys_a, keys_b, "{what}: directories differ");
    for (rel, d) in a.dirs.iter() {
        assert!(
            same_dir(d, b.dirs.get(rel).expect("in both")),
            "{what}: {} differs",
            String::from_utf8_lossy(rel)
        );
    }
}

/// An edit that keeps the file's size and sets its mtime back an hour: only the ctime moved.
/// Then a wait until that ctime is older than the racy margin, so the scan that finds the edit
/// also vouches for it.
fn aged_edit(path: &Path, content: &str) {
    std::fs::write(path, content).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    std::thread::sleep(crate::worktree::racy_settle_time(path.parent().unwrap()));
}

/// A step that changes one directory of many writes a tail with that directory, and leaves
/// the base alone; a new command loads the base and the tail into the state that was saved.
#[test]
fn a_small_change_writes_a_tail_over_the_same_base() {
    let (_tmp, root, store) = settled_project(40);
    let (base, tail) = inodes(&store);
    assert!(base.is_some() && tail.is_none(), "{base:?} {tail:?}");
    aged_edit(&root.join("d7/a"), "A7");
    let saved = scan_and_save(&root, &store);
    let (base_after, tail_after) = inodes(&store);
    assert_eq!(
        base_after, base,
        "the base was written again for one directory"
    );
    assert!(tail_after.is_some(), "no tail written");
    let tail_len = std::fs::metadata(store.stat_tail_path()).unwrap().len();
    let base_len = std::fs::metadata(store.stat_cache_path()).unwrap().len();
    assert!(
        tail_len * 10 < base_len,
        "tail {tail_len} B, base {base_len} B"
    );
    assert_same_state(&saved, &loaded(&root, &store), "base and tail");

    // The loaded state vouches for the edit: nothing is read again, and the tree is the same.
    let mut again = loaded(&root, &store);
    let (tree, report) = again.full_scan(&store, None).unwrap();
    assert_eq!(
        report.hashed, 0,
        "files read again after loading base and tail"
    );
    let mut cold = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    assert_eq!(cold.full_scan(&store, None).unwrap().0, tree);

    // A second edit elsewhere: the tail holds both directories, the base still the same.
    aged_edit(&root.join("d21/b"), "B21");
    let saved = scan_and_save(&root, &store);
    assert_eq!(inodes(&store).0, base);
    assert_same_state(&saved, &loaded(&root, &store), "a tail written twice");
}

/// A directory that is gone is named in the tail: loading does not bring it back.
#[test]
fn a_removed_directory_stays_removed() {
    let (_tmp, root, store) = settled_project(40);
    let base = inodes(&store).0;
    std::fs::remove_dir_all(root.join("d12")).unwrap();
    let saved = scan_and_save(&root, &store);
    assert_eq!(inodes(&store).0, base);
    let back = loaded(&root, &store);
    assert!(!back.dirs.contains_key(b"d12".as_slice()));
    assert_same_state(&saved, &back, "a removal in the tail");
}

/// Once the tail would hold more than a quarter of the base, a new base is written and the
/// tail goes.
#[test]
fn a_large_change_writes_a_new_base() {
    let (_tmp, root, store) = settled_project(12);
    let base = inodes(&store).0;
    for i in 0..6 {
        aged_edit(&root.join(format!("d{i}/a")), &format!("A{i}"));
    }
    let saved = scan_and_save(&root, &store);
    let (base_after, tail_after) = inodes(&store);
    assert_ne!(
        base_after, base,
        "half the directories changed, but no new base"
    );
    assert_eq!(tail_after, None, "a tail left beside a new base");
    assert_same_state(&saved, &loaded(&root, &store), "a new base");
}

/// A tail made over another base than the one on disk (another process wrote a new base since)
/// is ignored: the state is the base's alone.
#[test]
fn a_tail_over_another_base_is_ignored() {
    let (_tmp, root, store) = settled_project(40);
    aged_edit(&root.join("d3/a"), "A3");
    scan_and_save(&root, &store);
    let old_tail = std::fs::read(store.stat_tail_path()).unwrap();
    // A process that never loaded the index writes a whole base.
    let mut other = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    other.full_scan(&store, None).unwrap();
    other.save_index(&store).unwrap();
    assert!(
        !store.stat_tail_path().exists(),
        "the old tail was left beside the new base"
    );
    let base_alone = loaded(&root, &store);
    std::fs::write(store.stat_tail_path(), &old_tail).unwrap();
    assert_same_state(&base_alone, &loaded(&root, &store), "a foreign tail");
}

/// A damaged tail is ignored whatever byte is hit: the state is the base's alone, and a scan
/// from it still finds the edit the tail recorded.
#[test]
fn a_damaged_tail_is_ignored() {
    let (_tmp, root, store) = settled_project(8);
    let base_alone = loaded(&root, &store);
    aged_edit(&root.join("d5/b"), "B5");
    scan_and_save(&root, &store);
    let tail = std::fs::read(store.stat_tail_path()).unwrap();
    for i in 0..tail.len() {
        let mut bad = tail.clone();
        bad[i] ^= 1;
        std::fs::write(store.stat_tail_path(), &bad).unwrap();
        assert_same_state(&base_alone, &loaded(&root, &store), &format!("byte {i}"));
        std::fs::write(store.stat_tail_path(), &tail[..i]).unwrap();
        assert_same_state(&base_alone, &loaded(&root, &store), &format!("cut at {i}"));
    }
    std::fs::write(store.stat_tail_path(), &tail).unwrap();
    let mut from_base = base_alone;
    let (tree, report) = from_base.full_scan(&store, None).unwrap();
    assert_eq!(
        report.hashed, 1,
        "the edit under a damaged tail was not read"
    );
    let mut cold = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    assert_eq!(cold.full_scan(&store, None).unwrap().0, tree);
}

/// Every entry as `visit_entries` gives it, sorted.
fn visited(
    wt: &WorkTree,
) -> Vec<(
    Vec<u8>,
    Vec<u8>,
    crate::tree::EntryKind,
    crate::worktree::StatKey,
)> {
    let mut out = Vec::new();
    wt.visit_entries(
        |_| false,
        |dir, name, kind, stat| out.push((dir.to_vec(), name.to_vec(), kind, *stat)),
    );
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    out
}

/// A loaded index keeps its records as bytes until a directory is used: the sandbox's facts
/// read them as they are, a whole base written from them is the same bytes as one written
/// from decoded states, and a save after one directory was decoded and changed writes a
/// tail of that directory alone.
#[test]
fn a_loaded_index_reads_from_its_records_what_decoded_states_hold() {
    let (_tmp, root, store) = settled_project(25);
    let scanned = scan_and_save(&root, &store);
    let mut lazy = loaded(&root, &store);
    assert_eq!(visited(&lazy), visited(&scanned));
    let undecoded = |wt: &WorkTree| {
        wt.dirs
            .keys()
            .filter(|rel| matches!(wt.dirs.held(rel), Some(Held::Record(_))))
            .count()
    };
    assert_eq!(
        undecoded(&lazy),
        lazy.dirs.len(),
        "visiting decoded records"
    );
    let fingerprint = scanned.config().fingerprint.clone();
    assert_eq!(
        encode_base(&lazy.dirs, &fingerprint, 9).bytes,
        encode_base(&scanned.dirs, &fingerprint, 9).bytes
    );
    assert_same_state(&lazy, &scanned, "decoded on use");

    let (base, tail) = inodes(&store);
    let lazy_again = loaded(&root, &store);
    lazy_again.save_index(&store).unwrap();
    assert_eq!(inodes(&store), (base, tail), "nothing changed, yet written");
    let d3 = lazy.dirs.get_mut(b"d3").unwrap();
    d3.stamp_ns += 1;
    lazy.save_index(&store).unwrap();
    assert_eq!(inodes(&store).0, base, "the base was written again");
    let tail_bytes = std::fs::read(store.stat_tail_path()).unwrap();
    let fresh = loaded(&root, &store);
    assert_eq!(
        fresh.dirs.get(b"d3").unwrap().stamp_ns,
        d3_stamp(&scanned) + 1
    );
    assert_same_state(&fresh, &lazy, "saved after one change");
    assert!(tail_bytes.len() < 2048, "tail of {} B", tail_bytes.len());
}

fn d3_stamp(wt: &WorkTree) -> i64 {
    wt.dirs.get(b"d3").unwrap().stamp_ns
}

/// A base that passed its checks is loaded on a note's word for the rest of the boot (the
/// same state), but damaged in place afterwards (its stamps move) it is checked again and
/// ignored: every seventh byte flipped in turn, as a crash could leave it.
#[test]
fn a_base_damaged_after_it_was_checked_is_checked_again_and_ignored() {
    let (_tmp, root, store) = settled_project(4);
    let path = store.dir().join("stat.cache");
    let note = store.dir().join("stat.cache.checked");
    let _ = std::fs::remove_file(&note);
    let checked = loaded(&root, &store);
    assert!(!checked.dirs.is_empty());
    assert!(note.exists(), "no note after the base's checks");
    assert_same_state(&checked, &loaded(&root, &store), "on the note's word");

    let base = std::fs::read(&path).unwrap();
    let empty = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
    for i in (0..base.len()).step_by(7) {
        let mut bad = base.clone();
        bad[i] ^= 1;
        let mut f = std::fs::File::options().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, &bad).unwrap();
        // Moved by hand: within one tick of the file clock a write can leave the stamps.
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(i as u64))
            .unwrap();
        drop(f);
        assert_same_state(&empty, &loaded(&root, &store), &format!("byte {i}"));
    }
}
