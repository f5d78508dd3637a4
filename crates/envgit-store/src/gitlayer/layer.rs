//! One run's layer over the project's `.git`: the directories the sandbox mounts as the
//! overlay's upper and work layers, the host's `.git` as the run began (for compare-and-swap),
//! and a lock its owner holds. Imports happen after each step; the layer is removed when the
//! run ends. A layer left by an envgit that was killed is imported, then removed, by the next
//! command ([`recover`]): the host's `.git` never held anything unsafe, so a crash loses at
//! most the agent's unimported data, never lets its code in.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::import::{GitImport, PreStep, import_beside};
use crate::error::{IoContext, Result, StoreError};
use crate::lock::Flock;

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    /// The project root; the layer covers `root/.git`.
    root: PathBuf,
    pre: PreStep,
}

/// A run's git layer, held (locked) by the process that made it.
pub struct GitLayer {
    dir: PathBuf,
    root: PathBuf,
    pre: Mutex<PreStep>,
    _lock: Flock,
}

fn layers_root(store_dir: &Path) -> PathBuf {
    store_dir.join("gitlayer")
}

impl GitLayer {
    /// A new layer over `root/.git`, or `None` when `.git` is not a plain directory (absent,
    /// a `gitdir:` file, a symlink): then there is nothing of the host's to shield this way.
    pub fn open(store_dir: &Path, root: &Path) -> Result<Option<GitLayer>> {
        let git_dir = root.join(".git");
        match std::fs::symlink_metadata(&git_dir) {
            Ok(m) if m.is_dir() => {}
            _ => return Ok(None),
        }
        let pre = PreStep::capture(&git_dir).at(&git_dir)?;
        let base = layers_root(store_dir);
        std::fs::create_dir_all(&base).at(&base)?;
        let dir = base.join(format!(
            "{}-{}",
            std::process::id(),
            crate::pack::random_u64()
        ));
        std::fs::create_dir(&dir).at(&dir)?;
        let lock = Flock::exclusive(&dir.join("lock"))?;
        for sub in ["upper", "work"] {
            std::fs::create_dir(dir.join(sub)).at(&dir.join(sub))?;
        }
        // The overlay's root takes the upper directory's owner and mode: they must be the
        // host `.git`'s, or git inside (running as the project's owner) sees a `.git` that
        // is not theirs.
        let upper = dir.join("upper");
        let meta = std::fs::symlink_metadata(&git_dir).at(&git_dir)?;
        if rustix::process::geteuid().is_root() {
            use std::os::unix::fs::MetadataExt;
            std::os::unix::fs::chown(&upper, Some(meta.uid()), Some(meta.gid())).at(&upper)?;
        }
        std::fs::set_permissions(&upper, meta.permissions()).at(&upper)?;
        let layer = GitLayer {
            dir,
            root: root.to_path_buf(),
            pre: Mutex::new(pre),
            _lock: lock,
        };
        layer.save_first()?;
        Ok(Some(layer))
    }

    /// The host's `.git`, the overlay's lower layer.
    pub fn git_dir(&self) -> PathBuf {
        self.root.join(".git")
    }

    /// The overlay's upper directory: where the sandbox's writes to `.git` land.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// The overlay's work directory (same filesystem as the upper).
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Shows the sandbox `hidden.text` as `.git/config` (the host's with its credentials
    /// replaced by placeholders): written into the upper layer before the overlay is mounted,
    /// and taken as the config the step began from.
    pub fn hide_config(&self, hidden: &super::HiddenConfig) -> Result<()> {
        let file = self.upper().join("config");
        std::fs::write(&file, &hidden.text).at(&file)?;
        {
            let mut pre = self.pre.lock().unwrap_or_else(|p| p.into_inner());
            pre.config = hidden.text.clone();
            pre.placeholders = hidden.placeholders.clone();
        }
        self.save()
    }

    /// Tells the layer which paths the run protects, before the sandbox mounts it: every
    /// import then keeps out the step's index, refs and `HEAD` when they change what the
    /// host's git holds for one of them. Kept in the layer's state (written in place, as at
    /// its making: nothing is mounted yet), so a killed run's recovery judges the same way.
    pub fn protect(&self, paths: &[String]) -> Result<()> {
        {
            let mut pre = self.pre.lock().unwrap_or_else(|p| p.into_inner());
            if pre.protected == paths {
                return Ok(());
            }
            pre.protected = paths.to_vec();
        }
        self.save_first()
    }

    /// Brings the data the sandbox wrote since the last import into the host's `.git`, the
    /// protected paths being on disk as they were before the step.
    pub fn import(&self) -> Result<GitImport> {
        self.import_beside(&mut || {}, &|_| true)
    }

    /// [`GitLayer::import`] beside the put-back: `put_back` returns once the protected paths
    /// are back on disk, `existed_before` says whether the project held a directory before
    /// the step (see [`import_beside`]).
    pub fn import_beside(
        &self,
        put_back: &mut dyn FnMut(),
        existed_before: &dyn Fn(&[u8]) -> bool,
    ) -> Result<GitImport> {
        let (report, changed) = self.import_unsaved(put_back, existed_before)?;
        // Saved only when the import changed what a later one compares against: most steps
        // write nothing in `.git`, and the rename cost 0.3-0.45 ms of each on ext4.
        if changed {
            self.save()?;
        }
        Ok(report)
    }

    /// The import, and whether it changed the layer's state.
    fn import_unsaved(
        &self,
        put_back: &mut dyn FnMut(),
        existed_before: &dyn Fn(&[u8]) -> bool,
    ) -> Result<(GitImport, bool)> {
        let mut pre = self.pre.lock().unwrap_or_else(|p| p.into_inner());
        let before = pre.clone();
        let git_dir = self.git_dir();
        let report = import_beside(&git_dir, &self.upper(), &mut pre, put_back, existed_before)
            .at(&git_dir)?;
        let changed = *pre != before;
        Ok((report, changed))
    }

    /// The run is over (its sandbox, and so the overlay, is gone): a last import, then the
    /// layer goes to the trash (its state is not saved again: nothing will read it). The
    /// protected paths are back on disk by then (each step's put-back, or the recovery's).
    pub fn finish(self) -> Result<GitImport> {
        let (report, _) = self.import_unsaved(&mut || {}, &|_| true)?;
        crate::trash::discard(&self.dir);
        Ok(report)
    }

    fn saved_bytes(&self) -> Result<Vec<u8>> {
        let pre = self.pre.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let saved = Saved {
            root: self.root.clone(),
            pre,
        };
        serde_json::to_vec(&saved).map_err(|e| StoreError::corrupt(e.to_string()))
    }

    /// The layer's first state, written in place: until it is whole nothing was mounted, and
    /// a layer whose state does not parse is removed unimported ([`recover`]).
    fn save_first(&self) -> Result<()> {
        let file = self.dir.join("layer.json");
        let bytes = self.saved_bytes()?;
        std::fs::write(&file, &bytes).at(&file)
    }

    fn save(&self) -> Result<()> {
        let bytes = self.saved_bytes()?;
        let tmp = self.dir.join("layer.json.tmp");
        // No fsync: the file is for a later command after this process is killed (the page
        // cache survives that); after a power loss the layer is only not imported, which
        // loses the step's git data, never lets code in.
        std::fs::write(&tmp, &bytes).at(&tmp)?;
        let file = self.dir.join("layer.json");
        std::fs::rename(&tmp, &file).at(&file)
    }
}

/// Layers left by envgit processes that are gone, for the project at `root`: each imported
/// now (refs compare-and-swap against the host's `.git` as that run began), then removed.
pub fn recover(store_dir: &Path, root: &Path) -> Result<Vec<GitImport>> {
    let base = layers_root(store_dir);
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        // Held by a live run: it imports for itself. No lock file: its run is between making
        // the directory and taking the lock (or died there, before anything was mounted), or
        // it went to the trash since the listing; neither is this one's.
        let Some(lock) = Flock::try_exclusive_existing(&dir.join("lock"))? else {
            continue;
        };
        let saved: Option<Saved> = std::fs::read(dir.join("layer.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(saved) = saved else {
            // Its owner died before the run began: nothing was mounted.
            let _ = crate::remove_tree(&dir);
            continue;
        };
        if saved.root != root {
            continue;
        }
        let layer = GitLayer {
            dir,
            root: saved.root,
            pre: Mutex::new(saved.pre),
            _lock: lock,
        };
        out.push(layer.finish()?);
    }
    Ok(out)
}
