//! What can go wrong around a cell (not inside it: the cell's own errors are its outcome).
//! The MCP answer shows it to the model, so each says what failed in its words.

use crate::failure::Failure;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExecuteError {
    /// The REPL could not start or run a session.
    #[error(transparent)]
    Repl(#[from] envgit_repl::ReplError),
    #[error("there are already {max} sessions ({names}): reuse one of them")]
    TooManySessions { max: usize, names: String },
    /// A thread panicked while it held the recorder.
    #[error("the recorder is poisoned")]
    RecorderPoisoned,
    #[error(transparent)]
    Store(#[from] envgit_store::StoreError),
    /// Opening or committing the step failed (its message says why and what to do).
    #[error("{0}")]
    Step(String),
    /// A task running the cell or the recording panicked or was cancelled.
    #[error("the {what}'s task failed: {source}")]
    Task {
        what: &'static str,
        source: tokio::task::JoinError,
    },
    /// Neither a running cell nor a reason it could not start (should not happen; said
    /// rather than answered with an empty error).
    #[error("the cell did not start")]
    NotStarted,
}

impl From<Failure> for ExecuteError {
    fn from(f: Failure) -> Self {
        ExecuteError::Step(f.message)
    }
}

impl ExecuteError {
    pub(crate) fn task(what: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Self {
        move |source| ExecuteError::Task { what, source }
    }
}
