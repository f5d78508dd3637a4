//! TLS termination inside a CONNECT tunnel: read the ClientHello, check that its SNI names the
//! CONNECT target, present the run CA's leaf for that host, open TLS to the upstream (verified
//! against the host's roots, SNI = the same host), and hand both plaintext streams to the
//! per-request judgement in [`crate::forward`], HTTP/1 or HTTP/2 as the client chose by ALPN.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::{LazyConfigAcceptor, TlsConnector};

use crate::canonical::Proto;
use crate::conn::Prefixed;
use crate::decide::{self, RULE_SNI};
use crate::events::Recorder;
use crate::forward;
use crate::listener::Shared;
use crate::pool::{self as h2, Pool};
use crate::resolve;
use crate::upstream::{self, DialError};

/// How long either handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Roots the gate verifies upstreams against, built on first use (reading the host's store
/// costs milliseconds a run without TLS should not pay).
pub(crate) struct UpstreamTrust {
    extra_pem: Vec<u8>,
    config: OnceLock<Result<UpstreamConfigs, String>>,
}

/// Offering `http/1.1`, and offering `h2` first (for clients that speak HTTP/2).
type UpstreamConfigs = (Arc<ClientConfig>, Arc<ClientConfig>);

impl UpstreamTrust {
    /// `extra_pem`: certificates trusted in addition to the host's (a private registry's CA).
    pub(crate) fn new(extra_pem: Vec<u8>) -> UpstreamTrust {
        UpstreamTrust {
            extra_pem,
            config: OnceLock::new(),
        }
    }

    fn config(&self, offer_h2: bool) -> Result<Arc<ClientConfig>, String> {
        let (h1, h2) = self
            .config
            .get_or_init(|| {
                let h1 = build_client_config(&self.extra_pem)?;
                let mut h2 = (*h1).clone();
                h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                Ok((h1, Arc::new(h2)))
            })
            .clone()?;
        Ok(if offer_h2 { h2 } else { h1 })
    }
}

fn build_client_config(extra_pem: &[u8]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(extra_pem) {
        let cert: CertificateDer<'static> =
            cert.map_err(|e| format!("the extra upstream CA file is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the extra upstream CA is not usable: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn same_host(sni: &str, host: &str) -> bool {
    sni.trim_end_matches('.')
        .eq_ignore_ascii_case(host.trim_end_matches('.'))
}

/// Terminates the client's TLS for `host:port` and judges every request inside.
pub(crate) async fn terminate(
    client: Prefixed<UnixStream>,
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
            rec.decide(false, decide::RULE_OPAQUE);
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
        let first: Result<h2::Opened, String> = Ok((Box::new(upstream), false));
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
        connect_upstream(upstream, host, shared, offers_h2)
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
        .map_err(|msg| format!("TLS to {host}:{port} failed: {msg}"));
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

/// A new upstream connection when the upstream closed the last one (HTTP/1.1 servers may
/// close after any response): decided and dialled exactly as the first.
pub(crate) fn redialer(shared: &Arc<Shared>, host: &str, port: u16, plain: bool) -> h2::Redial {
    let shared = Arc::clone(shared);
    let host = host.to_owned();
    Arc::new(move || {
        let shared = Arc::clone(&shared);
        let host = host.clone();
        Box::pin(async move {
            let rule = match decide::connect(
                &shared.policy,
                shared.reserved_ports.as_deref(),
                &host,
                port,
            ) {
                envgit_policy::ConnectDecision::Allowed { rule } => rule,
                envgit_policy::ConnectDecision::Denied { reason, .. } => return Err(reason),
            };
            let tcp = upstream::dial(&host, port, &rule, &shared.resolve)
                .await
                .map_err(|e| match e {
                    DialError::Denied { reason, .. } => reason,
                    DialError::Failed(msg) => msg,
                })?;
            if plain {
                return Ok((Box::new(tcp) as Box<dyn h2::Io>, false));
            }
            connect_upstream(tcp, &host, &shared, true)
                .await
                .map(|s| {
                    let h2 = upstream_h2(&s);
                    (Box::new(s) as Box<dyn h2::Io>, h2)
                })
                .map_err(|msg| format!("TLS to {host}:{port} failed: {msg}"))
        })
    })
}

/// Did the client pick HTTP/2 by ALPN?
fn speaks_h2<S>(client: &tokio_rustls::server::TlsStream<S>) -> bool {
    client.get_ref().1.alpn_protocol() == Some(b"h2")
}

/// Did the upstream pick HTTP/2 by ALPN?
fn upstream_h2<S>(upstream: &tokio_rustls::client::TlsStream<S>) -> bool {
    upstream.get_ref().1.alpn_protocol() == Some(b"h2")
}

/// TLS to the upstream, offering HTTP/2 as well when `offer_h2` (the client speaks it).
async fn connect_upstream(
    upstream: TcpStream,
    host: &str,
    shared: &Shared,
    offer_h2: bool,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let config = shared.upstream_trust.config(offer_h2)?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        TlsConnector::from(config).connect(name, upstream),
    )
    .await
    {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the handshake timed out".into()),
    }
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
