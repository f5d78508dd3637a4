//! Fixtures for the agent tests: the real agent CLIs (installed by
//! `scripts/install-deps-agents`), and a scripted model server on 127.0.0.1 that plays the
//! OpenAI Responses API (Codex) or the Anthropic Messages API (Copilot's BYOK provider),
//! answering with tool calls and then a final message.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// Where the tools tests run inside the sandbox live by default: a place its view keeps
/// (read-only), unlike the checkout's target/ or /var/tmp.
pub const TEST_DEPS: &str = "/opt/envgit-test-deps";

/// Where `scripts/install-deps-agents` puts the CLIs (or `$ENVGIT_AGENTS_DIR`).
pub fn agents_dir() -> PathBuf {
    match std::env::var_os("ENVGIT_AGENTS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(TEST_DEPS).join("agents"),
    }
}

/// The directory holding the agent CLIs' launchers; fails the test when `name` is missing.
pub fn agent_bin_dir(name: &str) -> PathBuf {
    let dir = agents_dir().join("node_modules/.bin");
    let script = if name == "claude" {
        "scripts/install-deps-agents --claude"
    } else {
        "scripts/install-deps-agents"
    };
    assert!(
        dir.join(name).exists(),
        "the `{name}` CLI is not installed at {}: run {script} \
         (it installs the pinned agent CLIs with npm)",
        dir.display()
    );
    dir.canonicalize().unwrap()
}

/// `PATH` with the agent CLIs first.
pub fn path_with(dir: &std::path::Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    )
}

#[derive(Clone, Debug)]
pub enum Turn {
    /// Call the shell tool (Responses: `exec_command` with `cmd`; Messages: `bash`/`Bash`
    /// with `command`), or any tool by name with raw arguments.
    Shell(String),
    Tool(String, Value),
    Say(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Responses,
    Messages,
}

pub struct ModelServer {
    pub port: u16,
    /// Every request body, in order.
    pub bodies: Arc<Mutex<Vec<Value>>>,
    /// The credential headers (`x-api-key`, `authorization`) of every model request.
    pub credentials: Arc<Mutex<Vec<String>>>,
}

impl ModelServer {
    pub fn start(api: Api, script: Vec<Turn>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
        let credentials: Arc<Mutex<Vec<String>>> = Arc::default();
        let (b2, c2, script) = (bodies.clone(), credentials.clone(), Arc::new(script));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (b3, c3, s3) = (b2.clone(), c2.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, api, &s3, &b3, &c3);
                });
            }
        });
        Self {
            port,
            bodies,
            credentials,
        }
    }

    pub fn credentials(&self) -> Vec<String> {
        self.credentials.lock().unwrap().clone()
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    /// Every request body as text (for "the next model request carries it").
    pub fn transcript(&self) -> String {
        self.bodies()
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Method, target, credential header values, body.
type Request = (String, String, Vec<String>, Vec<u8>);

fn read_request(stream: &TcpStream) -> std::io::Result<Request> {
    let mut r = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let mut len = 0usize;
    let mut chunked = false;
    let mut credentials = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "content-length" {
                len = v.trim().parse().unwrap_or(0);
            } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                chunked = true;
            } else if k == "x-api-key" || k == "authorization" {
                credentials.push(v.trim().to_string());
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(len, 0);
        r.read_exact(&mut body)?;
    }
    Ok((method, target, credentials, body))
}

fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(t, d)| format!("event: {t}\ndata: {d}\n\n"))
        .collect()
}

fn responses_reply(turn: Option<&Turn>, n: usize) -> String {
    let item = match turn {
        Some(Turn::Shell(cmd)) => json!({
            "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
            "name": "exec_command", "arguments": json!({"cmd": cmd, "yield_time_ms": 10000}).to_string(),
            "status": "completed"
        }),
        Some(Turn::Tool(name, args)) => json!({
            "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
            "name": name, "arguments": args.to_string(), "status": "completed"
        }),
        Some(Turn::Say(text)) => json!({
            "type": "message", "role": "assistant", "id": format!("msg_{n}"), "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }),
        None => json!({
            "type": "message", "role": "assistant", "id": format!("msg_{n}"), "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}]
        }),
    };
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15});
    sse(&[
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": format!("resp_{n}"), "status": "completed", "usage": usage}}),
        ),
    ])
}

fn messages_reply(turn: Option<&Turn>, shell_tool: Option<&str>, n: usize) -> String {
    let start = json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message",
        "role": "assistant", "model": "mock", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}});
    let tool = match (turn, shell_tool) {
        (Some(Turn::Shell(cmd)), Some(t)) => Some((
            t.to_string(),
            json!({"command": cmd, "description": "scripted"}),
        )),
        (Some(Turn::Tool(name, args)), Some(_)) => Some((name.clone(), args.clone())),
        _ => None,
    };
    let mut ev = vec![("message_start", start)];
    match tool {
        Some((name, input)) => {
            ev.push(("content_block_start", json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": {}}})));
            ev.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
            ));
            ev.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            ev.push(("message_delta", json!({"type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 5}})));
        }
        None => {
            let text = match turn {
                Some(Turn::Say(t)) => t.clone(),
                _ => "done".to_string(),
            };
            ev.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ));
            ev.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
            ));
            ev.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            ev.push(("message_delta", json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 5}})));
        }
    }
    ev.push(("message_stop", json!({"type": "message_stop"})));
    sse(&ev)
}

fn count_type(v: &Value, ty: &str) -> usize {
    match v {
        Value::Object(m) => {
            let own = usize::from(m.get("type").and_then(Value::as_str) == Some(ty));
            own + m.values().map(|x| count_type(x, ty)).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(|x| count_type(x, ty)).sum(),
        _ => 0,
    }
}

fn serve(
    mut stream: TcpStream,
    api: Api,
    script: &[Turn],
    bodies: &Mutex<Vec<Value>>,
    seen_credentials: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let (method, _target, credentials, body) = read_request(&stream)?;
    if method != "POST" {
        return stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    bodies.lock().unwrap().push(v.clone());
    seen_credentials.lock().unwrap().extend(credentials);
    let reply = match api {
        Api::Responses => {
            let n = count_type(&v["input"], "function_call_output");
            responses_reply(script.get(n), n)
        }
        Api::Messages => {
            let tools: Vec<String> = v["tools"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let shell = ["bash", "Bash"]
                .into_iter()
                .find(|t| tools.iter().any(|x| x == t));
            let n = count_type(&v["messages"], "tool_result");
            messages_reply(script.get(n), shell, n)
        }
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(reply.as_bytes())?;
    stream.flush()
}

/// Run `cmd` with a hard time limit; returns stdout and stderr (the exit code proves nothing
/// for the agent CLIs).
pub fn run_bounded(mut cmd: std::process::Command, limit: std::time::Duration) -> (String, String) {
    use std::process::Stdio;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = std::time::Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (t_out.join().unwrap(), t_err.join().unwrap());
            panic!("timed out after {limit:?}\nstdout:\n{o}\nstderr:\n{e}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (t_out.join().unwrap(), t_err.join().unwrap())
}
