//! Requests held by `ask` rules in this project's running steps, and the page's answers to
//! them, through the same control channel as `envgit approve` (the gate checks the peer and
//! the token, obeys `approvers:`, and records who answered). A held request is named by its
//! run, its id and when it was asked, so a button never answers a different request.

use std::path::PathBuf;

use envgit_gate::{ControlOp, PendingAsk, control_request, control_request_via};
use serde::Serialize;

use crate::runtime::{CONTROL_SOCKET, runtime_dir};

/// The channel the gate records beside the user (`… from the web page (envgit ui)`).
const VIA: &str = "web page";

#[derive(Serialize, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The run's private directory name: which gate holds it.
    run: String,
    #[serde(flatten)]
    ask: PendingAsk,
    #[serde(skip)]
    socket: PathBuf,
}

/// Every request held in a running step of `project` (its root as the gate labels it).
pub(crate) fn list(project: &str) -> Vec<Held> {
    let uid = rustix::process::getuid().as_raw();
    let Ok(runtime) = runtime_dir(uid) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&runtime) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let socket = entry.path().join(CONTROL_SOCKET);
        // A socket left by a run that died refuses the connection: nothing is held there.
        let Ok(answer) = control_request(&socket, ControlOp::List) else {
            continue;
        };
        if answer.project.as_deref() != Some(project) {
            continue;
        }
        for ask in answer.pending.unwrap_or_default() {
            out.push(Held {
                run: entry.file_name().to_string_lossy().into_owned(),
                ask,
                socket: socket.clone(),
            });
        }
    }
    out.sort_by_key(|h| (h.ask.asked_at_ms, h.ask.id));
    out
}

/// Answers the request `run`/`id` asked at `asked_at_ms`, if it is still held; the error says
/// what happened otherwise.
pub(crate) fn answer(
    project: &str,
    run: &str,
    id: u64,
    asked_at_ms: u64,
    approve: bool,
) -> Result<PendingAsk, String> {
    let Some(held) = list(project)
        .into_iter()
        .find(|h| h.run == run && h.ask.id == id && h.ask.asked_at_ms == asked_at_ms)
    else {
        return Err(format!(
            "request #{id} is no longer waiting (answered elsewhere, timed out, or its step ended)"
        ));
    };
    let op = if approve {
        ControlOp::Approve { id: Some(id) }
    } else {
        ControlOp::Deny { id: Some(id) }
    };
    let answer = control_request_via(&held.socket, op, Some(VIA))
        .map_err(|e| format!("cannot reach the running step: {e}"))?;
    if let Some(e) = answer.error {
        return Err(e);
    }
    Ok(answer.answered.unwrap_or(held.ask))
}
