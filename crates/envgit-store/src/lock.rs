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

pub struct Flock {
    _file: File,
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
        let file = Self::open(path)?;
        rustix::fs::flock(&file, FlockOperation::LockExclusive).at(path)?;
        Ok(Self { _file: file })
    }

    pub fn shared(path: &Path) -> Result<Self> {
        let file = Self::open(path)?;
        rustix::fs::flock(&file, FlockOperation::LockShared).at(path)?;
        Ok(Self { _file: file })
    }

    /// `None` when someone else holds it.
    pub fn try_exclusive(path: &Path) -> Result<Option<Self>> {
        let file = Self::open(path)?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(Self { _file: file })),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e).at(path),
        }
    }
}

/// An open step. Dropping it closes the step (whether or not it was committed).
pub struct StepGuard {
    path: PathBuf,
    _marker: Flock,
    _gc: Flock,
    head_at_begin: Option<u64>,
}

impl StepGuard {
    pub(crate) fn begin(store: &Path, what: &str, head: Option<u64>) -> Result<Self> {
        let gc = Flock::shared(&store.join("gc.lock"))?;
        let path = store
            .join("inflight")
            .join(format!("{:016x}", random_u64()));
        let mut file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .at(&path)?;
        rustix::fs::flock(&file, FlockOperation::LockExclusive).at(&path)?;
        // Best effort: the description only serves messages.
        let _ = write!(file, "pid {}: {what}", std::process::id());
        Ok(Self {
            path,
            _marker: Flock { _file: file },
            _gc: gc,
            head_at_begin: head,
        })
    }

    pub fn head_at_begin(&self) -> Option<u64> {
        self.head_at_begin
    }

    /// The owner committed step `number`: a further step under the same guard (a rewind
    /// after the state it records first) is not overlapped by it.
    pub(crate) fn committed(&mut self, number: u64) {
        self.head_at_begin = Some(number);
    }
}

impl Drop for StepGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Descriptions of steps other processes have open; removes markers whose owner died.
pub(crate) fn live_steps(store: &Path, own: Option<&StepGuard>) -> Result<Vec<String>> {
    let dir = store.join("inflight");
    let mut live = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(live),
        Err(e) => return Err(e).at(&dir),
    };
    for entry in entries {
        let path = entry.at(&dir)?.path();
        if own.is_some_and(|g| g.path == path) {
            continue;
        }
        let Ok(mut file) = OpenOptions::new().read(true).open(&path) else {
            continue; // finished meanwhile
        };
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
            }
            Err(_) => {
                let mut what = String::new();
                let _ = file.read_to_string(&mut what);
                live.push(what);
            }
        }
    }
    Ok(live)
}

/// Take gc's exclusive lock, or say which steps are open.
pub(crate) fn gc_exclusive(store: &Path) -> Result<Flock> {
    match Flock::try_exclusive(&store.join("gc.lock"))? {
        Some(l) => Ok(l),
        None => Err(StoreError::InFlight(live_steps(store, None)?.join(", "))),
    }
}
