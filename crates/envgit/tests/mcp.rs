#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `envgit mcp` driven by a real MCP client (the official Python SDK, installed by
//! `scripts/install-deps-mcp`) over stdio with a stripped environment, with a real downstream
//! MCP server (Python SDK `MCPServer`) written here. Loopback only; every client run is bounded
//! by `timeout`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::Env;
use support::mcp_client::{
    add_fx_server, client, drive, drive_with, envgit_mcp_pids, kill_all_envgit_mcp, pydeps,
    server_pid, wait_exited,
};

struct Mcp {
    env: Env,
}

impl Mcp {
    fn new(policy_extra: &str) -> Self {
        let env = Env::new();
        env.init();
        if !policy_extra.is_empty() {
            let mut policy = env.read("envgit.yaml");
            policy.push_str(policy_extra);
            env.write("envgit.yaml", &policy);
        }
        Mcp { env }
    }

    /// Run the client against `envgit mcp` with `calls` (arguments of `execute`).
    fn run(&self, calls: Value) -> Value {
        self.run_with(calls, "auto", None)
    }

    /// `mode`: the Python client's `auto` (2026-07-28 if the server speaks it) or `legacy`
    /// (initialize); `answer`: what it answers elicitations with (none: it cannot elicit).
    fn run_with(&self, calls: Value, mode: &str, answer: Option<&str>) -> Value {
        drive(&self.env, calls, mode, answer)
    }

    /// The steps of `execute` calls, oldest first.
    fn repl_steps(&self) -> Vec<Value> {
        let mut steps = self.repl_steps_all();
        steps.retain(|s| !s["repl"].is_null());
        steps
    }

    /// The same and the step of what downstream servers requested after the last call.
    fn repl_steps_all(&self) -> Vec<Value> {
        let mut steps: Vec<Value> = self
            .env
            .log_json()
            .into_iter()
            .filter(|s| s["kind"] == "repl")
            .collect();
        steps.sort_by_key(|s| s["number"].as_u64());
        steps
    }
}

fn text(r: &Value) -> &str {
    r["text"].as_str().unwrap()
}

#[test]
fn execute_runs_cells_in_sessions_and_records_each_as_a_step() {
    let m = Mcp::new("");
    let out = m.run(json!([
        {"code": "let x = 41; console.log('hello'); x + 1"},
        {"code": "x * 2"},
        {"code": "typeof x", "session": "other"},
        {"code": "while (true) {}", "timeout_ms": 300},
        {"code": "x"},
        {"code": "const hog = []; while (true) hog.push('y'.repeat(4096) + hog.length)"},
        {"code": "x + 1"},
        {"code": "[typeof require, typeof fetch, typeof process, typeof setTimeout, typeof setInterval, typeof performance].join()"},
        {"code": "\nthrow new Error('boom')"},
    ]));
    let tools = out["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "execute");
    assert_eq!(tools[0]["input_schema"]["required"], json!(["code"]));
    let r = out["results"].as_array().unwrap();
    assert!(!r[0]["is_error"].as_bool().unwrap(), "{}", text(&r[0]));
    assert!(
        text(&r[0]).starts_with("hello\n42\n[step "),
        "{}",
        text(&r[0])
    );
    assert!(text(&r[1]).starts_with("82\n"), "{}", text(&r[1]));
    assert!(text(&r[2]).starts_with("\"undefined\""), "{}", text(&r[2]));
    assert_eq!(r[2]["meta"]["envgit/session"], "other");
    // The infinite loop: a readable error, and the session is still there.
    assert!(r[3]["is_error"].as_bool().unwrap());
    assert!(text(&r[3]).contains("300 ms budget"), "{}", text(&r[3]));
    assert!(text(&r[4]).starts_with("41\n"), "{}", text(&r[4]));
    // The memory bomb.
    assert!(r[5]["is_error"].as_bool().unwrap());
    assert!(text(&r[5]).contains("out of memory"), "{}", text(&r[5]));
    assert!(text(&r[6]).starts_with("42\n"), "{}", text(&r[6]));
    // No ambient capability.
    assert!(
        text(&r[7]).starts_with("\"undefined,undefined,undefined,undefined,undefined,undefined\""),
        "{}",
        text(&r[7])
    );
    assert!(r[8]["is_error"].as_bool().unwrap());
    assert!(text(&r[8]).contains("Error: boom"), "{}", text(&r[8]));
    assert!(text(&r[8]).contains("cell:2"), "{}", text(&r[8]));

    // Every call is a step of kind repl, with its code and status.
    let steps = m.repl_steps();
    assert_eq!(steps.len(), 9, "{steps:#?}");
    let statuses: Vec<&str> = steps
        .iter()
        .map(|s| s["repl"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "ok", "ok", "ok", "timeout", "ok", "oom", "ok", "ok", "error"
        ]
    );
    assert_eq!(steps[1]["repl"]["code"], "x * 2");
    assert_eq!(steps[2]["repl"]["session"], "other");
    for (s, res) in steps.iter().zip(r) {
        assert_eq!(s["number"], res["meta"]["envgit/step"]);
        assert_eq!(s["repl"]["bytes_out"], res["meta"]["envgit/bytesOut"]);
    }
    let log = m.env.envgit(&["log"]).ok();
    assert!(
        log.stdout.contains("execute[default] x * 2"),
        "{}",
        log.stdout
    );
}

#[test]
fn execute_without_a_project_says_what_to_do() {
    let env = Env::new();
    let r = env.envgit(&["mcp", "--project", env.project.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("envgit init"), "{}", r.stderr);
}

/// A project whose policy starts the fx server (in the sandbox: its script lives in the
/// project, which it can see), denies `fx.delete_*` and asks for `fx.create_issue`.
fn with_fx(extra: &str) -> (Mcp, PathBuf) {
    let m = Mcp::new("");
    let markers = add_fx_server(&m.env, extra);
    (m, markers)
}

#[test]
fn downstream_tools_are_typed_functions_under_policy() {
    let (m, markers) = with_fx("");
    // A listener on loopback that the policy does not allow: the sandboxed server cannot reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    let out = m.run(json!([
        {"code": "const s = await fx.add({a: 2, b: 3}); s"},
        {"code": "await fx.echo({text: 'hi'})"},
        {"code": "[typeof fx.delete_everything, tools.list().join()]"},
        {"code": "await fx.create_issue({title: 'x'})"},
        {"code": "try { await fx.fail() } catch (e) { [e.name, e.message] }"},
        {"code": "tools.describe('fx.add')"},
        {"code": "const big = await fx.big(); big.length"},
        {"code": "(await Promise.all(Array.from({length: 100}, (_, i) => fx.add({a: i, b: 1})))).length"},
        {"code": format!("await fx.connect({{port: {port}}})")},
        {"code": "await fx.write({name: 'made-by-fx.txt'})"},
    ]));
    let r = out["results"].as_array().unwrap();
    for (i, res) in r.iter().enumerate() {
        if i != 3 {
            assert!(!res["is_error"].as_bool().unwrap(), "{i}: {}", text(res));
        }
    }
    assert!(text(&r[0]).contains('5'), "{}", text(&r[0]));
    assert!(text(&r[1]).starts_with("\"hi\""), "{}", text(&r[1]));
    // Denied: not injected.
    let listed = text(&r[2]);
    assert!(listed.starts_with("[\"undefined\",\""), "{listed}");
    assert!(!listed.contains("delete_everything"), "{listed}");
    assert!(
        listed.contains("fx.create_issue") && listed.contains("fx.add"),
        "{listed}"
    );
    // Ask without an approver: refused, readably, and never sent.
    assert!(r[3]["is_error"].as_bool().unwrap());
    assert!(
        text(&r[3]).contains("needs a person's approval"),
        "{}",
        text(&r[3])
    );
    assert!(text(&r[4]).contains("ToolError"), "{}", text(&r[4]));
    assert!(
        text(&r[4]).contains("fx failed on purpose"),
        "{}",
        text(&r[4])
    );
    assert!(
        text(&r[5]).contains("function add(args: { a: number; b: number })"),
        "{}",
        text(&r[5])
    );
    assert!(text(&r[6]).starts_with("300000\n"), "{}", text(&r[6]));
    assert!(text(&r[6]).contains("low-return"), "{}", text(&r[6]));
    assert!(text(&r[7]).starts_with("100\n"), "{}", text(&r[7]));
    assert!(text(&r[8]).starts_with("\"refused: "), "{}", text(&r[8]));
    assert!(
        listener.accept().is_err(),
        "the sandboxed server reached the host's loopback"
    );
    assert_eq!(m.env.read("made-by-fx.txt"), "from the downstream server");
    assert!(!markers.join("delete_everything-ran").exists());
    assert!(!markers.join("create_issue-ran").exists());

    let steps = m.repl_steps();
    assert_eq!(steps.len(), 10);
    // What the server wrote during a step is in that step's snapshot.
    let wrote = &steps[9]["changes"];
    assert!(wrote.to_string().contains("made-by-fx.txt"), "{wrote}");
    let ask = &steps[3]["repl"]["calls"][0];
    assert_eq!(ask["decision"], "ask");
    assert_eq!(ask["tool"], "create_issue");
    let big = &steps[6];
    assert!(
        big["repl"]["bytes_in"].as_u64().unwrap() >= 300_000,
        "{big:#?}"
    );
    assert!(big["repl"]["bytes_out"].as_u64().unwrap() < 100);
    assert_eq!(big["flags"], json!(["low_return"]));
    assert_eq!(steps[7]["repl"]["calls"].as_array().unwrap().len(), 100);
    assert!(
        !steps[0]["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("low_return"))
    );
    let log = m.env.envgit(&["log"]).ok();
    assert!(log.stdout.contains("[low-return]"), "{}", log.stdout);
}

/// A downstream server runs in the sandbox but its steps are recorded by `envgit mcp`: what it
/// does to protected paths is put back all the same (it was not, before every step kind went
/// through the put-back).
#[test]
fn a_hook_a_downstream_server_plants_is_put_back() {
    let (m, _markers) = with_fx("");
    std::fs::create_dir_all(m.env.path(".git/hooks")).unwrap();
    m.env.write(".git/hooks/pre-commit", "#!/bin/sh\nexit 0\n");
    m.env.write(".github/hooks/hooks.json", "{}");
    let out = m.run(json!([{"code": "await fx.plant_hook()"}]));
    let r = out["results"].as_array().unwrap();
    assert!(
        text(&r[0]).contains("planted, .git busy"),
        "{}",
        text(&r[0])
    );
    assert_eq!(m.env.read(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    assert_eq!(m.env.read(".github/hooks/hooks.json"), "{}");
    let steps = m.repl_steps();
    let last = steps.last().unwrap();
    assert!(
        last["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("protected_restored")),
        "{last:#}"
    );
}

/// A downstream server makes a repository in an excluded directory (`target/x`) and gives
/// the person's clone in `.venv/src/pkg` a `core.fsmonitor`: after the call the host's git
/// runs neither, and the clone has its own configuration back.
#[test]
fn a_repository_a_downstream_server_plants_in_an_excluded_directory_runs_nothing() {
    let (m, _markers) = with_fx("");
    let pkg = m.env.path(".venv/src/pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    m.env.git(&pkg, &["init", "-q", "-b", "main"]);
    m.env.git(
        &pkg,
        &["config", "remote.origin.url", "https://example.com/pkg"],
    );
    let before = m.env.read(".venv/src/pkg/.git/config");
    let marker = m.env.tmp.path().join("MARKER");
    let command = format!("touch {}; false", marker.display());
    let out = m.run(json!([{
        "code": format!("await fx.plant_in_excluded({{command: {}}})", json!(command))
    }]));
    let r = out["results"].as_array().unwrap();
    assert!(
        text(&r[0]).contains("planted where no snapshot looks"),
        "{}",
        text(&r[0])
    );
    assert_eq!(m.env.read(".venv/src/pkg/.git/config"), before);
    for repo in [m.env.path("target/x"), pkg] {
        let _ = m.env.host_git(&repo).arg("status").output().unwrap();
        assert!(
            !marker.exists(),
            "the host's git in {} ran it",
            repo.display()
        );
    }
    let steps = m.repl_steps();
    let refused = steps.last().unwrap()["refusals"].to_string();
    assert!(refused.contains("git.data-only"), "{refused}");
}

/// pnpm links each file of `node_modules/` to its store, which every project of the person's
/// shares. The downstream servers' sandbox is set up once, when the session begins: a
/// `node_modules/` the person's own `pnpm install` makes between two calls must become the
/// project's own copies before the next call can write through the links.
#[test]
fn a_link_made_on_the_host_during_a_session_becomes_the_projects_own_copy() {
    let (m, _markers) = with_fx("");
    let store = m.env.tmp.path().join("pnpm-store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("index.js"), "module.exports = 1;\n").unwrap();
    let link = m.env.path("node_modules/left-pad/index.js");
    let out = m.run(json!([
        {"code": "await fx.echo({text: 'before'})"},
        {"__hard_link": [store.join("index.js"), link]},
        {"code": "await fx.write({name: 'node_modules/left-pad/index.js'})"},
    ]));
    let r = out["results"].as_array().unwrap();
    assert!(text(&r[2]).starts_with("\"ok\""), "{out:#}");
    assert_eq!(
        std::fs::read_to_string(store.join("index.js")).unwrap(),
        "module.exports = 1;\n",
        "the downstream server wrote through the link into the store: {out:#}"
    );
    assert_eq!(
        m.env.read("node_modules/left-pad/index.js"),
        "from the downstream server"
    );
}

/// A key the person saves into a new `.env` between two calls is not hidden by the downstream
/// servers' sandboxes, set up when the session began: it is masked in them before the next
/// call, which reads nothing.
#[test]
fn a_secret_saved_on_the_host_during_a_session_is_unreadable_to_the_next_call() {
    const KEY: &str = "sk-live-saved-during-the-session";
    let (m, _markers) = with_fx("");
    let out = m.run(json!([
        {"code": "await fx.echo({text: 'before'})"},
        {"__write": [m.env.path("config/.env"), format!("KEY={KEY}\n")]},
        {"code": "await fx.read({name: 'config/.env'})"},
    ]));
    let r = out["results"].as_array().unwrap();
    assert!(
        !out.to_string().contains(KEY),
        "the call read the key: {out:#}"
    );
    assert_eq!(r[2]["is_error"], false, "{out:#}");
    assert!(
        text(&r[2]).contains("unreadable: [Errno 13] Permission denied"),
        "{out:#}"
    );
    assert_eq!(m.env.read("config/.env"), format!("KEY={KEY}\n"));
}

/// Credentials the person makes in their home between two calls (`aws configure` in their own
/// terminal) are masked in the downstream servers' sandboxes before the next call.
#[test]
fn credentials_made_in_the_home_during_a_session_are_unreadable_to_the_next_call() {
    const KEY: &str = "aws-secret-made-during-the-session";
    let (m, _markers) = with_fx("");
    let credentials = m.env.user_home().join(".aws/credentials");
    let out = m.run(json!([
        {"code": "await fx.echo({text: 'before'})"},
        {"__write": [credentials, format!("key = {KEY}\n")]},
        {"code": format!("await fx.read({{name: '{}'}})", credentials.display())},
    ]));
    let r = out["results"].as_array().unwrap();
    assert!(
        !out.to_string().contains(KEY),
        "the call read the key: {out:#}"
    );
    assert!(
        text(&r[2]).contains("unreadable: [Errno 13] Permission denied"),
        "{out:#}"
    );
}

/// The same for the credentials the plan finds elsewhere than by the homes' names: where the
/// person's environment puts one (`AWS_SHARED_CREDENTIALS_FILE`), where their git
/// configuration keeps its passwords (`credential.helper = store --file …`) and a path the
/// policy's `filesystem.deny_read` names.
#[test]
fn credentials_named_elsewhere_made_during_a_session_are_unreadable_to_the_next_call() {
    const KEY: &str = "secret-made-during-the-session";
    let m = Mcp::new("");
    let keys = m.env.user_home().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (by_env, by_git, by_policy) = (
        keys.join("aws-credentials"),
        keys.join("git-credentials"),
        keys.join("deploy-token"),
    );
    std::fs::write(
        m.env.user_home().join(".gitconfig"),
        format!(
            "[credential]\n\thelper = store --file {}\n",
            by_git.display()
        ),
    )
    .unwrap();
    let mut policy = m.env.read("envgit.yaml");
    policy.push_str(&format!(
        "filesystem:\n  deny_read: [\"{}\"]\n",
        by_policy.display()
    ));
    m.env.write("envgit.yaml", &policy);
    add_fx_server(&m.env, "");
    let made = [&by_env, &by_git, &by_policy];
    let mut calls = vec![json!({"code": "await fx.echo({text: 'before'})"})];
    calls.extend(
        made.iter()
            .map(|p| json!({"__write": [p, format!("token = {KEY}\n")]})),
    );
    calls.extend(
        made.iter()
            .map(|p| json!({"code": format!("await fx.read({{name: '{}'}})", p.display())})),
    );
    let out = drive_with(
        &m.env,
        Value::Array(calls),
        "auto",
        None,
        json!({"AWS_SHARED_CREDENTIALS_FILE": by_env}),
    );
    let r = out["results"].as_array().unwrap();
    assert!(
        !out.to_string().contains(KEY),
        "a call read the key: {out:#}"
    );
    for (i, path) in made.iter().enumerate() {
        let said = text(&r[4 + i]);
        assert!(
            said.contains("unreadable: [Errno 13] Permission denied"),
            "{}: {said}",
            path.display()
        );
    }
}

/// A downstream server that ended (a crash) leaves a sandbox in which nothing runs: a secret
/// made after it is nothing to hide there, and the session's later calls still run.
#[test]
fn a_downstream_server_that_ended_does_not_refuse_the_calls_after_it() {
    let (m, _markers) = with_fx("");
    let out = m.run(json!([
        {"code": "await fx.echo({text: 'one'})"},
        {"code": "try { await fx.exit_now() } catch (e) { 'ended' }"},
        {"__write": [m.env.path(".env"), "KEY=made-after-the-server-ended\n"]},
        {"code": "1 + 1"},
    ]));
    let r = out["results"].as_array().unwrap();
    assert!(!r[3]["is_error"].as_bool().unwrap(), "{out:#}");
    assert!(text(&r[3]).starts_with("2\n"), "{out:#}");
}

/// A socket a downstream server listens on in the project (a dev server's) stays its own:
/// the next call connects to it. One a host service binds there during the session is masked
/// before the next call.
#[test]
fn a_socket_the_session_listens_on_is_its_own_and_a_hosts_is_masked() {
    let (m, _markers) = with_fx("");
    let out = m.run(json!([
        {"code": "await fx.serve_unix({name: 'app.sock'})"},
        {"code": "await fx.ask_unix({name: 'app.sock'})"},
        {"__listen_unix": m.env.path("host.sock")},
        {"code": "await fx.ask_unix({name: 'host.sock'})"},
        {"code": "await fx.ask_unix({name: 'app.sock'})"},
    ]));
    let r = out["results"].as_array().unwrap();
    assert!(text(&r[0]).contains("listening"), "{out:#}");
    assert!(text(&r[1]).contains("answered: pong"), "{out:#}");
    assert!(text(&r[3]).contains("unreachable"), "{out:#}");
    assert!(text(&r[4]).contains("answered: pong"), "{out:#}");
}

/// What a downstream server's sandbox masked when it was set up (`/etc`'s private files, the
/// home's credentials, envgit's own sockets) is not masked again at each call: nothing is said
/// and no helper runs when nothing was made.
#[test]
fn calls_of_a_session_mask_nothing_its_plan_masked_already() {
    let (m, _markers) = with_fx("");
    std::fs::create_dir_all(m.env.user_home().join(".aws")).unwrap();
    std::fs::write(m.env.user_home().join(".aws/credentials"), "key = x\n").unwrap();
    let calls = json!([
        {"code": "await fx.echo({text: 'one'})"},
        {"code": "await fx.echo({text: 'two'})"},
        {"code": "await fx.echo({text: 'three'})"},
    ]);
    let out = client(&m.env, calls, "auto", None, json!({}))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(text(&said["results"][2]).contains("three"), "{said:#}");
    assert!(
        !stderr.contains("since the session began"),
        "a call masked again what the plan masked: {stderr}"
    );
}

/// An activated virtualenv in `m`'s project: the person's `PATH`, its `bin` first.
fn venv_first_on_path(m: &Mcp) -> String {
    m.env.write(".venv/bin/activate", "# the venv's\n");
    format!(
        "{}:{}",
        m.env.path(".venv/bin").display(),
        std::env::var("PATH").unwrap()
    )
}

#[test]
fn a_program_a_downstream_server_puts_on_the_persons_path_is_removed() {
    let (m, _markers) = with_fx("");
    let path = venv_first_on_path(&m);
    let out = drive_with(
        &m.env,
        json!([{"code": "await fx.plant_on_path()"}]),
        "auto",
        None,
        json!({"PATH": path}),
    );
    let r = out["results"].as_array().unwrap();
    assert!(text(&r[0]).contains("planted on PATH"), "{}", text(&r[0]));
    assert!(
        !m.env.path(".venv/bin/git").exists(),
        "the server's git is still first on the person's PATH"
    );
    assert!(m.env.path(".venv/bin/fx-own-tool").exists());
    let steps = m.repl_steps();
    let refusals = steps.last().unwrap()["refusals"].to_string();
    assert!(
        refusals.contains(".venv/bin/git") && refusals.contains("filesystem.path-shadow"),
        "{refusals}"
    );
}

/// The same, with `kill -9` of `envgit mcp` while the call runs: the next envgit command
/// removes the server's `git` (and leaves its own tool).
#[test]
fn after_a_kill_9_mid_execute_a_program_put_on_the_persons_path_is_removed() {
    let (m, _markers) = with_fx("");
    let path = venv_first_on_path(&m);
    kill_mid_cell(
        &m,
        "await fx.plant_on_path_and_wait()",
        json!({ "PATH": path }),
    );
    kill_all_envgit_mcp(&m.env);
    let log = m.env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(
        !m.env.path(".venv/bin/git").exists(),
        "the server's git is still first on the person's PATH: {}",
        log.stderr
    );
    assert!(m.env.path(".venv/bin/fx-own-tool").exists());
    assert!(
        log.stderr.contains(".venv/bin/git") && log.stderr.contains("filesystem.path-shadow"),
        "{}",
        log.stderr
    );
}

#[test]
fn rewind_from_another_terminal_rewinds_the_repl_by_replay() {
    let m = Mcp::new("");
    let out = m.run(json!([
        {"code": "var a = 1; let later = Date.now(); const r = Math.random(); 'one'"},
        {"code": "throw new Error('a failed cell, skipped by replay')"},
        {"code": "a = 2; let c = 3; [a, c]"},
        {"code": "a = 3; let d = 4", "session": "default"},
        {"code": "let other = 'x'", "session": "s2"},
        {"__rewind_to": 2},
        {"code": "[a, typeof c, typeof d, typeof other, typeof later, typeof r]"},
        {"code": "typeof other", "session": "s2"},
    ]));
    let r = out["results"].as_array().unwrap();
    assert_eq!(r[5]["rewound"], r[2]["meta"]["envgit/step"]);
    let t = text(&r[6]);
    assert!(
        t.contains(&format!(
            "the project was rewound to step {}",
            r[2]["meta"]["envgit/step"]
        )),
        "{t}"
    );
    assert!(t.contains("session default: 2 cell(s) replayed"), "{t}");
    assert!(
        t.contains("[2,\"number\",\"undefined\",\"undefined\",\"number\",\"number\"]"),
        "{t}"
    );
    // s2 began after step N: it starts empty.
    assert!(text(&r[7]).starts_with("\"undefined\""), "{}", text(&r[7]));
}

#[test]
fn ask_goes_to_the_person_through_elicitation_in_both_eras() {
    let (m, markers) = with_fx("approvers:\n  mcp_elicitation: true\n");
    let ran = markers.join("create_issue-ran");
    let mut steps_seen = 0;
    for (mode, era) in [("legacy", "2025"), ("auto", "2026-07-28")] {
        for answer in ["approve", "deny"] {
            let _ = std::fs::remove_file(&ran);
            let out = m.run_with(
                json!([{"code": "await fx.create_issue({title: 'T'})"}]),
                mode,
                Some(answer),
            );
            assert!(
                out["protocol"].as_str().unwrap().starts_with(era),
                "{mode}: {}",
                out["protocol"]
            );
            let asked = out["elicitations"].as_array().unwrap();
            assert_eq!(asked.len(), 1, "{mode} {answer}: {out:#}");
            let msg = asked[0]["message"].as_str().unwrap();
            assert!(msg.contains("fx.create_issue"), "{msg}");
            // A required approve/deny field with no default.
            let schema = &asked[0]["schema"];
            assert_eq!(schema["required"], json!(["decision"]), "{schema}");
            assert_eq!(
                schema["properties"]["decision"]["enum"],
                json!(["approve", "deny"])
            );
            assert!(schema["properties"]["decision"].get("default").is_none());
            let r = &out["results"][0];
            if answer == "approve" {
                assert!(!r["is_error"].as_bool().unwrap(), "{mode}: {}", text(r));
                assert!(text(r).starts_with("\"created T\""), "{}", text(r));
                assert!(ran.exists());
            } else {
                assert!(r["is_error"].as_bool().unwrap(), "{mode}: {}", text(r));
                assert!(text(r).contains("did not get it"), "{}", text(r));
                assert!(!ran.exists());
            }
            let steps = m.repl_steps();
            steps_seen += 1;
            assert_eq!(steps.len(), steps_seen);
            let approval = &steps.last().unwrap()["approvals"][0];
            assert_eq!(approval["rule"], "mcp.tools.fx.create_issue");
            assert_eq!(
                approval["answer"],
                if answer == "approve" {
                    "approved"
                } else {
                    "refused"
                }
            );
            assert!(
                approval["approver"]
                    .as_str()
                    .unwrap()
                    .starts_with("mcp-elicitation ("),
                "{approval}"
            );
        }
    }
    // A client that cannot elicit is never asked; the call is refused and says why.
    let out = m.run_with(
        json!([{"code": "await fx.create_issue({title: 'T'})"}]),
        "auto",
        None,
    );
    assert!(text(&out["results"][0]).contains("does not support elicitation"));
}

/// The client gives up on a call: it sends `notifications/cancelled` and, in the same
/// instant, its next call on the same session. The next cell must not start before the
/// cancelled one has ended (it used to, and cleared the interrupt before the running cell saw
/// it, which then ran to its timeout: about one run in three).
#[test]
fn a_cancelled_call_interrupts_the_cell_and_the_session_survives() {
    let m = Mcp::new("");
    let t = std::time::Instant::now();
    let out = m.run(json!([
        {"code": "let kept = 7"},
        // Cancelled well after the call is in flight even on a loaded 2-core machine (a
        // cancellation that arrives before the request is known is ignored by design).
        {"code": "while (true) {}", "timeout_ms": 60000, "__cancel_after": 3.0},
        {"code": "kept * 6"},
    ]));
    assert!(t.elapsed() < std::time::Duration::from_secs(30));
    let r = out["results"].as_array().unwrap();
    assert!(text(&r[2]).starts_with("42\n"), "{}", text(&r[2]));
    let steps = m.repl_steps();
    let statuses: Vec<&str> = steps
        .iter()
        .map(|s| s["repl"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["ok", "cancelled", "ok"], "{steps:#?}");
}

/// A remote MCP server over Streamable HTTP (Python SDK), on the host's loopback.
const REMOTE_SERVER: &str = include_str!("support/mcp_remote_server.py");

/// The remote server, stopped when dropped.
struct RemoteServer {
    child: std::process::Child,
    port: u16,
}

impl RemoteServer {
    fn start(dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(dir.join("remote_server.py"), REMOTE_SERVER).unwrap();
        let child = Command::new("python3")
            .arg(dir.join("remote_server.py"))
            .arg(port.to_string())
            .env("PYTHONPATH", pydeps())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = RemoteServer { child, port };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the remote MCP server did not listen on {port}");
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mcp.servers.NAME.url`: envgit's bridge runs in the sandbox, so the server's traffic goes
/// through the gate; its tools are typed functions like a stdio server's. A URL the policy
/// does not allow never connects, and `envgit mcp` says which server and why.
#[test]
fn a_remote_server_is_reached_from_the_sandbox_through_the_gate() {
    let env = Env::new();
    let remote = RemoteServer::start(env.tmp.path());
    env.envgit(&["init", "--allow", &format!("127.0.0.1:{}", remote.port)])
        .ok();
    let policy = env.read("envgit.yaml")
        + &format!(
            "mcp:\n  servers:\n    remote:\n      url: http://127.0.0.1:{}/mcp\n",
            remote.port
        );
    env.write("envgit.yaml", &policy);
    let m = Mcp { env };
    let out = m.run(json!([{"code": "await remote.shout({text: 'hi'})"}]));
    let r = out["results"].as_array().unwrap();
    assert!(!r[0]["is_error"].as_bool().unwrap(), "{}", text(&r[0]));
    assert!(text(&r[0]).starts_with("\"HI\""), "{}", text(&r[0]));
    let steps = m.repl_steps();
    let call = &steps.last().unwrap()["repl"]["calls"][0];
    assert_eq!(call["server"], "remote", "{call:#}");

    // Not allowed by network.allow: the gate refuses the bridge's requests.
    let env = Env::new();
    env.init();
    let policy = env.read("envgit.yaml")
        + "mcp:\n  servers:\n    blocked:\n      url: http://mcp.example.test/mcp\n";
    env.write("envgit.yaml", &policy);
    let run = Command::new(support::envgit_bin())
        .args(["mcp", "--project"])
        .arg(&env.project)
        .env("ENVGIT_HOME", &env.home)
        .env("HOME", env.user_home())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mcp.servers.blocked"), "{stderr}");
    assert!(stderr.contains("rule network.allow"), "{stderr}");
}

/// `python3 tests/support/SCRIPT`: a loopback server that prints its port; killed on drop.
struct PyServer(std::process::Child, u16);

impl PyServer {
    fn start(script: &str) -> Self {
        use std::io::BufRead;
        let mut child = Command::new("python3")
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/support")
                    .join(script),
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap();
        PyServer(child, port)
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The requests of a step whose path is `path`.
fn requests_to<'a>(step: &'a Value, path: &str) -> Vec<&'a Value> {
    step["requests"]
        .as_array()
        .map(|r| r.iter().filter(|q| q["path"] == path).collect())
        .unwrap_or_default()
}

#[test]
fn a_downstream_servers_own_requests_are_recorded_on_the_step_during_which_they_finished() {
    let http = PyServer::start("echo_http.py");
    let port = http.1;
    let (m, _) = with_fx(&format!("network:\n  allow: [\"127.0.0.1:{port}\"]\n"));
    let policy = m.env.read("envgit.yaml").replace(
        "irreversible:\n",
        "irreversible:\n  - net: { host: \"127.0.0.1\", method: POST, path: \"/deny/**\" }\n    action: deny\n    id: local.deny\n",
    );
    m.env.write("envgit.yaml", &policy);

    let out = m.run(json!([
        {"code": format!("await fx.fetch({{port: {port}, method: 'GET', path: '/ok'}})")},
        {"code": format!("await fx.fetch({{port: {port}, method: 'POST', path: '/deny/x'}})")},
        // The server requests on its own after its call has returned: nothing is in flight
        // when the request finishes, so it goes on the next step.
        {"code": format!("await fx.fetch_later({{port: {port}, path: '/between', delay: 0.2}})")},
        {"__sleep": 1.5},
        {"code": "6 * 7"},
        // …and after the last step: the last step of the run, when envgit mcp ends.
        {"code": format!("await fx.fetch_later({{port: {port}, path: '/after', delay: 0.2}})")},
        {"__sleep": 1.0},
    ]));
    let r = out["results"].as_array().unwrap();
    assert!(
        text(&r[0]).starts_with("\"200 seen GET /ok"),
        "{}",
        text(&r[0])
    );
    assert!(text(&r[1]).starts_with("\"403 "), "{}", text(&r[1]));
    assert!(text(&r[1]).contains("local.deny"), "{}", text(&r[1]));

    let steps = m.repl_steps_all();
    let step = |i: usize| {
        steps
            .iter()
            .find(|s| s["number"] == r[i]["meta"]["envgit/step"])
            .unwrap()
    };
    // The allowed GET, on the step of the cell that called the tool that made it.
    let ok = requests_to(step(0), "/ok");
    assert_eq!(ok.len(), 1, "{:#}", step(0));
    assert_eq!(ok[0]["method"], "GET");
    assert_eq!(ok[0]["decision"], "allowed");
    assert_eq!(ok[0]["status"], 200);
    assert_eq!(ok[0]["host"], format!("127.0.0.1:{port}"));
    assert_eq!(step(0)["refusals"], json!([]), "{:#}", step(0));
    // The denied POST, with its refusal, on the next cell's step and on no other.
    let denied = requests_to(step(1), "/deny/x");
    assert_eq!(denied.len(), 1, "{:#}", step(1));
    assert_eq!(denied[0]["method"], "POST");
    assert_eq!(denied[0]["decision"], "denied");
    assert_eq!(denied[0]["rule"], "local.deny");
    assert_eq!(denied[0]["status"], 403);
    assert_eq!(
        step(1)["refusals"],
        json!([{"what": format!("POST 127.0.0.1:{port}/deny/x"), "rule": "local.deny"}])
    );
    assert!(requests_to(step(1), "/ok").is_empty(), "{:#}", step(1));
    // Between two cells: on the next one.
    assert!(requests_to(step(2), "/between").is_empty(), "{:#}", step(2));
    assert_eq!(requests_to(step(4), "/between").len(), 1, "{:#}", step(4));
    // After the last cell: one more step when envgit mcp ends.
    assert!(requests_to(step(5), "/after").is_empty(), "{:#}", step(5));
    let last = steps.last().unwrap();
    assert!(last["repl"].is_null(), "{last:#}");
    assert_eq!(requests_to(last, "/after").len(), 1, "{last:#}");
    // Each request once in the whole log.
    for path in ["/ok", "/deny/x", "/between", "/after"] {
        let n: usize = steps.iter().map(|s| requests_to(s, path).len()).sum();
        assert_eq!(n, 1, "{path}");
    }
    let log = m.env.envgit(&["log", "-v"]).ok();
    assert!(
        log.stdout.contains(&format!(
            "denied POST 127.0.0.1:{port}/deny/x rule=local.deny"
        )),
        "{}",
        log.stdout
    );
}

/// MCP clients stop a server with SIGTERM soon after closing its stdin: `envgit mcp` then ends
/// as if stdin had closed (exit 0, its steps committed) instead of dying on the signal.
#[test]
fn sigterm_ends_envgit_mcp_like_a_closed_stdin() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let m = Mcp::new("");
    let mut child = Command::new(support::envgit_bin())
        .args(["mcp", "--project"])
        .arg(&m.env.project)
        .env("ENVGIT_HOME", &m.env.home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut answer_to = |id: u64| -> Value {
        for _ in 0..100 {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "envgit mcp closed stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
        panic!("no answer to request {id}");
    };
    let send = |stdin: &mut std::process::ChildStdin, v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "sigterm-test", "version": "1"}}}),
    );
    assert!(answer_to(1)["result"].is_object());
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "execute", "arguments": {"code": "6 * 7"}}}),
    );
    let done = answer_to(2);
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("42")
    );
    // SIGTERM with stdin still open.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut status = None;
    for _ in 0..200 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("envgit mcp did not end within 10 s of SIGTERM")
    });
    drop(stdin);
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(m.repl_steps().len(), 1);
}

/// Calls the fx server's `tool` through envgit mcp and, once the tool says it `PLANTED`,
/// `kill -9`s that envgit mcp (its client with it).
fn kill_mid_call(m: &Mcp, tool: &str) {
    kill_mid_cell(m, &format!("await fx.{tool}()"), json!({}));
}

/// [`kill_mid_call`] of the cell `code`, envgit mcp started with `env`.
fn kill_mid_cell(m: &Mcp, code: &str, env: Value) {
    let calls = json!([{ "code": code }]);
    let mut driver = client(&m.env, calls, "auto", None, env)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !m.env.path("PLANTED").exists() {
        assert!(std::time::Instant::now() < deadline, "the call never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = server_pid(&m.env).expect("envgit mcp is running");
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let _ = driver.kill();
    driver.wait().unwrap();
    wait_exited(pid);
}

/// `kill -9` of `envgit mcp` while a downstream server's call is under way, after the server
/// made a repository with a hook inside the project: nothing can run in envgit then, so the
/// next envgit command checks the nested repositories against the tree the call began from,
/// removes the hook and says so.
#[test]
fn after_a_kill_9_mid_execute_the_next_command_puts_the_nested_code_back() {
    let (m, _markers) = with_fx("");
    kill_mid_call(&m, "plant_nested_and_wait");
    let hook = m.env.path("libs/z/.git/hooks/pre-commit");
    // The host of the downstream server dies with it (the test below); a host still winding
    // down is ended here, so the check below is the next command's alone.
    kill_all_envgit_mcp(&m.env);
    let log = m.env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(
        !hook.exists(),
        "the hook the server planted outlived the killed envgit: {}",
        log.stderr
    );
    assert!(log.stderr.contains("libs/z/.git/hooks"), "{}", log.stderr);
}

/// The same, after the server made a repository in an excluded directory and changed the
/// person's there: the next command disarms the new one and puts the person's config back.
#[test]
fn after_a_kill_9_mid_execute_a_repository_made_in_an_excluded_directory_runs_nothing() {
    let (m, _markers) = with_fx("");
    let pkg = m.env.path(".venv/src/pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    m.env.git(&pkg, &["init", "-q", "-b", "main"]);
    let before = m.env.read(".venv/src/pkg/.git/config");
    let marker = m.env.tmp.path().join("MARKER");
    let command = json!(format!("touch {}; false", marker.display()));
    kill_mid_cell(
        &m,
        &format!("await fx.plant_in_excluded_and_wait({{command: {command}}})"),
        json!({}),
    );
    kill_all_envgit_mcp(&m.env);
    let log = m.env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert_eq!(
        m.env.read(".venv/src/pkg/.git/config"),
        before,
        "{}",
        log.stderr
    );
    for repo in [m.env.path("target/x"), pkg] {
        let _ = m.env.host_git(&repo).arg("status").output().unwrap();
        assert!(
            !marker.exists(),
            "the host's git in {} ran what the server planted: {}",
            repo.display(),
            log.stderr
        );
    }
    assert!(
        log.stderr.contains("target/x/.git/config"),
        "{}",
        log.stderr
    );
}

/// The processes of `env`'s fx server (any of its pids: the sandbox's view of it is the
/// host's too), found by the markers folder its command line names.
fn fx_server_pids(markers: &Path) -> Vec<u32> {
    let needle = markers.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let ours = cmdline.windows(12).any(|w| w == b"fx_server.py")
                && cmdline.windows(needle.len()).any(|w| w == needle);
            ours.then_some(pid)
        })
        .collect()
}

/// A downstream server must not outlive the `envgit mcp` that started it: killed with it (a
/// `kill -9`, the OOM killer), a server in the middle of a call would otherwise run on in its
/// sandbox and write into the project after the next command made the check the dead step
/// owed (here: plant the hook again as soon as that check removed it).
#[test]
fn a_killed_envgit_mcp_takes_its_downstream_servers_with_it() {
    let (m, markers) = with_fx("");
    kill_mid_call(&m, "keep_planting");
    // Bounded: the hosts and the server end with envgit mcp, or this fails (and ends them, so
    // nothing of the test is left running).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let left = loop {
        let mut left = envgit_mcp_pids(&m.env, |args| args.len() > 4);
        left.extend(fx_server_pids(&markers));
        if left.is_empty() || std::time::Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(
        left.is_empty(),
        "the downstream server and its host outlived the killed envgit mcp by a minute \
         (pids {left:?}), free to write into the project"
    );
    let log = m.env.envgit(&["log", "--json"]);
    assert_eq!(log.code, 0, "{}", log.stderr);
    assert!(
        !m.env.path("libs/z/.git/hooks/pre-commit").exists(),
        "{}",
        log.stderr
    );
}
