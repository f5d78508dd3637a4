//! HTTP/1 requests, each decided before a byte of it goes out. Two entries:
//!
//! - [`absolute`], an explicit-proxy request (`GET http://host/path`): one request per client
//!   connection, forwarded in origin form with `Connection: close`, the response passed back
//!   with `Connection: close`, so no later request on it can pass undecided.
//! - [`bound`], requests inside a CONNECT tunnel (plain or TLS-terminated) or an `http`
//!   capture, whose `Host` must name the connection's target. Connections are kept alive
//!   while both ends allow it and every message is framed (Content-Length or chunked): each
//!   request is read, judged and forwarded in turn on the one upstream connection that
//!   belongs to this client connection, and each response is copied exactly to its end.

use std::time::Duration;

use envgit_policy::ConnectDecision;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::approvals::{self, Answer, PendingAsk};
use crate::conn::{HeadError, Prefixed};
use crate::credentials;
use crate::decide::{self, RULE_CREDENTIAL, RULE_MISDIRECTED};
use crate::events::Recorder;
use crate::head::{self, MAX_HEAD, RequestHead, ResponseHead};
use crate::judge::{self, Verdict};
use crate::listener::{HEAD_TIMEOUT, Shared};
use crate::splice;
use crate::upstream::{self, DialError};

/// How long the upstream may take to answer (an `ask` upstream of here will need more).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);
const MAX_CHUNK_LINE: usize = 4096;
/// How long a kept-alive connection may sit idle between requests.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A client stream: the relay's unix connection now, a terminated TLS stream in issue 4.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Stream for T {}

/// The first request of an explicit-proxy connection, in absolute form.
pub(crate) async fn absolute(
    mut client: Prefixed<UnixStream>,
    mut req: RequestHead,
    shared: &Shared,
) {
    let mut rec = Recorder::new(&shared.events, &req.method);
    let Some((host, port, origin)) = head::parse_absolute(&req.target) else {
        rec.status(400);
        let body = "envgit: expected `CONNECT host:port` or an absolute `http://` URL\n";
        let _ = client
            .write_all(&decide::plain(400, "Bad Request", body).to_http1())
            .await;
        return;
    };
    rec.target(&host, port, head::path_only(&origin));
    let what = decide::http_what(&req.method, &host, port, head::path_only(&origin));
    let rule = match decide::connect(&shared.policy, &host, port) {
        ConnectDecision::Allowed { rule } => rule,
        ConnectDecision::Denied { rule, reason } => {
            refuse(&mut client, &mut rec, &what, &rule, &reason).await;
            return;
        }
    };
    // Before dialling: a refused request opens no connection upstream.
    if !with_credentials(&mut client, &mut rec, &mut req, &host, port, &what, shared).await {
        return;
    }
    let upstream = match upstream::dial(&host, port, &rule, &shared.resolve).await {
        Ok(stream) => stream,
        Err(DialError::Denied { rule, reason }) => {
            refuse(&mut client, &mut rec, &what, &rule, &reason).await;
            return;
        }
        Err(DialError::Failed(msg)) => {
            rec.decide(true, &rule);
            bad_gateway(&mut client, &mut rec, &msg).await;
            return;
        }
    };
    rec.decide(true, &rule);
    let Some(continue_sent) = judged(
        &mut client,
        &req,
        &host,
        port,
        &origin,
        &what,
        shared,
        &mut rec,
    )
    .await
    else {
        return;
    };
    let host_value = if port == 80 {
        host.clone()
    } else {
        head::authority(&host, port)
    };
    forward(
        &mut client,
        &mut Prefixed::new(upstream),
        &req,
        &origin,
        Some(host_value),
        None,
        continue_sent,
        false,
        &mut rec,
    )
    .await;
}

/// Requests on a connection already bound to `host:port` (after CONNECT or capture), one
/// after another while the connection stays reusable. `forwarded_https`: the client spoke TLS
/// to the gate and the upstream is plain HTTP (`--resolve HOST:PORT=http://…`), so each
/// request says `X-Forwarded-Proto: https`.
pub(crate) async fn bound<C: Stream, U: Stream>(
    mut client: Prefixed<C>,
    upstream: U,
    host: &str,
    port: u16,
    shared: &Shared,
    forwarded_https: bool,
) {
    let mut upstream = Prefixed::new(upstream);
    let mut first = true;
    while one_bound(
        &mut client,
        &mut upstream,
        host,
        port,
        shared,
        forwarded_https,
        first,
    )
    .await
    {
        first = false;
    }
    let _ = client.shutdown().await;
}

/// One request of a bound connection; `true` when the connection may carry another.
async fn one_bound<C: Stream, U: Stream>(
    client: &mut Prefixed<C>,
    upstream: &mut Prefixed<U>,
    host: &str,
    port: u16,
    shared: &Shared,
    forwarded_https: bool,
    first: bool,
) -> bool {
    let timeout = if first { HEAD_TIMEOUT } else { IDLE_TIMEOUT };
    let head = match tokio::time::timeout(timeout, client.read_head(MAX_HEAD)).await {
        Ok(Ok(head)) => head,
        Ok(Err(HeadError::TooLarge)) => {
            let body = "envgit: head too large\n";
            let answer = decide::plain(431, "Request Header Fields Too Large", body).to_http1();
            let _ = client.write_all(&answer).await;
            return false;
        }
        _ => return false,
    };
    let Some(mut req) = RequestHead::parse(&head) else {
        let body = "envgit: malformed request head\n";
        let _ = client
            .write_all(&decide::plain(400, "Bad Request", body).to_http1())
            .await;
        return false;
    };
    let mut rec = Recorder::new(&shared.events, &req.method);
    // Origin form, or an absolute form naming this very target.
    let origin = if req.target.starts_with('/') {
        Some(req.target.clone())
    } else {
        head::parse_absolute(&req.target)
            .filter(|(h, p, _)| h == host && *p == port)
            .map(|(_, _, origin)| origin)
    };
    rec.target(host, port, origin.as_deref().map_or("", head::path_only));
    let host_ok = match (req.count("host"), req.header("host")) {
        (0, _) => req.version == 0,
        (1, Some(value)) => std::str::from_utf8(value)
            .ok()
            .and_then(|v| head::parse_authority(v.trim(), Some(port)))
            .is_some_and(|(h, p)| h == host && p == port),
        _ => false,
    };
    let Some(origin) = origin.filter(|_| host_ok) else {
        rec.decide(false, RULE_MISDIRECTED);
        rec.status(421);
        let body = format!(
            "envgit: this connection goes to {}; a request naming another host is refused\n",
            head::authority(host, port)
        );
        let _ = client
            .write_all(&decide::plain(421, "Misdirected Request", &body).to_http1())
            .await;
        return false;
    };
    let what = decide::http_what(&req.method, host, port, head::path_only(&origin));
    match decide::connect(&shared.policy, host, port) {
        ConnectDecision::Allowed { rule } => rec.decide(true, &rule),
        ConnectDecision::Denied { rule, reason } => {
            refuse(client, &mut rec, &what, &rule, &reason).await;
            return false;
        }
    }
    if !with_credentials(client, &mut rec, &mut req, host, port, &what, shared).await {
        return false;
    }
    let Some(continue_sent) =
        judged(client, &req, host, port, &origin, &what, shared, &mut rec).await
    else {
        return false;
    };
    let extra = forwarded_https.then_some(("X-Forwarded-Proto", &b"https"[..]));
    let wants_close = req.version == 0
        || req.header("connection").is_some_and(|v| {
            String::from_utf8_lossy(v)
                .to_ascii_lowercase()
                .contains("close")
        });
    forward(
        client,
        upstream,
        &req,
        &origin,
        None,
        extra,
        continue_sent,
        !wants_close,
        &mut rec,
    )
    .await
}

/// Puts the secrets of `host:port`'s credentials in place of their placeholders in the
/// request's headers, or refuses it (answered and recorded); `false` when refused. Done
/// before the judgement, so no person is asked about a request that would be refused, no
/// `100 Continue` is sent for it, and the body is framed from the very head that goes out.
#[allow(clippy::too_many_arguments)]
async fn with_credentials<C: Stream>(
    client: &mut Prefixed<C>,
    rec: &mut Recorder,
    req: &mut RequestHead,
    host: &str,
    port: u16,
    what: &str,
    shared: &Shared,
) -> bool {
    let headers = req.headers.iter_mut().map(|(n, v)| (n.as_str(), v));
    match credentials::apply(&shared.credentials, host, port, headers) {
        Ok(()) => true,
        Err(refused) => {
            refuse(client, rec, what, RULE_CREDENTIAL, &refused.reason(host)).await;
            false
        }
    }
}

/// The request-level judgement; `None` when the request was refused (and answered).
#[allow(clippy::too_many_arguments)]
async fn judged<C: Stream>(
    client: &mut Prefixed<C>,
    req: &RequestHead,
    host: &str,
    port: u16,
    origin: &str,
    what: &str,
    shared: &Shared,
    rec: &mut Recorder,
) -> Option<bool> {
    let j = judge::judge(client, req, host, port, origin, &shared.policy).await;
    match j.verdict {
        Verdict::Pass { marked } => {
            if let Some(rule) = marked {
                rec.mark(&rule);
            }
            Some(j.continue_sent)
        }
        Verdict::Refuse { rule, summary } => {
            refuse_request(client, rec, what, &rule, &summary).await;
            None
        }
        Verdict::Ask {
            rule,
            summary,
            body_hash,
        } => {
            let path = head::path_only(origin);
            let ask = Asked {
                method: &req.method,
                host,
                path,
                rule: &rule,
                summary: &summary,
                body_hash,
            };
            match settle_ask(shared, rec, ask).await {
                Ok(()) => Some(j.continue_sent),
                Err(reason) => {
                    refuse_request(client, rec, what, &rule, &reason).await;
                    None
                }
            }
        }
    }
}

/// A request an `ask` rule matched.
pub(crate) struct Asked<'a> {
    pub(crate) method: &'a str,
    pub(crate) host: &'a str,
    pub(crate) path: &'a str,
    pub(crate) rule: &'a str,
    pub(crate) summary: &'a str,
    pub(crate) body_hash: String,
}

/// Holds an asked request until it is answered: `Ok` lets it out (the step marked, the
/// answer recorded), `Err` carries the reason it is refused.
pub(crate) async fn settle_ask(
    shared: &Shared,
    rec: &mut Recorder,
    a: Asked<'_>,
) -> Result<(), String> {
    let summary = a.summary;
    let identity = approvals::identity(a.rule, summary, a.method, a.host, a.path, &a.body_hash);
    let Some(approvals) = &shared.approvals else {
        return Err(format!(
            "{summary}: the rule says ask and no approver can answer"
        ));
    };
    if approvals.granted(&identity) {
        rec.approval(
            "approved",
            "an earlier approval of the same request",
            summary,
        );
        rec.mark(a.rule);
        return Ok(());
    }
    let ask = PendingAsk {
        id: 0,
        method: a.method.to_ascii_uppercase(),
        host: a.host.to_owned(),
        path: a.path.to_owned(),
        rule: a.rule.to_owned(),
        summary: summary.to_owned(),
        body_hash: a.body_hash,
        asked_at_ms: 0,
        expires_at_ms: 0,
    };
    match approvals.ask(ask, identity).await {
        Answer::Approved { by } => {
            rec.approval("approved", &by, summary);
            rec.mark(a.rule);
            Ok(())
        }
        Answer::Refused { by } => {
            rec.approval("refused", &by, summary);
            Err(format!("{summary}: refused by {by}"))
        }
        Answer::TimedOut => {
            rec.approval("refused", "timeout", summary);
            Err(format!("{summary}: nobody answered in time"))
        }
    }
}

/// A request refused by a rule: 403 in the client's own error shape.
async fn refuse_request<C: Stream>(
    client: &mut Prefixed<C>,
    rec: &mut Recorder,
    what: &str,
    rule: &str,
    reason: &str,
) {
    let answer = decide::forbidden_for_client(what, rule, reason).to_http1();
    answer_refusal(client, rec, rule, &answer).await;
}

/// Answer a refusal (403 with the rule) and record it.
pub(crate) async fn refuse<C: Stream>(
    client: &mut Prefixed<C>,
    rec: &mut Recorder,
    what: &str,
    rule: &str,
    reason: &str,
) {
    answer_refusal(
        client,
        rec,
        rule,
        &decide::forbidden(what, rule, reason).to_http1(),
    )
    .await;
}

async fn answer_refusal<C: Stream>(
    client: &mut Prefixed<C>,
    rec: &mut Recorder,
    rule: &str,
    answer: &[u8],
) {
    rec.decide(false, rule);
    rec.status(403);
    let _ = client.write_all(answer).await;
}

async fn bad_gateway<C: Stream>(client: &mut Prefixed<C>, rec: &mut Recorder, msg: &str) {
    rec.status(502);
    let answer = decide::plain(502, "Bad Gateway", &format!("envgit: {msg}\n")).to_http1();
    let _ = client.write_all(&answer).await;
}

enum Body {
    None,
    Length(u64),
    Chunked,
}

fn body_of(req: &RequestHead) -> Result<Body, &'static str> {
    framing(&req.headers)
}

/// How a message's body is delimited, from its headers (RFC 9112 §6.3, the strict subset).
fn framing(headers: &[(String, Vec<u8>)]) -> Result<Body, &'static str> {
    let count = |name: &str| {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .count()
    };
    let te = head::header(headers, "transfer-encoding");
    let cl_count = count("content-length");
    if let Some(te) = te {
        if count("transfer-encoding") != 1 || !te.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            return Err("only `Transfer-Encoding: chunked` is supported");
        }
        if cl_count > 0 {
            return Err("both Transfer-Encoding and Content-Length");
        }
        return Ok(Body::Chunked);
    }
    let mut length = None;
    for (name, value) in headers {
        if !name.eq_ignore_ascii_case("content-length") {
            continue;
        }
        let n: u64 = std::str::from_utf8(value)
            .ok()
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse().ok())
            .ok_or("malformed Content-Length")?;
        if length.is_some_and(|l| l != n) {
            return Err("conflicting Content-Length headers");
        }
        length = Some(n);
    }
    Ok(match length {
        Some(0) | None => Body::None,
        Some(n) => Body::Length(n),
    })
}

/// Sends the request (head rewritten, `extra` header added, body framed exactly) and passes
/// the response back; `true` when both sides may carry another request. `keep_alive: false`
/// ends the exchange with `Connection: close` on both legs.
#[allow(clippy::too_many_arguments)]
async fn forward<C: Stream, U: Stream>(
    client: &mut Prefixed<C>,
    upstream: &mut Prefixed<U>,
    req: &RequestHead,
    origin: &str,
    host_value: Option<String>,
    extra: Option<(&str, &[u8])>,
    continue_sent: bool,
    keep_alive: bool,
    rec: &mut Recorder,
) -> bool {
    let body = match body_of(req) {
        Ok(body) => body,
        Err(why) => {
            rec.status(400);
            let answer = decide::plain(400, "Bad Request", &format!("envgit: {why}\n")).to_http1();
            let _ = client.write_all(&answer).await;
            return false;
        }
    };
    let expects_continue = req
        .header("expect")
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"));
    let mut headers: Vec<(String, Vec<u8>)> = head::strip_hop_by_hop(&req.headers)
        .into_iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("expect"))
        .collect();
    if let Some(value) = host_value {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case("host"));
        headers.insert(0, ("Host".to_owned(), value.into_bytes()));
    }
    if let Some((name, value)) = extra {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        headers.push((name.to_owned(), value.to_vec()));
    }
    if !keep_alive {
        headers.push(("Connection".to_owned(), b"close".to_vec()));
    }
    let line = format!("{} {} HTTP/1.1", req.method, origin);
    let out_head = head::write_head(line.as_bytes(), &headers);

    let mut whole = upstream.write_all(&out_head).await.is_ok();
    rec.add_out(out_head.len());
    if whole && !matches!(body, Body::None) {
        if expects_continue
            && !continue_sent
            && (client
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
                || client.flush().await.is_err())
        {
            return false;
        }
        match copy_framed(client, upstream, &body, &|n| rec.add_out(n)).await {
            Ok(()) => {}
            Err(Side::Reader) => return false,
            // The upstream stopped reading (it may have answered early): read its answer,
            // then end the connection (the request was not sent whole).
            Err(Side::Writer) => whole = false,
        }
    }
    // A TLS stream may hold the end of what was written until it is flushed.
    if upstream.flush().await.is_err() {
        whole = false;
    }
    let is_head = req.method.eq_ignore_ascii_case("HEAD");
    respond(client, upstream, rec, keep_alive && whole, is_head).await
}

/// Which end of a copy failed.
enum Side {
    Reader,
    Writer,
}

/// Copies one framed body from `from` to `to`, exactly to its end, counting bytes.
async fn copy_framed<R: Stream, W>(
    from: &mut Prefixed<R>,
    to: &mut W,
    body: &Body,
    count: &(dyn Fn(usize) + Sync),
) -> Result<(), Side>
where
    W: AsyncWrite + Unpin,
{
    match body {
        Body::None => Ok(()),
        Body::Length(n) => copy_exact(from, to, *n, count).await,
        Body::Chunked => loop {
            let line = from
                .read_line(MAX_CHUNK_LINE)
                .await
                .map_err(|_| Side::Reader)?;
            let size = chunk_size(&line).ok_or(Side::Reader)?;
            write(to, &line, count).await?;
            if size == 0 {
                // Trailers, then the blank line.
                loop {
                    let line = from
                        .read_line(MAX_CHUNK_LINE)
                        .await
                        .map_err(|_| Side::Reader)?;
                    write(to, &line, count).await?;
                    if line == b"\r\n" || line == b"\n" {
                        return Ok(());
                    }
                }
            }
            copy_exact(from, to, size, count).await?;
            let end = from
                .read_line(MAX_CHUNK_LINE)
                .await
                .map_err(|_| Side::Reader)?;
            if end != b"\r\n" && end != b"\n" {
                return Err(Side::Reader);
            }
            write(to, &end, count).await?;
        },
    }
}

fn chunk_size(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    let size = text
        .trim_end_matches(['\r', '\n'])
        .split(';')
        .next()?
        .trim();
    if size.is_empty() || size.len() > 16 {
        return None;
    }
    u64::from_str_radix(size, 16).ok()
}

async fn write<W: AsyncWrite + Unpin>(
    to: &mut W,
    bytes: &[u8],
    count: &(dyn Fn(usize) + Sync),
) -> Result<(), Side> {
    to.write_all(bytes).await.map_err(|_| Side::Writer)?;
    count(bytes.len());
    Ok(())
}

async fn copy_exact<R, W>(
    from: &mut R,
    to: &mut W,
    mut n: u64,
    count: &(dyn Fn(usize) + Sync),
) -> Result<(), Side>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    while n > 0 {
        let want = usize::try_from(n).unwrap_or(usize::MAX).min(buf.len());
        let got = from
            .read(&mut buf[..want])
            .await
            .map_err(|_| Side::Reader)?;
        if got == 0 {
            return Err(Side::Reader);
        }
        write(to, &buf[..got], count).await?;
        n -= got as u64;
    }
    Ok(())
}

/// Reads the upstream's response head (passing interim 1xx heads on) and copies the response
/// to the client. With `keep_alive` and a framed body it is copied exactly and `true` says the
/// connection may carry another request; otherwise it goes out with `Connection: close`, and
/// is copied exactly when framed, else until the upstream closes.
async fn respond<C: Stream, U: Stream>(
    client: &mut Prefixed<C>,
    upstream: &mut Prefixed<U>,
    rec: &mut Recorder,
    keep_alive: bool,
    is_head: bool,
) -> bool {
    let resp = loop {
        let head = match tokio::time::timeout(RESPONSE_TIMEOUT, upstream.read_head(MAX_HEAD)).await
        {
            Ok(Ok(head)) => head,
            _ => {
                bad_gateway(client, rec, "the upstream sent no valid response").await;
                return false;
            }
        };
        let Some(resp) = ResponseHead::parse(&head) else {
            bad_gateway(client, rec, "the upstream sent a malformed response").await;
            return false;
        };
        if (100..200).contains(&resp.status) && resp.status != 101 {
            if client.write_all(&head).await.is_err() || client.flush().await.is_err() {
                return false;
            }
            rec.add_in(head.len());
            continue;
        }
        break resp;
    };
    rec.status(resp.status);
    let bodiless = is_head || resp.status == 204 || resp.status == 304;
    let framed = if bodiless {
        Some(Body::None)
    } else {
        match framing(&resp.headers) {
            Ok(Body::None) if head::header(&resp.headers, "content-length").is_none() => None,
            Ok(body) => Some(body),
            Err(_) => None,
        }
    };
    let upstream_closes = resp.status_line.starts_with(b"HTTP/1.0")
        || head::header(&resp.headers, "connection").is_some_and(|v| {
            String::from_utf8_lossy(v)
                .to_ascii_lowercase()
                .contains("close")
        });
    let reuse = keep_alive && !upstream_closes && resp.status != 101;
    let mut headers = head::strip_hop_by_hop(&resp.headers);
    match (&framed, reuse) {
        (Some(body), true) => {
            let out = head::write_head(&resp.status_line, &headers);
            if client.write_all(&out).await.is_err() {
                return false;
            }
            rec.add_in(out.len());
            copy_framed(upstream, client, body, &|n| rec.add_in(n))
                .await
                .is_ok()
                && client.flush().await.is_ok()
        }
        _ => {
            headers.push(("Connection".to_owned(), b"close".to_vec()));
            let out = head::write_head(&resp.status_line, &headers);
            if client.write_all(&out).await.is_err() {
                return false;
            }
            rec.add_in(out.len());
            match &framed {
                // A known length: copy exactly that and end here, so the exchange is over (and
                // recorded) when the client has it all, not when the upstream hangs up.
                Some(body) if resp.status != 101 => {
                    let _ = copy_framed(upstream, client, body, &|n| rec.add_in(n)).await;
                    let _ = client.flush().await;
                }
                _ => {
                    let _ = splice::copy(upstream, client, |n| rec.add_in(n)).await;
                }
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::oneshot;

    fn shared(allow: &[&str]) -> Shared {
        Shared::for_tests(allow)
    }

    /// An upstream that reads until `end` appears, answers 200, and reports what it read.
    async fn upstream(end: &'static [u8]) -> (TcpStream, oneshot::Receiver<Vec<u8>>) {
        let (addr, rx) = listening(end).await;
        (TcpStream::connect(addr).await.unwrap(), rx)
    }

    /// [`upstream`] before anyone connects: its address, and what it read once someone did.
    async fn listening(end: &'static [u8]) -> (std::net::SocketAddr, oneshot::Receiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(end.len()).any(|w| w == end) {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s
                .write_all(
                    b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok",
                )
                .await;
            let _ = tx.send(seen);
        });
        (addr, rx)
    }

    /// What the client got back (read to the end), and what the upstream saw (if it saw anything
    /// within 300 ms).
    async fn reply_and_seen<R: AsyncRead + Unpin>(
        mut near: R,
        seen: oneshot::Receiver<Vec<u8>>,
    ) -> (String, Vec<u8>) {
        let mut reply = Vec::new();
        near.read_to_end(&mut reply).await.unwrap();
        let seen = tokio::time::timeout(Duration::from_millis(300), seen)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        (String::from_utf8_lossy(&reply).into_owned(), seen)
    }

    async fn run_bound(shared: &Shared, request: &[u8], end: &'static [u8]) -> (String, Vec<u8>) {
        let (up, seen) = upstream(end).await;
        let (mut near, far) = tokio::io::duplex(64 * 1024);
        near.write_all(request).await.unwrap();
        near.shutdown().await.unwrap();
        bound(Prefixed::new(far), up, "example.com", 80, shared, false).await;
        reply_and_seen(near, seen).await
    }

    #[tokio::test]
    async fn bound_request_naming_the_target_is_forwarded() {
        let sh = shared(&["example.com"]);
        let (reply, seen) = run_bound(
            &sh,
            b"GET /a?b HTTP/1.1\r\nHost: Example.com\r\nConnection: keep-alive\r\nX-Envgit-Token: t\r\n\r\n",
            b"\r\n\r\n",
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        // Kept alive: hop-by-hop headers are the gate's own business on each leg.
        assert!(
            !reply.contains("Connection:") && !reply.contains("Keep-Alive"),
            "{reply}"
        );
        assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
        let seen = String::from_utf8(seen).unwrap();
        assert_eq!(seen, "GET /a?b HTTP/1.1\r\nHost: Example.com\r\n\r\n");
        let ev = sh.events.take();
        assert_eq!(ev.len(), 1);
        assert_eq!((ev[0].method.as_str(), ev[0].path.as_str()), ("GET", "/a"));
        assert_eq!(
            (ev[0].decision.as_str(), ev[0].status),
            ("allowed", Some(200))
        );
        assert_eq!(ev[0].rule.as_deref(), Some("example.com"));
    }

    #[tokio::test]
    async fn bound_request_naming_another_host_is_refused() {
        let sh = shared(&["example.com", "other.com"]);
        for request in [
            &b"GET / HTTP/1.1\r\nHost: other.com\r\n\r\n"[..],
            b"GET http://other.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: example.com\r\nHost: other.com\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n",
        ] {
            let (reply, seen) = run_bound(&sh, request, b"\r\n\r\n").await;
            assert!(reply.starts_with("HTTP/1.1 421 "), "{reply}");
            assert!(seen.is_empty(), "the upstream saw {seen:?}");
        }
        let ev = sh.events.take();
        assert!(
            ev.iter()
                .all(|e| e.rule.as_deref() == Some(RULE_MISDIRECTED)),
            "{ev:?}"
        );
    }

    #[tokio::test]
    async fn chunked_body_is_framed_and_a_pipelined_request_is_judged_on_its_own() {
        let sh = shared(&["example.com"]);
        let (reply, seen) = run_bound(
            &sh,
            b"POST /up HTTP/1.1\r\nHost: example.com\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n\
              5\r\nhello\r\n0\r\n\r\nGET /sneaky HTTP/1.1\r\nHost: other.example\r\n\r\n",
            b"0\r\n\r\n",
        )
        .await;
        assert!(
            reply.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"),
            "{reply}"
        );
        let seen = String::from_utf8(seen).unwrap();
        assert!(seen.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{seen}");
        assert!(
            !seen.contains("Expect") && !seen.contains("sneaky"),
            "{seen}"
        );
        // The second request, pipelined behind the first, was read and refused by itself.
        assert!(
            reply.contains("HTTP/1.1 421 Misdirected Request"),
            "{reply}"
        );
    }

    #[tokio::test]
    async fn bound_request_denied_by_policy_gets_403() {
        let sh = shared(&[]);
        let (reply, seen) = run_bound(
            &sh,
            b"GET /p?q HTTP/1.1\r\nHost: example.com\r\n\r\n",
            b"\r\n\r\n",
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
        assert!(
            reply.ends_with("envgit: denied GET example.com/p (rule network.allow)\n"),
            "{reply}"
        );
        assert!(seen.is_empty());
    }

    const PH: &str = "envgit-placeholder-7f3a";
    const SECRET: &str = "sk-ant-real-secret";

    fn with_credential(mut sh: Shared, host: &str, port: u16) -> Shared {
        sh.credentials = vec![crate::Credential {
            host: host.into(),
            port,
            placeholder: PH.into(),
            secret: SECRET.into(),
        }];
        sh
    }

    #[tokio::test]
    async fn bound_request_to_the_credential_host_carries_the_secret() {
        let sh = with_credential(shared(&["example.com"]), "Example.com", 80);
        let request = format!(
            "GET /v1/messages HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer {PH}\r\n\
             x-api-key: {PH}\r\nAccept: */*\r\n\r\n"
        );
        let (reply, seen) = run_bound(&sh, request.as_bytes(), b"\r\n\r\n").await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        let seen = String::from_utf8(seen).unwrap();
        assert_eq!(
            seen,
            format!(
                "GET /v1/messages HTTP/1.1\r\nHost: example.com\r\n\
                 Authorization: Bearer {SECRET}\r\nx-api-key: {SECRET}\r\nAccept: */*\r\n\r\n"
            )
        );
        assert!(!seen.contains(PH), "{seen}");
        let ev = sh.events.take();
        assert_eq!(
            (ev[0].decision.as_str(), ev[0].rule.as_deref()),
            ("allowed", Some("example.com"))
        );
    }

    #[tokio::test]
    async fn the_placeholder_is_replaced_in_headers_only() {
        let sh = with_credential(shared(&["example.com"]), "example.com", 80);
        let request = format!(
            "POST /p/{PH}?k={PH} HTTP/1.1\r\nHost: example.com\r\nx-api-key: {PH}\r\n\
             Content-Length: {}\r\n\r\n{PH}",
            PH.len()
        );
        let (reply, seen) = run_bound(&sh, request.as_bytes(), PH.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        let seen = String::from_utf8(seen).unwrap();
        assert!(
            seen.starts_with(&format!("POST /p/{PH}?k={PH} HTTP/1.1\r\n")),
            "{seen}"
        );
        assert!(
            seen.contains(&format!("\r\nx-api-key: {SECRET}\r\n")),
            "{seen}"
        );
        assert!(seen.ends_with(&format!("\r\n\r\n{PH}")), "{seen}");
    }

    #[tokio::test]
    async fn a_credential_brought_from_inside_is_refused_before_it_leaves() {
        let sh = with_credential(shared(&["example.com"]), "example.com", 80);
        for request in [
            &b"GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer sk-own\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nHost: example.com\r\nApi-Key: sk-own\r\nContent-Length: 2\r\n\r\nhi",
            // The placeholder in one header does not cover a key in another.
            format!("GET / HTTP/1.1\r\nHost: example.com\r\nx-api-key: {PH}\r\nauthorization: sk-own\r\n\r\n")
                .as_bytes(),
        ] {
            let (reply, seen) = run_bound(&sh, request, b"\r\n\r\n").await;
            assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
            assert!(
                reply.contains("X-Envgit-Decision: deny; rule=gate.credential\r\n"),
                "{reply}"
            );
            assert!(!reply.contains(SECRET), "{reply}");
            assert!(seen.is_empty(), "the upstream saw {seen:?}");
        }
        let ev = sh.events.take();
        assert_eq!(ev.len(), 3, "{ev:?}");
        for e in &ev {
            assert_eq!(
                (e.decision.as_str(), e.rule.as_deref(), e.status),
                ("denied", Some(RULE_CREDENTIAL), Some(403))
            );
        }
    }

    #[tokio::test]
    async fn a_probe_without_credential_headers_passes() {
        let sh = with_credential(shared(&["example.com"]), "example.com", 80);
        let (reply, seen) = run_bound(
            &sh,
            b"HEAD / HTTP/1.1\r\nHost: example.com\r\n\r\n",
            b"\r\n\r\n",
        )
        .await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert_eq!(seen, b"HEAD / HTTP/1.1\r\nHost: example.com\r\n\r\n");
    }

    #[tokio::test]
    async fn another_host_keeps_the_placeholder() {
        let sh = with_credential(shared(&["example.com"]), "api.example.net", 80);
        let request =
            format!("GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer {PH}\r\n\r\n");
        let (reply, seen) = run_bound(&sh, request.as_bytes(), b"\r\n\r\n").await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        let seen = String::from_utf8(seen).unwrap();
        assert!(
            seen.contains(&format!("\r\nAuthorization: Bearer {PH}\r\n")),
            "{seen}"
        );
        assert!(!seen.contains(SECRET), "{seen}");
    }

    /// An explicit-proxy request over a unix socket pair, the upstream at `--resolve`.
    async fn run_absolute(sh: &mut Shared, request: &[u8]) -> (String, Vec<u8>) {
        let (addr, seen) = listening(b"\r\n\r\n").await;
        sh.resolve = vec![format!("example.com:80={addr}").parse().unwrap()];
        let (mut near, far) = UnixStream::pair().unwrap();
        let split = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let req = RequestHead::parse(&request[..split]).unwrap();
        near.write_all(&request[split..]).await.unwrap();
        absolute(Prefixed::new(far), req, sh).await;
        reply_and_seen(near, seen).await
    }

    #[tokio::test]
    async fn a_framed_answer_ends_the_exchange_before_the_upstream_hangs_up() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
            // Keeps the connection open well past the test's patience.
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        let mut sh = shared(&["example.com"]);
        sh.resolve = vec![format!("example.com:80={addr}").parse().unwrap()];
        let (mut near, far) = UnixStream::pair().unwrap();
        let req =
            RequestHead::parse(b"GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n")
                .unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            absolute(Prefixed::new(far), req, &sh),
        )
        .await
        .expect("the gate waited for the upstream to hang up");
        let mut reply = Vec::new();
        near.read_to_end(&mut reply).await.unwrap();
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.ends_with("\r\n\r\nok"), "{reply}");
        let ev = sh.events.take();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(ev[0].status, Some(200));
        assert!(ev[0].bytes_in >= 2, "{ev:?}");
    }

    #[tokio::test]
    async fn absolute_form_requests_get_the_secret_or_are_refused() {
        let mut sh = with_credential(shared(&["example.com"]), "example.com", 80);
        let request = format!(
            "GET http://example.com/v1?k={PH} HTTP/1.1\r\nHost: example.com\r\nx-api-key: {PH}\r\n\r\n"
        );
        let (reply, seen) = run_absolute(&mut sh, request.as_bytes()).await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        let seen = String::from_utf8(seen).unwrap();
        assert_eq!(
            seen,
            format!(
                "GET /v1?k={PH} HTTP/1.1\r\nHost: example.com\r\nx-api-key: {SECRET}\r\n\
                 Connection: close\r\n\r\n"
            )
        );

        let request =
            b"GET http://example.com/v1 HTTP/1.1\r\nHost: example.com\r\nx-api-key: sk-own\r\n\r\n";
        let (reply, seen) = run_absolute(&mut sh, request).await;
        assert!(reply.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{reply}");
        assert!(
            reply.ends_with("envgit: denied GET example.com/v1 (rule gate.credential)\n"),
            "{reply}"
        );
        // Refused before dialling: the upstream was never even connected to.
        assert!(seen.is_empty(), "the upstream saw {seen:?}");
        let ev = sh.events.take();
        assert_eq!(
            ev.iter()
                .map(|e| (e.decision.as_str(), e.rule.as_deref()))
                .collect::<Vec<_>>(),
            [
                ("allowed", Some("example.com")),
                ("denied", Some(RULE_CREDENTIAL))
            ]
        );
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(chunk_size(b"1a\r\n"), Some(26));
        assert_eq!(chunk_size(b"0;ext=1\r\n"), Some(0));
        assert_eq!(chunk_size(b"\r\n"), None);
        assert_eq!(chunk_size(b"zz\r\n"), None);
        assert_eq!(chunk_size(b"11111111111111111\r\n"), None);
    }

    #[test]
    fn body_framing() {
        let req = |extra: &str| {
            RequestHead::parse(format!("POST / HTTP/1.1\r\nHost: h\r\n{extra}\r\n").as_bytes())
                .unwrap()
        };
        assert!(matches!(body_of(&req("")), Ok(Body::None)));
        assert!(matches!(
            body_of(&req("Content-Length: 5\r\n")),
            Ok(Body::Length(5))
        ));
        assert!(matches!(
            body_of(&req("Content-Length: 5\r\nContent-Length: 5\r\n")),
            Ok(Body::Length(5))
        ));
        assert!(body_of(&req("Content-Length: 5\r\nContent-Length: 6\r\n")).is_err());
        assert!(body_of(&req("Content-Length: -1\r\n")).is_err());
        assert!(matches!(
            body_of(&req("Transfer-Encoding: chunked\r\n")),
            Ok(Body::Chunked)
        ));
        assert!(body_of(&req("Transfer-Encoding: gzip, chunked\r\n")).is_err());
        assert!(body_of(&req("Transfer-Encoding: chunked\r\nContent-Length: 3\r\n")).is_err());
    }
}
