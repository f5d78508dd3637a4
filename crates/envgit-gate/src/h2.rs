//! HTTP/2 from a client inside a terminated TLS tunnel (ALPN `h2`): every stream is one
//! request, judged exactly like an HTTP/1 request (authority, `network.allow`, `l7`,
//! `irreversible` with a bounded body prefix, `ask`), then sent to the upstream over
//! HTTP/1.1 on the one upstream connection that belongs to this client connection, requests
//! in turn.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use envgit_policy::{BODY_PREFIX_MAX, ConnectDecision, RequestDecision, RequestInfo};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Mutex;

use crate::credentials;
use crate::decide::{self, RULE_CREDENTIAL, RULE_MISDIRECTED};
use crate::events::Recorder;
use crate::head;
use crate::http::{self, Asked};
use crate::listener::Shared;

type Out = BoxBody<Bytes, hyper::Error>;
/// The upstream connection: HTTP/1.1, requests in turn, or HTTP/2 when the upstream picked it.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<Out>),
    H2(hyper::client::conn::http2::SendRequest<Out>),
}

impl Sender {
    async fn ready(&mut self) -> bool {
        match self {
            Sender::H1(s) => s.ready().await.is_ok(),
            Sender::H2(s) => s.ready().await.is_ok(),
        }
    }

    fn send(
        &mut self,
        req: Request<Out>,
    ) -> Pin<Box<dyn Future<Output = hyper::Result<Response<Incoming>>> + Send>> {
        match self {
            Sender::H1(s) => Box::pin(s.send_request(req)),
            Sender::H2(s) => Box::pin(s.send_request(req)),
        }
    }

    fn is_h2(&self) -> bool {
        matches!(self, Sender::H2(_))
    }
}

/// An upstream connection (TLS or plain).
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Opens a new upstream connection, or says why it cannot.
/// An upstream connection and whether it negotiated HTTP/2.
pub(crate) type Opened = (Box<dyn Io>, bool);

pub(crate) type Redial =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Opened, String>> + Send>> + Send + Sync>;

struct Conn {
    shared: Arc<Shared>,
    host: String,
    port: u16,
    forwarded_https: bool,
    upstream: Mutex<Option<Sender>>,
    redial: Redial,
    /// Why the first upstream connection failed, answered while no new one can be opened.
    first_error: Option<String>,
}

async fn handshake((io, h2): Opened) -> Result<Sender, String> {
    if h2 {
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
                .await
                .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        return Ok(Sender::H2(send));
    }
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(Sender::H1(send))
}

/// Serves HTTP/2 on `client` until it closes; `first` is the connection to `host:port`
/// opened with the tunnel (TLS or, with `forwarded_https`, plain), `redial` opens another
/// when the upstream closes one.
pub(crate) async fn serve<C>(
    client: C,
    first: Result<Opened, String>,
    redial: Redial,
    host: &str,
    port: u16,
    shared: &Arc<Shared>,
    forwarded_https: bool,
) where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, first_error) = match first {
        Ok(io) => match handshake(io).await {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        },
        Err(e) => (None, Some(e)),
    };
    let ctx = Arc::new(Conn {
        shared: Arc::clone(shared),
        host: host.to_owned(),
        port,
        forwarded_https,
        upstream: Mutex::new(sender),
        redial,
        first_error,
    });
    let service = hyper::service::service_fn(move |req| {
        let ctx = Arc::clone(&ctx);
        async move { Ok::<_, Infallible>(one(req, &ctx).await) }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(client), service)
        .await;
}

fn full(bytes: Vec<u8>) -> Out {
    Full::new(Bytes::from(bytes))
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// An HTTP/1 answer envgit wrote (status line, headers, body) as an HTTP/2 response.
fn answer(reply: &decide::Reply) -> Response<Out> {
    let mut resp = Response::new(full(reply.body.clone().into_bytes()));
    *resp.status_mut() =
        hyper::StatusCode::from_u16(reply.status).unwrap_or(hyper::StatusCode::FORBIDDEN);
    let headers = resp.headers_mut();
    for (name, value) in &reply.headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(value) {
            headers.append(*name, v);
        }
    }
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(reply.content_type),
    );
    resp
}

async fn one(req: Request<Incoming>, ctx: &Conn) -> Response<Out> {
    let (host, port, shared) = (ctx.host.as_str(), ctx.port, &ctx.shared);
    let method = req.method().as_str().to_owned();
    let origin = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let path = head::path_only(&origin).to_owned();
    let mut rec = Recorder::new(&shared.events, &method);
    rec.target(host, port, &path);
    // The authority (or Host) must name this connection's target.
    let authority = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(hyper::header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
    let named = authority
        .as_deref()
        .and_then(|a| head::parse_authority(a, Some(port)))
        .is_some_and(|(h, p)| h == host && p == port);
    if !named {
        rec.decide(false, RULE_MISDIRECTED);
        rec.status(421);
        return answer(&decide::plain(
            421,
            "Misdirected Request",
            &format!(
                "envgit: this connection goes to {}; a request naming another host is refused\n",
                head::authority(host, port)
            ),
        ));
    }
    let what = decide::http_what(&method, host, port, &path);
    match decide::connect(&shared.policy, host, port) {
        ConnectDecision::Allowed { rule } => rec.decide(true, &rule),
        ConnectDecision::Denied { rule, reason } => {
            rec.decide(false, &rule);
            rec.status(403);
            return answer(&decide::forbidden(&what, &rule, &reason));
        }
    }
    let (mut parts, mut body) = req.into_parts();
    // The secret in place of the placeholder, before the judgement as for HTTP/1 (no person is
    // asked about a request refused here); the rewritten map is what goes upstream.
    let headers = parts.headers.iter_mut().map(|(n, v)| (n.as_str(), v));
    if let Err(refused) = credentials::apply(&shared.credentials, host, port, headers) {
        rec.decide(false, RULE_CREDENTIAL);
        rec.status(403);
        return answer(&decide::forbidden(
            &what,
            RULE_CREDENTIAL,
            &refused.reason(host),
        ));
    }
    let (path_part, query) = origin.split_once('?').unwrap_or((&origin, ""));
    let mut info = RequestInfo {
        method: &method,
        host,
        port,
        path: path_part,
        query,
        body: None,
        body_complete: false,
    };
    // A bounded prefix of the body when a rule needs it; the rest streams on unread.
    let mut prefix = Vec::new();
    let mut ended = false;
    if shared.policy.needs_body(&info) {
        while prefix.len() < BODY_PREFIX_MAX {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        prefix.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) => {
                    rec.status(400);
                    return answer(&decide::plain(400, "Bad Request", "envgit: broken body\n"));
                }
                None => {
                    ended = true;
                    break;
                }
            }
        }
        info.body = Some(&prefix[..prefix.len().min(BODY_PREFIX_MAX)]);
        info.body_complete = ended;
    }
    match shared.policy.decide_request(&info) {
        RequestDecision::Allow => {}
        RequestDecision::Marked { rule, .. } => rec.mark(&rule),
        RequestDecision::Deny { rule, summary } => {
            rec.decide(false, &rule);
            rec.status(403);
            return answer(&decide::forbidden_for_client(&what, &rule, &summary));
        }
        RequestDecision::Ask { rule, summary } => {
            let asked = Asked {
                method: &method,
                host,
                path: &path,
                rule: &rule,
                summary: &summary,
                body_hash: blake3::hash(info.body.unwrap_or_default())
                    .to_hex()
                    .to_string(),
            };
            if let Err(reason) = http::settle_ask(shared, &mut rec, asked).await {
                rec.decide(false, &rule);
                rec.status(403);
                return answer(&decide::forbidden_for_client(&what, &rule, &reason));
            }
        }
    }
    // Forward over HTTP/1.1: origin form, the Host the client named, hop-by-hop removed.
    let mut out = Request::builder().method(parts.method).uri(origin.as_str());
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if matches!(
            n,
            "connection"
                | "keep-alive"
                | "proxy-connection"
                | "te"
                | "transfer-encoding"
                | "upgrade"
        ) || n.starts_with("x-envgit-")
        {
            continue;
        }
        out = out.header(name, value);
    }
    if !parts.headers.contains_key(hyper::header::HOST) {
        out = out.header(hyper::header::HOST, authority.unwrap_or_default());
    }
    if ctx.forwarded_https {
        out = out.header("x-forwarded-proto", "https");
    }
    rec.add_out(prefix.len());
    let body: Out = if ended {
        full(prefix)
    } else {
        PrefixThen {
            prefix: (!prefix.is_empty()).then(|| Bytes::from(prefix)),
            rest: Counted {
                inner: body,
                count: Arc::clone(&rec.bytes_out),
                _rec: None,
            },
        }
        .boxed()
    };
    let Ok(out) = out.body(body) else {
        rec.status(400);
        return answer(&decide::plain(400, "Bad Request", "envgit: bad request\n"));
    };
    let sent = {
        let mut upstream = ctx.upstream.lock().await;
        let usable = match upstream.as_mut() {
            Some(s) => s.ready().await,
            None => false,
        };
        if !usable {
            *upstream = None;
            let opened = match (ctx.redial)().await {
                Ok(io) => handshake(io).await,
                Err(e) => Err(ctx.first_error.clone().unwrap_or(e)),
            };
            match opened {
                Ok(s) => *upstream = Some(s),
                Err(e) => {
                    rec.status(502);
                    return answer(&decide::plain(
                        502,
                        "Bad Gateway",
                        &format!("envgit: {e}\n"),
                    ));
                }
            }
        }
        match upstream.as_mut() {
            Some(s) => {
                let mut out = out;
                if s.is_h2() {
                    // HTTP/2 names the target in :scheme and :authority.
                    let scheme = if ctx.forwarded_https { "http" } else { "https" };
                    let uri = format!("{scheme}://{}{origin}", head::authority(host, port));
                    if let Ok(uri) = uri.parse() {
                        *out.uri_mut() = uri;
                    }
                    out.headers_mut().remove(hyper::header::HOST);
                }
                s.send(out)
            }
            None => {
                rec.status(502);
                return answer(&decide::plain(502, "Bad Gateway", "envgit: no upstream\n"));
            }
        }
    };
    match sent.await {
        Ok(resp) => {
            rec.status(resp.status().as_u16());
            let (mut parts, body) = resp.into_parts();
            for name in ["connection", "keep-alive", "transfer-encoding", "upgrade"] {
                parts.headers.remove(name);
            }
            // The event is recorded when the response body ends, with the bytes it carried.
            let counted = Counted {
                inner: body,
                count: Arc::clone(&rec.bytes_in),
                _rec: Some(rec),
            };
            Response::from_parts(parts, counted.boxed())
        }
        Err(e) => {
            rec.status(502);
            let msg = format!("envgit: the upstream sent no valid response: {e}\n");
            answer(&decide::plain(502, "Bad Gateway", &msg))
        }
    }
}

/// The body prefix read for judgement, then the rest of the client's body as it arrives.
struct PrefixThen {
    prefix: Option<Bytes>,
    rest: Counted,
}

impl Body for PrefixThen {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// A body on its way through, its data bytes added to `count` (one of the recorder's
/// counters). The response body also holds the recorder itself, so the request's event is
/// recorded when the response ends.
struct Counted {
    inner: Incoming,
    count: Arc<AtomicU64>,
    _rec: Option<Recorder>,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.count.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::oneshot;

    const PH: &str = "envgit-placeholder-h2";
    const SECRET: &str = "sk-ant-h2-secret";

    fn shared() -> Arc<Shared> {
        let mut shared = Shared::for_tests(&["example.com"]);
        shared.credentials = vec![crate::Credential {
            host: "example.com".into(),
            port: 443,
            placeholder: PH.into(),
            secret: SECRET.into(),
        }];
        Arc::new(shared)
    }

    /// An HTTP/1.1 upstream on loopback: reads one head, answers 200, reports what it read.
    async fn upstream() -> (TcpStream, oneshot::Receiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
            let _ = tx.send(seen);
        });
        (TcpStream::connect(addr).await.unwrap(), rx)
    }

    /// One HTTP/2 GET through [`serve`] (the client side over an in-memory pipe, the upstream
    /// a real socket): the status, the body, and what the upstream read.
    async fn run(sh: &Arc<Shared>, headers: &[(&str, &str)]) -> (u16, String, String) {
        let (tcp, seen) = upstream().await;
        let (near, far) = tokio::io::duplex(64 * 1024);
        let redial: Redial = Arc::new(|| {
            Box::pin(async { Err::<Opened, _>("no second upstream in tests".to_owned()) })
        });
        let sh2 = Arc::clone(sh);
        let server = tokio::spawn(async move {
            let first: Result<Opened, String> = Ok((Box::new(tcp), false));
            serve(far, first, redial, "example.com", 443, &sh2, false).await;
        });
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(near))
                .await
                .unwrap();
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method("GET")
            .uri("https://example.com/v1/messages");
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let resp = send
            .send_request(req.body(full(Vec::new())).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        server.abort();
        let seen = tokio::time::timeout(std::time::Duration::from_millis(300), seen)
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
        let sh = shared();
        let bearer = format!("Bearer {PH}");
        let (status, body, seen) = run(&sh, &[("authorization", &bearer)]).await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        assert!(
            seen.contains(&format!("\r\nauthorization: Bearer {SECRET}\r\n")),
            "{seen}"
        );
        assert!(!seen.contains(PH), "{seen}");
        // Recorded once the response body ended, with the bytes it carried.
        let ev = sh.events.take();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!((ev[0].status, ev[0].bytes_in), (Some(200), 2), "{ev:?}");
    }

    #[tokio::test]
    async fn h2_requests_with_their_own_key_are_refused() {
        let sh = shared();
        let (status, body, seen) = run(&sh, &[("x-api-key", "sk-own")]).await;
        assert_eq!(status, 403);
        assert!(body.contains("(rule gate.credential)"), "{body}");
        assert!(seen.is_empty(), "the upstream saw {seen:?}");
        let ev = sh.events.take();
        assert_eq!(
            (ev[0].decision.as_str(), ev[0].rule.as_deref(), ev[0].status),
            ("denied", Some(RULE_CREDENTIAL), Some(403))
        );
    }
}
