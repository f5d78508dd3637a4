//! The sandbox's certificate authority: an ECDSA P-256 key, a self-signed CA certificate that
//! only the sandbox trusts, and one leaf per host (exactly one SAN, Authority Key Identifier
//! present, EKU serverAuth), minted on first use and cached. All leaves share one key, so
//! minting costs a signature, not a keygen. A CA is made fresh ([`RunCa::generate`]) or taken
//! back from what [`RunCa::stored`] wrote (the caller keeps it where the sandbox never looks,
//! and decides how long it is used: `envgit` makes one per project and day).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};

/// Leaves are cached per host; past this many the cache starts over (a run talks to a few
/// dozen hosts, so this only bounds a hostile workload).
const LEAF_CACHE: usize = 256;
/// Clock skew tolerated between this machine and clients (the CA is backdated this much).
const BACKDATE: Duration = Duration::hours(1);
const CA_VALIDITY: Duration = Duration::days(7);
const LEAF_VALIDITY: Duration = Duration::days(1);

#[derive(Debug)]
pub struct CaError(String);

impl std::fmt::Display for CaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "per-run CA: {}", self.0)
    }
}

impl std::error::Error for CaError {}

fn err(what: &str) -> impl Fn(rcgen::Error) -> CaError + '_ {
    move |e| CaError(format!("{what}: {e}"))
}

/// The sandbox's CA. The keys are in this process's memory, and wherever the caller writes
/// [`RunCa::stored`]; [`RunCa::certificate_pem`] is all the sandbox is given.
pub struct RunCa {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    leaf_key: KeyPair,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
    stored: StoredCa,
}

/// What a CA is made of, to be taken back by [`RunCa::restore`]: its keys (PKCS#8 PEM), its
/// certificate, and what its certificate was made from, so that the leaves it signs name it
/// exactly as before.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredCa {
    label: String,
    /// Unix seconds: when it was made, and the end of its validity.
    made_at: i64,
    not_after: i64,
    serial: Vec<u8>,
    cert_pem: String,
    ca_key_pem: String,
    leaf_key_pem: String,
}

impl StoredCa {
    /// When the CA was made (Unix seconds).
    pub fn made_at(&self) -> i64 {
        self.made_at
    }

    /// Its certificate, PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.cert_pem
    }
}

/// The CA certificate's fields; the same inputs give the same issuer name and key identifier.
fn ca_params(
    label: &str,
    made_at: OffsetDateTime,
    not_after: OffsetDateTime,
    serial: &[u8],
) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        format!("envgit {label} (trusted only inside its sandbox)"),
    );
    params
        .distinguished_name
        .push(DnType::OrganizationName, "envgit");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = made_at - BACKDATE;
    params.not_after = not_after;
    params.serial_number = Some(SerialNumber::from_slice(serial));
    params
}

impl RunCa {
    /// A fresh CA; `label` goes into its name so a person who finds the certificate knows
    /// where it came from.
    pub fn generate(label: &str) -> Result<RunCa, CaError> {
        // Whole seconds: what is stored gives back exactly these fields.
        let now = OffsetDateTime::from_unix_timestamp(OffsetDateTime::now_utc().unix_timestamp())
            .map_err(|e| CaError(format!("the clock: {e}")))?;
        let not_after = now + CA_VALIDITY;
        let serial = random_serial();
        let params = ca_params(label, now, not_after, &serial);
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(err("generating the CA key"))?;
        let cert = params
            .self_signed(&key)
            .map_err(err("signing the CA certificate"))?;
        let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(err("generating the leaf key"))?;
        let stored = StoredCa {
            label: label.to_owned(),
            made_at: now.unix_timestamp(),
            not_after: not_after.unix_timestamp(),
            serial: serial.to_vec(),
            cert_pem: cert.pem(),
            ca_key_pem: key.serialize_pem(),
            leaf_key_pem: leaf_key.serialize_pem(),
        };
        Ok(RunCa {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            issuer: Issuer::new(params, key),
            leaf_key,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            leaves: Mutex::default(),
            stored,
        })
    }

    /// The CA `stored` describes, as it was made.
    pub fn restore(stored: StoredCa) -> Result<RunCa, CaError> {
        let time = |t: i64| {
            OffsetDateTime::from_unix_timestamp(t)
                .map_err(|e| CaError(format!("a stored time: {e}")))
        };
        let params = ca_params(
            &stored.label,
            time(stored.made_at)?,
            time(stored.not_after)?,
            &stored.serial,
        );
        let key = KeyPair::from_pem(&stored.ca_key_pem).map_err(err("the stored CA key"))?;
        let leaf_key =
            KeyPair::from_pem(&stored.leaf_key_pem).map_err(err("the stored leaf key"))?;
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(stored.cert_pem.as_bytes())
            .map_err(|e| CaError(format!("the stored CA certificate: {e}")))?;
        Ok(RunCa {
            cert_pem: stored.cert_pem.clone(),
            cert_der: der,
            issuer: Issuer::new(params, key),
            leaf_key,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            leaves: Mutex::default(),
            stored,
        })
    }

    /// What [`RunCa::restore`] takes back: the keys included, so keep it private.
    pub fn stored(&self) -> &StoredCa {
        &self.stored
    }

    /// The CA certificate, PEM.
    pub fn certificate_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A TLS server configuration presenting a leaf for exactly `host` (a name or an IP
    /// literal), offering HTTP/2 and HTTP/1.1.
    pub(crate) fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        let host = host.to_ascii_lowercase();
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(&host) {
            return Ok(Arc::clone(config));
        }
        let config = Arc::new(self.mint(&host)?);
        if leaves.len() >= LEAF_CACHE {
            leaves.clear();
        }
        leaves.insert(host, Arc::clone(&config));
        Ok(config)
    }

    /// The leaf for `host`, DER (tests check it with OpenSSL's strict verifier).
    pub fn leaf_der(&self, host: &str) -> Result<Vec<u8>, CaError> {
        Ok(self.leaf(host)?.to_vec())
    }

    fn leaf(&self, host: &str) -> Result<CertificateDer<'static>, CaError> {
        if rustls::pki_types::ServerName::try_from(host).is_err() {
            return Err(CaError(format!("{host:?} is not a host name")));
        }
        let now = OffsetDateTime::now_utc();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.subject_alt_names = vec![match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.to_owned()
                    .try_into()
                    .map_err(|e| CaError(format!("{host:?} is not a DNS name: {e}")))?,
            ),
        }];
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = now - BACKDATE;
        params.not_after = now + LEAF_VALIDITY;
        params.serial_number = Some(SerialNumber::from_slice(&random_serial()));
        let leaf = params
            .signed_by(&self.leaf_key, &self.issuer)
            .map_err(err("signing a leaf certificate"))?;
        Ok(leaf.der().clone())
    }

    fn mint(&self, host: &str) -> Result<ServerConfig, CaError> {
        let leaf = self.leaf(host)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| CaError(format!("TLS versions: {e}")))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf, self.cert_der.clone()], key)
            .map_err(|e| CaError(format!("leaf for {host}: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

fn random_serial() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    // Serial numbers must be unique per CA, not secret: the clock and a counter would do, but
    // the OS generator is at hand and cheap.
    let _ = getrandom(&mut bytes);
    bytes[0] &= 0x7f; // positive
    bytes
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_cached_per_host_and_name_exactly_that_host() {
        let ca = RunCa::generate("test").unwrap();
        let a = ca.server_config("Example.COM").unwrap();
        let b = ca.server_config("example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = ca.server_config("127.0.0.1").unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(
            ca.certificate_pem()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        assert!(ca.server_config("not a name!").is_err());
    }

    /// OpenSSL's strict verifier (what Python >= 3.13 enforces: AKI present, CA key usage,
    /// basic constraints critical) accepts a leaf for a name and for an IP literal.
    #[test]
    fn leaves_pass_openssl_strict_verification() {
        leaves_of_pass_openssl_strict_verification(&RunCa::generate("strict").unwrap());
    }

    /// A CA taken back from what it stored is the same CA: the same certificate, and leaves
    /// that the certificate made before verifies (the same issuer name and key identifier).
    #[test]
    fn a_restored_ca_signs_leaves_its_first_certificate_verifies() {
        let made = RunCa::generate("kept").unwrap();
        let text = serde_json::to_string(made.stored()).unwrap();
        let back = RunCa::restore(serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back.certificate_pem(), made.certificate_pem());
        assert_eq!(back.stored().made_at(), made.stored().made_at());
        assert_eq!(back.cert_der, made.cert_der);
        leaves_of_pass_openssl_strict_verification(&back);
        let mut bad = made.stored().clone();
        bad.ca_key_pem = "not a key".into();
        assert!(RunCa::restore(bad).is_err());
    }

    fn leaves_of_pass_openssl_strict_verification(ca: &RunCa) {
        let dir = tempfile::tempdir().unwrap();
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, ca.certificate_pem()).unwrap();
        for host in ["registry.npmjs.org", "10.1.2.3"] {
            let der = dir.path().join("leaf.der");
            let pem = dir.path().join("leaf.pem");
            std::fs::write(&der, ca.leaf_der(host).unwrap()).unwrap();
            let conv = std::process::Command::new("openssl")
                .args(["x509", "-inform", "DER", "-in"])
                .arg(&der)
                .arg("-out")
                .arg(&pem)
                .output()
                .expect("openssl (scripts/install-deps installs it)");
            assert!(conv.status.success());
            let name_flag = if host.parse::<IpAddr>().is_ok() {
                "-verify_ip"
            } else {
                "-verify_hostname"
            };
            let out = std::process::Command::new("openssl")
                .args(["verify", "-x509_strict", "-purpose", "sslserver"])
                .args([name_flag, host, "-CAfile"])
                .arg(&ca_pem)
                .arg(&pem)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{host}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
