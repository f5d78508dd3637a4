//! One project's store: where it lives, creating and opening it, its format, and the journal
//! read into memory (its steps; its objects' index for the packs). Objects are read and added
//! through [`crate::backend::ObjectBackend`] (`read.rs`, `write.rs`); steps are begun and
//! committed in `commit.rs`. Readers never lock; a writer holds the commit lock only while it
//! appends one step to the journal.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::{ObjectBackend, ObjectInfo};
use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::journal;
use crate::journal_file::JournalFile;
use crate::pack;
use crate::pack_backend::PackBackend;
use crate::step::{Step, now_ms};
use crate::step_log::StepLog;
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

/// The stat index's base in the store at `store_dir` ([`crate::WorkTree::save_index`]).
pub(crate) fn stat_cache_path(store_dir: &Path) -> PathBuf {
    store_dir.join("stat.cache")
}

/// The stat index's tail: the directories that differ from its base.
pub(crate) fn stat_tail_path(store_dir: &Path) -> PathBuf {
    store_dir.join("stat.tail")
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoreMeta {
    format: u32,
    project: PathBuf,
    created_ms: u64,
}

pub struct Store {
    pub(crate) dir: PathBuf,
    project: PathBuf,
    created_ms: u64,
    /// The format in store.json (raised to [`FIRST_DELTA_FORMAT`] by the first delta written).
    format: AtomicU32,
    /// Trees read or written, resolved (deltas applied).
    pub(crate) trees: TreeCache,
    pub(crate) objects: Box<dyn ObjectBackend>,
    pub(crate) journal: JournalFile,
    pub(crate) steps: StepLog,
    /// False when opened for step records only: the journal's objects frames are skipped.
    pub(crate) objects_loaded: bool,
    /// What recovering interrupted steps did that the person should hear.
    pub(crate) recovery_warnings: Vec<String>,
}

fn mkdir_private(path: &Path) -> Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .at(path)
}

impl Store {
    /// Create the store for `project` at `dir`, its objects in packs. Refuses if one is
    /// already there.
    pub fn create(dir: &Path, project: &Path) -> Result<Self> {
        Self::create_files(dir, project)?;
        Self::open(dir)
    }

    /// Create the store for `project` at `dir` with its objects in `objects` (its steps are in
    /// `dir`'s journal as always). Such a store is opened again with [`Store::open_with`] and
    /// the same objects: [`Store::open`] reads packs.
    pub fn create_with(
        dir: &Path,
        project: &Path,
        objects: Box<dyn ObjectBackend>,
    ) -> Result<Self> {
        Self::create_files(dir, project)?;
        Self::open_inner(dir, objects, true)
    }

    /// Open the store at `dir` with its objects in `objects`.
    pub fn open_with(dir: &Path, objects: Box<dyn ObjectBackend>) -> Result<Self> {
        Self::open_inner(dir, objects, true)
    }

    fn create_files(dir: &Path, project: &Path) -> Result<()> {
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
        pack::write_file_atomic(&dir.join("store.json"), &bytes)
    }

    /// Open with the object index loaded (everything but `log` needs it).
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_inner(dir, Box::new(PackBackend::new(dir, true)), true)
    }

    /// Open for reading step records only: objects frames are skipped.
    pub fn open_steps_only(dir: &Path) -> Result<Self> {
        Self::open_inner(dir, Box::new(PackBackend::new(dir, false)), false)
    }

    fn open_inner(dir: &Path, objects: Box<dyn ObjectBackend>, loaded: bool) -> Result<Self> {
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
            objects,
            journal: JournalFile::new(dir),
            steps: StepLog::default(),
            objects_loaded: loaded,
            recovery_warnings: Vec::new(),
        };
        store.catch_up()?;
        // Best effort, and never waiting: a store that cannot be written now (full disk, a
        // commit in progress) records them at a later open.
        let _ = store.recover_interrupted();
        crate::stale_temporaries::sweep(dir);
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn project(&self) -> &Path {
        &self.project
    }

    pub fn stat_cache_path(&self) -> PathBuf {
        stat_cache_path(&self.dir)
    }

    pub fn stat_tail_path(&self) -> PathBuf {
        stat_tail_path(&self.dir)
    }

    /// Removes the stat index, base and tail (after a purge it would vouch for what is gone):
    /// the next scan reads every file.
    pub fn forget_stat_index(&self) {
        let _ = std::fs::remove_file(self.stat_cache_path());
        let _ = std::fs::remove_file(self.stat_tail_path());
        crate::checked_this_boot::forget(&self.stat_cache_path());
    }

    pub fn journal_path(&self) -> PathBuf {
        self.journal.path().to_path_buf()
    }

    pub fn packs_dir(&self) -> PathBuf {
        self.dir.join("packs")
    }

    /// Every step, oldest first (each record is decoded the first time any caller needs it:
    /// a corrupt one is an error here).
    pub fn steps(&self) -> Result<&[Step]> {
        self.steps.all()
    }

    /// How many steps the journal holds.
    pub fn step_count(&self) -> usize {
        self.steps.len()
    }

    /// Steps from the newest back, each decoded as it is reached.
    pub fn steps_newest_first(&self) -> impl Iterator<Item = Result<&Step>> {
        self.steps.newest_first()
    }

    pub fn head(&self) -> Option<&Step> {
        self.steps.head()
    }

    pub fn step(&self, number: u64) -> Result<&Step> {
        self.steps
            .by_number(number)
            .unwrap_or(Err(StoreError::NoSuchStep(number)))
    }

    /// The tree of a step that can be restored.
    pub fn step_tree(&self, number: u64) -> Result<ObjectId> {
        self.step(number)?.tree.ok_or(StoreError::Pruned(number))
    }

    /// The object database.
    pub fn objects(&self) -> &dyn ObjectBackend {
        self.objects.as_ref()
    }

    /// The local packs, if that is where this store's objects are (gc and the tools that
    /// look at records work on packs).
    pub fn packs(&self) -> Option<&PackBackend> {
        self.objects.as_any().downcast_ref::<PackBackend>()
    }

    /// The packs, or a refusal naming `what` needs them.
    pub(crate) fn packs_for(&self, what: &str) -> Result<&PackBackend> {
        self.packs().ok_or_else(|| {
            StoreError::Refused(format!(
                "{what} works on a store whose objects are in packs, and {}'s are not",
                self.dir.display()
            ))
        })
    }

    /// What is known of an object without reading it (committed, or added since the last
    /// commit by this process).
    pub fn object_info(&self, id: &ObjectId) -> Option<ObjectInfo> {
        self.objects.info(id)
    }

    /// How many objects are committed.
    pub fn object_count(&self) -> usize {
        self.objects.count()
    }

    /// Every committed object of `kind`.
    pub fn list_objects(&self, kind: ObjectKind) -> Vec<ObjectId> {
        self.objects.list(kind)
    }

    pub fn has(&self, id: &ObjectId) -> bool {
        self.objects.info(id).is_some()
    }

    /// Read journal frames committed since we last looked. If the journal was replaced (gc
    /// rewrites it), reload it whole.
    pub fn catch_up(&mut self) -> Result<()> {
        let loaded = self.objects_loaded;
        let objects = &mut self.objects;
        let steps = &mut self.steps;
        let dir = &self.dir;
        let (read, _replaced) = self.journal.read_new_with(|mark| {
            if mark.pos != 0 {
                return (if loaded { mark.pos } else { u64::MAX }, mark.pos);
            }
            let (steps_from, untabled) = steps.begin_full_read(dir, mark.ident);
            if !loaded {
                return (u64::MAX, steps_from);
            }
            let from = objects.begin_full_read(mark.ident);
            // The steps table's objects continue the object table to its own point.
            if untabled.is_some_and(|u| objects.resume(u)) {
                (steps_from, steps_from)
            } else {
                (from, steps_from)
            }
        })?;
        self.objects.load(read.objects, self.journal.mark());
        self.steps.extend(read.steps)
    }

    /// Check that each step record is where the steps table said, against `read`, a read of
    /// every frame of the journal (an open through the table reads none it holds; fsck).
    pub(crate) fn check_steps_table(&self, read: &journal::JournalRead) -> Result<()> {
        if !self.steps.same_places(&read.steps) {
            return Err(StoreError::corrupt(format!(
                "{}: the steps table does not match the journal ({} steps against {}); it is a \
                 cache: remove it and run envgit fsck again",
                crate::steps_table::path(&self.dir).display(),
                self.steps.len(),
                read.steps.len()
            )));
        }
        Ok(())
    }

    /// Raise a format-1 store to the format that has deltas, once, before its first delta.
    pub(crate) fn allow_deltas(&self) -> Result<()> {
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

    /// Replace the journal with `objects` and `steps` (gc): tmp file, fdatasync, rename.
    pub(crate) fn rewrite_journal(
        &mut self,
        objects: &[(ObjectId, pack::Location)],
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
        // The table names objects where the old journal put them.
        crate::object_table::remove(&self.dir);
        crate::steps_table::remove(&self.dir);
        self.journal.replace(&bytes)?;
        self.catch_up()
    }

    /// Total bytes of packs and journal.
    pub fn disk_usage(&self) -> Result<u64> {
        let mut total = std::fs::metadata(self.journal.path())
            .map(|m| m.len())
            .unwrap_or(0);
        let dir = self.packs_dir();
        for entry in std::fs::read_dir(&dir).at(&dir)? {
            total += entry.at(&dir)?.metadata().at(&dir)?.len();
        }
        Ok(total)
    }
}
