//! `envgit claude [ARGS…]`: the whole `claude` process runs inside envgit's sandbox and gate,
//! with Claude Code's own sandbox off (`--settings`, which also overrides a user setting) and
//! hooks that tell the supervisor where each tool call starts and ends, so every call is a
//! step (`tool_steps.rs`); the session's own traffic is the last step.
//!
//! The model credential stays outside (DESIGN §5): `ANTHROPIC_API_KEY` and
//! `ANTHROPIC_AUTH_TOKEN` are a placeholder inside, and the gate puts the real value on requests
//! to the model host (`ANTHROPIC_BASE_URL`'s, else api.anthropic.com:443) only. A Claude.ai
//! login (`~/.claude/.credentials.json`) is not carried in yet: that file stays unreadable
//! inside, so use an API key or token under envgit for now.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use envgit_gate::Credential;
use envgit_store::now_ms;
use serde_json::json;

use crate::cli::ClaudeArgs;
use crate::commands::hooks::HOOKS_SOCKET_ENV;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{Project, start_dir};
use crate::supervisor::{self, EXIT_ENVGIT_FAILED, RunExtras};
use crate::tool_steps::{HOOKS_SOCKET_NAME, ToolSteps};
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

/// Claude Code's credential variables: a placeholder inside, the real value put on by the gate.
const CREDENTIAL_VARS: &[&str] = &["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"];

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

/// The `--settings` envgit adds: Claude's own sandbox off, and envgit's hooks on every tool.
pub fn settings(exe: &Path) -> String {
    let hook = |event: &str| {
        json!([{"matcher": "*", "hooks": [{
            "type": "command",
            "command": format!("{} hook claude {event}", shell_quote(&exe.display().to_string())),
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

/// `(host, port)` the model requests go to: `ANTHROPIC_BASE_URL`'s, else Anthropic's API.
fn model_host(base: Option<&str>) -> CmdResult<(String, u16)> {
    let Some(base) = base.filter(|b| !b.is_empty()) else {
        return Ok(("api.anthropic.com".into(), 443));
    };
    let bad = || {
        Failure::usage(format!(
            "ANTHROPIC_BASE_URL={base:?} is not an http:// or https:// URL with a host"
        ))
    };
    let (rest, default_port) = match base.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (rest, 443),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (rest, 80),
        _ => return Err(bad()),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(p) => (host, p.parse::<u16>().map_err(|_| bad())?),
                None if after.is_empty() => (host, default_port),
                None => return Err(bad()),
            }
        }
        None => match authority.split_once(':') {
            Some((host, p)) => (host, p.parse::<u16>().map_err(|_| bad())?),
            None => (authority, default_port),
        },
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_ascii_lowercase(), port))
}

/// The caller's model credentials as gate credentials, each with the placeholder the sandbox
/// gets in its place.
fn credentials(host: &str, port: u16) -> Vec<(String, Credential)> {
    CREDENTIAL_VARS
        .iter()
        .filter_map(|var| {
            // A key read from a file often ends in a newline no header may carry.
            let secret = std::env::var(var).ok()?.trim().to_owned();
            if secret.is_empty() {
                return None;
            }
            let placeholder = format!("envgit-placeholder-{}", supervisor::random_token());
            Some((
                var.to_string(),
                Credential {
                    host: host.to_owned(),
                    port,
                    placeholder,
                    secret,
                },
            ))
        })
        .collect()
}

pub fn run(dir: Option<&Path>, args: &ClaudeArgs) -> CmdResult<ExitCode> {
    let mut project = Project::find(dir)?;
    let cwd = start_dir(dir)?;
    let claude = find_claude()?;
    let (host, port) = model_host(std::env::var("ANTHROPIC_BASE_URL").ok().as_deref())?;
    let credentials = credentials(&host, port);
    let pass = &mut project.policy.env.pass;
    for (k, _) in std::env::vars() {
        let wanted =
            CLAUDE_VARS.contains(&k.as_str()) || CLAUDE_PREFIXES.iter().any(|p| k.starts_with(p));
        if wanted && !CREDENTIAL_VARS.contains(&k.as_str()) && !pass.contains(&k) {
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
    let protected = project.protected_paths();

    let uid = rustix::process::getuid().as_raw();
    let hooks_dir = supervisor::runtime_dir(uid)?.join(format!(
        "hooks-{}-{}",
        std::process::id(),
        now_ms()
    ));
    supervisor::private_dir(&hooks_dir)?;
    let socket = hooks_dir.join(HOOKS_SOCKET_NAME);
    let listener = UnixListener::bind(&socket)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Failure::failed(format!("{}: {e}", socket.display())))?;
    let (stop_read, stop_write) =
        rustix::pipe::pipe().map_err(|e| Failure::failed(format!("pipe: {e}")))?;

    let (tap_tx, tap_rx) = std::sync::mpsc::channel();
    let mut steps = ToolSteps::begin(&project, "claude", &cwd, protected.clone(), tap_rx)?;
    let state = steps.state_dir();
    let mut env = vec![(
        HOOKS_SOCKET_ENV.to_string(),
        format!("/run/envgit/{HOOKS_SOCKET_NAME}"),
    )];
    env.extend(
        credentials
            .iter()
            .map(|(var, c)| (var.clone(), c.placeholder.clone())),
    );
    let extras = RunExtras {
        run_files: vec![(HOOKS_SOCKET_NAME.to_string(), socket.clone())],
        env,
        read_only: config_dir()
            .map(|d| CONFIG_READ_ONLY.iter().map(|p| d.join(p)).collect())
            .unwrap_or_default(),
        credentials: credentials.into_iter().map(|(_, c)| c).collect(),
        tap: Some(tap_tx),
    };
    output::note(&format!(
        "Claude Code runs in envgit's sandbox and gate; each tool call is a step; its model \
         credential stays outside (the gate adds it to requests to {host}:{port})"
    ));
    let started = now_ms();
    let outcome = std::thread::scope(|scope| {
        let server = scope.spawn(|| steps.serve(&listener, &stop_read));
        let outcome =
            supervisor::run_sandboxed(&project, &state, &cwd, &argv, &protected, &upstreams, extras);
        drop(stop_write);
        let _ = server.join();
        outcome
    });
    let _ = std::fs::remove_dir_all(&hooks_dir);
    match outcome {
        Ok((code, rest)) => {
            steps.finish(shown, started, code, rest)?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Err(f) => {
            let _ = steps.finish(shown, started, EXIT_ENVGIT_FAILED, Vec::new());
            Err(f)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::model_host;

    #[test]
    fn the_model_host_comes_from_the_base_url() {
        let host = |b| model_host(b).map_err(|f| f.message);
        assert_eq!(host(None), Ok(("api.anthropic.com".into(), 443)));
        assert_eq!(host(Some("")), Ok(("api.anthropic.com".into(), 443)));
        assert_eq!(
            host(Some("http://127.0.0.1:8080/v1")),
            Ok(("127.0.0.1".into(), 8080))
        );
        assert_eq!(
            host(Some("https://Proxy.Example.com")),
            Ok(("proxy.example.com".into(), 443))
        );
        assert_eq!(host(Some("http://[::1]:9/x")), Ok(("::1".into(), 9)));
        assert_eq!(host(Some("http://u:p@h.test")), Ok(("h.test".into(), 80)));
        for bad in ["ftp://h", "h.test", "http://", "http://h:port", "http://[::1"] {
            assert!(host(Some(bad)).is_err(), "{bad}");
        }
    }
}
