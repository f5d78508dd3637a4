//! Adding objects: hashed and encoded (compressed, or a tree as a delta against the same
//! directory's previous tree) on the caller's thread, then put into the backend; within a
//! scan's budget where a scan writes them; copied from another store for a fork.

use crate::budget::Reservation;
use crate::delta;
use crate::error::Result;
use crate::id::{ObjectId, ObjectKind};
use crate::pack::EncodedObject;
use crate::store::Store;
use crate::tree::Tree;

impl Store {
    /// Add an object unless the store already has it. Safe to call from many threads: hashing
    /// and compression happen on the caller's thread, only the append is serialized.
    pub fn put(&self, kind: ObjectKind, raw: &[u8]) -> Result<ObjectId> {
        let id = ObjectId::of(kind, raw);
        if self.has(&id) {
            return Ok(id);
        }
        let encoded = EncodedObject::encode(kind, id, raw);
        self.objects.put(encoded)?;
        Ok(id)
    }

    /// [`Store::put`] within a scan's budget: what is appended is charged to `room`; `None`
    /// (nothing written) when the object is new and does not fit.
    pub(crate) fn put_within(
        &self,
        kind: ObjectKind,
        raw: &[u8],
        room: &Reservation<'_>,
    ) -> Result<Option<ObjectId>> {
        let id = ObjectId::of(kind, raw);
        if self.has(&id) {
            return Ok(Some(id));
        }
        let encoded = EncodedObject::encode(kind, id, raw);
        let len = encoded.record_len();
        if !room.charge(len) {
            return Ok(None);
        }
        if !self.objects.put(encoded)? {
            room.refund(len);
        }
        Ok(Some(id))
    }

    /// A directory's tree within a scan's budget, as [`Store::put_within`], stored as a delta
    /// against `base` (the same directory's previous tree) when that is smaller and the chain
    /// below `base` is short enough; otherwise whole. A base that is missing or unreadable is
    /// not used: the tree is stored whole.
    pub(crate) fn put_tree_within(
        &self,
        raw: &[u8],
        base: Option<&ObjectId>,
        room: &Reservation<'_>,
    ) -> Result<Option<ObjectId>> {
        let id = ObjectId::of(ObjectKind::Tree, raw);
        if self.has(&id) {
            return Ok(Some(id));
        }
        let (encoded, depth) = self.encode_tree(&id, raw, base)?;
        let len = encoded.record_len();
        if !room.charge(len) {
            return Ok(None);
        }
        if !self.objects.put(encoded)? {
            room.refund(len);
        }
        self.trees.insert(id, raw.into(), depth);
        Ok(Some(id))
    }

    /// Add a directory's tree, as a delta against `previous` (that directory's last tree)
    /// when that is smaller; see [`Store::put`].
    pub fn put_tree(&self, tree: &Tree, previous: Option<&ObjectId>) -> Result<ObjectId> {
        let raw = tree.encode();
        let id = ObjectId::of(ObjectKind::Tree, &raw);
        if self.has(&id) {
            return Ok(id);
        }
        let (encoded, depth) = self.encode_tree(&id, &raw, previous)?;
        self.objects.put(encoded)?;
        self.trees.insert(id, raw.into(), depth);
        Ok(id)
    }

    /// `raw` encoded as a delta against `base` if that is worth it, else whole; with its depth.
    fn encode_tree(
        &self,
        id: &ObjectId,
        raw: &[u8],
        base: Option<&ObjectId>,
    ) -> Result<(EncodedObject, u8)> {
        let whole = || (EncodedObject::encode(ObjectKind::Tree, *id, raw), 0);
        let Some(base) = base.filter(|b| *b != id) else {
            return Ok(whole());
        };
        if !self
            .objects
            .info(base)
            .is_some_and(|i| i.kind == ObjectKind::Tree)
        {
            return Ok(whole());
        }
        let Ok((base_raw, base_depth)) = self.tree_bytes(base) else {
            return Ok(whole()); // a damaged base: do not build on it
        };
        if base_depth >= delta::MAX_CHAIN || !delta::usable_as_base(&base_raw) {
            return Ok(whole());
        }
        let Ok(Some(stored)) = delta::encode(base, base_depth + 1, &base_raw, raw) else {
            return Ok(whole());
        };
        // Most deltas are a few percent of the tree; only compare with the whole encoding
        // when this one is not.
        if stored.len() > raw.len() / 4 {
            let (w, d) = whole();
            if w.stored_len() <= stored.len() {
                return Ok((w, d));
            }
        }
        self.allow_deltas()?;
        Ok((EncodedObject::delta(*id, raw.len(), stored), base_depth + 1))
    }

    /// Copy the objects `ids` from another store (fork), as stored where the backends allow
    /// (packs to packs copy records verbatim), every object checked on the way.
    pub(crate) fn copy_objects_from(&self, other: &Store, ids: &[ObjectId]) -> Result<()> {
        self.objects.copy_from(other.objects.as_ref(), ids)
    }

    /// Make the objects added so far durable (the commit does it too; fork does it early,
    /// while it writes files).
    pub(crate) fn sync_objects(&self) -> Result<()> {
        self.objects.sync()
    }
}
