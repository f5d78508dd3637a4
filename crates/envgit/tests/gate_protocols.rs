//! What a listed loopback port carries: HTTP judged per request unless the policy marks the
//! entry `raw: true` (never guessed from timing), and WebSocket upgrades only where the policy
//! marks the host `websocket: true`, against real servers on loopback through `envgit run`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use support::Env;
use support::upstreams::support_script;

struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server(mode: &str) -> Server {
    server_logging(mode, None)
}

/// [`server`], appending each request's first line to `log` (`upgrade ` before it when the
/// request asks for a WebSocket).
fn server_logging(mode: &str, log: Option<&std::path::Path>) -> Server {
    let mut command = Command::new("python3");
    if let Some(log) = log {
        command.env("TCP_WS_LOG", log);
    }
    let mut child = command
        .arg(support_script("tcp_and_ws.py"))
        .arg(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    Server(child, line.trim().parse().unwrap())
}

/// A project whose `network.allow` is exactly `entry`, with the client script in it.
fn project(entry: &str) -> Env {
    let env = Env::new();
    env.envgit(&["init"]).ok();
    let yaml = env.read("envgit.yaml");
    env.write(
        "envgit.yaml",
        &format!("{yaml}\nnetwork:\n  allow:\n    - {entry}\n"),
    );
    std::fs::copy(
        support_script("proto_client.py"),
        env.path("proto_client.py"),
    )
    .unwrap();
    env
}

fn client(env: &Env, mode: &str, port: u16) -> String {
    let out = env.envgit(&["run", "python3", "proto_client.py", mode, &port.to_string()]);
    assert_ne!(out.code, 125, "envgit failed: {}", out.stderr);
    assert!(
        out.stdout.starts_with("started\n"),
        "{} {}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn last_requests(env: &Env) -> Vec<serde_json::Value> {
    env.log_json()[0]["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn raw_tcp_passes_only_where_the_policy_says_raw() {
    let s = server("echo");
    let plain = project(&format!("\"127.0.0.1:{}\"", s.1));
    let out = client(&plain, "echo", s.1);
    assert!(!out.contains("echo: "), "raw bytes were spliced: {out}");
    assert!(
        last_requests(&plain)
            .iter()
            .any(|q| q["rule"] == "network.opaque"),
        "{:?}",
        last_requests(&plain)
    );

    let raw = project(&format!("{{ host: \"127.0.0.1:{}\", raw: true }}", s.1));
    let out = client(&raw, "echo", s.1);
    assert!(out.contains("got: echo: \u{0}hello raw"), "{out}");
    let requests = last_requests(&raw);
    assert!(
        requests
            .iter()
            .any(|q| q["decision"] == "uninspected" && q["bytes_in"].as_u64() > Some(0)),
        "{requests:?}"
    );
}

#[test]
fn websockets_are_judged_at_the_upgrade_and_allowed_only_where_marked() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("requests.log");
    let s = server_logging("ws", Some(&log));
    let plain = project(&format!("\"127.0.0.1:{}\"", s.1));
    let out = client(&plain, "ws", s.1);
    assert!(out.contains("status: HTTP/1.1 403"), "{out}");
    // Refused at the gate: the server never saw the upgrade asked for.
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !seen.contains("upgrade "),
        "the refused upgrade reached the server: {seen}"
    );
    assert!(out.contains("rule gate.websocket"), "{out}");
    assert!(
        out.contains("websocket: true"),
        "the refusal names the fix: {out}"
    );

    let ws = project(&format!(
        "{{ host: \"127.0.0.1:{}\", websocket: true }}",
        s.1
    ));
    let out = client(&ws, "ws", s.1);
    assert!(out.contains("status: HTTP/1.1 101"), "{out}");
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(seen.contains("upgrade GET /chat"), "{seen}");
    assert!(out.contains("got: ws:frame-bytes"), "{out}");
    let requests = last_requests(&ws);
    assert!(
        requests
            .iter()
            .any(|q| q["path"] == "/chat" && q["status"] == 101 && q["decision"] == "uninspected"),
        "{requests:?}"
    );
}

/// An `allow` rule of `irreversible` that matches the upgrade lets it out marked: the mark
/// survives the `101` and the splice, on the record the closed WebSocket leaves.
#[test]
fn a_websocket_an_allow_rule_lets_out_is_marked() {
    let s = server("ws");
    let ws = project(&format!(
        "{{ host: \"127.0.0.1:{}\", websocket: true }}",
        s.1
    ));
    let yaml = ws.read("envgit.yaml");
    let marked = yaml.replacen(
        "  - preset: default",
        "  - net: { host: \"127.0.0.1\", path: \"/chat\" }\n    action: allow\n    id: chat.send\n  - preset: default",
        1,
    );
    assert_ne!(marked, yaml, "{yaml}");
    ws.write("envgit.yaml", &marked);
    let out = client(&ws, "ws", s.1);
    assert!(out.contains("got: ws:frame-bytes"), "{out}");
    let requests = last_requests(&ws);
    assert!(
        requests.iter().any(|q| q["path"] == "/chat"
            && q["status"] == 101
            && q["irreversible"] == true
            && q["rule"] == "chat.send"),
        "{requests:?}"
    );
}
