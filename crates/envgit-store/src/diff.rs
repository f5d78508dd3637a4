//! Differences between two trees, descending only into subtrees whose ids differ.

use crate::beneath::{display_rel, join_rel};
use crate::error::Result;
use crate::id::ObjectId;
use crate::step::{Change, ChangeKind};
use crate::store::Store;
use crate::tree::{EntryKind, Tree, TreeEntry};

/// One changed leaf: a file, symlink, marker or empty directory that was added, removed or
/// changed (content, kind or mode).
#[derive(Clone, Debug)]
pub struct EntryDiff {
    pub path: Vec<u8>,
    pub old: Option<TreeEntry>,
    pub new: Option<TreeEntry>,
}

impl EntryDiff {
    pub fn to_change(&self) -> Change {
        let change = match (&self.old, &self.new) {
            (None, _) => ChangeKind::Added,
            (_, None) => ChangeKind::Deleted,
            _ => ChangeKind::Modified,
        };
        let e = self.new.as_ref().or(self.old.as_ref());
        let entry = match e.map(|e| e.kind) {
            Some(EntryKind::File) => "file",
            Some(EntryKind::Symlink) => "symlink",
            Some(EntryKind::Dir) => "dir",
            _ => "marker",
        };
        Change {
            path: display_rel(&self.path),
            change,
            entry: entry.into(),
            old_size: self.old.as_ref().map(|e| e.size),
            new_size: self.new.as_ref().map(|e| e.size),
        }
    }
}

pub fn diff_trees(
    store: &Store,
    old: Option<&ObjectId>,
    new: Option<&ObjectId>,
) -> Result<Vec<Change>> {
    Ok(diff_entries(store, old, new)?
        .iter()
        .map(EntryDiff::to_change)
        .collect())
}

pub fn diff_entries(
    store: &Store,
    old: Option<&ObjectId>,
    new: Option<&ObjectId>,
) -> Result<Vec<EntryDiff>> {
    let mut out = Vec::new();
    if old == new {
        return Ok(out);
    }
    let load = |id: Option<&ObjectId>| -> Result<Tree> {
        match id {
            Some(id) => store.read_tree(id),
            None => Ok(Tree::default()),
        }
    };
    walk(store, b"", &load(old)?, &load(new)?, &mut out)?;
    Ok(out)
}

fn walk(store: &Store, rel: &[u8], old: &Tree, new: &Tree, out: &mut Vec<EntryDiff>) -> Result<()> {
    let (mut i, mut j) = (0, 0);
    while i < old.entries.len() || j < new.entries.len() {
        let o = old.entries.get(i);
        let n = new.entries.get(j);
        let (o, n) = match (o, n) {
            (Some(o), Some(n)) if o.name == n.name => {
                i += 1;
                j += 1;
                (Some(o), Some(n))
            }
            (Some(o), Some(n)) if o.name < n.name => {
                i += 1;
                (Some(o), None)
            }
            (Some(_), Some(n)) => {
                j += 1;
                (None, Some(n))
            }
            (Some(o), None) => {
                i += 1;
                (Some(o), None)
            }
            (None, Some(n)) => {
                j += 1;
                (None, Some(n))
            }
            (None, None) => break,
        };
        let name = &o.or(n).map(|e| e.name.clone()).unwrap_or_default();
        let path = join_rel(rel, name);
        let is_dir = |e: Option<&TreeEntry>| e.is_some_and(|e| e.kind == EntryKind::Dir);
        if let (Some(o), Some(n)) = (o, n)
            && o == n
        {
            continue;
        }
        if is_dir(o) || is_dir(n) {
            let sub = |e: Option<&TreeEntry>| -> Result<Tree> {
                match e {
                    Some(e) if e.kind == EntryKind::Dir => store.read_tree(&e.id),
                    _ => Ok(Tree::default()),
                }
            };
            let (ot, nt) = (sub(o)?, sub(n)?);
            // A non-directory replaced by a directory (or the reverse) is a delete and an add.
            if let Some(o) = o.filter(|e| e.kind != EntryKind::Dir) {
                out.push(EntryDiff {
                    path: path.clone(),
                    old: Some(o.clone()),
                    new: None,
                });
            }
            walk(store, &path, &ot, &nt, out)?;
            match (o, n) {
                // Empty directories are leaves of their own.
                (Some(od), Some(nd)) if is_dir(o) && is_dir(n) => {
                    let empty_mode_change =
                        ot.entries.is_empty() && nt.entries.is_empty() && od.mode != nd.mode;
                    if empty_mode_change {
                        out.push(EntryDiff {
                            path: path.clone(),
                            old: Some(od.clone()),
                            new: Some(nd.clone()),
                        });
                    }
                }
                (Some(od), _) if is_dir(o) && ot.entries.is_empty() => {
                    out.push(EntryDiff {
                        path: path.clone(),
                        old: Some(od.clone()),
                        new: None,
                    });
                }
                (_, Some(nd)) if is_dir(n) && nt.entries.is_empty() => {
                    out.push(EntryDiff {
                        path: path.clone(),
                        old: None,
                        new: Some(nd.clone()),
                    });
                }
                _ => {}
            }
            if let Some(n) = n.filter(|e| e.kind != EntryKind::Dir) {
                out.push(EntryDiff {
                    path,
                    old: None,
                    new: Some(n.clone()),
                });
            }
            continue;
        }
        out.push(EntryDiff {
            path,
            old: o.cloned(),
            new: n.cloned(),
        });
    }
    Ok(())
}
