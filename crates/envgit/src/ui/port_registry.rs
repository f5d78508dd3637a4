//! Where a running `envgit ui` says which port it serves: a file named by the port in
//! `$ENVGIT_HOME/rt-UID/ui-ports/`, which every run's gate checks on each connection to this
//! machine and refuses (rule `ui.port`) whatever `network.allow` says. The directory is under
//! envgit's own state, which the sandbox never sees.

use std::path::PathBuf;

use crate::failure::{CmdResult, Failure};
use crate::runtime::{private_dir, runtime_dir};

/// The registry directory (created, mode 0700).
pub(crate) fn dir() -> CmdResult<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = runtime_dir(uid)?.join("ui-ports");
    private_dir(&dir)?;
    Ok(dir)
}

/// A port registered for as long as this value lives. A UI killed without unwinding leaves
/// its file behind: that port stays refused to sandboxes (fail closed) until the file goes.
pub(crate) struct Registration {
    path: PathBuf,
}

impl Registration {
    pub(crate) fn new(port: u16) -> CmdResult<Registration> {
        let path = dir()?.join(port.to_string());
        std::fs::write(&path, format!("{}\n", std::process::id())).map_err(|e| {
            Failure::failed(format!(
                "cannot register the UI's port in {}: {e} (the sandbox must be refused it)",
                path.display()
            ))
        })?;
        Ok(Registration { path })
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
