//! TLS termination inside a CONNECT tunnel: read the ClientHello, check that its SNI names the
//! CONNECT target, present the run CA's leaf for that host, open TLS to the upstream
//! ([`crate::upstream_tls`]: verified against the host's roots, SNI = the same host), and hand
//! both plaintext streams to the per-request judgement in [`crate::forward`], HTTP/1 or HTTP/2
//! as the client chose by ALPN.

use std::sync::Arc;

use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::LazyConfigAcceptor;

use crate::buffered::Buffered;
use crate::canonical::Proto;
use crate::events::Recorder;
use crate::forward;
use crate::pool::{self as h2, Pool, UpstreamError};
use crate::redial::redialer;
use crate::resolve;
use crate::rules::{RULE_OPAQUE, RULE_SNI};
use crate::shared::Shared;
use crate::upstream_tls::{HANDSHAKE_TIMEOUT, connect_upstream, upstream_h2};

/// Does the ClientHello's SNI name the CONNECT host (case and a root dot aside)?
fn same_host(sni: &str, host: &str) -> bool {
    sni.trim_end_matches('.')
        .eq_ignore_ascii_case(host.trim_end_matches('.'))
}

/// Why a handshake may not go through a tunnel decided for `host` (rule `gate.sni-mismatch`),
/// or `None` when its SNI names `host`. A ClientHello naming no host is let through only
/// where `nameless_ok`: a terminated tunnel (the gate itself names `host` upstream) or an IP
/// literal (clients never name one, RFC 6066 §3).
pub(crate) fn sni_refusal(sni: Option<&str>, host: &str, nameless_ok: bool) -> Option<String> {
    match sni {
        Some(sni) if same_host(sni, host) => None,
        Some(sni) => Some(format!(
            "the TLS handshake names {}, not {host}, the host the tunnel was allowed for",
            crate::body::preview(sni.as_bytes(), 255)
        )),
        None if nameless_ok => None,
        None => Some(format!(
            "the TLS handshake names no host (no SNI): a tunnel spliced unread must name {host}"
        )),
    }
}

/// The most a ClientHello may take, read without consuming it (a handshake message is at
/// most 64 KiB, plus its records' headers).
const HELLO_MAX: usize = 70 * 1024;

/// The bytes at the front of a tunnel are not one whole ClientHello.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NotAClientHello;

/// The SNI of the ClientHello at the front of `client`, parsed by the same rustls acceptor the
/// terminated path uses, from bytes peeked and left in place (a passthrough splices them on
/// as they came). `Ok(None)`: the ClientHello names no host.
pub(crate) async fn peek_sni<S>(client: &mut Buffered<S>) -> Result<Option<String>, NotAClientHello>
where
    S: tokio::io::AsyncRead + Unpin,
{
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        let bytes = client.peek(fed + 1).await.map_err(|_| NotAClientHello)?;
        if bytes.len() <= fed || bytes.len() > HELLO_MAX {
            return Err(NotAClientHello);
        }
        while fed < bytes.len() {
            let mut rest = &bytes[fed..];
            match acceptor.read_tls(&mut rest) {
                Ok(0) | Err(_) => return Err(NotAClientHello),
                Ok(n) => fed += n,
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => {
                    return Ok(accepted.client_hello().server_name().map(str::to_owned));
                }
                Ok(None) => {}
                Err(_) => return Err(NotAClientHello),
            }
        }
    }
}

/// Terminates the client's TLS for `host:port` and judges every request inside.
pub(crate) async fn terminate(
    client: Buffered<UnixStream>,
    upstream: TcpStream,
    host: &str,
    port: u16,
    mut rec: Recorder,
    shared: &Arc<Shared>,
) {
    let acceptor = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
    let start = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor).await {
        Ok(Ok(start)) => start,
        // Not TLS after all, or too slow: nothing to answer in.
        _ => {
            rec.decide(false, RULE_OPAQUE);
            return;
        }
    };
    if let Some(why) = sni_refusal(start.client_hello().server_name(), host, true) {
        // The tunnel was decided for `host`; a handshake for another name must not reuse it.
        rec.reason(&why);
        rec.decide(false, RULE_SNI);
        return;
    }
    let config = match shared.ca.server_config(host) {
        Ok(config) => config,
        Err(_) => {
            rec.decide(false, RULE_SNI);
            return;
        }
    };
    let plain = resolve::find(&shared.resolve, host, port).is_some_and(|r| r.plain);
    if plain {
        let client = match tokio::time::timeout(HANDSHAKE_TIMEOUT, start.into_stream(config)).await
        {
            Ok(Ok(stream)) => stream,
            _ => return, // the client gave up (or does not trust the run CA)
        };
        drop(rec); // the tunnel's own event; each request inside gets one
        let proto = if speaks_h2(&client) {
            Proto::Http2
        } else {
            Proto::Http1
        };
        let first: Result<h2::Opened, UpstreamError> = Ok((Box::new(upstream), false));
        let pool = Pool::new(Some(first), redialer(shared, host, port, true));
        forward::serve(client, conn(shared, host, port, proto, true, pool)).await;
        return;
    }
    // Both handshakes at once: the upstream's name is known from the CONNECT (and the SNI
    // agrees), so the client need not wait for the second one to start. HTTP/2 is offered
    // upstream only to carry a client's HTTP/2 (the gate prefers h2 when the client offers it).
    let offers_h2 = start
        .client_hello()
        .alpn()
        .is_some_and(|mut offered| offered.any(|p| p == b"h2"));
    let (client, upstream) = tokio::join!(
        tokio::time::timeout(HANDSHAKE_TIMEOUT, start.into_stream(config)),
        connect_upstream(upstream, host, &shared.upstream_trust, offers_h2)
    );
    let Ok(Ok(client)) = client else {
        return; // the client gave up (or does not trust the run CA)
    };
    let proto = if speaks_h2(&client) {
        Proto::Http2
    } else {
        Proto::Http1
    };
    // Every request gets an answer, a readable 502 included, in the client's protocol.
    let first = upstream
        .map(|s| {
            let h2 = upstream_h2(&s);
            (Box::new(s) as Box<dyn h2::Io>, h2)
        })
        .map_err(|error| UpstreamError::Tls {
            host: host.to_owned(),
            port,
            error,
        });
    if first.is_err() {
        rec.status(502);
    }
    drop(rec);
    let pool = Pool::new(Some(first), redialer(shared, host, port, false));
    forward::serve(client, conn(shared, host, port, proto, false, pool)).await;
}

fn conn(
    shared: &Arc<Shared>,
    host: &str,
    port: u16,
    proto: Proto,
    forwarded_https: bool,
    pool: Pool,
) -> forward::Conn {
    forward::Conn {
        shared: Arc::clone(shared),
        host: host.to_owned(),
        port,
        forwarded_https,
        https: true,
        proto,
        keep_alive: true,
        pool,
    }
}

/// Did the client pick HTTP/2 by ALPN?
fn speaks_h2<S>(client: &tokio_rustls::server::TlsStream<S>) -> bool {
    client.get_ref().1.alpn_protocol() == Some(b"h2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_comparison_ignores_case_and_the_root_dot() {
        assert!(same_host("Example.com.", "example.com"));
        assert!(!same_host("evil.example", "example.com"));
        assert_eq!(
            sni_refusal(Some("Example.com."), "example.com", false),
            None
        );
        let why = sni_refusal(Some("evil.example"), "example.com", true).unwrap();
        assert!(why.contains("names evil.example, not example.com"), "{why}");
        assert_eq!(sni_refusal(None, "example.com", true), None);
        assert!(sni_refusal(None, "example.com", false).is_some());
    }

    /// A real client's ClientHello (rustls's own), in whole or cut into pieces.
    fn client_hello(sni: Option<&str>) -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let name = match sni {
            Some(n) => rustls::pki_types::ServerName::try_from(n.to_owned()).unwrap(),
            None => rustls::pki_types::ServerName::IpAddress(
                std::net::Ipv4Addr::new(192, 0, 2, 1).into(),
            ),
        };
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    async fn peeked(
        bytes: Vec<u8>,
        pieces: usize,
    ) -> (Result<Option<String>, NotAClientHello>, Vec<u8>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut near, far) = tokio::io::duplex(256 * 1024);
        let writer = tokio::spawn(async move {
            let step = bytes.len().div_ceil(pieces);
            for chunk in bytes.chunks(step) {
                near.write_all(chunk).await.unwrap();
                near.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut client = Buffered::new(far);
        let sni = peek_sni(&mut client).await;
        writer.await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            client.read_to_end(&mut rest),
        )
        .await;
        (sni, rest)
    }

    #[tokio::test]
    async fn the_sni_is_read_from_peeked_bytes_that_stay_for_the_splice() {
        let hello = client_hello(Some("api.example.com"));
        for pieces in [1, 3, hello.len()] {
            let (sni, rest) = peeked(hello.clone(), pieces).await;
            assert_eq!(sni, Ok(Some("api.example.com".into())), "{pieces}");
            assert_eq!(rest, hello, "the bytes were consumed ({pieces} pieces)");
        }
        let (sni, _) = peeked(client_hello(None), 1).await;
        assert_eq!(sni, Ok(None));
        let (sni, _) = peeked(b"\x16\x03\x01\x00\x05hello-not-a-client-hello".to_vec(), 1).await;
        assert_eq!(sni, Err(NotAClientHello));
        let (sni, _) = peeked(hello[..hello.len() / 2].to_vec(), 1).await;
        assert_eq!(sni, Err(NotAClientHello));
    }
}
