//! The working tree as the store last saw it: per directory, its entries with their stat data
//! and content ids, and its tree id. A full scan visits every entry (an unchanged file costs
//! one `lstat`, thanks to the stat cache); a rescan of a set of dirty directories (from the
//! watcher, or from a restore that knows what it wrote) costs O(changed).
//!
//! Racy timestamps (git's rule): a cached entry is trusted only if its mtime is older than the
//! start of the scan that recorded it, minus a margin for coarse filesystem clocks. Otherwise
//! the file is read again.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::prelude::*;
use rustix::fs::FileType;
use rustix::io::Errno;

use crate::beneath::{self, join_rel};
use crate::budget::{BudgetLimit, Reservation, ScanBudget};
use crate::chunk;
use crate::dirty::{DirChange, Dirty};
use crate::error::{IoContext, Result, StoreError};
use crate::exclude::Excludes;
use crate::id::{ObjectId, ObjectKind};
use crate::setid::{SETID_BITS, SetidFile};
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, Tree, TreeEntry, ZERO_ID};

/// Files whose mtime is this close to the scan that hashed them are hashed again next time.
const RACY_MARGIN_NS: i64 = 2_000_000_000;
/// The default of `snapshot.max_file_size`.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 100 << 20;
/// Directories deeper than this (components below the project root) are recorded as a
/// `too_deep` marker instead of being walked: a chain of nested directories planted by the
/// agent must not cost unbounded memory (every directory's path is kept) nor produce paths no
/// tool can open. git's `core.maxTreeDepth` defaults to 4096; real projects stay far below.
pub const MAX_TREE_DEPTH: usize = 1024;
/// Directories whose path (relative to the project root) is longer than this many bytes are
/// recorded as a `too_deep` marker too (four times Linux's PATH_MAX).
pub const MAX_TREE_PATH: usize = 16 << 10;

#[derive(Clone)]
pub struct ScanConfig {
    pub excludes: Excludes,
    pub max_file_size: u64,
    /// Part of the stat cache's key: a different config means a cold cache.
    pub fingerprint: String,
    /// `snapshot.budget`: bytes the store may use. A file whose new content would take it past
    /// this (or its filesystem below the free-space reserve, which applies even with `None`)
    /// is recorded as an `over_budget` marker. Not part of the fingerprint: such a marker is
    /// never taken from the cache, so the file is tried again at every scan.
    pub budget: Option<u64>,
}

impl ScanConfig {
    /// From `snapshot.exclude` and `snapshot.max_file_size`; the fingerprint that keys the stat
    /// cache is derived here, so every caller gets the same one.
    pub fn new(exclude: &[String], max_file_size: u64) -> Result<Self> {
        Ok(Self {
            excludes: Excludes::new(exclude)?,
            max_file_size,
            fingerprint: format!("{exclude:?}|{max_file_size}"),
            budget: None,
        })
    }

    /// With `snapshot.budget`.
    pub fn with_budget(mut self, budget: Option<u64>) -> Self {
        self.budget = budget;
        self
    }
}

impl Default for ScanConfig {
    fn default() -> Self {
        Self {
            excludes: Excludes::none(),
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            fingerprint: String::new(),
            budget: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatKey {
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    pub size: u64,
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// Hard links to the inode (saturating): the sandbox makes a file read-only when some of
    /// its links are outside the project. A change also changes ctime, so it costs no rehash
    /// of its own.
    pub nlink: u32,
}

impl StatKey {
    pub(crate) fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
            ino: st.st_ino,
            dev: st.st_dev,
            size: st.st_size as u64,
            mode: st.st_mode,
            nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        }
    }

    /// A directory (a marker keeps the `lstat` of what it stands for, or none: mode 0).
    pub fn is_dir(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFDIR
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFREG
    }
    /// A key that never matches: the file is read again next time.
    pub(crate) fn smudged(mut self) -> Self {
        self.size = u64::MAX;
        self
    }
}

/// `st_mode`'s file-type bits (the same on every Linux architecture).
mod libc_mode {
    pub const S_IFMT: u32 = 0o170_000;
    pub const S_IFDIR: u32 = 0o040_000;
    pub const S_IFREG: u32 = 0o100_000;
}

#[derive(Clone, Debug)]
pub struct CachedEntry {
    pub entry: TreeEntry,
    /// The entry's `lstat` when it was read; for a marker, that of the path it stands for
    /// (mode 0 when there is none: the store's own directory, a path that raced away).
    pub stat: StatKey,
}

#[derive(Clone, Debug)]
pub struct DirState {
    pub tree: ObjectId,
    /// Start of the scan that last read this directory (ns since the epoch): the racy-timestamp
    /// rule compares its entries' mtimes with it.
    pub stamp_ns: i64,
    /// Sorted by name.
    pub entries: Vec<CachedEntry>,
}

impl DirState {
    fn get(&self, name: &[u8]) -> Option<&CachedEntry> {
        self.entries
            .binary_search_by(|e| e.entry.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }
}

pub struct WorkTree {
    root: PathBuf,
    root_fd: OwnedFd,
    config: ScanConfig,
    pub(crate) dirs: HashMap<Vec<u8>, DirState>,
    /// The store's directory, if it sits inside the project: never captured.
    skip: Option<(u64, u64)>,
}

/// Counters a progress bar can read while a scan runs.
#[derive(Default)]
pub struct ScanProgress {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
}

/// What one scan noticed besides the tree.
#[derive(Default, Debug)]
pub struct ScanReport {
    pub unstable: Vec<String>,
    pub hashed: u64,
    /// The whole tree was visited.
    pub full: bool,
    /// Directories seen for the first time by a partial rescan (the watcher adds watches).
    pub new_dirs: Vec<Vec<u8>>,
    /// Directories recorded as `too_deep` markers (over [`MAX_TREE_DEPTH`] levels or
    /// [`MAX_TREE_PATH`] bytes): the caller warns about each, naming the limit.
    pub too_deep: Vec<String>,
    /// Regular files read with the setuid or setgid bit (whatever the stat cache said; the
    /// bits are not part of the snapshot): the step's end clears those the step made
    /// ([`crate::clear_setid`]).
    pub setid: Vec<SetidFile>,
    /// Files recorded as `over_budget` markers, with their sizes, in path order: their new
    /// content would have taken the store past `snapshot.budget` or its disk below the
    /// free-space reserve. The caller warns and notes them on the step.
    pub over_budget: Vec<(String, u64)>,
    /// What bounded the store, when `over_budget` is not empty.
    pub budget_limit: Option<BudgetLimit>,
    /// The directories holding `over_budget` files (a watcher rereads them next time, so a
    /// file is tried again once there is room).
    pub over_budget_dirs: Vec<Vec<u8>>,
}

impl ScanReport {
    fn take_budget(&mut self, budget: &ScanBudget) {
        let (over, limit) = budget.take_report();
        for (rel, size) in over {
            let dir = beneath::parent_rel(&rel).unwrap_or_default().to_vec();
            if !self.over_budget_dirs.contains(&dir) {
                self.over_budget_dirs.push(dir);
            }
            self.over_budget.push((beneath::display_rel(&rel), size));
        }
        if limit.is_some() {
            self.budget_limit = limit;
        }
    }
}

struct Ctx<'a> {
    store: &'a Store,
    config: &'a ScanConfig,
    budget: &'a ScanBudget,
    prev: &'a HashMap<Vec<u8>, DirState>,
    /// Stamp of the directory states this scan produces.
    started: i64,
    skip: Option<(u64, u64)>,
    out: Mutex<HashMap<Vec<u8>, DirState>>,
    unstable: Mutex<Vec<String>>,
    too_deep: Mutex<Vec<String>>,
    setid: Mutex<Vec<SetidFile>>,
    hashed: AtomicU64,
    progress: Option<&'a ScanProgress>,
    any_unstable: AtomicBool,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Where a file still to be read goes (replaced before the entries are used).
fn placeholder() -> CachedEntry {
    marker(b"", MarkerReason::Unreadable, 0)
}

fn marker(name: &[u8], reason: MarkerReason, size: u64) -> CachedEntry {
    marker_of(name, reason, size, StatKey::default())
}

/// A marker that keeps the `lstat` of the path it stands for (the sandbox's plan reads link
/// counts and directory-ness from the index).
fn marker_of(name: &[u8], reason: MarkerReason, size: u64, stat: StatKey) -> CachedEntry {
    CachedEntry {
        entry: TreeEntry {
            name: name.to_vec(),
            kind: EntryKind::Marker(reason),
            mode: 0,
            size,
            id: ZERO_ID,
        },
        stat,
    }
}

impl WorkTree {
    pub fn new(root: &Path, config: ScanConfig, store_dir: Option<&Path>) -> Result<Self> {
        let root_fd = beneath::open_root(root).at(root)?;
        let skip = store_dir.and_then(|d| std::fs::metadata(d).ok()).map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        });
        Ok(Self {
            root: root.to_path_buf(),
            root_fd,
            config,
            dirs: HashMap::new(),
            skip,
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

    pub fn file_count(&self) -> usize {
        self.dirs.values().map(|d| d.entries.len()).sum()
    }

    /// Every entry of every directory the last scan read (or the loaded cache holds), with
    /// the relative path of its directory: the stat index, for what needs to know the
    /// project's files without walking it again (the sandbox's plan). Markers are included:
    /// an excluded or too-deep directory is a marker whose `stat` says it is a directory.
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &CachedEntry)> {
        self.dirs
            .iter()
            .flat_map(|(rel, d)| d.entries.iter().map(move |e| (rel.as_slice(), e)))
    }

    /// Forget everything: the next scan reads every file.
    pub fn clear(&mut self) {
        self.dirs.clear();
    }

    fn ctx<'a>(
        &'a self,
        store: &'a Store,
        budget: &'a ScanBudget,
        progress: Option<&'a ScanProgress>,
    ) -> Ctx<'a> {
        Ctx {
            store,
            config: &self.config,
            budget,
            prev: &self.dirs,
            started: now_ns(),
            skip: self.skip,
            out: Mutex::default(),
            unstable: Mutex::default(),
            too_deep: Mutex::default(),
            setid: Mutex::default(),
            hashed: AtomicU64::new(0),
            progress,
            any_unstable: AtomicBool::new(false),
        }
    }

    /// Visit the whole tree; store what is new; return the root tree id.
    pub fn full_scan(
        &mut self,
        store: &Store,
        progress: Option<&ScanProgress>,
    ) -> Result<(ObjectId, ScanReport)> {
        let budget = ScanBudget::new(self.config.budget);
        let ctx = self.ctx(store, &budget, progress);
        let root = beneath::open_dir_beneath(self.root_fd.as_fd(), b"").at(&self.root)?;
        let state = ctx.walk(root.as_fd(), b"", false)?;
        let id = state.tree;
        let mut report = ScanReport {
            unstable: ctx.unstable.into_inner().unwrap_or_default(),
            hashed: ctx.hashed.load(Ordering::Relaxed),
            full: true,
            too_deep: ctx.too_deep.into_inner().unwrap_or_default(),
            setid: ctx.setid.into_inner().unwrap_or_default(),
            ..ScanReport::default()
        };
        report.take_budget(&budget);
        let mut out = ctx.out.into_inner().unwrap_or_default();
        out.insert(Vec::new(), state);
        self.dirs = out;
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
            let ctx = self.ctx(store, &budget, None);
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
                .extend(out.keys().filter(|k| !self.dirs.contains_key(*k)).cloned());
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
        self.dirs
            .retain(|k, _| k.as_slice() != rel && !k.starts_with(&prefix));
    }
}

/// Trees are written whatever the budget (a snapshot cannot leave one out), and charged to it;
/// as a delta against `previous`, the directory's last tree, when that is smaller.
fn put_tree(
    store: &Store,
    budget: &ScanBudget,
    entries: &[CachedEntry],
    previous: Option<&ObjectId>,
) -> Result<ObjectId> {
    let tree = Tree {
        entries: entries.iter().map(|e| e.entry.clone()).collect(),
    };
    let id = store.put_tree_within(&tree.encode(), previous, &budget.forced())?;
    id.ok_or_else(|| StoreError::corrupt("a forced write was refused"))
}

fn forced_put(
    store: &Store,
    budget: &ScanBudget,
    kind: ObjectKind,
    raw: &[u8],
) -> Result<ObjectId> {
    let id = store.put_within(kind, raw, &budget.forced())?;
    id.ok_or_else(|| StoreError::corrupt("a forced write was refused"))
}

/// At most this many subtrees are walked at once (each holding a bounded number of descriptors).
const PARALLEL_WALKS: usize = 8;

/// A subdirectory still to walk: its index in the parent's entries, and its name.
type Subdir = (usize, std::ffi::CString);

/// One directory of an iterative walk: its entries so far and the subdirectories still to visit.
struct Frame {
    rel: Vec<u8>,
    entries: Vec<CachedEntry>,
    subdirs: Vec<Subdir>,
    next: usize,
    /// Index of this directory's entry in its parent's `entries`.
    slot: usize,
}

fn walk_error(e: Errno, rel: &[u8]) -> StoreError {
    let path = PathBuf::from(beneath::display_rel(rel));
    if e == Errno::STALE {
        return StoreError::Refused(format!(
            "{}: a directory was moved while envgit was reading it; run the command again",
            path.display()
        ));
    }
    StoreError::Io {
        path,
        source: e.into(),
    }
}

impl Ctx<'_> {
    /// Scan the directory `dir` (at `rel`) and everything below it, depth first with an explicit
    /// stack (no recursion) and a bounded number of open directories ([`beneath::DirChain`]),
    /// so any depth costs neither stack nor descriptors. With `reuse_top`, subdirectories of
    /// `dir` already known keep their tree id (the watcher says they did not change). The
    /// states of the directories below go to `out`; that of `dir` is returned.
    fn walk(&self, dir: BorrowedFd<'_>, rel: &[u8], reuse_top: bool) -> Result<DirState> {
        let (entries, subdirs) = self.read_entries(dir, rel, reuse_top)?;
        self.walk_subdirs(dir, rel, entries, subdirs)
    }

    /// The directory `dir` (at `rel`, known as `prev`) where only `names` changed: those are
    /// read again (a new subdirectory walked whole), the other entries kept from `prev`.
    /// Entries kept whose mtime was too recent to trust at `prev`'s scan are smudged, so that
    /// a later full scan re-reads them (the new stamp would otherwise vouch for them).
    fn update_names(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        prev: &DirState,
        names: &BTreeSet<Vec<u8>>,
    ) -> Result<DirState> {
        let cnames: Vec<CString> = names
            .iter()
            .filter_map(|n| CString::new(n.as_slice()).ok())
            .collect();
        let (fresh, subdirs) = self.read_named(dir, rel, cnames, true)?;
        let racy_before = prev.stamp_ns - RACY_MARGIN_NS;
        let mut entries: Vec<CachedEntry> = Vec::with_capacity(prev.entries.len() + fresh.len());
        entries.extend(
            prev.entries
                .iter()
                .filter(|e| !names.contains(&e.entry.name))
                .map(|e| {
                    let mut e = e.clone();
                    match e.entry.kind {
                        EntryKind::File if e.stat.mtime_ns >= racy_before => {
                            e.stat = e.stat.smudged();
                        }
                        // Rescanned before this one (deeper first): its id may be new.
                        EntryKind::Dir => {
                            if let Some(child) = self.prev.get(&join_rel(rel, &e.entry.name)) {
                                e.entry.id = child.tree;
                            }
                        }
                        _ => {}
                    }
                    e
                }),
        );
        entries.extend(fresh);
        entries.sort_unstable_by(|a, b| a.entry.name.cmp(&b.entry.name));
        let subdirs = subdirs
            .into_iter()
            .filter_map(|(_, name)| {
                entries
                    .binary_search_by(|e| e.entry.name.as_slice().cmp(name.to_bytes()))
                    .ok()
                    .map(|slot| (slot, name))
            })
            .collect();
        self.walk_subdirs(dir, rel, entries, subdirs)
    }

    /// Walk the `subdirs` of `dir` (whose entries were just read) and build its tree.
    fn walk_subdirs(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        mut entries: Vec<CachedEntry>,
        subdirs: Vec<Subdir>,
    ) -> Result<DirState> {
        if subdirs.len() < 2 {
            return self.walk_from(dir, rel, entries, subdirs);
        }
        // The subtrees of the top directory in parallel, in at most PARALLEL_WALKS groups
        // (each walked sequentially), so the descriptors held stay bounded whatever the
        // number of cores: PARALLEL_WALKS chains of at most CHAIN_FDS + 1 each.
        let groups = rayon::current_num_threads().clamp(1, PARALLEL_WALKS);
        let per = subdirs.len().div_ceil(groups);
        let results: Vec<Vec<(usize, Result<Option<DirState>>)>> = subdirs
            .par_chunks(per)
            .map(|group| {
                group
                    .iter()
                    .map(|(slot, name)| {
                        let child_rel = join_rel(rel, name.to_bytes());
                        let r = match beneath::open_subdir(dir, name) {
                            Ok(fd) => {
                                let (e, s) = match self.read_entries(fd.as_fd(), &child_rel, false)
                                {
                                    Ok(x) => x,
                                    Err(e) => return (*slot, Err(e)),
                                };
                                self.walk_from(fd.as_fd(), &child_rel, e, s).map(Some)
                            }
                            Err(
                                Errno::NOENT
                                | Errno::NOTDIR
                                | Errno::LOOP
                                | Errno::ACCESS
                                | Errno::PERM,
                            ) => Ok(None),
                            Err(e) => Err(walk_error(e, &child_rel)),
                        };
                        (*slot, r)
                    })
                    .collect()
            })
            .collect();
        for (slot, r) in results.into_iter().flatten() {
            match r? {
                Some(state) => {
                    entries[slot].entry.id = state.tree;
                    let child_rel = join_rel(rel, &entries[slot].entry.name);
                    self.out
                        .lock()
                        .map_err(|_| StoreError::corrupt("poisoned"))?
                        .insert(child_rel, state);
                }
                None => {
                    // Raced away or unreadable: say so rather than drop it silently.
                    let name = entries[slot].entry.name.clone();
                    entries[slot] = marker(&name, MarkerReason::Unreadable, 0);
                }
            }
        }
        let previous = self.prev.get(rel).map(|d| d.tree);
        let tree = put_tree(self.store, self.budget, &entries, previous.as_ref())?;
        Ok(DirState {
            tree,
            stamp_ns: self.started,
            entries,
        })
    }

    /// The sequential walk below `dir`, whose entries were just read.
    fn walk_from(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        entries: Vec<CachedEntry>,
        subdirs: Vec<Subdir>,
    ) -> Result<DirState> {
        let mut chain = beneath::DirChain::new(dir);
        let mut frames = vec![Frame {
            rel: rel.to_vec(),
            entries,
            subdirs,
            next: 0,
            slot: 0,
        }];
        loop {
            let Some(f) = frames.last_mut() else {
                return Err(StoreError::corrupt("scan stack underflow"));
            };
            if let Some((slot, name)) = f.subdirs.get(f.next).cloned() {
                f.next += 1;
                let child_rel = join_rel(&f.rel, name.to_bytes());
                match chain.push(&name) {
                    Ok(()) => {}
                    // Raced away or unreadable: say so rather than drop it silently.
                    Err(
                        Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::ACCESS | Errno::PERM,
                    ) => {
                        f.entries[slot] = marker(name.to_bytes(), MarkerReason::Unreadable, 0);
                        continue;
                    }
                    Err(e) => return Err(walk_error(e, &child_rel)),
                }
                let top = chain.top().map_err(|e| walk_error(e, &child_rel))?;
                let (entries, subdirs) = self.read_entries(top, &child_rel, false)?;
                frames.push(Frame {
                    rel: child_rel,
                    entries,
                    subdirs,
                    next: 0,
                    slot,
                });
                continue;
            }
            let Some(done) = frames.pop() else {
                return Err(StoreError::corrupt("scan stack underflow"));
            };
            let previous = self.prev.get(&done.rel).map(|d| d.tree);
            let tree = put_tree(self.store, self.budget, &done.entries, previous.as_ref())?;
            let state = DirState {
                tree,
                stamp_ns: self.started,
                entries: done.entries,
            };
            let Some(parent) = frames.last_mut() else {
                return Ok(state);
            };
            chain.pop().map_err(|e| walk_error(e, &parent.rel))?;
            parent.entries[done.slot].entry.id = tree;
            self.out
                .lock()
                .map_err(|_| StoreError::corrupt("poisoned"))?
                .insert(done.rel, state);
        }
    }

    /// Read one directory's entries: files are hashed (several at once), symlinks read;
    /// subdirectories get a placeholder entry and are returned for the walk to visit, except
    /// that with `reuse_subdirs` a subdirectory already known keeps its tree id.
    fn read_entries(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        reuse_subdirs: bool,
    ) -> Result<(Vec<CachedEntry>, Vec<Subdir>)> {
        let names = beneath::read_names(dir).at(&PathBuf::from(beneath::display_rel(rel)))?;
        self.read_named(dir, rel, names, reuse_subdirs)
    }

    /// [`Ctx::read_entries`] for the given names only (sorted); a name no longer there is left
    /// out.
    fn read_named(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        names: Vec<CString>,
        reuse_subdirs: bool,
    ) -> Result<(Vec<CachedEntry>, Vec<Subdir>)> {
        let prev = self.prev.get(rel);
        let child_depth = beneath::depth_of(rel) + 1;
        let mut entries: Vec<CachedEntry> = Vec::with_capacity(names.len());
        let mut subdirs: Vec<Subdir> = Vec::new();
        // Regular files the stat cache cannot vouch for: read after the listing.
        let mut files: Vec<(usize, CString, rustix::fs::Stat)> = Vec::new();
        let excludes = &self.config.excludes;
        for name in names {
            let nb = name.to_bytes();
            let st = match beneath::lstat(dir, &name) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue, // removed since readdir
                Err(e) => {
                    return Err(e).at(&PathBuf::from(beneath::display_rel(&join_rel(rel, nb))));
                }
            };
            let ft = beneath::file_type(&st);
            let is_dir = ft == FileType::Directory;
            // Most patterns can only match directories: a file then costs no path and no
            // matcher.
            if excludes.may_exclude(is_dir) && excludes.is_excluded(&join_rel(rel, nb), is_dir) {
                entries.push(marker_of(nb, MarkerReason::Excluded, 0, StatKey::of(&st)));
                continue;
            }
            match ft {
                FileType::RegularFile => {
                    if st.st_mode & SETID_BITS != 0
                        && let Ok(mut s) = self.setid.lock()
                    {
                        s.push(SetidFile {
                            rel: join_rel(rel, nb),
                            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
                        });
                    }
                    // An unchanged file the cache vouches for costs nothing more.
                    match self.cached_file(nb, &st, prev) {
                        Some(hit) => entries.push(hit),
                        None => {
                            files.push((entries.len(), name, st));
                            entries.push(placeholder());
                        }
                    }
                }
                FileType::Directory => {
                    let child_rel = join_rel(rel, nb);
                    if self.skip == Some((st.st_dev, st.st_ino)) {
                        entries.push(marker(nb, MarkerReason::Excluded, 0));
                        continue;
                    }
                    if child_depth > MAX_TREE_DEPTH || child_rel.len() > MAX_TREE_PATH {
                        entries.push(marker_of(nb, MarkerReason::TooDeep, 0, StatKey::of(&st)));
                        if let Ok(mut d) = self.too_deep.lock() {
                            d.push(beneath::display_rel(&child_rel));
                        }
                        continue;
                    }
                    let known = self.prev.get(&child_rel);
                    let entry = TreeEntry {
                        name: nb.to_vec(),
                        kind: EntryKind::Dir,
                        mode: st.st_mode & 0o777,
                        size: 0,
                        id: ZERO_ID,
                    };
                    // The same directory as before (not one moved or made in its place).
                    let same = prev.and_then(|p| p.get(nb)).is_some_and(|p| {
                        p.entry.kind == EntryKind::Dir
                            && (p.stat.dev, p.stat.ino) == (st.st_dev, st.st_ino)
                    });
                    if reuse_subdirs
                        && same
                        && let Some(k) = known
                    {
                        entries.push(CachedEntry {
                            entry: TreeEntry {
                                id: k.tree,
                                ..entry
                            },
                            stat: StatKey::of(&st),
                        });
                        continue;
                    }
                    entries.push(CachedEntry {
                        entry,
                        stat: StatKey::of(&st),
                    });
                    subdirs.push((entries.len() - 1, name));
                }
                FileType::Symlink => {
                    let target = match rustix::fs::readlinkat(dir, &name, Vec::new()) {
                        Ok(t) => t,
                        Err(Errno::NOENT) => continue,
                        Err(e) => {
                            let child_rel = join_rel(rel, nb);
                            return Err(e).at(&PathBuf::from(beneath::display_rel(&child_rel)));
                        }
                    };
                    let bytes = target.as_bytes();
                    let id = forced_put(self.store, self.budget, ObjectKind::Blob, bytes)?;
                    entries.push(CachedEntry {
                        entry: TreeEntry {
                            name: nb.to_vec(),
                            kind: EntryKind::Symlink,
                            mode: 0,
                            size: bytes.len() as u64,
                            id,
                        },
                        stat: StatKey::of(&st),
                    });
                }
                _ => entries.push(marker_of(nb, MarkerReason::Special, 0, StatKey::of(&st))),
            }
        }
        // Files to read, in parallel when there are several (one descriptor each while being
        // read); what the cache vouched for is already in place.
        let read = |(i, name, st): (usize, CString, rustix::fs::Stat)| {
            let child_rel = join_rel(rel, name.to_bytes());
            (i, self.file_entry(dir, &name, &child_rel, &st, prev))
        };
        let results: Vec<(usize, Result<CachedEntry>)> = if files.len() > 1 {
            files.into_par_iter().map(read).collect()
        } else {
            files.into_iter().map(read).collect()
        };
        for (i, r) in results {
            entries[i] = r?;
        }
        Ok((entries, subdirs))
    }

    /// The cached entry of an unchanged file: its `lstat` matches the one recorded, its mtime
    /// is older than the scan that recorded it (the racy-timestamp rule), its content is in
    /// the store, and it is not over `snapshot.max_file_size`.
    fn cached_file(
        &self,
        name: &[u8],
        st: &rustix::fs::Stat,
        prev: Option<&DirState>,
    ) -> Option<CachedEntry> {
        let d = prev?;
        let p = d.get(name)?;
        let key = StatKey::of(st);
        let hit = p.entry.kind == EntryKind::File
            && p.stat == key
            && key.size <= self.config.max_file_size
            && p.stat.mtime_ns < d.stamp_ns - RACY_MARGIN_NS
            && self.store.has(&p.entry.id);
        if !hit {
            return None;
        }
        if let Some(pr) = self.progress {
            pr.files.fetch_add(1, Ordering::Relaxed);
        }
        Some(p.clone())
    }

    fn file_entry(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        rel: &[u8],
        st: &rustix::fs::Stat,
        prev: Option<&DirState>,
    ) -> Result<CachedEntry> {
        let nb = name.to_bytes();
        let key = StatKey::of(st);
        let mode = st.st_mode & 0o777;
        if key.size > self.config.max_file_size {
            return Ok(marker_of(nb, MarkerReason::TooLarge, key.size, key));
        }
        if let Some(hit) = self.cached_file(nb, st, prev) {
            return Ok(hit);
        }
        // Room for the most reading it could append, known from the lstat: nothing is
        // measured or read before this, so an unchanged tree never pays for the budget.
        let room = self.budget.reserve(self.store, key.size);
        if !room.granted()
            && let Some(p) = prev.and_then(|p| p.get(nb))
            && p.entry.kind == EntryKind::Marker(MarkerReason::OverBudget)
            && p.stat == key
        {
            // Left out before and unchanged since: its content is still not in the store.
            self.budget.left_out(rel, key.size);
            return Ok(p.clone());
        }
        let path = || PathBuf::from(beneath::display_rel(rel));
        let mut attempt = 0;
        loop {
            let fd = match beneath::open_file(dir, name) {
                Ok(fd) => fd,
                Err(Errno::ACCESS | Errno::PERM) => {
                    return Ok(marker_of(nb, MarkerReason::Unreadable, key.size, key));
                }
                Err(Errno::LOOP | Errno::NOENT) => {
                    return Ok(marker(nb, MarkerReason::Unreadable, 0));
                }
                Err(e) => return Err(e).at(&path()),
            };
            let before = rustix::fs::fstat(&fd).at(&path())?;
            let before_key = StatKey::of(&before);
            if beneath::file_type(&before) != FileType::RegularFile {
                return Ok(marker_of(nb, MarkerReason::Special, 0, before_key));
            }
            if before_key.size > self.config.max_file_size {
                return Ok(marker_of(
                    nb,
                    MarkerReason::TooLarge,
                    before_key.size,
                    before_key,
                ));
            }
            let mut file = File::from(fd);
            let stored = self
                .hash_and_store(&mut file, before_key.size, &room)
                .map_err(|e| match e {
                    StoreError::Io { source, .. } => StoreError::Io {
                        path: path(),
                        source,
                    },
                    e => e,
                })?;
            let Some((id, size)) = stored else {
                // New content that does not fit: a marker, never a full disk.
                self.budget.left_out(rel, before_key.size);
                return Ok(marker_of(
                    nb,
                    MarkerReason::OverBudget,
                    before_key.size,
                    before_key,
                ));
            };
            let after = StatKey::of(&rustix::fs::fstat(&file).at(&path())?);
            self.hashed.fetch_add(1, Ordering::Relaxed);
            if let Some(pr) = self.progress {
                pr.files.fetch_add(1, Ordering::Relaxed);
                pr.bytes.fetch_add(size, Ordering::Relaxed);
            }
            let stable = after == before_key && after.size == size;
            if stable || attempt == 1 {
                if !stable {
                    self.any_unstable.store(true, Ordering::Relaxed);
                    if let Ok(mut u) = self.unstable.lock() {
                        u.push(beneath::display_rel(rel));
                    }
                }
                return Ok(CachedEntry {
                    entry: TreeEntry {
                        name: nb.to_vec(),
                        kind: EntryKind::File,
                        mode,
                        size,
                        id,
                    },
                    stat: if stable { after } else { after.smudged() },
                });
            }
            attempt += 1;
        }
    }

    /// The file's id and size, its new content appended within `room`; `None` when that
    /// content is new and does not fit (nothing of it is then kept, at most what a file that
    /// grew past its reservation wrote before it ran out).
    fn hash_and_store(
        &self,
        file: &mut File,
        size_hint: u64,
        room: &Reservation<'_>,
    ) -> Result<Option<(ObjectId, u64)>> {
        if size_hint > chunk::CHUNK_THRESHOLD {
            let mut counted = CountingReader { inner: file, n: 0 };
            let id = chunk::store_chunked(&mut counted, |kind, bytes| {
                self.store.put_within(kind, bytes, room)
            })?;
            return Ok(id.map(|id| (id, counted.n)));
        }
        // At most the chunking threshold in memory: a file that grew since its stat is
        // streamed through the chunker from what was read on.
        let mut buf = Vec::with_capacity(size_hint as usize + 1);
        (&mut *file)
            .take(chunk::CHUNK_THRESHOLD + 1)
            .read_to_end(&mut buf)
            .map_err(|source| StoreError::Io {
                path: PathBuf::new(),
                source,
            })?;
        if buf.len() as u64 > chunk::CHUNK_THRESHOLD {
            let mut counted = CountingReader { inner: file, n: 0 };
            let id = chunk::store_chunked(buf.as_slice().chain(&mut counted), |kind, bytes| {
                self.store.put_within(kind, bytes, room)
            })?;
            return Ok(id.map(|id| (id, buf.len() as u64 + counted.n)));
        }
        let id = self.store.put_within(ObjectKind::Blob, &buf, room)?;
        Ok(id.map(|id| (id, buf.len() as u64)))
    }
}

struct CountingReader<'a> {
    inner: &'a mut File,
    n: u64,
}

impl Read for CountingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
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

    /// git's racy-timestamp rule: an entry whose `lstat` matches, ctime included (an edit in
    /// the same clock tick as the scan that read it), is still read again while its mtime is
    /// not older than that scan.
    #[test]
    fn a_racy_entry_is_read_again_even_when_its_stat_matches() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("p");
        std::fs::create_dir_all(&root).expect("mkdir");
        std::fs::write(root.join("f.txt"), "aaaa").expect("write");
        let store = Store::create(&tmp.path().join("s"), &root).expect("store");
        let mut wt = WorkTree::new(&root, ScanConfig::default(), None).expect("worktree");
        let (t1, _) = wt.full_scan(&store, None).expect("scan");
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
}
