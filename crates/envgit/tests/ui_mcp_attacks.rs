#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Attacks on `envgit mcp` and `envgit ui` by the agent, performed with real parts: a real MCP
//! client (the Python SDK) driving `envgit mcp` over stdio, a real downstream server.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Env;
use support::mcp_client::{add_fx_server, client, drive};
use support::ui_client::{Ui, request};

/// Runs the client with `calls`, but gives up after `limit`: a cell that never returns is the
/// failure this file looks for (the client's own bound is two minutes).
fn drive_within(env: &Env, calls: Value, answer: Option<&str>, limit: Duration) -> Value {
    use std::os::unix::process::CommandExt;
    let mut child = client(env, calls, "auto", answer, json!({}))
        // Its own group: on a timeout the client and the `envgit mcp` it started both end.
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            // The client's group: `timeout`, the client and the `envgit mcp` it started.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the calls did not come back within {limit:?}: a cell ran unbounded\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "client failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn text(r: &Value) -> &str {
    r["text"].as_str().unwrap_or_default()
}

/// The cell's value is rendered by `JSON.stringify` after the code ran: a `toJSON`, a getter or
/// a Proxy trap in the value runs the agent's code again, and so does describing what a cell
/// threw (its `name`, `message`, `stack`, a thrown object's `toJSON`). Each must stay within
/// the cell's time budget: a loop there must not hold the session (and the `execute` call,
/// and a CPU) for ever.
#[test]
fn code_run_while_rendering_or_describing_a_cell_is_bounded_by_its_budget() {
    let env = Env::new();
    env.init();
    let cells = [
        "({ toJSON() { for (;;) {} } })",
        "({ get x() { for (;;) {} } })",
        "new Proxy({}, { ownKeys() { for (;;) {} } })",
        "const e = new Error('x'); Object.defineProperty(e, 'message', { get() { for (;;) {} } }); throw e",
        "const f = new Error('x'); Object.defineProperty(f, 'name', { get() { for (;;) {} } }); throw f",
        "throw { toJSON() { for (;;) {} } }",
        // A top-level `return` makes the cell run again wrapped in a function.
        "for (;;) {}\nreturn 1",
        // A job left queued when the cell's value was ready.
        "Promise.resolve().then(() => { for (;;) {} }); 1",
    ];
    let mut calls: Vec<Value> = cells
        .iter()
        .map(|c| json!({"code": c, "timeout_ms": 500}))
        .collect();
    calls.push(json!({"code": "1 + 1"}));
    let started = Instant::now();
    let out = drive_within(&env, Value::Array(calls), None, Duration::from_secs(60));
    let r = out["results"].as_array().unwrap();
    for (i, cell) in cells.iter().enumerate() {
        // Whatever the cell became (an error, or its value before the job ran), it came back.
        assert!(
            r[i]["is_error"].as_bool().unwrap() || text(&r[i]).starts_with("1\n"),
            "{cell}: {}",
            text(&r[i])
        );
    }
    assert!(
        text(&r[cells.len()]).starts_with("2\n"),
        "{}",
        text(&r[cells.len()])
    );
    assert!(started.elapsed() < Duration::from_secs(45));
}

/// An `ask` on a downstream tool puts the call to the person: the question must show what the
/// call would do (its arguments), not only the tool's name, or the person approves
/// `fx.create_issue` while the agent's code sends whatever it likes in it. Both eras of
/// elicitation, and the record of the approval.
#[test]
fn an_asked_tool_call_shows_the_person_its_arguments() {
    let env = Env::new();
    env.init();
    let markers = add_fx_server(&env, "approvers:\n  mcp_elicitation: true\n");
    let title = "rm -rf the-prod-database-7d1c";
    for mode in ["legacy", "auto"] {
        let _ = std::fs::remove_file(markers.join("create_issue-ran"));
        let out = drive(
            &env,
            json!([{"code": format!("await fx.create_issue({{title: {title:?}}})")}]),
            mode,
            Some("approve"),
        );
        let asked = out["elicitations"].as_array().unwrap();
        assert_eq!(asked.len(), 1, "{mode}: {out:#}");
        let msg = asked[0]["message"].as_str().unwrap();
        assert!(
            msg.contains(title),
            "{mode}: the person was asked without the call's arguments: {msg}"
        );
        assert!(markers.join("create_issue-ran").exists(), "{mode}: {out:#}");
    }
    let step = env
        .log_json()
        .into_iter()
        .find(|s| s["kind"] == "repl")
        .unwrap();
    let what = step["approvals"][0]["what"].as_str().unwrap();
    assert!(what.contains(title), "the record: {step:#}");
}

/// The page's numbers come from the address: the largest a query can hold is an answer (an
/// empty page), not a server error.
#[test]
fn the_ui_answers_the_largest_numbers_in_its_queries() {
    let env = Env::new();
    env.init();
    env.write("a.txt", "x\n");
    let n = env.record();
    let ui = Ui::start(&env);
    let host = format!("Host: {}", ui.host());
    let signed = request(
        ui.port,
        "GET",
        &format!("/?code={}", ui.code()),
        std::slice::from_ref(&host),
    );
    let cookie = signed.header("set-cookie").unwrap();
    let cookie = format!("Cookie: {}", cookie.split(';').next().unwrap());
    let max = u64::MAX;
    for q in [
        format!("/api/steps/{n}/diff?offset={max}"),
        format!("/api/steps/{n}/diff?file=0&from={max}"),
        format!("/api/steps/{n}/diff?file={max}"),
        format!("/api/steps?limit={max}&before={max}&after={max}"),
    ] {
        let a = request(ui.port, "GET", &q, &[host.clone(), cookie.clone()]);
        assert_eq!(a.status, 200, "{q}: {}", a.body);
    }
    ui.stop();
}

/// What the test saw happen, in order.
enum Seen {
    /// The server ended the silent connection (EOF or reset), though the test held it open.
    Closed,
    /// The real request's answer (its status, 0 for none).
    Answered(u16),
}

/// Connections that send half a request head and then nothing, more than the UI can hold open
/// (any web page can open that many to 127.0.0.1): the UI closes each once its header
/// deadline passes, so the person's own request is answered while the test still holds every
/// one of them open, not only once they go away.
#[test]
fn half_sent_request_heads_do_not_keep_the_ui_from_answering() {
    silent_connections_do_not_keep_the_ui_from_answering(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
}

/// The same with whole heads and half a body, which the UI never reads (it answers at once)
/// but which holds the connection for the next request on it: a GET and a POST, each
/// framed by length and chunked.
#[test]
fn half_sent_request_bodies_do_not_keep_the_ui_from_answering() {
    for head in [
        &b"POST /api/held/r/1/1/approve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\nab"[..],
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n100\r\nab",
    ] {
        silent_connections_do_not_keep_the_ui_from_answering(head);
    }
}

fn silent_connections_do_not_keep_the_ui_from_answering(sent: &[u8]) {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpStream};
    use std::sync::mpsc;

    const FILES: u32 = 64;
    let env = Env::new();
    env.init();
    let ui = Ui::start_with_nofile(&env, FILES);
    let host = format!("Host: {}", ui.host());
    let before = request(ui.port, "GET", "/", std::slice::from_ref(&host));
    assert_ne!(before.status, 0, "no answer before the attack");

    // More than the descriptors it may open, each with a request it never finishes.
    let silent: Vec<TcpStream> = (0..FILES + 8)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", ui.port)).unwrap();
            s.write_all(sent).unwrap();
            s
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    for s in &silent {
        let (mut s, tx) = (s.try_clone().unwrap(), tx.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
            let _ = tx.send(Seen::Closed);
        });
    }
    {
        let (port, host, tx) = (ui.port, host.clone(), tx.clone());
        std::thread::spawn(move || {
            let answer = request(port, "GET", "/", &[host]);
            let _ = tx.send(Seen::Answered(answer.status));
        });
    }
    // Only so that the unpatched server fails this test instead of hanging it: each wait is
    // for the next event, and the deadline the server keeps is a fraction of it.
    let hang_guard = Duration::from_secs(90);
    let mut closed_by_server = 0;
    loop {
        match rx.recv_timeout(hang_guard) {
            Ok(Seen::Closed) => closed_by_server += 1,
            Ok(Seen::Answered(status)) => {
                assert_ne!(status, 0, "the real request got an empty answer");
                break;
            }
            Err(_) => {
                // Show what held it: the real request is answered once the test lets go.
                for s in &silent {
                    let _ = s.shutdown(Shutdown::Both);
                }
                let status = rx.iter().find_map(|e| match e {
                    Seen::Answered(s) => Some(s),
                    Seen::Closed => None,
                });
                panic!(
                    "the real request got no answer while {} half-sent requests ({:?}) were \
                     open ({closed_by_server} closed by the server); it got one ({status:?}) \
                     once the test closed them",
                    silent.len(),
                    String::from_utf8_lossy(sent)
                );
            }
        }
    }
    assert!(
        closed_by_server > 0,
        "answered though the silent connections held nothing"
    );
    drop(silent);
    ui.stop();
}
