//! Reading objects: whole ones as the backend checked them, trees resolved down their delta
//! chains (and checked by their id) through the tree cache, files streamed blob by blob or
//! chunk by chunk.

use std::sync::Arc;

use crate::backend::{ObjectInfo, missing};
use crate::delta::{self, Delta};
use crate::error::{Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::pack::Stored;
use crate::store::Store;
use crate::tree::Tree;

impl Store {
    pub fn read_object(&self, id: &ObjectId) -> Result<(ObjectKind, Vec<u8>)> {
        let info = self.objects.info(id).ok_or_else(|| missing(id))?;
        if info.kind == ObjectKind::Tree {
            return Ok((info.kind, self.tree_bytes(id)?.0.to_vec()));
        }
        match self.objects.get(id)? {
            Stored::Whole(raw) => Ok((info.kind, raw)),
            Stored::Delta(_) => Err(StoreError::corrupt(format!(
                "object {} is a delta but not a tree",
                id.hex()
            ))),
        }
    }

    /// A tree's bytes and its delta depth: from the cache, or read and, if it is a delta,
    /// resolved down its chain (at most [`Store::MAX_DELTA_CHAIN`].records) and checked by its id.
    pub(crate) fn tree_bytes(&self, id: &ObjectId) -> Result<(Arc<[u8]>, u8)> {
        if let Some(hit) = self.trees.get(id) {
            return Ok(hit);
        }
        // Down the chain to a tree we have (cached or stored whole), then back up.
        let mut chain: Vec<(ObjectId, u64, Vec<u8>)> = Vec::new();
        let mut id_at = *id;
        let mut raw_len_at = self.tree_info(id)?.raw_len;
        let (mut raw, mut depth): (Arc<[u8]>, u8) = loop {
            match self.objects.get(&id_at)? {
                Stored::Whole(raw) => {
                    let raw: Arc<[u8]> = raw.into();
                    self.trees.insert(id_at, raw.clone(), 0);
                    break (raw, 0);
                }
                Stored::Delta(stored) => {
                    let bad = |why: String| {
                        StoreError::corrupt(format!("tree {} (a delta): {why}", id_at.hex()))
                    };
                    let d = Delta::parse(&stored)
                        .ok_or_else(|| bad("its delta header does not decode".into()))?;
                    let expected = chain.last().map(|(_, _, s)| s[32] - 1);
                    if expected.is_some_and(|e| e != d.depth) {
                        return Err(bad(format!(
                            "its depth {} does not follow its successor's",
                            d.depth
                        )));
                    }
                    let base = d.base;
                    let depth = d.depth;
                    chain.push((id_at, raw_len_at, stored));
                    if let Some((raw, base_depth)) = self.trees.get(&base) {
                        if base_depth + 1 != depth {
                            return Err(bad(format!(
                                "its depth {depth} does not follow its base's ({base_depth})"
                            )));
                        }
                        break (raw, base_depth);
                    }
                    let base_info = self
                        .objects
                        .info(&base)
                        .ok_or_else(|| bad(format!("its delta base {} is missing", base.hex())))?;
                    if base_info.kind != ObjectKind::Tree {
                        return Err(bad(format!("its delta base {} is not a tree", base.hex())));
                    }
                    (id_at, raw_len_at) = (base, base_info.raw_len);
                }
            }
        };
        if chain.last().is_some_and(|(_, _, s)| s[32] != depth + 1) {
            return Err(StoreError::corrupt(format!(
                "tree {}: its delta chain does not end at the depth it names",
                id.hex()
            )));
        }
        while let Some((id_at, raw_len, stored)) = chain.pop() {
            let bad =
                |why: &str| StoreError::corrupt(format!("tree {} (a delta): {why}", id_at.hex()));
            let d = Delta::parse(&stored).ok_or_else(|| bad("its delta header does not decode"))?;
            let out = delta::decode(d.frame, &raw, raw_len as usize)
                .map_err(|_| bad("does not decompress against its base"))?;
            if out.len() as u64 != raw_len || ObjectId::of(ObjectKind::Tree, &out) != id_at {
                return Err(bad("content does not match its id"));
            }
            (raw, depth) = (out.into(), d.depth);
            self.trees.insert(id_at, raw.clone(), depth);
        }
        Ok((raw, depth))
    }

    fn tree_info(&self, id: &ObjectId) -> Result<ObjectInfo> {
        self.objects
            .info(id)
            .filter(|i| i.kind == ObjectKind::Tree)
            .ok_or_else(|| StoreError::corrupt(format!("tree {} is missing", id.hex())))
    }

    /// How many deltas deep a tree is stored (0: whole); at most [`Store::MAX_DELTA_CHAIN`].
    pub fn tree_depth(&self, id: &ObjectId) -> Result<u8> {
        self.tree_info(id)?;
        Ok(self.tree_bytes(id)?.1)
    }

    /// The longest chain of deltas a tree is stored on.
    pub const MAX_DELTA_CHAIN: u8 = delta::MAX_CHAIN;

    /// The tree `id` is stored as a delta against, if it is a stored delta.
    pub(crate) fn delta_base(&self, id: &ObjectId) -> Result<Option<ObjectId>> {
        if !self.objects.info(id).is_some_and(|i| i.delta) {
            return Ok(None);
        }
        match self.objects.get(id)? {
            Stored::Whole(_) => Ok(None),
            Stored::Delta(stored) => Ok(Delta::parse(&stored).map(|d| d.base)),
        }
    }

    pub fn read_tree(&self, id: &ObjectId) -> Result<Tree> {
        match self.read_object(id)? {
            (ObjectKind::Tree, bytes) => Tree::decode(&bytes),
            _ => Err(StoreError::corrupt(format!(
                "object {} is not a tree",
                id.hex()
            ))),
        }
    }

    /// Stream a file's content (a blob, or the chunks of a chunk list) into `out`.
    pub fn read_file_into(
        &self,
        id: &ObjectId,
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        match self.read_object(id)? {
            (ObjectKind::Blob, bytes) => out(&bytes),
            (ObjectKind::ChunkList, list) => {
                for chunk in crate::chunk::decode_list(&list)? {
                    let (kind, bytes) = self.read_object(&chunk)?;
                    if kind != ObjectKind::Blob {
                        return Err(StoreError::corrupt("chunk list names a non-blob"));
                    }
                    out(&bytes)?;
                }
                Ok(())
            }
            (ObjectKind::Tree, _) => Err(StoreError::corrupt(format!(
                "object {} is a tree, not file content",
                id.hex()
            ))),
        }
    }

    pub fn read_file(&self, id: &ObjectId) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_file_into(id, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })?;
        Ok(out)
    }
}
