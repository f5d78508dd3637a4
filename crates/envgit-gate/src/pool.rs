//! The upstream side of one client connection: one hyper client connection (HTTP/1.1, or
//! HTTP/2 when the upstream picked it by ALPN), requests in turn, opened again through the
//! same decision and dial when the upstream closes it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Mutex;

use crate::body::Out;
use crate::upstream_tls::UpstreamTlsError;

/// An upstream connection (TLS or plain).
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// An upstream connection and whether it negotiated HTTP/2.
pub(crate) type Opened = (Box<dyn Io>, bool);

/// Opens a new upstream connection (decided and dialled like the first), or says why not.
pub(crate) type Redial = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Opened, UpstreamError>> + Send>> + Send + Sync,
>;

/// Why a request could not go upstream; the text follows `envgit: ` in the client's `502`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// Decided again for a new connection, and refused: the reason the verdict gave.
    #[error("{0}")]
    Refused(String),
    /// Resolving or connecting failed.
    #[error("{0}")]
    Unreachable(String),
    #[error("TLS to {host}:{port} failed: {error}")]
    Tls {
        host: String,
        port: u16,
        error: UpstreamTlsError,
    },
    /// The HTTP/1 or HTTP/2 handshake on a new connection.
    #[error("{0}")]
    Handshake(hyper::Error),
    #[error("no upstream connection")]
    NoConnection,
}

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
}

/// A request on its way, and whether it went out over HTTP/2.
pub(crate) type Sent = Pin<Box<dyn Future<Output = hyper::Result<Response<Incoming>>> + Send>>;

pub(crate) struct Pool {
    sender: Mutex<Option<Sender>>,
    /// The first connection, not yet handshaken (handshakes happen on first use).
    first: std::sync::Mutex<Option<Result<Opened, UpstreamError>>>,
    redial: Redial,
}

async fn handshake((io, h2): Opened) -> Result<Sender, UpstreamError> {
    if h2 {
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
                .await
                .map_err(UpstreamError::Handshake)?;
        tokio::spawn(conn);
        return Ok(Sender::H2(send));
    }
    let (send, conn) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake(TokioIo::new(io))
        .await
        .map_err(UpstreamError::Handshake)?;
    // Upgrades (WebSocket after a judged `101`) take the connection over.
    tokio::spawn(conn.with_upgrades());
    Ok(Sender::H1(send))
}

impl Pool {
    /// `first`: the connection opened with the tunnel (`None`: dial on the first request).
    pub(crate) fn new(first: Option<Result<Opened, UpstreamError>>, redial: Redial) -> Pool {
        Pool {
            sender: Mutex::new(None),
            first: std::sync::Mutex::new(first),
            redial,
        }
    }

    /// Sends `req`, building it for the protocol of the connection it goes out on: `build`
    /// gets `true` for HTTP/2. A connection that cannot be had is the error.
    pub(crate) async fn send(
        &self,
        build: impl FnOnce(bool) -> Request<Out>,
    ) -> Result<Sent, UpstreamError> {
        let mut sender = self.sender.lock().await;
        let usable = match sender.as_mut() {
            Some(s) => s.ready().await,
            None => false,
        };
        if !usable {
            *sender = None;
            let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
            let opened = match first {
                Some(first) => first?,
                None => (self.redial)().await?,
            };
            *sender = Some(handshake(opened).await?);
        }
        match sender.as_mut() {
            Some(Sender::H1(s)) => Ok(Box::pin(s.send_request(build(false)))),
            Some(Sender::H2(s)) => Ok(Box::pin(s.send_request(build(true)))),
            None => Err(UpstreamError::NoConnection),
        }
    }
}
