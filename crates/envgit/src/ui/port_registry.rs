//! Where a running `envgit ui` says which port it serves: a file named by the port in
//! `$ENVGIT_HOME/rt-UID/ui-ports/`, which every run's gate checks on each connection to this
//! machine and refuses (rule `ui.port`) whatever `network.allow` says. The directory is under
//! envgit's own state, which the sandbox never sees.
//!
//! The UI holds an exclusive flock on its entry for as long as it lives, so a UI killed
//! without unwinding (SIGKILL) leaves a stale entry that refuses nothing
//! (`envgit_gate::reserved_port_entry_is_live` says which entries count); the next `envgit ui`
//! removes stale entries. Registering and removing happen under the directory's own lock, so
//! a cleaner never removes an entry registered while it looked.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::failure::{CmdResult, Failure};
use crate::runtime::{private_dir, runtime_dir};

/// The lock registering and cleaning take (a dot name: never taken for a port).
const DIR_LOCK: &str = ".lock";

/// The registry directory (created, mode 0700).
pub(crate) fn dir() -> CmdResult<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = runtime_dir(uid)?.join("ui-ports");
    private_dir(&dir)?;
    Ok(dir)
}

/// A port registered for as long as this value lives (its file stays locked meanwhile).
pub(crate) struct Registration {
    path: PathBuf,
    _held: File,
}

impl Registration {
    pub(crate) fn new(port: u16) -> CmdResult<Registration> {
        let dir = dir()?;
        let fail = |what: &Path, e: std::io::Error| {
            Failure::failed(format!(
                "cannot register the UI's port in {}: {e} (the sandbox must be refused it)",
                what.display()
            ))
        };
        let _dir_lock = lock_dir(&dir).map_err(|e| fail(&dir, e))?;
        remove_stale(&dir);
        // Written and locked under a name no gate looks at, then renamed into place: the
        // entry is never seen unlocked.
        let tmp = dir.join(format!(".{port}.{}.tmp", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| fail(&tmp, e))?;
        rustix::fs::flock(&file, FlockOperation::LockExclusive)
            .map_err(|e| fail(&tmp, e.into()))?;
        let path = dir.join(port.to_string());
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                fail(&path, e)
            })?;
        Ok(Registration { path, _held: file })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The directory's lock, held until the file closes.
fn lock_dir(dir: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join(DIR_LOCK))?;
    rustix::fs::flock(&file, FlockOperation::LockExclusive)?;
    Ok(file)
}

/// Removes entries whose UI is gone, and files a registration left half-made (the caller holds
/// the directory's lock, so no registration is under way). Best effort: an entry left behind
/// only keeps refusing its port.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let half_made = name.starts_with('.') && name.ends_with(".tmp");
        let stale =
            name.parse::<u16>().is_ok() && !envgit_gate::reserved_port_entry_is_live(&entry.path());
        if half_made || stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
