//! `envgit claude` with the real Claude Code CLI (2.1.332, installed by
//! `scripts/install-deps-agents --claude`), offline: a scripted Messages API server on
//! 127.0.0.1, reached through envgit's gate. What is enforced today: every request through the
//! gate (a push hidden behind a variable is refused at the request), shell rules refused by the
//! PreToolUse hook with the reason reaching the model. Not yet: a step per tool call, and the
//! API key kept out of the sandbox (see crates/envgit/src/commands/claude.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents_support;
mod support;

#[allow(dead_code)]
#[path = "../src/demo/git_server.rs"]
mod git_server;

use std::time::Duration;

use agents_support::{Api, ModelServer, Turn, agent_bin_dir, path_with, run_bounded};
use support::Env;

#[test]
fn claude_runs_in_the_sandbox_and_gate_with_shell_rules_refused_at_the_hook() {
    let env = Env::new();
    let remotes = env.tmp.path().join("remotes");
    std::fs::create_dir_all(&remotes).unwrap();
    let bare = remotes.join("app.git");
    env.git(&remotes, &["init", "-q", "--bare", "-b", "main", "app.git"]);
    env.git(&bare, &["config", "http.receivepack", "true"]);
    let remote = git_server::GitServer::start(&remotes).unwrap();
    let url = format!("http://127.0.0.1:{}/app.git", remote.port);
    let seed = env.tmp.path().join("seed");
    env.git(env.tmp.path(), &["clone", "-q", &url, "seed"]);
    std::fs::write(seed.join("a.txt"), "a").unwrap();
    env.git(&seed, &["add", "-A"]);
    env.git(&seed, &["commit", "-q", "-m", "seed"]);
    env.git(&seed, &["push", "-q", "origin", "HEAD:main"]);
    std::fs::remove_dir_all(&env.project).unwrap();
    env.git(env.tmp.path(), &["clone", "-q", &url, "project"]);
    env.git(&env.project, &["config", "user.name", "agent"]);
    env.git(
        &env.project,
        &["config", "user.email", "agent@example.invalid"],
    );
    let head = || {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "refs/heads/main"])
            .current_dir(&bare)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = head();
    let server = ModelServer::start(
        Api::Messages,
        vec![
            Turn::Shell("echo from-claude > cl.txt".into()),
            Turn::Shell("touch cl-denied.txt && npm publish".into()),
            Turn::Shell(
                "echo change >> a.txt && git commit -qam change && g=git; $g push origin HEAD:main"
                    .into(),
            ),
            Turn::Say("all done".into()),
        ],
    );
    env.envgit(&[
        "init",
        "--allow",
        &format!("127.0.0.1:{}", remote.port),
        "--allow",
        &format!("127.0.0.1:{}", server.port),
    ])
    .ok();
    let yaml = env.read("envgit.yaml") + "shell:\n  - deny: [\"npm publish\"]\n";
    env.write("envgit.yaml", &yaml);
    let first_new = env.record() + 1;

    let bin = agent_bin_dir("claude");
    let mut cmd = env.cmd(&env.project);
    cmd.args([
        "claude",
        "-p",
        "do the scripted work",
        "--allowedTools",
        "Bash",
        "--output-format",
        "stream-json",
        "--verbose",
    ])
    .env("HOME", env.user_home())
    .env("PATH", path_with(&bin))
    .env(
        "ANTHROPIC_BASE_URL",
        format!("http://127.0.0.1:{}", server.port),
    )
    .env("ANTHROPIC_API_KEY", "test")
    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    .env("DISABLE_AUTOUPDATER", "1");
    let (stdout, stderr) = run_bounded(cmd, Duration::from_secs(240));
    let transcript = server.transcript();
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nmodel saw:\n{transcript}");

    // The command ran inside, and its file is in the run's step.
    assert_eq!(env.read("cl.txt"), "from-claude\n", "{ctx}");
    let log = env.log_json();
    let steps: Vec<&serde_json::Value> = log
        .iter()
        .filter(|s| s["number"].as_u64().unwrap() >= first_new)
        .collect();
    assert_eq!(steps.len(), 1, "{steps:#?}\n{ctx}");
    let step = steps[0];
    assert!(
        step["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "cl.txt"),
        "{step:#}"
    );

    // The shell rule refused at the hook; the reason reached the model.
    assert!(
        !env.path("cl-denied.txt").exists(),
        "the refused command ran: {ctx}"
    );
    assert!(
        transcript.contains(
            "envgit: denied command touch cl-denied.txt && npm publish (rule shell.deny)"
        ),
        "{ctx}"
    );

    // The push was refused at the request; the remote is unchanged; the refusal is on the step.
    assert_eq!(head(), before, "{ctx}");
    assert!(
        step["refusals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["rule"] == "git.push"),
        "{step:#}\n{ctx}"
    );
    // The model traffic went through the gate too.
    assert!(
        step["requests"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["path"].as_str().unwrap_or("").starts_with("/v1/messages")),
        "{step:#}"
    );
}
