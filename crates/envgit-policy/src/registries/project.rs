//! Hosts asked for by the project's own files: each ecosystem's public registries (active),
//! and any other host a lockfile or manifest names (commented out: a repository can name its
//! own egress).

use super::Wanted;
use super::url::{host_of, hosts_in};

pub const NPM: &[&str] = &["registry.npmjs.org"];
pub const PYPI: &[&str] = &["pypi.org", "files.pythonhosted.org"];
pub const CARGO: &[&str] = &["index.crates.io", "static.crates.io", "crates.io"];
pub const GO: &[&str] = &["proxy.golang.org", "sum.golang.org"];
pub const RUBYGEMS: &[&str] = &["rubygems.org", "index.rubygems.org"];

/// Which ecosystem a project file belongs to, by its path relative to the project root.
fn ecosystem(path: &str) -> Option<&'static [&'static str]> {
    let name = path.rsplit('/').next().unwrap_or(path);
    Some(match name {
        "package.json"
        | "package-lock.json"
        | "npm-shrinkwrap.json"
        | "yarn.lock"
        | "pnpm-lock.yaml"
        | ".npmrc" => NPM,
        "pyproject.toml" | "setup.py" | "setup.cfg" | "Pipfile" | "Pipfile.lock" | "uv.lock" => {
            PYPI
        }
        n if n.starts_with("requirements") && n.ends_with(".txt") => PYPI,
        "Cargo.toml" | "Cargo.lock" => CARGO,
        "config.toml" | "config" if path.starts_with(".cargo/") => CARGO,
        "go.mod" | "go.sum" => GO,
        "Gemfile" | "Gemfile.lock" => RUBYGEMS,
        _ => return None,
    })
}

/// Lines of `contents` that can name a download host, per file kind. Anything else (a
/// package.json `homepage`, a Cargo.toml `repository`) is not egress the build needs.
fn named_hosts(path: &str, contents: &str) -> Vec<String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let pick = |keys: &[&str]| -> Vec<String> {
        contents
            .lines()
            .filter(|l| keys.iter().any(|k| l.contains(k)))
            .flat_map(hosts_in)
            .collect()
    };
    match name {
        "package-lock.json" | "npm-shrinkwrap.json" => pick(&["\"resolved\""]),
        "yarn.lock" => pick(&["resolved"]),
        "pnpm-lock.yaml" => pick(&["tarball:", "registry"]),
        ".npmrc" => pick(&["registry"]),
        n if n.starts_with("requirements") => pick(&[
            "--index-url",
            "--extra-index-url",
            "-i ",
            "--find-links",
            "-f ",
        ]),
        "Pipfile" | "Pipfile.lock" => pick(&["url"]),
        "uv.lock" | "pyproject.toml" => pick(&["registry", "url", "index"]),
        "Cargo.lock" => pick(&["source = \"registry+", "source = \"sparse+"]),
        "Cargo.toml" | "config.toml" | "config" => pick(&["index", "registry"]),
        "Gemfile" | "Gemfile.lock" => pick(&["source", "remote:"]),
        _ => Vec::new(),
    }
}

/// Every host the project's files ask for. `files` are `(path relative to the root,
/// contents)`; `.git/config` gives the remotes, whose hosts are active for fetches (the
/// clone made them, not the repository's content).
pub fn from_project(files: &[(String, String)]) -> Vec<Wanted> {
    let mut out = Vec::new();
    for (path, contents) in files {
        if path == ".git/config" {
            out.extend(git_remotes(contents));
            continue;
        }
        let Some(public) = ecosystem(path) else {
            continue;
        };
        for h in public {
            out.push(Wanted::new(h, path, true));
        }
        for h in named_hosts(path, contents) {
            let is_public = public.contains(&h.as_str()) || is_npm_alias(public, &h);
            if is_public {
                out.push(Wanted::new(&h, path, true));
            } else {
                out.push(Wanted::new(&h, &format!("named by {path}"), false));
            }
        }
    }
    out
}

/// yarn's lockfiles point at registry.yarnpkg.com, the same registry as registry.npmjs.org.
fn is_npm_alias(public: &[&str], host: &str) -> bool {
    public == NPM && host == "registry.yarnpkg.com"
}

/// `url = https://host/...` lines of `.git/config`: the hosts of https remotes. An ssh
/// remote (`git@host:...`, `ssh://`) is named commented, since port 22 is never reachable.
fn git_remotes(config: &str) -> Vec<Wanted> {
    let mut out = Vec::new();
    for line in config.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if k.trim() != "url" {
            continue;
        }
        let v = v.trim();
        if let Some(h) = host_of(v) {
            out.push(Wanted::new(&h, "git remote (.git/config)", true));
        } else if let Some(h) = ssh_host(v) {
            out.push(Wanted::new(
                &h,
                "git remote over ssh (.git/config): ssh is not reachable inside, use an https remote",
                false,
            ));
        }
    }
    out
}

fn ssh_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("ssh://").unwrap_or(url);
    let (before, _) = rest.split_once([':', '/'])?;
    let host = before.rsplit_once('@').map_or(before, |(_, h)| h);
    let ok = !host.is_empty()
        && host.contains('.')
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'));
    (ok && url.contains('@')).then(|| host.to_ascii_lowercase())
}
