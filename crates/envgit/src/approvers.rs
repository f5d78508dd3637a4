//! Who can answer an `ask` in a sandboxed run, and how they learn of it: the person at envgit's
//! own terminal (the question printed there, the next key answers: `terminal.rs`), or anyone of
//! the same user at another terminal (`envgit status`, `envgit approve ID`). Both answer over
//! the gate's control socket, so the gate records who answered from the connection. The MCP
//! REPL's approver (an MCP client's form) is `mcp/approver.rs`; all three are
//! [`envgit_gate::Approver`]s, asked with an [`envgit_gate::PendingAsk`] and ending in an
//! [`envgit_gate::Answer`].

use std::path::Path;

use envgit_gate::{ApprovalConfig, Approver, AskFuture, PendingAsk, answered_over_control};

use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::Project;
use crate::runtime::{CONTROL_SOCKET, random_token};
use crate::terminal::PtyRelay;

/// No terminal of envgit's own (pipes, as under an agent): a note on stderr names the
/// commands that answer from another terminal.
struct AnotherTerminal {
    /// Seconds the request is held.
    timeout: u64,
}

impl Approver for AnotherTerminal {
    fn ask<'a>(&'a self, ask: &'a PendingAsk) -> AskFuture<'a> {
        output::warn(&format!(
            "holding {} {}{} (rule {}): {}\n  answer within {} s: `envgit approve {}` or `envgit deny {}` from another terminal",
            ask.method, ask.host, ask.path, ask.rule, ask.summary, self.timeout, ask.id, ask.id
        ));
        answered_over_control()
    }
}

/// Who can answer an `ask`: the person at envgit's own terminal when `approvers.terminal` and
/// envgit runs on one (through the pty relay), and `envgit approve/deny` over the control
/// socket when `approvers.socket` (the relay answers through that socket too). With neither,
/// an `ask` is refused at once.
pub(crate) fn approval_config(
    project: &Project,
    gate_dir: &Path,
    pty: Option<&PtyRelay>,
) -> CmdResult<Option<ApprovalConfig>> {
    let approvers = &project.policy.approvers;
    if !approvers.socket && pty.is_none() {
        return Ok(None);
    }
    // The control token, readable by this user only, beside the socket; clients read it
    // from there (the sandbox sees neither).
    let control_token = random_token()?;
    let token_file = gate_dir.join(envgit_gate::CONTROL_TOKEN_FILE);
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_file)
            .and_then(|mut f| f.write_all(control_token.as_bytes()))
            .map_err(|e| Failure::failed(format!("{}: {e}", token_file.display())))?;
    }
    let timeout = approvers.timeout;
    let approver: Box<dyn Approver> = match pty {
        Some(pty) => Box::new(pty.prompt()),
        None => Box::new(AnotherTerminal { timeout }),
    };
    Ok(Some(ApprovalConfig {
        control_socket: gate_dir.join(CONTROL_SOCKET),
        control_token,
        timeout: std::time::Duration::from_secs(timeout),
        label: project.root.display().to_string(),
        approver: Some(approver),
    }))
}
