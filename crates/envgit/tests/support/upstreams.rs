//! Upstreams for the gate's tests: a test CA and a leaf per host, and the Python servers in
//! this directory, each printing the port it listens on first.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The path of a helper in `tests/support`.
pub fn support_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
}

/// A test CA and a leaf for each host, as PEM files in `dir`: `ca.pem`, `HOST.pem`, `HOST.key`.
pub fn mint(dir: &Path, hosts: &[&str]) {
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "envgit test upstream CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    for host in hosts {
        let mut leaf = CertificateParams::new(vec![(*host).to_owned()]).unwrap();
        leaf.use_authority_key_identifier_extension = true;
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.join(format!("{host}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{host}.key")), key.serialize_pem()).unwrap();
    }
}

/// Starts a Python helper that prints its port first.
pub fn spawn_py(script: &str, args: &[&str]) -> (Child, u16) {
    let mut cmd = Command::new("python3");
    cmd.arg(support_script(script)).args(args);
    spawn_server(script, cmd)
}

/// Starts `cmd`, a server that prints the port it listens on as its first line (`name` says
/// which in a failure), its stderr discarded.
pub fn spawn_server(name: &str, mut cmd: Command) -> (Child, u16) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name}: no port in {line:?}"));
    (child, port)
}
