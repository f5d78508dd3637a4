//! What the person's git runs or reads from the project because its configuration says so:
//! the system's, the person's own (`GIT_CONFIG_GLOBAL`, or `$XDG_CONFIG_HOME/git/config` and
//! `~/.gitconfig`), the repository's `.git/config` and the environment's (`GIT_CONFIG_COUNT`),
//! read in git's order (the last `core.hooksPath` wins). Three kinds:
//!
//! - the hooks directory: a global `core.hooksPath = .githooks` makes every repository's
//!   `.githooks` its hooks, this one's included;
//! - files read as configuration (`include.path`, `includeIf.*.path`), relative to the file
//!   that includes them, and the template directory every new repository's hooks are copied
//!   from (`init.templateDir`);
//! - programs its commands run (`core.fsmonitor`, `core.pager`, `diff.*.textconv`,
//!   `filter.*.smudge`, `credential.helper`, a `!` alias, …) when they are paths in the
//!   project (`./tools/textconv.sh` runs from the worktree's root).
//!
//! Each is protected like `.git/hooks`. Read without git (a step's set-up cannot afford a
//! process); includes are not followed further.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::nofollow::{read_in_project, read_regular_bounded};

/// The most read of one configuration file: more is not a configuration a person wrote.
const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// One `section[.subsection].key = value` of a configuration, names lower-cased (but the
/// subsection's), `None` for a key written without `=`.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    section: String,
    subsection: Option<String>,
    key: String,
    value: Option<String>,
}

/// What the configurations of the repository at `root` have git run or read from it: each
/// project path ('/'-separated, relative to the root) with the key that names it
/// (`core.hookspath`, `diff.txt.textconv`), the hooks directory first.
pub(crate) fn of(root: &Path) -> Vec<(String, String)> {
    // The repository's own, without following a link a step could have planted.
    of_repository(
        root,
        root,
        read_in_project(root, ".git/config", CONFIG_MAX_BYTES).ok(),
    )
}

/// The system's and the person's git configuration on this machine, as the sandbox could read
/// a credential from it by path.
pub(crate) struct PersonConfig {
    /// Every file, whichever git would take (`GIT_CONFIG_GLOBAL`, `$XDG_CONFIG_HOME/git/config`,
    /// `~/.config/git/config`, `~/.gitconfig`, `GIT_CONFIG_SYSTEM` or `/etc/gitconfig`…) and the
    /// files their `include.path` and `includeIf.*.path` name (one level), each once.
    pub files: Vec<PathBuf>,
    /// The files git's `store` credential helper keeps passwords in where these move them
    /// (`credential.helper = store --file ~/secrets/git`): the default ones
    /// (`~/.git-credentials`, `~/.config/git/credentials`) are masked already.
    pub credential_stores: Vec<PathBuf>,
}

/// [`PersonConfig`], read once; `home` is the person's.
pub(crate) fn person_config(home: Option<&Path>) -> PersonConfig {
    let configs = person_configs(home);
    let mut credential_stores: Vec<PathBuf> = Vec::new();
    for (_, entries) in &configs {
        for e in entries {
            let Some(value) = e
                .value
                .as_deref()
                .filter(|_| e.section == "credential" && e.key == "helper")
            else {
                continue;
            };
            let words = shlex::split(value).unwrap_or_default();
            if words.first().map(String::as_str) != Some("store") {
                continue;
            }
            let mut args = words.iter().skip(1);
            while let Some(arg) = args.next() {
                let named = match arg.strip_prefix("--file=") {
                    Some(f) => Some(f),
                    None if arg == "--file" => args.next().map(String::as_str),
                    None => None,
                };
                // A relative one is the caller's directory's: not this file's to know.
                let absolute = named.filter(|n| n.starts_with('/') || n.starts_with("~/"));
                credential_stores.extend(absolute.and_then(|n| in_home(n, home, Path::new("/"))));
            }
        }
    }
    PersonConfig {
        files: configs.into_iter().map(|(f, _)| f).collect(),
        credential_stores,
    }
}

/// [`PersonConfig::files`], each with its entries (none for one that cannot be read as a
/// configuration file).
fn person_configs(home: Option<&Path>) -> Vec<(PathBuf, Vec<Entry>)> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut files: Vec<PathBuf> = Vec::new();
    files.extend(var("GIT_CONFIG_SYSTEM"));
    files.extend(["/etc/gitconfig", "/usr/local/etc/gitconfig"].map(PathBuf::from));
    files.extend(var("GIT_CONFIG_GLOBAL"));
    files.extend(var("XDG_CONFIG_HOME").map(|x| x.join("git/config")));
    if let Some(h) = home {
        files.push(h.join(".config/git/config"));
        files.push(h.join(".gitconfig"));
    }
    let read = |file: &Path| {
        read_regular_bounded(file, CONFIG_MAX_BYTES)
            .map(|bytes| parse(&bytes))
            .unwrap_or_default()
    };
    let mut out: Vec<(PathBuf, Vec<Entry>)> = Vec::new();
    for file in files {
        if out.iter().any(|(f, _)| *f == file) {
            continue;
        }
        let entries = read(&file);
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let included: Vec<PathBuf> = entries
            .iter()
            .filter(|e| {
                e.section == "include" && e.key == "path"
                    || e.section == "includeif" && e.subsection.is_some() && e.key == "path"
            })
            .filter_map(|e| in_home(e.value.as_deref()?, home, &dir))
            .collect();
        out.push((file, entries));
        for f in included {
            if !out.iter().any(|(known, _)| *known == f) {
                let entries = read(&f);
                out.push((f, entries));
            }
        }
    }
    out
}

/// A path as git's configuration writes one: `~/…` in `home`, else relative to `base`; `None`
/// for another user's `~name/…`, or without a home.
fn in_home(value: &str, home: Option<&Path>, base: &Path) -> Option<PathBuf> {
    match value.strip_prefix("~/") {
        Some(rest) => home.map(|h| h.join(rest)),
        None if value.starts_with('~') => None,
        None => Some(base.join(value)),
    }
}

/// [`of`] for the repository whose work tree is `worktree` (the project's `root` or a
/// repository nested in it), its `.git/config` given (`None`: it has none; a nested one's as
/// a snapshot holds it): paths relative to `root`.
pub(crate) fn of_repository(
    root: &Path,
    worktree: &Path,
    repository_config: Option<Vec<u8>>,
) -> Vec<(String, String)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    // Each layer's entries, with the directory its relative includes start from.
    let mut layers: Vec<(PathBuf, Vec<Entry>)> = Vec::new();
    let mut read = |file: PathBuf| {
        if let Ok(bytes) = read_regular_bounded(&file, CONFIG_MAX_BYTES) {
            let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
            layers.push((dir, parse(&bytes)));
        }
    };
    if !var("GIT_CONFIG_NOSYSTEM").is_some_and(|v| v != "0" && v != "false") {
        match var("GIT_CONFIG_SYSTEM") {
            Some(f) => read(f.into()),
            // Debian's git, and a git built with its default prefix.
            None => ["/etc/gitconfig", "/usr/local/etc/gitconfig"]
                .into_iter()
                .for_each(|f| read(f.into())),
        }
    }
    match var("GIT_CONFIG_GLOBAL") {
        Some(f) => read(f.into()),
        None => {
            let xdg = var("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .or_else(|| home.as_ref().map(|h| h.join(".config")));
            if let Some(x) = xdg {
                read(x.join("git/config"));
            }
            if let Some(h) = &home {
                read(h.join(".gitconfig"));
            }
        }
    }
    if let Some(bytes) = repository_config {
        layers.push((worktree.join(".git"), parse(&bytes)));
    }
    layers.push((
        worktree.to_path_buf(),
        from_environment(std::env::vars_os()),
    ));
    let place = Place {
        root,
        home: home.as_deref(),
    };
    let mut named: Vec<(String, String)> = Vec::new();
    let mut hooks = None;
    for (dir, entries) in &layers {
        for e in entries {
            let Some(value) = e.value.as_deref() else {
                continue;
            };
            let paths = if e.is("core", "hookspath") {
                hooks = Some(value.to_string());
                continue;
            } else if e.section == "include" && e.key == "path"
                || e.section == "includeif" && e.subsection.is_some() && e.key == "path"
            {
                // Relative to the including file (`.git/` for the repository's).
                vec![place.resolve(value, dir)]
            } else if e.is("init", "templatedir") {
                // Copied into every repository the person makes or clones, hooks included.
                vec![place.resolve(value, worktree)]
            } else {
                e.programs(value)
                    .into_iter()
                    .map(|p| place.resolve(p, worktree))
                    .collect()
            };
            for p in paths.into_iter().flatten() {
                if !named.iter().any(|(n, _)| *n == p) {
                    named.push((p, e.name()));
                }
            }
        }
    }
    // The last `core.hooksPath` of all the layers is the one git uses.
    if let Some(h) = hooks.and_then(|h| place.resolve(&h, worktree)) {
        named.retain(|(n, _)| *n != h);
        named.insert(0, (h, "core.hookspath".to_string()));
    }
    named
}

impl Entry {
    /// `section[.subsection].key`, as `git config --list` writes it.
    fn name(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }

    fn is(&self, section: &str, key: &str) -> bool {
        self.subsection.is_none() && self.section == section && self.key == key
    }

    /// The files a command key runs, when its value names them by path: its program and the
    /// scripts it is given (of a `!` shell command too). A bare name is found on `PATH` (or
    /// is `git credential-NAME`), which other checks cover.
    fn programs<'v>(&self, value: &'v str) -> Vec<&'v str> {
        let sub = self.subsection.is_some();
        let runs = match (self.section.as_str(), self.key.as_str()) {
            // A boolean (`true`: git's own daemon) names no path.
            ("core", "fsmonitor" | "pager" | "editor" | "sshcommand" | "askpass") => !sub,
            ("sequence", "editor") | ("interactive", "difffilter") => !sub,
            ("diff", "external") => !sub,
            ("diff", "textconv" | "command") | ("merge", "driver") => sub,
            ("filter", "clean" | "smudge" | "process") => sub,
            ("difftool" | "mergetool", "cmd" | "path") => sub,
            ("remote", "uploadpack" | "receivepack") => sub,
            ("gpg", "program") | ("credential", "helper") => true,
            ("alias", _) => !sub && value.trim_start().starts_with('!'),
            ("pager", _) => !sub,
            _ => false,
        };
        if !runs {
            return Vec::new();
        }
        crate::project_path::path_words(value)
    }
}

/// Where relative paths start.
struct Place<'a> {
    root: &'a Path,
    home: Option<&'a Path>,
}

impl Place<'_> {
    /// `value` (relative to `base`, absolute, or `~/…`) as a project path; `None` outside
    /// the project, or for the root itself.
    fn resolve(&self, value: &str, base: &Path) -> Option<String> {
        let value = value.trim_end_matches('/');
        let path = in_home(value, self.home, base)?;
        crate::project_path::of(self.root, &path)
    }
}

/// The entries of one configuration file, in order. Enough of git's syntax for the keys
/// above: `[section "sub"]` and `[section.sub]` headers, a key on a header's line, quotes,
/// escapes, comments and continued lines.
fn parse(bytes: &[u8]) -> Vec<Entry> {
    if bytes.len() as u64 > CONFIG_MAX_BYTES {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    let mut section = String::new();
    let mut subsection: Option<String> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut l = line.trim().to_string();
        // A value continued on the next line.
        while l.ends_with('\\') && !l.ends_with("\\\\") {
            l.pop();
            match lines.next() {
                Some(next) => l.push_str(next),
                None => break,
            }
        }
        let mut rest = l.as_str();
        if let Some(header) = rest.strip_prefix('[') {
            let Some((name, after)) = header.split_once(']') else {
                continue;
            };
            (section, subsection) = match name.split_once([' ', '\t']) {
                Some((s, sub)) => (s.to_ascii_lowercase(), Some(unquote(sub.trim()))),
                None => match name.split_once('.') {
                    Some((s, sub)) => (s.to_ascii_lowercase(), Some(sub.to_ascii_lowercase())),
                    None => (name.trim().to_ascii_lowercase(), None),
                },
            };
            rest = after.trim();
        }
        if rest.is_empty() || rest.starts_with(['#', ';']) || section.is_empty() {
            continue;
        }
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k.trim(), Some(unquote(v))),
            None => (rest.trim(), None),
        };
        out.push(Entry {
            section: section.clone(),
            subsection: subsection.clone(),
            key: key.to_ascii_lowercase(),
            value,
        });
    }
    out
}

/// A value as git reads it: an unquoted `#` or `;` starts a comment, quotes go, `\x` is `x`
/// (`\t`, `\n` as such).
fn unquote(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some(c) => out.push(c),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// `GIT_CONFIG_COUNT`'s entries (`GIT_CONFIG_KEY_<n>`, `GIT_CONFIG_VALUE_<n>`).
fn from_environment(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<Entry> {
    let vars: Vec<(OsString, OsString)> = vars.collect();
    let get = |k: &str| {
        vars.iter()
            .find(|(key, _)| key == k)
            .and_then(|(_, v)| v.to_str())
    };
    let Some(count) = get("GIT_CONFIG_COUNT").and_then(|c| c.trim().parse::<usize>().ok()) else {
        return Vec::new();
    };
    (0..count.min(1024))
        .filter_map(|i| {
            let key = get(&format!("GIT_CONFIG_KEY_{i}"))?;
            let value = get(&format!("GIT_CONFIG_VALUE_{i}"))?;
            // `section.sub.key`: the subsection is what lies between the first and last dot.
            let (section, rest) = key.split_once('.')?;
            let (subsection, key) = match rest.rsplit_once('.') {
                Some((sub, k)) => (Some(sub.to_string()), k),
                None => (None, rest),
            };
            Some(Entry {
                section: section.to_ascii_lowercase(),
                subsection,
                key: key.to_ascii_lowercase(),
                value: Some(value.to_string()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(section: &str, sub: Option<&str>, key: &str, value: &str) -> Entry {
        Entry {
            section: section.into(),
            subsection: sub.map(Into::into),
            key: key.into(),
            value: Some(value.into()),
        }
    }

    #[test]
    fn a_configuration_is_read_as_git_reads_it() {
        let text = b"[user]\n\tname = A\n[core]\n\thooksPath = first\n\
                     [core] HooksPath = \"./.githooks/\" ; a comment\n\
                     [diff \"Pdf\"]\n\ttextconv = ./tools/pdf.sh \\\n  --plain\n\
                     [branch.Main]\n\tremote = origin\n\tbare\n";
        assert_eq!(
            parse(text),
            [
                entry("user", None, "name", "A"),
                entry("core", None, "hookspath", "first"),
                entry("core", None, "hookspath", "./.githooks/"),
                entry("diff", Some("Pdf"), "textconv", "./tools/pdf.sh   --plain"),
                entry("branch", Some("main"), "remote", "origin"),
                Entry {
                    section: "branch".into(),
                    subsection: Some("main".into()),
                    key: "bare".into(),
                    value: None
                },
            ]
        );
    }

    #[test]
    fn commands_name_their_program_only_by_path() {
        let program = |s: &str, sub: Option<&str>, k: &str, v: &str| {
            entry(s, sub, k, v)
                .programs(v)
                .first()
                .map(|p| p.to_string())
        };
        assert_eq!(
            program("diff", Some("pdf"), "textconv", "./tools/pdf.sh --plain").as_deref(),
            Some("./tools/pdf.sh")
        );
        assert_eq!(
            program("alias", None, "st", "!scripts/st.sh -s").as_deref(),
            Some("scripts/st.sh")
        );
        assert_eq!(
            program("core", None, "fsmonitor", "/p/proj/.fsmon").as_deref(),
            Some("/p/proj/.fsmon")
        );
        assert_eq!(program("alias", None, "st", "status -s"), None);
        assert_eq!(
            entry("alias", None, "t", "!").programs("!bash scripts/t.sh && node ./x.js"),
            ["scripts/t.sh", "./x.js"]
        );
        assert_eq!(program("core", None, "pager", "less -R"), None);
        assert_eq!(program("core", None, "fsmonitor", "true"), None);
        assert_eq!(program("credential", None, "helper", "store"), None);
        assert_eq!(program("diff", None, "textconv", "./x"), None);
        assert_eq!(program("user", None, "name", "./x"), None);
    }

    #[test]
    fn a_path_becomes_a_project_path_only_inside_the_project() {
        let root = Path::new("/home/me/proj");
        let place = Place {
            root,
            home: Some(Path::new("/home/me")),
        };
        let rel = |v: &str| place.resolve(&unquote(v), root);
        assert_eq!(rel(".githooks").as_deref(), Some(".githooks"));
        assert_eq!(rel("\"./tools/../hooks/\"").as_deref(), Some("hooks"));
        assert_eq!(rel("/home/me/proj/ci/hooks").as_deref(), Some("ci/hooks"));
        assert_eq!(rel("~/proj/h").as_deref(), Some("h"));
        assert_eq!(rel("~/dotfiles/hooks"), None);
        assert_eq!(rel("/etc/git-hooks"), None);
        assert_eq!(rel("../shared-hooks"), None);
        assert_eq!(rel("."), None);
        assert_eq!(
            place
                .resolve("../tools/gitconfig", &root.join(".git"))
                .as_deref(),
            Some("tools/gitconfig")
        );
    }

    #[test]
    fn the_environments_configuration_is_read_with_its_subsections() {
        let vars = [
            ("GIT_CONFIG_COUNT", "2"),
            ("GIT_CONFIG_KEY_0", "core.hooksPath"),
            ("GIT_CONFIG_VALUE_0", "a"),
            ("GIT_CONFIG_KEY_1", "diff.My.Tool.textconv"),
            ("GIT_CONFIG_VALUE_1", "./b"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        assert_eq!(
            from_environment(vars.into_iter()),
            [
                entry("core", None, "hookspath", "a"),
                entry("diff", Some("My.Tool"), "textconv", "./b"),
            ]
        );
    }
}
