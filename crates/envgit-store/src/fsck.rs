//! `envgit fsck`: read every object back and check it against its id, then check that every
//! step's snapshot is complete, and name the steps a damaged object would break.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use serde::Serialize;

use crate::beneath::{display_rel, join_rel};
use crate::chunk;
use crate::error::Result;
use crate::id::{ObjectId, ObjectKind};
use crate::store::Store;
use crate::tree::EntryKind;

#[derive(Debug, Default, Serialize)]
pub struct FsckReport {
    pub objects_checked: u64,
    pub steps_checked: u64,
    /// Damaged or missing objects and what is wrong with each.
    pub bad_objects: BTreeMap<String, String>,
    /// Steps whose snapshot needs a damaged object, with the paths affected.
    pub broken_steps: BTreeMap<u64, Vec<String>>,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.bad_objects.is_empty() && self.broken_steps.is_empty()
    }
}

pub fn fsck(store: &Store, progress: Option<&AtomicU64>) -> Result<FsckReport> {
    // Opening through the object table and the steps table skips the journal's older
    // frames: every frame is read here, once, checksums and all, and both tables checked.
    let journal = crate::journal::read(&store.journal_path(), 0, store.packs().is_some())?;
    if let Some(packs) = store.packs() {
        packs.check_table(&journal)?;
    }
    store.check_steps_table(&journal)?;
    let entries: Vec<ObjectId> = ObjectKind::ALL
        .into_iter()
        .flat_map(|kind| store.list_objects(kind))
        .collect();
    let bad: Vec<(ObjectId, String)> = entries
        .par_iter()
        .filter_map(|id| {
            if let Some(p) = progress {
                p.fetch_add(1, Ordering::Relaxed);
            }
            store.read_object(id).err().map(|e| (*id, e.to_string()))
        })
        .collect();
    let mut report = FsckReport {
        objects_checked: entries.len() as u64,
        ..Default::default()
    };
    let bad_set: HashSet<ObjectId> = bad.iter().map(|(id, _)| *id).collect();
    for (id, why) in bad {
        report.bad_objects.insert(id.hex(), why);
    }
    // Per tree: the damaged paths below it (memoized, so shared subtrees are walked once).
    let mut memo: HashMap<ObjectId, Vec<String>> = HashMap::new();
    for step in store.steps()? {
        report.steps_checked += 1;
        let Some(tree) = step.tree else { continue };
        let damaged = damaged_paths(store, &tree, &bad_set, &mut memo, &mut report.bad_objects)?;
        if !damaged.is_empty() {
            report.broken_steps.insert(step.number, damaged);
        }
    }
    Ok(report)
}

/// The damaged paths below `root` (relative to it). Depth first with an explicit stack (no
/// recursion), so a tree of any depth is checked.
fn damaged_paths(
    store: &Store,
    root: &ObjectId,
    bad: &HashSet<ObjectId>,
    memo: &mut HashMap<ObjectId, Vec<String>>,
    bad_objects: &mut BTreeMap<String, String>,
) -> Result<Vec<String>> {
    struct Frame {
        id: ObjectId,
        /// Name of this tree in its parent.
        name: Vec<u8>,
        entries: Vec<crate::tree::TreeEntry>,
        next: usize,
        local: Vec<String>,
    }
    let open = |id: &ObjectId,
                name: Vec<u8>,
                bad_objects: &mut BTreeMap<String, String>|
     -> Result<Frame> {
        let mut f = Frame {
            id: *id,
            name,
            entries: Vec::new(),
            next: 0,
            local: Vec::new(),
        };
        if bad.contains(id) || !store.has(id) {
            if !store.has(id) {
                bad_objects.insert(id.hex(), "missing".into());
            }
            f.local.push(String::new());
        } else {
            f.entries = store.read_tree(id)?.entries;
        }
        Ok(f)
    };
    if let Some(m) = memo.get(root) {
        return Ok(m.clone());
    }
    let mut stack = vec![open(root, Vec::new(), bad_objects)?];
    while let Some(f) = stack.last_mut() {
        if let Some(e) = f.entries.get(f.next).cloned() {
            f.next += 1;
            match e.kind {
                EntryKind::Dir => {
                    // Shared subtrees are walked once.
                    if let Some(m) = memo.get(&e.id) {
                        let add: Vec<String> = m.iter().map(|p| prefixed(&e.name, p)).collect();
                        f.local.extend(add);
                    } else {
                        let child = open(&e.id, e.name.clone(), bad_objects)?;
                        stack.push(child);
                    }
                }
                EntryKind::File | EntryKind::Symlink => {
                    if file_damaged(store, &e.id, bad, bad_objects)? {
                        f.local.push(display_rel(&e.name));
                    }
                }
                EntryKind::Marker(_) => {}
            }
            continue;
        }
        let Some(done) = stack.pop() else { break };
        memo.insert(done.id, done.local.clone());
        match stack.last_mut() {
            Some(parent) => parent
                .local
                .extend(done.local.iter().map(|p| prefixed(&done.name, p))),
            None => return Ok(done.local),
        }
    }
    Ok(Vec::new())
}

fn file_damaged(
    store: &Store,
    id: &ObjectId,
    bad: &HashSet<ObjectId>,
    bad_objects: &mut BTreeMap<String, String>,
) -> Result<bool> {
    if bad.contains(id) {
        return Ok(true);
    }
    let Some(info) = store.object_info(id) else {
        bad_objects.insert(id.hex(), "missing".into());
        return Ok(true);
    };
    if info.kind == ObjectKind::ChunkList {
        let (_, list) = store.read_object(id)?;
        for c in chunk::decode_list(&list)? {
            if bad.contains(&c) || !store.has(&c) {
                if !store.has(&c) {
                    bad_objects.insert(c.hex(), "missing".into());
                }
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn prefixed(rel: &[u8], p: &str) -> String {
    if p.is_empty() {
        return display_rel(rel);
    }
    display_rel(&join_rel(rel, p.as_bytes()))
}
