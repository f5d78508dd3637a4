//! The host part of a registry URL, without userinfo, path or credentials.

/// `https://user:tok@npm.example.com:8443/path` → `npm.example.com:8443`; the default port of
/// the scheme is dropped. `sparse+`/`registry+`/`git+` prefixes are accepted. None for
/// anything that is not an http(s) URL with a plausible host.
pub fn host_of(url: &str) -> Option<String> {
    let url = url.trim().trim_matches(|c| c == '"' || c == '\'');
    let url = ["sparse+", "registry+", "git+"]
        .iter()
        .find_map(|p| url.strip_prefix(p))
        .unwrap_or(url);
    let (scheme, rest) = url.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    // Userinfo (`user:password@`) is dropped: it is a credential, never written anywhere.
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (h, Some(p)),
        _ => (hostport, None),
    };
    let host = host.to_ascii_lowercase();
    let ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
    if !ok {
        return None;
    }
    match port {
        Some(p) if p == default_port || p.is_empty() => Some(host),
        Some(p) if p.chars().all(|c| c.is_ascii_digit()) => Some(format!("{host}:{p}")),
        Some(_) => None,
        None => Some(host),
    }
}

/// Every http(s) URL's host in `text`, in order.
pub fn hosts_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("http") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ')' | '>'))
            .unwrap_or(tail.len());
        if let Some(h) = host_of(&tail[..end]) {
            out.push(h);
        }
        rest = &tail[end.max(4)..];
    }
    out
}
