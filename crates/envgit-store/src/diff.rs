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
    walk(store, load(old)?, load(new)?, &mut out)?;
    Ok(out)
}

/// One pair of directories being compared; `post` is emitted when it is done.
struct Frame {
    rel: Vec<u8>,
    old: Tree,
    new: Tree,
    i: usize,
    j: usize,
    post: Vec<EntryDiff>,
}

/// Depth first with an explicit stack (no recursion): trees of any depth are compared. The
/// output order is that of a recursive walk: a replaced non-directory, then what is below,
/// then an empty directory's own entry, then an added non-directory.
fn walk(store: &Store, old: Tree, new: Tree, out: &mut Vec<EntryDiff>) -> Result<()> {
    let mut stack = vec![Frame {
        rel: Vec::new(),
        old,
        new,
        i: 0,
        j: 0,
        post: Vec::new(),
    }];
    while let Some(f) = stack.last_mut() {
        let o = f.old.entries.get(f.i);
        let n = f.new.entries.get(f.j);
        let (o, n) = match (o, n) {
            (Some(o), Some(n)) if o.name == n.name => {
                f.i += 1;
                f.j += 1;
                (Some(o), Some(n))
            }
            (Some(o), Some(n)) if o.name < n.name => {
                f.i += 1;
                (Some(o), None)
            }
            (Some(_), Some(n)) => {
                f.j += 1;
                (None, Some(n))
            }
            (Some(o), None) => {
                f.i += 1;
                (Some(o), None)
            }
            (None, Some(n)) => {
                f.j += 1;
                (None, Some(n))
            }
            (None, None) => {
                if let Some(done) = stack.pop() {
                    out.extend(done.post);
                }
                continue;
            }
        };
        if let (Some(o), Some(n)) = (o, n)
            && o == n
        {
            continue;
        }
        let (o, n) = (o.cloned(), n.cloned());
        let (o, n) = (o.as_ref(), n.as_ref());
        let name = &o.or(n).map(|e| e.name.clone()).unwrap_or_default();
        let path = join_rel(&f.rel, name);
        let is_dir = |e: Option<&TreeEntry>| e.is_some_and(|e| e.kind == EntryKind::Dir);
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
            let mut post = Vec::new();
            match (o, n) {
                // Empty directories are leaves of their own.
                (Some(od), Some(nd)) if is_dir(o) && is_dir(n) => {
                    let empty_mode_change =
                        ot.entries.is_empty() && nt.entries.is_empty() && od.mode != nd.mode;
                    if empty_mode_change {
                        post.push(EntryDiff {
                            path: path.clone(),
                            old: Some(od.clone()),
                            new: Some(nd.clone()),
                        });
                    }
                }
                (Some(od), _) if is_dir(o) && ot.entries.is_empty() => {
                    post.push(EntryDiff {
                        path: path.clone(),
                        old: Some(od.clone()),
                        new: None,
                    });
                }
                (_, Some(nd)) if is_dir(n) && nt.entries.is_empty() => {
                    post.push(EntryDiff {
                        path: path.clone(),
                        old: None,
                        new: Some(nd.clone()),
                    });
                }
                _ => {}
            }
            if let Some(n) = n.filter(|e| e.kind != EntryKind::Dir) {
                post.push(EntryDiff {
                    path: path.clone(),
                    old: None,
                    new: Some(n.clone()),
                });
            }
            stack.push(Frame {
                rel: path,
                old: ot,
                new: nt,
                i: 0,
                j: 0,
                post,
            });
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
