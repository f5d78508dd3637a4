//! The gate judging real git traffic inside `envgit run`: git smart HTTP served by git's own
//! http-backend on loopback. Fetch passes, push is refused at the request however it is spelled,
//! an `allow` rule lets it out and marks the step.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

#[allow(dead_code)]
#[path = "../src/demo/git_server.rs"]
mod git_server;

use support::Env;

struct Remote {
    env: Env,
    server: git_server::GitServer,
    bare: std::path::PathBuf,
}

fn remote_and_clone(policy_extra: &str) -> Remote {
    let env = Env::new();
    let (remotes, bare) = env.bare_remote();
    let server = git_server::GitServer::start(&remotes).unwrap();
    env.clone_project_from(&format!("http://127.0.0.1:{}/app.git", server.port));
    let port = server.port;
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{port}")])
        .ok();
    if !policy_extra.is_empty() {
        let yaml = env
            .read("envgit.yaml")
            .replace("irreversible:\n", &format!("irreversible:\n{policy_extra}"));
        env.write("envgit.yaml", &yaml);
    }
    Remote { env, server, bare }
}

impl Remote {
    fn head(&self) -> String {
        support::head_of(&self.bare)
    }
}

const COMMIT: &str = "echo change >> a.txt && git commit -qam change";

#[test]
fn fetch_passes_and_push_is_refused_at_the_request_however_it_is_spelled() {
    let r = remote_and_clone("");
    let env = &r.env;
    let before = r.head();
    env.envgit(&[
        "run",
        "sh",
        "-c",
        "git fetch -q origin && git pull -q origin main",
    ])
    .ok();
    for push in [
        "git push origin HEAD:main",
        "g=git; $g push origin HEAD:main",
    ] {
        let seen = r.server.requests().len();
        let out = env.envgit(&["run", "sh", "-c", &format!("{COMMIT} && {push}")]);
        assert_ne!(out.code, 0, "{push}: the push succeeded");
        assert!(
            out.stderr.contains(&format!(
                "envgit: denied POST 127.0.0.1:{}/app.git/git-receive-pack (rule git.push)",
                r.server.port
            )),
            "{push}: {}",
            out.stderr
        );
        let saw: Vec<String> = r.server.requests().into_iter().skip(seen).collect();
        assert!(
            saw.iter()
                .any(|s| s.contains("info/refs?service=git-receive-pack")),
            "{saw:?}"
        );
        assert!(!saw.iter().any(|s| s.starts_with("POST")), "{saw:?}");
        assert_eq!(r.head(), before, "{push}: the remote's refs changed");
    }
    let v = env.envgit(&["log", "-v", "-n", "1"]).ok().stdout;
    assert!(v.contains("/app.git/git-receive-pack rule=git.push"), "{v}");
}

#[test]
fn an_allow_rule_lets_the_push_out_and_marks_the_step_and_rewind_warns() {
    let extra = "  - net: { host: \"127.0.0.1\", method: POST, path: \"/**/git-receive-pack\" }\n    action: allow\n    id: local.push\n";
    let r = remote_and_clone(extra);
    let env = &r.env;
    let before = r.head();
    let out = env
        .envgit(&[
            "run",
            "sh",
            "-c",
            &format!("{COMMIT} && git push -q origin HEAD:main"),
        ])
        .ok();
    assert_ne!(
        r.head(),
        before,
        "the allowed push did not arrive: {}",
        out.stderr
    );
    let log = env.log_json();
    assert!(
        log[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "irreversible"),
        "{}",
        log[0]
    );
    assert!(
        log[0]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["irreversible"] == true && q["rule"] == "local.push")
    );
    let step = log[0]["number"].as_u64().unwrap();
    let w = env.envgit(&["rewind", "1"]).ok();
    assert!(
        w.stderr.contains(&format!("warning: step {step} sent POST 127.0.0.1:{}/app.git/git-receive-pack (local.push): rewind cannot undo it", r.server.port)),
        "{}",
        w.stderr
    );
}

#[test]
fn an_ask_rule_without_an_approver_fails_closed() {
    let extra = "  - net: { host: \"127.0.0.1\", method: POST, path: \"/**/git-receive-pack\" }\n    action: ask\n    id: local.push\n";
    let r = remote_and_clone(extra);
    // Nobody may answer: no terminal prompt, no `envgit approve`.
    let yaml = r.env.read("envgit.yaml");
    r.env.write(
        "envgit.yaml",
        &format!("{yaml}\napprovers:\n  terminal: false\n  socket: false\n"),
    );
    let before = r.head();
    let started = std::time::Instant::now();
    let out = r.env.envgit(&[
        "run",
        "sh",
        "-c",
        &format!("{COMMIT} && git push -q origin HEAD:main"),
    ]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("(rule local.push)"), "{}", out.stderr);
    assert!(!out.stderr.contains("holding"), "{}", out.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert_eq!(r.head(), before);
}
