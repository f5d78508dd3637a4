//! Property: whatever request head and body a client sends (methods, targets from a safe
//! alphabet with `%xx` escapes, arbitrary end-to-end headers, no body, a `Content-Length`
//! body or a chunked one cut at random), the gate does not panic, and either refuses it with
//! `400`/`421` before anything goes upstream, or the upstream's bytes — parsed here with
//! httparse and a strict chunked decoder — say the same method, target, end-to-end headers
//! and decoded body.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;

const TARGET_CHARS: &[u8] = b"abcxyzABCXYZ0189-._~!$&'()*+,;=:@/";
const NAME_CHARS: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+.^_`|~-";
const VALUE_CHARS: &[u8] =
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

#[derive(Debug, Clone)]
enum Framing {
    None,
    Length,
    /// The body cut at these offsets (sorted, deduplicated), each chunk maybe with an
    /// extension.
    Chunked(Vec<usize>, bool),
}

#[derive(Debug, Clone)]
struct Req {
    method: &'static str,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    framing: Framing,
}

fn target() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => proptest::sample::select(TARGET_CHARS).prop_map(|b| (b as char).to_string()),
        1 => any::<u8>().prop_map(|b| format!("%{b:02x}")),
        1 => any::<u8>().prop_map(|b| format!("%{b:02X}")),
    ];
    (
        proptest::collection::vec(piece.clone(), 0..40),
        proptest::option::of(proptest::collection::vec(piece, 0..20)),
    )
        .prop_map(|(path, query)| {
            let mut t = format!("/{}", path.concat());
            if let Some(q) = query {
                t.push('?');
                t.push_str(&q.concat());
            }
            t
        })
}

fn header() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        proptest::sample::select(vec![
            "Accept",
            "accept-language",
            "Content-Type",
            "User-Agent",
            "Authorization",
            "Cookie",
            "X-Request-Id",
            "If-None-Match",
            "Cache-Control",
            "Origin",
        ])
        .prop_map(str::to_owned),
        proptest::collection::vec(proptest::sample::select(NAME_CHARS), 1..20).prop_map(|n| {
            let n = String::from_utf8(n).unwrap();
            // envgit's own headers are never forwarded: none is generated.
            if n.to_ascii_lowercase().starts_with("envgit") {
                format!("Y-{n}")
            } else {
                format!("X-{n}")
            }
        }),
    ];
    let value =
        proptest::collection::vec(proptest::sample::select(VALUE_CHARS), 0..60).prop_map(|v| {
            // Parsers trim the whitespace around a value: none is generated there.
            String::from_utf8(v)
                .unwrap()
                .trim_matches([' ', '\t'])
                .to_owned()
        });
    (name, value)
}

fn request() -> impl Strategy<Value = Req> {
    let method = proptest::sample::select(vec![
        "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND", "MKCOL",
    ]);
    let body = proptest::collection::vec(any::<u8>(), 0..3000);
    (
        method,
        target(),
        proptest::collection::vec(header(), 0..12),
        body,
        0..3u8,
        proptest::collection::vec(any::<usize>(), 0..6),
        any::<bool>(),
    )
        .prop_map(|(method, target, headers, body, f, cuts, ext)| {
            let framing = match f {
                0 if body.is_empty() => Framing::None,
                0 | 1 => Framing::Length,
                _ => {
                    let mut cuts: Vec<usize> = cuts
                        .into_iter()
                        .map(|c| c % (body.len() + 1))
                        .filter(|&c| c > 0 && c < body.len())
                        .collect();
                    cuts.sort_unstable();
                    cuts.dedup();
                    Framing::Chunked(cuts, ext)
                }
            };
            Req {
                method,
                target,
                headers,
                body,
                framing,
            }
        })
}

impl Req {
    fn bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "{} {} HTTP/1.1\r\nHost: example.com\r\n",
            self.method, self.target
        )
        .into_bytes();
        for (n, v) in &self.headers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        match &self.framing {
            Framing::None => out.extend_from_slice(b"\r\n"),
            Framing::Length => {
                out.extend_from_slice(
                    format!("Content-Length: {}\r\n\r\n", self.body.len()).as_bytes(),
                );
                out.extend_from_slice(&self.body);
            }
            Framing::Chunked(cuts, ext) => {
                out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                let mut at = 0;
                for end in cuts.iter().copied().chain([self.body.len()]) {
                    if end > at {
                        let e = if *ext { ";a=b" } else { "" };
                        out.extend_from_slice(format!("{:x}{e}\r\n", end - at).as_bytes());
                        out.extend_from_slice(&self.body[at..end]);
                        out.extend_from_slice(b"\r\n");
                    }
                    at = end;
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
        }
        out
    }

    /// The end-to-end headers, as (lower-case name, value), sorted.
    fn end_to_end(&self) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .collect();
        h.sort();
        h
    }
}

/// A strict chunked decoder: the body and the bytes it took, once complete.
fn dechunk(all: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut b = all;
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..line]).ok()?;
        let size_text = size_text.split(';').next()?;
        assert!(
            !size_text.is_empty() && size_text.bytes().all(|c| c.is_ascii_hexdigit()),
            "the gate sent the chunk size {size_text:?}"
        );
        let size = usize::from_str_radix(size_text, 16).ok()?;
        b = &b[line + 2..];
        if size == 0 {
            // No trailers from the gate: the blank line.
            if b.len() < 2 {
                return None;
            }
            assert!(b.starts_with(b"\r\n"), "trailers upstream");
            return Some((out, all.len() - b.len() + 2));
        }
        if b.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&b[..size]);
        assert_eq!(&b[size..size + 2], b"\r\n", "a chunk not ended by CRLF");
        b = &b[size + 2..];
    }
}

/// What the upstream read, parsed: method, target, headers (lower-case names), body, and
/// how many bytes the request took.
type Parsed = (String, String, Vec<(String, String)>, Vec<u8>, usize);

/// Parses a complete request; `None` while more bytes are needed.
fn parse(seen: &[u8]) -> Option<Parsed> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(seen).expect("the upstream got a malformed head") {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => return None,
    };
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8(h.value.to_vec()).unwrap(),
            )
        })
        .collect();
    let rest = &seen[head_len..];
    let get = |n: &str| headers.iter().filter(|(k, _)| k == n).collect::<Vec<_>>();
    let te = get("transfer-encoding");
    let cl = get("content-length");
    assert!(
        te.is_empty() || cl.is_empty(),
        "both framings upstream: {headers:?}"
    );
    let (body, body_len) = if let [(_, v)] = te.as_slice() {
        assert_eq!(v, "chunked");
        dechunk(rest)?
    } else if let [(_, v)] = cl.as_slice() {
        let n: usize = v.parse().unwrap();
        if rest.len() < n {
            return None;
        }
        (rest[..n].to_vec(), n)
    } else {
        assert!(
            te.is_empty() && cl.is_empty(),
            "repeated framing upstream: {headers:?}"
        );
        (Vec::new(), 0)
    };
    Some((
        req.method.unwrap().to_owned(),
        req.path.unwrap().to_owned(),
        headers,
        body,
        head_len + body_len,
    ))
}

/// An upstream that reads one request to its end (parsed) and answers 200, then reads on
/// until the gate closes the connection; hands back every byte it read.
pub(super) async fn capturing_upstream() -> (TcpStream, oneshot::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            if !seen.is_empty()
                && std::panic::catch_unwind(|| parse(&seen))
                    .map(|p| p.is_some())
                    .unwrap_or(true)
            {
                break;
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await;
        // Whatever else comes before the gate closes this connection is past the request.
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(seen);
    });
    (TcpStream::connect(addr).await.unwrap(), rx)
}

const LIMIT: Duration = Duration::from_secs(30);

async fn check(sh: &Arc<Shared>, req: &Req) -> Result<(), TestCaseError> {
    let (up, seen) = capturing_upstream().await;
    let (mut near, far) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(serve(far, conn(sh, Proto::Http1, 80, up)));
    let bytes = req.bytes();
    let client = async {
        near.write_all(&bytes).await.unwrap();
        near.shutdown().await.unwrap();
        let mut reply = Vec::new();
        near.read_to_end(&mut reply).await.unwrap();
        reply
    };
    let reply = tokio::time::timeout(LIMIT, client)
        .await
        .map_err(|_| TestCaseError::fail("no answer in time"))?;
    let served = tokio::time::timeout(LIMIT, server)
        .await
        .map_err(|_| TestCaseError::fail("the connection did not end"))?;
    prop_assert!(
        !served.as_ref().is_err_and(tokio::task::JoinError::is_panic),
        "the gate panicked"
    );
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let status = reply.get(9..12).unwrap_or_default().to_owned();
    let seen = tokio::time::timeout(LIMIT, seen)
        .await
        .map_err(|_| TestCaseError::fail("the upstream never finished"))?
        .unwrap_or_default();
    // Two `Content-Type`s that disagree are refused as malformed (servers read either).
    let types: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.as_str())
        .collect();
    let refusable =
        req.target.to_ascii_lowercase().contains("%00") || types.iter().any(|t| *t != types[0]);
    match status.as_str() {
        "400" | "421" => {
            prop_assert!(refusable, "refused a plain request: {reply}");
            prop_assert!(
                seen.is_empty(),
                "refused, yet the upstream saw {:?}",
                String::from_utf8_lossy(&seen)
            );
        }
        // The policy's own refusal (a random `PUT` whose body opens like a packument it
        // cannot read is a publish it cannot rule out): refused whole, naming its rule.
        "403" => {
            prop_assert!(
                reply.contains("x-envgit-decision: deny; rule="),
                "a 403 that names no rule: {reply}"
            );
            prop_assert!(
                seen.is_empty(),
                "refused, yet the upstream saw {:?}",
                String::from_utf8_lossy(&seen)
            );
        }
        "200" => {
            prop_assert!(!refusable, "let %00 through");
            let (method, target, headers, body, took) = parse(&seen).unwrap_or_else(|| {
                panic!(
                    "an unfinished request upstream: {:?}",
                    String::from_utf8_lossy(&seen)
                )
            });
            prop_assert_eq!(method, req.method);
            prop_assert_eq!(&target, &req.target);
            let hosts: Vec<&(String, String)> =
                headers.iter().filter(|(n, _)| n == "host").collect();
            let want = ("host".to_owned(), "example.com".to_owned());
            prop_assert_eq!(hosts, vec![&want]);
            let mut end_to_end: Vec<(String, String)> = headers
                .into_iter()
                .filter(|(n, _)| {
                    !matches!(n.as_str(), "host" | "content-length" | "transfer-encoding")
                })
                .collect();
            end_to_end.sort();
            prop_assert_eq!(end_to_end, req.end_to_end());
            prop_assert_eq!(
                took,
                seen.len(),
                "bytes past the request upstream: {:?}",
                String::from_utf8_lossy(&seen)
            );
            prop_assert_eq!(body, req.body.clone());
        }
        _ => prop_assert!(false, "answered {reply}"),
    }
    Ok(())
}

#[test]
fn any_request_is_refused_whole_or_arrives_as_judged() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let mut runner = TestRunner::new(config);
    runner
        .run(&request(), |req| rt.block_on(check(&sh, &req)))
        .unwrap();
    // Every request was judged and recorded (shrinking would add more).
    let events = sh.events.take();
    assert!(events.len() >= cases as usize, "{} events", events.len());
    assert!(events.iter().all(|e| e.host == "example.com"), "{events:?}");
}
