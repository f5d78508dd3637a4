//! `envgit demo` runs in the suite: real git, sandbox, gate and store, on loopback only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Env;

#[test]
fn the_demo_refuses_the_push_and_the_rewind_brings_the_commit_back() {
    let env = Env::new();
    let keep = env.tmp.path().join("demo");
    let started = std::time::Instant::now();
    let r = env
        .envgit_in(
            env.tmp.path(),
            &["demo", "--json", "--keep", keep.to_str().unwrap()],
        )
        .ok();
    let elapsed = started.elapsed();
    let d = r.json();
    let checks = &d["checks"];
    assert_eq!(checks["push_refused_rule"], "git.push", "{d:#}");
    assert_eq!(checks["remote_refs_unchanged"], true, "{d:#}");
    assert_eq!(checks["head_after_rewind"], checks["step2_commit"], "{d:#}");
    assert_eq!(
        checks["greet_js_after_rewind"],
        "console.log(\"hello from the agent\")\n"
    );
    // The remote saw the ref advertisement for receive-pack, and no pack.
    let saw: Vec<&str> = d["remote_saw_in_step_3"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        saw.iter()
            .any(|s| s.starts_with("GET /app.git/info/refs?service=git-receive-pack")),
        "{saw:?}"
    );
    assert!(!saw.iter().any(|s| s.starts_with("POST")), "{saw:?}");
    let transcript = d["transcript"].as_array().unwrap();
    let step3 = transcript
        .iter()
        .find(|s| s["title"].as_str().unwrap().starts_with("step 3"))
        .unwrap();
    let out = step3["output"].as_str().unwrap();
    assert!(
        out.contains("envgit: denied POST 127.0.0.1:")
            && out.contains("/app.git/git-receive-pack (rule git.push)"),
        "{out}"
    );
    let rewind = transcript
        .iter()
        .find(|s| s["command"] == "envgit rewind 2")
        .unwrap();
    assert!(
        rewind["output"]
            .as_str()
            .unwrap()
            .contains("rewound to step 2 (2 step(s) undone)"),
        "{rewind}"
    );
    // Everything it did is in the kept store's history.
    assert_eq!(d["log"].as_array().unwrap().len(), 5);
    // Not a timing assert: the demo must simply finish (a person waits for it).
    eprintln!("demo took {elapsed:?}");
}

/// A person who is not root runs the demo: its temporary projects and store leave nothing behind,
/// in their `TMPDIR` or on tmpfs (the home overlay's work directory, mode 0, included).
#[test]
fn as_a_user_the_demo_leaves_nothing_behind() {
    let env = Env::new();
    let Some((out, left)) = env.as_a_user_in_own_tmpdir(&["demo", "--json"]) else {
        eprintln!("skipped: needs root (to run envgit as another user)");
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(left.is_empty(), "left behind: {left:?}");
}
