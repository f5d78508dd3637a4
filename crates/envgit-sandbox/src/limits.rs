//! Per-run resource limits: how many processes (and threads) and how much memory one step's
//! sandbox may use, so a fork bomb or a runaway build ends in the sandbox, not on the host.
//!
//! Defaults: at most [`DEFAULT_PIDS_MAX`] tasks (processes and threads together), and memory at
//! most [`DEFAULT_MEMORY_PERCENT`]% of the host's RAM. `ENVGIT_PIDS_MAX` and
//! `ENVGIT_MEMORY_MAX` (bytes) on envgit's side lower or raise them.
//!
//! How they are enforced:
//! - `RLIMIT_NPROC` is set on the command always. In a user namespace of its own it counts the
//!   sandbox's processes only — but the kernel never enforces it for uid 0 (and the sandbox maps
//!   the invoking user 1:1, so root stays uid 0 inside), which is why:
//! - a cgroup of the run's own, made under envgit's current cgroup, that the sandbox process
//!   joins before it creates any namespace: cgroup v2 when the `pids` / `memory` controllers are
//!   delegated there (`pids.max`, `memory.max` with swap off), else the cgroup v1 `pids`
//!   hierarchy for the process count. Memory is limited only through cgroup v2 (never
//!   `RLIMIT_AS`, which breaks runtimes that reserve address space); where no such controller
//!   is available the run says "memory not limited".

use std::path::{Path, PathBuf};

/// Tasks (processes + threads) one run may have at once.
pub const DEFAULT_PIDS_MAX: u64 = 4096;
/// Share of the host's RAM one run may use, where cgroup v2 can limit memory.
pub const DEFAULT_MEMORY_PERCENT: u64 = 75;

/// What one run gets; made on the host side before the sandbox starts.
#[derive(Debug, Default)]
pub struct RunLimits {
    /// cgroup directories the sandbox process joins (its spec lists them).
    pub cgroups: Vec<PathBuf>,
    pub pids_max: u64,
    /// `None`: memory not limited.
    pub memory_max: Option<u64>,
    /// What the step records about its limits: what is not limited, if anything.
    pub notes: Vec<String>,
}

/// How often a run's cgroup is tried (a millisecond apart) before it is given up on: the
/// sandbox's PID 1 leaves it only at the end of its exit, after the namespaces' teardown.
pub(crate) const REMOVE_TRIES: u32 = 500;

impl RunLimits {
    /// Remove the run's cgroups (after the sandbox ended; its PID 1 killed every process).
    pub fn remove(&self) {
        remove_dirs(self.cgroups.iter().rev());
    }

    /// [`RunLimits::remove`] on a thread of its own: the sandbox's PID 1 leaves the cgroups
    /// only as it exits, after envgit already has the command's code
    /// (`init::report_and_linger`), and the step need not wait for that. [`finish_removals`]
    /// waits for every such thread.
    pub fn remove_when_empty(self) {
        if self.cgroups.is_empty() {
            return;
        }
        let limits = std::sync::Arc::new(self);
        let on_thread = std::sync::Arc::clone(&limits);
        match std::thread::Builder::new()
            .name("envgit-cgroup-rm".into())
            .spawn(move || on_thread.remove())
        {
            Ok(handle) => PENDING
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(handle),
            Err(_) => limits.remove(),
        }
    }

    /// For a process that ends with its run (`envgit run`): the cgroups are left to the
    /// child [`crate::close_detached`] starts, which removes them once the sandbox's PID 1
    /// has left them, while envgit exits without waiting (the teardown of the sandbox's
    /// namespaces in PID 1's exit kept a step 0.3–0.7 ms). [`finish_removals`] removes them
    /// here when no such child took them.
    pub fn remove_after_exit(self) {
        AFTER_EXIT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self);
    }
}

/// Removes each cgroup in turn, waiting for it to be empty (see [`REMOVE_TRIES`]).
pub(crate) fn remove_dirs<'a>(dirs: impl IntoIterator<Item = &'a PathBuf>) {
    for dir in dirs {
        for _ in 0..REMOVE_TRIES {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                break;
            }
            // Tasks just killed, or the sandbox's PID 1, are still exiting.
            std::thread::yield_now();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Runs whose cgroups [`RunLimits::remove_after_exit`] left to the closing child.
static AFTER_EXIT: std::sync::Mutex<Vec<RunLimits>> = std::sync::Mutex::new(Vec::new());

/// The cgroup directories left to the closing child, leaves first; they are its now.
pub(crate) fn take_after_exit() -> Vec<PathBuf> {
    let runs = std::mem::take(&mut *AFTER_EXIT.lock().unwrap_or_else(|p| p.into_inner()));
    runs.into_iter()
        .flat_map(|run| run.cgroups.into_iter().rev())
        .collect()
}

/// Removals started by [`RunLimits::remove_when_empty`] and not yet waited for.
static PENDING: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Wait until every run's cgroups handed to [`RunLimits::remove_when_empty`] are removed (or
/// given up on after half a second each), and remove those left for after the exit that no
/// child took: before envgit exits, and before a long-lived session starts its next sandbox.
pub fn finish_removals() {
    let pending = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
    for handle in pending {
        let _ = handle.join();
    }
    let left = std::mem::take(&mut *AFTER_EXIT.lock().unwrap_or_else(|p| p.into_inner()));
    for run in left {
        run.remove();
    }
}

/// The run's limits made at envgit's start ([`prepare_early`]), until the run takes them.
static EARLY: std::sync::Mutex<Option<RunLimits>> = std::sync::Mutex::new(None);

/// Makes the run's cgroups first thing (after [`crate::prefork`]), on a thread while envgit
/// finds the project (its thread to the sandbox's spec is the step's longer path), and starts
/// moving the zygote into them ([`crate::move_into_cgroups`]): the move waits for a kernel
/// grace period, which then passes while envgit opens the store and scans the project. The
/// zygote's early start waits for them ([`crate::zygote::cgroups_made`]). The run takes them
/// with [`take_early`]; [`discard_early`] removes them when it never came to that.
pub fn prepare_early() {
    crate::zygote::cgroups_pending();
    let made = std::thread::Builder::new()
        .name("envgit-cgroups".into())
        .spawn(|| {
            make_early();
            crate::zygote::cgroups_made();
        });
    match made {
        Ok(handle) => *MAKING.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle),
        Err(_) => {
            make_early();
            crate::zygote::cgroups_made();
        }
    }
}

/// The thread [`prepare_early`] started, until the run waits for it.
static MAKING: std::sync::Mutex<Option<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(None);

fn make_early() {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let limits = prepare(&format!(
        "envgit-{}-{}",
        std::process::id(),
        since_epoch.as_millis()
    ));
    crate::move_into_cgroups(&limits.cgroups);
    *EARLY_CGROUPS.lock().unwrap_or_else(|p| p.into_inner()) = Some(limits.cgroups.clone());
    *EARLY.lock().unwrap_or_else(|p| p.into_inner()) = Some(limits);
}

/// The cgroups [`prepare_early`] made, kept after the run took them: the zygote's early start
/// may come after that ([`crate::enter_namespaces_early`] waits for the walk of `/etc`).
static EARLY_CGROUPS: std::sync::Mutex<Option<Vec<PathBuf>>> = std::sync::Mutex::new(None);

/// The cgroups [`prepare_early`] made; `None` when it did not run.
pub(crate) fn early_cgroups() -> Option<Vec<PathBuf>> {
    EARLY_CGROUPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// The limits [`prepare_early`] made, once (waiting for its thread).
pub fn take_early() -> Option<RunLimits> {
    let making = MAKING.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(handle) = making {
        let _ = handle.join();
    }
    EARLY.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Ends the unused zygote and removes the early cgroups, if the run never took them (a
/// command that failed before its sandbox).
pub fn discard_early() {
    if let Some(limits) = take_early() {
        crate::discard_zygote();
        limits.remove();
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// `(v2 mount point, v1 pids mount point)` from `/proc/self/mountinfo`.
fn mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return (None, None);
    };
    let (mut v2, mut pids) = (None, None);
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split_whitespace().nth(4).map(PathBuf::from);
        let mut r = right.split_whitespace();
        let fstype = r.next().unwrap_or("");
        let opts = r.nth(1).unwrap_or("");
        match fstype {
            "cgroup2" if v2.is_none() => v2 = mount_point,
            "cgroup" if pids.is_none() && opts.split(',').any(|o| o == "pids") => {
                pids = mount_point;
            }
            _ => {}
        }
    }
    (v2, pids)
}

/// envgit's own cgroup path in a hierarchy: `0::/p` for v2, `N:pids:/p` for v1 pids.
fn own_path(v2: bool) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let hit = if v2 {
            id == "0" && ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == "pids")
        };
        hit.then(|| path.to_owned())
    })
}

fn write(dir: &Path, file: &str, value: &str) -> bool {
    std::fs::write(dir.join(file), value).is_ok()
}

/// A new cgroup `name` under `base`; `None` when it cannot be made here. Run cgroups an
/// envgit left behind (it was killed with `-9`, or the machine lost power) are removed first.
fn make(base: &Path, name: &str) -> Option<PathBuf> {
    sweep_left_behind(base);
    let dir = base.join(name);
    std::fs::create_dir(&dir).ok()?;
    Some(dir)
}

/// Removes `envgit-PID-…` cgroups under `base` whose envgit is gone. Only an empty cgroup
/// can be removed (the kernel refuses one with a process in it), so a run still going, even
/// one whose envgit died while its sandbox lives on, is never touched.
fn sweep_left_behind(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("envgit-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// Make the run's cgroups (best available) and say what is limited.
pub fn prepare(name: &str) -> RunLimits {
    let pids_max = env_u64("ENVGIT_PIDS_MAX")
        .unwrap_or(DEFAULT_PIDS_MAX)
        .max(16);
    let memory_want = env_u64("ENVGIT_MEMORY_MAX")
        .or_else(|| mem_total().map(|t| t / 100 * DEFAULT_MEMORY_PERCENT));
    let mut out = RunLimits {
        pids_max,
        ..RunLimits::default()
    };
    let (v2, v1_pids) = mounts();
    let mut pids_done = false;
    if let (Some(mount), Some(path)) = (&v2, own_path(true)) {
        let base = mount.join(path.trim_start_matches('/'));
        let controllers =
            std::fs::read_to_string(base.join("cgroup.subtree_control")).unwrap_or_default();
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        if (has("pids") || has("memory"))
            && let Some(dir) = make(&base, name)
        {
            if has("pids") && write(&dir, "pids.max", &pids_max.to_string()) {
                pids_done = true;
            }
            if has("memory")
                && let Some(m) = memory_want
                && write(&dir, "memory.max", &m.to_string())
            {
                let _ = write(&dir, "memory.swap.max", "0");
                out.memory_max = Some(m);
            }
            out.cgroups.push(dir);
        }
    }
    if !pids_done && let (Some(mount), Some(path)) = (&v1_pids, own_path(false)) {
        let base = mount.join(path.trim_start_matches('/'));
        if let Some(dir) = make(&base, name) {
            if write(&dir, "pids.max", &pids_max.to_string()) {
                pids_done = true;
                out.cgroups.push(dir);
            } else {
                let _ = std::fs::remove_dir(&dir);
            }
        }
    }
    // The step says what is *not* limited (nothing when everything is).
    if !pids_done {
        out.notes.push(format!(
            "processes limited to {pids_max} by RLIMIT_NPROC only (no pids cgroup here; not enforced for root)"
        ));
    }
    if out.memory_max.is_none() {
        out.notes
            .push("memory not limited (no delegated cgroup v2 memory controller)".to_owned());
    }
    out
}

/// A limit the sandbox could not put on itself; the command does not start without it.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("joining the run's cgroup {}: {source}", dir.display())]
    JoinCgroup {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("RLIMIT_NPROC: {0}")]
    Nproc(#[source] rustix::io::Errno),
}

/// In the sandbox process, before any namespace: join the run's cgroups. Fails closed: a
/// cgroup the host made but the sandbox cannot join is an error, never a silent no-limit.
///
/// A process with one thread joins a cgroup v1 hierarchy through its `tasks` file, as "0"
/// (itself): the kernel moves that one thread without taking the lock that makes moving a
/// whole process wait for an RCU grace period (14 ms of every step on this project's
/// machines). Its children are born where it is. A process with more threads must move them
/// all, through `cgroup.procs`.
pub fn join(cgroups: &[PathBuf]) -> Result<(), LimitError> {
    let alone = crate::zygote::single_threaded();
    for dir in cgroups {
        let file = match joins_by_thread(dir) {
            true if alone => dir.join("tasks"),
            _ => dir.join("cgroup.procs"),
        };
        std::fs::write(&file, "0").map_err(|source| LimitError::JoinCgroup {
            dir: dir.clone(),
            source,
        })?;
    }
    Ok(())
}

/// A cgroup v1 directory (it has a `tasks` file, v2 has none): a single-threaded process
/// joins it at no cost by itself, so moving it there early gains nothing.
pub(crate) fn joins_by_thread(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("tasks")).is_ok_and(|m| m.is_file())
}

/// In the worker, just before exec: the per-run process limit.
pub fn set_nproc(max: u64) -> Result<(), LimitError> {
    let lim = rustix::process::Rlimit {
        current: Some(max),
        maximum: Some(max),
    };
    rustix::process::setrlimit(rustix::process::Resource::Nproc, lim).map_err(LimitError::Nproc)
}
