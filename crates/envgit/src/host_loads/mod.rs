//! What the person's own tools load from the project through its configuration of a tool they
//! trusted once: direnv's `.envrc` and mise's `mise.toml` at every prompt in the project,
//! lefthook's configuration at every commit. The configuration itself is protected; but these
//! tools read the files it names afresh each time (direnv asks to allow `.envrc` again only
//! when `.envrc` changes, mise trusts a configuration by its path, lefthook's hook was
//! installed once), and direnv and mise put the directories it names first on `PATH`. So the
//! files are protected like the configuration, and the directories are checked after each
//! step like the person's own `PATH` ([`crate::path_shadow`]). The person's own environment
//! is such a configuration too: the project files its variables name ([`environment`]).

mod direnv;
mod environment;
mod lefthook;
mod mise;
mod mise_trust;

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use crate::nofollow::read_beneath_at;

/// The project paths (relative, '/'-separated) the person's tools load.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct HostLoads {
    /// Files it runs or reads variables from, and nix-direnv's cache of the shell it built
    /// (`.direnv/*.rc`, sourced at the prompt while fresh).
    pub files: Vec<String>,
    /// Directories it puts first on `PATH`.
    pub path_dirs: Vec<String>,
}

/// lefthook's configuration files, in each format (see `envgit_policy::PROTECTED_PATHS`).
const LEFTHOOK_CONFIGS: &[&str] = &[
    "lefthook",
    ".lefthook",
    "lefthook-local",
    ".lefthook-local",
    ".config/lefthook",
    ".config/lefthook-local",
];
const LEFTHOOK_FORMATS: &[&str] = &["yml", "yaml", "toml", "json", "jsonc"];

/// Whether a file a shell file names may be shell code to follow: not a secret (`.env`, read
/// by `dotenv` as data), not what `use flake`/`use nix` name, not nix-direnv's cache.
fn may_be_shell(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let data = [".nix", ".lock", ".yaml", ".yml", ".json", ".toml"];
    !envgit_policy::is_secret_name(name.as_bytes())
        && !data.iter().any(|ext| name.ends_with(ext))
        && !rel.starts_with(".direnv/")
}

/// How deep sourced shell files are followed (`.envrc` → `tools/env.sh` → `tools/more.sh` is
/// three levels).
const SOURCED_LEVELS: usize = 4;

/// The most read of one configuration file: more is not a configuration a person wrote.
const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// What the person's tools load from the project at `root`. A secret it loads (`dotenv`'s
/// `.env`) that exists is left out: the sandbox masks it, so a step cannot write it, and its
/// content stays out of the pre-step copy.
pub(crate) fn of(root: &Path) -> HostLoads {
    let named = environment::named(root, std::env::vars_os());
    let mut loads = HostLoads::default();
    for (rel, _) in &named {
        add_rel(rel.clone(), &mut loads.files);
    }
    let Ok(dir) = envgit_store::beneath::open_root(root) else {
        return loads;
    };
    // One listing of the root: a configuration whose first component is not there is not read.
    let top: HashSet<Vec<u8>> = match std::fs::read_dir(root) {
        Ok(list) => list
            .flatten()
            .map(|e| e.file_name().as_bytes().to_vec())
            .collect(),
        Err(_) => return loads,
    };
    let read = |rel: &str| -> Option<String> {
        let first = rel.split('/').next().unwrap_or(rel);
        if !top.contains(first.as_bytes()) {
            return None;
        }
        let bytes = read_beneath_at(dir.as_fd(), rel, CONFIG_MAX_BYTES).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    };
    // `.envrc`, and a shell's start-up file the environment names (`BASH_ENV`), run what they
    // source; so does what those source, a few levels down. Read like `.envrc`, whose `source`
    // and `.` lines they share.
    let mut shell_code: Vec<String> = vec![".envrc".to_string()];
    shell_code.extend(
        named
            .iter()
            .filter(|(_, var)| environment::is_shell_start_up(var))
            .map(|(rel, _)| rel.clone()),
    );
    let mut level = 0;
    let mut read_already: HashSet<String> = HashSet::new();
    while !shell_code.is_empty() && level < SOURCED_LEVELS {
        let mut sourced: Vec<String> = Vec::new();
        for rel in shell_code.drain(..) {
            if !read_already.insert(rel.clone()) {
                continue;
            }
            if let Some(text) = read(&rel) {
                let found = direnv::parse(&text, |rel| root.join(rel).is_dir());
                sourced.extend(found.files.iter().filter(|f| may_be_shell(f)).cloned());
                loads.merge(found);
            }
        }
        shell_code = sourced;
        level += 1;
    }
    let mise_names = mise::config_names(&mise::environments(std::env::vars_os()));
    // mise's configuration files in a directory it trusts (`""`: the root), `conf.d/`'s too.
    let mise_configs = |base: &str| -> Vec<String> {
        let mut configs: Vec<String> = mise_names.read.iter().map(|c| join(base, c)).collect();
        for conf_d in mise::CONF_D_DIRS {
            let rel = join(base, conf_d);
            // Most projects have none: the root's listing says so without a system call.
            let first = rel.split('/').next().unwrap_or(&rel);
            if top.contains(first.as_bytes()) {
                configs.extend(toml_files_in(dir.as_fd(), &rel));
            }
        }
        configs
    };
    for config in mise_configs("") {
        if let Some(text) = read(&config) {
            loads.merge(mise::parse(&text));
        }
    }
    // mise's configuration at the root is protected by name (`envgit_policy::PROTECTED_PATHS`),
    // but for the names the person's `MISE_ENV` adds under `.config/`.
    for name in &mise_names.protect {
        if !envgit_policy::is_protected(name) {
            add_rel(name.clone(), &mut loads.files);
        }
    }
    // Directories deeper in the project that mise trusts: their configuration (there or not
    // yet: mise would load a new one) and what it loads, relative to that directory.
    let trusted = mise_trust::inside(root);
    for dir in &trusted.dirs {
        for config in mise_configs(dir) {
            if let Some(text) = read(&config) {
                loads.merge(mise::parse(&text).under(dir));
            }
        }
        for name in &mise_names.protect {
            add_rel(join(dir, name), &mut loads.files);
        }
    }
    for file in &trusted.files {
        if let Some(text) = read(file) {
            let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
            loads.merge(mise::parse(&text).under(dir));
        }
        add_rel(file.clone(), &mut loads.files);
    }
    let root_text = root.to_string_lossy();
    for base in LEFTHOOK_CONFIGS {
        for format in LEFTHOOK_FORMATS {
            let name = format!("{base}.{format}");
            if let Some(text) = read(&name) {
                loads.merge(lefthook::parse(&name, &text, &root_text, &read));
            }
        }
    }
    loads.files.retain(|f| {
        let name = f.rsplit('/').next().unwrap_or(f);
        !(envgit_policy::is_secret_name(name.as_bytes()) && root.join(f).symlink_metadata().is_ok())
    });
    loads
}

/// The project files the person's own environment names (see [`environment`]), each with the
/// variable that names it, as `envgit doctor` shows them.
pub(crate) fn named_by_environment(root: &Path) -> Vec<(String, String)> {
    let mut named = environment::named(root, std::env::vars_os());
    // mise's configuration for the person's `MISE_ENV` beyond what is protected by name.
    let mise_names = mise::config_names(&mise::environments(std::env::vars_os()));
    for name in mise_names.protect {
        if !envgit_policy::is_protected(&name) && !named.iter().any(|(p, _)| *p == name) {
            named.push((name, "MISE_ENV".to_string()));
        }
    }
    named
}

impl HostLoads {
    /// The same paths, for a configuration whose paths are relative to the project path
    /// `dir` instead of the root.
    fn under(self, dir: &str) -> HostLoads {
        HostLoads {
            files: self.files.iter().map(|f| join(dir, f)).collect(),
            path_dirs: self
                .path_dirs
                .iter()
                .map(|d| {
                    if d.is_empty() {
                        dir.to_string()
                    } else {
                        join(dir, d)
                    }
                })
                .collect(),
        }
    }

    fn merge(&mut self, other: HostLoads) {
        for f in other.files {
            add_rel(f, &mut self.files);
        }
        for d in other.path_dirs {
            add_rel(d, &mut self.path_dirs);
        }
    }
}

/// Adds `p` (as written in a configuration) to `to` when it is a project path.
fn add(p: &str, to: &mut Vec<String>) {
    if let Some(rel) = in_project(p) {
        add_rel(rel, to);
    }
}

fn add_rel(rel: String, to: &mut Vec<String>) {
    if !to.contains(&rel) {
        to.push(rel);
    }
}

/// The `*.toml` files in the project directory `rel` (none when it is not a directory there),
/// listed without following a link; at most [`MOST_CONF_D_FILES`].
fn toml_files_in(root: BorrowedFd<'_>, rel: &str) -> Vec<String> {
    let Ok(fd) = envgit_store::beneath::open_dir_rel(root, rel.as_bytes()) else {
        return Vec::new();
    };
    let Ok(names) = envgit_store::beneath::read_names(fd.as_fd()) else {
        return Vec::new();
    };
    names
        .iter()
        .filter_map(|n| n.to_str().ok())
        .filter(|n| n.ends_with(".toml"))
        .take(MOST_CONF_D_FILES)
        .map(|n| join(rel, n))
        .collect()
}

/// The most `conf.d` files read in one directory: more is not a configuration a person wrote.
const MOST_CONF_D_FILES: usize = 256;

fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() || dir == "." {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// `p` as written in a configuration (relative to the project root, `$PWD`-based for direnv,
/// `{{config_root}}`-based for mise) as a project path: '/'-separated, no `.` or `..`; `None`
/// for anything else (another variable or template, an absolute path, a path out of the
/// project). The root itself is `""`.
fn in_project(p: &str) -> Option<String> {
    let p = [
        "${PWD}/",
        "$PWD/",
        "\"$PWD\"/",
        "{{config_root}}/",
        "{{ config_root }}/",
    ]
    .iter()
    .find_map(|pre| p.strip_prefix(pre))
    .unwrap_or(p);
    if p.contains('$') || p.contains('`') || p.contains("{{") || p.starts_with(['/', '~']) {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(n) => parts.push(n.to_str()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(parts.join("/"))
}
