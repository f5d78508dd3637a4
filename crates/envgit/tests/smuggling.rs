//! Hostile HTTP/1 requests sent from inside `envgit run` through the gate to real servers on
//! loopback with parsers of their own (Python's `http.server`, Node's `http`/llhttp), each
//! logging what it really received. The gate must forward exactly the request it judged: no
//! request the gate did not judge, and no irreversible request the preset refuses, may reach
//! either server, however the bytes are framed; legitimate requests arrive intact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Child, Command};

use support::Env;
use support::upstreams::{spawn_server, support_script};

/// A logging upstream: the child, its port, and the JSON-lines file it appends to.
struct Upstream {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Upstream {
    fn start(program: &str, script: &str, log: PathBuf) -> Upstream {
        let mut cmd = Command::new(program);
        cmd.arg(support_script(script)).arg(&log);
        let (child, port) = spawn_server(script, cmd);
        Upstream { child, port, log }
    }

    /// Every request the server read so far.
    fn seen(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

struct World {
    env: Env,
    servers: Vec<Upstream>,
}

fn world() -> World {
    let env = Env::new();
    let servers = vec![
        Upstream::start(
            "python3",
            "logging_http.py",
            env.tmp.path().join("python.log"),
        ),
        Upstream::start("node", "logging_http.js", env.tmp.path().join("node.log")),
    ];
    let mut args = vec!["init".to_owned()];
    for s in &servers {
        args.push("--allow".into());
        args.push(format!("127.0.0.1:{}", s.port));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.envgit(&args).ok();
    // The client runs inside the sandbox, which sees the project.
    std::fs::copy(support_script("raw_client.py"), env.path("raw_client.py")).unwrap();
    World { env, servers }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `git-receive-pack` request body that updates a ref: what the preset's `git.push` refuses.
fn push_body() -> Vec<u8> {
    let old = "0".repeat(40);
    let new = "1".repeat(40);
    let line = format!("{old} {new} refs/heads/smuggled\0report-status\n");
    let mut body = format!("{:04x}{line}", line.len() + 4).into_bytes();
    body.extend_from_slice(b"0000");
    body
}

/// `POST <target>` with the push body and a Content-Length.
fn push(target: &str, host: &str) -> Vec<u8> {
    let body = push_body();
    let mut out = format!(
        "POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-git-receive-pack-request\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// One case: the raw bytes, the delay before sending them, and how the client reads.
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    delay: &'static str,
    mode: &'static str,
}

impl World {
    /// Sends the case from inside the sandbox to `server`; what the client printed.
    fn send(&self, server: &Upstream, case: &Case) -> String {
        let out = self.env.envgit(&[
            "run",
            "python3",
            "raw_client.py",
            &server.port.to_string(),
            &hex(&case.bytes),
            case.delay,
            case.mode,
        ]);
        assert_ne!(
            out.code, 125,
            "{}: envgit failed: {}",
            case.name, out.stderr
        );
        assert!(
            out.stdout.starts_with("sent\n"),
            "{}: the client did not run: {} {}",
            case.name,
            out.stdout,
            out.stderr
        );
        out.stdout["sent\n".len()..].to_owned()
    }
}

fn assert_nothing_smuggled(w: &World, case: &str) {
    for s in &w.servers {
        for r in s.seen() {
            let target = r["target"].as_str().unwrap_or_default();
            assert!(
                !target.contains("SMUGGLED") && !target.contains("receive-pack"),
                "{case}: {} received {r}",
                r["server"]
            );
            assert!(
                r["host"].is_string(),
                "{case}: {} received a request without Host: {r}",
                r["server"]
            );
        }
    }
}

#[test]
fn requests_the_gate_did_not_judge_never_reach_the_upstream() {
    let w = world();
    for server in &w.servers {
        let host = format!("127.0.0.1:{}", server.port);
        let smuggled = push("/SMUGGLED/app.git/git-receive-pack", &host);
        let mut cases = Vec::new();

        // 1. `Connection` naming the framing header: the body (a whole second request) must
        // not become a request of its own upstream.
        let mut hidden = format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: Content-Length\r\nContent-Length: {}\r\n\r\n",
            smuggled.len()
        )
        .into_bytes();
        hidden.extend_from_slice(&smuggled);
        cases.push(Case {
            name: "Connection: Content-Length",
            bytes: hidden,
            delay: "0",
            mode: "eof",
        });
        let no_host = format!("GET /no-host HTTP/1.1\r\nHost: {host}\r\nConnection: Host\r\n\r\n");
        cases.push(Case {
            name: "Connection: Host",
            bytes: no_host.into_bytes(),
            delay: "0",
            mode: "eof",
        });
        let mut te = format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            smuggled.len()
        )
        .into_bytes();
        te.extend_from_slice(&smuggled);
        te.extend_from_slice(b"\r\n0\r\n\r\n");
        cases.push(Case {
            name: "Connection: Transfer-Encoding",
            bytes: te,
            delay: "0",
            mode: "eof",
        });

        // 2. No timing-based protocol guess on a listed loopback port.
        cases.push(Case {
            name: "a push sent after a pause",
            bytes: push("/SMUGGLED/late.git/git-receive-pack", &host),
            delay: "0.6",
            mode: "eof",
        });
        let mut crlf = b"\r\n".to_vec();
        crlf.extend_from_slice(&push("/SMUGGLED/crlf.git/git-receive-pack", &host));
        cases.push(Case {
            name: "a push after an empty line",
            bytes: crlf,
            delay: "0",
            mode: "eof",
        });

        // 3. A raw `#` in the target.
        cases.push(Case {
            name: "a fragment in the target",
            bytes: push("/SMUGGLED/app.git/git-receive-pack#x", &host),
            delay: "0",
            mode: "eof",
        });

        // 10. Chunk sizes a lenient reader takes: `+5`, bare LF line ends, CL.TE.
        let mut plus = format!(
            "POST /SMUGGLED/plus.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n+{:x}\r\n",
            push_body().len()
        )
        .into_bytes();
        plus.extend_from_slice(&push_body());
        plus.extend_from_slice(b"\r\n0\r\n\r\n");
        cases.push(Case {
            name: "a chunk size with a sign",
            bytes: plus,
            delay: "0",
            mode: "eof",
        });
        let mut cl_te = format!(
            "POST /up HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        .into_bytes();
        cl_te.extend_from_slice(&smuggled);
        cases.push(Case {
            name: "CL.TE",
            bytes: cl_te,
            delay: "0",
            mode: "eof",
        });
        let mut te_te = format!(
            "POST /up HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nContent-Length: {}\r\n\r\n",
            smuggled.len()
        )
        .into_bytes();
        te_te.extend_from_slice(&smuggled);
        cases.push(Case {
            name: "TE.TE",
            bytes: te_te,
            delay: "0",
            mode: "eof",
        });

        for case in &cases {
            let reply = w.send(server, case);
            assert!(
                !reply.is_empty() || case.delay != "0",
                "{}: no answer at all",
                case.name
            );
            assert_nothing_smuggled(&w, case.name);
        }
    }
    // Every request a server received is one the gate judged and recorded as allowed.
    let log = w.env.log_json();
    let judged: Vec<(String, String)> = log
        .iter()
        .flat_map(|s| s["requests"].as_array().cloned().unwrap_or_default())
        .filter(|q| q["decision"] == "allowed")
        .map(|q| {
            (
                q["method"].as_str().unwrap_or_default().to_owned(),
                q["path"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for s in &w.servers {
        for r in s.seen() {
            let method = r["method"].as_str().unwrap().to_owned();
            let path = r["target"]
                .as_str()
                .unwrap()
                .split('?')
                .next()
                .unwrap()
                .to_owned();
            assert!(
                judged.contains(&(method.clone(), path.clone())),
                "{} received {method} {path}, which the gate never judged: {judged:?}",
                r["server"]
            );
        }
    }
}

#[test]
fn a_huge_chunk_size_is_refused_and_the_gate_keeps_serving() {
    let w = world();
    let server = &w.servers[0];
    let host = format!("127.0.0.1:{}", server.port);
    let mut bytes = format!(
        "POST /app.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"
    )
    .into_bytes();
    bytes.extend_from_slice(&[b'a'; 8192]);
    let reply = w.send(
        server,
        &Case {
            name: "ffffffffffffffff",
            bytes,
            delay: "0",
            mode: "eof",
        },
    );
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert_nothing_smuggled(&w, "ffffffffffffffff");
    let ok = w.send(
        server,
        &Case {
            name: "after",
            bytes: format!("GET /after HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes(),
            delay: "0",
            mode: "eof",
        },
    );
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

#[test]
fn small_chunked_bodies_a_rule_reads_are_judged_without_waiting_and_arrive_intact() {
    let w = world();
    for server in &w.servers {
        let host = format!("127.0.0.1:{}", server.port);
        // The 4-byte probe git sends before a large push: allowed, read by the git.push rule.
        let bytes = format!(
            "POST /probe.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n0000\r\n0\r\n\r\n"
        )
        .into_bytes();
        let reply = w.send(
            server,
            &Case {
                name: "chunked probe",
                bytes,
                delay: "0",
                mode: "keep",
            },
        );
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let seen = server.seen();
        let probe = seen
            .iter()
            .find(|r| r["target"] == "/probe.git/git-receive-pack")
            .unwrap_or_else(|| panic!("{seen:?}"));
        assert_eq!(
            (&probe["method"], &probe["body"]),
            (&"POST".into(), &"0000".into())
        );
    }
}

#[test]
fn a_chunked_push_is_refused_with_its_403_while_the_client_waits() {
    let w = world();
    let server = &w.servers[1];
    let host = format!("127.0.0.1:{}", server.port);
    let body = push_body();
    let mut bytes = format!(
        "POST /app.git/git-receive-pack HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(b"\r\n0\r\n\r\n");
    let reply = w.send(
        server,
        &Case {
            name: "chunked push",
            bytes,
            delay: "0",
            mode: "keep",
        },
    );
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(reply.contains("(rule git.push)"), "{reply}");
    assert_nothing_smuggled(&w, "chunked push");
}
