//! A working tree kept current by inotify, for a long-lived supervisor: a step then costs
//! O(changed names) instead of a walk of the whole project. Each event names a directory and an
//! entry in it; only those entries are read again (a directory that came or went is walked
//! anew), the rest of each directory is kept from the last tree. When the kernel drops events
//! (queue overflow), the project root itself moves, or a watch cannot be added (out of
//! watches), the next snapshot is a full rescan. Either way the tree is the one a full rescan
//! gives (a test proves it).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::inotify::ReadFlags;
use rustix::io::Errno;

use crate::beneath;
use crate::change_note::{ChangeNote, Meaning, note_into};
use crate::dirty::Dirty;
use crate::error::{IoContext, Result};
use crate::id::ObjectId;
use crate::store::Store;
use crate::watches::Watches;
use crate::worktree::{ScanConfig, ScanReport, WorkTree};

pub struct LiveTree {
    tree: WorkTree,
    watches: Watches,
    dirty: Dirty,
    lost: bool,
    /// Watches could not be added (out of watches): every snapshot is a full rescan.
    degraded: bool,
    /// Changes come from another process's watcher ([`LiveTree::feed`]), not this inotify.
    fed: bool,
    /// A directory left without watches, with everything below it
    /// ([`LiveTree::leave_unwatched`]).
    unwatched: Option<Vec<u8>>,
}

/// How a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SnapshotMode {
    /// Only the directories the watcher reported were read.
    Incremental,
    /// Everything was visited (first snapshot, or the watcher lost track).
    FullRescan,
}

/// A directory's watch descriptor, or why inotify refused it.
type WatchAdded = std::result::Result<i32, Errno>;

impl LiveTree {
    /// Start watching `root`. The first `snapshot` is a full scan (warm it with
    /// `tree_mut().load_index(…)` first).
    pub fn new(root: &Path, config: ScanConfig, store_dir: Option<&Path>) -> Result<Self> {
        Ok(Self {
            tree: WorkTree::new(root, config, store_dir)?,
            watches: Watches::new().at(root)?,
            dirty: Dirty::default(),
            lost: true,
            degraded: false,
            fed: false,
            unwatched: None,
        })
    }

    pub fn tree(&self) -> &WorkTree {
        &self.tree
    }

    pub fn tree_mut(&mut self) -> &mut WorkTree {
        &mut self.tree
    }

    /// The tree, and the inotify instance that holds the watches: its last close waits in the
    /// kernel for an SRCU grace period, which a caller about to exit may hand to someone else.
    pub fn into_tree_and_watches(self) -> (WorkTree, OwnedFd) {
        (self.tree, self.watches.into_fd())
    }

    /// Forget what the watcher knows: the next snapshot rescans everything (e.g. after another
    /// process rewound the project).
    pub fn invalidate(&mut self) {
        self.lost = true;
    }

    /// Mark directories dirty by hand (a restore says what it wrote).
    pub fn mark_dirty(&mut self, dirs: impl IntoIterator<Item = Vec<u8>>) {
        self.dirty.extend_whole(dirs);
    }

    /// Adds no watch at `rel` or below from now on: what changes there is said by the caller
    /// ([`LiveTree::mark_dirty`]) or read by the next full scan. For a `.git` under the git
    /// layer during a one-shot step, where only envgit's own import writes: its hundreds of
    /// object directories cost one `inotify_add_watch` each, which walks the directory's
    /// cached entries in the kernel.
    pub fn leave_unwatched(&mut self, rel: &[u8]) {
        self.unwatched = Some(rel.to_vec());
    }

    fn is_left_unwatched(&self, rel: &[u8]) -> bool {
        self.unwatched.as_deref().is_some_and(|top| {
            rel.strip_prefix(top)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
        })
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
        if self.fed {
            return self.snapshot_fed(store);
        }
        self.drain()?;
        if self.lost {
            // Watches first, then the scan: a change between the two is seen by both or by
            // the scan, never by neither.
            self.lost = false;
            self.dirty = Dirty::default();
            let known: Vec<Vec<u8>> = self.tree.dir_paths().cloned().collect();
            self.watch_dirs(known, false)?;
            let (id, report) = self.tree.full_scan(store, None)?;
            self.watch_new_dirs()?;
            self.retry_over_budget(&report);
            return Ok((id, report, SnapshotMode::FullRescan));
        }
        let dirty = self.dirty.take();
        let (id, report) = if dirty.is_empty() {
            match self.tree.root_tree() {
                Some(id) if store.has(&id) => (id, ScanReport::default()),
                _ => self.tree.full_scan(store, None)?,
            }
        } else {
            self.tree.update(store, &dirty)?
        };
        if report.full {
            self.watch_new_dirs()?;
        } else {
            // Only what the rescan found new, and dirty directories still without a watch (a
            // failed attempt is retried): walking every known directory per step would cost
            // more than the step itself on a large tree.
            let mut new = report.new_dirs.clone();
            new.extend(
                dirty
                    .dirs()
                    .filter(|d| !self.watches.is_watched(d) && self.tree.has_dir(d))
                    .cloned(),
            );
            self.watch_dirs(new, true)?;
        }
        self.retry_over_budget(&report);
        Ok((id, report, SnapshotMode::Incremental))
    }

    /// [`LiveTree::snapshot`] of a tree fed by another process's watcher.
    fn snapshot_fed(&mut self, store: &Store) -> Result<(ObjectId, ScanReport, SnapshotMode)> {
        if std::mem::take(&mut self.lost) {
            self.dirty = Dirty::default();
            let (id, report) = self.tree.full_scan(store, None)?;
            self.retry_over_budget(&report);
            return Ok((id, report, SnapshotMode::FullRescan));
        }
        // With nothing dirty, `update` keeps the root tree (or scans whole if it is gone).
        let (id, report) = self.tree.update(store, &self.dirty.take())?;
        self.retry_over_budget(&report);
        let mode = if report.full {
            SnapshotMode::FullRescan
        } else {
            SnapshotMode::Incremental
        };
        Ok((id, report, mode))
    }

    /// Files left out for the budget are tried again at the next snapshot (nothing tells the
    /// watcher that `envgit gc` made room): their directories are reread, at the cost of one
    /// `lstat` per file while there is still no room.
    fn retry_over_budget(&mut self, report: &ScanReport) {
        self.dirty
            .extend_whole(report.over_budget_dirs.iter().cloned());
    }

    /// Add watches for directories of the tree not yet watched. They were read before their
    /// watch existed, so they are marked dirty: whatever changed in between is read next time.
    fn watch_new_dirs(&mut self) -> Result<()> {
        let new: Vec<Vec<u8>> = self
            .tree
            .dir_paths()
            .filter(|d| !self.watches.is_watched(d))
            .cloned()
            .collect();
        self.watch_dirs(new, true)
    }

    fn watch_dirs(&mut self, dirs: Vec<Vec<u8>>, after_scan: bool) -> Result<()> {
        use rayon::prelude::*;
        let dirs: Vec<Vec<u8>> = dirs
            .into_iter()
            .filter(|rel| !self.watches.is_watched(rel) && !self.is_left_unwatched(rel))
            .collect();
        // Opening each directory and adding its watch is two path walks in the kernel: done
        // on every core (a one-shot `envgit run` watches the whole project before its walk).
        // The maps are updated after, in order, as if one by one.
        let root = self.tree.root_fd();
        let watches = &self.watches;
        // A few are added here: rayon's pool costs more than it saves on them (see
        // `PARALLEL_MIN_DIRS`).
        let add = |rel: Vec<u8>| match beneath::open_dir_rel(root, &rel) {
            Ok(fd) => {
                let wd = watches.add(fd.as_fd());
                (rel, Some(wd))
            }
            Err(_) => (rel, None),
        };
        let added: Vec<(Vec<u8>, Option<WatchAdded>)> =
            if dirs.len() < crate::worktree::PARALLEL_MIN_DIRS {
                dirs.into_iter().map(add).collect()
            } else {
                dirs.into_par_iter().map(add).collect()
            };
        for (rel, wd) in added {
            match wd {
                // Raced away: its parent's rescan says what is there.
                None => self.dirty.whole(rel),
                Some(Ok(wd)) => {
                    self.watches.added(rel.clone(), wd);
                    if after_scan {
                        self.dirty.whole(rel);
                    }
                }
                Some(Err(Errno::NOSPC | Errno::NOMEM)) => {
                    // Out of watches (fs.inotify.max_user_watches): stay correct by rescanning
                    // every time, and give the watches back.
                    self.degraded = true;
                    self.watches.reset().at(self.tree.root())?;
                    return Ok(());
                }
                Some(Err(_)) => self.dirty.whole(rel),
            }
        }
        Ok(())
    }

    /// Read every queued event.
    fn drain(&mut self) -> Result<()> {
        loop {
            let events = self.watches.read().at(self.tree.root())?;
            if events.is_empty() {
                return Ok(());
            }
            for (wd, flags, name) in events {
                self.note(wd, flags, name.as_deref());
                if self.lost {
                    break;
                }
            }
            if self.lost {
                // Drop the rest without bookkeeping: everything is rescanned anyway.
                let _ = self.watches.reset();
                return Ok(());
            }
        }
    }

    /// What one event says changed.
    fn note(&mut self, wd: i32, flags: ReadFlags, name: Option<&[u8]>) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.lost = true; // events were dropped: nothing can be vouched for
            return;
        }
        match self.watches.understand(wd, flags, name) {
            Some(Meaning::RootLost) => self.lost = true,
            Some(Meaning::Change(change)) => self.apply(change),
            // A watch given up (its directory moved or removed) is covered by then.
            _ => {}
        }
    }

    fn apply(&mut self, change: ChangeNote) {
        note_into(&mut self.dirty, &mut self.tree, change);
    }

    /// Learn what changed from a watcher in another process ([`crate::ChangeLog`], in the
    /// order it logged them) instead of this tree's own inotify, from now on: the tree must
    /// be the state those changes follow (the stat index saved with the log's token). `None`:
    /// the watcher cannot vouch for anything, and the next snapshot reads everything. A fed
    /// tree adds no watches of its own.
    pub fn feed(&mut self, changes: Option<Vec<ChangeNote>>) {
        if !self.fed {
            // Its own inotify instance has no watches yet, and is never read from now on.
            self.fed = true;
            self.dirty = Dirty::default();
        }
        match changes {
            None => self.lost = true,
            Some(changes) => {
                if self.tree.root_tree().is_some() {
                    self.lost = false;
                }
                for c in changes {
                    self.apply(c);
                }
            }
        }
    }
}
