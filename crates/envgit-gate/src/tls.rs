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
    if let Some(sni) = start.client_hello().server_name()
        && !same_host(sni, host)
    {
        // The tunnel was decided for `host`; a handshake for another name must not reuse it.
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
    }
}
