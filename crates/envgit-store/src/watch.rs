//! A working tree kept current by inotify, for a long-lived supervisor: a step then costs
//! O(changed directories) instead of a walk of the whole project. When the kernel drops events
//! (queue overflow), a directory is moved (its watches would name the wrong paths), or a watch
//! cannot be added (out of watches), the next snapshot is a full rescan, which gives the same
//! tree (a test proves it).

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::beneath;
use crate::error::{IoContext, Result};
use crate::id::ObjectId;
use crate::store::Store;
use crate::worktree::{ScanConfig, ScanReport, WorkTree};

pub struct LiveTree {
    tree: WorkTree,
    inotify: OwnedFd,
    /// watch descriptor -> directory (relative path)
    wds: HashMap<i32, Vec<u8>>,
    watched: HashSet<Vec<u8>>,
    dirty: HashSet<Vec<u8>>,
    lost: bool,
    /// Watches could not be added (out of watches): every snapshot is a full rescan.
    degraded: bool,
    buf: Vec<MaybeUninit<u8>>,
}

/// How a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SnapshotMode {
    /// Only the directories the watcher reported were read.
    Incremental,
    /// Everything was visited (first snapshot, or the watcher lost track).
    FullRescan,
}

const MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

impl LiveTree {
    /// Start watching `root`. The first `snapshot` is a full scan (warm it with
    /// `tree_mut().load_cache(…)` first).
    pub fn new(root: &Path, config: ScanConfig, store_dir: Option<&Path>) -> Result<Self> {
        let inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).at(root)?;
        Ok(Self {
            tree: WorkTree::new(root, config, store_dir)?,
            inotify,
            wds: HashMap::new(),
            watched: HashSet::new(),
            dirty: HashSet::new(),
            lost: true,
            degraded: false,
            buf: vec![MaybeUninit::uninit(); 256 << 10],
        })
    }

    pub fn tree(&self) -> &WorkTree {
        &self.tree
    }

    pub fn tree_mut(&mut self) -> &mut WorkTree {
        &mut self.tree
    }

    /// Forget what the watcher knows: the next snapshot rescans everything (e.g. after another
    /// process rewound the project).
    pub fn invalidate(&mut self) {
        self.lost = true;
    }

    /// Mark directories dirty by hand (a restore says what it wrote).
    pub fn mark_dirty(&mut self, dirs: impl IntoIterator<Item = Vec<u8>>) {
        self.dirty.extend(dirs);
    }

    /// Whether the watcher gave up (out of inotify watches) and every step rescans.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// Bring the tree up to date and return its root id.
    pub fn snapshot(&mut self, store: &Store) -> Result<(ObjectId, ScanReport, SnapshotMode)> {
        if self.degraded {
            let (id, report) = self.tree.full_scan(store, None)?;
            return Ok((id, report, SnapshotMode::FullRescan));
        }
        self.drain()?;
        if self.lost {
            // Watches first, then the scan: a change between the two is seen by both or by
            // the scan, never by neither.
            self.lost = false;
            self.dirty.clear();
            let known: Vec<Vec<u8>> = self.tree.dir_paths().cloned().collect();
            self.watch_dirs(known, false)?;
            let (id, report) = self.tree.full_scan(store, None)?;
            self.watch_new_dirs()?;
            self.retry_over_budget(&report);
            return Ok((id, report, SnapshotMode::FullRescan));
        }
        let dirty = std::mem::take(&mut self.dirty);
        let (id, report) = if dirty.is_empty() {
            match self.tree.root_tree() {
                Some(id) if store.has(&id) => (id, ScanReport::default()),
                _ => self.tree.full_scan(store, None)?,
            }
        } else {
            self.tree.rescan(store, &dirty)?
        };
        if report.full {
            self.watch_new_dirs()?;
        } else {
            // Only what the rescan found new: walking every known directory per step would
            // cost more than the step itself on a large tree.
            self.watch_dirs(report.new_dirs.clone(), true)?;
        }
        self.retry_over_budget(&report);
        Ok((id, report, SnapshotMode::Incremental))
    }

    /// Files left out for the budget are tried again at the next snapshot (nothing tells the
    /// watcher that `envgit gc` made room): their directories are reread, at the cost of one
    /// `lstat` per file while there is still no room.
    fn retry_over_budget(&mut self, report: &ScanReport) {
        self.dirty.extend(report.over_budget_dirs.iter().cloned());
    }

    /// Add watches for directories of the tree not yet watched. They were read before their
    /// watch existed, so they are marked dirty: whatever changed in between is read next time.
    fn watch_new_dirs(&mut self) -> Result<()> {
        let new: Vec<Vec<u8>> = self
            .tree
            .dir_paths()
            .filter(|d| !self.watched.contains(*d))
            .cloned()
            .collect();
        self.watch_dirs(new, true)
    }

    fn watch_dirs(&mut self, dirs: Vec<Vec<u8>>, after_scan: bool) -> Result<()> {
        for rel in dirs {
            if self.watched.contains(&rel) {
                continue;
            }
            let fd = match beneath::open_dir_rel(self.tree.root_fd(), &rel) {
                Ok(fd) => fd,
                Err(_) => {
                    self.dirty.insert(rel); // raced away: its parent's rescan says what is there
                    continue;
                }
            };
            // Through the opened fd, so a directory swapped for a symlink is never watched.
            let proc_path = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
            match inotify::add_watch(&self.inotify, proc_path.as_str(), MASK) {
                Ok(wd) => {
                    self.wds.insert(wd, rel.clone());
                    self.watched.insert(rel.clone());
                    if after_scan {
                        self.dirty.insert(rel);
                    }
                }
                Err(Errno::NOSPC | Errno::NOMEM) => {
                    // Out of watches (fs.inotify.max_user_watches): stay correct by rescanning
                    // every time, and give the watches back.
                    self.degraded = true;
                    self.wds.clear();
                    self.watched.clear();
                    self.recreate()?;
                    return Ok(());
                }
                Err(_) => {
                    self.dirty.insert(rel);
                }
            }
        }
        Ok(())
    }

    /// Read every queued event.
    fn drain(&mut self) -> Result<()> {
        loop {
            let mut reader = inotify::Reader::new(&self.inotify, &mut self.buf);
            let mut any = false;
            loop {
                match reader.next() {
                    Ok(ev) => {
                        any = true;
                        let flags = ev.events();
                        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                            self.lost = true;
                            continue;
                        }
                        let Some(rel) = self.wds.get(&ev.wd()).cloned() else {
                            continue;
                        };
                        if flags.contains(ReadFlags::IGNORED) {
                            self.wds.remove(&ev.wd());
                            self.watched.remove(&rel);
                            continue;
                        }
                        if flags.contains(ReadFlags::MOVE_SELF)
                            || (flags.contains(ReadFlags::ISDIR)
                                && flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO))
                        {
                            // A moved directory keeps its watches under its old path.
                            self.lost = true;
                            continue;
                        }
                        self.dirty.insert(rel);
                    }
                    Err(Errno::AGAIN) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e).at(self.tree.root()),
                }
                if reader.is_buffer_empty() {
                    break;
                }
            }
            if !any {
                return Ok(());
            }
            if self.lost {
                // Drain the rest without bookkeeping: everything is rescanned anyway.
                self.wds.clear();
                self.watched.clear();
                let _ = self.recreate();
                return Ok(());
            }
        }
    }

    /// A fresh inotify instance: the old one's watches name paths we no longer trust.
    fn recreate(&mut self) -> Result<()> {
        self.inotify =
            inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).at(self.tree.root())?;
        Ok(())
    }
}
