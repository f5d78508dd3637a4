//! Each directory's state by relative path. A state loaded from the stat index stays as its
//! record's bytes until something asks for it: a step fed by the watching daemon reads a few
//! directories, and decoding every record of the index into entries (a name allocated per
//! file, ~160 bytes of fresh memory each) was most of its load: 2 ms at 10,000 files, 22 ms at
//! 100,000 (`perf`: `malloc` and page faults). Every record was checked when the index was
//! loaded ([`crate::stat_index`]), so decoding one later cannot fail. A walk of the whole tree
//! reads each record once and does not keep what it decoded ([`DirMap::peek`]).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use std::borrow::Cow;

use super::entry::{CachedEntry, DirState};
use crate::id::ObjectId;
use crate::mapped::FileBytes;

/// How the stat index reads a record it checked when it was loaded.
#[derive(Clone, Copy)]
pub(crate) struct RecordCodec {
    /// The whole state.
    pub decode: fn(&[u8]) -> Option<DirState>,
    /// The tree id alone, without decoding the entries.
    pub tree: fn(&[u8]) -> Option<ObjectId>,
    /// The stamp, when the entries are exactly these (compared without decoding them).
    pub stamp_if_same: fn(&[u8], &[CachedEntry]) -> Option<i64>,
}

struct Slot {
    /// The record's bytes in the loaded index, while it holds what is decoded (or would be).
    record: Option<Range<usize>>,
    state: OnceLock<DirState>,
}

impl Slot {
    fn decoded(state: DirState) -> Self {
        Self {
            record: None,
            state: OnceLock::from(state),
        }
    }
}

#[derive(Default)]
pub(crate) struct DirMap {
    slots: HashMap<Vec<u8>, Slot>,
    /// The loaded index's bytes, which records point into.
    loaded: Arc<FileBytes>,
    codec: Option<RecordCodec>,
}

/// A directory as the map holds it: still its loaded record's bytes, or decoded.
pub(crate) enum Held<'a> {
    Record(&'a [u8]),
    State(&'a DirState),
}

impl DirMap {
    /// States of `records` (relative path, range in `bytes`), each decoded by `decode` on
    /// first use.
    pub(crate) fn of_records(
        bytes: Arc<FileBytes>,
        records: impl IntoIterator<Item = (Vec<u8>, Range<usize>)>,
        codec: RecordCodec,
    ) -> Self {
        let slots = records
            .into_iter()
            .map(|(rel, range)| {
                let slot = Slot {
                    record: Some(range),
                    state: OnceLock::new(),
                };
                (rel, slot)
            })
            .collect();
        Self {
            slots,
            loaded: bytes,
            codec: Some(codec),
        }
    }

    fn state_of<'a>(&'a self, slot: &'a Slot) -> &'a DirState {
        slot.state.get_or_init(|| {
            let record = slot.record.clone().and_then(|r| self.loaded.get(r));
            // Checked at load: the same bytes decode the same way.
            record
                .zip(self.codec)
                .and_then(|(bytes, codec)| (codec.decode)(bytes))
                .unwrap_or_default()
        })
    }

    pub(crate) fn get(&self, rel: &[u8]) -> Option<&DirState> {
        self.slots.get(rel).map(|s| self.state_of(s))
    }

    /// The loaded record of `rel` when it is not decoded (nor replaced).
    fn record_only(&self, rel: &[u8]) -> Option<(&[u8], RecordCodec)> {
        let slot = self.slots.get(rel)?;
        if slot.state.get().is_some() {
            return None;
        }
        let bytes = slot.record.clone().and_then(|r| self.loaded.get(r))?;
        Some((bytes, self.codec?))
    }

    /// `rel`'s state for one use, decoded for it and not kept: a walk of the whole tree reads
    /// each directory's last state once, and keeping every one decoded beside the states it
    /// makes held two copies of the index at its end (~160 bytes a file each).
    pub(crate) fn peek(&self, rel: &[u8]) -> Option<Cow<'_, DirState>> {
        match self.record_only(rel) {
            Some((bytes, codec)) => Some(Cow::Owned((codec.decode)(bytes).unwrap_or_default())),
            None => self.get(rel).map(Cow::Borrowed),
        }
    }

    /// `rel`'s tree id, read from its record without decoding it.
    pub(crate) fn tree_of(&self, rel: &[u8]) -> Option<ObjectId> {
        match self.record_only(rel) {
            Some((bytes, codec)) => (codec.tree)(bytes),
            None => self.get(rel).map(|d| d.tree),
        }
    }

    /// `rel`'s stamp when its entries are exactly `entries`, compared with its record without
    /// decoding it; `None` when they differ or `rel` is unknown.
    pub(crate) fn stamp_if_same(&self, rel: &[u8], entries: &[CachedEntry]) -> Option<i64> {
        match self.record_only(rel) {
            Some((bytes, codec)) => (codec.stamp_if_same)(bytes, entries),
            None => self
                .get(rel)
                .filter(|d| d.entries == entries)
                .map(|d| d.stamp_ns),
        }
    }

    /// The directory's state to change: it is no longer its loaded record.
    #[cfg(test)]
    pub(crate) fn get_mut(&mut self, rel: &[u8]) -> Option<&mut DirState> {
        let slot = self.slots.get(rel)?;
        self.state_of(slot);
        let slot = self.slots.get_mut(rel)?;
        slot.record = None;
        slot.state.get_mut()
    }

    /// How the map holds `rel`: the loaded record's bytes unless it was decoded or replaced.
    pub(crate) fn held(&self, rel: &[u8]) -> Option<Held<'_>> {
        let slot = self.slots.get(rel)?;
        match (&slot.record, slot.state.get()) {
            (_, Some(state)) => Some(Held::State(state)),
            (Some(range), None) => self.loaded.get(range.clone()).map(Held::Record),
            (None, None) => Some(Held::State(self.state_of(slot))),
        }
    }

    pub(crate) fn insert(&mut self, rel: Vec<u8>, state: DirState) {
        self.slots.insert(rel, Slot::decoded(state));
    }

    pub(crate) fn remove(&mut self, rel: &[u8]) {
        self.slots.remove(rel);
    }

    pub(crate) fn contains_key(&self, rel: &[u8]) -> bool {
        self.slots.contains_key(rel)
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.slots.keys()
    }

    /// Every directory, decoding those still records.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &DirState)> {
        self.slots.iter().map(|(rel, s)| (rel, self.state_of(s)))
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &DirState> {
        self.iter().map(|(_, d)| d)
    }

    pub(crate) fn extend(&mut self, states: impl IntoIterator<Item = (Vec<u8>, DirState)>) {
        self.slots
            .extend(states.into_iter().map(|(rel, d)| (rel, Slot::decoded(d))));
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        self.slots.retain(|rel, _| keep(rel));
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl From<HashMap<Vec<u8>, DirState>> for DirMap {
    fn from(states: HashMap<Vec<u8>, DirState>) -> Self {
        let mut map = Self::default();
        map.extend(states);
        map
    }
}
