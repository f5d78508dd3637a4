//! Making TLS clients inside the sandbox trust the run's CA (gate.md §3.4): the merged bundle
//! (run CA + host roots) is bind-mounted read-only over every distro bundle path that exists,
//! which catches clients that never read a variable (libcurl's compiled-in default, OpenSSL
//! defaults, Go, rustls-native-certs); the variables cover the rest. Variables that *replace*
//! a tool's roots get the whole bundle; additive ones get the CA alone.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
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

/// The host's own bundle, open: `$SSL_CERT_FILE` if set, else the first distro bundle.
fn open_host_bundle() -> Option<File> {
    host_bundle().map(|(_, f)| f)
}

fn host_bundle() -> Option<(PathBuf, File)> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    from_env
        .into_iter()
        .chain(DISTRO_BUNDLES.iter().map(PathBuf::from))
        .find_map(|p| {
            File::open(&p)
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
                .map(|f| (p, f))
        })
}

/// Which host bundle [`write_bundle`] would copy now, and in which state: its path, device,
/// inode, size and change time. A merged bundle written when this was the same holds the
/// host's roots of now (a package update that rewrites the bundle changes it).
pub fn host_bundle_identity() -> String {
    use std::os::unix::fs::MetadataExt;
    match host_bundle().and_then(|(p, f)| Some((p, f.metadata().ok()?))) {
        Some((p, m)) => format!(
            "{} {} {} {} {}.{}",
            p.display(),
            m.dev(),
            m.ino(),
            m.size(),
            m.ctime(),
            m.ctime_nsec()
        ),
        None => "none".to_owned(),
    }
}

/// Writes what the sandbox trusts at `path` (a new file): the run's CA (`ca_pem`), then the
/// host's own roots, so tools whose variables *replace* their roots still reach every host the
/// host can. The host's bundle (~220 KB) is copied by the kernel, never read into envgit's
/// memory: reading, joining and writing it cost 0.6 ms of every step.
pub fn write_bundle(path: &Path, ca_pem: &str) -> io::Result<()> {
    write_bundle_with(path, ca_pem, open_host_bundle())
}

fn write_bundle_with(path: &Path, ca_pem: &str, host: Option<File>) -> io::Result<()> {
    let mut out = File::create(path)?;
    out.write_all(ca_pem.as_bytes())?;
    if !ca_pem.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    if let Some(mut host) = host {
        // `io::copy` between two files is `copy_file_range` (or `sendfile`) on Linux.
        let copied = io::copy(&mut host, &mut out)?;
        let mut last = [0u8];
        if copied > 0 && host.read_at(&mut last, copied - 1)? == 1 && last[0] != b'\n' {
            out.write_all(b"\n")?;
        }
    }
    Ok(())
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

    fn bundle_of(ca: &str, host: Option<&[u8]>) -> String {
        let dir = tempfile::tempdir().unwrap();
        let host = host.map(|text| {
            let p = dir.path().join("host.pem");
            std::fs::write(&p, text).unwrap();
            File::open(p).unwrap()
        });
        let out = dir.path().join("bundle.pem");
        write_bundle_with(&out, ca, host).unwrap();
        std::fs::read_to_string(out).unwrap()
    }

    #[test]
    fn the_bundle_starts_with_the_run_ca_and_ends_with_the_hosts_roots() {
        assert_eq!(bundle_of("CA\n", Some(b"ROOTS")), "CA\nROOTS\n");
        assert_eq!(bundle_of("CA", Some(b"ROOTS\n")), "CA\nROOTS\n");
        assert_eq!(bundle_of("CA", Some(b"")), "CA\n");
        assert_eq!(bundle_of("CA", None), "CA\n");
        // Larger than any one copy the kernel makes at once.
        let roots = "R".repeat(300_000) + "\n";
        assert_eq!(
            bundle_of("CA\n", Some(roots.as_bytes())),
            format!("CA\n{roots}")
        );
    }
}
