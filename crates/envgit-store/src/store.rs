//! One project's store: where it lives, opening it, reading and adding objects, and committing
//! steps. Readers never lock; a writer holds the commit lock only while it appends one step to
//! the journal.

use std::collections::HashMap;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::budget::Reservation;
use crate::delta::{self, Delta};
use crate::diff;
use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::journal;
use crate::lock::{Flock, StepGuard};
use crate::pack::{self, EncodedObject, Location, PackReader, PackWriter, Stored};
use crate::step::{
    ChangeCounts, MAX_RECORDED_CHANGES, Step, StepDraft, StepFlag, StepKind, now_ms,
};
use crate::tree::Tree;
use crate::tree_cache::TreeCache;

/// Format 2 adds trees stored as deltas ([`crate::delta`]); everything else is as in format 1,
/// so a format-1 store opens as it is and becomes format 2 when its first delta is written
/// (an older envgit then refuses it by its format instead of misreading it).
const FORMAT: u32 = 2;
const OLDEST_FORMAT: u32 = 1;
const FIRST_DELTA_FORMAT: u32 = 2;

/// `$ENVGIT_HOME`, else `$XDG_DATA_HOME/envgit`, else `~/.local/share/envgit`.
pub fn envgit_home() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("ENVGIT_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(x).join("envgit"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/envgit")),
        None => Err(StoreError::Refused(
            "cannot place the store: set ENVGIT_HOME (or HOME)".into(),
        )),
    }
}

/// The store of the project at `project` (an absolute, canonical path).
pub fn store_dir_for(home: &Path, project: &Path) -> PathBuf {
    let hash = blake3::hash(project.as_os_str().as_encoded_bytes()).to_hex();
    let name: String = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    home.join("projects")
        .join(format!("{name}-{}", &hash[..16]))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoreMeta {
    format: u32,
    project: PathBuf,
    created_ms: u64,
}

pub struct Store {
    dir: PathBuf,
    project: PathBuf,
    created_ms: u64,
    /// The format in store.json (raised to [`FIRST_DELTA_FORMAT`] by the first delta written).
    format: AtomicU32,
    trees: TreeCache,
    index: HashMap<ObjectId, Location>,
    steps: Vec<Step>,
    journal_pos: u64,
    journal_ident: (u64, u64),
    objects_loaded: bool,
    /// Per pack, the end of its last committed object as of `journal_pos` (every location
    /// read, duplicates included): where a writer may append.
    pack_ends: HashMap<u64, u64>,
    reader: PackReader,
    writer: Mutex<Option<PackWriter>>,
    pending: Mutex<HashMap<ObjectId, Location>>,
}

fn note_end(ends: &mut HashMap<u64, u64>, loc: &Location) {
    let e = ends.entry(loc.pack).or_default();
    *e = (*e).max(loc.end());
}

fn mkdir_private(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .at(path)
}

impl Store {
    /// Create the store for `project` at `dir`. Refuses if one is already there.
    pub fn create(dir: &Path, project: &Path) -> Result<Self> {
        if dir.join("store.json").exists() {
            return Err(StoreError::Refused(format!(
                "a store already exists at {}",
                dir.display()
            )));
        }
        if let Some(parent) = dir.parent() {
            mkdir_private(parent)?;
        }
        mkdir_private(dir)?;
        for sub in ["packs", "inflight", "tmp"] {
            mkdir_private(&dir.join(sub))?;
        }
        let meta = StoreMeta {
            format: FORMAT,
            project: project.to_path_buf(),
            created_ms: now_ms(),
        };
        let bytes =
            serde_json::to_vec_pretty(&meta).map_err(|e| StoreError::corrupt(e.to_string()))?;
        // store.json is written last: a store without it is an interrupted create.
        pack::write_file_atomic(&dir.join("store.json"), &bytes)?;
        Self::open(dir)
    }

    /// Open with the object index loaded (everything but `log` needs it).
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with(dir, true)
    }

    /// Open for reading step records only: objects frames are skipped.
    pub fn open_steps_only(dir: &Path) -> Result<Self> {
        Self::open_with(dir, false)
    }

    fn open_with(dir: &Path, objects: bool) -> Result<Self> {
        let meta_path = dir.join("store.json");
        let bytes = match std::fs::read(&meta_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Refused(format!(
                    "no store at {}: run `envgit init` in the project",
                    dir.display()
                )));
            }
            Err(e) => return Err(e).at(&meta_path),
        };
        let meta: StoreMeta = serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::corrupt(format!("{}: {e}", meta_path.display())))?;
        if !(OLDEST_FORMAT..=FORMAT).contains(&meta.format) {
            return Err(StoreError::Refused(format!(
                "{}: store format {} is not supported by this envgit (formats \
                 {OLDEST_FORMAT} to {FORMAT}): use a newer envgit",
                meta_path.display(),
                meta.format
            )));
        }
        let mut store = Self {
            dir: dir.to_path_buf(),
            project: meta.project,
            created_ms: meta.created_ms,
            format: AtomicU32::new(meta.format),
            trees: TreeCache::default(),
            index: HashMap::new(),
            steps: Vec::new(),
            journal_pos: 0,
            journal_ident: (0, 0),
            objects_loaded: objects,
            pack_ends: HashMap::new(),
            reader: PackReader::new(&dir.join("packs")),
            writer: Mutex::new(None),
            pending: Mutex::default(),
        };
        store.catch_up()?;
        // Best effort, and never waiting: a store that cannot be written now (full disk, a
        // commit in progress) records them at a later open.
        let _ = store.recover_interrupted();
        Ok(store)
    }

    /// Record every step that began and never committed, and whose owner is gone (crashed,
    /// killed, signalled, or gave up after its command started), as an `interrupted` step:
    /// what its begin record knew (description, command, start), the tree of the step before
    /// it (what it changed, if anything, is in the next step), flagged `overlapped` if other
    /// steps committed meanwhile. Takes the commit lock only if it is free. Returns the
    /// numbers of the steps recorded.
    pub fn recover_interrupted(&mut self) -> Result<Vec<u64>> {
        let dead = crate::lock::dead_steps(&self.dir)?;
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let Some(_lock) = Flock::try_exclusive(&self.dir.join("lock"))? else {
            return Ok(Vec::new());
        };
        self.catch_up()?;
        let mut bytes = Vec::new();
        let mut recorded: Vec<Step> = Vec::new();
        for d in dead.iter().filter(|d| d.begun.open) {
            let note = format!("begun as inflight/{} by pid {}", d.id, d.begun.pid);
            // Recorded before, by an open that died before it removed the marker.
            if self
                .steps
                .iter()
                .rev()
                .take(256)
                .any(|s| s.notes.contains(&note))
            {
                continue;
            }
            let prev = recorded.last().or(self.steps.last());
            let parent = prev.map(|s| s.number);
            let tree = recorded
                .iter()
                .rev()
                .chain(self.steps.iter().rev())
                .find_map(|s| s.tree);
            let mut flags = Vec::new();
            if parent != d.begun.head {
                flags.push(StepFlag::Overlapped);
            }
            let step = Step {
                number: parent.unwrap_or(0) + 1,
                kind: StepKind::Interrupted,
                parent,
                started_at_ms: d.begun.started_at_ms,
                ended_at_ms: now_ms(),
                tree,
                summary: format!("interrupted: {}", d.begun.what),
                command: d.begun.command.clone(),
                cwd: d.begun.cwd.clone(),
                exit_code: None,
                policy_hash: None,
                changes: Vec::new(),
                changes_total: ChangeCounts::default(),
                changes_truncated: false,
                changes_omitted: 0,
                flags,
                requests: Vec::new(),
                refusals: Vec::new(),
                approvals: Vec::new(),
                target: None,
                origin: None,
                repl: None,
                notes: vec![
                    note,
                    "the step never committed (its process crashed, was killed or signalled, \
                     or the disk was full); what it changed, if anything, is recorded by the \
                     next step"
                        .into(),
                ],
            };
            bytes.extend(journal::encode_step(&step)?);
            recorded.push(step);
        }
        if !bytes.is_empty() {
            self.append_journal(&bytes)?;
            self.journal_pos += bytes.len() as u64;
        }
        let numbers = recorded.iter().map(|s| s.number).collect();
        self.steps.extend(recorded);
        for d in &dead {
            let _ = std::fs::remove_file(&d.path);
        }
        Ok(numbers)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn project(&self) -> &Path {
        &self.project
    }

    pub fn stat_cache_path(&self) -> PathBuf {
        self.dir.join("stat.cache")
    }

    pub fn journal_path(&self) -> PathBuf {
        self.dir.join("journal")
    }

    pub fn packs_dir(&self) -> PathBuf {
        self.dir.join("packs")
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    pub fn head(&self) -> Option<&Step> {
        self.steps.last()
    }

    pub fn step(&self, number: u64) -> Result<&Step> {
        self.steps
            .iter()
            .find(|s| s.number == number)
            .ok_or(StoreError::NoSuchStep(number))
    }

    /// The tree of a step that can be restored.
    pub fn step_tree(&self, number: u64) -> Result<ObjectId> {
        self.step(number)?.tree.ok_or(StoreError::Pruned(number))
    }

    pub fn index(&self) -> &HashMap<ObjectId, Location> {
        &self.index
    }

    /// Read journal frames committed since we last looked. If the journal was replaced (gc
    /// rewrites it), reload it whole.
    pub fn catch_up(&mut self) -> Result<()> {
        let path = self.journal_path();
        let ident = match std::fs::metadata(&path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, 0),
            Err(e) => return Err(e).at(&path),
        };
        if ident != self.journal_ident {
            self.index.clear();
            self.steps.clear();
            self.journal_pos = 0;
            self.journal_ident = ident;
            for pack in self.known_packs() {
                self.reader.forget(pack);
            }
            self.pack_ends.clear();
        }
        let read = journal::read(&path, self.journal_pos, self.objects_loaded)?;
        for (id, loc) in read.objects {
            note_end(&mut self.pack_ends, &loc);
            self.index.entry(id).or_insert(loc);
        }
        self.steps.extend(read.steps);
        self.journal_pos = read.committed_end;
        Ok(())
    }

    fn known_packs(&self) -> Vec<u64> {
        let mut packs: Vec<u64> = self.index.values().map(|l| l.pack).collect();
        packs.sort_unstable();
        packs.dedup();
        packs
    }

    /// Where an object is: committed, or added by this process since its last commit.
    pub(crate) fn location(&self, id: &ObjectId) -> Option<Location> {
        if let Some(loc) = self.index.get(id) {
            return Some(*loc);
        }
        self.pending.lock().ok()?.get(id).copied()
    }

    pub fn has(&self, id: &ObjectId) -> bool {
        self.location(id).is_some()
    }

    pub fn read_object(&self, id: &ObjectId) -> Result<(ObjectKind, Vec<u8>)> {
        let loc = self
            .location(id)
            .ok_or_else(|| StoreError::corrupt(format!("object {} is missing", id.hex())))?;
        if loc.kind == ObjectKind::Tree {
            return Ok((loc.kind, self.tree_bytes(id, &loc)?.0.to_vec()));
        }
        Ok((loc.kind, self.reader.read(id, &loc)?))
    }

    /// A tree's bytes and its delta depth: from the cache, or read and, if it is a delta,
    /// resolved down its chain (at most [`delta::MAX_CHAIN`] records) and checked by its id.
    fn tree_bytes(&self, id: &ObjectId, loc: &Location) -> Result<(Arc<[u8]>, u8)> {
        if let Some(hit) = self.trees.get(id) {
            return Ok(hit);
        }
        // Down the chain to a tree we have (cached or stored whole), then back up.
        let mut chain: Vec<(ObjectId, Location, Vec<u8>)> = Vec::new();
        let (mut id_at, mut loc_at) = (*id, *loc);
        let (mut raw, mut depth): (Arc<[u8]>, u8) = loop {
            match self.reader.read_stored(&id_at, &loc_at)? {
                Stored::Whole(raw) => {
                    let raw: Arc<[u8]> = raw.into();
                    self.trees.insert(id_at, raw.clone(), 0);
                    break (raw, 0);
                }
                Stored::Delta(stored) => {
                    let bad = |why: String| {
                        StoreError::corrupt(format!(
                            "tree {} (a delta in pack {:016x} at offset {}): {why}",
                            id_at.hex(),
                            loc_at.pack,
                            loc_at.offset
                        ))
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
                    chain.push((id_at, loc_at, stored));
                    if let Some((raw, base_depth)) = self.trees.get(&base) {
                        if base_depth + 1 != depth {
                            return Err(bad(format!(
                                "its depth {depth} does not follow its base's ({base_depth})"
                            )));
                        }
                        break (raw, base_depth);
                    }
                    let base_loc = self
                        .location(&base)
                        .ok_or_else(|| bad(format!("its delta base {} is missing", base.hex())))?;
                    if base_loc.kind != ObjectKind::Tree {
                        return Err(bad(format!("its delta base {} is not a tree", base.hex())));
                    }
                    (id_at, loc_at) = (base, base_loc);
                }
            }
        };
        if chain.last().is_some_and(|(_, _, s)| s[32] != depth + 1) {
            return Err(StoreError::corrupt(format!(
                "tree {}: its delta chain does not end at the depth it names",
                id.hex()
            )));
        }
        while let Some((id_at, loc_at, stored)) = chain.pop() {
            let bad = |why: &str| {
                StoreError::corrupt(format!(
                    "tree {} (a delta in pack {:016x} at offset {}): {why}",
                    id_at.hex(),
                    loc_at.pack,
                    loc_at.offset
                ))
            };
            let d = Delta::parse(&stored).ok_or_else(|| bad("its delta header does not decode"))?;
            let out = delta::decode(d.frame, &raw, loc_at.raw_len as usize)
                .map_err(|_| bad("does not decompress against its base"))?;
            if out.len() as u64 != loc_at.raw_len || ObjectId::of(ObjectKind::Tree, &out) != id_at {
                return Err(bad("content does not match its id"));
            }
            (raw, depth) = (out.into(), d.depth);
            self.trees.insert(id_at, raw.clone(), depth);
        }
        Ok((raw, depth))
    }

    /// How many deltas deep a tree is stored (0: whole); at most [`delta::MAX_CHAIN`].
    pub fn tree_depth(&self, id: &ObjectId) -> Result<u8> {
        let loc = self
            .location(id)
            .filter(|l| l.kind == ObjectKind::Tree)
            .ok_or_else(|| StoreError::corrupt(format!("tree {} is missing", id.hex())))?;
        Ok(self.tree_bytes(id, &loc)?.1)
    }

    /// The longest chain of deltas a tree is stored on.
    pub const MAX_DELTA_CHAIN: u8 = delta::MAX_CHAIN;

    /// The tree `id` is stored as a delta against, if it is a stored delta.
    pub(crate) fn delta_base(&self, id: &ObjectId) -> Result<Option<ObjectId>> {
        let Some(loc) = self.location(id) else {
            return Ok(None);
        };
        if !loc.delta {
            return Ok(None);
        }
        match self.reader.read_stored(id, &loc)? {
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

    /// Add an object unless the store already has it. Safe to call from many threads: hashing
    /// and compression happen on the caller's thread, only the append is serialized.
    pub fn put(&self, kind: ObjectKind, raw: &[u8]) -> Result<ObjectId> {
        let id = ObjectId::of(kind, raw);
        if self.has(&id) {
            return Ok(id);
        }
        let encoded = EncodedObject::encode(kind, id, raw);
        self.append(encoded)?;
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
        if !self.append(encoded)? {
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
        if !self.append(encoded)? {
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
        self.append(encoded)?;
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
        let Some(base_loc) = self.location(base).filter(|l| l.kind == ObjectKind::Tree) else {
            return Ok(whole());
        };
        let Ok((base_raw, base_depth)) = self.tree_bytes(base, &base_loc) else {
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

    /// Raise a format-1 store to the format that has deltas, once, before its first delta.
    fn allow_deltas(&self) -> Result<()> {
        if self.format.load(Ordering::Acquire) >= FIRST_DELTA_FORMAT {
            return Ok(());
        }
        let meta = StoreMeta {
            format: FIRST_DELTA_FORMAT,
            project: self.project.clone(),
            created_ms: self.created_ms,
        };
        let bytes =
            serde_json::to_vec_pretty(&meta).map_err(|e| StoreError::corrupt(e.to_string()))?;
        pack::write_file_atomic(&self.dir.join("store.json"), &bytes)?;
        self.format.store(FIRST_DELTA_FORMAT, Ordering::Release);
        Ok(())
    }

    /// The format in the store's `store.json`.
    pub fn format(&self) -> u32 {
        self.format.load(Ordering::Acquire)
    }

    /// Appends unless the object is there already; true if it was appended.
    fn append(&self, encoded: EncodedObject) -> Result<bool> {
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
        if self.index.contains_key(&encoded.id) || pending.contains_key(&encoded.id) {
            return Ok(false); // another thread stored it meanwhile
        }
        if writer.is_none() {
            *writer = Some(self.acquire_pack()?);
        }
        if let Some(w) = writer.as_mut() {
            let loc = w.append(&encoded)?;
            pending.insert(encoded.id, loc);
        }
        Ok(true)
    }

    /// Copy the records of `ids` from another store verbatim (fork): records adjacent in its
    /// packs are copied as runs, one read and one write each, every record's checksum and id
    /// checked on the way.
    pub(crate) fn copy_records_from(&self, other: &Store, ids: &[ObjectId]) -> Result<()> {
        /// A run is copied through a buffer this big at most.
        const RUN_MAX: u64 = 8 << 20;
        let mut locs = Vec::with_capacity(ids.len());
        for id in ids {
            if self.has(id) {
                continue;
            }
            let loc = other
                .location(id)
                .ok_or_else(|| StoreError::corrupt(format!("object {} is missing", id.hex())))?;
            locs.push((*id, loc));
        }
        locs.sort_unstable_by_key(|(_, l)| (l.pack, l.offset));
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
        if writer.is_none() {
            *writer = Some(self.acquire_pack()?);
        }
        let Some(w) = writer.as_mut() else {
            return Err(StoreError::corrupt("no pack writer"));
        };
        let mut pending = self
            .pending
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
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
            let run = other
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

    /// Make the objects added so far durable (the commit does it too; fork does it early,
    /// while it writes files).
    pub(crate) fn sync_objects(&self) -> Result<()> {
        if let Some(w) = self
            .writer
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?
            .as_mut()
        {
            w.sync()?;
        }
        Ok(())
    }

    fn acquire_pack(&self) -> Result<PackWriter> {
        // Committed ends as of the journal now: another writer may have committed since it
        // was read, so what came after is read too (all of it if gc replaced the journal, or
        // if this store was opened without its objects).
        let path = self.journal_path();
        let ident = match std::fs::metadata(&path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, 0),
            Err(e) => return Err(e).at(&path),
        };
        let current = self.objects_loaded && ident == self.journal_ident;
        let (mut ends, from) = if current {
            (self.pack_ends.clone(), self.journal_pos)
        } else {
            (HashMap::new(), 0)
        };
        for (_, loc) in journal::read(&path, from, true)?.objects {
            note_end(&mut ends, &loc);
        }
        PackWriter::acquire(&self.packs_dir(), &|p| ends.get(&p).copied().unwrap_or(0))
    }

    /// Mark a step as open: returns a guard that other processes can see until it drops.
    pub fn begin_step(&self, what: &str) -> Result<StepGuard> {
        StepGuard::begin(&self.dir, what, self.head().map(|s| s.number))
    }

    /// Descriptions of steps of this project that other processes have open.
    pub fn steps_in_flight(&self, own: Option<&StepGuard>) -> Result<Vec<String>> {
        crate::lock::live_steps(&self.dir, own)
    }

    /// Commit a step whose snapshot is `tree`: make its objects durable, then append its record
    /// to the journal under the commit lock with one more fdatasync.
    pub fn commit(
        &mut self,
        guard: &mut StepGuard,
        draft: StepDraft,
        tree: ObjectId,
    ) -> Result<Step> {
        {
            let mut writer = self
                .writer
                .lock()
                .map_err(|_| StoreError::corrupt("poisoned"))?;
            if let Some(w) = writer.as_mut() {
                w.sync()?;
            }
        }
        let others = self.steps_in_flight(Some(guard))?;
        let _lock = Flock::exclusive(&self.dir.join("lock"))?;
        self.catch_up()?;
        let parent = self.head().map(|s| s.number);
        let number = parent.unwrap_or(0) + 1;
        let parent_tree = match parent {
            Some(p) => self.step(p)?.tree,
            None => None,
        };
        let mut all_changes = diff::diff_trees(self, parent_tree.as_ref(), Some(&tree))?;
        // Kept project-first so a truncated record still names the project's files.
        crate::step::project_first(&mut all_changes, |c| c.path.as_bytes());
        let mut counts = ChangeCounts::default();
        for c in &all_changes {
            match c.change {
                crate::step::ChangeKind::Added => counts.added += 1,
                crate::step::ChangeKind::Modified => counts.modified += 1,
                crate::step::ChangeKind::Deleted => counts.deleted += 1,
            }
            counts.bytes_written += c.new_size.unwrap_or(0);
        }
        let mut flags = draft.flags;
        if !others.is_empty() || guard.head_at_begin() != parent {
            flags.push(StepFlag::Overlapped);
        }
        if draft.requests.iter().any(|r| r.irreversible) {
            flags.push(StepFlag::Irreversible);
        }
        flags.sort_by_key(|f| *f as u8);
        flags.dedup();
        let truncated = all_changes.len() > MAX_RECORDED_CHANGES;
        let omitted = all_changes.len().saturating_sub(MAX_RECORDED_CHANGES) as u64;
        let step = Step {
            number,
            kind: draft.kind.unwrap_or(StepKind::Record),
            parent,
            started_at_ms: draft.started_at_ms,
            ended_at_ms: now_ms(),
            tree: Some(tree),
            summary: draft.summary,
            command: draft.command,
            cwd: draft.cwd,
            exit_code: draft.exit_code,
            policy_hash: draft.policy_hash,
            changes: all_changes.into_iter().take(MAX_RECORDED_CHANGES).collect(),
            changes_total: counts,
            changes_truncated: truncated,
            changes_omitted: omitted,
            flags,
            requests: draft.requests,
            refusals: draft.refusals,
            approvals: draft.approvals,
            target: draft.target,
            origin: draft.origin,
            repl: draft.repl,
            notes: draft.notes,
        };
        let pending: Vec<(ObjectId, Location)> = self
            .pending
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?
            .iter()
            .map(|(id, loc)| (*id, *loc))
            .collect();
        let mut bytes = Vec::new();
        if !pending.is_empty() {
            bytes.extend(journal::encode_objects(&pending));
        }
        bytes.extend(journal::encode_step(&step)?);
        self.append_journal(&bytes)?;
        self.journal_pos += bytes.len() as u64;
        if let Ok(mut p) = self.pending.lock() {
            p.clear();
        }
        for (id, loc) in pending {
            note_end(&mut self.pack_ends, &loc);
            self.index.entry(id).or_insert(loc);
        }
        self.steps.push(step.clone());
        guard.committed(number);
        Ok(step)
    }

    /// Append committed bytes at the journal's committed end (cutting off a crashed writer's
    /// tail first) and fdatasync. On failure the journal is cut back: no half-written step.
    fn append_journal(&mut self, bytes: &[u8]) -> Result<()> {
        let path = self.journal_path();
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .at(&path)?;
        let len = f.metadata().at(&path)?.len();
        if len > self.journal_pos {
            f.set_len(self.journal_pos).at(&path)?;
        }
        let m = f.metadata().at(&path)?;
        let new_file = self.journal_ident == (0, 0);
        self.journal_ident = (m.dev(), m.ino());
        use std::io::{Seek, SeekFrom};
        let result = (|| {
            f.seek(SeekFrom::Start(self.journal_pos)).at(&path)?;
            f.write_all(bytes).at(&path)?;
            rustix::fs::fdatasync(&f).at(&path)
        })();
        if result.is_err() {
            let _ = f.set_len(self.journal_pos);
            return result;
        }
        if new_file {
            pack::sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Replace the journal with `objects` and `steps` (gc): tmp file, fdatasync, rename.
    pub(crate) fn rewrite_journal(
        &mut self,
        objects: &[(ObjectId, Location)],
        steps: &[Step],
    ) -> Result<()> {
        let mut bytes = Vec::new();
        for chunk in objects.chunks(100_000) {
            bytes.extend(journal::encode_objects(chunk));
        }
        for s in steps {
            bytes.extend(journal::encode_step(s)?);
        }
        if steps.is_empty() {
            return Err(StoreError::Refused(
                "refusing to write an empty journal".into(),
            ));
        }
        pack::write_file_atomic(&self.journal_path(), &bytes)?;
        self.journal_ident = (0, 0);
        self.catch_up()
    }

    /// Sync and hand over the objects added since the last commit (gc publishes them itself).
    pub(crate) fn take_pending_synced(&self) -> Result<HashMap<ObjectId, Location>> {
        if let Some(w) = self
            .writer
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?
            .as_mut()
        {
            w.sync()?;
        }
        let mut p = self
            .pending
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
        Ok(std::mem::take(&mut *p))
    }

    pub(crate) fn reader(&self) -> &PackReader {
        &self.reader
    }

    /// Write from now on into a brand-new pack (releasing the flock on the old one), so gc
    /// can compact every existing pack.
    pub(crate) fn switch_to_new_pack(&self) -> Result<()> {
        let mut w = self
            .writer
            .lock()
            .map_err(|_| StoreError::corrupt("poisoned"))?;
        if let Some(old) = w.as_mut() {
            old.sync()?;
        }
        *w = Some(PackWriter::acquire_new(&self.packs_dir())?);
        Ok(())
    }

    /// Total bytes of packs and journal.
    pub fn disk_usage(&self) -> Result<u64> {
        let mut total = std::fs::metadata(self.journal_path())
            .map(|m| m.len())
            .unwrap_or(0);
        let dir = self.packs_dir();
        for entry in std::fs::read_dir(&dir).at(&dir)? {
            total += entry.at(&dir)?.metadata().at(&dir)?.len();
        }
        Ok(total)
    }
}
