//! The local object database: append-only packs ([`crate::pack`]) indexed by the journal.
//! A process appends to a pack it holds the flock of; what it appended is pending (readable by
//! it alone) until a step's record follows the objects frame that lists it in the journal.
//! What is committed is found in the object table ([`crate::object_table`]), which covers the
//! journal up to a point, or in the map of what the journal said after it.

use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::backend::{ObjectBackend, ObjectInfo, Untabled, copy_each, missing};
use crate::error::{Result, StoreError};
use crate::id::{IdMap, ObjectId, ObjectKind};
use crate::journal::{self, JournalRead};
use crate::journal_file::JournalMark;
use crate::object_table::{self, ObjectTable};
use crate::pack::{self, EncodedObject, Location, PackReader, PackWriter, Stored};

pub struct PackBackend {
    store_dir: PathBuf,
    packs_dir: PathBuf,
    journal_path: PathBuf,
    /// False for a store opened for its step records only: the journal's objects frames were
    /// skipped, so nothing is indexed.
    loaded: bool,
    /// The committed objects as of a point in the journal, when a sound table was there.
    table: Option<ObjectTable>,
    /// The committed objects the table does not hold (all of them without a table).
    index: IdMap<Location>,
    /// The journal as last read or written.
    mark: JournalMark,
    /// Per pack, the end of its last committed object as of `mark` (every location read,
    /// duplicates included): where a writer may append.
    pack_ends: HashMap<u64, u64>,
    reader: PackReader,
    writer: Mutex<Option<PackWriter>>,
    pending: Mutex<IdMap<Location>>,
}

/// Objects committed after the table's point before a commit writes a new table...
const TABLE_AFTER: usize = 1024;
/// ...and the share of the table's entries they must reach (one eighth): at 100,000 objects
/// a table is 6 MB to write, once per 12,500 new objects.
const TABLE_SHARE: usize = 8;

fn note_end(ends: &mut HashMap<u64, u64>, loc: &Location) {
    let e = ends.entry(loc.pack).or_default();
    *e = (*e).max(loc.end());
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::corrupt("poisoned")
}

impl PackBackend {
    /// The packs of the store at `store_dir`, indexed by its journal as it is read.
    pub(crate) fn new(store_dir: &Path, loaded: bool) -> Self {
        let packs_dir = store_dir.join("packs");
        Self {
            reader: PackReader::new(&packs_dir),
            store_dir: store_dir.to_path_buf(),
            packs_dir,
            journal_path: store_dir.join("journal"),
            loaded,
            table: None,
            index: IdMap::default(),
            mark: JournalMark::default(),
            pack_ends: HashMap::new(),
            writer: Mutex::new(None),
            pending: Mutex::default(),
        }
    }

    /// Every committed object and where it is, gathered from the table and the map on each
    /// call (for gc and tests: a step looks objects up one by one).
    pub fn index(&self) -> IdMap<Location> {
        let mut all = IdMap::with_capacity_and_hasher(self.count(), Default::default());
        if let Some(table) = &self.table {
            all.extend(table.iter());
        }
        all.extend(self.index.iter().map(|(id, loc)| (*id, *loc)));
        all
    }

    /// With a table, read the whole journal as an open without one would (every frame's
    /// checksum, so damage inside old objects frames is reported, as opening used to) and check
    /// that the table and what followed it name the same objects in the same places (fsck).
    pub(crate) fn check_table(&self, read: &JournalRead) -> Result<()> {
        if self.table.is_none() {
            return Ok(());
        }
        let mut from_journal: IdMap<Location> = IdMap::default();
        for (id, loc) in &read.objects {
            from_journal.entry(*id).or_insert(*loc);
        }
        // What this process read and committed up to its mark: the journal may hold more.
        let known = self.index();
        let differs = known
            .iter()
            .any(|(id, loc)| from_journal.get(id) != Some(loc));
        if differs {
            return Err(StoreError::corrupt(format!(
                "{}: the object table does not match the journal ({} objects against {}); it \
                 is a cache: remove it and run envgit fsck again",
                object_table::path(&self.store_dir).display(),
                known.len(),
                from_journal.len()
            )));
        }
        Ok(())
    }

    /// Where a committed object is.
    fn committed(&self, id: &ObjectId) -> Option<Location> {
        if let Some(loc) = self.index.get(id) {
            return Some(*loc);
        }
        self.table.as_ref()?.get(id)
    }

    /// Where an object is: committed, or added by this process since its last commit.
    pub(crate) fn location(&self, id: &ObjectId) -> Option<Location> {
        if let Some(loc) = self.committed(id) {
            return Some(loc);
        }
        self.pending.lock().ok()?.get(id).copied()
    }

    /// Records a committed object unless it is known already (the first location wins, as
    /// in the journal).
    fn note_committed(&mut self, id: ObjectId, loc: Location) {
        note_end(&mut self.pack_ends, &loc);
        if self.table.as_ref().is_none_or(|t| t.get(&id).is_none()) {
            self.index.entry(id).or_insert(loc);
        }
    }

    /// After a commit up to `mark` (this process read everything before it, under the
    /// store's lock): a new table once the map outgrows a share of the table, so the next
    /// open decodes little of the journal. This process then looks objects up in it too: a
    /// long-lived supervisor would otherwise write it again at every commit after.
    fn maybe_write_table(&mut self, mark: JournalMark) {
        let in_table = self.table.as_ref().map_or(0, ObjectTable::len);
        if self.index.len() < TABLE_AFTER || self.index.len() * TABLE_SHARE < in_table {
            return;
        }
        let mut entries: Vec<(&ObjectId, &Location)> = self.index.iter().collect();
        let owned: Vec<(ObjectId, Location)> = self
            .table
            .as_ref()
            .map(|t| t.iter().collect())
            .unwrap_or_default();
        entries.extend(owned.iter().map(|(id, loc)| (id, loc)));
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let written = object_table::write(
            &self.store_dir,
            mark,
            &self.pack_ends,
            entries.len(),
            entries.into_iter(),
        );
        if let Some(table) = written {
            self.table = Some(table);
            self.index.clear();
        }
    }

    pub(crate) fn reader(&self) -> &PackReader {
        &self.reader
    }

    /// Sync and hand over the objects added since the last commit (gc publishes them itself).
    pub(crate) fn take_pending_synced(&self) -> Result<IdMap<Location>> {
        self.sync()?;
        let mut p = self.pending.lock().map_err(poisoned)?;
        Ok(std::mem::take(&mut *p))
    }

    /// Write from now on into a brand-new pack (releasing the flock on the old one), so gc
    /// can compact every existing pack.
    pub(crate) fn switch_to_new_pack(&self) -> Result<()> {
        let mut w = self.writer.lock().map_err(poisoned)?;
        if let Some(old) = w.as_mut() {
            old.sync()?;
        }
        *w = Some(PackWriter::acquire_new(&self.packs_dir)?);
        Ok(())
    }

    fn acquire_pack(&self) -> Result<PackWriter> {
        // Committed ends as of the journal now: another writer may have committed since it
        // was read, so what came after is read too (all of it if gc replaced the journal, or
        // if this store was opened without its objects).
        let ident = JournalMark::of_file(&self.journal_path)?;
        let current = self.loaded && ident == self.mark.ident;
        let (mut ends, from) = if current {
            (self.pack_ends.clone(), self.mark.pos)
        } else {
            (HashMap::new(), 0)
        };
        for (_, loc) in journal::read(&self.journal_path, from, true)?.objects {
            note_end(&mut ends, &loc);
        }
        PackWriter::acquire(&self.packs_dir, &|p| ends.get(&p).copied().unwrap_or(0))
    }

    fn known_packs(&self) -> Vec<u64> {
        let mut packs: Vec<u64> = self.pack_ends.keys().copied().collect();
        packs.sort_unstable();
        packs
    }

    /// Packs of `source` that are mostly what is needed are hard-linked in (see
    /// [`PackBackend::link_packs_from`]); from the others, records adjacent in `source`'s
    /// packs are copied as runs, one read and one write each, every record's checksum and id
    /// checked on the way.
    fn copy_runs_from(&self, source: &PackBackend, ids: &[ObjectId]) -> Result<()> {
        /// A run is copied through a buffer this big at most.
        const RUN_MAX: u64 = 8 << 20;
        let mut locs = Vec::with_capacity(ids.len());
        for id in ids {
            if self.location(id).is_some() {
                continue;
            }
            let loc = source.location(id).ok_or_else(|| missing(id))?;
            locs.push((*id, loc));
        }
        let linked = self.link_packs_from(source, &locs)?;
        locs.retain(|(_, l)| !linked.contains(&l.pack));
        if locs.is_empty() {
            return Ok(());
        }
        locs.sort_unstable_by_key(|(_, l)| (l.pack, l.offset));
        let mut writer = self.writer.lock().map_err(poisoned)?;
        if writer.is_none() {
            *writer = Some(self.acquire_pack()?);
        }
        let Some(w) = writer.as_mut() else {
            return Err(StoreError::corrupt("no pack writer"));
        };
        let mut pending = self.pending.lock().map_err(poisoned)?;
        let mut i = 0;
        while i < locs.len() {
            let (start, first) = (i, locs[i].1);
            let mut end = first.end();
            i += 1;
            while i < locs.len()
                && locs[i].1.pack == first.pack
                && locs[i].1.offset == end
                && locs[i].1.end() - first.offset <= RUN_MAX
            {
                end = locs[i].1.end();
                i += 1;
            }
            let run = source
                .reader
                .read_range(first.pack, first.offset, end - first.offset)?;
            for (id, l) in &locs[start..i] {
                let at = (l.offset - first.offset) as usize;
                pack::check_record(&run[at..at + l.record_len() as usize], id)?;
            }
            let (pack, offset) = w.append_run(&run)?;
            for (id, l) in &locs[start..i] {
                let loc = Location {
                    pack,
                    offset: offset + (l.offset - first.offset),
                    ..*l
                };
                pending.insert(*id, loc);
            }
        }
        Ok(())
    }
}

impl PackBackend {
    /// A fork's copy without the copying: each pack of `source` of which at least half the
    /// committed bytes are needed is hard-linked into this store under its own name, and the
    /// needed objects are pending here at the same locations. On a 2-core VM, writing a
    /// 100,000-file step's 344 MB of packs again cost ~1.5 s of kernel time and their fsync.
    ///
    /// Neither store ever writes into a linked pack: a writer takes over only packs with one
    /// link ([`PackWriter::acquire`]), and one that already held the pack appends past what
    /// this store's journal will name. The records are not checked here: the fork's restore,
    /// running beside, reads every object it needs from the same inode and checks each against
    /// its id. A pack that cannot be linked (another filesystem, a name taken) is copied.
    /// Returns the packs linked.
    fn link_packs_from(
        &self,
        source: &PackBackend,
        locs: &[(ObjectId, Location)],
    ) -> Result<std::collections::HashSet<u64>> {
        let mut needed: HashMap<u64, u64> = HashMap::new();
        for (_, l) in locs {
            *needed.entry(l.pack).or_default() += l.record_len();
        }
        let mut linked = std::collections::HashSet::new();
        for (pack, bytes) in needed {
            let committed = source.pack_ends.get(&pack).copied().unwrap_or(u64::MAX);
            if bytes.saturating_mul(2) < committed {
                continue; // mostly other steps' objects: copy what is needed
            }
            let from = pack::pack_path(&source.packs_dir, pack);
            let to = pack::pack_path(&self.packs_dir, pack);
            if std::fs::hard_link(&from, &to).is_ok() {
                linked.insert(pack);
            }
        }
        if linked.is_empty() {
            return Ok(linked);
        }
        pack::sync_dir(&self.packs_dir)?;
        let mut pending = self.pending.lock().map_err(poisoned)?;
        for (id, l) in locs {
            if linked.contains(&l.pack) {
                pending.insert(*id, *l);
            }
        }
        Ok(linked)
    }
}

impl ObjectBackend for PackBackend {
    fn info(&self, id: &ObjectId) -> Option<ObjectInfo> {
        self.location(id).as_ref().map(ObjectInfo::from)
    }

    fn get(&self, id: &ObjectId) -> Result<Stored> {
        let loc = self.location(id).ok_or_else(|| missing(id))?;
        self.reader.read_stored(id, &loc)
    }

    fn put(&self, object: EncodedObject) -> Result<bool> {
        let mut writer = self.writer.lock().map_err(poisoned)?;
        let mut pending = self.pending.lock().map_err(poisoned)?;
        if self.committed(&object.id).is_some() || pending.contains_key(&object.id) {
            return Ok(false); // another thread stored it meanwhile
        }
        if writer.is_none() {
            *writer = Some(self.acquire_pack()?);
        }
        if let Some(w) = writer.as_mut() {
            let loc = w.append(&object)?;
            pending.insert(object.id, loc);
        }
        Ok(true)
    }

    fn list(&self, kind: ObjectKind) -> Vec<ObjectId> {
        let in_table = self.table.iter().flat_map(|t| t.ids_of(kind));
        in_table
            .chain(
                self.index
                    .iter()
                    .filter(|(_, l)| l.kind == kind)
                    .map(|(id, _)| *id),
            )
            .collect()
    }

    fn count(&self) -> usize {
        self.table.as_ref().map_or(0, ObjectTable::len) + self.index.len()
    }

    fn sync(&self) -> Result<()> {
        if let Some(w) = self.writer.lock().map_err(poisoned)?.as_mut() {
            w.sync()?;
        }
        Ok(())
    }

    fn pending_frames(&self) -> Result<Vec<u8>> {
        self.sync()?;
        let pending: Vec<(ObjectId, Location)> = self
            .pending
            .lock()
            .map_err(poisoned)?
            .iter()
            .map(|(id, loc)| (*id, *loc))
            .collect();
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        Ok(journal::encode_objects(&pending))
    }

    fn commit_pending(&mut self, mark: JournalMark) {
        // The journal names them now: committed even if a thread panicked holding the lock.
        let pending = std::mem::take(
            self.pending
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (id, loc) in pending {
            self.note_committed(id, loc);
        }
        self.mark = mark;
        self.maybe_write_table(mark);
    }

    fn begin_full_read(&mut self, journal: (u64, u64)) -> u64 {
        for pack in self.known_packs() {
            self.reader.forget(pack);
        }
        self.index.clear();
        self.pack_ends.clear();
        self.table = ObjectTable::load(&self.store_dir, journal);
        let Some(table) = &self.table else {
            return 0;
        };
        self.pack_ends.clone_from(&table.pack_ends);
        table.covers
    }

    fn untabled(&self) -> Option<Untabled> {
        // Opened for step records only (`log` recording an interrupted step): its map holds
        // nothing, which must never be taken for "no object after the table".
        if !self.loaded {
            return None;
        }
        Some(Untabled {
            from: self.table.as_ref().map_or(0, |t| t.covers),
            pack_ends: self.pack_ends.clone(),
            entries: self.index.iter().map(|(id, loc)| (*id, *loc)).collect(),
        })
    }

    fn resume(&mut self, untabled: Untabled) -> bool {
        if untabled.from != self.table.as_ref().map_or(0, |t| t.covers) {
            return false;
        }
        // Every end as of that point, duplicates' included: the table's, and later ones. The
        // entries were what this same table did not hold: no lookup in it for each.
        self.pack_ends = untabled.pack_ends;
        self.index.extend(untabled.entries);
        true
    }

    fn load(&mut self, objects: Vec<(ObjectId, Location)>, mark: JournalMark) {
        self.index.reserve(objects.len());
        for (id, loc) in objects {
            self.note_committed(id, loc);
        }
        self.mark = mark;
    }

    fn copy_from(&self, source: &dyn ObjectBackend, ids: &[ObjectId]) -> Result<()> {
        match source.as_any().downcast_ref::<PackBackend>() {
            Some(packs) => self.copy_runs_from(packs, ids),
            None => copy_each(self, source, ids),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    //! The packs as two processes see them: each writes its own pack, what one put is
    //! invisible to the other until the journal names it, and an id nobody stored is missing.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use super::*;
    use crate::journal_file::JournalFile;
    use crate::lock::Flock;
    use crate::step::{Placement, StepDraft};

    fn store_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("packs")).unwrap();
        dir
    }

    fn put(backend: &PackBackend, raw: &[u8]) -> ObjectId {
        let id = ObjectId::of(ObjectKind::Blob, raw);
        assert!(
            backend
                .put(EncodedObject::encode(ObjectKind::Blob, id, raw))
                .unwrap()
        );
        id
    }

    fn bytes(backend: &PackBackend, id: &ObjectId) -> Vec<u8> {
        match backend.get(id).unwrap() {
            Stored::Whole(raw) => raw,
            Stored::Delta(_) => panic!("a blob read as a delta"),
        }
    }

    /// What `Store::catch_up` does: the journal's new frames read into `backend`.
    fn catch_up(journal: &mut JournalFile, backend: &mut PackBackend) {
        let (read, _) = journal
            .read_new_with(|m| {
                let objects_from = if m.pos == 0 {
                    backend.begin_full_read(m.ident)
                } else {
                    m.pos
                };
                (objects_from, m.pos)
            })
            .unwrap();
        backend.load(read.objects, journal.mark());
    }

    /// What `Store::commit` does: the pending objects' frame and a step, under the lock.
    fn commit(dir: &Path, journal: &mut JournalFile, backend: &mut PackBackend, number: u64) {
        let _lock = Flock::exclusive(&dir.join("lock")).unwrap();
        catch_up(journal, backend);
        let mut frames = backend.pending_frames().unwrap();
        let step = StepDraft::default().into_step(
            Placement {
                number,
                parent: None,
                tree: ObjectId::of(ObjectKind::Tree, b""),
                overlapped: false,
            },
            Vec::new(),
        );
        frames.extend(journal::encode_step(&step).unwrap());
        journal.append(&frames).unwrap();
        backend.commit_pending(journal.mark());
    }

    /// Another process opening the store now.
    fn reopened(dir: &Path) -> PackBackend {
        let mut backend = PackBackend::new(dir, true);
        let mut journal = JournalFile::new(dir);
        catch_up(&mut journal, &mut backend);
        backend
    }

    #[test]
    fn an_id_nobody_stored_is_missing_not_an_empty_object() {
        let dir = store_dir();
        let backend = reopened(dir.path());
        let absent = ObjectId::of(ObjectKind::Blob, b"never stored");
        assert!(backend.info(&absent).is_none());
        assert!(backend.location(&absent).is_none());
        let e = backend.get(&absent).err().expect("missing").to_string();
        assert!(e.contains(&absent.hex()) && e.contains("missing"), "{e}");
        assert_eq!(backend.count(), 0);
        assert!(backend.list(ObjectKind::Blob).is_empty());

        // Still missing beside objects that are there.
        let mut backend = backend;
        let mut journal = JournalFile::new(dir.path());
        put(&backend, b"present");
        commit(dir.path(), &mut journal, &mut backend, 1);
        let backend = reopened(dir.path());
        assert_eq!(backend.count(), 1);
        assert!(backend.get(&absent).is_err());
    }

    #[test]
    fn what_one_writer_put_is_invisible_to_others_until_the_journal_names_it() {
        let dir = store_dir();
        let mut writer = reopened(dir.path());
        let mut journal = JournalFile::new(dir.path());
        let id = put(&writer, b"pending");
        assert_eq!(bytes(&writer, &id), b"pending", "its writer reads it");
        assert!(reopened(dir.path()).info(&id).is_none(), "no one else does");
        // Put again, it is not stored twice.
        let again = EncodedObject::encode(ObjectKind::Blob, id, b"pending");
        assert!(!writer.put(again).unwrap());
        commit(dir.path(), &mut journal, &mut writer, 1);
        assert_eq!(bytes(&reopened(dir.path()), &id), b"pending");
    }

    #[test]
    fn two_writers_fill_their_own_packs_and_a_reader_sees_both() {
        let dir = store_dir();
        let mut one = reopened(dir.path());
        let mut two = reopened(dir.path());
        let mut one_journal = JournalFile::new(dir.path());
        let mut two_journal = JournalFile::new(dir.path());
        let mut ids = Vec::new();
        for round in 0..3u64 {
            for (w, backend) in [&one, &two].into_iter().enumerate() {
                let raw = format!("writer {w} round {round}").into_bytes();
                ids.push((put(backend, &raw), raw));
            }
            commit(dir.path(), &mut one_journal, &mut one, round * 2 + 1);
            commit(dir.path(), &mut two_journal, &mut two, round * 2 + 2);
        }
        let (one_pack, two_pack) = (
            one.location(&ids[0].0).unwrap().pack,
            two.location(&ids[1].0).unwrap().pack,
        );
        assert_ne!(one_pack, two_pack);
        let reader = reopened(dir.path());
        assert_eq!(reader.count(), ids.len());
        for (i, (id, raw)) in ids.iter().enumerate() {
            assert_eq!(&bytes(&reader, id), raw);
            let want = if i % 2 == 0 { one_pack } else { two_pack };
            assert_eq!(reader.location(id).unwrap().pack, want);
        }
    }
}
