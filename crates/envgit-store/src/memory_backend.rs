//! Objects kept in memory, encoded as the packs would store them and checked against their id
//! on every read: the second implementation of [`ObjectBackend`], which the store's tests run
//! against beside the packs. It keeps its own index, so it adds nothing to the journal. Like a
//! remote object store, its committed objects can be shared by several handles (one per
//! opened store), while what a handle put and has not committed is its own.

use std::any::Any;
use std::sync::{Arc, PoisonError, RwLock};

use crate::backend::{ObjectBackend, ObjectInfo, missing};
use crate::error::{Result, StoreError};
use crate::id::{IdMap, ObjectId, ObjectKind};
use crate::journal_file::JournalMark;
use crate::pack::{EncodedObject, Location, Stored};

type Objects = IdMap<Arc<EncodedObject>>;

#[derive(Default)]
pub struct MemoryBackend {
    committed: Arc<RwLock<Objects>>,
    pending: RwLock<Objects>,
}

impl MemoryBackend {
    /// Another handle on the same committed objects, with nothing pending: what a second
    /// process opening the same store sees.
    pub fn another_handle(&self) -> Self {
        Self {
            committed: self.committed.clone(),
            pending: RwLock::default(),
        }
    }

    fn find(&self, id: &ObjectId) -> Result<Option<Arc<EncodedObject>>> {
        if let Some(o) = self.committed.read().map_err(poisoned)?.get(id) {
            return Ok(Some(o.clone()));
        }
        Ok(self.pending.read().map_err(poisoned)?.get(id).cloned())
    }
}

fn info_of(object: &EncodedObject) -> ObjectInfo {
    ObjectInfo {
        kind: object.kind,
        raw_len: object.raw_len,
        stored_len: u32::try_from(object.stored_len()).unwrap_or(u32::MAX),
        delta: object.is_delta(),
    }
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::corrupt("poisoned")
}

impl ObjectBackend for MemoryBackend {
    fn info(&self, id: &ObjectId) -> Option<ObjectInfo> {
        self.find(id).ok()?.as_deref().map(info_of)
    }

    fn get(&self, id: &ObjectId) -> Result<Stored> {
        self.find(id)?.ok_or_else(|| missing(id))?.decode()
    }

    fn put(&self, object: EncodedObject) -> Result<bool> {
        // The pending lock is held across the check, so two threads never both add one object.
        let mut pending = self.pending.write().map_err(poisoned)?;
        if pending.contains_key(&object.id)
            || self
                .committed
                .read()
                .map_err(poisoned)?
                .contains_key(&object.id)
        {
            return Ok(false);
        }
        pending.insert(object.id, Arc::new(object));
        Ok(true)
    }

    fn list(&self, kind: ObjectKind) -> Vec<ObjectId> {
        let Ok(committed) = self.committed.read() else {
            return Vec::new();
        };
        committed
            .values()
            .filter(|o| o.kind == kind)
            .map(|o| o.id)
            .collect()
    }

    fn count(&self) -> usize {
        self.committed.read().map_or(0, |c| c.len())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn pending_frames(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }

    fn commit_pending(&mut self, _: JournalMark) {
        // The step's record is in the journal: its objects are committed even if a thread
        // panicked while holding a lock.
        let pending = std::mem::take(
            self.pending
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.committed
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(pending);
    }

    fn load(&mut self, _: Vec<(ObjectId, Location)>, _: JournalMark) {
        // Its index is its own: the journal lists no objects of a store kept in memory.
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
