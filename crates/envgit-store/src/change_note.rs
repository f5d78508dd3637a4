//! What one inotify event says changed, in the terms a rescan needs. Shared by the in-process
//! watcher ([`crate::LiveTree`]) and the watching daemon's log ([`crate::ChangeLog`]), whose
//! notes a one-shot command replays into its own tree ([`crate::LiveTree::feed`]).

use rustix::fs::inotify::ReadFlags;

use crate::beneath::parent_rel;

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
