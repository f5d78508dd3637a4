//! TLS from the gate to upstreams: the roots they are verified against (the host's, and the
//! extra CA a private registry needs) and the handshake, offering HTTP/2 only when the client
//! speaks it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long a TLS handshake may take (the client's with the gate, the gate's with upstream).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why TLS to an upstream could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamTlsError {
    /// The roots could not be built (the extra CA file); shared by every connection of the
    /// run, as the roots are built once.
    #[error("{0}")]
    Roots(Arc<RootsError>),
    #[error("{0}")]
    Name(rustls::pki_types::InvalidDnsNameError),
    #[error("{0}")]
    Handshake(std::io::Error),
    #[error("the handshake timed out")]
    TimedOut,
}

/// Why the roots or the client configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RootsError {
    #[error("the extra upstream CA file is not PEM: {0}")]
    NotPem(#[source] rustls::pki_types::pem::Error),
    #[error("the extra upstream CA is not usable: {0}")]
    Unusable(#[source] rustls::Error),
    /// The crypto provider offers none of the default protocol versions.
    #[error("{0}")]
    Protocols(#[source] rustls::Error),
}

/// Roots the gate verifies upstreams against, built on first use (reading the host's store
/// costs milliseconds a run without TLS should not pay).
pub(crate) struct UpstreamTrust {
    extra_pem: Vec<u8>,
    config: OnceLock<Result<UpstreamConfigs, Arc<RootsError>>>,
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

    fn config(&self, offer_h2: bool) -> Result<Arc<ClientConfig>, Arc<RootsError>> {
        let (h1, h2) = self
            .config
            .get_or_init(|| {
                let h1 = build_client_config(&self.extra_pem).map_err(Arc::new)?;
                let mut h2 = (*h1).clone();
                h2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                Ok((h1, Arc::new(h2)))
            })
            .clone()?;
        Ok(if offer_h2 { h2 } else { h1 })
    }
}

fn build_client_config(extra_pem: &[u8]) -> Result<Arc<ClientConfig>, RootsError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(extra_pem) {
        let cert: CertificateDer<'static> = cert.map_err(RootsError::NotPem)?;
        roots.add(cert).map_err(RootsError::Unusable)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(RootsError::Protocols)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// TLS to the upstream, offering HTTP/2 as well when `offer_h2` (the client speaks it).
pub(crate) async fn connect_upstream(
    upstream: TcpStream,
    host: &str,
    trust: &UpstreamTrust,
    offer_h2: bool,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, UpstreamTlsError> {
    let config = trust.config(offer_h2).map_err(UpstreamTlsError::Roots)?;
    let name = ServerName::try_from(host.to_owned()).map_err(UpstreamTlsError::Name)?;
    match tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        TlsConnector::from(config).connect(name, upstream),
    )
    .await
    {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(UpstreamTlsError::Handshake(e)),
        Err(_) => Err(UpstreamTlsError::TimedOut),
    }
}

/// Did the upstream pick HTTP/2 by ALPN?
pub(crate) fn upstream_h2<S>(upstream: &tokio_rustls::client::TlsStream<S>) -> bool {
    upstream.get_ref().1.alpn_protocol() == Some(b"h2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extra_ca_that_is_not_pem_or_not_a_certificate_is_refused_saying_which() {
        let not_base64 = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let e = build_client_config(not_base64).unwrap_err();
        assert!(matches!(e, RootsError::NotPem(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("the extra upstream CA file is not PEM: "),
            "{e}"
        );

        let not_a_certificate = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = build_client_config(not_a_certificate).unwrap_err();
        assert!(matches!(e, RootsError::Unusable(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("the extra upstream CA is not usable: "),
            "{e}"
        );
    }

    #[test]
    fn a_roots_error_is_kept_for_every_later_connection() {
        let trust = UpstreamTrust::new(
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec(),
        );
        let first = trust.config(false).unwrap_err();
        let second = trust.config(true).unwrap_err();
        assert!(Arc::ptr_eq(&first, &second));
    }
}
