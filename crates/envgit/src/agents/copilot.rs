//! Copilot CLI: `envgit hooks install|uninstall copilot [--user | --repo]`, and `envgit hook
//! copilot pre|post`, what the installed hooks run.
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

use super::tool_call::{refusal_of, tool_summary};
use crate::cli::{HookArgs, HookEvent, HooksAction, HooksArgs, HooksTarget};
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{Project, project_root, start_dir};
use crate::step::Snapshot;
use crate::supervisor::EXIT_REFUSED;

const FILE_NAME: &str = "envgit.json";
/// What every command envgit writes into a hooks file contains: how uninstall knows its own.
const SIGNATURE: &str = " hook copilot ";

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
            crate::output::shell_quote(&exe.display().to_string())
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

/// `envgit hook copilot pre|post`: never fails the agent for envgit's own trouble (a hook
/// error would deny the call); problems go to stderr.
pub fn hook(dir: Option<&Path>, args: &HookArgs) -> CmdResult<ExitCode> {
    let mut input = String::new();
    let _ = std::io::stdin().read_to_string(&mut input);
    let payload: Value = serde_json::from_str(&input).unwrap_or(Value::Null);
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

fn pre(project: &Project, cwd: &Path, tool: &str, args: &Value) -> CmdResult<()> {
    let Some((what, rule)) = refusal_of(project, cwd, tool, args) else {
        return Ok(());
    };
    let reason = super::tool_call::refusal_reason(&what, &rule);
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
