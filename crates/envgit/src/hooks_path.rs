//! Where the person's git runs the project's hooks from: `core.hooksPath` as git reads it,
//! from the system's configuration, then the person's (`GIT_CONFIG_GLOBAL`, or
//! `$XDG_CONFIG_HOME/git/config` and `~/.gitconfig`), then the repository's, then the
//! environment's (`GIT_CONFIG_COUNT`); the last one wins. A person's own
//! `git config --global core.hooksPath .githooks` makes every repository's `.githooks` its
//! hooks, this one's included, so that directory is protected like `.git/hooks`.
//!
//! Read without git (a step's set-up cannot afford a process): the one key, `~/` expanded,
//! includes not followed.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::nofollow::read_nofollow;

/// The most read of one configuration file: more is not a configuration a person wrote.
const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// The hooks directory of the repository at `root`, as a project path ('/'-separated,
/// relative to `root`); `None` when git's default (`.git/hooks`, protected anyway) applies or
/// the directory is outside the project.
pub(crate) fn of(root: &Path) -> Option<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut files: Vec<PathBuf> = Vec::new();
    if !var("GIT_CONFIG_NOSYSTEM").is_some_and(|v| v != "0" && v != "false") {
        match var("GIT_CONFIG_SYSTEM") {
            Some(f) => files.push(f.into()),
            // Debian's git, and a git built with its default prefix.
            None => files.extend(["/etc/gitconfig", "/usr/local/etc/gitconfig"].map(PathBuf::from)),
        }
    }
    match var("GIT_CONFIG_GLOBAL") {
        Some(f) => files.push(f.into()),
        None => {
            let xdg = var("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".config")));
            files.extend(xdg.map(|x| x.join("git/config")));
            files.extend(home.as_ref().map(|h| h.join(".gitconfig")));
        }
    }
    // The repository's own, read without following a link a step could have planted.
    let mut value = None;
    for f in &files {
        if let Ok(bytes) = std::fs::read(f)
            && let Some(v) = last_hooks_path(&bytes)
        {
            value = Some(v);
        }
    }
    if let Ok(bytes) = read_nofollow(&root.join(".git/config"))
        && let Some(v) = last_hooks_path(&bytes)
    {
        value = Some(v);
    }
    if let Some(v) = from_environment(std::env::vars_os()) {
        value = Some(v);
    }
    in_project(root, home.as_deref(), &value?)
}

/// The last `core.hooksPath` of one configuration file's text.
fn last_hooks_path(bytes: &[u8]) -> Option<String> {
    if bytes.len() as u64 > CONFIG_MAX_BYTES {
        return None;
    }
    let text = String::from_utf8_lossy(bytes);
    let mut in_core = false;
    let mut found = None;
    for line in text.lines() {
        let mut l = line.trim();
        if let Some(header) = l.strip_prefix('[') {
            let Some((section, rest)) = header.split_once(']') else {
                continue;
            };
            in_core = section.trim().eq_ignore_ascii_case("core");
            // A key may follow the header on its line.
            l = rest.trim();
        }
        if in_core
            && let Some((k, v)) = l.split_once('=')
            && k.trim().eq_ignore_ascii_case("hookspath")
        {
            found = Some(value_of(v));
        }
    }
    found
}

/// A value as git reads it: an unquoted `#` or `;` starts a comment, quotes are removed.
fn value_of(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => out.extend(chars.next()),
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// `GIT_CONFIG_COUNT`'s last `core.hooksPath` (`GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`).
fn from_environment(vars: impl Iterator<Item = (OsString, OsString)>) -> Option<String> {
    let vars: Vec<(OsString, OsString)> = vars.collect();
    let get = |k: &str| {
        vars.iter()
            .find(|(key, _)| key == k)
            .and_then(|(_, v)| v.to_str())
    };
    let count: usize = get("GIT_CONFIG_COUNT")?.trim().parse().ok()?;
    (0..count.min(1024))
        .filter(|i| {
            get(&format!("GIT_CONFIG_KEY_{i}"))
                .is_some_and(|k| k.eq_ignore_ascii_case("core.hookspath"))
        })
        .filter_map(|i| get(&format!("GIT_CONFIG_VALUE_{i}")).map(str::to_string))
        .next_back()
}

/// `value` (relative to the worktree's root, where git runs hooks; or absolute, or `~/…`) as
/// a project path.
fn in_project(root: &Path, home: Option<&Path>, value: &str) -> Option<String> {
    let value = value.trim_end_matches('/');
    let path = match value.strip_prefix("~/") {
        Some(rest) => home?.join(rest),
        None if value.starts_with('~') => return None,
        None => root.join(value),
    };
    let mut parts: Vec<&[u8]> = Vec::new();
    let rel = path.strip_prefix(root).ok()?;
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(n.as_bytes()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => return None,
        }
    }
    if parts.is_empty() {
        return None;
    }
    String::from_utf8(parts.join(&b'/')).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_hooks_path_of_a_file_as_git_reads_it() {
        let text = b"[user]\n\tname = A\n[core]\n\thooksPath = first\n[alias]\n\thooksPath = no\n\
                     [core] HooksPath = \"./.githooks/\" ; a comment\n";
        assert_eq!(last_hooks_path(text).as_deref(), Some("./.githooks/"));
        assert_eq!(last_hooks_path(b"[core]\n\tbare = false\n"), None);
    }

    #[test]
    fn a_hooks_path_becomes_a_project_path_only_inside_the_project() {
        let root = Path::new("/home/me/proj");
        let home = Some(Path::new("/home/me"));
        let rel = |v: &str| in_project(root, home, &value_of(v));
        assert_eq!(rel(".githooks").as_deref(), Some(".githooks"));
        assert_eq!(rel("\"./tools/../hooks/\"").as_deref(), Some("hooks"));
        assert_eq!(rel("/home/me/proj/ci/hooks").as_deref(), Some("ci/hooks"));
        assert_eq!(rel("~/proj/h").as_deref(), Some("h"));
        assert_eq!(rel("~/dotfiles/hooks"), None);
        assert_eq!(rel("/etc/git-hooks"), None);
        assert_eq!(rel("../shared-hooks"), None);
        assert_eq!(rel("."), None);
    }

    #[test]
    fn the_environments_configuration_comes_last() {
        let vars = [
            ("GIT_CONFIG_COUNT", "2"),
            ("GIT_CONFIG_KEY_0", "core.hooksPath"),
            ("GIT_CONFIG_VALUE_0", "a"),
            ("GIT_CONFIG_KEY_1", "core.hookspath"),
            ("GIT_CONFIG_VALUE_1", "b"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        assert_eq!(from_environment(vars.into_iter()).as_deref(), Some("b"));
    }
}
