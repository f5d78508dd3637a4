//! `envgit hooks install|uninstall copilot [--user | --repo]`, and `envgit hook copilot
//! pre|post`, what the installed hooks run.
//!
//! Copilot CLI has no seam for handing its commands to envgit, so what it does is recorded, not
//! enforced at the request: each tool call becomes a step (taken after the call, by
//! postToolUse), and a command line that matches a `shell:` rule is refused before it runs
//! (preToolUse answers `permissionDecision: deny` with the reason, which the model sees) and
//! recorded as a refused step; so is a file tool's write to a protected path (`envgit.yaml`,
//! `.git/hooks`, …) or read of a `.env` file. Outside an envgit project the hooks do nothing.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use envgit_store::{Refusal, StepDraft, StepKind, now_ms};
use serde_json::{Value, json};

use crate::cli::{HookAgent, HookArgs, HookEvent, HooksAction, HooksArgs, HooksTarget};
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{Project, project_root, start_dir};
use crate::step::Snapshot;
use crate::supervisor::EXIT_REFUSED;

const FILE_NAME: &str = "envgit.json";
/// What every command envgit writes into a hooks file contains: how uninstall knows its own.
const SIGNATURE: &str = " hook copilot ";

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Where the hooks file goes.
fn target_file(dir: Option<&Path>, t: &HooksTarget) -> CmdResult<PathBuf> {
    if t.repo {
        let project = Project::find(dir)?;
        return Ok(project.root.join(".github/hooks").join(FILE_NAME));
    }
    let home = match std::env::var_os("COPILOT_HOME").filter(|h| !h.is_empty()) {
        Some(h) => PathBuf::from(h),
        None => match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(h) => PathBuf::from(h).join(".copilot"),
            None => {
                return Err(Failure::usage(
                    "neither COPILOT_HOME nor HOME is set: set COPILOT_HOME to Copilot's directory",
                ));
            }
        },
    };
    Ok(home.join("hooks").join(FILE_NAME))
}

fn hooks_json(exe: &Path) -> Value {
    let cmd = |event: &str| {
        format!(
            "{}{SIGNATURE}{event}",
            shell_quote(&exe.display().to_string())
        )
    };
    json!({
        "version": 1,
        "hooks": {
            // A hook that times out lets the call through: leave room for recording a refusal.
            "preToolUse": [{"type": "command", "bash": cmd("pre"), "timeoutSec": 120}],
            "postToolUse": [{"type": "command", "bash": cmd("post"), "timeoutSec": 120}],
        }
    })
}

/// Whether `v` is a hooks file envgit wrote: every command in it is one of envgit's.
fn is_ours(v: &Value) -> bool {
    let Some(hooks) = v.get("hooks").and_then(Value::as_object) else {
        return false;
    };
    let mut n = 0;
    for entries in hooks.values() {
        for e in entries.as_array().into_iter().flatten() {
            n += 1;
            if !e["bash"].as_str().is_some_and(|c| c.contains(SIGNATURE)) {
                return false;
            }
        }
    }
    n > 0
}

pub fn run(dir: Option<&Path>, args: &HooksArgs) -> CmdResult<ExitCode> {
    match &args.action {
        HooksAction::Install(t) => install(dir, t),
        HooksAction::Uninstall(t) => uninstall(dir, t),
    }
}

fn install(dir: Option<&Path>, t: &HooksTarget) -> CmdResult<ExitCode> {
    let file = target_file(dir, t)?;
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))?;
    if let Ok(text) = std::fs::read_to_string(&file) {
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if !is_ours(&v) {
            return Err(Failure::usage(format!(
                "{} exists and was not written by envgit: move it aside and run this again",
                file.display()
            )));
        }
    }
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::failed(format!("{}: {e}", parent.display())))?;
    }
    let mut text = serde_json::to_string_pretty(&hooks_json(&exe))
        .map_err(|e| Failure::failed(e.to_string()))?;
    text.push('\n');
    let tmp = file.with_extension("json.envgit-tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &file))
        .map_err(|e| Failure::failed(format!("{}: {e}", file.display())))?;
    output::note(&format!("wrote {}", file.display()));
    output::note(
        "in an envgit project every Copilot tool call is now recorded as a step, and command \
         lines matching the `shell:` rules of envgit.yaml are refused before they run",
    );
    output::warn(
        "Copilot is recorded, not enforced at the request: its commands run outside envgit's \
         sandbox and gate, so a push or a publish that no shell rule names is not stopped \
         (`envgit codex` and `envgit run` enforce every request)",
    );
    if t.repo {
        output::warn(
            "repository hooks load only in folders Copilot trusts (`copilot --trust-folder`, \
             or a saved trust); the file names envgit by an absolute path of this machine",
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn uninstall(dir: Option<&Path>, t: &HooksTarget) -> CmdResult<ExitCode> {
    let file = target_file(dir, t)?;
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            output::note(&format!(
                "{} does not exist: nothing to remove",
                file.display()
            ));
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(Failure::failed(format!("{}: {e}", file.display()))),
    };
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if !is_ours(&v) {
        return Err(Failure::usage(format!(
            "{} was changed since envgit wrote it (or envgit never did): left in place; remove it yourself",
            file.display()
        )));
    }
    std::fs::remove_file(&file).map_err(|e| Failure::failed(format!("{}: {e}", file.display())))?;
    output::note(&format!("removed {}", file.display()));
    Ok(ExitCode::SUCCESS)
}

/// `toolArgs` arrives as an object (1.0.102) or as a JSON string (older releases).
fn tool_args(payload: &Value) -> Value {
    match payload.get("toolArgs") {
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

fn shell_command(tool: &str, args: &Value) -> Option<String> {
    matches!(tool, "bash" | "shell" | "Bash" | "powershell")
        .then(|| {
            args.get("command")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .flatten()
}

fn clip(s: &str, n: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        return one_line;
    }
    one_line.chars().take(n).collect::<String>() + "…"
}

/// How a tool call reads in `envgit log`: `AGENT TOOL: command line or path`.
pub(crate) fn tool_summary(agent: &str, tool: &str, args: &Value) -> String {
    if let Some(cmd) = shell_command(tool, args) {
        return format!("{agent} {tool}: {}", clip(&cmd, 200));
    }
    match path_arg(args) {
        Some(p) => format!("{agent} {tool}: {p}"),
        None => format!("{agent} {tool}: {}", clip(&args.to_string(), 120)),
    }
}

/// The path a file tool names (`path` for Copilot, `file_path` for Claude Code).
fn path_arg(args: &Value) -> Option<&str> {
    args.get("path")
        .or_else(|| args.get("file_path"))
        .and_then(Value::as_str)
}

/// `envgit hook copilot pre|post`: never fails the agent for envgit's own trouble (a hook
/// error would deny the call); problems go to stderr.
pub fn hook(dir: Option<&Path>, args: &HookArgs) -> CmdResult<ExitCode> {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let payload: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
    if matches!(args.agent, HookAgent::Claude) {
        return Ok(claude_hook(dir, &args.event, payload));
    }
    let cwd = match payload.get("cwd").and_then(Value::as_str) {
        Some(c) if !c.is_empty() => PathBuf::from(c),
        _ => start_dir(dir)?,
    };
    // A project holding this very executable is one envgit refuses to supervise (`own_exe`):
    // every call there is denied rather than let through unrecorded.
    if let Some(root) = start_dir(Some(&cwd)).ok().and_then(|d| project_root(&d))
        && let Err(f) = crate::own_exe::refuse_inside(&root)
    {
        if matches!(args.event, HookEvent::Pre) {
            println!(
                "{}",
                json!({"permissionDecision": "deny", "permissionDecisionReason": format!("envgit: {}", f.message)})
            );
        }
        output::error(&format!("copilot hook: {}", f.message));
        return Ok(ExitCode::SUCCESS);
    }
    // Outside an envgit project: nothing to do.
    let Ok(project) = Project::find(Some(&cwd)) else {
        return Ok(ExitCode::SUCCESS);
    };
    let tool = payload
        .get("toolName")
        .and_then(Value::as_str)
        .unwrap_or("tool")
        .to_string();
    let targs = tool_args(&payload);
    let result = match args.event {
        HookEvent::Pre => pre(&project, &cwd, &tool, &targs),
        HookEvent::PostFailure | HookEvent::Stop => Ok(()),
        HookEvent::Post => record(
            &project,
            &cwd,
            tool_summary("copilot", &tool, &targs),
            None,
            Vec::new(),
        ),
    };
    if let Err(f) = result {
        output::error(&format!("copilot hook: {}", f.message));
    }
    Ok(ExitCode::SUCCESS)
}

/// Copilot's file tools that write, and those that read.
const WRITERS: &[&str] = &[
    "create",
    "edit",
    "str_replace",
    "write",
    "insert",
    "apply_patch",
];
const READERS: &[&str] = &["view", "read", "cat"];

/// What envgit refuses in a call, as (`what`, rule): a shell-rule command line, a write to a
/// protected path, a read of a `.env` file. Copilot's own tools run on the host, so for Copilot
/// this is the only place these are refused; inside `envgit claude`'s sandbox it gives the model
/// a clear reason before the sandbox would refuse.
pub(crate) fn refusal_of(
    project: &Project,
    cwd: &Path,
    tool: &str,
    args: &Value,
) -> Option<(String, String)> {
    if let Some(cmd) = shell_command(tool, args) {
        let argv = vec!["sh".to_string(), "-c".to_string(), cmd.clone()];
        return project
            .policy
            .check_command(&argv)
            .map(|m| (format!("command {cmd}"), m.rule.to_string()));
    }
    let path = path_arg(args)?;
    let abs = envgit_codex::paths::normalize(&cwd.join(path));
    let rel = abs
        .strip_prefix(&project.root)
        .ok()?
        .to_string_lossy()
        .into_owned();
    let under = |base: &str| {
        rel.strip_prefix(base)
            .is_some_and(|r| r.is_empty() || r.starts_with('/'))
    };
    if WRITERS.contains(&tool) && project.protected_paths().iter().any(|p| under(p)) {
        return Some((format!("write {rel}"), "filesystem.protected".into()));
    }
    let env_file = rel
        .split('/')
        .any(|c| envgit_codex::fs::is_env_file(c.as_bytes()));
    if (READERS.contains(&tool) || WRITERS.contains(&tool)) && env_file {
        return Some((format!("read {rel}"), "filesystem.deny_read".into()));
    }
    None
}

fn pre(project: &Project, cwd: &Path, tool: &str, args: &Value) -> CmdResult<()> {
    let Some((what, rule)) = refusal_of(project, cwd, tool, args) else {
        return Ok(());
    };
    let reason = format!("envgit: denied {what} (rule {rule})");
    // The answer first: Copilot must get it even if recording fails.
    println!(
        "{}",
        json!({"permissionDecision": "deny", "permissionDecisionReason": reason})
    );
    output::error(&format!("denied {what} (rule {rule})"));
    record(
        project,
        cwd,
        tool_summary("copilot", tool, args),
        Some(EXIT_REFUSED),
        vec![Refusal { what, rule }],
    )
}

fn record(
    project: &Project,
    cwd: &Path,
    summary: String,
    exit_code: Option<i32>,
    refusals: Vec<Refusal>,
) -> CmdResult<()> {
    let mut store = project.open_store()?;
    let mut wt = project.worktree(&store)?;
    let started = now_ms();
    let mut step = crate::step::begin(&store, &summary)?;
    let draft = StepDraft {
        kind: Some(StepKind::Tool),
        started_at_ms: started,
        summary,
        cwd: Some(cwd.display().to_string()),
        exit_code,
        policy_hash: Some(project.policy.hash()),
        refusals,
        ..Default::default()
    };
    step.finish(&mut store, Snapshot::Scan(&mut wt, None), None, draft)?;
    wt.save_index(&store)?;
    Ok(())
}

/// Set inside `envgit claude`'s sandbox: where the supervisor answers hooks.
pub(crate) const HOOKS_SOCKET_ENV: &str = "ENVGIT_HOOKS_SOCKET";

/// Claude Code's hooks, run inside `envgit claude`'s sandbox: each tells the supervisor where
/// a tool call starts or ends (see `tool_steps.rs`). A refused PreToolUse exits 2 with the
/// reason on stderr, which Claude shows the model; a PreToolUse that cannot reach the
/// supervisor refuses too (fail closed). Without the socket, PreToolUse only judges.
fn claude_hook(dir: Option<&Path>, event: &HookEvent, payload: Value) -> ExitCode {
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
