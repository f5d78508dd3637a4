//! The first request head of a relay connection (parsed with httparse, for the token and the
//! CONNECT or absolute-form target), and authorities.

use std::time::Duration;

/// Upper bound of one request or response head.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// How long a client may take to send a request head.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_HEADERS: usize = 128;

#[derive(Debug, Clone)]
pub(crate) struct RequestHead {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl RequestHead {
    pub(crate) fn parse(bytes: &[u8]) -> Option<RequestHead> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(bytes) {
            Ok(httparse::Status::Complete(n)) if n == bytes.len() => {}
            _ => return None,
        }
        Some(RequestHead {
            method: req.method?.to_owned(),
            target: req.path?.to_owned(),
            headers: req
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect(),
        })
    }

    pub(crate) fn header(&self, name: &str) -> Option<&[u8]> {
        header(&self.headers, name)
    }

    pub(crate) fn count(&self, name: &str) -> usize {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    }
}

pub(crate) fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
}

/// `host:port`, `[v6]:port`, or (with a default port) just `host` / `[v6]`. Host names are
/// limited to `[A-Za-z0-9._-]` and lower-cased; IPv6 literals come back without brackets.
pub(crate) fn parse_authority(text: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        v6.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (v6.to_owned(), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        };
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !ok {
            return None;
        }
        (host.to_ascii_lowercase(), port)
    };
    let port = match port {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
        None => default_port?,
    };
    if port == 0 {
        return None;
    }
    Some((host, port))
}

/// Formats an authority back (`host:port`, brackets around IPv6).
pub(crate) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An absolute-form target `http://authority/path?query`: (host, port, origin-form target).
pub(crate) fn parse_absolute(target: &str) -> Option<(String, u16, String)> {
    let scheme_end = target.find("://")?;
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(split);
    let (host, port) = parse_authority(auth, Some(80))?;
    let path = path.split('#').next().unwrap_or("");
    let origin = match path {
        "" => "/".to_owned(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_owned(),
    };
    Some((host, port, origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities() {
        type Row = (&'static str, Option<u16>, Option<(&'static str, u16)>);
        let rows: &[Row] = &[
            ("example.com:443", None, Some(("example.com", 443))),
            ("Example.COM", Some(80), Some(("example.com", 80))),
            ("example.com", None, None),
            ("[::1]:5432", None, Some(("::1", 5432))),
            ("[::1]", Some(80), Some(("::1", 80))),
            ("[nope]:1", None, None),
            ("a b:1", None, None),
            ("user@host:1", None, None),
            ("host:0", None, None),
            ("host:99999", None, None),
            ("host:", None, None),
            ("host:1x", None, None),
            ("ho\r\nst:1", None, None),
        ];
        for (text, default, want) in rows {
            let got = parse_authority(text, *default);
            let want = want.map(|(h, p)| (h.to_owned(), p));
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn absolute_targets() {
        assert_eq!(
            parse_absolute("http://Example.com/a/b?q=1#frag"),
            Some(("example.com".into(), 80, "/a/b?q=1".into()))
        );
        assert_eq!(
            parse_absolute("HTTP://h:8080"),
            Some(("h".into(), 8080, "/".into()))
        );
        assert_eq!(
            parse_absolute("http://h?x"),
            Some(("h".into(), 80, "/?x".into()))
        );
        assert_eq!(parse_absolute("https://h/"), None);
        assert_eq!(parse_absolute("/relative"), None);
        assert_eq!(parse_absolute("http://u:p@h/"), None);
    }

    #[test]
    fn heads_parse_whole_only() {
        let r = RequestHead::parse(b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n").unwrap();
        assert_eq!((r.method.as_str(), r.target.as_str()), ("CONNECT", "a:443"));
        assert!(RequestHead::parse(b"GET / HTTP/1.1\r\n").is_none());
    }
}
