//! Why the host will not turn a process Codex asked for into a step; the text is the
//! JSON-RPC error Codex shows.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StepCommandError {
    #[error(
        "envgit: the working directory {} is outside the project {}",
        cwd.display(),
        project.display()
    )]
    CwdOutsideProject { cwd: PathBuf, project: PathBuf },
}
