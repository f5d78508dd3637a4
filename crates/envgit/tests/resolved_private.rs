//! A name the policy allows that resolves to a loopback, link-local or metadata address (DNS
//! rebinding, a hijacked record, a glob's subdomain) never reaches the host's own services or
//! the cloud's metadata endpoint: the gate vets the address it resolved and dials only that.
//! Run for real in a network and mount namespace of the test's own (root only), where
//! `/etc/hosts` points the names at listeners on loopback and on 169.254.169.254, which log
//! every connection they accept. An explicit `host:port` entry does reach its address (the
//! policy's documented way to allow one), which shows the listeners would have seen the others.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use support::{Env, envgit_bin};

const HOSTS: &str = "127.0.0.1 localhost\n\
                     127.0.0.1 loop.envgit.test\n\
                     169.254.169.254 meta.envgit.test\n\
                     169.254.169.254 x.glob.envgit.test\n\
                     127.0.0.2 explicit.envgit.test\n";

#[test]
fn allowed_names_resolving_to_loopback_or_metadata_addresses_connect_nowhere() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("SKIPPED: needs root (a network and mount namespace of the test's own)");
        return;
    }
    let env = Env::new();
    env.init();
    let allow = "\"loop.envgit.test\", \"meta.envgit.test\", \"*.glob.envgit.test:443\", \
                 \"explicit.envgit.test:443\"";
    let yaml = env.read("envgit.yaml").replace(
        "# network:\n#   allow:",
        &format!("network:\n  allow: [{allow}]\n#   allow:"),
    );
    env.write("envgit.yaml", &yaml);
    let hosts = env.tmp.path().join("hosts");
    std::fs::write(&hosts, HOSTS).unwrap();
    let log = env.tmp.path().join("accepts.log");
    let ready = env.tmp.path().join("ready");
    let listener = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/accept_log.py");
    let step = "for u in https://loop.envgit.test/ http://loop.envgit.test/ \
                https://meta.envgit.test/ http://meta.envgit.test/latest/meta-data/ \
                https://x.glob.envgit.test/ https://explicit.envgit.test/; do \
                curl -s -m 5 -o /dev/null \"$u\"; echo \"$u $?\"; done";
    let script = format!(
        "set -e; ip link set lo up; ip addr add 169.254.169.254/32 dev lo; \
         mount --bind '{hosts}' /etc/hosts; \
         python3 '{listener}' '{log}' '{ready}' 127.0.0.1:443 127.0.0.1:80 127.0.0.2:443 \
           169.254.169.254:443 169.254.169.254:80 & \
         i=0; while [ ! -e '{ready}' ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; \
         set +e; '{bin}' run sh -c '{step}'; echo RUN-EXIT=$?; kill $! 2>/dev/null; true",
        hosts = hosts.display(),
        listener = listener.display(),
        log = log.display(),
        ready = ready.display(),
        bin = envgit_bin(),
    );
    let out = env
        .cmd_of("unshare", &env.project)
        .args(["-n", "-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("RUN-EXIT="), "{stdout}{stderr}");
    let accepted = std::fs::read_to_string(&log).unwrap_or_default();
    // The explicit entry reached its listener: the namespace, the names and the listeners work.
    assert!(
        accepted.contains("accept 127.0.0.2:443"),
        "the explicit entry connected nowhere: {accepted:?}\n{stdout}{stderr}"
    );
    let others: Vec<&str> = accepted
        .lines()
        .filter(|l| *l != "accept 127.0.0.2:443")
        .collect();
    assert!(
        others.is_empty(),
        "an allowed name reached a loopback or metadata address: {others:?}\n{stdout}{stderr}"
    );
    // Each refusal names the address and the rule.
    for (name, addr) in [
        ("loop.envgit.test", "127.0.0.1"),
        ("meta.envgit.test", "169.254.169.254"),
        ("x.glob.envgit.test", "169.254.169.254"),
    ] {
        assert!(
            stderr.lines().any(|l| l.contains(name)
                && l.contains("(rule network.private)")
                && l.contains(&format!("resolved to {addr}"))),
            "no refusal of {name} at {addr}: {stderr}"
        );
    }
}
