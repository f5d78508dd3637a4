//! Making TLS clients inside the sandbox trust the run's CA (gate.md §3.4): the merged bundle
//! (run CA + host roots) is bind-mounted read-only over every distro bundle path that exists,
//! which catches clients that never read a variable (libcurl's compiled-in default, OpenSSL
//! defaults, Go, rustls-native-certs); the variables cover the rest. Variables that *replace*
//! a tool's roots get the whole bundle; additive ones get the CA alone.

use std::path::{Path, PathBuf};

/// Where distributions keep their CA bundle (Go's `root_linux.go` list).
pub const DISTRO_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Variables whose value replaces the tool's roots: they name the whole bundle.
const REPLACING: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
    "NIX_SSL_CERT_FILE",
    "BUNDLE_SSL_CA_CERT",
    "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
    "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
];

/// Variables whose value is added to the tool's roots: they name the CA alone.
const ADDITIVE: &[&str] = &["NODE_EXTRA_CA_CERTS", "DENO_CERT"];

/// The run's trust files on the host; both are mounted into the sandbox at the same paths.
#[derive(Debug, Clone)]
pub struct TrustFiles {
    /// Run CA + host roots, PEM.
    pub bundle: PathBuf,
    /// The run CA alone, PEM.
    pub ca: PathBuf,
}

/// The environment that points clients at the trust files, plus `NODE_USE_ENV_PROXY=1` so
/// Node's own `fetch` honours the proxy variables.
pub fn trust_env(files: &TrustFiles) -> Vec<(String, String)> {
    let bundle = files.bundle.display().to_string();
    let ca = files.ca.display().to_string();
    let mut env: Vec<(String, String)> = REPLACING
        .iter()
        .map(|k| ((*k).to_owned(), bundle.clone()))
        .chain(ADDITIVE.iter().map(|k| ((*k).to_owned(), ca.clone())))
        .collect();
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env
}

/// `(bundle, path)` for every distro bundle path on this machine, symlinks resolved (a bind
/// mount lands on the real file), each path once.
pub fn bundle_overrides(bundle: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = Vec::new();
    for p in DISTRO_BUNDLES {
        let Ok(real) = Path::new(p).canonicalize() else {
            continue;
        };
        if real.is_file() && !out.iter().any(|(_, d)| *d == real) {
            out.push((bundle.to_path_buf(), real));
        }
    }
    out
}

/// The text of the host's own bundle: `$SSL_CERT_FILE` if set, else the first distro bundle.
pub fn host_bundle_text() -> Option<String> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    from_env
        .into_iter()
        .chain(DISTRO_BUNDLES.iter().map(PathBuf::from))
        .find_map(|p| std::fs::read_to_string(p).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_variables_name_the_bundle_and_additive_ones_the_ca() {
        let files = TrustFiles {
            bundle: "/run/b.pem".into(),
            ca: "/run/ca.pem".into(),
        };
        let env = trust_env(&files);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SSL_CERT_FILE"), Some("/run/b.pem"));
        assert_eq!(get("GIT_SSL_CAINFO"), Some("/run/b.pem"));
        assert_eq!(get("NODE_EXTRA_CA_CERTS"), Some("/run/ca.pem"));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
        assert_eq!(get("NODE_TLS_REJECT_UNAUTHORIZED"), None);
    }
}
