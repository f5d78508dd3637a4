//! `envgit claude [ARGS…]`: the whole `claude` process runs inside envgit's sandbox and gate,
//! with Claude Code's own sandbox off (`--settings`, which also overrides a user setting) and
//! hooks that tell the supervisor where each tool call starts and ends, so every call is a
//! step (`tool_steps.rs`); the session's own traffic is the last step.
//!
//! The model credential stays outside (`claude_login.rs`): the sandbox holds
//! placeholders and the gate puts the real key or token on requests to the model host only.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use envgit_store::now_ms;
use serde_json::json;

use super::claude_hook::HOOKS_SOCKET_ENV;
use super::claude_login::{self, CREDENTIAL_VARS, WITHHELD_VARS};
use super::tool_steps::{HOOKS_SOCKET_NAME, ToolSteps};
use crate::cli::ClaudeArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{Project, start_dir};
use crate::supervisor::{self, EXIT_ENVGIT_FAILED, RunExtras};
use crate::upstreams::Upstreams;

/// What in Claude Code's configuration directory changes what Claude does later (settings,
/// hooks, commands, agents, plugins, memory): read-only inside.
const CONFIG_READ_ONLY: &[&str] = &[
    "settings.json",
    "settings.local.json",
    "hooks",
    "commands",
    "agents",
    "plugins",
    "skills",
    "CLAUDE.md",
];

/// Claude Code's configuration directory: `CLAUDE_CONFIG_DIR`, else `~/.claude`.
fn config_dir() -> Option<PathBuf> {
    match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        Some(d) => Some(PathBuf::from(d)),
        None => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".claude")),
    }
}

/// Claude Code's configuration variables let into the sandbox besides the prefixes below.
const CLAUDE_VARS: &[&str] = &[
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
    "IS_SANDBOX",
    "MAX_THINKING_TOKENS",
    "BASH_DEFAULT_TIMEOUT_MS",
    "BASH_MAX_TIMEOUT_MS",
];
const CLAUDE_PREFIXES: &[&str] = &["ANTHROPIC_", "CLAUDE_CODE_", "CLAUDE_CONFIG_DIR"];

fn find_claude() -> CmdResult<PathBuf> {
    if let Some(p) = std::env::var_os("ENVGIT_CLAUDE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let c = dir.join("claude");
        if c.is_file() {
            // The npm launcher is a symlink into the package: the sandbox needs the real path.
            return Ok(c.canonicalize().unwrap_or(c));
        }
    }
    Err(Failure::usage(
        "the Claude Code CLI (`claude`) is not on PATH: install it \
         (`npm install -g @anthropic-ai/claude-code`) or set ENVGIT_CLAUDE=/path/to/claude",
    ))
}

/// The `--settings` envgit adds: Claude's own sandbox off, and envgit's hooks on every tool.
pub fn settings(exe: &Path) -> String {
    let hook = |event: &str| {
        json!([{"matcher": "*", "hooks": [{
            "type": "command",
            "command": format!("{} hook claude {event}", crate::output::shell_quote(&exe.display().to_string())),
        }]}])
    };
    json!({
        "sandbox": {"enabled": false},
        "hooks": {
            "PreToolUse": hook("pre"),
            "PostToolUse": hook("post"),
            "PostToolUseFailure": hook("post-failure"),
            "Stop": hook("stop"),
            "SessionEnd": hook("stop"),
        },
    })
    .to_string()
}

/// A private directory of this run (the hooks socket, the placeholder login), removed however
/// the run ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The socket the hooks reach the supervisor on, in a new private directory of the runtime dir
/// (the sandbox sees only the socket, bound at `/run/envgit/hooks.sock`).
fn hooks_socket() -> CmdResult<(Scratch, PathBuf, UnixListener)> {
    let uid = rustix::process::getuid().as_raw();
    let dir = crate::runtime::runtime_dir(uid)?.join(format!(
        "hooks-{}-{}",
        std::process::id(),
        now_ms()
    ));
    crate::runtime::private_dir(&dir)?;
    let scratch = Scratch(dir);
    let socket = scratch.0.join(HOOKS_SOCKET_NAME);
    let listener = UnixListener::bind(&socket)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Failure::failed(format!("{}: {e}", socket.display())))?;
    Ok((scratch, socket, listener))
}

pub fn run(dir: Option<&Path>, args: &ClaudeArgs) -> CmdResult<ExitCode> {
    let mut project = Project::find(dir)?;
    let cwd = start_dir(dir)?;
    let claude = find_claude()?;
    let pass = &mut project.policy.env.pass;
    for (k, _) in std::env::vars() {
        let wanted =
            CLAUDE_VARS.contains(&k.as_str()) || CLAUDE_PREFIXES.iter().any(|p| k.starts_with(p));
        let secret = CREDENTIAL_VARS.contains(&k.as_str()) || WITHHELD_VARS.contains(&k.as_str());
        if wanted && !secret && !pass.contains(&k) {
            pass.push(k);
        }
    }
    let mut argv = vec![
        claude.display().to_string(),
        "--settings".to_string(),
        // The hooks run inside, where the supervisor mounts envgit's binary at a fixed path.
        settings(Path::new(envgit_sandbox::plan::ENVGIT_INSIDE)),
    ];
    argv.extend(args.args.iter().cloned());
    let mut shown = vec!["claude".to_string()];
    shown.extend(args.args.iter().cloned());
    let upstreams = Upstreams::new(&[], None)?;

    let (scratch, socket, listener) = hooks_socket()?;
    let (stop_read, stop_write) =
        rustix::pipe::pipe().map_err(|e| Failure::failed(format!("pipe: {e}")))?;

    let config = config_dir();
    let login = claude_login::prepare(config.as_deref(), &scratch.0)?;
    let (tap_tx, tap_rx) = std::sync::mpsc::channel();
    let mut steps = ToolSteps::begin(&project, "claude", &cwd, project.protected_paths(), tap_rx)?;
    let protected = steps.protected().to_vec();
    let state = steps.state_dir();
    let mut env = vec![(
        HOOKS_SOCKET_ENV.to_string(),
        format!("/run/envgit/{HOOKS_SOCKET_NAME}"),
    )];
    env.extend(login.env);
    let extras = RunExtras {
        run_files: vec![(HOOKS_SOCKET_NAME.to_string(), socket.clone())],
        env,
        read_only: config
            .map(|d| CONFIG_READ_ONLY.iter().map(|p| d.join(p)).collect())
            .unwrap_or_default(),
        file_overrides: login.files,
        credentials: login.gate,
        tap: Some(tap_tx),
        step_notes: None,
        git: steps.git_layer(),
        facts: Some(supervisor::Facts::Known(steps.project_facts()?)),
        before_start: None,
        early: None,
        cgroups_after_exit: false,
        sandbox: Some(steps.sandbox_slot()),
    };
    output::note(&format!(
        "Claude Code runs in envgit's sandbox and gate; each tool call is a step; its model \
         credential stays outside{}",
        match &login.host {
            Some(host) => format!(" (the gate adds it to requests to {host})"),
            None => String::new(),
        }
    ));
    let started = now_ms();
    let outcome = std::thread::scope(|scope| {
        let server = scope.spawn(|| steps.serve(&listener, &stop_read));
        let outcome = supervisor::run_sandboxed(
            &project, &state, &cwd, &argv, &protected, &upstreams, extras,
        );
        drop(stop_write);
        let _ = server.join();
        outcome
    });
    drop(scratch);
    match outcome {
        Ok((code, rest)) => {
            steps.finish(shown, started, code, rest.events())?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Err(f) => {
            let _ = steps.finish(shown, started, EXIT_ENVGIT_FAILED, Vec::new());
            Err(f)
        }
    }
}
