//! The temporary `CODEX_HOME` `envgit codex` runs Codex with: the user's auth and model
//! settings kept, nothing that could run on the host behind envgit's back (MCP servers,
//! plugins, apps, notify programs, web search), and an `environments.toml` whose only
//! environment is envgit's exec-server (`include_local = false`).

use std::path::{Path, PathBuf};

/// Top-level keys of the user's `config.toml` that are kept: model and auth settings.
const KEEP_KEYS: &[&str] = &[
    "model",
    "model_provider",
    "model_providers",
    "model_reasoning_effort",
    "model_reasoning_summary",
    "model_reasoning_summary_format",
    "model_verbosity",
    "model_context_window",
    "model_max_output_tokens",
    "model_auto_compact_token_limit",
    "model_supports_reasoning_summaries",
    "plan_mode_reasoning_effort",
    "review_model",
    "profile",
    "profiles",
    "preferred_auth_method",
    "forced_login_method",
    "forced_chatgpt_workspace_id",
    "cli_auth_credentials_store",
    "chatgpt_base_url",
    "openai_base_url",
    "approval_policy",
    "hide_agent_reasoning",
    "show_raw_agent_reasoning",
    "disable_response_storage",
    "personality",
    "service_tier",
    "file_opener",
    "tui",
];

/// Never kept, at any depth (a profile can carry them too).
const DROP_ANYWHERE: &[&str] = &[
    "mcp_servers",
    "plugins",
    "apps",
    "features",
    "notify",
    "hooks",
    "sandbox_mode",
    "sandbox_workspace_write",
    "web_search",
    "tools",
    "shell_environment_policy",
    "experimental_use_exec_command_tool",
];

/// Settings envgit adds before the user's kept keys.
const ENVGIT_TOP: &str = "# Written by `envgit codex` for one run; removed when Codex exits.\n\
# envgit's sandbox and gate apply to every command, so Codex's own sandbox is off.\n\
sandbox_mode = \"danger-full-access\"\n\
web_search = \"disabled\"\n";

/// Tables envgit adds after the user's kept tables.
const ENVGIT_TABLES: &str = "\n[features]\nplugins = false\nremote_plugin = false\napps = false\n\n[analytics]\nenabled = false\n";

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Dotted key segments, quotes respected (`projects."/a.b"` → `projects`, `/a.b`).
fn segments(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in key.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '.') => out.push(std::mem::take(&mut cur).trim().to_string()),
            (None, c) => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

/// Whether `text` ends inside a bracket, brace or multi-line string (the statement continues).
fn open_depth(text: &str) -> bool {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0i32, 0usize);
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"\"\"\"") || rest.starts_with(b"'''") {
            let delim = &rest[..3];
            match b[i + 3..].windows(3).position(|w| w == delim) {
                Some(p) => i += 3 + p + 3,
                None => return true,
            }
            continue;
        }
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'\'' => {
                i += 1;
                while i < b.len() && b[i] != b'\'' && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    depth > 0
}

/// The key of a `key = value` statement (before the first `=` outside quotes).
fn statement_key(stmt: &str) -> Option<String> {
    let mut quote: Option<char> = None;
    for (i, c) in stmt.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '=') => return Some(stmt[..i].trim().to_string()),
            _ => {}
        }
    }
    None
}

/// Keep the user's model and auth settings; drop everything that could start a program on
/// the host. Returns the kept text and the names of what was dropped.
pub fn filter_config(text: &str) -> (String, String, Vec<String>) {
    let mut top = String::new();
    let mut tables = String::new();
    let mut dropped: Vec<String> = Vec::new();
    let mut section: Option<(Vec<String>, bool)> = None;
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut stmt = first.to_string();
        while open_depth(&stmt) {
            match lines.next() {
                Some(l) => {
                    stmt.push('\n');
                    stmt.push_str(l);
                }
                None => break,
            }
        }
        let t = stmt.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if t.starts_with('[') {
            let inner = t.trim_start_matches('[');
            let inner = inner.split(']').next().unwrap_or("");
            let segs = segments(inner);
            let keep = segs
                .first()
                .is_some_and(|s| KEEP_KEYS.contains(&s.as_str()))
                && !segs.iter().any(|s| DROP_ANYWHERE.contains(&s.as_str()));
            if !keep {
                let name = segs.first().cloned().unwrap_or_default();
                if !dropped.contains(&name) {
                    dropped.push(name);
                }
            } else {
                tables.push('\n');
                tables.push_str(&stmt);
                tables.push('\n');
            }
            section = Some((segs, keep));
            continue;
        }
        let Some(key) = statement_key(&stmt) else {
            continue;
        };
        let segs = segments(&key);
        let first = segs.first().cloned().unwrap_or_default();
        match &section {
            None => {
                if KEEP_KEYS.contains(&first.as_str())
                    && !segs.iter().any(|s| DROP_ANYWHERE.contains(&s.as_str()))
                {
                    top.push_str(&stmt);
                    top.push('\n');
                } else if !dropped.contains(&first) {
                    dropped.push(first);
                }
            }
            Some((_, true)) => {
                if segs.iter().any(|s| DROP_ANYWHERE.contains(&s.as_str())) {
                    if !dropped.contains(&first) {
                        dropped.push(first);
                    }
                } else {
                    tables.push_str(&stmt);
                    tables.push('\n');
                }
            }
            Some((_, false)) => {}
        }
    }
    (top, tables, dropped)
}

/// What a run's `CODEX_HOME` is made of.
pub struct HomeSpec<'a> {
    /// The user's `CODEX_HOME` (`$CODEX_HOME`, else `~/.codex`); it may not exist.
    pub user_home: Option<&'a Path>,
    /// The run's own `CODEX_HOME`: an existing private directory.
    pub dir: &'a Path,
    /// The exec-server program (envgit) and its arguments.
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
}

/// Files copied as they are (credentials: the run's Codex may refresh them).
pub const COPIED: &[&str] = &["auth.json"];

/// Linked to the user's own, so that sessions can be resumed and history kept across runs.
pub const LINKED: &[&str] = &["sessions", "history.jsonl"];

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// Write `config.toml`, `environments.toml` and copies of the credentials; returns what was
/// left out of the user's configuration.
pub fn write_home(spec: &HomeSpec<'_>) -> std::io::Result<Vec<String>> {
    let mut dropped = Vec::new();
    let (mut top, mut tables) = (String::new(), String::new());
    if let Some(user) = spec.user_home {
        match std::fs::read_to_string(user.join("config.toml")) {
            Ok(text) => {
                let (t, tb, d) = filter_config(&text);
                (top, tables, dropped) = (t, tb, d);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", user.join("config.toml").display()),
                ));
            }
        }
        if user.is_dir() {
            std::fs::create_dir_all(user.join("sessions"))?;
            for name in LINKED {
                std::os::unix::fs::symlink(user.join(name), spec.dir.join(name))?;
            }
        }
        for name in COPIED {
            match std::fs::read(user.join(name)) {
                Ok(bytes) => write_private(&spec.dir.join(name), &bytes)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("{}: {e}", user.join(name).display()),
                    ));
                }
            }
        }
    }
    let config = format!("{ENVGIT_TOP}{top}{tables}{ENVGIT_TABLES}");
    write_private(&spec.dir.join("config.toml"), config.as_bytes())?;
    write_private(
        &spec.dir.join("environments.toml"),
        environments_toml(spec.program, spec.args, spec.env).as_bytes(),
    )?;
    Ok(dropped)
}

/// Codex's only environment: envgit's exec-server over stdio.
pub fn environments_toml(program: &Path, args: &[String], env: &[(String, String)]) -> String {
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
        .collect();
    format!(
        "# Written by `envgit codex`: every command Codex runs goes to envgit.\n\
         default = \"envgit\"\n\
         include_local = false\n\n\
         [[environments]]\n\
         id = \"envgit\"\n\
         program = {}\n\
         args = [{}]\n\
         env = {{ {} }}\n",
        toml_str(&program.display().to_string()),
        args.join(", "),
        env.join(", ")
    )
}

/// The user's Codex home: `$CODEX_HOME`, else `~/.codex`.
pub fn user_codex_home(env_home: Option<PathBuf>, home: Option<PathBuf>) -> Option<PathBuf> {
    env_home
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| home.map(|h| h.join(".codex")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_model_settings_and_drops_what_runs_programs() {
        let user = r#"
model = "gpt-9"
model_provider = "corp"
notify = ["notify-send", "done"]
web_search = "live"
mcp_servers.inline = { command = "evil" }

[model_providers.corp]
name = "Corp"
base_url = "https://llm.corp.example/v1"
env_key = "CORP_KEY"
http_headers = { "X-A" = "b",
  "X-C" = "d" }

[mcp_servers.evil]
command = "sh"
args = [
  "-c",
  "touch /tmp/pwned",
]

[profiles.fast]
model = "gpt-9-mini"

[profiles.fast.mcp_servers.x]
command = "x"

[projects."/home/u/p"]
trust_level = "trusted"

[features]
plugins = true
"#;
        let (top, tables, dropped) = filter_config(user);
        let all = format!("{top}{tables}");
        assert!(all.contains("model = \"gpt-9\""), "{all}");
        assert!(all.contains("[model_providers.corp]"), "{all}");
        assert!(all.contains("\"X-C\" = \"d\" }"), "{all}");
        assert!(all.contains("[profiles.fast]"), "{all}");
        assert!(!all.contains("evil"), "{all}");
        assert!(!all.contains("pwned"), "{all}");
        assert!(!all.contains("notify"), "{all}");
        assert!(!all.contains("live"), "{all}");
        assert!(!all.contains("trust_level"), "{all}");
        assert!(!all.contains("plugins"), "{all}");
        assert!(!all.contains("command = \"x\""), "{all}");
        for d in [
            "mcp_servers",
            "notify",
            "projects",
            "features",
            "web_search",
        ] {
            assert!(dropped.iter().any(|x| x == d), "{d}: {dropped:?}");
        }
        assert!(!top.contains('['), "top-level keys only: {top}");
    }

    #[test]
    fn environments_file() {
        let t = environments_toml(
            Path::new("/bin/envgit"),
            &["-C".into(), "/w \"x\"".into(), "codex-exec-server".into()],
            &[("ENVGIT_HOME".into(), "/h".into())],
        );
        assert!(t.contains("include_local = false"));
        assert!(
            t.contains(r#"args = ["-C", "/w \"x\"", "codex-exec-server"]"#),
            "{t}"
        );
        assert!(t.contains(r#"env = { "ENVGIT_HOME" = "/h" }"#), "{t}");
    }
}
