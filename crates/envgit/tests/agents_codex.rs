//! `envgit codex` with the real Codex CLI (0.171.0, installed by scripts/install-deps-agents),
//! offline: a scripted Responses API server on 127.0.0.1 asks for commands and patches; envgit
//! is Codex's only execution environment. Assertions are on envgit's log and on side effects,
//! never on Codex's exit code (it exits 0 even when nothing could run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents_support;
mod support;

#[allow(dead_code)]
#[path = "../src/demo/git_server.rs"]
mod git_server;

use std::path::Path;
use std::time::Duration;

use agents_support::{Api, ModelServer, Turn, agent_bin_dir, path_with, run_bounded};
use serde_json::Value;
use support::Env;

/// A user Codex home with an MCP server that would leave `marker` behind if it ever started.
fn user_codex_home(env: &Env, marker: &Path) -> std::path::PathBuf {
    let dir = env.user_home().join(".codex");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "model_reasoning_effort = \"low\"\n\n[mcp_servers.spy]\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}; sleep 5\"]\n",
            marker.display()
        ),
    )
    .unwrap();
    dir
}

fn codex_args(port: u16, prompt: &str) -> Vec<String> {
    [
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        "mock-model",
        "-c",
        "model_provider=mock",
        "-c",
        &format!(
            "model_providers.mock={{name=\"mock\",base_url=\"http://127.0.0.1:{port}/v1\",wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}}"
        ),
        prompt,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `envgit codex exec …` in the project; returns (stdout, stderr).
fn envgit_codex(env: &Env, server: &ModelServer) -> (String, String) {
    let bin = agent_bin_dir("codex");
    let mut cmd = env.cmd(&env.project);
    cmd.arg("codex")
        .args(codex_args(server.port, "do the scripted work"))
        .env("HOME", env.user_home())
        .env("CODEX_HOME", env.user_home().join(".codex"))
        .env("PATH", path_with(&bin))
        .env_remove("CODEX_EXEC_SERVER_URL")
        .env_remove("OPENAI_API_KEY")
        .env(
            "ENVGIT_CODEX_TRACE",
            env.tmp.path().join("codex-wire.jsonl"),
        );
    run_bounded(cmd, Duration::from_secs(180))
}

fn patch(body: &str) -> String {
    format!("apply_patch <<'EOF'\n*** Begin Patch\n{body}*** End Patch\nEOF\n")
}

fn steps_with_refusal<'a>(log: &'a [Value], what: &str) -> Vec<&'a Value> {
    log.iter()
        .filter(|s| {
            s["refusals"].as_array().is_some_and(|r| {
                r.iter()
                    .any(|r| r["what"].as_str().unwrap_or("").contains(what))
            })
        })
        .collect()
}

fn changed(step: &Value, path: &str) -> bool {
    step["changes"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["path"] == path))
}

#[test]
fn codex_commands_are_steps_and_fs_calls_obey_the_policy() {
    let env = Env::new();
    env.write(".env", "SECRET=hunter2-value\n");
    env.init();
    let yaml = env.read("envgit.yaml") + "shell:\n  - deny: [\"npm publish\"]\n";
    env.write("envgit.yaml", &yaml);
    env.record();
    let yaml_before = env.read("envgit.yaml");
    let marker = env.tmp.path().join("mcp-started");
    user_codex_home(&env, &marker);
    let server = ModelServer::start(
        Api::Responses,
        vec![
            Turn::Shell("echo made-by-codex > made.txt && cat made.txt".into()),
            Turn::Shell("touch ran-anyway.txt && npm publish".into()),
            Turn::Shell(patch("*** Update File: .env\n@@\n+ADDED=1\n")),
            Turn::Shell(patch(
                "*** Update File: envgit.yaml\n@@\n version: 1\n+# loosened by the agent\n",
            )),
            Turn::Shell(patch("*** Add File: patched.txt\n+added by apply_patch\n")),
            Turn::Say("all done".into()),
        ],
    );
    let (stdout, stderr) = envgit_codex(&env, &server);
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        !stdout.contains("No usable execution environment"),
        "Codex had no environment: {ctx}"
    );
    let log = env.log_json();
    let transcript = server.transcript();

    // 1. The command ran in the sandbox, as a step with its file.
    assert_eq!(env.read("made.txt"), "made-by-codex\n", "{ctx}");
    let made = log
        .iter()
        .find(|s| s["summary"].as_str().unwrap_or("").contains("made.txt"))
        .unwrap_or_else(|| panic!("no step for the command: {log:#?}\n{ctx}"));
    assert_eq!(made["kind"], "run");
    assert!(changed(made, "made.txt"), "{made:#}");
    assert!(
        transcript.contains("made-by-codex"),
        "the output did not reach the model"
    );

    // 2. A shell rule refuses the command; the reason reaches the model.
    assert!(
        !env.path("ran-anyway.txt").exists(),
        "the refused command ran"
    );
    let refused = steps_with_refusal(&log, "command touch ran-anyway.txt && npm publish");
    assert_eq!(refused.len(), 1, "{log:#?}\n{ctx}\n{transcript}");
    assert_eq!(refused[0]["exit_code"], 126);
    assert!(
        transcript.contains(
            "envgit: denied command touch ran-anyway.txt && npm publish (rule shell.deny)"
        ),
        "the refusal did not reach the model:\n{transcript}"
    );

    // 3. fs/readFile of a denied file is refused.
    assert_eq!(env.read(".env"), "SECRET=hunter2-value\n");
    assert!(
        !steps_with_refusal(&log, "read .env").is_empty(),
        "no refusal recorded for .env: {log:#?}\n{ctx}"
    );
    assert!(
        !transcript.contains("hunter2"),
        "the secret reached the model"
    );
    assert!(
        transcript.contains("envgit: denied read .env (rule filesystem.deny_read)"),
        "the refusal did not reach the model"
    );

    // 4. fs/writeFile of envgit.yaml is refused.
    assert_eq!(env.read("envgit.yaml"), yaml_before);
    assert!(
        !steps_with_refusal(&log, "write envgit.yaml").is_empty(),
        "no refusal recorded for envgit.yaml: {log:#?}\n{ctx}"
    );

    // 5. apply_patch's writes are a step of their own.
    assert_eq!(env.read("patched.txt"), "added by apply_patch\n");
    let patched = log
        .iter()
        .find(|s| changed(s, "patched.txt"))
        .unwrap_or_else(|| panic!("no step wrote patched.txt: {log:#?}"));
    assert_eq!(patched["kind"], "tool");

    // 6. No web search for the model: it would leave the machine outside the gate.
    let tools: Vec<String> = server.bodies()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["type"].as_str())
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert!(tools.iter().any(|t| t == "exec_command"), "{tools:?}");
    assert!(!tools.iter().any(|t| t.contains("web_search")), "{tools:?}");

    // 7. The MCP server of the user's Codex config never started on the host.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !marker.exists(),
        "the user's MCP server started on the host"
    );
}

#[test]
fn the_mcp_marker_would_appear_without_envgit() {
    // The control for the MCP assertion above: run as configured, Codex does start it.
    let env = Env::new();
    let marker = env.tmp.path().join("mcp-started");
    let home = user_codex_home(&env, &marker);
    let server = ModelServer::start(Api::Responses, vec![Turn::Say("hi".into())]);
    let bin = agent_bin_dir("codex");
    let mut cmd = std::process::Command::new(bin.join("codex"));
    cmd.args(codex_args(server.port, "hello"))
        .current_dir(&env.project)
        .env("HOME", env.user_home())
        .env("CODEX_HOME", &home)
        .env("PATH", path_with(&bin));
    let (_o, e) = run_bounded(cmd, Duration::from_secs(120));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !marker.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(marker.exists(), "the control MCP server never started: {e}");
}

#[test]
fn codex_push_hidden_behind_a_variable_is_refused_at_the_request() {
    let env = Env::new();
    let remotes = env.tmp.path().join("remotes");
    std::fs::create_dir_all(&remotes).unwrap();
    let bare = remotes.join("app.git");
    let git = |dir: &std::path::Path, args: &[&str]| env.git(dir, args);
    git(&remotes, &["init", "-q", "--bare", "-b", "main", "app.git"]);
    git(&bare, &["config", "http.receivepack", "true"]);
    let remote = git_server::GitServer::start(&remotes).unwrap();
    let url = format!("http://127.0.0.1:{}/app.git", remote.port);
    let seed = env.tmp.path().join("seed");
    git(env.tmp.path(), &["clone", "-q", &url, "seed"]);
    std::fs::write(seed.join("a.txt"), "a").unwrap();
    git(&seed, &["add", "-A"]);
    git(&seed, &["commit", "-q", "-m", "seed"]);
    git(&seed, &["push", "-q", "origin", "HEAD:main"]);
    std::fs::remove_dir_all(&env.project).unwrap();
    git(env.tmp.path(), &["clone", "-q", &url, "project"]);
    git(&env.project, &["config", "user.name", "agent"]);
    git(
        &env.project,
        &["config", "user.email", "agent@example.invalid"],
    );
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{}", remote.port)])
        .ok();
    let head = || {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "refs/heads/main"])
            .current_dir(&bare)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = head();
    let seen = remote.requests().len();
    user_codex_home(&env, &env.tmp.path().join("unused-marker"));
    let server = ModelServer::start(
        Api::Responses,
        vec![
            Turn::Shell(
                "echo change >> a.txt && git commit -qam change && g=git; $g push origin HEAD:main"
                    .into(),
            ),
            Turn::Say("pushed?".into()),
        ],
    );
    let (stdout, stderr) = envgit_codex(&env, &server);
    let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(head(), before, "the push reached the remote: {ctx}");
    assert!(
        !remote
            .requests()
            .iter()
            .skip(seen)
            .any(|r| r.starts_with("POST /app.git/git-receive-pack")),
        "{:?}",
        remote.requests()
    );
    let log = env.log_json();
    let step = log
        .iter()
        .find(|s| s["summary"].as_str().unwrap_or("").contains("$g push"))
        .unwrap_or_else(|| panic!("no step for the push: {log:#?}\n{ctx}"));
    assert!(
        step["refusals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["rule"] == "git.push"),
        "{step:#}"
    );
    assert!(
        server.transcript().contains(&format!(
            "denied POST 127.0.0.1:{}/app.git/git-receive-pack (rule git.push)",
            remote.port
        )),
        "the refusal did not reach the model:\n{}",
        server.transcript()
    );
}

/// Requests sent to both servers, and every answer and notification, in arrival order.
fn exec_server_session(mut cmd: std::process::Command, dir: &Path) -> Vec<Value> {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let d = format!("file://{}", dir.display());
    let reqs = [
        ("initialize", serde_json::json!({"clientName": "contract"})),
        (
            "fs/getMetadata",
            serde_json::json!({"path": format!("{d}/a.txt"), "sandbox": null}),
        ),
        (
            "fs/readFile",
            serde_json::json!({"path": format!("{d}/a.txt"), "sandbox": null}),
        ),
        (
            "fs/writeFile",
            serde_json::json!({"path": format!("{d}/b.txt"), "dataBase64": "eAo=", "sandbox": null}),
        ),
        (
            "fs/getMetadata",
            serde_json::json!({"path": format!("{d}/missing"), "sandbox": null}),
        ),
        (
            "fs/createDirectory",
            serde_json::json!({"path": format!("{d}/dir"), "recursive": true, "sandbox": null}),
        ),
        (
            "fs/readDirectory",
            serde_json::json!({"path": format!("{d}/dir"), "sandbox": null}),
        ),
        (
            "fs/copy",
            serde_json::json!({"sourcePath": format!("{d}/b.txt"), "destinationPath": format!("{d}/dir/c.txt"), "recursive": false, "sandbox": null}),
        ),
        (
            "fs/remove",
            serde_json::json!({"path": format!("{d}/dir"), "recursive": true, "force": true, "sandbox": null}),
        ),
        (
            "fs/canonicalize",
            serde_json::json!({"path": format!("{d}/./a.txt")}),
        ),
        ("no/such", serde_json::json!({})),
        (
            "process/start",
            serde_json::json!({"processId": "p1", "argv": ["/bin/sh", "-c", "printf hi"], "cwd": d,
            "env": {}, "envPolicy": null, "tty": false, "pipeStdin": false, "arg0": null, "sandbox": null,
            "enforceManagedNetwork": false, "managedNetwork": null}),
        ),
    ];
    let mut child = cmd
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
        }
    });
    let mut seen = Vec::new();
    for (i, (method, params)) in reqs.iter().enumerate() {
        let msg = serde_json::json!({"id": i + 1, "method": method, "params": params});
        writeln!(input, "{msg}").unwrap();
        if i == 0 {
            let v = rx.recv_timeout(Duration::from_secs(30)).unwrap();
            seen.push(v);
            writeln!(
                input,
                "{}",
                serde_json::json!({"method": "initialized", "params": {}})
            )
            .unwrap();
            continue;
        }
        loop {
            let v = rx.recv_timeout(Duration::from_secs(60)).unwrap();
            let done = v["id"] == i + 1;
            seen.push(v);
            if done {
                break;
            }
        }
    }
    while !seen.iter().any(|v| v["method"] == "process/closed") {
        seen.push(rx.recv_timeout(Duration::from_secs(60)).unwrap());
    }
    // The real server may send `process/exited` after `process/closed`.
    while !seen.iter().any(|v| v["method"] == "process/exited") {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(v) => seen.push(v),
            Err(_) => break,
        }
    }
    drop(input);
    let _ = child.wait();
    seen
}

/// The shape of a message: answers by id with their result keys or error code; notifications
/// by method with their parameter keys.
fn shape(v: &Value) -> String {
    let keys = |o: &Value| {
        let mut k: Vec<String> = o
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        k.sort();
        k.join(",")
    };
    if let Some(m) = v["method"].as_str() {
        return format!("{m} {}", keys(&v["params"]));
    }
    if !v["error"].is_null() {
        return format!("#{} error {}", v["id"], v["error"]["code"]);
    }
    format!("#{} ok {}", v["id"], keys(&v["result"]))
}

#[test]
fn our_exec_server_answers_like_the_real_one() {
    // The contract: a Codex upgrade that changes the protocol shows up here as one clear diff.
    let env = Env::new();
    env.write("a.txt", "hi\n");
    env.init();
    let real_dir = env.tmp.path().join("real");
    std::fs::create_dir_all(&real_dir).unwrap();
    std::fs::write(real_dir.join("a.txt"), "hi\n").unwrap();
    let real_home = env.tmp.path().join("real-codex-home");
    std::fs::create_dir_all(&real_home).unwrap();
    let bin = agent_bin_dir("codex");
    let mut real = std::process::Command::new(bin.join("codex"));
    real.args(["exec-server", "--listen", "stdio"])
        .env("CODEX_HOME", &real_home)
        .env("HOME", env.user_home());
    let theirs = exec_server_session(real, &real_dir.canonicalize().unwrap());
    let mut ours_cmd = env.cmd(&env.project);
    ours_cmd.arg("codex-exec-server");
    let ours = exec_server_session(ours_cmd, &env.project.canonicalize().unwrap());
    // Answers in id order; then the set of notification shapes (chunks may split differently,
    // and on a loaded machine output and exit may interleave differently).
    let norm = |msgs: &[Value]| {
        let mut answers: Vec<&Value> = msgs.iter().filter(|v| v["method"].is_null()).collect();
        answers.sort_by_key(|v| v["id"].as_u64());
        let mut out: Vec<String> = answers.into_iter().map(shape).collect();
        let notes: std::collections::BTreeSet<String> = msgs
            .iter()
            .filter(|v| v["method"].is_string())
            .map(shape)
            .collect();
        out.extend(notes);
        out
    };
    let (t, o) = (norm(&theirs), norm(&ours));
    // The real server tells more about itself in `initialize`; the session id is what Codex needs.
    assert!(t[0].starts_with("#1 ok environmentInfo,sessionId"), "{t:?}");
    assert!(o[0].starts_with("#1 ok environmentInfo,sessionId"), "{o:?}");
    assert_eq!(t[1..], o[1..], "\nreal:  {t:#?}\nenvgit: {o:#?}");
    for expected in [
        "#5 error -32004",
        "#11 error -32601",
        "#12 ok processId,sandboxType",
        "process/output chunk,processId,seq,stream",
        "process/exited exitCode,processId,sandboxDenied,seq",
        "process/closed processId,seq",
    ] {
        assert!(o.iter().any(|s| s == expected), "{expected}: {o:#?}");
    }
    // Same content where it is deterministic.
    let data =
        |msgs: &[Value], id: u64| msgs.iter().find(|v| v["id"] == id).unwrap()["result"].clone();
    assert_eq!(data(&theirs, 3), data(&ours, 3));
    assert_eq!(data(&theirs, 7), data(&ours, 7));
    assert_eq!(std::fs::read(env.path("b.txt")).unwrap(), b"x\n");
}
