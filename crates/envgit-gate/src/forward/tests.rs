//! The per-request path against a real upstream on loopback (a TCP server that reads one
//! request and answers it), HTTP/1 clients over an in-memory pipe and HTTP/2 clients through
//! hyper's own client.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::*;
use crate::approver::PendingAsk;
use crate::pool::{Opened, Redial, UpstreamError};

const PH: &str = "envgit-placeholder-7f3a";
const SECRET: &str = "sk-ant-real-secret";

/// An upstream that reads until a blank line (and `body_len` more bytes), answers 200, and
/// reports what it read.
async fn upstream(body_len: usize) -> (TcpStream, oneshot::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n")
                && seen.len() >= end + 4 + body_len
            {
                break;
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok")
            .await;
        let _ = tx.send(seen);
    });
    (TcpStream::connect(addr).await.unwrap(), rx)
}

fn no_redial() -> Redial {
    Arc::new(|| {
        Box::pin(async {
            Err::<Opened, _>(UpstreamError::Unreachable(
                "no second upstream in tests".to_owned(),
            ))
        })
    })
}

fn conn(shared: &Arc<Shared>, proto: Proto, port: u16, up: TcpStream) -> Conn {
    Conn {
        shared: Arc::clone(shared),
        host: "example.com".into(),
        port,
        forwarded_https: false,
        https: port == 443,
        proto,
        keep_alive: true,
        pool: Pool::new(Some(Ok((Box::new(up), false))), no_redial()),
    }
}

fn shared_with_credential(port: u16) -> Arc<Shared> {
    let mut sh = Shared::for_tests(&["example.com"]);
    sh.credentials = vec![crate::Credential {
        host: "example.com".into(),
        port,
        placeholder: PH.into(),
        secret: SECRET.into(),
        header: None,
    }];
    Arc::new(sh)
}

/// Sends raw HTTP/1 bytes (then half-closes); what the client got back and what the
/// upstream read within a moment.
async fn h1(sh: &Arc<Shared>, request: &[u8], body_len: usize) -> (String, String) {
    let (up, seen) = upstream(body_len).await;
    let (mut near, far) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(serve(far, conn(sh, Proto::Http1, 80, up)));
    near.write_all(request).await.unwrap();
    near.shutdown().await.unwrap();
    let mut reply = Vec::new();
    near.read_to_end(&mut reply).await.unwrap();
    server.abort();
    let seen = tokio::time::timeout(Duration::from_millis(300), seen)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (
        String::from_utf8_lossy(&reply).into_owned(),
        String::from_utf8_lossy(&seen).into_owned(),
    )
}

#[tokio::test]
async fn the_upstream_gets_the_request_rebuilt_from_what_was_judged() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let (reply, seen) = h1(
        &sh,
        // A typed body no rule reads (an untyped POST could be a form naming `_method`, which
        // the policy reads whole first), so it streams on with the gate's own chunks.
        b"POST /a?b HTTP/1.1\r\nHost: Example.com\r\nConnection: keep-alive\r\nX-Envgit-Token: t\r\n\
          Content-Type: application/octet-stream\r\n\
          Transfer-Encoding: chunked\r\nExpect: 100-continue\r\nX-Custom: 1\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        15,
    )
    .await;
    assert!(
        reply.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"),
        "{reply}"
    );
    assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
    // The gate's own framing of the body it decoded (chunks of its own, as the length was not
    // known), the client's header names as spelled, nothing hop-by-hop, nothing of envgit's.
    assert!(seen.starts_with("POST /a?b HTTP/1.1\r\n"), "{seen}");
    assert!(seen.contains("Host: Example.com\r\n"), "{seen}");
    assert!(seen.contains("X-Custom: 1\r\n"), "{seen}");
    assert!(seen.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{seen}");
    let lower = seen.to_ascii_lowercase();
    for gone in ["x-envgit", "expect", "keep-alive", "content-length"] {
        assert!(!lower.contains(gone), "{gone} went upstream: {seen}");
    }
    assert_eq!(
        lower.matches("transfer-encoding: chunked\r\n").count(),
        1,
        "{seen}"
    );
    let ev = sh.events.take();
    assert_eq!(ev.len(), 1, "{ev:?}");
    // The query is recorded with the path: the server reads both.
    assert_eq!(
        (ev[0].method.as_str(), ev[0].path.as_str()),
        ("POST", "/a?b")
    );
    assert_eq!(
        (ev[0].decision.as_str(), ev[0].status),
        ("allowed", Some(200))
    );
}

#[tokio::test]
async fn requests_naming_another_host_are_misdirected() {
    let sh = Arc::new(Shared::for_tests(&["example.com", "other.com"]));
    for request in [
        &b"GET / HTTP/1.1\r\nHost: other.com\r\n\r\n"[..],
        b"GET http://other.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
    ] {
        let (reply, seen) = h1(&sh, request, 0).await;
        assert!(reply.starts_with("HTTP/1.1 421 "), "{reply}");
        assert!(seen.is_empty(), "the upstream saw {seen:?}");
    }
    for e in sh.events.take() {
        assert_eq!(e.rule.as_deref(), Some(RULE_MISDIRECTED), "{e:?}");
    }
}

#[tokio::test]
async fn a_pipelined_request_is_judged_on_its_own() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let (reply, seen) = h1(
        &sh,
        b"POST /up HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello\
          GET /sneaky HTTP/1.1\r\nHost: other.example\r\n\r\n",
        5,
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(reply.contains("HTTP/1.1 421 "), "{reply}");
    assert!(!seen.contains("sneaky"), "{seen}");
}

#[tokio::test]
async fn framing_a_server_could_read_another_way_is_refused_as_malformed() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    for request in [
        &b"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\nhi"[..],
        b"GET / HTTP/1.1\r\nHost: example.com\r\nConnection: host\r\n\r\n",
        b"GET /a\\b HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"GET /a%00 HTTP/1.1\r\nHost: example.com\r\n\r\n",
    ] {
        let (reply, seen) = h1(&sh, request, 0).await;
        assert!(reply.starts_with("HTTP/1.1 400 "), "{}: {reply}", String::from_utf8_lossy(request));
        assert!(seen.is_empty(), "the upstream saw {seen:?}");
    }
}

/// Chunk framing a lenient reader takes (a sign, an overflowing size) breaks the body: a
/// rule reading it refuses before anything goes out, and a body streaming out is cut and
/// answered `400` (the upstream gets an unfinished request it drops, never a second one).
#[tokio::test]
async fn broken_chunks_end_the_request_with_a_400() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    for chunks in [
        "+2\r\nhi\r\n0\r\n\r\n",
        "ffffffffffffffffff\r\nhi\r\n0\r\n\r\n",
        "2\nhi\n0\n\n",
    ] {
        for path in ["/plain", "/x.git/git-receive-pack"] {
            let request = format!(
                "POST {path} HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}\
                 GET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n"
            );
            let (reply, seen) = h1(&sh, request.as_bytes(), 0).await;
            assert!(
                reply.starts_with("HTTP/1.1 400 "),
                "{chunks:?} {path}: {reply}"
            );
            assert!(reply.contains("rule gate.malformed"), "{reply}");
            assert!(!seen.contains("smuggled"), "{seen}");
            if path.ends_with("receive-pack") {
                assert!(seen.is_empty(), "the upstream saw {seen:?}");
            }
        }
    }
}

/// CL.TE: hyper reads the body by `Transfer-Encoding` alone and ends the connection after the
/// answer (RFC 9112 §6.3), and the upstream gets that reading, framed by the gate: nothing
/// left over to become a request of its own.
#[tokio::test]
async fn both_framings_are_read_by_transfer_encoding_and_the_connection_ends() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let (reply, seen) = h1(
        &sh,
        b"POST /cl-te HTTP/1.1\r\nHost: example.com\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n\
          0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: example.com\r\n\r\n",
        0,
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert_eq!(reply.matches("HTTP/1.1 ").count(), 1, "{reply}");
    assert!(
        !seen.contains("smuggled") && !seen.contains("Content-Length: 30"),
        "{seen}"
    );
}

#[tokio::test]
async fn the_secret_replaces_the_placeholder_in_headers_only() {
    let sh = shared_with_credential(80);
    let request = format!(
        "POST /p/{PH}?k={PH} HTTP/1.1\r\nHost: example.com\r\nx-api-key: {PH}\r\n\
         Content-Length: {}\r\n\r\n{PH}",
        PH.len()
    );
    let (reply, seen) = h1(&sh, request.as_bytes(), PH.len()).await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(
        seen.starts_with(&format!("POST /p/{PH}?k={PH} HTTP/1.1\r\n")),
        "{seen}"
    );
    assert!(seen.contains(&format!("x-api-key: {SECRET}\r\n")), "{seen}");
    assert!(seen.ends_with(&format!("\r\n\r\n{PH}")), "{seen}");
}

#[tokio::test]
async fn a_credential_brought_from_inside_is_refused_before_it_leaves() {
    let sh = shared_with_credential(80);
    let (reply, seen) = h1(
        &sh,
        b"GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer sk-own\r\n\r\n",
        0,
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
    assert!(reply.contains("rule=gate.credential"), "{reply}");
    assert!(!reply.contains(SECRET) && seen.is_empty(), "{reply} {seen}");
}

/// Servers that pass headers to the application as CGI variables (WEBrick, PHP's own server,
/// Puma before it dropped them) read `X_Api_Key` as `X-Api-Key`: a credential in a header
/// spelled with underscores is a credential header too, and so is a placeholder there.
#[tokio::test]
async fn a_credential_header_spelled_with_underscores_is_one() {
    let sh = shared_with_credential(80);
    for header in [
        "X_Api_Key: sk-own",
        "Proxy_Authorization: Basic c2stb3du",
        "API_KEY: sk-own",
    ] {
        let request = format!("GET / HTTP/1.1\r\nHost: example.com\r\n{header}\r\n\r\n");
        let (reply, seen) = h1(&sh, request.as_bytes(), 0).await;
        assert!(reply.starts_with("HTTP/1.1 403 "), "{header}: {reply}");
        assert!(reply.contains("rule=gate.credential"), "{header}: {reply}");
        assert!(seen.is_empty(), "{header}: {seen}");
    }
    let request = format!("GET / HTTP/1.1\r\nHost: example.com\r\nX_Api_Key: {PH}\r\n\r\n");
    let (reply, seen) = h1(&sh, request.as_bytes(), 0).await;
    assert!(reply.starts_with("HTTP/1.1 200 "), "{reply}");
    assert!(seen.contains(SECRET), "{seen}");
}

/// TRACE and TRACK answer with the request, credential included: refused to a credential's
/// host, however the method is named; elsewhere they pass. A placeholder in a header that
/// carries no credential goes out as it is.
#[tokio::test]
async fn requests_that_echo_themselves_never_reach_a_credentials_host() {
    let sh = shared_with_credential(80);
    for head in [
        format!("TRACE / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer {PH}\r\n\r\n"),
        format!("TRACK / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer {PH}\r\n\r\n"),
        "POST / HTTP/1.1\r\nHost: example.com\r\nX-HTTP-Method-Override: trace\r\n\
         Content-Length: 0\r\n\r\n"
            .to_owned(),
    ] {
        let (reply, seen) = h1(&sh, head.as_bytes(), 0).await;
        assert!(reply.starts_with("HTTP/1.1 403 "), "{reply}");
        assert!(reply.contains("rule=gate.trace"), "{reply}");
        assert!(seen.is_empty(), "the upstream saw {seen:?}");
    }
    let ev = sh.events.take();
    assert!(
        ev.iter().all(|e| e.rule.as_deref() == Some("gate.trace")),
        "{ev:?}"
    );
    let plain = Arc::new(Shared::for_tests(&["example.com"]));
    let (reply, seen) = h1(&plain, b"TRACE / HTTP/1.1\r\nHost: example.com\r\n\r\n", 0).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(seen.starts_with("TRACE / HTTP/1.1\r\n"), "{seen}");
    let (reply, seen) = h1(
        &sh,
        format!("GET / HTTP/1.1\r\nHost: example.com\r\nX-Debug: {PH}\r\n\r\n").as_bytes(),
        0,
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(seen.contains(&format!("X-Debug: {PH}\r\n")), "{seen}");
    assert!(!seen.contains(SECRET), "{seen}");
}

/// One HTTP/2 GET with `headers` through [`serve`]: status, body, what the upstream read.
async fn h2(sh: &Arc<Shared>, headers: &[(&str, &str)]) -> (u16, String, String) {
    let (up, seen) = upstream(0).await;
    let (near, far) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(serve(far, conn(sh, Proto::Http2, 443, up)));
    let (mut send, c) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(near))
            .await
            .unwrap();
    tokio::spawn(c);
    let mut req = Request::builder()
        .method("GET")
        .uri("https://example.com/v1/messages");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let resp = send
        .send_request(req.body(body::full(Vec::new())).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    server.abort();
    let seen = tokio::time::timeout(Duration::from_millis(300), seen)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    (
        status,
        String::from_utf8_lossy(&body).into_owned(),
        String::from_utf8(seen).unwrap(),
    )
}

#[tokio::test]
async fn h2_requests_carry_the_secret_upstream() {
    let sh = shared_with_credential(443);
    let bearer = format!("Bearer {PH}");
    let (status, body, seen) = h2(&sh, &[("authorization", &bearer)]).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert!(
        seen.contains(&format!("authorization: Bearer {SECRET}\r\n")),
        "{seen}"
    );
    assert!(seen.contains("host: example.com\r\n"), "{seen}");
    let ev = sh.events.take();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!((ev[0].status, ev[0].bytes_in), (Some(200), 2), "{ev:?}");
}

#[tokio::test]
async fn an_h2_host_header_naming_another_host_is_refused() {
    let sh = Arc::new(Shared::for_tests(&["example.com", "api.github.com"]));
    let (status, body, seen) = h2(&sh, &[("host", "api.github.com")]).await;
    assert_eq!(status, 421, "{body}");
    assert!(seen.is_empty(), "the upstream saw {seen:?}");
}

#[tokio::test]
async fn h2_requests_with_their_own_key_are_refused() {
    let sh = shared_with_credential(443);
    let (status, body, seen) = h2(&sh, &[("x-api-key", "sk-own")]).await;
    assert_eq!(status, 403);
    assert!(body.contains("(rule gate.credential)"), "{body}");
    assert!(seen.is_empty(), "the upstream saw {seen:?}");
}

/// A policy that asks about every POST to example.com (a plain `net` rule, whose summary
/// names no effect), with an approver that answers each pending ask as `answers` says.
fn asking(answers: Vec<bool>) -> (Arc<Shared>, tokio::task::JoinHandle<Vec<PendingAsk>>) {
    let mut sh = Shared::for_tests(&["example.com"]);
    let policy = envgit_policy::Policy::parse(
        "envgit.yaml",
        "version: 1\nnetwork:\n  allow: [\"example.com\"]\nirreversible:\n  - net: { host: \"example.com\", method: POST, path: \"/x\" }\n    action: ask\n",
    )
    .unwrap();
    sh.policy = Arc::new(policy);
    let approvals = Arc::new(crate::approvals::Approvals::new(
        Duration::from_secs(20),
        None,
    ));
    sh.approvals = Some(Arc::clone(&approvals));
    let answerer = tokio::spawn(async move {
        let mut seen = Vec::new();
        for yes in answers {
            let ask = loop {
                if let Some(a) = approvals.list().into_iter().next() {
                    break a;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            approvals.answer(Some(ask.id), yes, "tester").unwrap();
            seen.push(ask);
        }
        seen
    });
    (Arc::new(sh), answerer)
}

fn post(body: &str) -> Vec<u8> {
    format!(
        "POST /x HTTP/1.1\r\nHost: example.com\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Approving one POST under a plain `net` rule covers that body only: a second POST with
/// another body is asked about again (it was let through as "an earlier approval of the same
/// request" when the body was hashed only where a rule read it).
#[tokio::test]
async fn an_approval_covers_the_body_it_showed_and_no_other() {
    let (sh, answerer) = asking(vec![true, false]);
    let (reply, seen) = h1(&sh, &post("first body"), 10).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(seen.ends_with("first body"), "{seen}");
    let (reply, seen) = h1(&sh, &post("other body\x1b[2J"), 15).await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(seen.is_empty(), "the upstream saw {seen:?}");
    let asks = answerer.await.unwrap();
    assert_eq!(asks.len(), 2);
    assert_ne!(asks[0].body_hash, asks[1].body_hash);
    // The person sees the bytes, control bytes escaped.
    assert_eq!(asks[0].body_preview, "first body");
    assert_eq!(asks[1].body_preview, "other body\\x1b[2J");
    // The very same request again is covered by the first approval.
    let (sh2, _none) = (sh, ());
    let (reply, seen) = h1(&sh2, &post("first body"), 10).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(seen.ends_with("first body"), "{seen}");
}

/// Approving `POST /x` does not cover `POST /x?force=1` with the same body: the query is
/// asked about, shown, and recorded.
#[tokio::test]
async fn an_approval_covers_its_own_query_and_no_other() {
    let (sh, answerer) = asking(vec![true, false]);
    let (reply, _) = h1(&sh, &post("same"), 4).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let with_query =
        String::from_utf8(post("same"))
            .unwrap()
            .replacen("POST /x ", "POST /x?force=1 ", 1);
    let (reply, seen) = h1(&sh, with_query.as_bytes(), 4).await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(seen.is_empty(), "the upstream saw {seen:?}");
    let asks = answerer.await.unwrap();
    assert_eq!(
        asks.iter().map(|a| a.path.as_str()).collect::<Vec<_>>(),
        ["/x", "/x?force=1"]
    );
    assert!(asks[1].summary.ends_with("/x?force=1"), "{:?}", asks[1]);
    let paths: Vec<String> = sh.events.take().into_iter().map(|e| e.path).collect();
    assert_eq!(paths, ["/x", "/x?force=1"]);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A push whose body is gzip: the rule reads the ref update inside and refuses it; the same
/// bytes undecodable are refused as malformed; a gzip fetch passes with its bytes untouched.
#[tokio::test]
async fn compressed_bodies_are_judged_decoded_and_forwarded_as_sent() {
    let mut sh = Shared::for_tests(&["example.com"]);
    sh.policy = Arc::new(
        envgit_policy::Policy::parse(
            "envgit.yaml",
            "version: 1\nnetwork:\n  allow: [\"example.com\"]\nirreversible:\n  - preset: default\n",
        )
        .unwrap(),
    );
    let sh = Arc::new(sh);
    let line = format!(
        "{} {} refs/heads/main\0report-status\n",
        "0".repeat(40),
        "1".repeat(40)
    );
    let pkt = format!("{:04x}{line}0000", line.len() + 4);
    let send = |body: Vec<u8>, path: &str| {
        let mut out = format!(
            "POST /r.git/{path} HTTP/1.1\r\nHost: example.com\r\nContent-Encoding: gzip\r\n\
             Content-Type: application/x-git-{path}-request\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    };
    let (reply, seen) = h1(&sh, &send(gzip(pkt.as_bytes()), "git-receive-pack"), 0).await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(reply.contains("rule git.push"), "{reply}");
    assert!(seen.is_empty(), "{seen}");
    let (reply, seen) = h1(&sh, &send(b"junk".to_vec(), "git-receive-pack"), 0).await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(seen.is_empty(), "{seen}");
    let fetch = gzip(b"0014command=ls-refs\n0000");
    let (reply, seen) = h1(&sh, &send(fetch.clone(), "git-upload-pack"), fetch.len()).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let lower = seen.to_ascii_lowercase();
    assert!(lower.contains("content-encoding: gzip\r\n"), "{seen}");
    assert!(
        lower.contains(&format!("content-length: {}\r\n", fetch.len())),
        "{seen}"
    );
}

/// hyper's client drops a body of unknown length on GET (it frames the request as bodiless):
/// the gate says chunked itself, so a GET's chunked body arrives as the client sent it.
#[tokio::test]
async fn a_chunked_body_on_a_get_arrives() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    let (reply, seen) = h1(
        &sh,
        b"GET /search HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n0\r\n\r\n",
        15,
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    assert!(seen.starts_with("GET /search HTTP/1.1\r\n"), "{seen}");
    assert!(seen.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{seen}");
}

mod h2_downgrade;
mod prop;

/// What an HTTP/2 upstream on loopback (prior knowledge, no TLS) got: the body and the
/// trailer fields, if any came.
type H2Seen = (Vec<u8>, Option<hyper::HeaderMap>);

async fn h2_upstream() -> (TcpStream, oneshot::Receiver<H2Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let tx = Arc::clone(&tx);
            async move {
                let got = req.into_body().collect().await.unwrap();
                let trailers = got.trailers().cloned();
                if let Some(tx) = tx.lock().unwrap().take() {
                    let _ = tx.send((got.to_bytes().to_vec(), trailers));
                }
                Ok::<_, std::convert::Infallible>(hyper::Response::new(body::full(&b"ok"[..])))
            }
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(s), service)
            .await;
    });
    (TcpStream::connect(addr).await.unwrap(), rx)
}

/// A client's body given frame by frame (data, then trailers).
struct Frames(std::collections::VecDeque<hyper::body::Frame<hyper::body::Bytes>>);

impl hyper::body::Body for Frames {
    type Data = hyper::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

/// Over an HTTP/2 upstream a trailer frame would travel as it came: from an HTTP/1 client's
/// chunked body and from an HTTP/2 client's HEADERS after its DATA alike.
#[tokio::test]
async fn request_trailers_never_reach_an_http2_upstream() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    // Past the prefix a rule reads: the rest of the body is streamed, not read whole.
    let first = vec![b'x'; envgit_policy::BODY_PREFIX_MAX + 1];
    for client in [Proto::Http1, Proto::Http2] {
        let (up, seen) = h2_upstream().await;
        let conn = Conn {
            shared: Arc::clone(&sh),
            host: "example.com".into(),
            port: 443,
            forwarded_https: false,
            https: true,
            proto: client,
            keep_alive: true,
            pool: Pool::new(Some(Ok((Box::new(up), true))), no_redial()),
        };
        let (near, far) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(serve(far, conn));
        let status = match client {
            Proto::Http1 => {
                let mut near = near;
                near.write_all(
                    format!(
                        "POST /upload HTTP/1.1\r\nHost: example.com\r\n\
                         Trailer: X-HTTP-Method-Override\r\n\
                         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n",
                        first.len()
                    )
                    .as_bytes(),
                )
                .await
                .unwrap();
                near.write_all(&first).await.unwrap();
                near.write_all(b"\r\n3\r\n!!!\r\n0\r\nX-HTTP-Method-Override: DELETE\r\n\r\n")
                    .await
                    .unwrap();
                let mut reply = vec![0u8; 256];
                let n = near.read(&mut reply).await.unwrap();
                String::from_utf8_lossy(&reply[..n])
                    .split(' ')
                    .nth(1)
                    .and_then(|c| c.parse::<u16>().ok())
                    .unwrap_or(0)
            }
            Proto::Http2 => {
                let (mut send, c) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(near))
                        .await
                        .unwrap();
                tokio::spawn(c);
                let mut trailers = hyper::HeaderMap::new();
                trailers.insert("x-http-method-override", "DELETE".parse().unwrap());
                let frames = Frames(
                    [
                        hyper::body::Frame::data(hyper::body::Bytes::from(first.clone())),
                        hyper::body::Frame::data(hyper::body::Bytes::from_static(b"!!!")),
                        hyper::body::Frame::trailers(trailers),
                    ]
                    .into(),
                );
                let req = Request::builder()
                    .method("POST")
                    .uri("https://example.com/upload")
                    .body(frames)
                    .unwrap();
                send.send_request(req).await.unwrap().status().as_u16()
            }
        };
        let (body, trailers) = tokio::time::timeout(Duration::from_secs(10), seen)
            .await
            .expect("the upstream got the request")
            .unwrap();
        server.abort();
        assert_eq!(status, 200, "{client:?}");
        assert_eq!(body.len(), first.len() + 3, "{client:?}");
        assert!(body.ends_with(b"x!!!"), "{client:?}");
        assert!(
            trailers.as_ref().is_none_or(hyper::HeaderMap::is_empty),
            "{client:?}: trailers upstream: {trailers:?}"
        );
    }
}

/// A streaming call's body is not held for a prefix its client sends only after an answer
/// (a gRPC or Connect stream, whose messages are JSON under `+json`): its head goes upstream
/// and the answer comes back while the body is still open.
#[tokio::test]
async fn a_streaming_call_is_answered_while_its_body_is_open() {
    let sh = Arc::new(Shared::for_tests(&["example.com"]));
    for ty in ["application/grpc+json", "application/connect+json"] {
        let (up, _seen) = upstream(0).await;
        let (mut near, far) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(serve(far, conn(&sh, Proto::Http1, 80, up)));
        let head = format!(
            "POST /svc.Chat/Talk HTTP/1.1\r\nHost: example.com\r\nContent-Type: {ty}\r\n\
             Transfer-Encoding: chunked\r\n\r\n9\r\n{{\"a\":\"b\"}}\r\n"
        );
        near.write_all(head.as_bytes()).await.unwrap();
        // Far past a served answer's time, far short of the 60 s the gate waits for a body.
        let mut answer = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(20), near.read(&mut answer)).await;
        server.abort();
        let n = read
            .unwrap_or_else(|_| panic!("{ty}: no answer while the body was open"))
            .unwrap();
        assert!(
            answer[..n].starts_with(b"HTTP/1.1 200"),
            "{ty}: {}",
            String::from_utf8_lossy(&answer[..n])
        );
    }
}
