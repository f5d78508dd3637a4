//! Walking the project: every directory read beneath the root (never following a symlink),
//! iteratively with a bounded number of open directories, its subtrees in parallel; each entry
//! turned into a tree entry (files through [`super::capture`]) and each directory's tree stored.

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::prelude::*;
use rustix::fs::FileType;
use rustix::io::Errno;

use crate::beneath::{self, join_rel};
use crate::budget::ScanBudget;
use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::setid::{SETID_BITS, SetidFile};
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, Tree, TreeEntry, ZERO_ID};

use super::WorkTree;
use super::config::{MAX_TREE_DEPTH, MAX_TREE_PATH, ScanConfig};
use super::entry::{CachedEntry, DirState, StatKey, marker, marker_of, placeholder};
use super::report::ScanProgress;

pub(super) struct Ctx<'a> {
    pub(super) store: &'a Store,
    pub(super) config: &'a ScanConfig,
    pub(super) budget: &'a ScanBudget,
    pub(super) prev: &'a super::DirMap,
    /// Stamp of the directory states this scan produces.
    pub(super) started: i64,
    pub(super) skip: Option<(u64, u64)>,
    pub(super) racy: super::racy::RacyRule,
    pub(super) out: Mutex<HashMap<Vec<u8>, DirState>>,
    pub(super) unstable: Mutex<Vec<String>>,
    pub(super) too_deep: Mutex<Vec<String>>,
    pub(super) setid: Mutex<Vec<SetidFile>>,
    pub(super) hashed: AtomicU64,
    /// Directories of loose objects taken from the last scan unread ([`super::sealed`]).
    pub(super) kept_object_dirs: AtomicU64,
    pub(super) progress: Option<&'a ScanProgress>,
    pub(super) any_unstable: AtomicBool,
}

impl<'a> Ctx<'a> {
    /// A scan of `tree` as it is now, writing to `store` within `budget`.
    pub(super) fn new(
        tree: &'a WorkTree,
        store: &'a Store,
        budget: &'a ScanBudget,
        progress: Option<&'a ScanProgress>,
    ) -> Self {
        Ctx {
            store,
            config: &tree.config,
            budget,
            prev: &tree.dirs,
            started: now_ns(),
            skip: tree.skip,
            racy: tree.racy,
            out: Mutex::default(),
            unstable: Mutex::default(),
            too_deep: Mutex::default(),
            setid: Mutex::default(),
            hashed: AtomicU64::new(0),
            kept_object_dirs: AtomicU64::new(0),
            progress,
            any_unstable: AtomicBool::new(false),
        }
    }
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// At most this many subtrees are walked at once (each holding a bounded number of descriptors).
const PARALLEL_WALKS: usize = 8;

/// A walk whose last scan found fewer directories than this stays on the calling thread, and
/// so do the reads of fewer than [`PARALLEL_MIN_FILES`] files (and [`PARALLEL_MIN_BYTES`]):
/// handing such work to rayon's pool costs more than it saves. Its threads start on first use,
/// and idle ones spin before they sleep (0.5 ms of CPU a step in a small git project, on two
/// cores shared with the sandbox's set-up).
pub(crate) const PARALLEL_MIN_DIRS: usize = 64;
const PARALLEL_MIN_FILES: usize = 16;
const PARALLEL_MIN_BYTES: u64 = 1 << 20;

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
    pub(super) fn walk(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        reuse_top: bool,
    ) -> Result<DirState> {
        let (entries, subdirs) = self.read_entries(dir, rel, reuse_top)?;
        self.walk_subdirs(dir, rel, entries, subdirs)
    }

    /// The directory `dir` (at `rel`, known as `prev`) where only `names` changed: those are
    /// read again (a new subdirectory walked whole), the other entries kept from `prev`.
    /// Entries kept whose mtime was too recent to trust at `prev`'s scan are smudged, so that
    /// a later full scan re-reads them (the new stamp would otherwise vouch for them).
    pub(super) fn update_names(
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
        let mut entries: Vec<CachedEntry> = Vec::with_capacity(prev.entries.len() + fresh.len());
        entries.extend(
            prev.entries
                .iter()
                .filter(|e| !names.contains(&e.entry.name))
                .map(|e| {
                    let mut e = e.clone();
                    match e.entry.kind {
                        EntryKind::File if self.racy.is_racy(&e.stat, prev.stamp_ns) => {
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
    pub(super) fn walk_subdirs(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        entries: Vec<CachedEntry>,
        subdirs: Vec<Subdir>,
    ) -> Result<DirState> {
        // rayon's pool is made at its first use (a thread per core, and std's read of the
        // cgroup quota): not for a walk that stays on this thread.
        if self.stays_here(&subdirs) {
            return self.walk_from(dir, rel, entries, subdirs);
        }
        let groups = rayon::current_num_threads().clamp(1, PARALLEL_WALKS);
        self.walk_subdirs_in(dir, rel, entries, subdirs, groups, true)
    }

    /// Whether `subdirs` are walked on this thread: fewer than two, or a project so small
    /// (by its last walk) that sharing its walk out costs more than it saves.
    fn stays_here(&self, subdirs: &[Subdir]) -> bool {
        subdirs.len() < 2 || (!self.prev.is_empty() && self.prev.len() < PARALLEL_MIN_DIRS)
    }

    /// [`Ctx::walk_subdirs`] in at most `groups` parallel groups; with `may_split`, the
    /// subtrees of a directory with too few subdirectories to share out (a project whose
    /// files are all below `src/`, beside a `.git`) are shared out one level further down.
    fn walk_subdirs_in(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        mut entries: Vec<CachedEntry>,
        subdirs: Vec<Subdir>,
        groups: usize,
        may_split: bool,
    ) -> Result<DirState> {
        if self.stays_here(&subdirs) {
            return self.walk_from(dir, rel, entries, subdirs);
        }
        // The subtrees in parallel, in at most `groups` groups (each walked sequentially), so
        // the descriptors held stay bounded whatever the number of cores: PARALLEL_WALKS
        // chains of at most CHAIN_FDS + 1 each, and at most twice that with the split below
        // (each of the `used` subtrees split in `below` groups).
        let used = subdirs.len().min(groups);
        let below = (subdirs.len() < 2 * groups && may_split).then(|| (groups / used).max(2));
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
                                match below {
                                    Some(below) => self.walk_subdirs_in(
                                        fd.as_fd(),
                                        &child_rel,
                                        e,
                                        s,
                                        below,
                                        false,
                                    ),
                                    None => self.walk_from(fd.as_fd(), &child_rel, e, s),
                                }
                                .map(Some)
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
        let previous = self.prev.tree_of(rel);
        let tree = put_tree(self.store, self.budget, &entries, previous.as_ref())?;
        Ok(DirState {
            tree,
            stamp_ns: self.stamp_for(rel, &entries),
            entries,
        })
    }

    /// The stamp a directory's new state carries: its last one when its entries are exactly
    /// as then and none of its files was too recent to trust at that scan (so an unchanged
    /// project keeps an unchanged stat index, which is then not written again), else this
    /// scan's start. The older stamp vouches for less than this scan's would, never more.
    fn stamp_for(&self, rel: &[u8], entries: &[CachedEntry]) -> i64 {
        match self.prev.stamp_if_same(rel, entries) {
            Some(stamp)
                if !entries.iter().any(|e| {
                    e.entry.kind == EntryKind::File && self.racy.is_racy(&e.stat, stamp)
                }) =>
            {
                stamp
            }
            _ => self.started,
        }
    }

    /// The sequential walk below `dir`, whose entries were just read.
    pub(super) fn walk_from(
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
            let previous = self.prev.tree_of(&done.rel);
            let tree = put_tree(self.store, self.budget, &done.entries, previous.as_ref())?;
            let state = DirState {
                tree,
                stamp_ns: self.stamp_for(&done.rel, &done.entries),
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
    pub(super) fn read_entries(
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
    pub(super) fn read_named(
        &self,
        dir: BorrowedFd<'_>,
        rel: &[u8],
        names: Vec<CString>,
        reuse_subdirs: bool,
    ) -> Result<(Vec<CachedEntry>, Vec<Subdir>)> {
        // Decoded for this read only (see `DirMap::peek`).
        let prev = self.prev.peek(rel);
        let prev = prev.as_deref();
        // The directory's last tree, when the store has it, vouches for every file object it
        // names: a tree is committed with or after what it names, and gc keeps what a live
        // tree names. One lookup per directory instead of one per file (a random probe of the
        // whole store's index: 12% of a full rescan's CPU at 100,000 files).
        let vouched = prev.is_some_and(|d| self.store.has(&d.tree));
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
                    match self.cached_file(nb, &st, prev, vouched) {
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
                        && let Some(tree) = self.prev.tree_of(&child_rel)
                    {
                        entries.push(CachedEntry {
                            entry: TreeEntry { id: tree, ..entry },
                            stat: StatKey::of(&st),
                        });
                        continue;
                    }
                    let now = StatKey::of(&st);
                    // Only a loose-object directory of git's may be taken unread: only its
                    // last state is decoded.
                    let known = super::sealed::is_loose_object_dir(&child_rel)
                        .then(|| self.prev.peek(&child_rel))
                        .flatten();
                    if let Some(k) = known
                        && super::sealed::unchanged(
                            &child_rel,
                            prev.and_then(|p| p.get(nb)),
                            &now,
                            &k,
                            &self.racy,
                        )
                        && self.store.has(&k.tree)
                    {
                        entries.push(CachedEntry {
                            entry: TreeEntry {
                                id: k.tree,
                                ..entry
                            },
                            stat: now,
                        });
                        self.out
                            .lock()
                            .map_err(|_| StoreError::corrupt("poisoned"))?
                            .insert(child_rel, k.into_owned());
                        self.kept_object_dirs.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    entries.push(CachedEntry { entry, stat: now });
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
        let bytes: u64 = files
            .iter()
            .map(|(_, _, st)| u64::try_from(st.st_size).unwrap_or(0))
            .sum();
        let parallel =
            files.len() >= PARALLEL_MIN_FILES || (files.len() > 1 && bytes >= PARALLEL_MIN_BYTES);
        let results: Vec<(usize, Result<CachedEntry>)> = if parallel {
            files.into_par_iter().map(read).collect()
        } else {
            files.into_iter().map(read).collect()
        };
        for (i, r) in results {
            entries[i] = r?;
        }
        Ok((entries, subdirs))
    }
}

/// Trees are written whatever the budget (a snapshot cannot leave one out), and charged to it;
/// as a delta against `previous`, the directory's last tree, when that is smaller.
pub(super) fn put_tree(
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

pub(super) fn forced_put(
    store: &Store,
    budget: &ScanBudget,
    kind: ObjectKind,
    raw: &[u8],
) -> Result<ObjectId> {
    let id = store.put_within(kind, raw, &budget.forced())?;
    id.ok_or_else(|| StoreError::corrupt("a forced write was refused"))
}
