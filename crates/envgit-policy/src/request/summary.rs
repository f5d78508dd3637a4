//! The short human line shown in logs and approval prompts for a matched request: ref updates
//! for a push, `name@version` for a package, the operation for GraphQL. Built from cheap reads
//! of the path and the body prefix; never fails (falls back to `METHOD host/path?query`).

use super::RequestInfo;
use super::graphql;
use super::json::{Doc, entries, parse_doc, value_text};
use super::matchers::parse_query;
use super::payload::{Body, form_fields, multipart_parts};
use super::pktline;

/// Longest summary, in characters.
const MAX_LEN: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Summary {
    /// `METHOD host/path`.
    Request,
    GitPush,
    Lfs,
    Npm,
    Pypi,
    Cargo,
    Oci,
    Gem,
    Graphql,
}

impl Summary {
    /// Does the summary read the body (so the gate should buffer a prefix)?
    pub fn wants_body(self) -> bool {
        !matches!(self, Summary::Request | Summary::Oci)
    }

    /// `method` is how the request's methods are shown (`POST (as DELETE)`).
    pub fn describe(
        self,
        rule_id: &str,
        req: &RequestInfo<'_>,
        method: &str,
        path: &str,
    ) -> String {
        let body = req.body.unwrap_or_default();
        let whole = req.body.filter(|_| req.body_complete);
        // Where a line names the request rather than its effect, it names the query too: the
        // server reads it (`?force=1`), so the person must see it.
        let target = with_query(path, req.query);
        let fallback = || format!("{method} {}{}", req.host, target);
        let line = match self {
            Summary::Request => fallback(),
            Summary::GitPush => git_push(req.host, path, body),
            Summary::Lfs => lfs(rule_id, req.host, path, whole),
            Summary::Npm => npm(rule_id, req, method, path, whole),
            Summary::Pypi => pypi(body, req.body_complete),
            Summary::Cargo => cargo(rule_id, req.method, path, &target, body),
            Summary::Oci => oci(rule_id, req.host, path, &target),
            Summary::Gem => gem(rule_id, path, &target, body, req.body_complete),
            Summary::Graphql => graphql_line(req),
        };
        clean(&line)
    }
}

/// `path?query`, or `path` when there is no query.
pub(crate) fn with_query(path: &str, query: &str) -> String {
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

/// One printable line, at most [`MAX_LEN`] characters.
pub(crate) fn clean(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_control() || crate::is_hiding(c) {
                '?'
            } else {
                c
            }
        })
        .take(MAX_LEN)
        .collect();
    if text.chars().count() > MAX_LEN {
        out.push('…');
    }
    out
}

/// The path before `marker` (`/org/repo.git` for `/org/repo.git/git-receive-pack`).
fn repo<'p>(path: &'p str, marker: &str) -> &'p str {
    let lower = path.to_ascii_lowercase();
    match lower.rfind(marker) {
        Some(at) => &path[..at],
        None => path,
    }
}

fn git_push(host: &str, path: &str, body: &[u8]) -> String {
    let repo = repo(path, "/git-receive-pack");
    match pktline::read_head(body) {
        Ok(head) if !head.commands.is_empty() => {
            format!(
                "git push {host}{repo}: {}",
                pktline::describe(&head.commands)
            )
        }
        Ok(head) if head.signed => format!("git push {host}{repo} (signed)"),
        _ => format!("git push {host}{repo}"),
    }
}

fn lfs(rule_id: &str, host: &str, path: &str, whole: Option<&[u8]>) -> String {
    let repo = repo(path, "/info/lfs/");
    if rule_id.ends_with("lock") {
        return format!("git lfs lock in {host}{repo}");
    }
    let count = whole
        .and_then(|b| parse_doc(b).ok())
        .and_then(|doc| match doc {
            Doc::Object(fields) => {
                entries(&fields, "objects").find_map(|v| v.as_array().map(Vec::len))
            }
            _ => None,
        });
    match count {
        Some(n) => format!("git lfs upload to {host}{repo} ({n} objects)"),
        None => format!("git lfs upload to {host}{repo}"),
    }
}

/// The package name in an npm registry path (`/@scope%2fname/-rev/…` → `@scope/name`), also
/// under a prefix (`/api/v4/projects/1/packages/npm/@scope%2fname`).
fn npm_name(path: &str) -> String {
    let decode = |s: &str| {
        s.replace("%2F", "/")
            .replace("%2f", "/")
            .replace("%40", "@")
    };
    let after = ["/-/package/", "/-/stage/package/"]
        .iter()
        .find_map(|m| path.find(m).map(|at| &path[at + m.len()..]));
    if let Some(rest) = after {
        let mut parts = rest.split('/');
        let first = decode(parts.next().unwrap_or_default());
        return if first.starts_with('@') && !first.contains('/') {
            format!("{first}/{}", parts.next().unwrap_or_default())
        } else {
            first
        };
    }
    // The document path ends before `/-rev/…` or `/-/tarball`.
    let end = ["/-rev/", "/-/"]
        .iter()
        .filter_map(|m| path.find(m))
        .min()
        .unwrap_or(path.len());
    let segs: Vec<String> = path[..end]
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    match segs.as_slice() {
        [.., scope, name] if scope.starts_with('@') && !scope.contains('/') => {
            format!("{scope}/{name}")
        }
        [.., name] => name.clone(),
        [] => String::new(),
    }
}

fn npm(
    rule_id: &str,
    req: &RequestInfo<'_>,
    method: &str,
    path: &str,
    whole: Option<&[u8]>,
) -> String {
    let name = npm_name(path);
    let verb = rule_id.strip_prefix("npm.").unwrap_or(rule_id);
    match verb {
        "publish" => {
            let body = req.body.unwrap_or_default();
            match npm_version(whole, body) {
                Some(v) => format!("npm publish {name}@{v}"),
                None => format!("npm publish {name}"),
            }
        }
        "dist-tag" => {
            let tag = path.rsplit('/').next().unwrap_or_default();
            let version = whole
                .and_then(|b| serde_json::from_slice::<String>(b).ok())
                .map(|v| format!(" → {v}"))
                .unwrap_or_default();
            if req.method.eq_ignore_ascii_case("DELETE") {
                format!("npm dist-tag rm {name} {tag}")
            } else {
                format!("npm dist-tag add {name} {tag}{version}")
            }
        }
        "write" => format!("npm {method} {}{}", req.host, with_query(path, req.query)),
        verb => format!("npm {verb} {name}"),
    }
}

/// The version being published: from `dist-tags` in the (possibly cut) packument.
fn npm_version(whole: Option<&[u8]>, prefix: &[u8]) -> Option<String> {
    if let Some(Ok(Doc::Object(fields))) = whole.map(parse_doc) {
        return entries(&fields, "dist-tags")
            .find_map(|v| v.as_object()?.values().next().map(value_text));
    }
    // `…"dist-tags":{"latest":"1.2.3"…`: npm writes the packument without spaces.
    let text = String::from_utf8_lossy(prefix);
    let after = &text[text.find("\"dist-tags\":{\"")? + 14..];
    let after = &after[after.find("\":\"")? + 3..];
    Some(after[..after.find('"')?].to_owned())
}

/// `PyPI upload name==version: file sha256=digest`: each file of a release is its own
/// upload, and its approval names exactly that file.
fn pypi(body: &[u8], complete: bool) -> String {
    let parts = if body.starts_with(b"--") {
        multipart_parts(body, complete)
            .map(|(p, _)| p)
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let fields = form_fields(body, complete)
        .map(|(f, _)| f)
        .unwrap_or_default();
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut line = match (get("name"), get("version")) {
        (Some(n), Some(v)) => format!("PyPI upload {n}=={v}"),
        (Some(n), None) => format!("PyPI upload {n}"),
        _ => "PyPI upload".to_owned(),
    };
    let file = parts
        .iter()
        .find(|p| p.name.as_deref() == Some("content"))
        .and_then(|p| p.filename.clone());
    if let Some(file) = file {
        line.push_str(&format!(": {file}"));
    }
    if let Some(digest) = get("sha256_digest") {
        line.push_str(&format!(" sha256={}", digest.trim()));
    }
    line
}

fn cargo(rule_id: &str, method: &str, path: &str, target: &str, body: &[u8]) -> String {
    // The registry API may sit under a prefix: read from `api/v1/crates` on.
    let lower = path.to_ascii_lowercase();
    let api = lower.rfind("/api/v1/crates").map_or(path, |at| &path[at..]);
    let segs: Vec<&str> = api.trim_matches('/').split('/').collect();
    match rule_id {
        "crates.publish" => {
            // u32le length, then that much JSON metadata.
            let meta = body.get(..4).and_then(|n| {
                let len = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize;
                let json = body.get(4..4usize.checked_add(len)?)?;
                serde_json::from_slice::<serde_json::Value>(json).ok()
            });
            let field = |k: &str| meta.as_ref()?.get(k)?.as_str().map(str::to_owned);
            match (field("name"), field("vers")) {
                (Some(n), Some(v)) => format!("cargo publish {n}@{v}"),
                _ => "cargo publish".to_owned(),
            }
        }
        "crates.yank" => match segs.as_slice() {
            ["api", "v1", "crates", name, version, verb] => {
                format!("cargo {verb} {name}@{version}")
            }
            _ => format!("cargo yank {target}"),
        },
        "crates.owners" => {
            let name = segs.get(3).copied().unwrap_or_default();
            let users = serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| {
                    let list = v
                        .get("users")?
                        .as_array()?
                        .iter()
                        .filter_map(|u| u.as_str())
                        .collect::<Vec<_>>();
                    Some(list.join(", "))
                })
                .unwrap_or_default();
            let verb = if method.eq_ignore_ascii_case("DELETE") {
                "remove"
            } else {
                "add"
            };
            format!("cargo owner {verb} {name} {users}")
                .trim_end()
                .to_owned()
        }
        _ => format!("crates.io {} {target}", method.to_ascii_uppercase()),
    }
}

fn oci(rule_id: &str, host: &str, path: &str, target: &str) -> String {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let at = |word: &str| segs.iter().rposition(|s| s.eq_ignore_ascii_case(word));
    let name = |end: usize| segs.get(1..end).map(|s| s.join("/")).unwrap_or_default();
    let delete = rule_id.ends_with("delete");
    if let Some(i) = at("manifests") {
        let reference = segs.get(i + 1).copied().unwrap_or_default();
        let sep = if reference.contains(':') { "@" } else { ":" };
        let verb = if delete { "delete" } else { "push" };
        return format!("OCI {verb} {host}/{}{sep}{reference}", name(i));
    }
    if let Some(i) = at("blobs") {
        let verb = if delete {
            "blob delete in"
        } else {
            "blob upload to"
        };
        return format!("OCI {verb} {host}/{}", name(i));
    }
    format!("OCI {host}{target}")
}

fn gem(rule_id: &str, path: &str, target: &str, body: &[u8], complete: bool) -> String {
    match rule_id {
        "rubygems.push" => "gem push".to_owned(),
        "rubygems.yank" => {
            let fields = form_fields(body, complete)
                .map(|(f, _)| f)
                .unwrap_or_default();
            let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            match (get("gem_name"), get("version")) {
                (Some(n), Some(v)) => format!("gem yank {n} {v}"),
                _ => "gem yank".to_owned(),
            }
        }
        "rubygems.owners" => {
            // `…/api/v1/gems/NAME/owners`, under any prefix.
            let name = path
                .trim_matches('/')
                .rsplit('/')
                .nth(1)
                .unwrap_or_default();
            format!("gem owner {name}")
        }
        _ => format!("rubygems.org {target}"),
    }
}

fn graphql_line(req: &RequestInfo<'_>) -> String {
    let host = req.host;
    let body = Body {
        bytes: req.body,
        complete: req.body_complete,
    };
    match graphql::operations(&parse_query(req.query), body, req.content_type) {
        Ok(ops) => {
            let parts: Vec<String> = ops
                .iter()
                .take(3)
                .map(|op| {
                    let kind = match op.kind {
                        crate::GraphqlOperation::Query => "query",
                        crate::GraphqlOperation::Mutation => "mutation",
                        crate::GraphqlOperation::Subscription => "subscription",
                    };
                    let name = op
                        .name
                        .as_deref()
                        .map(|n| format!(" {n}"))
                        .unwrap_or_default();
                    format!("{kind}{name}: {}", op.root_fields.join(", "))
                })
                .collect();
            format!("GraphQL {host} {}", parts.join("; "))
        }
        Err(why) => format!("GraphQL request to {host} (unreadable: {why})"),
    }
}
