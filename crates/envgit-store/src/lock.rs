//! Kernel-released locks (flock): a crashed process can never leave the store locked.
//!
//! - `lock`: exclusive while a step is appended to the journal (and while gc rewrites it).
//! - `gc.lock`: shared by every open step, exclusive for gc, so gc never removes an object a
//!   step in flight is about to reference.
//! - `inflight/<id>`: one file per open step, locked by its owner; others see a live step as a
//!   file they cannot lock (and clean up the ones they can: their owner died).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::error::{IoContext, Result, StoreError};
use crate::pack::random_u64;

/// A file flocked by this process, released when dropped.
pub struct Flock {
    file: File,
}

impl Flock {
    fn open(path: &Path) -> Result<File> {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .at(path)
    }

    pub fn exclusive(path: &Path) -> Result<Self> {
        Self::on(Self::open(path)?, FlockOperation::LockExclusive).at(path)
    }

    pub fn shared(path: &Path) -> Result<Self> {
        Self::on(Self::open(path)?, FlockOperation::LockShared).at(path)
    }

    /// `None` when someone else holds it.
    pub fn try_exclusive(path: &Path) -> Result<Option<Self>> {
        match Self::on(Self::open(path)?, FlockOperation::NonBlockingLockExclusive) {
            Ok(lock) => Ok(Some(lock)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e).at(path),
        }
    }

    /// [`Flock::try_exclusive`] of a lock file that must exist already: `None` too when it
    /// does not (its owner may be about to make and take it).
    pub fn try_exclusive_existing(path: &Path) -> Result<Option<Self>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).at(path),
        };
        match Self::on(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(lock) => Ok(Some(lock)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e).at(path),
        }
    }

    /// Locks a file already open (a marker, a pack) with `op`.
    pub(crate) fn on(file: File, op: FlockOperation) -> std::io::Result<Self> {
        rustix::fs::flock(&file, op)?;
        Ok(Self { file })
    }
}

impl std::ops::Deref for Flock {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

impl Drop for Flock {
    /// Unlocked here rather than left to the close: a child that another thread forks holds a
    /// copy of every descriptor until its exec, and with it the lock, so a lock only closed
    /// could still look held (a live step, a live layer) after its owner let it go.
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.file, FlockOperation::Unlock);
    }
}

/// What is known of a step when it begins, in its `inflight/<id>` marker: the begin record
/// that lets a later command record the step as interrupted if its owner dies before
/// committing (or gives up after the command started, see
/// [`StepGuard::keep_if_uncommitted`]).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Begun {
    pub pid: u32,
    pub what: String,
    pub started_at_ms: u64,
    pub head: Option<u64>,
    #[serde(default)]
    pub command: Option<Vec<String>>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// A step is under way: false between a commit and the next step of a session guard.
    #[serde(default = "yes")]
    pub open: bool,
    /// What the step's end owes the project if its owner dies first (a sandboxed step's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owed_end: Option<crate::without_snapshot::OwedEnd>,
}

fn yes() -> bool {
    true
}

impl Begun {
    fn parse(text: &str, mtime_ms: u64) -> Self {
        serde_json::from_str(text).unwrap_or_else(|_| Self {
            // A marker of an older envgit ("pid N: what"), or torn.
            what: text.trim().to_string(),
            started_at_ms: mtime_ms,
            open: true,
            ..Self::default()
        })
    }

    fn describe(&self) -> String {
        format!("pid {}: {}", self.pid, self.what)
    }
}

/// An open step. Dropping it closes the step: the marker is removed, unless
/// [`StepGuard::keep_if_uncommitted`] was called since the last commit, in which case the step
/// is left for the next command to record as interrupted.
pub struct StepGuard {
    path: PathBuf,
    /// The marker, flocked exclusively while the step is open.
    marker: Flock,
    begun: Begun,
    keep: bool,
    _gc: Flock,
    head_at_begin: Option<u64>,
}

impl StepGuard {
    pub(crate) fn begin(store: &Path, what: &str, head: Option<u64>) -> Result<Self> {
        let gc = Flock::shared(&store.join("gc.lock"))?;
        let dir = store.join("inflight");
        let id = format!("{:016x}", random_u64());
        let path = dir.join(&id);
        // Created, locked and written under a dot name, then renamed: another process never
        // sees an unlocked marker (which it would take for one whose owner died).
        let tmp = dir.join(format!(".new-{id}"));
        let file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&tmp)
            .at(&tmp)?;
        let begun = Begun {
            pid: std::process::id(),
            what: what.to_string(),
            started_at_ms: crate::step::now_ms(),
            head,
            open: true,
            ..Begun::default()
        };
        let result = (|| {
            let marker = Flock::on(file, FlockOperation::LockExclusive).at(&tmp)?;
            let json =
                serde_json::to_vec(&begun).map_err(|e| StoreError::corrupt(e.to_string()))?;
            (&*marker).write_all(&json).at(&tmp)?;
            std::fs::rename(&tmp, &path).at(&path)?;
            Ok(marker)
        })();
        let marker = match result {
            Ok(marker) => marker,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        Ok(Self {
            path,
            marker,
            begun,
            keep: false,
            _gc: gc,
            head_at_begin: head,
        })
    }

    pub fn head_at_begin(&self) -> Option<u64> {
        self.head_at_begin
    }

    /// Add what the step runs to its begin record, so an interrupted step is recorded with it;
    /// with `owed`, what its end owes the project (see [`StepGuard::owe_end`]), in the same
    /// write.
    pub fn describe(
        &mut self,
        command: &[String],
        cwd: Option<&str>,
        owed: Option<crate::without_snapshot::OwedEnd>,
    ) -> Result<()> {
        self.begun.command = Some(command.to_vec());
        self.begun.cwd = cwd.map(str::to_string);
        if owed.is_some() {
            self.begun.owed_end = owed;
        }
        self.rewrite()
    }

    /// The step runs sandboxed from `owed.before`: should its owner die before its end, the
    /// next open of the store checks the nested repositories for it. Call it before the
    /// command starts (a session: at each step); a commit clears it.
    pub fn owe_end(&mut self, owed: crate::without_snapshot::OwedEnd) -> Result<()> {
        self.begun.owed_end = Some(owed);
        self.rewrite()
    }

    /// The repositories the directories the snapshot leaves out held before the step, once
    /// their code is copied ([`crate::without_snapshot::OwedEnd::excluded_before`]): an
    /// interrupted step's end then disarms any other found there. Written now when the step
    /// is already open, else with [`StepGuard::keep_if_uncommitted`]'s write.
    pub fn owe_excluded(&mut self, before: Vec<crate::gitlayer::RepositoryAt>) -> Result<()> {
        let Some(owed) = self.begun.owed_end.as_mut() else {
            return Ok(());
        };
        owed.excluded_before = Some(before);
        if self.begun.open {
            self.rewrite()?;
        }
        Ok(())
    }

    /// The step's command has started: from now until the next commit, dropping the guard
    /// without committing (the commit failed, the disk is full) leaves the step for the next
    /// command to record as interrupted, instead of ending it as if nothing happened. For a
    /// guard held across several steps (a session), call it at the start of each.
    pub fn keep_if_uncommitted(&mut self) {
        self.keep = true;
        if !self.begun.open {
            self.begun.open = true;
            // Best effort: if it cannot be written, a crash now goes unrecorded.
            let _ = self.rewrite();
        }
    }

    /// The owner committed step `number`: a further step under the same guard (a rewind
    /// after the state it records first) is not overlapped by it, and a crash before the next
    /// [`StepGuard::keep_if_uncommitted`] interrupts nothing.
    pub(crate) fn committed(&mut self, number: u64) {
        self.head_at_begin = Some(number);
        self.keep = false;
        self.begun.open = false;
        self.begun.owed_end = None;
        self.begun.head = Some(number);
        // Best effort: if it cannot be written, a crash before the drop records one
        // interrupted step too many, never one too few.
        let _ = self.rewrite();
    }

    /// Replace the marker's begin record (in place: the flock stays on it).
    fn rewrite(&mut self) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let json =
            serde_json::to_vec(&self.begun).map_err(|e| StoreError::corrupt(e.to_string()))?;
        self.marker.set_len(0).at(&self.path)?;
        self.marker.write_all_at(&json, 0).at(&self.path)
    }
}

impl Drop for StepGuard {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Markers in `inflight/` (not the dot names of markers being created).
fn markers(store: &Path) -> Result<Vec<PathBuf>> {
    let dir = store.join("inflight");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).at(&dir),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.at(&dir)?;
        if !entry.file_name().as_encoded_bytes().starts_with(b".") {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

/// Descriptions of steps other processes have open. Markers whose owner died are left for
/// [`dead_steps`] (the next open records them as interrupted).
pub(crate) fn live_steps(store: &Path, own: Option<&StepGuard>) -> Result<Vec<String>> {
    let mut live = Vec::new();
    for path in markers(store)? {
        if own.is_some_and(|g| g.path == path) {
            continue;
        }
        let Ok(mut file) = OpenOptions::new().read(true).open(&path) else {
            continue; // finished meanwhile
        };
        if rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared).is_err() {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            live.push(Begun::parse(&text, 0).describe());
        }
    }
    Ok(live)
}

/// A step whose owner died before committing: its marker (locked by us now) and begin record.
pub(crate) struct DeadStep {
    pub path: PathBuf,
    pub id: String,
    pub begun: Begun,
    _held: File,
}

/// Steps whose marker nobody holds: their owner died (or gave up after its command started).
pub(crate) fn dead_steps(store: &Path) -> Result<Vec<DeadStep>> {
    let mut dead = Vec::new();
    for path in markers(store)? {
        let Ok(mut file) = OpenOptions::new().read(true).open(&path) else {
            continue; // finished meanwhile
        };
        if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            continue; // alive
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let mtime_ms = file
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let id = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        dead.push(DeadStep {
            begun: Begun::parse(&text, mtime_ms),
            path,
            id,
            _held: file,
        });
    }
    Ok(dead)
}

/// Take gc's exclusive lock, or say which steps are open.
pub(crate) fn gc_exclusive(store: &Path) -> Result<Flock> {
    match Flock::try_exclusive(&store.join("gc.lock"))? {
        Some(l) => Ok(l),
        None => Err(StoreError::InFlight(live_steps(store, None)?.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, BorrowedFd};
    use std::os::unix::process::CommandExt;

    /// Another thread's child, forked but not yet exec'd, holds a copy of the lock's
    /// descriptor: the lock must still be free once its owner drops it.
    #[test]
    fn a_dropped_lock_is_free_while_a_forked_child_still_holds_its_descriptor() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("lock");
        let held = Flock::exclusive(&path).unwrap();
        let (ready_r, ready_w) = std::io::pipe().unwrap();
        let (go_r, mut go_w) = std::io::pipe().unwrap();
        let (ready_w, go_r) = (ready_w.as_raw_fd(), go_r.as_raw_fd());
        let mut child = std::process::Command::new("true");
        // SAFETY: between fork and exec the child only writes and reads one byte on pipes
        // it inherited (both async-signal-safe system calls).
        #[allow(unsafe_code)]
        unsafe {
            child.pre_exec(move || {
                let (ready, go) = (
                    BorrowedFd::borrow_raw(ready_w),
                    BorrowedFd::borrow_raw(go_r),
                );
                rustix::io::write(ready, b"r")?;
                rustix::io::read(go, &mut [0u8; 1])?;
                Ok(())
            });
        }
        // `spawn` waits for the exec, so it runs beside the test.
        let spawner = std::thread::spawn(move || child.status());
        std::io::Read::read_exact(&mut &ready_r, &mut [0u8; 1]).unwrap();

        drop(held);
        let free = Flock::try_exclusive(&path).unwrap().is_some();
        std::io::Write::write_all(&mut go_w, b"g").unwrap();
        assert!(spawner.join().unwrap().unwrap().success());
        assert!(
            free,
            "the lock stayed held by a child forked before its drop"
        );
    }
}
