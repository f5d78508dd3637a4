//! One request, one view. hyper parses each request once (HTTP/1 or HTTP/2) into method,
//! target, headers and a decoded body; this module refuses what that form cannot say
//! unambiguously (framing, target, `Connection`, authority), and builds what goes upstream from
//! that same form — never from the client's bytes. The upstream leg is framed by the gate
//! (hyper writes `Content-Length` or chunked for the body it is given).

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Uri, Version};

use crate::head;

/// Hop-by-hop headers (RFC 9110 §7.6.1, RFC 9113 §8.2.2) and the old proxy ones: the gate's
/// own business on each leg, never forwarded either way. The one list, for both protocols
/// and both directions.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "http2-settings",
];

/// Headers that ask for a method other than the request line's (Rails, Express, ASP.NET and
/// others honour them): the policy judges the request as every method they name.
pub(crate) const METHOD_OVERRIDE_HEADERS: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Headers that name the path a server routes the request by instead of its own (IIS's URL
/// Rewrite sets `X-Original-URL`; frameworks that trust a front proxy read both): the policy
/// judges the request at every path they name.
pub(crate) const PATH_OVERRIDE_HEADERS: &[&str] = &["x-original-url", "x-rewrite-url"];

/// Where a request came from, as far as its form goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Http1,
    Http2,
}

/// Why a request is refused as malformed (shown to the client, recorded with
/// [`crate::rules::RULE_MALFORMED`]).
#[derive(Debug)]
pub(crate) struct Malformed {
    pub(crate) why: String,
    /// The request names another host than the connection's (`421`, rule
    /// `gate.host-mismatch`) rather than being unreadable.
    pub(crate) misdirected: bool,
}

fn malformed(why: impl Into<String>) -> Malformed {
    Malformed {
        why: why.into(),
        misdirected: false,
    }
}

/// What the judgement reads off an accepted request.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// The origin-form target (`/path?query`) exactly as it will be sent upstream.
    pub(crate) origin: String,
    /// The `Host` value to send to an HTTP/1 upstream: the client's own spelling, checked to
    /// name the connection's target.
    pub(crate) host_value: String,
    /// Every method named by an override header (see [`METHOD_OVERRIDE_HEADERS`]).
    pub(crate) method_overrides: Vec<String>,
    /// Every path named by a path-override header (see [`PATH_OVERRIDE_HEADERS`]), its query
    /// cut off.
    pub(crate) path_overrides: Vec<String>,
    /// Every `Content-Encoding` line joined as one list, as a server reads the field.
    pub(crate) content_encoding: Option<String>,
    /// The `Content-Type` (one value: two that disagree are refused; `None` when not text).
    pub(crate) content_type: Option<String>,
    /// An `Upgrade: websocket` request.
    pub(crate) websocket: bool,
    /// The origin-form target a WebDAV `Destination` header names (`MOVE`, `COPY`): where
    /// the request writes, judged as its path is. It must name this connection's host.
    pub(crate) destination: Option<String>,
}

/// Checks one request against the connection's target `host:port`; the form that passes is
/// the one judged and the one forwarded.
pub(crate) fn accept(
    proto: Proto,
    method: &Method,
    uri: &Uri,
    version: Version,
    headers: &HeaderMap,
    host: &str,
    port: u16,
) -> Result<Accepted, Malformed> {
    if *method == Method::CONNECT {
        return Err(malformed("CONNECT inside a tunnel is not supported"));
    }
    let origin = check_target(uri)?;
    check_framing(proto, version, headers)?;
    check_connection(headers)?;
    let host_value = check_authority(proto, uri, version, headers, host, port)?;
    check_underscored_body_fields(headers)?;
    let method_overrides = method_overrides(headers)?;
    let path_overrides = path_overrides(headers)?;
    let content_encoding = content_encoding(headers)?;
    let content_type = content_type(headers)?;
    let websocket = upgrade_is_websocket(headers);
    let destination = destination(headers, host, port)?;
    Ok(Accepted {
        origin,
        host_value,
        method_overrides,
        path_overrides,
        content_encoding,
        content_type,
        websocket,
        destination,
    })
}

/// The target of a WebDAV `Destination` header (RFC 4918 §10.3: an absolute URI, or a path
/// servers take relative to the request's host), read as the request's own target is. One
/// header at most; one naming another host than the connection's is misdirected.
fn destination(headers: &HeaderMap, host: &str, port: u16) -> Result<Option<String>, Malformed> {
    let values: Vec<&HeaderValue> = headers.get_all("destination").iter().collect();
    let value = match values.as_slice() {
        [] => return Ok(None),
        [one] => one
            .to_str()
            .map_err(|_| malformed("a Destination that is not ASCII"))?,
        _ => return Err(malformed("more than one Destination header")),
    };
    let uri: Uri = value
        .trim()
        .parse()
        .map_err(|_| malformed("a Destination that is not a URI"))?;
    if let Some(authority) = uri.authority()
        && !head::parse_authority(authority.as_str(), Some(port))
            .is_some_and(|(h, p)| h == host && p == port)
    {
        return Err(Malformed {
            why: format!(
                "this connection goes to {}; a Destination naming another host is refused",
                head::authority(host, port)
            ),
            misdirected: true,
        });
    }
    check_target(&uri).map(Some)
}

/// The request target (RFC 9112 §3.2): origin form, or absolute form with `http`/`https`;
/// no fragment (hyper's parser cuts one, and the cut form is what is judged and sent), no
/// backslash, no `%00`, nothing but visible ASCII.
fn check_target(uri: &Uri) -> Result<String, Malformed> {
    if let Some(scheme) = uri.scheme_str()
        && !scheme.eq_ignore_ascii_case("http")
        && !scheme.eq_ignore_ascii_case("https")
    {
        return Err(malformed(format!("the scheme {scheme:?} is not http")));
    }
    let Some(pq) = uri.path_and_query() else {
        return Err(malformed("the target has no path"));
    };
    let origin = pq.as_str();
    if !origin.starts_with('/') {
        return Err(malformed("the target is neither origin nor absolute form"));
    }
    if let Some(bad) = origin
        .bytes()
        .find(|b| !b.is_ascii_graphic() || matches!(b, b'\\' | b'#'))
    {
        return Err(malformed(format!(
            "the target holds the byte 0x{bad:02x}, which servers read differently"
        )));
    }
    if origin.to_ascii_lowercase().contains("%00") {
        return Err(malformed("the target holds %00"));
    }
    Ok(origin.to_owned())
}

/// One framing only: `Content-Length` (all copies equal) or exactly `Transfer-Encoding:
/// chunked`, never both (RFC 9112 §6.1: a proxy must not forward such a message as is).
fn check_framing(proto: Proto, version: Version, headers: &HeaderMap) -> Result<(), Malformed> {
    let te: Vec<&HeaderValue> = headers.get_all("transfer-encoding").iter().collect();
    let cl: Vec<&HeaderValue> = headers.get_all("content-length").iter().collect();
    if !te.is_empty() {
        if proto == Proto::Http2 || version == Version::HTTP_10 {
            return Err(malformed("Transfer-Encoding is not allowed here"));
        }
        let chunked_only = te.len() == 1
            && te[0]
                .as_bytes()
                .trim_ascii()
                .eq_ignore_ascii_case(b"chunked");
        if !chunked_only {
            return Err(malformed("only `Transfer-Encoding: chunked` is supported"));
        }
        if !cl.is_empty() {
            return Err(malformed("both Transfer-Encoding and Content-Length"));
        }
    }
    let mut length = None;
    for value in cl {
        let text = value.as_bytes();
        if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
            return Err(malformed("a malformed Content-Length"));
        }
        if length.is_some_and(|l: &[u8]| l != text) {
            return Err(malformed("conflicting Content-Length headers"));
        }
        length = Some(text);
    }
    Ok(())
}

/// `Connection` may name hop-by-hop headers and `close`/`keep-alive`; naming any other header
/// the request carries would have the gate drop a header the judgement (or the framing)
/// relied on, so it is refused rather than stripped.
fn check_connection(headers: &HeaderMap) -> Result<(), Malformed> {
    for token in connection_tokens(headers) {
        if token == "close" || token == "keep-alive" || HOP_BY_HOP.contains(&token.as_str()) {
            continue;
        }
        if headers.contains_key(token.as_str()) {
            return Err(malformed(format!(
                "`Connection` names the header {token}, which the gate does not remove"
            )));
        }
    }
    Ok(())
}

fn connection_tokens(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("connection")
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every authority the request names must be the connection's target: the absolute-form
/// authority or HTTP/2's `:authority`, and each `Host` header (exactly one on HTTP/1.1).
/// Returns the `Host` value to send upstream.
fn check_authority(
    proto: Proto,
    uri: &Uri,
    version: Version,
    headers: &HeaderMap,
    host: &str,
    port: u16,
) -> Result<String, Malformed> {
    let names_target = |text: &str| {
        head::parse_authority(text.trim(), Some(port)).is_some_and(|(h, p)| h == host && p == port)
    };
    let misdirected = || Malformed {
        why: format!(
            "this connection goes to {}; a request naming another host is refused",
            head::authority(host, port)
        ),
        misdirected: true,
    };
    let uri_authority = uri.authority().map(|a| a.as_str().to_owned());
    if let Some(a) = &uri_authority
        && !names_target(a)
    {
        return Err(misdirected());
    }
    let hosts: Vec<&HeaderValue> = headers.get_all("host").iter().collect();
    for value in &hosts {
        match value.to_str() {
            Ok(v) if names_target(v) => {}
            _ => return Err(misdirected()),
        }
    }
    match (proto, hosts.as_slice(), uri_authority) {
        (Proto::Http1, [one], _) => Ok(one.to_str().unwrap_or_default().to_owned()),
        (Proto::Http1, [], Some(a)) if version == Version::HTTP_10 => Ok(a),
        (Proto::Http1, [], None) if version == Version::HTTP_10 => Ok(default_host(host, port)),
        (Proto::Http1, [], _) => Err(malformed("HTTP/1.1 needs one Host header")),
        (Proto::Http1, _, _) => Err(malformed("more than one Host header")),
        (Proto::Http2, _, Some(a)) => Ok(a),
        (Proto::Http2, [one], None) => Ok(one.to_str().unwrap_or_default().to_owned()),
        (Proto::Http2, _, None) => Err(malformed("no :authority")),
    }
}

fn default_host(host: &str, port: u16) -> String {
    if port == 80 {
        host.to_owned()
    } else {
        head::authority(host, port)
    }
}

/// Whether the header `name` is the field `field` to some server: one that hands headers to
/// the application as CGI variables (WEBrick, PHP's own server, Puma before it dropped them)
/// reads `X_Api_Key` as `X-Api-Key`, so `_` counts as `-`, in any case.
pub(crate) fn names_field(name: &str, field: &str) -> bool {
    let fold = |b: u8| {
        if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        }
    };
    name.len() == field.len()
        && name
            .bytes()
            .zip(field.bytes())
            .all(|(n, f)| fold(n) == fold(f))
}

/// The fields that say how to read the body, which the rules read too: a server handing
/// headers over as CGI variables may take `Content_Encoding` for `Content-Encoding`, another
/// ignores it, and reading the body one way is not reading it the other (a gzip body's header
/// may hold a form the raw reading finds). Such a spelling is refused, not guessed.
fn check_underscored_body_fields(headers: &HeaderMap) -> Result<(), Malformed> {
    for name in headers.keys().map(HeaderName::as_str) {
        if !name.contains('_') {
            continue;
        }
        if let Some(field) = ["content-encoding", "content-type"]
            .into_iter()
            .find(|f| names_field(name, f))
        {
            return Err(malformed(format!(
                "a {name} header, which a server may read as {field} or not at all"
            )));
        }
    }
    Ok(())
}

/// Every line of the header `name` (however a server reads its name: [`names_field`]), each as
/// text: a line that is not is malformed (`shown` is the header's name as said).
fn text_lines<'h>(
    headers: &'h HeaderMap,
    name: &str,
    shown: &str,
) -> Result<Vec<&'h str>, Malformed> {
    headers
        .iter()
        .filter(|(n, _)| names_field(n.as_str(), name))
        .map(|(_, value)| {
            value
                .to_str()
                .map_err(|_| malformed(format!("a malformed {shown}")))
        })
        .collect()
}

fn method_overrides(headers: &HeaderMap) -> Result<Vec<String>, Malformed> {
    let mut out = Vec::new();
    for name in METHOD_OVERRIDE_HEADERS {
        for text in text_lines(headers, name, name)? {
            for m in text.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                out.push(m.to_ascii_uppercase());
            }
        }
    }
    Ok(out)
}

fn path_overrides(headers: &HeaderMap) -> Result<Vec<String>, Malformed> {
    let mut out = Vec::new();
    for name in PATH_OVERRIDE_HEADERS {
        for text in text_lines(headers, name, name)? {
            let path = text.split_once('?').map_or(text, |(path, _)| path).trim();
            out.push(path.to_owned());
        }
    }
    Ok(out)
}

/// `Content-Encoding` is a list (RFC 9110 §8.4): its lines are one field, `identity` then
/// `gzip` a gzip body. The rule reads the body decoded by all of them.
fn content_encoding(headers: &HeaderMap) -> Result<Option<String>, Malformed> {
    let codings = text_lines(headers, "content-encoding", "Content-Encoding")?;
    Ok((!codings.is_empty()).then(|| codings.join(", ")))
}

/// `Content-Type` holds one value; servers read two lines differently (the first, the last,
/// or both joined), and the rules that read a form or a packument by it would read one of
/// them: two that disagree are refused.
fn content_type(headers: &HeaderMap) -> Result<Option<String>, Malformed> {
    let mut values = headers.get_all("content-type").iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.any(|v| v != first) {
        return Err(malformed(
            "two Content-Type headers that disagree (a server may read either)",
        ));
    }
    // Not text: read as no type at all, so a POST's body is still read as a form might be.
    Ok(first.to_str().ok().map(str::to_owned))
}

fn upgrade_is_websocket(headers: &HeaderMap) -> bool {
    headers.get_all("upgrade").iter().any(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("websocket"))
    }) && connection_tokens(headers).iter().any(|t| t == "upgrade")
}

/// The headers that go upstream with a request: the client's, minus hop-by-hop headers, the
/// ones `Connection` names, `Host` (set per protocol by the caller), `Expect` (the gate
/// answers `100 Continue` itself), the framing (the gate frames the body) and envgit's own.
pub(crate) fn upstream_request_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = end_to_end(headers);
    for name in ["host", "expect", "content-length"] {
        out.remove(name);
    }
    out
}

/// The headers that go back to the client with a response: hop-by-hop ones removed (the
/// gate frames the response on the client's leg); `Content-Length` stays (a `HEAD` answer
/// and a `304` carry it without a body).
pub(crate) fn client_response_headers(headers: &HeaderMap) -> HeaderMap {
    end_to_end(headers)
}

fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let named = connection_tokens(headers);
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) || named.iter().any(|t| t == n) || n.starts_with("x-envgit-") {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// Adds the two headers an upgrade to WebSocket needs on the upstream leg.
pub(crate) fn add_websocket_upgrade(headers: &mut HeaderMap) {
    headers.insert(
        HeaderName::from_static("connection"),
        HeaderValue::from_static("upgrade"),
    );
    headers.insert(
        HeaderName::from_static("upgrade"),
        HeaderValue::from_static("websocket"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (n, v) in pairs {
            map.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn check(proto: Proto, target: &str, pairs: &[(&str, &str)]) -> Result<Accepted, Malformed> {
        let uri: Uri = target.parse().unwrap();
        accept(
            proto,
            &Method::POST,
            &uri,
            Version::HTTP_11,
            &headers(pairs),
            "example.com",
            443,
        )
    }

    #[test]
    fn a_destination_is_read_as_a_target_of_this_host() {
        let host = ("host", "example.com");
        let dest = |value: &str| check(Proto::Http1, "/a", &[host, ("destination", value)]);
        assert_eq!(
            dest("https://example.com/r.git/refs/heads/main")
                .unwrap()
                .destination
                .as_deref(),
            Some("/r.git/refs/heads/main")
        );
        assert_eq!(
            dest("/b?x=1").unwrap().destination.as_deref(),
            Some("/b?x=1")
        );
        assert!(dest("https://other.example/b").unwrap_err().misdirected);
        assert!(!dest("/b\\c").unwrap_err().misdirected);
        let two = check(
            Proto::Http1,
            "/a",
            &[host, ("destination", "/b"), ("destination", "/c")],
        );
        assert!(two.is_err());
        assert_eq!(
            check(Proto::Http1, "/a", &[host]).unwrap().destination,
            None
        );
    }

    #[test]
    fn a_plain_request_is_accepted_as_sent() {
        let a = check(
            Proto::Http1,
            "/a%2fb//c?q=1",
            &[("host", "Example.com:443")],
        )
        .unwrap();
        assert_eq!(a.origin, "/a%2fb//c?q=1");
        assert_eq!(a.host_value, "Example.com:443");
        assert!(a.method_overrides.is_empty() && !a.websocket);
    }

    #[test]
    fn ambiguous_framing_and_connection_are_refused() {
        let h = ("host", "example.com:443");
        for pairs in [
            vec![h, ("connection", "content-length"), ("content-length", "3")],
            vec![h, ("connection", "host")],
            vec![
                h,
                ("connection", "x-http-method-override"),
                ("x-http-method-override", "DELETE"),
            ],
            vec![h, ("transfer-encoding", "chunked"), ("content-length", "3")],
            vec![h, ("transfer-encoding", "gzip, chunked")],
            vec![
                h,
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
            vec![h, ("content-length", "3"), ("content-length", "4")],
            vec![h, ("content-length", "+3")],
            vec![h, h],
            vec![],
            vec![("host", "other.com:443")],
        ] {
            assert!(check(Proto::Http1, "/", &pairs).is_err(), "{pairs:?}");
        }
        // Naming headers that are not there, or hop-by-hop ones, is harmless.
        let ok = [
            h,
            ("connection", "keep-alive, TE, x-absent"),
            ("te", "trailers"),
        ];
        assert!(check(Proto::Http1, "/", &ok).is_ok());
    }

    #[test]
    fn targets_servers_read_differently_are_refused() {
        let h = [("host", "example.com:443")];
        for target in ["/a\\b", "/a%00b", "/a%00", "*"] {
            let uri = target.parse::<Uri>();
            if let Ok(uri) = uri {
                let got = accept(
                    Proto::Http1,
                    &Method::GET,
                    &uri,
                    Version::HTTP_11,
                    &headers(&h),
                    "example.com",
                    443,
                );
                assert!(got.is_err(), "{target}");
            }
        }
        // hyper's parser cuts a fragment off: what is judged is what is sent.
        let cut: Uri = "/x/git-receive-pack#x".parse().unwrap();
        assert_eq!(
            cut.path_and_query().unwrap().as_str(),
            "/x/git-receive-pack"
        );
    }

    #[test]
    fn http2_authority_and_host_must_agree() {
        let uri: Uri = "https://example.com/x".parse().unwrap();
        let got = |pairs: &[(&str, &str)]| {
            accept(
                Proto::Http2,
                &Method::GET,
                &uri,
                Version::HTTP_2,
                &headers(pairs),
                "example.com",
                443,
            )
        };
        assert!(got(&[]).is_ok());
        assert!(got(&[("host", "example.com")]).is_ok());
        assert!(got(&[("host", "api.github.com")]).is_err());
    }

    #[test]
    fn overrides_and_websockets_are_read() {
        let a = check(
            Proto::Http1,
            "/",
            &[
                ("host", "example.com:443"),
                ("x-http-method-override", "delete"),
                ("x-method-override", "PUT, PATCH"),
            ],
        )
        .unwrap();
        assert_eq!(a.method_overrides, ["DELETE", "PUT", "PATCH"]);
        let w = check(
            Proto::Http1,
            "/",
            &[
                ("host", "example.com:443"),
                ("connection", "Upgrade"),
                ("upgrade", "websocket"),
            ],
        )
        .unwrap();
        assert!(w.websocket);
    }

    /// Spelled with underscores, as a server handing headers over as CGI variables reads
    /// them: overrides are read all the same; the fields that say how to read the body are
    /// refused.
    #[test]
    fn fields_spelled_with_underscores() {
        let a = check(
            Proto::Http1,
            "/",
            &[
                ("host", "example.com:443"),
                ("x_http_method_override", "delete"),
                ("x-original_url", "/b"),
            ],
        )
        .unwrap();
        assert_eq!(a.method_overrides, ["DELETE"]);
        assert_eq!(a.path_overrides, ["/b"]);
        for name in ["content_encoding", "content_type"] {
            let got = check(
                Proto::Http1,
                "/",
                &[("host", "example.com:443"), (name, "gzip")],
            );
            assert!(
                got.as_ref().is_err_and(|m| m.why.contains(name)),
                "{name}: {:?}",
                got.map(|a| a.content_encoding)
            );
        }
        assert!(names_field("X_Api_Key", "x-api-key"));
        assert!(names_field("private-token", "PRIVATE_TOKEN"));
        assert!(!names_field("x-api-keys", "x-api-key"));
    }

    #[test]
    fn one_hop_by_hop_list_both_ways() {
        let h = headers(&[
            ("host", "x"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("proxy-authorization", "Basic x"),
            ("x-envgit-token", "t"),
            ("content-length", "3"),
            ("expect", "100-continue"),
            ("accept", "*/*"),
        ]);
        let up = upstream_request_headers(&h);
        let names: Vec<&str> = up.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["accept"]);
        let down = client_response_headers(&h);
        assert!(down.contains_key("content-length") && !down.contains_key("proxy-authorization"));
    }
}
