//! A running `envgit ui` and a plain HTTP/1.1 client for it over a TcpStream (one request
//! per connection), so every header the tests send is exactly what they wrote.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

use super::Env;

pub struct Ui {
    pub child: Child,
    pub port: u16,
    pub url: String,
}

impl Ui {
    pub fn start(env: &Env) -> Ui {
        Ui::start_in(env, &env.project)
    }

    /// `envgit ui` for the project at `dir` (another than `env`'s own, as a fork).
    pub fn start_in(env: &Env, dir: &std::path::Path) -> Ui {
        let mut cmd = env.cmd(dir);
        cmd.args(["ui", "--json"]);
        Ui::start_cmd(cmd)
    }

    /// `envgit ui` able to open at most `files` descriptors (`prlimit`), as a person's shell
    /// may start it with 1024.
    pub fn start_with_nofile(env: &Env, files: u32) -> Ui {
        let mut cmd = env.cmd_of("prlimit", &env.project);
        cmd.arg(format!("--nofile={files}:{files}"))
            .arg(super::envgit_bin())
            .args(["ui", "--json"]);
        Ui::start_cmd(cmd)
    }

    /// `cmd` runs `envgit ui --json`.
    pub fn start_cmd(mut cmd: std::process::Command) -> Ui {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        // `--json` prints one pretty object: read it to its closing brace.
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut text = String::new();
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "ui printed: {text}");
            text.push_str(&line);
            if line.trim_end() == "}" {
                break;
            }
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        Ui {
            child,
            port: v["port"].as_u64().unwrap() as u16,
            url: v["url"].as_str().unwrap().to_owned(),
        }
    }

    /// The one-time code of the printed link.
    pub fn code(&self) -> String {
        self.url.split_once("code=").unwrap().1.to_owned()
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Kills it with SIGKILL (no unwinding, as the OOM killer would) and reaps it.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Stops it as Ctrl-C would (SIGTERM), so it removes its port's registration.
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "envgit ui ended with {status}");
    }
}

impl Drop for Ui {
    /// A failed test does not leave the server running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends `method target` with `headers` (each `Name: value`) to the UI and reads the whole
/// answer.
pub fn request(port: u16, method: &str, target: &str, headers: &[String]) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!("{method} {target} HTTP/1.1\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    if method == "POST" {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        unchunk(body)
    } else {
        body.to_owned()
    };
    Answer {
        status,
        head: head.to_owned(),
        body,
    }
}

fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// The server-sent events stream, read line by line.
pub fn events(port: u16, cookie: &str) -> BufReader<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let req =
        format!("GET /api/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    BufReader::new(s)
}
