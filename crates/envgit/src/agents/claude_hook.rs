//! `envgit hook claude EVENT`: Claude Code's hooks, run inside `envgit claude`'s sandbox.
//! They only tell the supervisor (over a socket inside the sandbox) where a tool call starts
//! and ends (`tool_steps.rs`): a hint for attribution, never a permission.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};

use super::tool_call::refusal_of;
use crate::cli::HookEvent;
use crate::project::{Project, start_dir};

/// Set inside `envgit claude`'s sandbox: where the supervisor answers hooks.
pub(crate) const HOOKS_SOCKET_ENV: &str = "ENVGIT_HOOKS_SOCKET";

/// Claude Code's hooks, run inside `envgit claude`'s sandbox: each tells the supervisor where
/// a tool call starts or ends (see `tool_steps.rs`). A refused PreToolUse exits 2 with the
/// reason on stderr, which Claude shows the model; a PreToolUse that cannot reach the
/// supervisor refuses too (fail closed). Without the socket, PreToolUse only judges.
pub(super) fn run(dir: Option<&Path>, event: &HookEvent) -> ExitCode {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let payload: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
    let pre = matches!(event, HookEvent::Pre);
    let Some(socket) = std::env::var_os(HOOKS_SOCKET_ENV).filter(|s| !s.is_empty()) else {
        return if pre {
            claude_pre(dir, &payload)
        } else {
            ExitCode::SUCCESS
        };
    };
    let name = match event {
        HookEvent::Pre => "pre",
        HookEvent::Post => "post",
        HookEvent::PostFailure => "post_failure",
        HookEvent::Stop => "stop",
    };
    let refused = |reason: &str| {
        eprintln!("{reason}");
        if pre {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    };
    match ask_supervisor(
        Path::new(&socket),
        &json!({"event": name, "payload": payload}),
    ) {
        Ok(reply) if reply["allow"] == true => ExitCode::SUCCESS,
        Ok(reply) => refused(reply["reason"].as_str().unwrap_or("envgit: refused")),
        Err(e) => refused(&format!(
            "envgit: cannot reach envgit's supervisor ({e}); the call is refused"
        )),
    }
}

fn ask_supervisor(socket: &Path, message: &Value) -> std::io::Result<Value> {
    use std::io::{BufRead, Write};
    let stream = std::os::unix::net::UnixStream::connect(socket)?;
    // Committing a step takes milliseconds; a minute means the supervisor is stuck.
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60)))?;
    writeln!(&stream, "{message}")?;
    let mut line = String::new();
    std::io::BufReader::new(&stream).read_line(&mut line)?;
    serde_json::from_str(&line).map_err(std::io::Error::other)
}

/// Claude Code's PreToolUse without a supervisor to ask (the store is not visible inside, so
/// it only judges).
fn claude_pre(dir: Option<&Path>, payload: &Value) -> ExitCode {
    let cwd = match payload.get("cwd").and_then(Value::as_str) {
        Some(c) if !c.is_empty() => PathBuf::from(c),
        _ => match start_dir(dir) {
            Ok(d) => d,
            Err(_) => return ExitCode::SUCCESS,
        },
    };
    let Ok(project) = Project::find(Some(&cwd)) else {
        return ExitCode::SUCCESS;
    };
    let tool = payload
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("tool");
    let input = payload.get("tool_input").cloned().unwrap_or(Value::Null);
    match refusal_of(&project, &cwd, tool, &input) {
        Some((what, rule)) => {
            eprintln!("envgit: denied {what} (rule {rule})");
            ExitCode::from(2)
        }
        None => ExitCode::SUCCESS,
    }
}
