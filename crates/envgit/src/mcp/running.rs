//! One `execute` in flight, from its step opened to its step committed; parked between the
//! two while a 2026-07-28 client is asked a question.

use std::sync::{Arc, Mutex};

use envgit_repl::CellOutcome;
use envgit_store::{Approval, ReplCall};
use tokio::sync::mpsc;

use super::approver::Parked;
use super::error::ExecuteError;
use super::session::Live;

/// One `execute` in flight: its open step, the cell's task, what it logged.
pub(super) struct Running {
    pub(super) session_name: String,
    pub(super) code: String,
    pub(super) started: u64,
    pub(super) step: crate::step::OpenStep,
    pub(super) log: Arc<Mutex<Vec<ReplCall>>>,
    pub(super) approvals: Arc<Mutex<Vec<Approval>>>,
    pub(super) rewound: Option<String>,
    pub(super) task: Option<tokio::task::JoinHandle<Result<CellOutcome, ExecuteError>>>,
    /// Why the cell could not start.
    pub(super) early: Option<ExecuteError>,
    pub(super) asks: mpsc::UnboundedReceiver<Parked>,
    pub(super) session: Option<Arc<Live>>,
    /// The session's turn, from before the cell starts until the step is committed.
    pub(super) turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// The cell's number (for [`Live::interrupt`]).
    pub(super) cell: u64,
    /// The question the parked cell waits on.
    pub(super) pending: Option<Parked>,
    pub(super) client: String,
}
