//! What can go wrong in `envgit mcp`: around a cell (not inside it: the cell's own errors are
//! its outcome; the MCP answer shows these to the model, so each says what failed in its
//! words), in an `execute`'s arguments, and in starting the downstream servers and the bridge
//! to a remote one (shown to the person, naming the `envgit.yaml` entry).

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

/// Why a downstream server of `mcp.servers` could not be started. Each names the server as its
/// key in `envgit.yaml` (`mcp.servers.NAME`), so the person knows which entry to fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DownstreamError {
    #[error(
        "mcp.servers.{name}: a server name must be a JavaScript identifier that is not a \
         built-in global (letters, digits, `_`; not {taken}): rename it"
    )]
    BadName { name: String, taken: String },
    #[error("mcp.servers.{name}: {source}")]
    Feed { name: String, source: FeedError },
    #[error("mcp.servers.{name}: `{command}` did not answer within {secs} s")]
    StartTimeout {
        name: String,
        command: String,
        secs: u64,
    },
    #[error("cannot find envgit's own binary: {0}")]
    OwnBinary(std::io::Error),
    #[error("mcp.servers.{name}: cannot start the sandbox for `{command}`: {source}")]
    Spawn {
        name: String,
        command: String,
        source: std::io::Error,
    },
    #[error(
        "mcp.servers.{name}: {url} could not be reached from the sandbox (the gate's and the \
         bridge's messages are above): {source}"
    )]
    Unreachable {
        name: String,
        url: String,
        source: Box<rmcp::service::ClientInitializeError>,
    },
    #[error(
        "mcp.servers.{name}: `{command}` did not speak MCP on stdin/stdout in the sandbox (its \
         messages are above): {source}"
    )]
    NotMcp {
        name: String,
        command: String,
        source: Box<rmcp::service::ClientInitializeError>,
    },
    #[error("mcp.servers.{name}: listing its tools failed: {source}")]
    ListTools {
        name: String,
        source: rmcp::service::ServiceError,
    },
    #[error("mcp.servers.{name}: tools `{other}` and `{wire}` both become `{js}` in JavaScript")]
    ToolClash {
        name: String,
        other: String,
        wire: String,
        js: String,
    },
}

/// Why the socket a downstream server's gate reports its requests on could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FeedError {
    /// envgit's private runtime directory (its message names the path and what to do).
    #[error("{0}")]
    RuntimeDir(String),
    #[error("{path}: {source}")]
    Bind {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Why `envgit mcp-bridge` could not serve a remote MCP server on stdin/stdout.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BridgeError {
    #[error("cannot reach the MCP server at {url}: {source}")]
    Unreachable {
        url: String,
        source: Box<rmcp::service::ClientInitializeError>,
    },
    #[error("MCP handshake on stdin/stdout failed: {0}")]
    Handshake(Box<rmcp::service::ServerInitializeError>),
}

/// A call of `execute` with arguments it does not take; the model reads the message and
/// retries.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ArgsError {
    #[error("unknown argument `{0}`; execute takes code, session, timeout_ms")]
    Unknown(String),
    #[error("`code` must be a string of JavaScript")]
    CodeNotText,
    #[error("`code` is required: the JavaScript to run")]
    CodeMissing,
    #[error("`session` must be a name of 1-64 letters, digits, `-` or `_`")]
    BadSession,
    #[error("`timeout_ms` must be a positive integer (milliseconds)")]
    BadTimeout,
}
