//! envgit refuses to supervise a project that holds its own executable. A project-local install
//! (`npm install agent-envgit` puts it under `node_modules/`) is writable by the agent envgit
//! runs there: one step could replace the binary, and the next `envgit run` (or the Copilot hook
//! envgit installed) would run the agent's code on the host, outside every sandbox.

use std::path::{Path, PathBuf};

use crate::failure::{CmdResult, Failure};

/// The running executable, symlinks resolved (`/proc/self/exe`).
fn own_exe() -> CmdResult<PathBuf> {
    std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| {
            Failure::failed(format!(
                "cannot tell where envgit's own executable is ({e}), so cannot check that it lies \
                 outside the project: run envgit where /proc is mounted"
            ))
        })
}

/// Refuses (exit 2) when envgit's executable lies inside `root`, naming both and the fix.
/// `root` is the project's canonical root directory.
pub fn refuse_inside(root: &Path) -> CmdResult<()> {
    let exe = own_exe()?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if !exe.starts_with(&root) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "envgit's own executable {} is inside the project {}, where the agent can rewrite it: \
         install it outside the project (`npm install -g agent-envgit`; docs/install.md has the \
         other ways), remove the project's copy (`npm uninstall agent-envgit`) and run the \
         installed one",
        exe.display(),
        root.display()
    )))
}
