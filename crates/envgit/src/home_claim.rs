//! Which upper directory a sandbox mounts the project's home overlay over. The project keeps
//! one (`<store>/home/upper`), so what a step writes in `~` (caches, a tool's login) is there
//! for the next step. But two mounts may not share an upper or work directory: overlayfs
//! warns that "accessing files from both mounts will result in undefined behavior", and one
//! mount's set-up of the shared work directory can break the other's (2 of 40 pairs of
//! `envgit run` started together failed with `overlay on HOME: Invalid argument`). Agents run
//! commands in parallel, and a step may leave a server running while the next ones run.
//!
//! So a sandbox takes the home's lock (`<store>/home/lock`) for as long as its run lasts and
//! mounts the shared upper; one started while the lock is held gets an upper of its own
//! (`<store>/homes/TOKEN`), and what it writes there goes to the trash with that upper when
//! the run ends (its step says so). It sees the shared upper too, as a read-only layer, where
//! overlayfs allows it: not when the store lies inside the home (the default,
//! `~/.local/share/envgit`), since one lower layer may not lie inside another (the mount
//! fails with `ELOOP`); there it sees the host's home without what earlier steps wrote. Steps
//! one after another take the lock in turn and share the home as before.

use std::path::{Path, PathBuf};

use envgit_store::Flock;

use crate::failure::{CmdResult, Failure};

/// Where private uppers are made, beside the store's other per-run directories (so the trash
/// can take them with a rename).
const PRIVATE_KIND: &str = "homes";

/// The upper a run's home overlay uses, held until the run ends (drop).
pub(crate) enum HomeClaim {
    /// The project's shared upper: its lock is held while this lives.
    Shared { _lock: Flock },
    /// An upper of this run's own, at `dir` (`upper`, `work`), moved to the trash on drop.
    Private { dir: PathBuf, lock: Option<Flock> },
}

/// The directories a claim gives the overlay.
pub(crate) struct HomeLayers {
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The shared upper, read-only between the host's home and `upper` (a private claim).
    pub shared: Option<PathBuf>,
}

impl HomeClaim {
    /// Claims the overlay over `home` whose shared layers are `base/upper` and `base/work`
    /// (made already), for the store at `store_dir`. `make_dir` makes a directory of the
    /// private layers as the shared ones are made (private, and the command's user's).
    pub(crate) fn take(
        store_dir: &Path,
        base: &Path,
        home: &Path,
        make_dir: impl Fn(&Path) -> CmdResult<()>,
    ) -> CmdResult<(HomeClaim, HomeLayers)> {
        let shared = (base.join("upper"), base.join("work"));
        sweep_left_behind(store_dir);
        if let Some(lock) = Flock::try_exclusive(&base.join("lock"))? {
            let layers = HomeLayers {
                upper: shared.0,
                work: shared.1,
                shared: None,
            };
            return Ok((HomeClaim::Shared { _lock: lock }, layers));
        }
        let parent = store_dir.join(PRIVATE_KIND);
        std::fs::create_dir_all(&parent).map_err(|e| at(&parent, e))?;
        // Named by a random token: `create_dir` fails rather than share one.
        let dir = parent.join(crate::runtime::random_token()?);
        std::fs::create_dir(&dir).map_err(|e| at(&dir, e))?;
        let lock = Flock::exclusive(&dir.join("lock"))?;
        let claim = HomeClaim::Private {
            dir: dir.clone(),
            lock: Some(lock),
        };
        let (upper, work) = (dir.join("upper"), dir.join("work"));
        make_dir(&upper)?;
        make_dir(&work)?;
        let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let inside_home = canonical(&shared.0).starts_with(canonical(home));
        let layers = HomeLayers {
            upper,
            work,
            shared: (!inside_home).then_some(shared.0),
        };
        Ok((claim, layers))
    }

    /// What the run's step says of its home.
    pub(crate) fn note(&self) -> Option<String> {
        match self {
            HomeClaim::Shared { .. } => None,
            HomeClaim::Private { .. } => Some(
                "another sandbox of this project was running and held its home (`~`): this step \
                 had a layer of its own over the home, and what it wrote there was not kept"
                    .to_string(),
            ),
        }
    }
}

impl Drop for HomeClaim {
    fn drop(&mut self) {
        if let HomeClaim::Private { dir, lock } = self {
            // Out of `homes/` while still locked, so no other run's sweep takes it too.
            envgit_store::discard_to_trash(dir);
            drop(lock.take());
        }
    }
}

/// Private uppers whose run is gone (killed before its drop) go to the trash. One `readdir`
/// of a directory that is almost always absent. A directory whose lock file is not there yet
/// is being made by a run that has not taken it: left alone.
fn sweep_left_behind(store_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(store_dir.join(PRIVATE_KIND)) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if let Ok(Some(lock)) = Flock::try_exclusive_existing(&dir.join("lock")) {
            envgit_store::discard_to_trash(&dir);
            drop(lock);
        }
    }
}

fn at(path: &Path, e: std::io::Error) -> Failure {
    Failure::failed(format!("{}: {e}", path.display()))
}
