//! Everything the sandbox process needs, sent from the host side on a pipe (argv is
//! world-readable and size-limited).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Spec {
    pub argv: Vec<String>,
    /// Where the command starts (inside the project).
    pub cwd: PathBuf,
    /// The command's whole environment.
    pub env: Vec<(String, String)>,
    /// The user the command runs as, mapped 1:1 into the user namespace: the invoking user,
    /// or, when envgit runs as root on a project another user owns, that owner (root is then
    /// mapped too, for the set-up only; see `userns`).
    pub uid: u32,
    pub gid: u32,
    /// An empty directory outside the project, private to envgit, where the new root is built.
    pub staging: PathBuf,
    /// Host directories the view shows read-only, besides the project and the home: the
    /// system directories ([`crate::plan::SYSTEM_DIRS`] that exist; a symlink among them is
    /// recreated as the same symlink) and the toolchain homes PATH names. Nothing else of the
    /// host's `/` is there.
    #[serde(default)]
    pub system: Vec<PathBuf>,
    /// Read-write.
    pub project: PathBuf,
    /// The home directory, writable through an overlay whose upper layer is kept per project.
    pub home: Option<Overlay>,
    /// The project's `.git`, seen through an overlay whose upper layer is the run's: the host's
    /// `.git` is never written from inside; envgit imports data from the upper after each step.
    #[serde(default)]
    pub git: Option<Overlay>,
    /// Extra read-write paths (`filesystem.allow_write`).
    pub writable: Vec<PathBuf>,
    /// Existing paths made read-only (protected paths in the project).
    pub read_only: Vec<PathBuf>,
    /// Existing paths made unreadable (default denies, `filesystem.deny_read`, `.env` files).
    pub masks: Vec<PathBuf>,
    /// envgit's own state (the store, the home overlays): hidden.
    pub hidden: Vec<PathBuf>,
    /// Content of `/etc/resolv.conf` inside.
    pub resolv_conf: String,
    /// The in-netns relay; `None` leaves only loopback.
    pub relay: Option<RelaySpec>,
    /// Host files mounted read-only over existing system paths `(source, target)`: the merged
    /// CA bundle over the distro bundle paths.
    pub file_overrides: Vec<(PathBuf, PathBuf)>,
    /// cgroup directories (made by the host side, see [`crate::limits`]) the sandbox process
    /// joins before anything else.
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
    /// `RLIMIT_NPROC` of the command (0: the default, [`crate::limits::DEFAULT_PIDS_MAX`]).
    #[serde(default)]
    pub nproc: u64,
    /// Host files mounted read-only at `/run/envgit/<name>` inside `(name, source)` that are
    /// the same for a project's steps: the trust files the CA variables name and envgit's own
    /// binary. Part of the root's base ([`RootBase`]), which the zygote may build early.
    #[serde(default)]
    pub base_run_files: Vec<(String, PathBuf)>,
    /// More files at `/run/envgit/<name>`, of this run alone (an agent session's hooks socket).
    #[serde(default)]
    pub run_files: Vec<(String, PathBuf)>,
    /// When the command gets a terminal of its own (a console socket), which of its standard
    /// input, output and error are that terminal: those that were a terminal on envgit's side.
    /// The others are envgit's own (a pipe, a file), never the person's terminal.
    #[serde(default = "every_stdio")]
    pub terminal_stdio: [bool; 3],
}

fn every_stdio() -> [bool; 3] {
    [true; 3]
}

/// The part of a spec's view no step's command shapes: where the new root is built, the
/// system directories and the home. The zygote builds it before the spec exists, told this
/// ([`crate::enter_namespaces_early`]); the spec must then say the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootBase {
    pub staging: PathBuf,
    pub system: Vec<PathBuf>,
    pub home: Option<Overlay>,
    /// [`Spec::base_run_files`].
    #[serde(default)]
    pub run_files: Vec<(String, PathBuf)>,
}

impl RootBase {
    /// What `spec` says of it.
    pub fn of(spec: &Spec) -> Self {
        Self {
            staging: spec.staging.clone(),
            system: spec.system.clone(),
            home: spec.home.clone(),
            run_files: spec.base_run_files.clone(),
        }
    }
}

/// A host directory seen through an overlay: `path` is the lower layer and the mount point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    pub path: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// No host directory lies under it: `upper` itself is bound read-write at `path` (the
    /// home of a project owner who has none of their own on this host).
    #[serde(default)]
    pub fresh: bool,
    /// A layer between `path` and `upper`, read-only: the upper directory another sandbox of
    /// the project has mounted the home over, shown to a sandbox started beside it through an
    /// upper of its own (two mounts may not share an upper directory).
    #[serde(default)]
    pub shared: Option<PathBuf>,
}

/// The relay's configuration, as the sandbox process receives it.
pub use crate::relay::RelayConfig as RelaySpec;
