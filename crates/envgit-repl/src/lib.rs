//! The code-mode JavaScript REPL behind `envgit mcp`.
//!
//! One [`Session`] is one QuickJS-ng runtime and context living on its own OS thread (QuickJS
//! objects never leave it). Cells are evaluated as global code with top-level await, so
//! declarations persist between cells and the value of the last expression is the result.
//!
//! The context has no ambient I/O: no `require`, `fetch`, `process`, timers, `performance`, nor
//! module loader. What it has is `console`, the helpers `sample`, `schema`, `assert`, a seeded
//! `Math.random`, a clock whose readings are journaled, and the downstream tools of the
//! [`Catalog`] as `server.tool(args)` async functions that call the [`Host`], which decides.
//!
//! Each cell is bounded: a wall-clock deadline (an interrupt handler stops running JavaScript,
//! a timer stops waiting on host calls), a memory limit, a stack limit and an output cap. A cell
//! that fails leaves the session usable. Every cell's code, host calls with their replies, and
//! clock readings go to a [`Journal`], from which [`Session::replay`] rebuilds the state.

mod catalog;
mod journal;
mod worker;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

pub use catalog::{
    Catalog, Namespace, TAKEN_GLOBALS, ToolEntry, is_identifier, sanitize_identifier,
};
pub use journal::{Journal, JournalCall, JournalCell};

/// Resource limits of a session and the defaults of its cells.
#[derive(Clone, Debug)]
pub struct Limits {
    /// JS heap limit in bytes.
    pub memory: usize,
    /// JS stack limit in bytes.
    pub stack: usize,
    /// Default wall-clock budget of one cell.
    pub timeout: Duration,
    /// Upper bound a caller may ask for.
    pub max_timeout: Duration,
    /// Characters of output (console + value) returned; the rest is cut with a marker.
    pub output_chars: usize,
    /// Largest accepted cell, in bytes.
    pub code_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 256 << 20,
            stack: 1 << 20,
            timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(120),
            output_chars: 20_000,
            code_bytes: 100_000,
        }
    }
}

/// A downstream call made by a cell: `server.tool(args)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCall {
    pub server: String,
    pub tool: String,
    pub args: serde_json::Value,
}

/// The host's answer: a value for the promise, or a message the promise rejects with
/// (as a `ToolError`).
pub type HostReply = Result<serde_json::Value, String>;

pub type HostFuture = Pin<Box<dyn Future<Output = HostReply> + Send>>;

/// Who answers a cell's downstream calls: the MCP side (policy, downstream servers, recorder) or,
/// during replay, the journal.
pub trait Host: Send + Sync + 'static {
    fn call(&self, call: HostCall) -> HostFuture;
}

/// A host with no tools: every call is refused.
pub struct NoHost;

impl Host for NoHost {
    fn call(&self, call: HostCall) -> HostFuture {
        Box::pin(async move {
            Err(format!(
                "no tool {}.{} in this session",
                call.server, call.tool
            ))
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellStatus {
    Ok,
    /// The code threw (or a promise it awaited rejected), or did not parse.
    Error,
    /// The wall-clock budget ran out.
    Timeout,
    /// The memory limit was hit.
    Oom,
    /// [`Session::interrupt`] stopped it.
    Cancelled,
}

impl CellStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::Oom => "oom",
            Self::Cancelled => "cancelled",
        }
    }
}

/// What one cell did.
#[derive(Clone, Debug)]
pub struct CellOutcome {
    pub status: CellStatus,
    /// Console output and then the rendered value, cut at the output cap.
    pub text: String,
    /// The rendered value of the last expression (`None` for `undefined` or a failure).
    pub value: Option<String>,
    /// The readable failure, for a status other than `ok`.
    pub error: Option<String>,
    /// Characters cut from `text` by the output cap.
    pub truncated_chars: usize,
    /// Sum of the JSON sizes of the host replies the cell received.
    pub bytes_in: u64,
    pub calls: usize,
    pub elapsed: Duration,
    /// The cell was a body with a top-level `return`, run as a function: its declarations did
    /// not persist.
    pub wrapped: bool,
    /// A note for the model (for example that the session was rebuilt).
    pub notice: Option<String>,
    /// After the cell the heap stayed above 80 % of its limit (the session then rebuilds).
    pub heap_full: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplError {
    #[error("the JavaScript engine failed to start: {0}")]
    Engine(String),
    #[error("the REPL session ended (its worker thread stopped); start a new session")]
    Gone,
    #[error("a session needs a tokio runtime to run host calls on")]
    NoRuntime,
    #[error("the cell is {got} bytes, over the limit of {limit}; split it")]
    TooLarge { got: usize, limit: usize },
    #[error("replay diverged at cell {cell}: {reason}")]
    Diverged { cell: usize, reason: String },
}

/// Options of one cell.
#[derive(Clone, Debug, Default)]
pub struct CellOptions {
    /// Wall-clock budget; clamped to `Limits::max_timeout`, `Limits::timeout` when `None`.
    pub timeout: Option<Duration>,
}

pub(crate) enum Msg {
    Exec {
        code: String,
        timeout: Duration,
        host: Arc<dyn Host>,
        replay_clock: Option<Vec<f64>>,
        reply: oneshot::Sender<(CellOutcome, JournalCell)>,
    },
}

async fn start_worker(
    catalog: &Catalog,
    limits: &Limits,
    seed: u32,
    cancel: &Arc<AtomicBool>,
) -> Result<mpsc::UnboundedSender<Msg>, ReplError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| ReplError::NoRuntime)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = oneshot::channel();
    worker::spawn(worker::Setup {
        catalog_json: catalog.to_json(),
        seed,
        limits: limits.clone(),
        cancel: cancel.clone(),
        handle,
        rx,
        ready: ready_tx,
    })?;
    ready_rx.await.map_err(|_| ReplError::Gone)??;
    Ok(tx)
}

/// A live REPL session. Dropping it stops its worker thread.
pub struct Session {
    tx: std::sync::Mutex<mpsc::UnboundedSender<Msg>>,
    cancel: Arc<AtomicBool>,
    limits: Limits,
    journal: std::sync::Mutex<Journal>,
}

impl Session {
    /// Start a session: a fresh runtime and context with the catalog's tools injected.
    /// Must be called within a tokio runtime: host calls run on it.
    pub async fn new(catalog: &Catalog, limits: Limits, seed: u32) -> Result<Self, ReplError> {
        Self::start(catalog, limits, seed, Arc::new(AtomicBool::new(false))).await
    }

    async fn start(
        catalog: &Catalog,
        limits: Limits,
        seed: u32,
        cancel: Arc<AtomicBool>,
    ) -> Result<Self, ReplError> {
        let tx = start_worker(catalog, &limits, seed, &cancel).await?;
        Ok(Session {
            tx: std::sync::Mutex::new(tx),
            cancel,
            limits,
            journal: std::sync::Mutex::new(Journal {
                seed,
                catalog: catalog.clone(),
                cells: Vec::new(),
            }),
        })
    }

    /// Run one cell. Cells of a session run one after the other.
    pub async fn execute(
        &self,
        code: &str,
        opts: &CellOptions,
        host: Arc<dyn Host>,
    ) -> Result<CellOutcome, ReplError> {
        let (mut outcome, cell) = self.exec_raw(code, opts, host, None).await?;
        if let Ok(mut j) = self.journal.lock() {
            j.cells.push(cell);
        }
        if outcome.heap_full {
            // The failed cell left the heap full (a top-level binding holds what it built):
            // rebuild the session from its journal, without that cell.
            let journal = self.journal();
            let rebuilt =
                Session::replay_into(&journal, self.limits.clone(), self.cancel.clone()).await;
            let note = match rebuilt {
                Ok(fresh) => {
                    let tx = fresh.sender()?;
                    if let Ok(mut t) = self.tx.lock() {
                        *t = tx;
                    }
                    format!(
                        "; the session was rebuilt by replaying its {} earlier successful cell(s) \
                         (downstream results from the journal, nothing sent again), so \
                         what this cell declared is gone",
                        journal
                            .cells
                            .iter()
                            .filter(|c| c.status == CellStatus::Ok)
                            .count()
                    )
                }
                Err(e) => format!("; rebuilding it failed ({e}): start a new session"),
            };
            let mut n = outcome.notice.take().unwrap_or_default();
            n.push_str(&note);
            outcome.notice = Some(n);
        }
        Ok(outcome)
    }

    fn sender(&self) -> Result<mpsc::UnboundedSender<Msg>, ReplError> {
        self.tx
            .lock()
            .map(|t| t.clone())
            .map_err(|_| ReplError::Gone)
    }

    async fn exec_raw(
        &self,
        code: &str,
        opts: &CellOptions,
        host: Arc<dyn Host>,
        replay_clock: Option<Vec<f64>>,
    ) -> Result<(CellOutcome, JournalCell), ReplError> {
        if code.len() > self.limits.code_bytes {
            return Err(ReplError::TooLarge {
                got: code.len(),
                limit: self.limits.code_bytes,
            });
        }
        let timeout = opts
            .timeout
            .unwrap_or(self.limits.timeout)
            .min(self.limits.max_timeout)
            .max(Duration::from_millis(1));
        self.cancel.store(false, Ordering::SeqCst);
        let (reply, rx) = oneshot::channel();
        self.sender()?
            .send(Msg::Exec {
                code: code.to_string(),
                timeout,
                host,
                replay_clock,
                reply,
            })
            .map_err(|_| ReplError::Gone)?;
        rx.await.map_err(|_| ReplError::Gone)
    }

    /// Stop the running cell (it fails with status `cancelled`); the session stays usable.
    pub fn interrupt(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// The journal so far: enough to rebuild this session with [`Session::replay`].
    pub fn journal(&self) -> Journal {
        match self.journal.lock() {
            Ok(j) => j.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Cells in the journal so far.
    pub fn journal_len(&self) -> usize {
        match self.journal.lock() {
            Ok(j) => j.cells.len(),
            Err(p) => p.into_inner().cells.len(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Rebuild a session from a journal: a fresh context with the same seed and catalog, every
    /// cell that succeeded run again with host calls and clock readings answered from the
    /// journal (nothing is sent downstream). Failed cells are skipped. Stops with
    /// [`ReplError::Diverged`] at the first cell that does not do what it did.
    pub async fn replay(journal: &Journal, limits: Limits) -> Result<Self, ReplError> {
        Self::replay_into(journal, limits, Arc::new(AtomicBool::new(false))).await
    }

    async fn replay_into(
        journal: &Journal,
        limits: Limits,
        cancel: Arc<AtomicBool>,
    ) -> Result<Self, ReplError> {
        let session = Session::start(&journal.catalog, limits, journal.seed, cancel).await?;
        for (i, cell) in journal.cells.iter().enumerate() {
            if cell.status != CellStatus::Ok {
                continue;
            }
            let host = Arc::new(journal::JournalHost::new(cell.calls.clone()));
            let opts = CellOptions::default();
            let (outcome, mut replayed) = session
                .exec_raw(&cell.code, &opts, host.clone(), Some(cell.clock.clone()))
                .await?;
            if let Some(reason) = host.divergence() {
                return Err(ReplError::Diverged {
                    cell: i + 1,
                    reason,
                });
            }
            if outcome.status != CellStatus::Ok {
                return Err(ReplError::Diverged {
                    cell: i + 1,
                    reason: format!(
                        "it succeeded when recorded and now ends with {}: {}",
                        outcome.status.as_str(),
                        outcome.error.unwrap_or_default()
                    ),
                });
            }
            replayed.calls = cell.calls.clone();
            if let Ok(mut j) = session.journal.lock() {
                j.cells.push(replayed);
            }
        }
        Ok(session)
    }
}
