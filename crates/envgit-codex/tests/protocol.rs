//! The exec-server protocol end to end over pipes, with a host that runs commands directly (no
//! sandbox: that part is envgit's, tested in crates/envgit/tests/agents_codex.rs with the real
//! Codex). Here: the wire shapes, refusals of the fs policy, symlinks never followed, process
//! lifecycle, and closing the connection killing its processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use envgit_codex::{Effect, FsPolicy, Host, StepCommandError, StepIntent, Trace, b64};
use serde_json::{Value, json};

#[derive(Default)]
struct Direct {
    recorded: Mutex<Vec<Effect>>,
    cwd: PathBuf,
}

impl Host for Direct {
    fn step_command(&self, i: &StepIntent) -> Result<std::process::Command, StepCommandError> {
        let mut c = std::process::Command::new(&i.argv[0]);
        c.args(&i.argv[1..]).current_dir(&i.cwd);
        Ok(c)
    }
    fn record_fs(&self, effect: Effect) {
        self.recorded.lock().unwrap().push(effect);
    }
    fn default_cwd(&self) -> PathBuf {
        self.cwd.clone()
    }
}

struct Conn {
    input: Option<std::io::PipeWriter>,
    lines: mpsc::Receiver<Value>,
    host: Arc<Direct>,
    server: Option<std::thread::JoinHandle<()>>,
    next: u64,
    /// Notifications seen while waiting for answers.
    seen: Vec<Value>,
}

impl Conn {
    fn open(root: &Path) -> Self {
        let (in_r, in_w) = std::io::pipe().unwrap();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let host = Arc::new(Direct {
            recorded: Mutex::default(),
            cwd: root.to_path_buf(),
        });
        let policy = FsPolicy {
            root: root.to_path_buf(),
            deny_read: vec![root.join("secret.pem"), root.join("secrets")],
            protected: vec!["envgit.yaml".into(), ".git/hooks".into()],
            deny_read_globs: Vec::new(),
        };
        let h: Arc<dyn Host> = host.clone();
        let server = std::thread::spawn(move || {
            envgit_codex::serve(
                BufReader::new(in_r),
                Box::new(out_w),
                h,
                policy,
                Trace::default(),
            )
            .unwrap();
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out_r).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(serde_json::from_str(&line).unwrap());
            }
        });
        Self {
            input: Some(in_w),
            lines: rx,
            host,
            server: Some(server),
            next: 1,
            seen: Vec::new(),
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let msg = json!({"id": id, "method": method, "params": params});
        let w = self.input.as_mut().unwrap();
        writeln!(w, "{msg}").unwrap();
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("an answer");
            if v["id"] == id {
                return v;
            }
            self.seen.push(v);
        }
    }

    /// Notifications until `process/closed` of `pid`.
    fn until_closed(&mut self, pid: &str) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .seen
            .iter()
            .filter(|v| v["params"]["processId"] == pid)
            .cloned()
            .collect();
        while !out.iter().any(|v| v["method"] == "process/closed") {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("a notification");
            if v["params"]["processId"] == pid {
                out.push(v);
            }
        }
        out
    }

    fn close(&mut self) {
        drop(self.input.take());
        self.server.take().unwrap().join().unwrap();
    }
}

fn project() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("w").canonicalize().unwrap_or_else(|_| {
        std::fs::create_dir(t.path().join("w")).unwrap();
        t.path().join("w").canonicalize().unwrap()
    });
    std::fs::write(root.join("envgit.yaml"), "version: 1\n").unwrap();
    std::fs::write(root.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(root.join("secret.pem"), "KEY\n").unwrap();
    std::fs::write(root.join(".env"), "TOKEN=x\n").unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("inner-link")).unwrap();
    (t, root)
}

fn uri(root: &Path, rel: &str) -> String {
    format!("file://{}/{rel}", root.display())
}

fn refused(v: &Value, text: &str) {
    assert_eq!(v["error"]["code"], -32003, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains(text),
        "{v}"
    );
}

#[test]
fn initialize_fs_calls_and_refusals() {
    let (_t, root) = project();
    let mut c = Conn::open(&root);
    let init = c.call("initialize", json!({"clientName": "test"}));
    assert!(
        init["result"]["sessionId"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert!(init.get("jsonrpc").is_none());
    assert_eq!(c.call("nope/what", json!({}))["error"]["code"], -32601);

    // Reads: file:// URIs and plain paths.
    let r = c.call("fs/readFile", json!({"path": uri(&root, "a.txt")}));
    assert_eq!(
        b64::decode(r["result"]["dataBase64"].as_str().unwrap()).unwrap(),
        b"alpha\n"
    );
    let r = c.call("fs/readFile", json!({"path": root.join("a.txt")}));
    assert!(r["result"]["dataBase64"].is_string(), "{r}");
    let m = c.call("fs/getMetadata", json!({"path": uri(&root, "sub")}));
    assert_eq!(m["result"]["isDirectory"], true);
    assert_eq!(
        c.call("fs/getMetadata", json!({"path": uri(&root, "missing")}))["error"]["code"],
        -32004
    );
    let m = c.call("fs/getMetadata", json!({"path": uri(&root, "etc-link")}));
    assert_eq!(m["result"]["isSymlink"], true, "{m}");

    // Denied reads, outside the project, symlinks never followed.
    refused(
        &c.call("fs/readFile", json!({"path": uri(&root, "secret.pem")})),
        "denied read secret.pem",
    );
    refused(
        &c.call("fs/readFile", json!({"path": uri(&root, ".env")})),
        "denied read .env",
    );
    // Registry and direnv credentials (`.npmrc`, `.pypirc`, `.envrc`) made after the session
    // started, at any depth: the sandbox masks them at its next step by name, so fs/* must
    // refuse them by name too, not only those its mask list held at the start.
    for name in ["sub/.npmrc", ".pypirc", "sub/.envrc", "sub/.env.local"] {
        std::fs::write(
            root.join(name),
            "//registry.example/:_authToken=npm_secret\n",
        )
        .unwrap();
        refused(
            &c.call("fs/readFile", json!({"path": uri(&root, name)})),
            &format!("denied read {name}"),
        );
        refused(
            &c.call(
                "fs/writeFile",
                json!({"path": uri(&root, name), "dataBase64": "eA=="}),
            ),
            &format!("denied write {name}"),
        );
    }
    std::fs::create_dir(root.join("secrets")).unwrap();
    refused(
        &c.call("fs/readDirectory", json!({"path": uri(&root, "secrets")})),
        "denied read secrets",
    );
    refused(
        &c.call("fs/readFile", json!({"path": "/etc/hostname"})),
        "filesystem.project",
    );
    refused(
        &c.call(
            "fs/readFile",
            json!({"path": uri(&root, "../w/../../etc/hostname")}),
        ),
        "filesystem.project",
    );
    refused(
        &c.call(
            "fs/readFile",
            json!({"path": uri(&root, "etc-link/hostname")}),
        ),
        "no_symlinks",
    );
    refused(
        &c.call("fs/readFile", json!({"path": uri(&root, "inner-link")})),
        "no_symlinks",
    );
    refused(
        &c.call("fs/copy", json!({"sourcePath": uri(&root, "secret.pem"), "destinationPath": uri(&root, "copy.pem")})),
        "denied read secret.pem",
    );
    assert!(!root.join("copy.pem").exists());
    let r = c.call("fs/copy", json!({"sourcePath": uri(&root, "sub"), "destinationPath": uri(&root, "sub/inner"), "recursive": true}));
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // Writes: protected paths, their parents, through links, outside.
    let data = b64::encode(b"x\n");
    refused(
        &c.call(
            "fs/writeFile",
            json!({"path": uri(&root, "envgit.yaml"), "dataBase64": data}),
        ),
        "write envgit.yaml",
    );
    refused(
        &c.call(
            "fs/writeFile",
            json!({"path": uri(&root, ".git/hooks/pre-commit"), "dataBase64": data}),
        ),
        "git.data-only",
    );
    refused(
        &c.call(
            "fs/remove",
            json!({"path": uri(&root, ".git"), "recursive": true, "force": true}),
        ),
        "git.data-only",
    );
    // Anything inside a `.git` (config, commondir, a nested repository's) or a `.git` file:
    // the host's git receives data through the after-step import only, never through fs/*.
    for (method, params) in [
        (
            "fs/writeFile",
            json!({"path": uri(&root, ".git/config"), "dataBase64": data}),
        ),
        (
            "fs/writeFile",
            json!({"path": uri(&root, ".git/commondir"), "dataBase64": data}),
        ),
        (
            "fs/writeFile",
            json!({"path": uri(&root, "vendor/x/.git/config"), "dataBase64": data}),
        ),
        (
            "fs/writeFile",
            json!({"path": uri(&root, "sub/.git"), "dataBase64": data}),
        ),
        (
            "fs/createDirectory",
            json!({"path": uri(&root, "vendor/y/.git/hooks"), "recursive": true}),
        ),
        (
            "fs/copy",
            json!({"sourcePath": uri(&root, "a.txt"), "destinationPath": uri(&root, ".git/info/x")}),
        ),
    ] {
        refused(&c.call(method, params), "git.data-only");
    }
    assert!(!root.join(".git/commondir").exists());
    assert!(!root.join("vendor").exists());
    refused(
        &c.call(
            "fs/writeFile",
            json!({"path": uri(&root, "etc-link/x"), "dataBase64": data}),
        ),
        "no_symlinks",
    );
    refused(
        &c.call(
            "fs/writeFile",
            json!({"path": uri(&root, "inner-link"), "dataBase64": data}),
        ),
        "no_symlinks",
    );
    refused(
        &c.call(
            "fs/writeFile",
            json!({"path": "/tmp/outside-envgit-test", "dataBase64": data}),
        ),
        "filesystem.project",
    );
    assert_eq!(
        std::fs::read_to_string(root.join("envgit.yaml")).unwrap(),
        "version: 1\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(root.join(".git/hooks").is_dir());
    // Codex shows a refusal's message to the person: the path in it is the agent's, its
    // control characters escaped.
    let v = c.call(
        "fs/writeFile",
        json!({"path": uri(&root, ".git/hooks/x\u{1b}]52;c;eA==\u{7}"), "dataBase64": data}),
    );
    refused(&v, "denied write .git/hooks/x\\x1b]52;c;eA==\\x07");
    assert!(
        !v["error"]["message"].as_str().unwrap().contains('\u{1b}'),
        "{v}"
    );

    // Allowed writes.
    let ok = |v: Value| assert_eq!(v["result"], json!({}), "{v}");
    ok(c.call(
        "fs/writeFile",
        json!({"path": uri(&root, "new/b.txt"), "dataBase64": data}),
    ));
    ok(c.call(
        "fs/createDirectory",
        json!({"path": uri(&root, "d1/d2"), "recursive": true}),
    ));
    ok(c.call("fs/copy", json!({"sourcePath": uri(&root, "new"), "destinationPath": uri(&root, "new2"), "recursive": true})));
    ok(c.call(
        "fs/remove",
        json!({"path": uri(&root, "new"), "recursive": true, "force": false}),
    ));
    assert_eq!(
        std::fs::read_to_string(root.join("new2/b.txt")).unwrap(),
        "x\n"
    );
    assert!(!root.join("new").exists());
    let d = c.call("fs/readDirectory", json!({"path": uri(&root, "new2")}));
    assert_eq!(
        d["result"]["entries"],
        json!([{"fileName": "b.txt", "isDirectory": false, "isFile": true}])
    );
    let can = c.call(
        "fs/canonicalize",
        json!({"path": uri(&root, "sub/../inner-link")}),
    );
    assert_eq!(can["result"]["path"], uri(&root, "a.txt"), "{can}");
    refused(
        &c.call("fs/canonicalize", json!({"path": uri(&root, "etc-link")})),
        "no_symlinks",
    );
    c.close();

    // One burst, one record: what was written and what was refused.
    let rec = c.host.recorded.lock().unwrap();
    let wrote: Vec<&String> = rec.iter().flat_map(|e| &e.wrote).collect();
    assert!(wrote.iter().any(|w| *w == "new/b.txt"), "{wrote:?}");
    let refusals: Vec<&str> = rec
        .iter()
        .flat_map(|e| &e.refused)
        .map(|r| r.what.as_str())
        .collect();
    assert!(refusals.contains(&"write envgit.yaml"), "{refusals:?}");
    assert!(refusals.contains(&"read .env"), "{refusals:?}");
}

#[test]
fn processes_stream_output_and_die_with_the_connection() {
    let (_t, root) = project();
    let mut c = Conn::open(&root);
    c.call("initialize", json!({}));
    let start = |c: &mut Conn, id: &str, script: &str, tty: bool| {
        c.call(
            "process/start",
            json!({"processId": id, "argv": ["/bin/sh", "-c", script], "cwd": uri(&root, ""),
                   "env": {}, "tty": tty, "pipeStdin": true, "sandbox": null}),
        )
    };
    let r = start(&mut c, "p1", "echo out; echo err >&2; exit 3", false);
    assert_eq!(r["result"]["processId"], "p1", "{r}");
    let events = c.until_closed("p1");
    let text = |stream: &str| -> String {
        events
            .iter()
            .filter(|e| e["method"] == "process/output" && e["params"]["stream"] == stream)
            .map(|e| {
                String::from_utf8(b64::decode(e["params"]["chunk"].as_str().unwrap()).unwrap())
                    .unwrap()
            })
            .collect()
    };
    assert_eq!(text("stdout"), "out\n");
    assert_eq!(text("stderr"), "err\n");
    let exited = events
        .iter()
        .find(|e| e["method"] == "process/exited")
        .unwrap();
    assert_eq!(exited["params"]["exitCode"], 3);
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["params"]["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let read = c.call(
        "process/read",
        json!({"processId": "p1", "afterSeq": 0, "maxBytes": null, "waitMs": 0}),
    );
    assert_eq!(read["result"]["exited"], true, "{read}");
    assert_eq!(read["result"]["closed"], true, "{read}");
    assert_eq!(read["result"]["exitCode"], 3, "{read}");
    assert_eq!(
        c.call(
            "process/start",
            json!({"processId": "p1", "argv": ["true"]})
        )["error"]["code"],
        -32600
    );
    assert_eq!(
        c.call("process/terminate", json!({"processId": "p1"}))["result"]["running"],
        false
    );

    // stdin, and a tty.
    start(&mut c, "p2", "read x; echo got:$x", false);
    let w = c.call(
        "process/write",
        json!({"processId": "p2", "chunk": b64::encode(b"hi\n"), "writeId": "1"}),
    );
    assert_eq!(w["result"]["status"], "accepted");
    let ev = c.until_closed("p2");
    assert!(
        ev.iter()
            .any(|e| e["params"]["chunk"] == b64::encode(b"got:hi\n")),
        "{ev:?}"
    );
    start(&mut c, "p3", "read x; echo got:$x", true);
    c.call(
        "process/write",
        json!({"processId": "p3", "chunk": b64::encode(b"yo\n"), "writeId": "1"}),
    );
    let ev = c.until_closed("p3");
    let out: String = ev
        .iter()
        .filter(|e| e["params"]["stream"] == "pty")
        .map(|e| {
            String::from_utf8(b64::decode(e["params"]["chunk"].as_str().unwrap()).unwrap()).unwrap()
        })
        .collect();
    assert!(out.contains("got:yo"), "{out:?}");

    // terminate kills.
    start(&mut c, "p4", "sleep 30", false);
    assert_eq!(
        c.call("process/terminate", json!({"processId": "p4"}))["result"]["running"],
        true
    );
    let ev = c.until_closed("p4");
    let code =
        ev.iter().find(|e| e["method"] == "process/exited").unwrap()["params"]["exitCode"].clone();
    assert_eq!(code, 137);

    // Closing the connection kills what still runs.
    let pidfile = root.join("pid");
    start(
        &mut c,
        "p5",
        &format!("echo $$ > {}; exec sleep 60", pidfile.display()),
        false,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    c.close();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "still running: {stat}"
    );
}
