//! `envgit claude [ARGS…]`: the whole `claude` process runs inside envgit's sandbox and gate,
//! as one step, with Claude Code's own sandbox off (`--settings`, which also overrides a user
//! setting) and a PreToolUse hook (run inside the sandbox) that refuses command lines matching
//! `shell:` rules: exit 2, the reason reaches the model.
//!
//! Not done yet (DESIGN §5, §7): a step per tool call (hooks telling the supervisor over a
//! socket where each call starts and ends needs a run with many steps in one sandbox), and
//! keeping the model credential out of the sandbox (the gate adding it to requests to the
//! model host). Until then Claude Code's own variables (`ANTHROPIC_*`, `CLAUDE_CODE_*`),
//! its API key included, enter the sandbox.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use crate::cli::ClaudeArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{Project, start_dir};
use crate::supervisor;
use crate::upstreams::Upstreams;

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

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The `--settings` envgit adds: Claude's own sandbox off, and envgit's PreToolUse hook.
pub fn settings(exe: &Path) -> String {
    let hook = format!(
        "{} hook claude pre",
        shell_quote(&exe.display().to_string())
    );
    json!({
        "sandbox": {"enabled": false},
        "hooks": {
            "PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}],
        },
    })
    .to_string()
}

pub fn run(dir: Option<&Path>, args: &ClaudeArgs) -> CmdResult<ExitCode> {
    let mut project = Project::find(dir)?;
    let cwd = start_dir(dir)?;
    let claude = find_claude()?;
    let pass = &mut project.policy.env.pass;
    for (k, _) in std::env::vars() {
        let wanted =
            CLAUDE_VARS.contains(&k.as_str()) || CLAUDE_PREFIXES.iter().any(|p| k.starts_with(p));
        if wanted && !pass.contains(&k) {
            pass.push(k);
        }
    }
    output::note(
        "Claude Code runs inside envgit's sandbox and gate as one step; its API key is inside \
         the sandbox for now (the gate does not inject it yet)",
    );
    let mut argv = vec![
        claude.display().to_string(),
        "--settings".to_string(),
        // The hook runs inside, where the supervisor mounts envgit's binary at a fixed path.
        settings(Path::new(envgit_sandbox::plan::ENVGIT_INSIDE)),
    ];
    argv.extend(args.args.iter().cloned());
    let upstreams = Upstreams::new(&[], None)?;
    let code = supervisor::run_step(&project, &cwd, argv, &upstreams)?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
