//! The sections that are plain data: env, approvers, filesystem, shell, snapshot, mcp.

use crate::node::{Kind, Node};
use crate::read::{Reader, describe_path, join, scalar_text};
use crate::{
    ApproversSection, EnvSection, FilesystemSection, McpSection, McpServer, PolicyError,
    ShellAction, ShellRule, SnapshotSection, parse_size,
};

use super::network::{action, preset};
use super::values;

pub(super) fn env(r: &Reader<'_>, node: &Node) -> Result<EnvSection, PolicyError> {
    let f = r.fields(node, "env", &["pass"])?;
    let mut out = EnvSection::default();
    if let Some(n) = f.get("pass") {
        let names = r.strings(n, "env.pass")?;
        if let Kind::Seq(items) = &n.kind {
            for (name, item) in names.iter().zip(items) {
                out.pass.push(values::env_name(r, item, "env.pass", name)?);
            }
        }
    }
    Ok(out)
}

pub(super) fn approvers(r: &Reader<'_>, node: &Node) -> Result<ApproversSection, PolicyError> {
    let f = r.fields(
        node,
        "approvers",
        &["terminal", "socket", "mcp_elicitation", "timeout"],
    )?;
    let mut out = ApproversSection::default();
    if let Some(n) = f.get("terminal") {
        out.terminal = r.bool(n, "approvers.terminal")?;
    }
    if let Some(n) = f.get("socket") {
        out.socket = r.bool(n, "approvers.socket")?;
    }
    if let Some(n) = f.get("mcp_elicitation") {
        out.mcp_elicitation = r.bool(n, "approvers.mcp_elicitation")?;
    }
    if let Some(n) = f.get("timeout") {
        out.timeout = r.u64(n, "approvers.timeout")?;
    }
    Ok(out)
}

pub(super) fn filesystem(r: &Reader<'_>, node: &Node) -> Result<FilesystemSection, PolicyError> {
    let f = r.fields(
        node,
        "filesystem",
        &["deny_read", "allow_write", "allow_shadowing", "preset"],
    )?;
    let mut out = FilesystemSection::default();
    if let Some(n) = f.get("deny_read") {
        out.deny_read = path_globs(r, n, "filesystem.deny_read")?;
    }
    if let Some(n) = f.get("allow_write") {
        out.allow_write = path_globs(r, n, "filesystem.allow_write")?;
    }
    if let Some(n) = f.get("allow_shadowing") {
        out.allow_shadowing = file_names(r, n, "filesystem.allow_shadowing")?;
    }
    if let Some(n) = f.get("preset") {
        out.preset = preset(r, n, "filesystem.preset")?;
    }
    Ok(out)
}

/// A list of plain file names (a program's, a library's): no `/`, not `.` or `..`.
fn file_names(r: &Reader<'_>, node: &Node, path: &str) -> Result<Vec<String>, PolicyError> {
    let texts = r.strings(node, path)?;
    if let Kind::Seq(items) = &node.kind {
        for (i, (text, item)) in texts.iter().zip(items).enumerate() {
            if text.is_empty() || text.contains('/') || text == "." || text == ".." {
                return Err(r.err(
                    item,
                    format!(
                        "`{text}` in `{path}[{i}]` is not a file name; write a program's name \
                         as you type it (`tsc`), without a directory"
                    ),
                ));
            }
        }
    }
    Ok(texts)
}

pub(super) fn shell(r: &Reader<'_>, node: &Node) -> Result<Vec<ShellRule>, PolicyError> {
    let items = match &node.kind {
        Kind::Null => return Ok(Vec::new()),
        Kind::Seq(items) => items,
        _ => {
            return Err(r.err(
                node,
                format!(
                    "`shell` must be a list of rules like `- deny: [\"git push\"]`, found {}",
                    node.kind.describe()
                ),
            ));
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("shell[{i}]");
        let f = r.fields(item, &path, &["deny", "ask"])?;
        let (action, list) = match (f.get("deny"), f.get("ask")) {
            (Some(n), None) => (ShellAction::Deny, n),
            (None, Some(n)) => (ShellAction::Ask, n),
            _ => {
                return Err(r.err(
                    item,
                    format!(
                        "{} needs exactly one of `deny` or `ask`",
                        describe_path(&path)
                    ),
                ));
            }
        };
        let key = match action {
            ShellAction::Deny => "deny",
            ShellAction::Ask => "ask",
        };
        out.push(ShellRule {
            action,
            prefixes: r.strings(list, &join(&path, key))?,
        });
    }
    Ok(out)
}

pub(super) fn snapshot(r: &Reader<'_>, node: &Node) -> Result<SnapshotSection, PolicyError> {
    let f = r.fields(node, "snapshot", &["exclude", "max_file_size", "budget"])?;
    let mut out = SnapshotSection::default();
    if let Some(n) = f.get("exclude") {
        out.exclude = path_globs(r, n, "snapshot.exclude")?;
    }
    if let Some(n) = f.get("max_file_size") {
        out.max_file_size = size(r, n, "snapshot.max_file_size")?;
    }
    if let Some(n) = f.get("budget") {
        out.budget = size(r, n, "snapshot.budget")?;
    }
    Ok(out)
}

/// A plain number of bytes, or a size string like `512MiB`.
fn size(r: &Reader<'_>, node: &Node, path: &str) -> Result<u64, PolicyError> {
    let text = match &node.kind {
        Kind::Int(_) | Kind::Str(_) | Kind::Float(_) => scalar_text(node).unwrap_or_default(),
        _ => {
            return Err(r.err(
                node,
                format!(
                    "{} must be a size like `512MiB` or `20GiB`, found {}",
                    describe_path(path),
                    node.kind.describe()
                ),
            ));
        }
    };
    parse_size(&text).map_err(|e| r.err(node, format!("{}: {e}", describe_path(path))))
}

pub(super) fn mcp(r: &Reader<'_>, node: &Node) -> Result<McpSection, PolicyError> {
    let f = r.fields(node, "mcp", &["servers", "tools"])?;
    let mut out = McpSection::default();
    if let Some(n) = f.get("servers") {
        let expected = "a mapping from server name to { command, args, env } or { url }";
        for (name, key, value) in r.entries(n, "mcp.servers", expected)? {
            if !crate::mcp::is_server_name(&name) {
                return Err(r.err(
                    key,
                    format!(
                        "server name `{name}` in `mcp.servers` must work as a JavaScript name \
                         (the REPL calls `{name}.tool()`): a letter or `_` first, then letters, \
                         digits or `_`, for example `github` or `my_server`"
                    ),
                ));
            }
            let server = mcp_server(r, value, &join("mcp.servers", &name))?;
            out.servers.insert(name, server);
        }
    }
    if let Some(n) = f.get("tools") {
        let expected = "a mapping from tool glob to deny, ask or allow";
        for (glob, key, value) in r.entries(n, "mcp.tools", expected)? {
            values::star_glob(
                r,
                key,
                "mcp.tools",
                &glob,
                "(only `*`, matching any run of characters, is); write one entry per tool name",
            )?;
            let a = action(r, value, &join("mcp.tools", &glob))?;
            out.tools.insert(glob, a);
        }
    }
    Ok(out)
}

fn mcp_server(r: &Reader<'_>, node: &Node, path: &str) -> Result<McpServer, PolicyError> {
    let f = r.fields(node, path, &["command", "args", "env", "url"])?;
    if let Some(url) = f.get("url") {
        let url_path = join(path, "url");
        let text = r.string(url, &url_path)?;
        if let Some(extra) = ["command", "args", "env"].iter().find_map(|k| f.get(k)) {
            return Err(r.err(
                extra,
                format!(
                    "{} names a remote server (`url`), which takes no command, args or env: \
                     keep `url` or the command, not both",
                    describe_path(path)
                ),
            ));
        }
        if !crate::mcp::is_server_url(&text) {
            return Err(r.err(
                url,
                format!(
                    "{} must be an http:// or https:// URL with a host, such as \
                     https://mcp.example.com/mcp, found `{text}`",
                    describe_path(&url_path)
                ),
            ));
        }
        return Ok(McpServer {
            url: Some(text),
            ..McpServer::default()
        });
    }
    let command = r.require(&f, path, "command", "the program to start (or `url`)")?;
    let mut out = McpServer {
        command: r.string(command, &join(path, "command"))?,
        ..McpServer::default()
    };
    if let Some(n) = f.get("args") {
        out.args = r.strings(n, &join(path, "args"))?;
    }
    if let Some(n) = f.get("env") {
        let env_path = join(path, "env");
        for (name, key, value) in r.entries(n, &env_path, "a mapping from variable to value")? {
            let name = values::env_name(r, key, &env_path, &name)?;
            let text = scalar_text(value).ok_or_else(|| {
                r.err(
                    value,
                    format!(
                        "{} must be a string, found {}",
                        describe_path(&join(&env_path, &name)),
                        value.kind.describe()
                    ),
                )
            })?;
            out.env.insert(name, text);
        }
    }
    Ok(out)
}

/// A list of filesystem globs, each checked at load (see [`values::path_glob`]).
fn path_globs(r: &Reader<'_>, node: &Node, path: &str) -> Result<Vec<String>, PolicyError> {
    let texts = r.strings(node, path)?;
    if let Kind::Seq(items) = &node.kind {
        for (i, (text, item)) in texts.iter().zip(items).enumerate() {
            values::path_glob(r, item, &format!("{path}[{i}]"), text)?;
        }
    }
    Ok(texts)
}
