//! Hosts the user's own package configuration names: their mirrors and private registries,
//! written active (the user chose them). Only keys that name a registry are read; tokens,
//! passwords and auth lines are never looked at.

use super::Wanted;
use super::url::hosts_in;

/// A host-side configuration file and what kind it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFile {
    /// `~/.npmrc`: `registry=` and `@scope:registry=`.
    Npmrc,
    /// `pip.conf`: `index-url`, `extra-index-url` (continuation lines too), `find-links`.
    PipConf,
    /// `~/.cargo/config.toml`: `[source.*] registry`, `[registries.*] index`.
    CargoConfig,
}

/// Variables that name a registry or mirror, read from the caller's environment.
pub const REGISTRY_VARS: &[&str] = &[
    "NPM_CONFIG_REGISTRY",
    "npm_config_registry",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_INDEX",
    "GOPROXY",
];

/// `files` are `(kind, path as shown to the user, contents)`; `env` is the caller's
/// environment (only registry variables are read, see [`REGISTRY_VARS`]).
pub fn from_host(files: &[(HostFile, String, String)], env: &[(String, String)]) -> Vec<Wanted> {
    let mut out = Vec::new();
    for (kind, path, contents) in files {
        for h in hosts(*kind, contents) {
            out.push(Wanted::new(&h, path, true));
        }
    }
    for (k, v) in env {
        let is_cargo = k.starts_with("CARGO_REGISTRIES_") && k.ends_with("_INDEX");
        if REGISTRY_VARS.contains(&k.as_str()) || is_cargo {
            for h in hosts_in(v) {
                out.push(Wanted::new(&h, &format!("${k}"), true));
            }
        }
    }
    out
}

fn hosts(kind: HostFile, contents: &str) -> Vec<String> {
    entries(kind, contents)
        .iter()
        .flat_map(|(_, v)| hosts_in(v))
        .collect()
}

/// The variables that tell a client the registries a configuration file names, for a
/// sandbox that masks the file (for the tokens beside them) yet should use the same
/// registries: npm's `registry` and `@scope:registry` as `npm_config_registry` and
/// `npm_config_@scope:registry`; pip's `index-url`, `extra-index-url` and `find-links` as
/// `PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL` and `PIP_FIND_LINKS` (a list space-separated). A
/// later setting of the same key wins, as in the clients. Cargo's configuration is not masked:
/// nothing. A value naming a variable (`${NPM_MIRROR}`) is left out: it is not expanded here.
/// A value carrying a credential is returned as it is; refusing it is the caller's part.
pub fn client_vars(kind: HostFile, contents: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in entries(kind, contents) {
        let name = match (kind, k.as_str()) {
            (HostFile::Npmrc, "registry") => "npm_config_registry".to_owned(),
            (HostFile::Npmrc, scoped) if scoped.starts_with('@') => format!("npm_config_{scoped}"),
            (HostFile::PipConf, "index-url") => "PIP_INDEX_URL".to_owned(),
            (HostFile::PipConf, "extra-index-url") => "PIP_EXTRA_INDEX_URL".to_owned(),
            (HostFile::PipConf, "find-links") => "PIP_FIND_LINKS".to_owned(),
            _ => continue,
        };
        let value = v.split_whitespace().collect::<Vec<_>>().join(" ");
        if value.is_empty() || value.contains("${") {
            continue;
        }
        out.retain(|(n, _)| *n != name);
        out.push((name, value));
    }
    out
}

/// The registry-naming `(key, value)` pairs of a file, values unquoted (pip's continuation
/// lines joined to their key's value with a newline). Nothing else is read.
fn entries(kind: HostFile, contents: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut continuing = false;
    for line in contents.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        // pip.conf values continue on indented lines (extra-index-url with several URLs).
        if kind == HostFile::PipConf && continuing && line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                v.push('\n');
                v.push_str(t);
            }
            continue;
        }
        continuing = false;
        let Some((k, v)) = t.split_once('=') else {
            continue;
        };
        let k = k.trim();
        let wanted = match kind {
            HostFile::Npmrc => k == "registry" || k.ends_with(":registry"),
            HostFile::PipConf => {
                let yes = matches!(k, "index-url" | "extra-index-url" | "find-links");
                continuing = yes;
                yes
            }
            HostFile::CargoConfig => matches!(k, "registry" | "index"),
        };
        if wanted {
            let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
            out.push((k.to_owned(), v.to_owned()));
        }
    }
    out
}
