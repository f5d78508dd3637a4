//! Walking what a tree reaches: every object id below it, each once.

use std::collections::HashSet;

use crate::chunk;
use crate::error::Result;
use crate::id::{ObjectId, ObjectKind};
use crate::store::Store;
use crate::tree::EntryKind;

/// Add every object reachable from `tree` (itself included) to `seen`. Subtrees already in
/// `seen` are not walked again, so walking many similar steps costs what they differ by.
pub fn collect(store: &Store, tree: &ObjectId, seen: &mut HashSet<ObjectId>) -> Result<()> {
    // An explicit stack, not recursion: a tree of any depth is walked.
    let mut todo = vec![*tree];
    while let Some(tree) = todo.pop() {
        if !seen.insert(tree) {
            continue;
        }
        let t = store.read_tree(&tree)?;
        for e in &t.entries {
            match e.kind {
                EntryKind::Dir => {
                    if !seen.contains(&e.id) {
                        todo.push(e.id);
                    }
                }
                EntryKind::File | EntryKind::Symlink => {
                    if seen.insert(e.id) {
                        let kind = store.object_info(&e.id).map(|i| i.kind);
                        if kind == Some(ObjectKind::ChunkList) {
                            let (_, list) = store.read_object(&e.id)?;
                            seen.extend(chunk::decode_list(&list)?);
                        }
                    }
                }
                EntryKind::Marker(_) => {}
            }
        }
    }
    Ok(())
}

/// Add to `live` the delta bases its trees need to be read (each base's chain down to a tree
/// stored whole), as records only: what a base tree names is not made live by it. gc keeps
/// these records, fork copies them.
pub fn add_delta_bases(store: &Store, live: &mut HashSet<ObjectId>) -> Result<()> {
    let deltas: Vec<ObjectId> = live
        .iter()
        .filter(|id| store.object_info(id).is_some_and(|i| i.delta))
        .copied()
        .collect();
    let mut bases: HashSet<ObjectId> = HashSet::new();
    for delta in deltas {
        let mut cur = delta;
        // Chains are bounded (delta::MAX_CHAIN); `bases` stops a walk where another began.
        while let Some(base) = store.delta_base(&cur)? {
            if live.contains(&base) {
                // A live tree: its own walk (in this loop) covers its chain.
                break;
            }
            if !bases.insert(base) {
                break;
            }
            cur = base;
        }
    }
    live.extend(bases);
    Ok(())
}
