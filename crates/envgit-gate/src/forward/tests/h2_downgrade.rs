//! HTTP/2 requests built to smuggle a second request past the gate when it speaks HTTP/1.1
//! upstream (the "downgrade" attacks: a `content-length` the DATA frames disagree with,
//! `transfer-encoding` in HTTP/2, CR/LF/NUL or upper case in a field, a pseudo-header
//! carrying a request line). They are written frame by frame, since a real HTTP/2 client
//! library refuses to send them, to the gate's own HTTP/2 server; an upstream on loopback
//! keeps every byte it reads until the gate goes quiet.
//!
//! What must hold for each: the upstream sees at most one request, nothing after the end its
//! own framing gives it, and no trace of the smuggled one in its head; a request RFC 9113
//! calls malformed never goes out at all.

use super::*;

const SMUGGLED: &[u8] = b"GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n";

/// HPACK's integer with an `n`-bit prefix (RFC 7541 §5.1), `flags` in the first byte.
fn hpack_int(out: &mut Vec<u8>, flags: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(flags | v as u8);
        return;
    }
    out.push(flags | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of literal fields, never indexed, never Huffman-coded: the bytes go on the
/// wire exactly as given, whatever they are.
fn header_block(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0x00);
        hpack_int(&mut out, 0, 7, name.len());
        out.extend_from_slice(name);
        hpack_int(&mut out, 0, 7, value.len());
        out.extend_from_slice(value);
    }
    out
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// One hostile request: its header fields (pseudo-headers first, as given), DATA frames, and
/// trailers if any.
struct Hostile {
    what: &'static str,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    data: Vec<Vec<u8>>,
    trailers: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// RFC 9113 §8.1.1/§8.2 make it malformed: nothing may go upstream.
    malformed: bool,
}

fn pseudo(method: &[u8], path: &[u8], authority: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (b":method".to_vec(), method.to_vec()),
        (b":scheme".to_vec(), b"https".to_vec()),
        (b":path".to_vec(), path.to_vec()),
        (b":authority".to_vec(), authority.to_vec()),
    ]
}

fn post(extra: &[(&[u8], &[u8])], data: &[&[u8]], malformed: bool, what: &'static str) -> Hostile {
    let mut fields = pseudo(b"POST", b"/upload", b"example.com");
    fields.extend(extra.iter().map(|(n, v)| (n.to_vec(), v.to_vec())));
    Hostile {
        what,
        fields,
        data: data.iter().map(|d| d.to_vec()).collect(),
        trailers: None,
        malformed,
    }
}

fn with_smuggled(prefix: &[u8]) -> Vec<u8> {
    [prefix, SMUGGLED].concat()
}

fn cases() -> Vec<Hostile> {
    let cl_short = with_smuggled(b"hello");
    let te_end = with_smuggled(b"0\r\n\r\n");
    let mut v = vec![
        post(
            &[(b"content-length", b"5")],
            &[&cl_short],
            true,
            "H2.CL: a content-length shorter than the DATA",
        ),
        post(
            &[(b"content-length", b"0")],
            &[SMUGGLED],
            true,
            "H2.CL: content-length 0 and DATA",
        ),
        post(
            &[(b"content-length", b"500")],
            &[b"hello"],
            true,
            "a content-length longer than the DATA",
        ),
        post(
            &[(b"content-length", b"5"), (b"content-length", b"50")],
            &[&cl_short],
            true,
            "two content-lengths that disagree",
        ),
        post(
            &[(b"transfer-encoding", b"chunked")],
            &[&te_end],
            true,
            "H2.TE: transfer-encoding chunked",
        ),
        post(
            &[
                (b"content-length", b"50"),
                (b"transfer-encoding", b"chunked"),
            ],
            &[&te_end],
            true,
            "H2.TE beside a content-length",
        ),
        post(
            &[(b"connection", b"keep-alive")],
            &[b"hi"],
            true,
            "a connection header",
        ),
        post(
            &[(b"keep-alive", b"timeout=5")],
            &[b"hi"],
            true,
            "a keep-alive header",
        ),
        post(
            &[(b"proxy-connection", b"keep-alive")],
            &[b"hi"],
            true,
            "a proxy-connection header",
        ),
        post(&[(b"upgrade", b"h2c")], &[b"hi"], true, "an upgrade header"),
        post(
            &[(b"te", b"gzip")],
            &[b"hi"],
            true,
            "te other than trailers",
        ),
        post(
            &[(b"x-a", b"b\r\ntransfer-encoding: chunked")],
            &[&te_end],
            true,
            "CRLF in a field value",
        ),
        post(
            &[(b"x-a", b"b\ntransfer-encoding: chunked")],
            &[&te_end],
            true,
            "LF in a field value",
        ),
        post(
            &[(b"x-a", b"b\rtransfer-encoding: chunked")],
            &[&te_end],
            true,
            "CR in a field value",
        ),
        post(&[(b"x-a", b"b\0c")], &[b"hi"], true, "NUL in a field value"),
        post(
            &[(b"x-a\r\ntransfer-encoding", b"chunked")],
            &[&te_end],
            true,
            "CRLF in a field name",
        ),
        post(
            &[(b"Transfer-Encoding", b"chunked")],
            &[&te_end],
            true,
            "an upper-case field name",
        ),
        post(
            &[(b"transfer-encoding ", b"chunked")],
            &[&te_end],
            true,
            "a space in a field name",
        ),
        post(
            &[(b"transfer-encoding:", b"chunked")],
            &[&te_end],
            true,
            "a colon in a field name",
        ),
        post(&[(b"", b"x")], &[b"hi"], true, "an empty field name"),
        post(
            &[(b":smuggle", b"x")],
            &[b"hi"],
            true,
            "an unknown pseudo-header",
        ),
    ];
    // A pseudo-header after a regular field, and pseudo-headers that carry a request line.
    let mut late = post(
        &[(b"x-a", b"b")],
        &[b"hi"],
        true,
        "a pseudo-header after a regular field",
    );
    late.fields.push((b":path".to_vec(), b"/smuggled".to_vec()));
    late.fields.remove(2);
    v.push(late);
    for (what, method, path, authority) in [
        (
            "a request line in :path",
            &b"GET"[..],
            &b"/a HTTP/1.1\r\nHost: example.com\r\n\r\nGET /smuggled"[..],
            &b"example.com"[..],
        ),
        ("a space in :path", b"GET", b"/a /smuggled", b"example.com"),
        (
            "a :path that is not origin-form",
            b"GET",
            b"smuggled",
            b"example.com",
        ),
        (
            "a request line in :method",
            b"GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\nGET",
            b"/",
            b"example.com",
        ),
        ("a space in :method", b"GET /smuggled", b"/", b"example.com"),
        (
            "CRLF in :authority",
            b"GET",
            b"/",
            b"example.com\r\nX-Smuggled: 1",
        ),
        (
            "userinfo in :authority",
            b"GET",
            b"/",
            b"smuggled@example.com",
        ),
    ] {
        v.push(Hostile {
            what,
            fields: pseudo(method, path, authority),
            data: Vec::new(),
            trailers: None,
            malformed: true,
        });
    }
    // Trailers are fields too: the same bytes there must not reach an HTTP/1 upstream's
    // framing either.
    for (what, name, value) in [
        (
            "CRLF in a trailer",
            &b"x-t"[..],
            &b"v\r\n\r\nGET /smuggled HTTP/1.1"[..],
        ),
        ("a content-length trailer", b"content-length", b"0"),
        (
            "a transfer-encoding trailer",
            b"transfer-encoding",
            b"chunked",
        ),
    ] {
        let mut t = post(
            &[(b"content-type", b"application/octet-stream")],
            &[b"hi"],
            false,
            what,
        );
        t.trailers = Some(vec![(name.to_vec(), value.to_vec())]);
        v.push(t);
    }
    v
}

/// How long any one wait of this harness may take.
const BOUND: Duration = Duration::from_secs(20);

/// Reads the gate's frames until stream 1 ends (its last frame, a reset or the connection's
/// `GOAWAY`), or the gate closes.
async fn until_the_stream_ends(near: &mut tokio::io::DuplexStream) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let mut at = 0;
        while at + 9 <= got.len() {
            let len = usize::from(got[at]) << 16
                | usize::from(got[at + 1]) << 8
                | usize::from(got[at + 2]);
            let (kind, flags) = (got[at + 3], got[at + 4]);
            let stream = u32::from_be_bytes([got[at + 5], got[at + 6], got[at + 7], got[at + 8]])
                & 0x7fff_ffff;
            if at + 9 + len > got.len() {
                break;
            }
            let ends = match kind {
                DATA | HEADERS => stream == 1 && flags & END_STREAM != 0,
                0x3 => stream == 1,
                0x7 => true,
                _ => false,
            };
            if ends {
                return;
            }
            at += 9 + len;
        }
        match tokio::time::timeout(BOUND, near.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
}

/// Sends `h` on stream 1 of a fresh HTTP/2 connection to the gate; what the upstream read.
async fn send(sh: &Arc<Shared>, h: &Hostile) -> Vec<u8> {
    // Every byte the upstream reads until the gate's connection ends.
    let (up, seen) = super::prop::capturing_upstream().await;
    let (mut near, far) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(serve(far, conn(sh, Proto::Http2, 443, up)));
    let fields: Vec<(&[u8], &[u8])> = h
        .fields
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect();
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    wire.extend(frame(0x4, 0, 0, &[]));
    let ends_with_headers = h.data.is_empty() && h.trailers.is_none();
    let flags = END_HEADERS | if ends_with_headers { END_STREAM } else { 0 };
    wire.extend(frame(HEADERS, flags, 1, &header_block(&fields)));
    for (i, d) in h.data.iter().enumerate() {
        let last = i + 1 == h.data.len() && h.trailers.is_none();
        wire.extend(frame(DATA, if last { END_STREAM } else { 0 }, 1, d));
    }
    if let Some(t) = &h.trailers {
        let t: Vec<(&[u8], &[u8])> = t
            .iter()
            .map(|(n, v)| (n.as_slice(), v.as_slice()))
            .collect();
        wire.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &header_block(&t),
        ));
    }
    near.write_all(&wire).await.unwrap();
    until_the_stream_ends(&mut near).await;
    // The gate's connection ends, and with it its upstream's: everything the gate wrote
    // upstream for this request is in `seen` once the upstream reads its end.
    drop(near);
    server.abort();
    tokio::time::timeout(BOUND, seen)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// Where the first request in `seen` ends by its own framing (`Content-Length` or chunked;
/// neither means no body), and its head as text. `None` when the head or a chunk size does
/// not parse (then nothing after it could be read as a request either, and the head is
/// checked as bytes).
fn first_request_end(seen: &[u8]) -> Option<(usize, String)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(seen).ok()? {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return None,
    };
    let head = String::from_utf8_lossy(&seen[..head_len]).into_owned();
    let value = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if value("transfer-encoding").is_some_and(|te| te == "chunked") {
        let mut at = head_len;
        loop {
            let line_end = at + seen[at..].windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&seen[at..line_end]).ok()?;
            let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
            at = line_end + 2;
            if size == 0 {
                // Trailers, then the blank line.
                let end = at + seen[at..].windows(2).position(|w| w == b"\r\n")?;
                let mut t = at;
                let mut e = end;
                while e != t {
                    t = e + 2;
                    e = t + seen[t..].windows(2).position(|w| w == b"\r\n")?;
                }
                return Some((e + 2, head));
            }
            at += size + 2;
            if at > seen.len() {
                return Some((seen.len(), head));
            }
        }
    }
    let len: usize = value("content-length").map_or(Some(0), |v| v.parse().ok())?;
    Some(((head_len + len).min(seen.len()), head))
}

#[tokio::test]
async fn http2_requests_built_to_smuggle_a_second_http1_request_are_refused() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let mut failures = Vec::new();
    for h in cases() {
        let seen = send(&sh, &h).await;
        let text = String::from_utf8_lossy(&seen).into_owned();
        if h.malformed && !seen.is_empty() {
            failures.push(format!(
                "{}: malformed, yet the upstream read {text:?}",
                h.what
            ));
            continue;
        }
        if seen.is_empty() {
            continue;
        }
        match first_request_end(&seen) {
            Some((end, head)) => {
                if head.to_ascii_lowercase().contains("smuggled") {
                    failures.push(format!("{}: the head went upstream as {head:?}", h.what));
                }
                if end < seen.len() {
                    failures.push(format!(
                        "{}: after the first request the upstream read {:?}",
                        h.what,
                        String::from_utf8_lossy(&seen[end..])
                    ));
                }
            }
            None => failures.push(format!(
                "{}: the upstream read an unreadable {text:?}",
                h.what
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The gate judged only what went out: a malformed request is not a request it made.
    for e in sh.events.take() {
        assert_ne!(e.path, "/smuggled", "{e:?}");
    }
}

/// The harness itself: a well-formed HTTP/2 POST with a body and a trailer goes out as one
/// HTTP/1.1 request the parser above reads to its end (so an empty `seen` above means the
/// gate refused, not that this test cannot see).
#[tokio::test]
async fn a_well_formed_http2_post_goes_out_as_one_http1_request() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let h = post(
        &[
            (b"content-type", b"application/octet-stream"),
            (b"content-length", b"5"),
        ],
        &[b"hel", b"lo"],
        false,
        "well formed",
    );
    let seen = send(&sh, &h).await;
    let (end, head) = first_request_end(&seen).expect("one request");
    assert!(head.starts_with("POST /upload HTTP/1.1\r\n"), "{head}");
    assert_eq!(end, seen.len(), "{}", String::from_utf8_lossy(&seen));
    assert!(
        seen.ends_with(b"hello"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    let mut t = post(
        &[(b"content-type", b"application/octet-stream")],
        &[b"hi"],
        false,
        "trailer",
    );
    t.trailers = Some(vec![(b"x-t".to_vec(), b"v".to_vec())]);
    let seen = send(&sh, &t).await;
    let (end, head) = first_request_end(&seen).expect("one request");
    assert!(head.starts_with("POST /upload HTTP/1.1\r\n"), "{head}");
    assert_eq!(end, seen.len(), "{}", String::from_utf8_lossy(&seen));
}

/// The reader of the upstream's bytes finds what a smuggled request would leave: bytes after
/// the first request's own end, by length and by chunks.
#[test]
fn the_reader_finds_bytes_after_the_first_request() {
    let by_length = [
        &b"POST /a HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello"[..],
        SMUGGLED,
    ]
    .concat();
    assert_eq!(
        first_request_end(&by_length).unwrap().0,
        by_length.len() - SMUGGLED.len()
    );
    let chunked = [
        &b"POST /a HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nx-t: v\r\n\r\n"[..],
        SMUGGLED,
    ]
    .concat();
    assert_eq!(
        first_request_end(&chunked).unwrap().0,
        chunked.len() - SMUGGLED.len()
    );
    let bodiless = [
        &b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
        SMUGGLED,
    ]
    .concat();
    assert_eq!(
        first_request_end(&bodiless).unwrap().0,
        bodiless.len() - SMUGGLED.len()
    );
}
