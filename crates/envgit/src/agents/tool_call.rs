//! A tool call of an agent, as envgit sees it from the agent's hook: how it reads in
//! `envgit log`, and what envgit refuses in it before it runs (a `shell:` rule's command line, a
//! write to a protected path, a read of a `.env` file).

use std::path::Path;

use serde_json::Value;

use crate::project::Project;

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

/// What an agent is told of a refused call (its interface shows it to the person): the path
/// in `what` is the agent's, so its control characters come escaped.
pub(crate) fn refusal_reason(what: &str, rule: &str) -> String {
    format!(
        "envgit: denied {} (rule {rule})",
        crate::output::escape_controls(what)
    )
}

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
        .any(|c| envgit_policy::is_secret_name(c.as_bytes()));
    if (READERS.contains(&tool) || WRITERS.contains(&tool)) && env_file {
        return Some((format!("read {rel}"), "filesystem.deny_read".into()));
    }
    None
}
