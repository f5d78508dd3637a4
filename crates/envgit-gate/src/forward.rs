//! Requests on a connection bound to one `host:port` (a CONNECT tunnel, plain or TLS
//! terminated, or an explicit-proxy connection), HTTP/1 or HTTP/2 alike: hyper parses each
//! request once, [`crate::canonical`] accepts or refuses that form, the policy judges it, and
//! the upstream gets a request built from it on the one upstream connection that belongs to
//! this client connection ([`crate::pool`]). One path for both protocols.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use envgit_policy::{
    BODY_PREFIX_MAX, ConnectDecision, Decided, Policy, RequestDecision, RequestInfo,
};
use hyper::body::{Body, Incoming};
use hyper::header::{HOST, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::ask::{self, Asked};
use crate::body::{self, BodyError, Hold, Out, Read};
use crate::canonical::{self, Accepted, Proto};
use crate::credentials;
use crate::encoding;
use crate::events::Recorder;
use crate::head::{self, HEAD_TIMEOUT};
use crate::pool::Pool;
use crate::reply::{self, Reply};
use crate::rules::{
    RULE_BUSY, RULE_CREDENTIAL, RULE_MALFORMED, RULE_MISDIRECTED, RULE_TIMEOUT, RULE_TRACE,
    RULE_WEBSOCKET,
};
use crate::shared::Shared;
use crate::splice;
use crate::verdict;

/// How long the upstream may take to answer.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);
/// How much of a held request's body the person is shown.
const PREVIEW_MAX: usize = 480;

/// One client connection's target and upstream.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The client spoke TLS to the gate and the upstream is plain HTTP (`--resolve
    /// HOST:PORT=http://…`): each request says `X-Forwarded-Proto: https`.
    pub(crate) forwarded_https: bool,
    /// The scheme of the requests on this connection (`https` inside terminated TLS).
    pub(crate) https: bool,
    pub(crate) proto: Proto,
    /// `false` for explicit-proxy connections: one request each, answered with
    /// `Connection: close` (a client sends the next one to whatever host on a new one).
    pub(crate) keep_alive: bool,
    pub(crate) pool: Pool,
}

/// Serves `client` until it closes.
pub(crate) async fn serve<C>(client: C, conn: Conn)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (proto, keep_alive) = (conn.proto, conn.keep_alive);
    let conn = Arc::new(conn);
    let service = hyper::service::service_fn(move |req| {
        let conn = Arc::clone(&conn);
        async move { Ok::<_, Infallible>(one(req, &conn).await) }
    });
    let io = TokioIo::new(client);
    match proto {
        Proto::Http1 => {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .preserve_header_case(true)
                .half_close(true)
                .keep_alive(keep_alive)
                // A head over 64 KiB is answered 431 here, as before, never forwarded.
                .max_buf_size(crate::head::MAX_HEAD)
                .serve_connection(io, service)
                .with_upgrades()
                .await;
        }
        Proto::Http2 => {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                // Every stream's head is decoded and held before the gate sees it: hyper's
                // 200 at once made one connection cost 200 requests. curl, Go and nginx
                // stop at 100 or near it.
                .max_concurrent_streams(STREAMS_PER_CONNECTION)
                .serve_connection(io, service)
                .await;
        }
    }
}

/// Requests one gate serves at once, however they come: each is memory of the host's, outside
/// the sandbox's limit (its head, its body's turn, the answer's send buffer), and one HTTP/2
/// connection carries up to [`STREAMS_PER_CONNECTION`] at once. As many as the connections it
/// takes ([`crate::listener`]'s 1,024), so HTTP/2 multiplies nothing.
pub(crate) const REQUESTS_AT_ONCE: usize = 1024;
/// HTTP/2 streams one connection carries at once.
const STREAMS_PER_CONNECTION: u32 = 100;

/// One request, judged and answered while it holds one of the gate's
/// [`REQUESTS_AT_ONCE`] permits, until its answer's body is sent or dropped. Past them it is
/// answered at once, its head dropped.
async fn one(req: Request<Incoming>, conn: &Conn) -> Response<Out> {
    let Ok(permit) = Arc::clone(&conn.shared.requests).try_acquire_owned() else {
        let mut rec = Recorder::new(&conn.shared.events, req.method().as_str());
        rec.target(&conn.host, conn.port, req.uri().path());
        let reply = reply::plain(
            503,
            "Service Unavailable",
            &format!(
                "envgit: the gate is serving {REQUESTS_AT_ONCE} requests of this step at once, \
                 the most it holds (rule {RULE_BUSY}): send fewer at once\n"
            ),
        );
        rec.decide(false, RULE_BUSY);
        rec.status(reply.status);
        // The body is not drained: the client is told at once, and nothing of it is kept.
        return answer(conn, &reply);
    };
    judged(req, conn)
        .await
        .map(|answer| body::holding(answer, permit))
}

/// One request, judged and answered.
async fn judged(mut req: Request<Incoming>, conn: &Conn) -> Response<Out> {
    let (host, port, shared) = (conn.host.as_str(), conn.port, &conn.shared);
    let mut rec = Recorder::new(&shared.events, req.method().as_str());
    // The query is part of what the step records: the server reads it as much as the path.
    let recorded = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path(), |pq| pq.as_str());
    rec.target(host, port, recorded);
    let accepted = match canonical::accept(
        conn.proto,
        req.method(),
        req.uri(),
        req.version(),
        req.headers(),
        host,
        port,
    ) {
        Ok(a) => a,
        Err(m) if m.misdirected => {
            let reply = reply::plain(421, "Misdirected Request", &format!("envgit: {}\n", m.why));
            return refuse(conn, &mut rec, RULE_MISDIRECTED, req.body_mut(), reply).await;
        }
        Err(m) => {
            let reply = reply::malformed(&m.why);
            return refuse(conn, &mut rec, RULE_MALFORMED, req.body_mut(), reply).await;
        }
    };
    let method = req.method().as_str().to_owned();
    let origin = accepted.origin.clone();
    let (path, query) = origin.split_once('?').unwrap_or((origin.as_str(), ""));
    let what = reply::http_what(&method, host, port, path);
    match verdict::connect(&shared.policy, shared.reserved_ports.as_deref(), host, port) {
        ConnectDecision::Allowed { rule } => rec.decide(true, &rule),
        ConnectDecision::Denied { rule, reason } => {
            rec.reason(&reason);
            let reply = reply::forbidden(&what, &rule, &reason);
            return refuse(conn, &mut rec, &rule, req.body_mut(), reply).await;
        }
    }
    // A `MOVE` or `COPY` writes at its `Destination`: that path is judged as a request's
    // own would be (no body), and a rule that would deny or ask about a write there refuses
    // the request, naming it (`MOVE …/tmp` onto `…/refs/heads/main` is a push). A rule that
    // lets the write there out marks the request once the request itself is let out: a
    // refused one left nothing.
    let mut destination_mark = None;
    if let Some(dest) = &accepted.destination {
        let (dest_path, dest_query) = dest.split_once('?').unwrap_or((dest.as_str(), ""));
        let overrides: Vec<&str> = accepted
            .method_overrides
            .iter()
            .map(String::as_str)
            .collect();
        let at_destination = RequestInfo {
            method: &method,
            host,
            port,
            path: dest_path,
            path_overrides: &[],
            query: dest_query,
            body: None,
            body_complete: false,
            method_overrides: &overrides,
            content_type: None,
            header_names: &[],
        };
        match shared.policy.decide_request(&at_destination) {
            RequestDecision::Allow => {}
            RequestDecision::Marked { rule, .. } => destination_mark = Some(rule),
            RequestDecision::Deny { rule, summary } | RequestDecision::Ask { rule, summary } => {
                let reason = format!(
                    "its Destination is a write rule {rule} judges ({summary}): a {method} onto it \
                     is refused"
                );
                rec.reason(&reason);
                let reply = reply::forbidden(&what, &rule, &reason);
                return refuse(conn, &mut rec, &rule, req.body_mut(), reply).await;
            }
        }
    }
    let client_upgrade = if accepted.websocket {
        if conn.proto != Proto::Http1 || !websocket_allowed(shared, host, port) {
            let reason = format!(
                "WebSocket to {} is not allowed: list it in network.allow as {{ host: \"{}\", websocket: true }}",
                head::authority(host, port),
                head::authority(host, port)
            );
            let reply = reply::forbidden(&what, RULE_WEBSOCKET, &reason);
            return refuse(conn, &mut rec, RULE_WEBSOCKET, req.body_mut(), reply).await;
        }
        Some(hyper::upgrade::on(&mut req))
    } else {
        None
    };
    // TRACE and TRACK answer with the request itself: to a credential's host, that is the
    // secret handed back to the sandbox.
    if credentials::held_for(&shared.credentials, host, port) {
        let methods = std::iter::once(method.as_str())
            .chain(accepted.method_overrides.iter().map(String::as_str));
        if let Some(echo) = credentials::echoes_the_request(methods) {
            let reason = credentials::echo_reason(echo, host);
            rec.reason(&reason);
            let reply = reply::forbidden(&what, RULE_TRACE, &reason);
            return refuse(conn, &mut rec, RULE_TRACE, req.body_mut(), reply).await;
        }
    }
    let (mut parts, mut body) = req.into_parts();
    // The secret in place of the placeholder, before the judgement (no person is asked about
    // a request refused here); the rewritten map is what goes upstream.
    let headers = parts.headers.iter_mut().map(|(n, v)| (n.as_str(), v));
    if let Err(refused) = credentials::apply(&shared.credentials, host, port, headers) {
        let reply = reply::forbidden(&what, RULE_CREDENTIAL, &refused.reason(host));
        return refuse(conn, &mut rec, RULE_CREDENTIAL, &mut body, reply).await;
    }
    let content_type = accepted.content_type.clone();
    let overrides: Vec<&str> = accepted
        .method_overrides
        .iter()
        .map(String::as_str)
        .collect();
    let path_overrides: Vec<&str> = accepted.path_overrides.iter().map(String::as_str).collect();
    let header_names: Vec<&str> = parts.headers.keys().map(|n| n.as_str()).collect();
    let info = RequestInfo {
        method: &method,
        host,
        port,
        path,
        path_overrides: &path_overrides,
        query,
        body: None,
        body_complete: false,
        method_overrides: &overrides,
        content_type: content_type.as_deref(),
        header_names: &header_names,
    };
    let mut read = Read::empty(body.is_end_stream());
    let coding = accepted.content_encoding.as_deref();
    let decision = match judge_body(&shared.policy, info, &mut read, &mut body, coding).await {
        Ok(decision) => decision,
        Err(Unjudged::Body(e)) => return body_failed(conn, &mut rec, &mut body, e).await,
        Err(Unjudged::Coding(why)) => {
            let reply = reply::malformed(&why.to_string());
            return refuse(conn, &mut rec, RULE_MALFORMED, &mut body, reply).await;
        }
    };
    let refusal_shape = reply::Shape::of(path, content_type.as_deref());
    match decision {
        RequestDecision::Allow => {
            if let Some(rule) = &destination_mark {
                rec.mark(rule);
            }
        }
        RequestDecision::Marked { rule, .. } => rec.mark(&rule),
        RequestDecision::Deny { rule, summary } => {
            let reply = reply::forbidden_for_client(&what, &rule, &summary, refusal_shape);
            return refuse(conn, &mut rec, &rule, &mut body, reply).await;
        }
        RequestDecision::Ask { rule, summary } => {
            let whole = shared.policy.identity_needs_whole_body(&rule)
                || ask::identity_needs_body(&method, host, &summary);
            if whole && !read.ended {
                read = match body::read_whole(&mut body, read, body::BODY_DEADLINE).await {
                    Ok(whole) => whole,
                    Err(BodyError::TooLarge) => {
                        let reason = format!(
                            "{summary}: the body is over {} MiB, too large to approve by its content",
                            body::WHOLE_BODY_MAX >> 20
                        );
                        let reply =
                            reply::forbidden_for_client(&what, &rule, &reason, refusal_shape);
                        return refuse(conn, &mut rec, &rule, &mut body, reply).await;
                    }
                    Err(e) => return body_failed(conn, &mut rec, &mut body, e).await,
                };
            }
            let hashed = if whole {
                &read.bytes[..]
            } else {
                &read.bytes[..read.bytes.len().min(BODY_PREFIX_MAX)]
            };
            let asked = Asked {
                method: &method,
                host,
                port,
                path,
                query,
                rule: &rule,
                summary: &summary,
                body_hash: blake3::hash(hashed).to_hex().to_string(),
                body_preview: body::preview(&read.bytes, PREVIEW_MAX),
                whole_request: whole,
                query_free: shared.policy.identity_ignores_query(&rule),
            };
            if let Err(refused) = ask::settle(shared, &mut rec, asked).await {
                let reason = refused.to_string();
                let reply = reply::forbidden_for_client(&what, &rule, &reason, refusal_shape);
                return refuse(conn, &mut rec, &rule, &mut body, reply).await;
            }
        }
    }
    send_upstream(conn, rec, parts, accepted, read, body, client_upgrade).await
}

/// Why a body could not be judged.
enum Unjudged {
    Body(BodyError),
    Coding(encoding::DecodeError),
}

/// The policy's decision on the request, reading as much of its body as that needs: its first
/// MiB where a rule reads the body (or the body may name a method), and where the decision on
/// that rests on what the prefix could not show (a `_method` past it, a form field of an
/// upload), the whole body, bounded and held in the gate's memory, judged again; past the
/// bound the prefix's decision stands (failing closed), saying why. `read` ends as all that
/// was read, to go upstream first.
async fn judge_body(
    policy: &Policy,
    info: RequestInfo<'_>,
    read: &mut Read,
    body: &mut Incoming,
    coding: Option<&str>,
) -> Result<RequestDecision, Unjudged> {
    if policy.needs_body(&info) {
        read_on(read, body, BODY_PREFIX_MAX, Hold::Prefix).await?;
    }
    let decided =
        judge_read(policy, info, read, coding, BODY_PREFIX_MAX).map_err(Unjudged::Coding)?;
    if !decided.rest_of_body_needed {
        return Ok(decided.decision);
    }
    read_on(read, body, body::WHOLE_BODY_MAX + 1, Hold::Whole).await?;
    if read.ended && read.bytes.len() <= body::WHOLE_BODY_MAX {
        let whole = judge_read(policy, info, read, coding, body::WHOLE_BODY_MAX)
            .map_err(Unjudged::Coding)?;
        return Ok(whole.decision);
    }
    Ok(decided.decision.noted(&format!(
        "the body is over the {} MiB envgit reads to judge one",
        body::WHOLE_BODY_MAX >> 20
    )))
}

/// Reads on until `read` holds at least `want` bytes or the whole body, in a turn to hold them
/// as `hold` says.
async fn read_on(
    read: &mut Read,
    body: &mut Incoming,
    want: usize,
    hold: Hold,
) -> Result<(), Unjudged> {
    let have = std::mem::replace(read, Read::empty(false));
    *read = body::read_held(body, have, want, body::BODY_DEADLINE, hold)
        .await
        .map_err(Unjudged::Body)?;
    Ok(())
}

/// The policy's decision on `read`, at most `max` bytes of it, decoded as the server will
/// read it (the rule reads what the server reads: the body with its coding undone).
fn judge_read(
    policy: &Policy,
    info: RequestInfo<'_>,
    read: &Read,
    coding: Option<&str>,
    max: usize,
) -> Result<Decided, encoding::DecodeError> {
    let decoded;
    // The same request, borrowing the body read here.
    let mut info = RequestInfo { ..info };
    if read.ended || !read.bytes.is_empty() {
        let raw = &read.bytes[..read.bytes.len().min(max)];
        info.body = Some(raw);
        info.body_complete = read.ended && read.bytes.len() <= max;
        if let Some(coding) = coding {
            decoded = encoding::decode(coding, raw, info.body_complete, max)?;
            info.body = Some(&decoded.bytes);
            info.body_complete = decoded.complete;
        }
    }
    Ok(policy.decide_request_from_prefix(&info))
}

/// Builds the upstream request from the judged form and passes the answer back.
async fn send_upstream(
    conn: &Conn,
    mut rec: Recorder,
    parts: hyper::http::request::Parts,
    accepted: Accepted,
    read: Read,
    body: Incoming,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> Response<Out> {
    let (host, port) = (conn.host.as_str(), conn.port);
    let mut headers = canonical::upstream_request_headers(&parts.headers);
    if accepted.websocket {
        canonical::add_websocket_upgrade(&mut headers);
    }
    if conn.forwarded_https {
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
    }
    let host_value = HeaderValue::from_str(&accepted.host_value).ok();
    let onward = body::onward(read, body, Arc::clone(&rec.bytes_out));
    let scheme = if conn.https && !conn.forwarded_https {
        "https"
    } else {
        "http"
    };
    let origin = accepted.origin.clone();
    let authority = head::authority(host, port);
    let method = parts.method;
    let extensions = parts.extensions;
    let bytes_out = Arc::clone(&rec.bytes_out);
    let build = move |h2: bool| {
        let mut out = Request::new(onward);
        *out.method_mut() = method;
        *out.headers_mut() = headers;
        *out.extensions_mut() = extensions;
        let uri = if h2 {
            *out.version_mut() = Version::HTTP_2;
            format!("{scheme}://{authority}{origin}")
        } else {
            if let Some(v) = host_value {
                out.headers_mut().insert(HOST, v);
            }
            // hyper's client sends a body of unknown length as chunked, except on GET, HEAD
            // and CONNECT, where it drops it and sends `Content-Length: 0`-framing: say
            // chunked ourselves so the body the client sent (and the policy judged) arrives.
            if !out.body().is_end_stream() && out.body().size_hint().exact().is_none() {
                out.headers_mut().insert(
                    hyper::header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
            }
            origin
        };
        if let Ok(uri) = uri.parse::<Uri>() {
            *out.uri_mut() = uri;
        }
        bytes_out.fetch_add(head_size(&out), std::sync::atomic::Ordering::Relaxed);
        out
    };
    let sent = match conn.pool.send(build).await {
        Ok(sent) => sent,
        Err(e) => {
            rec.status(502);
            return answer(
                conn,
                &reply::plain(502, "Bad Gateway", &format!("envgit: {e}\n")),
            );
        }
    };
    let resp = match tokio::time::timeout(RESPONSE_TIMEOUT, sent).await {
        Ok(Ok(resp)) => resp,
        // The client's own body broke on its way (bad chunk framing, a short body).
        Ok(Err(e)) if e.is_user() => {
            rec.decide(false, RULE_MALFORMED);
            rec.status(400);
            return answer(conn, &reply::malformed("the body's framing is broken"));
        }
        Ok(Err(e)) => {
            rec.status(502);
            let msg = format!("envgit: the upstream sent no valid response: {e}\n");
            return answer(conn, &reply::plain(502, "Bad Gateway", &msg));
        }
        Err(_) => {
            rec.status(504);
            let msg = "envgit: the upstream did not answer in time\n";
            return answer(conn, &reply::plain(504, "Gateway Timeout", msg));
        }
    };
    rec.status(resp.status().as_u16());
    // A host that echoes the credential header it was sent gets the placeholder shown back.
    let mut resp = resp;
    let held = &conn.shared.credentials;
    credentials::conceal(held, host, port, resp.headers_mut().values_mut());
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_upgrade) = client_upgrade
    {
        return switch_to_websocket(rec, resp, client_upgrade);
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers = canonical::client_response_headers(&parts.headers);
    Response::from_parts(parts, body::counted_response(body, rec))
}

/// About what the request's head takes on the wire (HTTP/1 spelling), for the step's
/// byte counts.
fn head_size<B>(req: &Request<B>) -> u64 {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 12;
    let headers: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    (line + headers + 2) as u64
}

/// After a judged `101`: the two upgraded streams are spliced, uninspected from here on, and
/// recorded as such on the step when they close.
fn switch_to_websocket(
    mut rec: Recorder,
    mut resp: Response<Incoming>,
    client_upgrade: hyper::upgrade::OnUpgrade,
) -> Response<Out> {
    let upstream_upgrade = hyper::upgrade::on(&mut resp);
    rec.uninspected();
    tokio::spawn(async move {
        if let (Ok(client), Ok(upstream)) = tokio::join!(client_upgrade, upstream_upgrade) {
            splice::splice(TokioIo::new(client), TokioIo::new(upstream), &rec).await;
        }
    });
    let (parts, _) = resp.into_parts();
    Response::from_parts(parts, body::full(Vec::new()))
}

/// A body that could not be read for the rule that needs it.
async fn body_failed(
    conn: &Conn,
    rec: &mut Recorder,
    body: &mut Incoming,
    e: BodyError,
) -> Response<Out> {
    let (rule, reply) = match e {
        BodyError::TimedOut => (
            RULE_TIMEOUT,
            reply::plain(
                408,
                "Request Timeout",
                "envgit: the body did not arrive in time for the rule that reads it\n",
            ),
        ),
        BodyError::Busy => (
            RULE_TIMEOUT,
            reply::plain(
                503,
                "Service Unavailable",
                "envgit: other requests' bodies, held to judge them, filled the gate for as \
                 long as this one could wait: send fewer at once\n",
            ),
        ),
        BodyError::Broken | BodyError::TooLarge => (
            RULE_MALFORMED,
            reply::malformed("the body's framing is broken"),
        ),
    };
    refuse(conn, rec, rule, body, reply).await
}

/// Records a refusal and answers it; the rest of the body the client is sending is read and
/// dropped first (bounded), so the client gets to see the answer.
async fn refuse(
    conn: &Conn,
    rec: &mut Recorder,
    rule: &str,
    body: &mut Incoming,
    reply: Reply,
) -> Response<Out> {
    rec.decide(false, rule);
    rec.status(reply.status);
    if !body.is_end_stream() {
        body::drain(body).await;
    }
    answer(conn, &reply)
}

/// One of envgit's own answers in the client's protocol. On HTTP/1 it ends the connection.
fn answer(conn: &Conn, reply: &Reply) -> Response<Out> {
    let mut resp = Response::new(body::full(reply.body.clone().into_bytes()));
    *resp.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::FORBIDDEN);
    let headers = resp.headers_mut();
    for (name, value) in &reply.headers {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.append(*name, v);
        }
    }
    headers.insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(reply.content_type),
    );
    if conn.proto == Proto::Http1 {
        headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        // Clients that show only the status line (twine) see envgit's sentence there.
        if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(reply.phrase.as_bytes().to_vec()) {
            resp.extensions_mut().insert(phrase);
        }
    }
    resp
}

/// Is a WebSocket to `host:port` allowed? Only where the policy marks the entry
/// `websocket: true`.
fn websocket_allowed(shared: &Shared, host: &str, port: u16) -> bool {
    envgit_policy::websocket_allowed(&shared.policy, host, port)
}

#[cfg(test)]
mod tests;
