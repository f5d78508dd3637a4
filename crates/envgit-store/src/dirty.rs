//! What changed since the last snapshot, as precisely as the watcher can vouch for it: per
//! directory either "read it whole" or the names inotify reported in it. A rescan then reads
//! only those names and keeps the directory's other entries from the last tree.

use std::collections::{BTreeSet, HashMap};

use crate::beneath::{join_rel, parent_rel};

/// The changes in one directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DirChange {
    /// List and `lstat` every entry (a new directory, one whose events were not all seen, or
    /// one a restore wrote into).
    Whole,
    /// Only these names changed. A `fresh` name is a directory that was created, removed or
    /// moved in or out: whatever was known below that path is dropped and, if a directory is
    /// there now, it is walked as a new one.
    Names {
        names: BTreeSet<Vec<u8>>,
        fresh: BTreeSet<Vec<u8>>,
    },
}

/// Directories (relative paths) and what changed in each.
#[derive(Debug, Default, Clone)]
pub(crate) struct Dirty {
    dirs: HashMap<Vec<u8>, DirChange>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    pub fn get(&self, rel: &[u8]) -> Option<&DirChange> {
        self.dirs.get(rel)
    }

    pub fn dirs(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.dirs.keys()
    }

    /// Read `rel` whole.
    pub fn whole(&mut self, rel: Vec<u8>) {
        self.dirs.insert(rel, DirChange::Whole);
    }

    /// `name` in `rel` changed; `fresh` when it is a directory that came or went.
    pub fn name(&mut self, rel: &[u8], name: &[u8], fresh: bool) {
        let change = self
            .dirs
            .entry(rel.to_vec())
            .or_insert_with(|| DirChange::Names {
                names: BTreeSet::new(),
                fresh: BTreeSet::new(),
            });
        if let DirChange::Names { names, fresh: f } = change {
            names.insert(name.to_vec());
            if fresh {
                f.insert(name.to_vec());
            }
        }
    }

    /// Forget what was noted at `rel` and below (that path was dropped as a whole).
    pub fn forget_below(&mut self, rel: &[u8]) {
        let prefix = join_rel(rel, b"");
        self.dirs
            .retain(|k, _| k.as_slice() != rel && !k.starts_with(&prefix));
    }

    /// Some ancestor of `rel` names the path leading to it as fresh: `rel` is walked anew from
    /// there, so its own notes are stale.
    pub fn under_fresh(&self, rel: &[u8]) -> bool {
        let mut cur = rel;
        while let Some(parent) = parent_rel(cur) {
            let name = &cur[if parent.is_empty() {
                0
            } else {
                parent.len() + 1
            }..];
            if let Some(DirChange::Names { fresh, .. }) = self.dirs.get(parent)
                && fresh.contains(name)
            {
                return true;
            }
            cur = parent;
        }
        false
    }

    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    pub fn extend_whole(&mut self, dirs: impl IntoIterator<Item = Vec<u8>>) {
        for d in dirs {
            self.whole(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_wins_over_names_and_fresh_paths_cover_what_is_below() {
        let mut d = Dirty::default();
        d.name(b"a", b"x", false);
        d.whole(b"a".to_vec());
        d.name(b"a", b"y", false);
        assert_eq!(d.get(b"a"), Some(&DirChange::Whole));
        d.name(b"", b"b", true);
        d.name(b"b/c", b"z", false);
        assert!(d.under_fresh(b"b/c"));
        assert!(d.under_fresh(b"b"));
        assert!(!d.under_fresh(b"a"));
        assert!(!d.under_fresh(b"bb"));
        d.forget_below(b"b");
        assert!(d.get(b"b/c").is_none());
        assert!(d.get(b"").is_some());
    }
}
