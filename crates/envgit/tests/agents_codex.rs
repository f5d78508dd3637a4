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
    let (remotes, bare) = env.bare_remote();
    let remote = git_server::GitServer::start(&remotes).unwrap();
    env.clone_project_from(&format!("http://127.0.0.1:{}/app.git", remote.port));
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{}", remote.port)])
        .ok();
    let head = || support::head_of(&bare);
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

/// A connection to `envgit codex-exec-server`, spoken to as Codex does: one JSON object per
/// line, no `"jsonrpc"` field.
struct ExecServer {
    child: std::process::Child,
    input: Option<std::process::ChildStdin>,
    rx: std::sync::mpsc::Receiver<Value>,
    seen: Vec<Value>,
    next_id: u64,
}

impl ExecServer {
    fn start(env: &Env, stderr: &Path) -> Self {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let mut child = env
            .cmd(&env.project)
            .arg("codex-exec-server")
            .env("HOME", env.user_home())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr).unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        let mut s = Self {
            input: child.stdin.take(),
            child,
            rx,
            seen: Vec::new(),
            next_id: 1,
        };
        let init = s.call(
            "initialize",
            serde_json::json!({"clientName": "notes-test"}),
        );
        assert!(init["result"]["sessionId"].is_string(), "{init}");
        s.send(&serde_json::json!({"method": "initialized", "params": {}}));
        s
    }

    fn send(&mut self, msg: &Value) {
        use std::io::Write;
        writeln!(self.input.as_mut().unwrap(), "{msg}").unwrap();
    }

    fn recv(&mut self) -> Value {
        let v = self
            .rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("no message from the exec-server ({e}): {:#?}", self.seen));
        self.seen.push(v.clone());
        v
    }

    /// Send a request; return its answer (notifications meanwhile are kept in `seen`).
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&serde_json::json!({"id": id, "method": method, "params": params}));
        loop {
            let v = self.recv();
            if v["id"] == id && v["method"].is_null() {
                return v;
            }
        }
    }

    /// Wait until `pid` has exited and closed; return its exit code and its stdout and stderr.
    fn finish(&mut self, pid: &str) -> (i64, String, String) {
        let of = |v: &Value, m: &str| v["method"] == m && v["params"]["processId"] == pid;
        while !(self.seen.iter().any(|v| of(v, "process/closed"))
            && self.seen.iter().any(|v| of(v, "process/exited")))
        {
            self.recv();
        }
        let stream = |name: &str| {
            let mut chunks: Vec<(u64, Vec<u8>)> = self
                .seen
                .iter()
                .filter(|v| of(v, "process/output") && v["params"]["stream"] == name)
                .map(|v| {
                    let p = &v["params"];
                    let data = envgit_codex::b64::decode(p["chunk"].as_str().unwrap()).unwrap();
                    (p["seq"].as_u64().unwrap(), data)
                })
                .collect();
            chunks.sort_by_key(|c| c.0);
            let bytes: Vec<u8> = chunks.into_iter().flat_map(|c| c.1).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let code =
            self.seen.iter().find(|v| of(v, "process/exited")).unwrap()["params"]["exitCode"]
                .as_i64()
                .unwrap();
        (code, stream("stdout"), stream("stderr"))
    }

    /// Close the connection and wait for the server to record what is left.
    fn close(mut self) {
        drop(self.input.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the exec-server did not exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn codex_sandbox_requests_are_recorded_as_intent_and_envgits_policy_applies() {
    const SECRET: &str = "SECRET=hunter2-notes";
    let env = Env::new();
    env.write(".env", SECRET);
    env.init();
    env.record();
    // A directory outside the project that Codex's own sandbox would let the command write.
    let outside = env.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let project = env.project.canonicalize().unwrap();
    let uri = |p: &Path| format!("file://{}", p.display());
    let script = format!(
        "cat .env; echo pwned > {}/written.txt; echo inside >> inside.txt",
        outside.display()
    );
    let argv = serde_json::json!(["/bin/sh", "-c", script]);
    // What `codex -s workspace-write` sends (traces/…-stdio-workspace-write.jsonl), asking for
    // the outside directory as a writable root too.
    let sandbox = serde_json::json!({
        "type": "workspace-write",
        "permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
            {"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "write"},
            {"path": {"type": "special", "value": {"kind": "slash_tmp"}}, "access": "write"},
            {"path": {"type": "special", "value": {"kind": "tmpdir"}}, "access": "write"},
            {"path": {"type": "path", "path": outside.display().to_string()}, "access": "write"},
            {"path": {"type": "special", "value": {"kind": "project_roots", "subpath": ".git"}},
             "access": "read", "missing_path_behavior": "skip"}
        ]}, "network": "enabled"},
        "cwd": uri(&project),
        "workspaceRoots": [uri(&project), uri(&outside)],
        "windowsSandboxLevel": "disabled",
        "useLegacyLandlock": false
    });
    let managed_network = serde_json::json!({
        "allowedDomains": ["example.com"], "deniedDomains": [], "allowLocalBinding": true
    });
    let start = |pid: &str, sandbox: &Value, network: &Value| {
        serde_json::json!({
            "processId": pid,
            "metadata": {"threadId": "t1", "toolCallId": format!("call_{pid}")},
            "argv": argv, "cwd": uri(&project),
            "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": true, "exclude": [],
                          "set": {}, "includeOnly": []},
            "env": {"TERM": "dumb"}, "tty": false, "pipeStdin": false, "arg0": null,
            "sandbox": sandbox, "enforceManagedNetwork": !network.is_null(),
            "managedNetwork": network,
        })
    };
    let server_err = env.tmp.path().join("exec-server.stderr");
    let mut server = ExecServer::start(&env, &server_err);
    // With Codex's sandbox request, then the same command without it (the control).
    let r = server.call("process/start", start("p1", &sandbox, &managed_network));
    assert_eq!(r["result"]["processId"], "p1", "{r}");
    let with = server.finish("p1");
    let r = server.call("process/start", start("p2", &Value::Null, &Value::Null));
    assert_eq!(r["result"]["processId"], "p2", "{r}");
    let without = server.finish("p2");
    server.close();
    let server_err = std::fs::read_to_string(&server_err).unwrap();
    let ctx = format!("with: {with:?}\nwithout: {without:?}\nexec-server stderr:\n{server_err}");

    // envgit's policy applied, exactly as without the request: the denied read and the write
    // outside the project were refused; the write in the project happened.
    assert_eq!(with, without, "{ctx}");
    assert!(
        !with.1.contains("hunter2") && !with.2.contains("hunter2"),
        "{ctx}"
    );
    assert!(with.2.contains(".env: Permission denied"), "{ctx}");
    // Under /tmp the outside directory is not even visible (the sandbox's /tmp is its own).
    assert!(
        with.2.contains("written.txt: Read-only file system")
            || with.2.contains("written.txt: Permission denied")
            || with.2.contains("written.txt: Directory nonexistent"),
        "{ctx}"
    );
    assert!(
        !outside.join("written.txt").exists(),
        "the write outside the project got out: {ctx}"
    );
    assert_eq!(env.read("inside.txt"), "inside\ninside\n", "{ctx}");
    assert_eq!(env.read(".env"), SECRET);
    // The stderr message stays, once: only the first command carried a request.
    assert_eq!(
        server_err
            .matches("Codex sent its own sandbox settings for this command")
            .count(),
        1,
        "{ctx}"
    );

    // The request is recorded with the step as intent.
    let log = env.log_json();
    let steps: Vec<&Value> = log.iter().filter(|s| s["command"] == argv).collect();
    assert_eq!(steps.len(), 2, "{log:#?}\n{ctx}");
    // Newest first: the control, then the command that carried the request.
    let (control, asked) = (steps[0], steps[1]);
    // Besides what a run step says of its limits ("memory not limited" on a host without a
    // cgroup v2 memory controller), only the request's notes.
    let codex_notes = |step: &Value| -> Vec<Value> {
        step.get("notes")
            .and_then(Value::as_array)
            .map(|n| {
                n.iter()
                    .filter(|n| n.as_str().is_some_and(|n| n.starts_with("codex asked")))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(codex_notes(control).is_empty(), "{control:#}");
    let sandbox_json = sandbox.to_string();
    assert!(sandbox_json.len() > 500, "the note must be clipped here");
    let expected = vec![
        format!(
            "codex asked for sandbox {}…; envgit's policy applied instead",
            &sandbox_json[..500]
        ),
        format!(
            "codex asked for managedNetwork {managed_network}; envgit's policy applied instead"
        ),
    ];
    assert_eq!(
        serde_json::json!(codex_notes(asked)),
        serde_json::json!(expected),
        "{asked:#}"
    );
    assert_eq!(asked["exit_code"], control["exit_code"]);
    assert_eq!(asked["refusals"], control["refusals"]);

    // `show` and `log -v` print them, one line each.
    let n = asked["number"].as_u64().unwrap().to_string();
    let show = env.envgit(&["show", &n]).ok().stdout;
    let verbose = env.envgit(&["log", "-v"]).ok().stdout;
    for text in [&show, &verbose] {
        for note in &expected {
            assert!(
                text.lines().any(|l| l.trim() == format!("note: {note}")),
                "{note}\n{text}"
            );
        }
    }
    let control_n = control["number"].as_u64().unwrap().to_string();
    let show = env.envgit(&["show", &control_n]).ok().stdout;
    assert!(!show.contains("note: codex"), "{show}");
    // `--note` is for the integrations, not in `envgit run --help`.
    let help = env.envgit(&["run", "--help"]).ok().stdout;
    assert!(!help.contains("--note"), "{help}");
}

/// Codex's `fs/*` calls are carried out by envgit on the host, not in the sandbox: a link
/// copied onto the person's `PATH` ahead of the host's `git` goes the way a step's would.
#[test]
fn a_program_codex_copies_onto_the_persons_path_is_removed() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::process::Stdio;
    let env = Env::new();
    env.write("a.txt", "hi\n");
    let marker = env.tmp.path().join("pwned");
    env.write(
        "evil.sh",
        &format!("#!/bin/sh\necho pwned >> {}\n", marker.display()),
    );
    std::fs::set_permissions(env.path("evil.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A link that leads nowhere where it is, and to evil.sh from the virtualenv's bin.
    std::os::unix::fs::symlink("../../evil.sh", env.path("x")).unwrap();
    std::fs::create_dir_all(env.path(".venv/bin")).unwrap();
    env.init();
    let path = format!(
        "{}:{}",
        env.path(".venv/bin").display(),
        std::env::var("PATH").unwrap()
    );
    let d = format!("file://{}", env.project.canonicalize().unwrap().display());
    let mut child = env
        .cmd(&env.project)
        .arg("codex-exec-server")
        .env("PATH", &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: u64, method: &str, params: Value| -> Value {
        let msg = serde_json::json!({"id": id, "method": method, "params": params});
        writeln!(input, "{msg}").unwrap();
        loop {
            let v: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    call(1, "initialize", serde_json::json!({"clientName": "test"}));
    let copied = call(
        2,
        "fs/copy",
        serde_json::json!({"sourcePath": format!("{d}/x"), "destinationPath": format!("{d}/.venv/bin/git"),
            "recursive": false, "sandbox": null}),
    );
    drop(input);
    let out = child.wait_with_output().unwrap();
    let said = format!("{copied}\n{}", String::from_utf8_lossy(&out.stderr));
    std::process::Command::new("sh")
        .args(["-c", "git --version"])
        .current_dir(&env.project)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the host's `git` ran what Codex copied onto the PATH\n{said}"
    );
    assert!(
        std::fs::symlink_metadata(env.path(".venv/bin/git")).is_err(),
        "{said}"
    );
}
