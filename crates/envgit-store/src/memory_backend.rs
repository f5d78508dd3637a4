//! Objects kept in memory, encoded as the packs would store them and checked against their id
//! on every read: the second implementation of [`ObjectBackend`], which the store's tests run
//! against beside the packs. It keeps its own index, so it adds nothing to the journal; a
//! store using it lasts as long as the process (its steps are in the journal, its objects not).

use std::any::Any;
use std::collections::HashMap;
use std::sync::RwLock;

use crate::backend::{ObjectBackend, ObjectInfo, missing};
use crate::error::{Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::journal_file::JournalMark;
use crate::pack::{EncodedObject, Location, Stored};

#[derive(Default)]
pub struct MemoryBackend {
    objects: RwLock<Objects>,
}

#[derive(Default)]
struct Objects {
    committed: HashMap<ObjectId, EncodedObject>,
    pending: HashMap<ObjectId, EncodedObject>,
}

impl Objects {
    fn find(&self, id: &ObjectId) -> Option<&EncodedObject> {
        self.committed.get(id).or_else(|| self.pending.get(id))
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
        self.objects.read().ok()?.find(id).map(info_of)
    }

    fn get(&self, id: &ObjectId) -> Result<Stored> {
        let objects = self.objects.read().map_err(poisoned)?;
        objects.find(id).ok_or_else(|| missing(id))?.decode()
    }

    fn put(&self, object: EncodedObject) -> Result<bool> {
        let mut objects = self.objects.write().map_err(poisoned)?;
        if objects.find(&object.id).is_some() {
            return Ok(false);
        }
        objects.pending.insert(object.id, object);
        Ok(true)
    }

    fn list(&self, kind: ObjectKind) -> Vec<ObjectId> {
        let Ok(objects) = self.objects.read() else {
            return Vec::new();
        };
        objects
            .committed
            .values()
            .filter(|o| o.kind == kind)
            .map(|o| o.id)
            .collect()
    }

    fn count(&self) -> usize {
        self.objects.read().map_or(0, |o| o.committed.len())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn pending_frames(&self) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }

    fn commit_pending(&mut self, _: JournalMark) {
        if let Ok(objects) = self.objects.get_mut() {
            let pending = std::mem::take(&mut objects.pending);
            objects.committed.extend(pending);
        }
    }

    fn load(&mut self, _: Vec<(ObjectId, Location)>, _: JournalMark, _: bool) {
        // Its index is its own: the journal lists no objects of a store kept in memory.
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
