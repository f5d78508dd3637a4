//! Checks for the small values policies are made of: hosts, methods, paths, variable names.
//! They catch typos early (a scheme in a host, a path without its leading `/`), nothing more.

use crate::PolicyError;
use crate::node::Node;
use crate::read::{Reader, describe_path};

/// `host`, `host:port`, `[v6]:port`, `*.example.com[:port]`; returned lower-cased.
pub(super) fn host(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
    text: &str,
) -> Result<String, PolicyError> {
    let bad = |why: &str| {
        r.err(
            node,
            format!(
                "invalid host `{text}` in {}: {why}; write `example.com`, `example.com:8443`, \
                 `*.example.com` or `[::1]:5432`",
                describe_path(path)
            ),
        )
    };
    if text.contains("://") {
        return Err(bad("no scheme"));
    }
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']').ok_or_else(|| bad("unclosed `[`"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| bad("expected `:port` after `]`"))?,
            ),
        };
        if addr.is_empty()
            || !addr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(bad("not an IPv6 address"));
        }
        (addr, port)
    } else {
        match text.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(bad("write an IPv6 address in brackets"));
            }
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if let Some(p) = port
        && !matches!(p.parse::<u16>(), Ok(n) if n > 0)
    {
        return Err(bad("the port must be a number from 1 to 65535"));
    }
    if !text.starts_with('[') {
        let body = name.strip_prefix("*.").unwrap_or(name);
        if body.is_empty()
            || body.starts_with('.')
            || body.ends_with('.')
            || body.contains("..")
            || !body
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        {
            let why = if body.contains('*') {
                "`*` is only allowed as the first label (`*.example.com`)"
            } else {
                "a host name has letters, digits, `-`, `_` and dots only"
            };
            return Err(bad(why));
        }
    }
    Ok(text.to_ascii_lowercase())
}

/// An HTTP method, upper-cased so `get` and `GET` are one rule; an unknown one (a typo such as
/// `PSOT`) would never match, so it is an error.
pub(super) fn method(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
    text: &str,
) -> Result<String, PolicyError> {
    let upper = text.to_ascii_uppercase();
    if KNOWN_METHODS.contains(&upper.as_str()) {
        Ok(upper)
    } else {
        Err(r.err(
            node,
            format!(
                "unknown method `{text}` in {}; known methods: {}",
                describe_path(path),
                KNOWN_METHODS.join(", ")
            ),
        ))
    }
}

pub(super) fn url_path(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
    text: &str,
) -> Result<String, PolicyError> {
    if text.starts_with('/') {
        star_glob(r, node, path, text, RULE_GLOB)?;
        Ok(text.to_owned())
    } else {
        Err(r.err(
            node,
            format!(
                "invalid path `{text}` in {}: a path starts with `/` (e.g. `/repos/*/*/issues`, `/**/git-receive-pack`)",
                describe_path(path)
            ),
        ))
    }
}

pub(super) fn env_name(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
    text: &str,
) -> Result<String, PolicyError> {
    let mut chars = text.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(text.to_owned())
    } else {
        Err(r.err(
            node,
            format!(
                "invalid variable name `{text}` in {}; a name has letters, digits and `_`, e.g. `GH_HOST`",
                describe_path(path)
            ),
        ))
    }
}

pub(super) const RULE_GLOB: &str =
    "(only `*` within a segment and `**` across segments are); write one rule per path";

/// The methods a rule may name: HTTP's own and WebDAV's (git over HTTP speaks some of them).
pub(crate) const KNOWN_METHODS: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "OPTIONS",
    "CONNECT",
    "TRACE",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
];

/// A filesystem or gitignore-style glob (`filesystem.*`, `snapshot.exclude`), checked with the
/// same parser the store's matcher uses, so a typo is an error here rather than a pattern
/// that silently matches nothing. gitignore's `!` and trailing `/` are not glob syntax.
pub(super) fn path_glob(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
    text: &str,
) -> Result<(), PolicyError> {
    let pattern = text.strip_prefix('!').unwrap_or(text);
    let pattern = pattern.strip_suffix('/').unwrap_or(pattern);
    match globset::Glob::new(pattern) {
        Ok(_) => Ok(()),
        Err(e) => {
            let fix = match e.kind() {
                globset::ErrorKind::UnclosedClass | globset::ErrorKind::InvalidRange(..) => {
                    "close the `[` or write `[[]` for a literal `[`"
                }
                globset::ErrorKind::UnclosedAlternates
                | globset::ErrorKind::UnopenedAlternates
                | globset::ErrorKind::NestedAlternates => {
                    "close the `{` or write `[{]` for a literal `{`"
                }
                _ => "see the glob syntax in the README's policy reference",
            };
            Err(r.err(
                node,
                format!(
                    "invalid glob `{text}` in {}: {}; {fix}",
                    describe_path(path),
                    e.kind()
                ),
            ))
        }
    }
}

/// A request-rule glob (paths, query and body values) knows only `*` and `**`: `?`, `[` and
/// `{` would be taken literally and match nothing a user meant, so they are refused.
pub(super) fn star_glob(
    r: &Reader<'_>,
    node: &Node,
    path: &str,
    text: &str,
    what: &str,
) -> Result<(), PolicyError> {
    match text
        .chars()
        .find(|c| matches!(c, '?' | '[' | ']' | '{' | '}'))
    {
        None => Ok(()),
        Some(c) => Err(r.err(
            node,
            format!(
                "invalid glob `{text}` in {}: `{c}` is not glob syntax here {what}",
                describe_path(path)
            ),
        )),
    }
}
