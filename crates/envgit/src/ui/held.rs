//! Requests held by `ask` rules in this project's running steps, and the page's answers to
//! them, through the same control channel as `envgit approve` (the gate checks the peer and
//! the token, obeys `approvers:`, and records who answered). A held request is named by its
//! run, its id and when it was asked, so a button never answers a different request.

use envgit_gate::{ControlOp, PendingAsk, control_request_via};

use crate::commands::approve::{Waiting, waiting_in};

/// The channel the gate records beside the user (`… from the web page (envgit ui)`).
const VIA: &str = "web page";

/// Why the page's answer did not reach a held request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    #[error(
        "request #{id} is no longer waiting (answered elsewhere, timed out, or its step ended)"
    )]
    NoLongerWaiting { id: u64 },
    #[error("cannot reach the running step: {0}")]
    Unreachable(#[source] std::io::Error),
    /// The gate's own refusal (a wrong token, `approvers:` not naming this user, …).
    #[error("{0}")]
    Refused(String),
}

/// Every request held in a running step of `project` (its root as the gate labels it).
pub(crate) fn list(project: &str) -> Vec<Waiting> {
    waiting_in(Some(project)).unwrap_or_default()
}

/// Answers the request `run`/`id` asked at `asked_at_ms`, if it is still held; the error says
/// what happened otherwise.
pub(crate) fn answer(
    project: &str,
    run: &str,
    id: u64,
    asked_at_ms: u64,
    approve: bool,
) -> Result<PendingAsk, AnswerError> {
    let Some(held) = list(project)
        .into_iter()
        .find(|w| w.run == run && w.ask.id == id && w.ask.asked_at_ms == asked_at_ms)
    else {
        return Err(AnswerError::NoLongerWaiting { id });
    };
    let op = if approve {
        ControlOp::Approve { id: Some(id) }
    } else {
        ControlOp::Deny { id: Some(id) }
    };
    let answer =
        control_request_via(&held.socket, op, Some(VIA)).map_err(AnswerError::Unreachable)?;
    if let Some(e) = answer.error {
        return Err(AnswerError::Refused(e));
    }
    Ok(answer.answered.unwrap_or(held.ask))
}
