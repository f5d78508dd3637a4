//! Refusals a person can act on: each names its rule and the fix, once per host and rule per
//! step, with a count for the repeats at the end of the step; the step's record carries the
//! same text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::ToSocketAddrs;

use support::Env;

fn with_allow(env: &Env, allow: &[&str]) {
    env.init();
    let list: Vec<String> = allow.iter().map(|a| format!("\"{a}\"")).collect();
    let yaml = env.read("envgit.yaml").replace(
        "# network:\n#   allow:",
        &format!("network:\n  allow: [{}]\n#   allow:", list.join(", ")),
    );
    env.write("envgit.yaml", &yaml);
}

fn lines_with<'a>(stderr: &'a str, needle: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(needle)).collect()
}

#[test]
fn an_unlisted_host_is_refused_once_with_the_fix_and_a_count() {
    let env = Env::new();
    with_allow(&env, &[]);
    let r = env.envgit(&[
        "run",
        "sh",
        "-c",
        "for i in 1 2 3 4; do curl -s -m 5 https://example.com/ >/dev/null; done; true",
    ]);
    let want = "envgit: denied CONNECT example.com:443 (rule network.allow) — to allow it, \
                add \"example.com\" to network.allow in envgit.yaml";
    let denied = lines_with(&r.stderr, "denied CONNECT example.com:443");
    assert_eq!(denied.len(), 2, "one line, then one count:\n{}", r.stderr);
    assert_eq!(denied[0], want, "{}", r.stderr);
    assert!(denied[1].ends_with("(4 times)"), "{}", r.stderr);
    let log = env.log_json();
    let what = log[0]["refusals"][0]["what"].as_str().unwrap().to_owned();
    assert!(
        what.contains("to allow it, add \"example.com\" to network.allow in envgit.yaml"),
        "{:#}",
        log[0]
    );
    // a second step announces again: the dedup is per step
    let r = env.envgit(&["run", "sh", "-c", "curl -s -m 5 https://example.com/; true"]);
    let denied = lines_with(&r.stderr, "denied CONNECT example.com:443");
    assert_eq!(denied, vec![want], "{}", r.stderr);
}

#[test]
fn a_private_address_names_the_address_and_the_explicit_entry() {
    // The machine's own name resolves to a loopback or private address on the host.
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let Some(addr) = (name.as_str(), 443)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .filter(|a| envgit_policy::is_special(a.ip()))
    else {
        eprintln!("skipped: {name} does not resolve to a private address here");
        return;
    };
    let env = Env::new();
    with_allow(&env, &[&name]);
    let r = env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!("for i in 1 2 3; do curl -s -m 5 https://{name}/ >/dev/null; done; true"),
    ]);
    let denied = lines_with(&r.stderr, &format!("denied CONNECT {name}:443"));
    assert_eq!(denied.len(), 2, "{}", r.stderr);
    assert!(
        denied[0].starts_with(&format!(
            "envgit: denied CONNECT {name}:443 (rule network.private) — "
        )),
        "{}",
        r.stderr
    );
    assert!(
        denied[0].contains(&format!("resolved to {}", addr.ip())),
        "{}",
        r.stderr
    );
    assert!(
        denied[0].contains(&format!(
            "to allow it, add \"{name}:443\" to network.allow in envgit.yaml"
        )),
        "{}",
        r.stderr
    );
    assert!(denied[1].ends_with("(3 times)"), "{}", r.stderr);
}
