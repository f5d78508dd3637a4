//! Hosts the user's own package configuration names: their mirrors and private registries,
//! written active (the user chose them). Only keys that name a registry are read; tokens,
//! passwords and auth lines are never looked at.

use super::Wanted;
use super::url::{host_of, hosts_in};

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
    let mut out = Vec::new();
    let mut continuing = false;
    for line in contents.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        // pip.conf values continue on indented lines (extra-index-url with several URLs).
        if kind == HostFile::PipConf && continuing && line.starts_with([' ', '\t']) {
            out.extend(host_of(t));
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
            out.extend(hosts_in(v));
        }
    }
    out
}
