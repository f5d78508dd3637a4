//! Reading and replacing the entry at one path of a tree, writing only the trees on the way.
//! The supervisor uses it to put protected paths back after a step.

use crate::error::Result;
use crate::id::{ObjectId, ObjectKind};
use crate::store::Store;
use crate::tree::{EntryKind, Tree, TreeEntry};

fn parts(path: &str) -> Vec<&[u8]> {
    path.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .map(str::as_bytes)
        .collect()
}

/// The entry at `path` ('/'-separated) in `tree`, if any.
pub fn entry_at(store: &Store, tree: &ObjectId, path: &str) -> Result<Option<TreeEntry>> {
    let mut cur = *tree;
    let parts = parts(path);
    for (i, name) in parts.iter().enumerate() {
        let t = store.read_tree(&cur)?;
        let Some(e) = t.get(name) else {
            return Ok(None);
        };
        if i + 1 == parts.len() {
            return Ok(Some(e.clone()));
        }
        if e.kind != EntryKind::Dir {
            return Ok(None);
        }
        cur = e.id;
    }
    Ok(None)
}

/// `tree` with the entry at `path` replaced by `entry` (removed when `None`), creating
/// directories on the way as needed.
pub fn graft(
    store: &Store,
    tree: &ObjectId,
    path: &str,
    entry: Option<&TreeEntry>,
) -> Result<ObjectId> {
    let parts = parts(path);
    graft_in(store, Some(tree), &parts, entry)
}

fn graft_in(
    store: &Store,
    tree: Option<&ObjectId>,
    parts: &[&[u8]],
    entry: Option<&TreeEntry>,
) -> Result<ObjectId> {
    let mut t = match tree {
        Some(id) => store.read_tree(id)?,
        None => Tree::default(),
    };
    let Some((first, rest)) = parts.split_first() else {
        return store.put(ObjectKind::Tree, &t.encode());
    };
    let pos = t.entries.binary_search_by(|e| e.name.as_slice().cmp(first));
    let new_entry = if rest.is_empty() {
        entry.map(|e| TreeEntry {
            name: first.to_vec(),
            ..e.clone()
        })
    } else {
        let sub = match pos {
            Ok(i) if t.entries[i].kind == EntryKind::Dir => Some(t.entries[i].id),
            _ => None,
        };
        let id = graft_in(store, sub.as_ref(), rest, entry)?;
        let mode = match pos {
            Ok(i) if t.entries[i].kind == EntryKind::Dir => t.entries[i].mode,
            _ => 0o755,
        };
        Some(TreeEntry {
            name: first.to_vec(),
            kind: EntryKind::Dir,
            mode,
            size: 0,
            id,
        })
    };
    match (pos, new_entry) {
        (Ok(i), Some(e)) => t.entries[i] = e,
        (Ok(i), None) => {
            t.entries.remove(i);
        }
        (Err(i), Some(e)) => t.entries.insert(i, e),
        (Err(_), None) => {}
    }
    // The step's own tree is the grafted one's previous version: store only the difference.
    store.put_tree(&t, tree)
}
