//! Recently read or written trees, as bytes, with their delta depth: a new version of a
//! directory is stored as a delta against the last one, and resolving a delta needs its base,
//! so the trees a step touches are the ones the next step needs. Bounded in bytes; when full it
//! starts over (the next reads refill it), which keeps it simple and its memory fixed.

use std::sync::{Arc, Mutex};

use crate::id::{IdMap, ObjectId};

/// Bytes of trees kept: the edited paths of a few hundred steps at 100,000 files, and small
/// beside the supervisor's memory goal (64 MiB at 100,000 files).
const BUDGET: usize = 8 << 20;

#[derive(Default)]
pub struct TreeCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    trees: IdMap<(Arc<[u8]>, u8)>,
    bytes: usize,
}

impl TreeCache {
    /// A tree's bytes and its delta depth (0: stored whole), if cached.
    pub fn get(&self, id: &ObjectId) -> Option<(Arc<[u8]>, u8)> {
        let inner = self.inner.lock().ok()?;
        inner
            .trees
            .get(id)
            .map(|(raw, depth)| (raw.clone(), *depth))
    }

    /// Remember a tree's bytes (already checked against `id`) and its depth.
    pub fn insert(&self, id: ObjectId, raw: Arc<[u8]>, depth: u8) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if raw.len() > BUDGET / 4 || inner.trees.contains_key(&id) {
            return;
        }
        if inner.bytes + raw.len() > BUDGET {
            inner.trees.clear();
            inner.bytes = 0;
        }
        inner.bytes += raw.len();
        inner.trees.insert(id, (raw, depth));
    }
}
