//! Finding the project (the nearest directory upward holding `envgit.yaml`), reading its policy
//! and opening its store.

use std::path::{Path, PathBuf};

use envgit_policy::{PROTECTED_PATHS, Policy};
use envgit_store::{LiveTree, ScanConfig, Store, WorkTree, envgit_home, store_dir_for};

use crate::failure::{CmdResult, Failure};
use crate::nofollow::read_nofollow;

pub const POLICY_FILE: &str = "envgit.yaml";

/// A connection to the project's `envgit watch` daemon, made when the store opened; `None`
/// inside when none answered. The command asks its question on it
/// ([`crate::watch_daemon::client::since_index`]).
pub struct WatchDaemon(pub(crate) Option<std::os::unix::net::UnixStream>);

pub struct Project {
    pub root: PathBuf,
    pub policy: Policy,
    pub policy_bytes: Vec<u8>,
    pub store_dir: PathBuf,
    /// What the person's own tools load from the project, read once ([`Project::host_loads`]).
    pub host_loads_read: std::sync::OnceLock<crate::host_loads::HostLoads>,
}

/// The directory the command works in: `-C DIR` or the current one.
pub fn start_dir(dir: Option<&Path>) -> CmdResult<PathBuf> {
    let d = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir()?,
    };
    d.canonicalize()
        .map_err(|e| Failure::usage(format!("{}: {e}", d.display())))
}

pub fn store_dir(root: &Path) -> CmdResult<PathBuf> {
    Ok(store_dir_for(&envgit_home()?, root))
}

/// The project's root and store, found without reading its policy: what the commands that
/// only read the history (`log`, `show`, `diff`, `fsck`) and `rewind --restore-policy` need,
/// so a broken `envgit.yaml` never locks anyone out of the history.
pub struct ProjectDirs {
    pub root: PathBuf,
    pub store_dir: PathBuf,
}

/// The nearest directory from `start` upward holding `envgit.yaml`.
pub fn project_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join(POLICY_FILE).symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

impl ProjectDirs {
    /// The nearest directory upward holding `envgit.yaml`, and its store; refused when envgit's
    /// own executable lies inside it (`own_exe`).
    pub fn find(dir: Option<&Path>) -> CmdResult<Self> {
        let start = start_dir(dir)?;
        let root = project_root(&start).ok_or_else(|| {
            Failure::usage(format!(
                "{} is not in an envgit project (no {POLICY_FILE} here or above): run `envgit init`",
                start.display()
            ))
        })?;
        crate::own_exe::refuse_inside(&root)?;
        let store_dir = store_dir(&root)?;
        Ok(Self { root, store_dir })
    }

    /// Like [`ProjectDirs::find`] for a command that needs no policy: a broken one is one
    /// warning line (with its file:line:col), not a refusal.
    pub fn find_for_reading(dir: Option<&Path>) -> CmdResult<Self> {
        let dirs = Self::find(dir)?;
        if let Err(e) = dirs.load() {
            crate::output::warn(&broken_policy(&e));
        }
        Ok(dirs)
    }

    /// Read and parse the policy: the whole project.
    pub fn load(&self) -> CmdResult<Project> {
        let policy_path = self.root.join(POLICY_FILE);
        let policy_bytes = read_nofollow(&policy_path)
            .map_err(|e| Failure::usage(format!("{}: {e}", policy_path.display())))?;
        let text = String::from_utf8_lossy(&policy_bytes);
        let policy = Policy::parse(&policy_path.display().to_string(), &text)
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok(Project {
            root: self.root.clone(),
            policy,
            policy_bytes,
            store_dir: self.store_dir.clone(),
            host_loads_read: std::sync::OnceLock::new(),
        })
    }

    pub fn open_store(&self) -> CmdResult<Store> {
        let mut store = Store::open(&self.store_dir).map_err(|e| self.no_store(e))?;
        self.recover_protected(&mut store);
        Ok(store)
    }

    pub fn open_store_for_log(&self) -> CmdResult<Store> {
        let mut store = Store::open_steps_only(&self.store_dir).map_err(|e| self.no_store(e))?;
        self.recover_protected(&mut store);
        Ok(store)
    }

    /// A step whose envgit died (SIGKILL, OOM, a panic) before its put-back, or whose put-back
    /// failed (a full disk), left its pre-step copy of the protected paths in the store: put
    /// them back before anything else.
    fn recover_protected(&self, store: &mut Store) {
        // What the open did for steps whose envgit died before their end.
        for said in store.take_recovery_warnings() {
            crate::output::warn(&said);
        }
        // The sweep of the person's search paths a dead step owed, made before its copy goes.
        let sweep = |attached: &[(String, Vec<u8>)]| {
            let rule = crate::path_shadow::RULE;
            match crate::path_shadow::sweep_owed(attached) {
                Ok(removed) => {
                    for r in removed {
                        crate::output::warn(&format!(
                            "{} {}: put there by a step whose envgit was killed before its end, \
                             and removed now (rule {rule}; {})",
                            r.shown, r.why, r.fix
                        ));
                    }
                }
                Err(e) => crate::output::error(&format!(
                    "{e}: look for programs a step put on your PATH before running them \
                     (rule {rule})"
                )),
            }
        };
        match envgit_store::recover_protected(&self.store_dir, &self.root, sweep) {
            Ok(recovered) => {
                for p in recovered.put_back {
                    crate::output::warn(&format!(
                        "{p} was changed by an earlier step that could not put it back (its envgit was killed, or the put-back failed); put back now (protected path)"
                    ));
                }
                for e in recovered.failed {
                    crate::output::error(&format!(
                        "putting protected paths back: {e}; kept, the next envgit command tries again"
                    ));
                }
            }
            Err(e) => crate::output::error(&format!("putting protected paths back: {e}")),
        }
        // Its layer over `.git` too: the data it wrote there is imported now, nothing else.
        match envgit_store::recover_git_layers(&self.store_dir, &self.root) {
            Ok(reports) => {
                for r in &reports {
                    crate::git_layer::report_into(r, &mut envgit_store::StepDraft::default());
                }
            }
            Err(e) => crate::output::error(&format!("importing a killed run's .git writes: {e}")),
        }
    }

    fn no_store(&self, e: envgit_store::StoreError) -> Failure {
        if matches!(e, envgit_store::StoreError::Refused(_))
            && !self.store_dir.join("store.json").exists()
        {
            return Failure::usage(format!(
                "{} has an {POLICY_FILE} but no store at {} (was the project moved, or ENVGIT_HOME changed?): \
                 move {POLICY_FILE} aside and run `envgit init`",
                self.root.display(),
                self.store_dir.display()
            ));
        }
        e.into()
    }
}

/// One line: what is wrong with the policy, where, and that the history still reads.
pub fn broken_policy(e: &Failure) -> String {
    broken_policy_then(
        e,
        "the history is read without it: fix it, \
         or `envgit rewind N --restore-policy` brings back step N's",
    )
}

/// `{POLICY_FILE} is broken (file:line:col: what); {then}`, on one line.
pub fn broken_policy_then(e: &Failure, then: &str) -> String {
    let what: String = e
        .message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{POLICY_FILE} is broken ({what}); {then}")
}

impl Project {
    pub fn find(dir: Option<&Path>) -> CmdResult<Self> {
        ProjectDirs::find(dir)?.load()
    }

    fn dirs(&self) -> ProjectDirs {
        ProjectDirs {
            root: self.root.clone(),
            store_dir: self.store_dir.clone(),
        }
    }

    pub fn open_store(&self) -> CmdResult<Store> {
        self.dirs().open_store()
    }

    /// What a sandboxed step from `before` owes the project should envgit die before its end
    /// (the next command makes it).
    pub fn owed_end(&self, before: envgit_store::ObjectId) -> envgit_store::OwedEnd {
        let snap = &self.policy.snapshot;
        envgit_store::OwedEnd {
            before,
            exclude: snap.exclude.clone(),
            max_file_size: snap.max_file_size,
            below: below_root_checks(),
            // Known once the step's copy of their code is on disk (`StepGuard::owe_excluded`).
            excluded_before: None,
        }
    }

    pub fn scan_config(&self) -> CmdResult<ScanConfig> {
        let snap = &self.policy.snapshot;
        Ok(ScanConfig::new(&snap.exclude, snap.max_file_size)?.with_budget(Some(snap.budget)))
    }

    /// A working tree with the stat cache loaded.
    pub fn worktree(&self, store: &Store) -> CmdResult<WorkTree> {
        self.worktree_of(store.dir())
    }

    /// [`Project::worktree`] for the store at `store_dir`, open or not.
    fn worktree_of(&self, store_dir: &Path) -> CmdResult<WorkTree> {
        let mut wt = WorkTree::new(&self.root, self.scan_config()?, Some(store_dir))?;
        wt.load_index_of(store_dir);
        Ok(wt)
    }

    /// The store and the working tree with its stat index, read side by side: at 100,000 files
    /// each takes tens of milliseconds (the journal's object index, the stat index) and neither
    /// needs the other.
    pub fn open_store_and_worktree(&self) -> CmdResult<(Store, WorkTree)> {
        self.open_store_beside(|| self.worktree_of(&self.store_dir))
    }

    /// [`Project::open_store_and_worktree`] with a [`LiveTree`], and a connection to the
    /// project's watching daemon when one answers ([`WatchDaemon`]), made beside the open.
    pub fn open_store_and_live_tree(&self) -> CmdResult<(Store, LiveTree, WatchDaemon)> {
        let (store, (live, daemon)) = self.open_store_beside(|| {
            let live = self.live_tree_of(&self.store_dir)?;
            Ok((live, self.watch_daemon()))
        })?;
        Ok((store, live, daemon))
    }

    /// The project's watching daemon, when one answers: a socket a daemon left when it was
    /// killed (or the machine restarted) is no daemon. (The stat index is not decoded ahead
    /// for a walk of the whole project: the walk decodes each directory's record for its own
    /// read, `DirMap::peek`.)
    pub(crate) fn watch_daemon(&self) -> WatchDaemon {
        let daemon = WatchDaemon(crate::watch_daemon::client::connect(&self.store_dir));
        if daemon.0.is_none() {
            crate::timings::note("no watching daemon answered");
        }
        daemon
    }

    /// The store, opened on this thread while `beside` runs on another.
    fn open_store_beside<T: Send>(
        &self,
        beside: impl FnOnce() -> CmdResult<T> + Send,
    ) -> CmdResult<(Store, T)> {
        std::thread::scope(|s| {
            let other = s.spawn(|| {
                let done = beside();
                crate::timings::mark("  stat index loaded (beside the store)");
                done
            });
            let store = self.open_store();
            crate::timings::mark("  store opened");
            let other = other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            Ok((store?, other?))
        })
    }

    /// A working tree kept current by inotify, with the stat cache loaded: its first snapshot
    /// walks everything once (watches first), later ones read only what changed.
    pub fn live_tree(&self, store: &Store) -> CmdResult<LiveTree> {
        self.live_tree_of(store.dir())
    }

    /// [`Project::live_tree`] for the store at `store_dir`, open or not.
    fn live_tree_of(&self, store_dir: &Path) -> CmdResult<LiveTree> {
        let mut live = LiveTree::new(&self.root, self.scan_config()?, Some(store_dir))?;
        live.tree_mut().load_index_of(store_dir);
        Ok(live)
    }

    /// Paths rewind keeps as they are now: the protected list (`PROTECTED_PATHS`) plus the
    /// directory `core.hooksPath` names, the files `.git/config` includes, and what links at,
    /// above or below any of them reach inside the project.
    /// What the person's own tools load from the project (direnv, mise, lefthook), read at
    /// its first use in this process: the protected paths and the `PATH` check share it.
    pub fn host_loads(&self) -> &crate::host_loads::HostLoads {
        self.host_loads_read
            .get_or_init(|| crate::host_loads::of(&self.root))
    }

    pub fn protected_paths(&self) -> Vec<String> {
        let mut out: Vec<String> = PROTECTED_PATHS.iter().map(|p| p.to_string()).collect();
        // Root-level patterns' current matches, so the sandbox mounts them read-only too (the
        // guard keeps the pattern itself to catch new ones). One listing of the root.
        let mut top = std::collections::HashSet::new();
        let listed = std::fs::read_dir(&self.root);
        let listed_ok = listed.is_ok();
        if let Ok(entries) = listed {
            for e in entries.flatten() {
                let Ok(name) = e.file_name().into_string() else {
                    continue;
                };
                if PROTECTED_PATHS
                    .iter()
                    .any(|p| p.contains('*') && envgit_policy::name_matches(p, &name))
                {
                    out.push(name.clone());
                }
                top.insert(name);
            }
        }
        let by_git = crate::git_host_config::of(&self.root)
            .into_iter()
            .map(|(p, _)| p);
        for f in by_git.chain(self.host_loads().files.iter().cloned()) {
            add_protected(&mut out, f);
        }
        // What the host reaches through a link at, above or below one of them. Most are
        // absent, which the listing above shows: only the others are looked at.
        let present: Vec<String> = out
            .iter()
            .filter(|p| {
                !listed_ok || envgit_store::protected_top_name(p).is_none_or(|n| top.contains(n))
            })
            .cloned()
            .collect();
        for target in crate::protected_links::link_targets(&self.root, &present) {
            if !out.contains(&target) {
                out.push(target);
            }
        }
        out
    }
}

/// What the host runs from below the root, for a step's end without a snapshot to look for on
/// disk ([`envgit_store::BelowRoot`]): the policy's lists.
pub(crate) fn below_root_checks() -> envgit_store::BelowRoot {
    let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
    envgit_store::BelowRoot {
        names: owned(envgit_policy::PROTECTED_NAMES_BELOW),
        repository_markers: owned(envgit_policy::REPOSITORY_MARKERS),
        repository_root_entries: owned(envgit_policy::REPOSITORY_ROOT_PATHS),
    }
}

/// Adds `path` to the protected list `out` unless it is there already, or below a directory
/// that is (git's sample `core.fsmonitor = .git/hooks/fsmonitor-watchman`): one copy and one
/// read-only mount for each.
fn add_protected(out: &mut Vec<String>, path: String) {
    let covered = out.iter().any(|p| {
        !p.contains('*')
            && (*p == path
                || path
                    .strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('/')))
    });
    if !covered {
        out.push(path);
    }
}
