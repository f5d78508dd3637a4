//! The working tree as the store last saw it: per directory, its entries with their stat data
//! and content ids, and its tree id. A full scan visits every entry (an unchanged file costs
//! one `lstat`, thanks to the stat cache); a rescan of a set of dirty directories (from the
//! watcher, or from a restore that knows what it wrote) costs O(changed).
//!
//! Racy timestamps (git's rule, `racy`): a cached entry is trusted only if it last changed
//! clearly before the start of the scan that recorded it. Otherwise the file is read again.
//!
//! `config` is what a scan captures, `entry` what is remembered per entry, `walk` the reading
//! of directories, `capture` the reading of files into the store, `report` what a scan tells.

mod capture;
mod config;
mod dir_map;
mod entry;
mod racy;
#[cfg(test)]
pub(crate) use racy::settle_time as racy_settle_time;
pub(crate) use racy::{COARSE_MARGIN_NS, RacyRule};
mod report;
mod sealed;
mod walk;

pub use config::{DEFAULT_MAX_FILE_SIZE, MAX_TREE_DEPTH, MAX_TREE_PATH, ScanConfig};
pub(crate) use dir_map::Held;
pub(crate) use dir_map::{DirMap, RecordCodec};
pub use entry::{CachedEntry, DirState, StatKey};
pub use report::{ScanProgress, ScanReport};

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rustix::io::Errno;

use crate::beneath::{self, join_rel};
use crate::budget::ScanBudget;
use crate::dirty::{DirChange, Dirty};
use crate::error::{IoContext, Result, StoreError};
use crate::id::ObjectId;
use crate::store::Store;
use crate::tree::EntryKind;

use walk::{Ctx, put_tree};
pub(crate) use walk::{PARALLEL_MIN_DIRS, now_ns};

/// Each directory's record checksum in a stat index's base, by relative path: known (a base
/// this process wrote), or summed from the loaded base's bytes when asked. A load sums no
/// record: the file's own checksum covers them, and a save asks only for the directories a
/// step used (summing every record again at each load was most of a step's user CPU at
/// 20,000 files).
#[derive(Default)]
pub(crate) struct RecordSums {
    records: HashMap<Vec<u8>, RecordSum, foldhash::fast::RandomState>,
    /// The loaded base, which `RecordSum::At` ranges point into.
    loaded: std::sync::Arc<crate::mapped::FileBytes>,
}

enum RecordSum {
    Known(u32),
    At(std::ops::Range<usize>),
}

impl RecordSums {
    /// The records of a base this process encoded, with their checksums.
    pub(crate) fn known(sums: impl IntoIterator<Item = (Vec<u8>, u32)>) -> Self {
        Self {
            records: sums
                .into_iter()
                .map(|(rel, crc)| (rel, RecordSum::Known(crc)))
                .collect(),
            loaded: std::sync::Arc::default(),
        }
    }

    /// The records of a loaded base: where each is in `loaded`.
    pub(crate) fn at(
        loaded: std::sync::Arc<crate::mapped::FileBytes>,
        ranges: impl IntoIterator<Item = (Vec<u8>, std::ops::Range<usize>)>,
    ) -> Self {
        Self {
            records: ranges
                .into_iter()
                .map(|(rel, range)| (rel, RecordSum::At(range)))
                .collect(),
            loaded,
        }
    }

    pub(crate) fn contains(&self, rel: &[u8]) -> bool {
        self.records.contains_key(rel)
    }

    /// The checksum of `rel`'s record, summed now if it was loaded.
    pub(crate) fn get(&self, rel: &[u8]) -> Option<u32> {
        match self.records.get(rel)? {
            RecordSum::Known(crc) => Some(*crc),
            RecordSum::At(range) => self.loaded.get(range.clone()).map(crc32c::crc32c),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.records.keys()
    }
}

/// What the store's stat index on disk holds, as this state last loaded or saved it
/// ([`crate::stat_index`]): its base's id and record checksums, and its tail's summary.
pub(crate) struct IndexOnDisk {
    pub base_id: u64,
    /// The base file's bytes.
    pub base_len: usize,
    pub record_sums: RecordSums,
    pub tail: Option<u64>,
}

pub struct WorkTree {
    root: PathBuf,
    root_fd: OwnedFd,
    config: ScanConfig,
    pub(crate) dirs: DirMap,
    /// The store's directory, if it sits inside the project: never captured.
    skip: Option<(u64, u64)>,
    /// How recent a file may be before its recorded `lstat` no longer vouches for it.
    racy: racy::RacyRule,
    /// The store's stat index as loaded or last saved; `None` when neither happened (or the
    /// state came from another file), and the next save writes a whole base.
    pub(crate) index_on_disk: std::sync::Mutex<Option<IndexOnDisk>>,
}

impl WorkTree {
    pub fn new(root: &Path, config: ScanConfig, store_dir: Option<&Path>) -> Result<Self> {
        let root_fd = beneath::open_root(root).at(root)?;
        let skip = store_dir.and_then(|d| std::fs::metadata(d).ok()).map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        });
        let racy = racy::RacyRule::for_root(root_fd.as_fd());
        Ok(Self {
            root: root.to_path_buf(),
            root_fd,
            config,
            dirs: DirMap::default(),
            skip,
            racy,
            index_on_disk: std::sync::Mutex::new(None),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root_fd.as_fd()
    }

    pub fn config(&self) -> &ScanConfig {
        &self.config
    }

    pub fn root_tree(&self) -> Option<ObjectId> {
        self.dirs.get(b"".as_slice()).map(|d| d.tree)
    }

    /// Relative paths of every directory captured (for the watcher).
    pub fn dir_paths(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.dirs.keys()
    }

    /// `rel` is a directory of the tree as last read.
    pub fn has_dir(&self, rel: &[u8]) -> bool {
        self.dirs.contains_key(rel)
    }

    /// The `lstat` the index recorded for the file `dir/name`, when it holds that file with
    /// content `id` and that `lstat` still vouches for it (the racy-timestamp rule): a regular
    /// file that has exactly this `lstat` now holds that content.
    pub fn vouched_stat(&self, dir: &[u8], name: &[u8], id: &ObjectId) -> Option<StatKey> {
        let state = self.dirs.get(dir)?;
        let e = state.get(name)?;
        (e.entry.kind == EntryKind::File
            && e.entry.id == *id
            && e.stat.is_file()
            && !self.racy.is_racy(&e.stat, state.stamp_ns))
        .then_some(e.stat)
    }

    pub fn file_count(&self) -> usize {
        self.dirs.values().map(|d| d.entries.len()).sum()
    }

    /// Every entry of every directory the last scan read (or the loaded cache holds), with
    /// the relative path of its directory: the stat index, for what needs to know the
    /// project's files without walking it again (the sandbox's plan). Markers are included:
    /// an excluded or too-deep directory is a marker whose `stat` says it is a directory.
    /// A directory still as the loaded index's record is read from its bytes, not decoded;
    /// one `skip_dir` says yes to (by its relative path) is not read at all.
    pub fn visit_entries(
        &self,
        skip_dir: impl Fn(&[u8]) -> bool,
        mut f: impl FnMut(&[u8], &[u8], EntryKind, &StatKey),
    ) {
        for rel in self.dirs.keys() {
            if skip_dir(rel) {
                continue;
            }
            match self.dirs.held(rel) {
                Some(Held::Record(bytes)) => {
                    crate::stat_index::visit_record(bytes, |name, kind, stat| {
                        f(rel, name, kind, stat);
                    });
                }
                Some(Held::State(d)) => {
                    for e in &d.entries {
                        f(rel, &e.entry.name, e.entry.kind, &e.stat);
                    }
                }
                None => {}
            }
        }
    }

    /// Forget everything: the next scan reads every file.
    pub fn clear(&mut self) {
        self.dirs.clear();
    }

    /// Visit the whole tree; store what is new; return the root tree id.
    pub fn full_scan(
        &mut self,
        store: &Store,
        progress: Option<&ScanProgress>,
    ) -> Result<(ObjectId, ScanReport)> {
        let budget = ScanBudget::new(self.config.budget);
        let ctx = Ctx::new(self, store, &budget, progress);
        let root = beneath::open_dir_beneath(self.root_fd.as_fd(), b"").at(&self.root)?;
        let state = ctx.walk(root.as_fd(), b"", false)?;
        let id = state.tree;
        let mut report = ScanReport {
            unstable: ctx.unstable.into_inner().unwrap_or_default(),
            hashed: ctx.hashed.load(Ordering::Relaxed),
            kept_object_dirs: ctx.kept_object_dirs.load(Ordering::Relaxed),
            full: true,
            too_deep: ctx.too_deep.into_inner().unwrap_or_default(),
            setid: ctx.setid.into_inner().unwrap_or_default(),
            ..ScanReport::default()
        };
        report.take_budget(&budget);
        let mut out = ctx.out.into_inner().unwrap_or_default();
        out.insert(Vec::new(), state);
        self.dirs = out.into();
        Ok((id, report))
    }

    /// Re-read only `dirty` directories (and rebuild the trees above them). A dirty directory
    /// that is new is scanned whole. Falls back to a full scan when the state cannot be trusted.
    pub fn rescan(
        &mut self,
        store: &Store,
        dirty: &HashSet<Vec<u8>>,
    ) -> Result<(ObjectId, ScanReport)> {
        let mut changes = Dirty::default();
        changes.extend_whole(dirty.iter().cloned());
        self.update(store, &changes)
    }

    /// Bring the state up to date with `dirty`: a directory noted whole is listed again; one
    /// with names re-reads only those and keeps its other entries; the trees above are rebuilt.
    /// Falls back to a full scan when the state cannot be trusted.
    pub(crate) fn update(
        &mut self,
        store: &Store,
        dirty: &Dirty,
    ) -> Result<(ObjectId, ScanReport)> {
        if self.dirs.is_empty() || !self.root_tree().is_some_and(|t| store.has(&t)) {
            return self.full_scan(store, None);
        }
        // Every dirty directory and its ancestors, deepest first, so children are done before
        // the trees that name them.
        let mut todo: HashSet<Vec<u8>> = HashSet::new();
        for d in dirty.dirs() {
            let mut cur: &[u8] = d;
            loop {
                if !todo.insert(cur.to_vec()) {
                    break;
                }
                match beneath::parent_rel(cur) {
                    Some(p) => cur = p,
                    None => break,
                }
            }
        }
        let mut order: Vec<Vec<u8>> = todo.into_iter().collect();
        order.sort_by_key(|p| {
            std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count() + usize::from(!p.is_empty()))
        });
        let mut report = ScanReport::default();
        let budget = ScanBudget::new(self.config.budget);
        for rel in order {
            let parent_known = match beneath::parent_rel(&rel) {
                Some(p) => self.dirs.contains_key(p),
                None => true,
            };
            if !parent_known || dirty.under_fresh(&rel) {
                continue; // its parent is new or gone, or walks it anew: that covers it
            }
            let change = dirty.get(&rel);
            let known = self.dirs.contains_key(&rel);
            if change.is_none() && known {
                // Not dirty itself: only the ids of its subdirectories changed.
                let Some(mut state) = self.dirs.get(&rel).cloned() else {
                    continue;
                };
                for e in state.entries.iter_mut() {
                    if e.entry.kind == EntryKind::Dir
                        && let Some(child) = self.dirs.get(&join_rel(&rel, &e.entry.name))
                    {
                        e.entry.id = child.tree;
                    }
                }
                state.tree = put_tree(store, &budget, &state.entries, Some(&state.tree))?;
                self.dirs.insert(rel, state);
                continue;
            }
            let names = match change {
                Some(DirChange::Names { names, fresh }) if known => {
                    // What was known below a directory that came or went is walked anew.
                    for f in fresh {
                        self.remove_subtree(&join_rel(&rel, f));
                    }
                    Some(names)
                }
                _ => None,
            };
            let fd = match beneath::open_dir_rel(self.root_fd.as_fd(), &rel) {
                Ok(fd) => fd,
                // Gone, or no longer a directory: the parent's scan records what is there.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => {
                    self.remove_subtree(&rel);
                    continue;
                }
                Err(e) => return Err(e).at(&self.root.join(beneath::display_rel(&rel))),
            };
            let ctx = Ctx::new(self, store, &budget, None);
            let state = match names.zip(self.dirs.get(&rel)) {
                Some((names, prev)) => ctx.update_names(fd.as_fd(), &rel, prev, names)?,
                None => ctx.walk(fd.as_fd(), &rel, true)?,
            };
            let mut out = ctx.out.into_inner().unwrap_or_default();
            report
                .unstable
                .extend(ctx.unstable.into_inner().unwrap_or_default());
            report
                .too_deep
                .extend(ctx.too_deep.into_inner().unwrap_or_default());
            report
                .setid
                .extend(ctx.setid.into_inner().unwrap_or_default());
            report.hashed += ctx.hashed.load(Ordering::Relaxed);
            report.kept_object_dirs += ctx.kept_object_dirs.load(Ordering::Relaxed);
            // Drop states of subdirectories that no longer exist.
            let keep: HashSet<&[u8]> = state
                .entries
                .iter()
                .filter(|e| e.entry.kind == EntryKind::Dir)
                .map(|e| e.entry.name.as_slice())
                .collect();
            if let Some(old) = self.dirs.get(&rel) {
                let gone: Vec<Vec<u8>> = old
                    .entries
                    .iter()
                    .filter(|e| {
                        e.entry.kind == EntryKind::Dir && !keep.contains(e.entry.name.as_slice())
                    })
                    .map(|e| join_rel(&rel, &e.entry.name))
                    .collect();
                for g in gone {
                    self.remove_subtree(&g);
                }
            }
            out.insert(rel.clone(), state);
            report
                .new_dirs
                .extend(out.keys().filter(|k| !self.dirs.contains_key(k)).cloned());
            self.dirs.extend(out);
        }
        report.take_budget(&budget);
        let root = self
            .root_tree()
            .ok_or_else(|| StoreError::corrupt("the project root vanished during the scan"))?;
        Ok((root, report))
    }

    /// Forget what is known at `rel` and below (not the root): the next scan that meets a
    /// directory there walks it as a new one.
    pub(crate) fn forget_dir(&mut self, rel: &[u8]) {
        if !rel.is_empty() && self.dirs.contains_key(rel) {
            self.remove_subtree(rel);
        }
    }

    fn remove_subtree(&mut self, rel: &[u8]) {
        if rel.is_empty() {
            self.dirs.clear();
            return;
        }
        let prefix = join_rel(rel, b"");
        self.dirs.retain(|k| k != rel && !k.starts_with(&prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::walk::now_ns;
    use super::*;

    fn forge_current_stat(wt: &mut WorkTree, name: &[u8], stamp_ns: Option<i64>) {
        let st = rustix::fs::lstat(wt.root().join(String::from_utf8_lossy(name).as_ref()))
            .expect("lstat");
        let root = wt.dirs.get_mut(b"".as_slice()).expect("root state");
        if let Some(s) = stamp_ns {
            root.stamp_ns = s;
        }
        let e = root
            .entries
            .iter_mut()
            .find(|e| e.entry.name == name)
            .expect("entry");
        e.stat = StatKey::of(&st);
    }

    /// A project of one file `f.txt` ("aaaa") scanned once: its directory, store, tree state
    /// and first tree.
    fn one_file_scanned() -> (tempfile::TempDir, Store, WorkTree, ObjectId) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("p");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join("f.txt"), "aaaa").expect("write");
        let store = Store::create(&tmp.path().join("s"), &root).expect("store");
        let mut wt = WorkTree::new(&root, ScanConfig::default(), None).expect("worktree");
        let (t1, _) = wt.full_scan(&store, None).expect("scan");
        (tmp, store, wt, t1)
    }

    /// The walk shares out the subtrees of a root with few subdirectories one level further
    /// down: whatever the number of threads, the tree and the state are those of a walk on
    /// one thread, on a first scan and on one with the last scan's state.
    #[test]
    fn a_walk_split_below_the_root_makes_the_tree_of_one_thread() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("p");
        for d in 0..70 {
            let dir = root.join(format!("src/m{d}/inner"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            for f in 0..3 {
                std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f}")).expect("write");
            }
            std::fs::write(root.join(format!("src/m{d}/top")), format!("{d}")).expect("write");
        }
        for d in 0..5 {
            std::fs::create_dir_all(root.join(format!("docs/d{d}"))).expect("mkdir");
            std::fs::write(root.join(format!("docs/d{d}/x")), "x").expect("write");
        }
        std::fs::write(root.join("README"), "r").expect("write");
        let store = Store::create(&tmp.path().join("s"), &root).expect("store");
        let scans = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            pool.install(|| {
                let mut wt = WorkTree::new(&root, ScanConfig::default(), None).expect("worktree");
                let (first, _) = wt.full_scan(&store, None).expect("scan");
                let (again, _) = wt.full_scan(&store, None).expect("scan");
                let mut dirs: Vec<Vec<u8>> = wt.dir_paths().cloned().collect();
                dirs.sort();
                (first, again, dirs)
            })
        };
        let one = scans(1);
        assert_eq!(one.0, one.1);
        assert_eq!(one.2.len(), 1 + 2 + 70 * 2 + 5);
        for threads in [2, 3, 8] {
            assert_eq!(scans(threads), one, "{threads} threads");
        }
    }

    /// git's racy-timestamp rule: an entry whose `lstat` matches, ctime included (an edit in
    /// the same clock tick as the scan that read it), is still read again while its mtime is
    /// not older than that scan.
    #[test]
    fn a_racy_entry_is_read_again_even_when_its_stat_matches() {
        let (tmp, store, mut wt, t1) = one_file_scanned();
        let root = tmp.path().join("p");
        std::fs::write(root.join("f.txt"), "bbbb").expect("write");
        forge_current_stat(&mut wt, b"f.txt", None);
        let (t2, r) = wt.full_scan(&store, None).expect("scan");
        assert_ne!(t1, t2, "a racy entry was trusted");
        assert_eq!(r.hashed, 1);
        // The rule is what catches it: a stamp far past the mtime trusts the forged stat.
        std::fs::write(root.join("f.txt"), "cccc").expect("write");
        forge_current_stat(&mut wt, b"f.txt", Some(now_ns() + 3_600_000_000_000));
        let (t3, r) = wt.full_scan(&store, None).expect("scan");
        assert_eq!((t3, r.hashed), (t2, 0));
    }

    /// The rule compares ctime too: an edit whose mtime is set back at once (`rsync -t`,
    /// `tar -x`, `touch -d`) in the tick of the scan keeps an identical `lstat` and an old
    /// mtime, but its ctime is recent, so it is read again.
    #[test]
    fn an_edit_with_its_mtime_set_back_is_read_again() {
        let (tmp, store, mut wt, t1) = one_file_scanned();
        let root = tmp.path().join("p");
        std::fs::write(root.join("f.txt"), "bbbb").expect("write");
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(root.join("f.txt"))
            .and_then(|f| f.set_modified(hour_ago))
            .expect("set mtime");
        forge_current_stat(&mut wt, b"f.txt", None);
        let (t2, r) = wt.full_scan(&store, None).expect("scan");
        assert_ne!(
            t1, t2,
            "an edit with an old mtime and a fresh ctime was trusted"
        );
        assert_eq!(r.hashed, 1);
    }
}
