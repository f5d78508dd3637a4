//! What one inotify event says changed, in the terms a rescan needs. Shared by the in-process
//! watcher ([`crate::LiveTree`]) and the watching daemon's log ([`crate::ChangeLog`]), whose
//! notes a one-shot command replays into its own tree ([`crate::LiveTree::feed`]).

use rustix::fs::inotify::ReadFlags;

use crate::beneath::{join_rel, parent_rel};
use crate::dirty::Dirty;
use crate::error::Result;
use crate::id::ObjectId;
use crate::store::Store;
use crate::worktree::{ScanReport, WorkTree};

/// A change in the project, by relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeNote {
    /// Read this directory whole.
    Whole(Vec<u8>),
    /// `name` in directory `dir` changed. `fresh` when it is a directory that came or went:
    /// whatever was known below that path is dropped and walked anew.
    Name {
        dir: Vec<u8>,
        name: Vec<u8>,
        fresh: bool,
    },
}

/// What an event on the watch of directory `rel` means.
pub(crate) enum Meaning {
    /// The project root itself moved or went: nothing can be vouched for.
    RootLost,
    /// The watch is gone (its directory moved or removed; `IN_IGNORED`).
    WatchGone,
    Change(ChangeNote),
    Nothing,
}

/// Reads one event (not a queue overflow, which has no watch). `name` is the entry the event
/// names, `None` when it is about the watched directory itself.
pub(crate) fn meaning(rel: &[u8], flags: ReadFlags, name: Option<&[u8]>) -> Meaning {
    if flags.contains(ReadFlags::IGNORED) {
        return if rel.is_empty() {
            Meaning::RootLost
        } else {
            Meaning::WatchGone
        };
    }
    let Some(name) = name else {
        // About the watched directory itself. Its parent's watch reports a move, removal or
        // chmod of it by name; the project root has no parent watched.
        let moved = flags.intersects(ReadFlags::MOVE_SELF | ReadFlags::DELETE_SELF);
        if rel.is_empty() {
            return if moved {
                Meaning::RootLost
            } else {
                Meaning::Nothing
            };
        }
        return match parent_rel(rel) {
            Some(parent) if !moved => {
                let start = if parent.is_empty() {
                    0
                } else {
                    parent.len() + 1
                };
                Meaning::Change(ChangeNote::Name {
                    dir: parent.to_vec(),
                    name: rel[start..].to_vec(),
                    fresh: false,
                })
            }
            _ => Meaning::Nothing,
        };
    };
    let fresh = flags.contains(ReadFlags::ISDIR)
        && flags.intersects(
            ReadFlags::CREATE | ReadFlags::DELETE | ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO,
        );
    Meaning::Change(ChangeNote::Name {
        dir: rel.to_vec(),
        name: name.to_vec(),
        fresh,
    })
}

/// Takes one change into `dirty`. A directory that came or went: what `tree` knows below that
/// path is dropped now, so that whatever is there at the rescan is walked anew (even if its
/// parent is read whole and the same inode came back).
pub(crate) fn note_into(dirty: &mut Dirty, tree: &mut WorkTree, change: ChangeNote) {
    match change {
        ChangeNote::Whole(dir) => dirty.whole(dir),
        ChangeNote::Name { dir, name, fresh } => {
            if fresh {
                let path = join_rel(&dir, &name);
                dirty.forget_below(&path);
                tree.forget_dir(&path);
            }
            dirty.name(&dir, &name, fresh);
        }
    }
}

impl WorkTree {
    /// Brings a state loaded from the stat index up to date with the changes a watcher logged
    /// since that index was saved (in order): only those names are read again. A state with
    /// nothing loaded is scanned whole.
    pub fn catch_up(
        &mut self,
        store: &Store,
        changes: Vec<ChangeNote>,
    ) -> Result<(ObjectId, ScanReport)> {
        let mut dirty = Dirty::default();
        for c in changes {
            note_into(&mut dirty, self, c);
        }
        self.update(store, &dirty)
    }
}
