//! `envgit selftest` with the real binary on this machine: every class is tried for real and
//! holds, one line each, `--json` says the same, and `--quick` is the subset doctor runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::Env;

#[test]
fn every_class_holds_here_and_each_is_reported() {
    let env = Env::new();
    let out = env.envgit(&["selftest", "--json"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let v = out.json();
    assert_eq!(v["ok"], true, "{v:#}");
    let classes = v["classes"].as_array().unwrap();
    let names: Vec<&str> = classes
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for want in [
        "gate: a push is refused at the request",
        "gate: Connection naming Content-Length",
        "gate: Content-Length and Transfer-Encoding",
        "gate: a fragment in the target",
        "gate: a pause before the request",
        "gate: an empty line before the request",
        "gate: a method override",
        "gate: a chunk size that overflows",
        "sandbox: ~/.ssh is unreadable",
        "sandbox: writes outside the project do not land",
        "sandbox: a host port not listed is unreachable",
        "sandbox: DNS to the outside goes nowhere",
        "gate: every request that arrived was judged",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // Each class says what it saw, and the push was answered by the gate's 403.
    assert!(
        classes
            .iter()
            .all(|c| !c["detail"].as_str().unwrap().is_empty())
    );
    let push = classes.iter().find(|c| c["name"] == names[0]).unwrap();
    assert!(push["detail"].as_str().unwrap().contains("403"), "{push}");
    let judged = classes.last().unwrap()["detail"].as_str().unwrap();
    assert!(judged.contains("each judged and recorded"), "{judged}");

    let human = env.envgit(&["selftest", "--quick"]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    let lines: Vec<&str> = human.stdout.lines().collect();
    assert!(
        lines.len() >= 4 && lines.len() < names.len(),
        "{}",
        human.stdout
    );
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l.starts_with("ok ")),
        "{}",
        human.stdout
    );
    assert!(
        lines.last().unwrap().starts_with("all "),
        "{}",
        human.stdout
    );
}
