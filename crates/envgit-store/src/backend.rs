//! The object database behind a small trait, in the style of jj's `Backend`: objects go in
//! encoded (compressed, or a tree delta) and come out as stored, checked against their id.
//! Trees, diff, rewind, restore, fork and fsck reach objects only through [`crate::Store`]'s
//! reads and writes, which reach them only through this trait; the local packs
//! ([`crate::PackBackend`]) are the default, [`crate::MemoryBackend`] keeps them in memory
//! (tests, and the shape a remote object store takes).
//!
//! A step's objects become part of the store when its record is committed: what was put since
//! the last commit is pending until then, readable by this process only. The local packs
//! publish their index in the journal, so committing is two calls around the journal append
//! ([`ObjectBackend::pending_frames`], then [`ObjectBackend::commit_pending`]).

use std::any::Any;
use std::collections::HashMap;

use crate::error::{Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::journal_file::JournalMark;
use crate::pack::{EncodedObject, Location, Stored};

/// What is known of an object without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub kind: ObjectKind,
    /// Its canonical bytes.
    pub raw_len: u64,
    /// Bytes its content takes as stored (compressed, or the delta).
    pub stored_len: u32,
    /// Stored as a delta against another tree.
    pub delta: bool,
}

impl From<&Location> for ObjectInfo {
    fn from(loc: &Location) -> Self {
        Self {
            kind: loc.kind,
            raw_len: loc.raw_len,
            stored_len: loc.stored_len,
            delta: loc.delta,
        }
    }
}

pub trait ObjectBackend: Send + Sync + 'static {
    /// What is known of `id`: committed, or put by this process since its last commit.
    fn info(&self, id: &ObjectId) -> Option<ObjectInfo>;

    /// The object as stored, its integrity checked: a whole object is checked against its
    /// BLAKE3 id, a tree delta is returned for the store to resolve (and check).
    fn get(&self, id: &ObjectId) -> Result<Stored>;

    /// Add an object unless it is there already (committed or pending); true if it was added.
    fn put(&self, object: EncodedObject) -> Result<bool>;

    /// The committed objects of one kind.
    fn list(&self, kind: ObjectKind) -> Vec<ObjectId>;

    /// How many objects are committed.
    fn count(&self) -> usize;

    /// Make everything put so far durable.
    fn sync(&self) -> Result<()>;

    /// Synced, the journal frames that publish what was put since the last commit, to be
    /// appended before the step's record (empty for a backend that keeps its own index).
    fn pending_frames(&self) -> Result<Vec<u8>>;

    /// The journal now holds those frames up to `mark`: what was pending is committed.
    fn commit_pending(&mut self, mark: JournalMark);

    /// The journal (`journal`: its device and inode) is about to be read from its start: at
    /// a store's open, or because it was rewritten (gc) and what it said before is void.
    /// Forget what was loaded; the position from which its objects frames are needed (the
    /// local packs' object table holds those before the point it covers).
    fn begin_full_read(&mut self, journal: (u64, u64)) -> u64 {
        let _ = journal;
        0
    }

    /// The committed objects its own index (the local packs' object table) does not hold,
    /// as of the journal's last commit, for the steps table to carry ([`Untabled`]); `None`
    /// for a backend whose index is not the journal's.
    fn untabled(&self) -> Option<Untabled> {
        None
    }

    /// After [`ObjectBackend::begin_full_read`]: take `untabled` (from the steps table) as the
    /// objects the journal records up to the point it was written at, if it continues from
    /// the index just loaded; whether it did (else the journal's frames are read).
    fn resume(&mut self, untabled: Untabled) -> bool {
        let _ = untabled;
        false
    }

    /// Objects the journal records, read from it up to `mark` (committed by this or another
    /// process).
    fn load(&mut self, objects: Vec<(ObjectId, Location)>, mark: JournalMark);

    /// Copy `ids` from `source` (fork), every object checked on the way. By default each is
    /// read and encoded again (a delta stays a delta); the packs copy records verbatim from
    /// other packs.
    fn copy_from(&self, source: &dyn ObjectBackend, ids: &[ObjectId]) -> Result<()> {
        copy_each(self, source, ids)
    }

    /// For copying between backends of one kind ([`ObjectBackend::copy_from`]).
    fn as_any(&self) -> &dyn Any;
}

/// Copy `ids` one object at a time: read from `source`, encoded again, put into `dest`.
/// The committed objects an object table does not hold, as of a point in the journal: what
/// reading the journal's objects frames after the table would give. Without it an open read
/// every frame after the table's point, which a history of steps that add no object (each a
/// ~1 KB record) pushes ever further back.
pub struct Untabled {
    /// The point the object table it continues covers; 0: there was none.
    pub from: u64,
    /// Per pack, the end of its last committed object (as the table keeps them).
    pub pack_ends: HashMap<u64, u64>,
    /// The objects committed after `from`, each at its first location.
    pub entries: Vec<(ObjectId, Location)>,
}

pub(crate) fn copy_each(
    dest: &(impl ObjectBackend + ?Sized),
    source: &dyn ObjectBackend,
    ids: &[ObjectId],
) -> Result<()> {
    for id in ids {
        if dest.info(id).is_some() {
            continue;
        }
        let info = source.info(id).ok_or_else(|| missing(id))?;
        let encoded = match source.get(id)? {
            Stored::Whole(raw) => EncodedObject::encode(info.kind, *id, &raw),
            Stored::Delta(stored) => EncodedObject::delta(*id, info.raw_len as usize, stored),
        };
        dest.put(encoded)?;
    }
    Ok(())
}

pub(crate) fn missing(id: &ObjectId) -> StoreError {
    StoreError::corrupt(format!("object {} is missing", id.hex()))
}
