//! What the person's shell loads from the project at every prompt there, through the project's
//! own configuration of a tool they trusted once: direnv's `.envrc`, mise's `mise.toml`. The
//! configuration itself is protected; but direnv and mise read the files it names afresh at
//! every prompt (direnv asks to allow `.envrc` again only when `.envrc` changes, mise trusts a
//! configuration by its path), and put the directories it names first on `PATH`. So the files
//! are protected like the configuration, and the directories are checked after each step like
//! the person's own `PATH` ([`crate::path_shadow`]).

mod direnv;
mod mise;

use std::path::{Component, Path};

use crate::nofollow::read_beneath;

/// The project paths (relative, '/'-separated) the person's prompt loads.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct PromptLoads {
    /// Files it runs or reads variables from, and nix-direnv's cache of the shell it built
    /// (`.direnv/*.rc`, sourced at the prompt while fresh).
    pub files: Vec<String>,
    /// Directories it puts first on `PATH`.
    pub path_dirs: Vec<String>,
}

/// mise's project configuration files (see `envgit_policy::PROTECTED_PATHS`).
const MISE_CONFIGS: &[&str] = &[
    "mise.toml",
    "mise.local.toml",
    ".mise.toml",
    ".mise.local.toml",
    ".config/mise.toml",
    ".config/mise/config.toml",
    ".mise/config.toml",
    "mise/config.toml",
];

/// What the prompt loads in the project at `root`. A secret it loads (`dotenv`'s `.env`) that
/// exists is left out: the sandbox masks it, so a step cannot write it, and its content stays
/// out of the pre-step copy.
pub(crate) fn of(root: &Path) -> PromptLoads {
    let mut loads = PromptLoads::default();
    if let Ok(bytes) = read_beneath(root, ".envrc") {
        let found = direnv::parse(&String::from_utf8_lossy(&bytes), |rel| {
            root.join(rel).is_dir()
        });
        loads.merge(found);
    }
    for config in MISE_CONFIGS {
        if let Ok(bytes) = read_beneath(root, config) {
            loads.merge(mise::parse(&String::from_utf8_lossy(&bytes)));
        }
    }
    loads.files.retain(|f| {
        let name = f.rsplit('/').next().unwrap_or(f);
        !(envgit_policy::is_secret_name(name.as_bytes()) && root.join(f).symlink_metadata().is_ok())
    });
    loads
}

impl PromptLoads {
    fn merge(&mut self, other: PromptLoads) {
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
