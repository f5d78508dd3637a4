//! The I/O edge of registry detection: read the project's manifests and lockfiles and the
//! host's package configuration, hand their contents to `envgit_policy::registries`.

use std::path::{Path, PathBuf};

use envgit_policy::registries::{self, HostFile, Wanted};

use crate::nofollow::read_nofollow;

/// Larger files are skipped: no manifest or lockfile a registry serves is this big.
const MAX_BYTES: u64 = 64 << 20;

/// Project files read besides every top-level `requirements*.txt`.
const PROJECT_FILES: &[&str] = &[
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    ".npmrc",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "Pipfile",
    "Pipfile.lock",
    "uv.lock",
    "Cargo.toml",
    "Cargo.lock",
    ".cargo/config.toml",
    ".cargo/config",
    "go.mod",
    "Gemfile",
    "Gemfile.lock",
    ".git/config",
];

/// Every registry host the project and the host's configuration ask for, merged.
pub fn wanted(root: &Path) -> Vec<Wanted> {
    let mut all = registries::from_project(&project_files(root));
    let env: Vec<(String, String)> = std::env::vars().collect();
    all.extend(registries::from_host(&host_files(), &env));
    registries::merge(all)
}

fn project_files(root: &Path) -> Vec<(String, String)> {
    let mut names: Vec<String> = PROJECT_FILES.iter().map(|s| s.to_string()).collect();
    if let Ok(dir) = std::fs::read_dir(root) {
        let mut reqs: Vec<String> = dir
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.starts_with("requirements") && n.ends_with(".txt"))
            .collect();
        reqs.sort();
        names.extend(reqs);
    }
    names
        .into_iter()
        .filter_map(|n| {
            // A symlinked `.cargo` or `.git` directory is not followed either.
            let parent_ok = Path::new(&n).parent().is_none_or(|p| {
                p.as_os_str().is_empty()
                    || root
                        .join(p)
                        .symlink_metadata()
                        .is_ok_and(|m| m.file_type().is_dir())
            });
            let text = parent_ok.then(|| read_text(&root.join(&n))).flatten()?;
            Some((n, text))
        })
        .collect()
}

/// The user's own npm, pip and cargo configuration, shown with `~` for the home directory.
fn host_files() -> Vec<(HostFile, String, String)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let in_home = |rel: &str| home.as_ref().map(|h| h.join(rel));
    let xdg = var("XDG_CONFIG_HOME").or_else(|| in_home(".config"));
    let cargo_home = var("CARGO_HOME").or_else(|| in_home(".cargo"));
    let candidates: Vec<(HostFile, Option<PathBuf>)> = vec![
        (HostFile::Npmrc, var("NPM_CONFIG_USERCONFIG")),
        (HostFile::Npmrc, in_home(".npmrc")),
        (HostFile::PipConf, var("PIP_CONFIG_FILE")),
        (HostFile::PipConf, xdg.map(|x| x.join("pip/pip.conf"))),
        (HostFile::PipConf, in_home(".pip/pip.conf")),
        (HostFile::PipConf, Some("/etc/pip.conf".into())),
        (HostFile::PipConf, Some("/etc/xdg/pip/pip.conf".into())),
        (
            HostFile::CargoConfig,
            cargo_home.as_ref().map(|c| c.join("config.toml")),
        ),
        (HostFile::CargoConfig, cargo_home.map(|c| c.join("config"))),
    ];
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for (kind, path) in candidates {
        let Some(path) = path else { continue };
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        if let Some(text) = read_text(&path) {
            out.push((kind, shown(&path, home.as_deref()), text));
        }
    }
    out
}

fn shown(path: &Path, home: Option<&Path>) -> String {
    match home.and_then(|h| path.strip_prefix(h).ok()) {
        Some(rel) => format!("~/{}", rel.display()),
        None => path.display().to_string(),
    }
}

/// A regular file's text, not following a symlink; None if absent, too big or not UTF-8.
fn read_text(path: &Path) -> Option<String> {
    let meta = path.symlink_metadata().ok()?;
    if !meta.file_type().is_file() || meta.len() > MAX_BYTES {
        return None;
    }
    String::from_utf8(read_nofollow(path).ok()?).ok()
}
