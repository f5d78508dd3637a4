//! What can stop the sandbox process before the command starts. Each step returns its own
//! error; this one gathers them, and is rendered once, as text on envgit's error pipe (the
//! only channel out of a forked child), where envgit shows it as the step's failure.

use std::io;
use std::path::PathBuf;

use crate::console::ConsoleError;
use crate::landlock_rules::LandlockError;
use crate::limits::LimitError;
use crate::mounts::MountError;
use crate::seccomp::SeccompError;
use crate::spec::RootBase;
use crate::userns::UsernsError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error("reading the sandbox spec: {0}")]
    ReadSpec(#[source] io::Error),
    #[error("bad sandbox spec: {0}")]
    BadSpec(#[source] serde_json::Error),
    /// A call of the sandbox process's own; `what` names it (`fork`, `setsid`, …).
    #[error("{what}: {source}")]
    Call {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// The ids the zygote entered its namespaces with early are not the spec's (envgit decided
    /// who the command runs as twice, differently): nothing runs.
    #[error(
        "the sandbox's user namespace was made for uid/gid {}:{} but the command runs as {}:{} \
         (an envgit bug; run the step again)",
        early.0,
        early.1,
        spec.0,
        spec.1
    )]
    EarlyIds { early: (u32, u32), spec: (u32, u32) },
    /// The root's base was built early for another view than the spec's: nothing runs.
    #[error(
        "the sandbox's root was begun early as {early:?} but the spec builds {spec:?} (an \
         envgit bug; run the step again)"
    )]
    EarlyBase {
        early: Box<RootBase>,
        spec: Box<RootBase>,
    },
    #[error("the network relay failed to start")]
    RelayNotStarted,
    #[error("bad relay pid")]
    RelayPid,
    #[error("dropping capability {cap}: {source}")]
    DropCapability {
        cap: u32,
        #[source]
        source: io::Error,
    },
    #[error("capabilities are left after dropping them")]
    CapabilitiesLeft,
    #[error("empty command")]
    EmptyCommand,
    #[error("cd {}: {source}", dir.display())]
    Cwd {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error(transparent)]
    Userns(#[from] UsernsError),
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error(transparent)]
    Console(#[from] ConsoleError),
    #[error(transparent)]
    Landlock(#[from] LandlockError),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
}

/// `map_err` for a call that fails with an errno: names the call in the error.
pub(crate) fn call<E: Into<io::Error>>(what: &'static str) -> impl FnOnce(E) -> SetupError {
    move |e| SetupError::Call {
        what,
        source: e.into(),
    }
}
