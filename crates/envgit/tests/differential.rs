//! Differential suite: a corpus of hostile HTTP/1 requests, and legitimate ones that look odd,
//! sent to four HTTP servers whose parsers are independent of the gate's (Node's `http` with
//! llhttp, Python's `http.server`, gunicorn's WSGI parser, and nginx in front of
//! `git http-backend` through fcgiwrap), each logging what it really received.
//!
//! The same corpus runs twice. Directly (from the test process, no envgit) it proves it has
//! teeth: every hostile case marked so is read by at least one server differently from what
//! its first request line and headers say (a smuggled second request, another body, a refusal),
//! and a pipelined push really changes the bare repository nginx serves. Through the gate (from
//! inside `envgit run`, over the loopback forward of `envgit init --allow 127.0.0.1:PORT`):
//! every request any server received is one the gate judged and recorded as allowed, no
//! `git-receive-pack` reached any server and the bare repository's refs did not move, and every
//! legitimate case arrived intact at every server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::Env;
use support::upstreams::{spawn_server, support_script};

/// Waits for `cond`, polling, up to `limit`; panics with `what` after that.
fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One server: its processes, its port, the JSON-lines file it appends every request to.
struct Server {
    name: &'static str,
    children: Vec<Child>,
    port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Server {
    /// A server script that prints its port on its first line.
    fn script(name: &'static str, mut cmd: Command, log: PathBuf) -> Server {
        cmd.arg(&log);
        let (child, port) = spawn_server(name, cmd);
        Server {
            name,
            children: vec![child],
            port,
            log,
        }
    }

    /// nginx (one process, no daemon) with an access log of what it read, `/git/…` handed to
    /// `git http-backend` through fcgiwrap for the repositories under `root` (pushes accepted),
    /// everything else answered by the echo module after reading the body.
    fn nginx(dir: &Path, root: &Path) -> Server {
        let sock = dir.join("fcgi.sock");
        let fcgi = Command::new("/usr/sbin/fcgiwrap")
            .arg("-s")
            .arg(format!("unix:{}", sock.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fcgiwrap (scripts/install-deps installs it)");
        wait_for("fcgiwrap's socket", Duration::from_secs(30), || {
            sock.exists()
        });
        // nginx cannot report a port it chose: take a free one and hand it over.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join("nginx.log");
        let d = dir.display();
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log info;
load_module /usr/lib/nginx/modules/ngx_http_echo_module.so;
events {{ worker_connections 256; }}
http {{
  client_body_temp_path {d}/body;
  fastcgi_temp_path {d}/fastcgi;
  proxy_temp_path {d}/proxy;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  client_body_buffer_size 4m;
  client_max_body_size 4m;
  log_format diff '{{"server":"nginx","method":"$request_method","target":"$request_uri","path":"$uri","host":"$http_host","content_length":"$content_length","status":"$status","body":"$request_body"}}';
  access_log {log} diff;
  server {{
    listen 127.0.0.1:{port};
    location ~ ^/git(/.*)$ {{
      # The client half-closes once it has sent a case; nginx takes that for an abort and
      # drops a push git-http-backend has not finished (seen on a loaded CI machine): the
      # pipelined push's effect must not depend on that race.
      fastcgi_ignore_client_abort on;
      fastcgi_pass unix:{sock};
      fastcgi_param SCRIPT_FILENAME /usr/lib/git-core/git-http-backend;
      fastcgi_param GIT_PROJECT_ROOT {root};
      fastcgi_param GIT_HTTP_EXPORT_ALL "";
      fastcgi_param PATH_INFO $1;
      fastcgi_param REQUEST_METHOD $request_method;
      fastcgi_param QUERY_STRING $query_string;
      fastcgi_param CONTENT_TYPE $content_type;
      fastcgi_param CONTENT_LENGTH $content_length;
      fastcgi_param REMOTE_USER envgit;
      fastcgi_param REMOTE_ADDR $remote_addr;
      fastcgi_param SERVER_PROTOCOL $server_protocol;
      fastcgi_param GATEWAY_INTERFACE CGI/1.1;
    }}
    location / {{
      echo_read_request_body;
      echo ok;
    }}
  }}
}}
"#,
            log = log.display(),
            sock = sock.display(),
            root = root.display(),
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let nginx = Command::new("/usr/sbin/nginx")
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (scripts/install-deps installs it)");
        let mut server = Server {
            name: "nginx",
            children: vec![fcgi, nginx],
            port,
            log,
        };
        wait_for("nginx to listen", Duration::from_secs(30), || {
            if let Ok(Some(status)) = server.children[1].try_wait() {
                let err = std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default();
                panic!("nginx exited ({status}): {err}");
            }
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        server
    }

    /// Every request the server logged, in order.
    fn seen(&self) -> Vec<Value> {
        let bytes = std::fs::read(&self.log).unwrap_or_default();
        // nginx's default log escaping writes `"`, `\\` and every byte outside printable
        // ASCII as `\xNN`: as JSON `\u00NN`, the same latin-1 reading the other servers log.
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| {
                if self.name == "nginx" {
                    l.replace("\\x", "\\u00")
                } else {
                    l.to_owned()
                }
            })
            .map(|l| {
                let mut v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}"));
                // …and an empty variable as `-` (no body in the corpus is `-`).
                if self.name == "nginx" && v["body"] == "-" {
                    v["body"] = "".into();
                }
                v
            })
            .collect()
    }

    /// Sends one request straight to the server and waits until it is in the log: everything
    /// the server read before it has been logged too.
    fn settle(&self, mark: &str) {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET /settle/{mark} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        let want = format!("/settle/{mark}");
        wait_for(
            &format!("{} to log {want}", self.name),
            Duration::from_secs(30),
            || self.seen().iter().any(|r| r["target"] == want.as_str()),
        );
    }
}

/// What a server made of one case: the requests it handed to its application (method, target,
/// body), or for nginx also the ones it refused (`REFUSED <status>` in place of the method).
type Reading = Vec<(String, String, String)>;

fn reading_of(entries: &[&Value], routed: bool) -> Reading {
    entries
        .iter()
        .map(|r| {
            let mut target = r["target"].as_str().unwrap_or_default().to_owned();
            // Where the server says what path it routes on (nginx's `$uri`, WSGI's
            // `PATH_INFO`), that is its reading of the target too.
            if routed
                && let Some(path) = r["path"].as_str()
                && Some(path) != target.split('?').next()
            {
                target = format!("{target} (routed as {path})");
            }
            let mut method = r["method"].as_str().unwrap_or_default().to_owned();
            if let Some(status) = r["status"].as_str()
                && matches!(
                    status,
                    "400" | "408" | "411" | "413" | "414" | "431" | "494" | "501" | "505"
                )
            {
                method = format!("REFUSED {status}");
            }
            (
                method,
                target,
                r["body"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// One case: what is sent (segments, each followed by waiting for that many status lines),
/// and what it says it is.
struct Case {
    id: usize,
    name: &'static str,
    segments: Vec<(Vec<u8>, usize)>,
    /// The requests its request lines and headers say it is.
    face: Reading,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Hostile; sent directly, at least one server reads it differently from its face.
    Teeth,
    /// Hostile; no server here reads it differently (said on the case): a regression row.
    Regression,
    /// Hostile; its teeth are its effect: sent directly, it changes the bare repository.
    Effect,
    /// Legitimate: through the gate it must arrive as its face at every server.
    Legit,
}

/// The case's token: every request a case sends has it in its target.
fn token(id: usize) -> String {
    format!("k{id:02}/")
}

fn reading_for(entries: &[Value], id: usize, routed: bool) -> Reading {
    let t = token(id);
    let mine: Vec<&Value> = entries
        .iter()
        .filter(|r| r["target"].as_str().is_some_and(|x| x.contains(&t)))
        .collect();
    reading_of(&mine, routed)
}

fn face1(method: &str, target: &str, body: &[u8]) -> Reading {
    vec![(method.to_owned(), target.to_owned(), latin1(body))]
}

/// Bytes as the servers log them (latin-1: one char per byte).
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// An HTTP/1.1 request: request line, `Host`, the given header lines, then the body bytes.
fn raw(method: &str, target: &[u8], host: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} ").into_bytes();
    out.extend_from_slice(target);
    out.extend_from_slice(format!(" HTTP/1.1\r\nHost: {host}\r\n").as_bytes());
    for h in headers {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The corpus, for one server's `host` (`127.0.0.1:PORT`); `push(target)` is a whole
/// `git-receive-pack` request that creates a ref in the bare repository.
fn corpus(host: &str, push: &dyn Fn(&str) -> Vec<u8>) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add =
        |name: &'static str, kind: Kind, segments: Vec<(Vec<u8>, usize)>, face: Reading| {
            let id = cases.len() + 1;
            cases.push(Case {
                id,
                name,
                segments,
                face,
                kind,
            });
        };
    // Every case is built from its id: `t(n)` is a target of case n.
    let t = |n: usize, rest: &str| format!("/{}{rest}", token(n));
    let inner = |n: usize| push(&format!("/git/app.git/git-receive-pack?{}", token(n)));
    let one = |bytes: Vec<u8>| vec![(bytes, 0)];
    let hdr = |s: String| s;
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };

    // --- `Connection` naming framing headers: the body, a whole push, must not become a
    // request of its own. These attack an intermediary that strips what `Connection` names
    // (it would forward the body as a request of its own, or a request without `Host`); no
    // origin server here removes anything `Connection` names, so none reads them differently
    // directly: regression rows (the gate refuses the first and third with 400, and forwards
    // the second, hop-by-hop `Transfer-Encoding` named, as one request with its body).
    let i = next();
    let body = inner(i);
    let cl = hdr(format!("Content-Length: {}", body.len()));
    add(
        "Connection: Content-Length",
        Kind::Regression,
        one(raw(
            "GET",
            t(i, "").as_bytes(),
            host,
            &["Connection: Content-Length", &cl],
            &body,
        )),
        face1("GET", &t(i, ""), &body),
    );
    let i = next();
    let body = inner(i);
    let chunked = cat(&[
        format!("{:x}\r\n", body.len()).as_bytes(),
        &body,
        b"\r\n0\r\n\r\n",
    ]);
    add(
        "Connection: Transfer-Encoding",
        Kind::Regression,
        one(raw(
            "POST",
            t(i, "").as_bytes(),
            host,
            &[
                "Connection: Transfer-Encoding",
                "Transfer-Encoding: chunked",
            ],
            &chunked,
        )),
        face1("POST", &t(i, ""), &body),
    );
    let i = next();
    add(
        "Connection: Host",
        Kind::Regression,
        one(raw(
            "GET",
            t(i, "").as_bytes(),
            host,
            &["Connection: Host"],
            b"",
        )),
        face1("GET", &t(i, ""), b""),
    );

    // --- CL.TE and TE.CL: one length each way; the other reading finds the push as a
    // second request.
    let i = next();
    let body = cat(&[b"0\r\n\r\n", &inner(i)]);
    let cl = hdr(format!("Content-Length: {}", body.len()));
    add(
        "CL.TE",
        Kind::Teeth,
        one(raw(
            "POST",
            t(i, "").as_bytes(),
            host,
            &[&cl, "Transfer-Encoding: chunked"],
            &body,
        )),
        face1("POST", &t(i, ""), &body),
    );
    let i = next();
    let push_i = inner(i);
    let size = format!("{:x}\r\n", push_i.len());
    let body = cat(&[size.as_bytes(), &push_i, b"\r\n0\r\n\r\n"]);
    let cl = hdr(format!("Content-Length: {}", size.len()));
    add(
        "TE.CL",
        Kind::Teeth,
        one(raw(
            "POST",
            t(i, "").as_bytes(),
            host,
            &["Transfer-Encoding: chunked", &cl],
            &body,
        )),
        face1("POST", &t(i, ""), &push_i),
    );

    // --- TE.TE: `Transfer-Encoding` spelled so some read it as chunked and some do not.
    // Each has a Content-Length covering everything; a chunked reader finds an empty body
    // and then the push.
    for (name, te) in [
        (
            "TE duplicated: chunked + identity",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        ),
        (
            "TE duplicated: chunked twice",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
        ),
        (
            "TE: identity, chunked",
            "Transfer-Encoding: identity, chunked",
        ),
        ("TE: xchunked", "Transfer-Encoding: xchunked"),
        ("TE: CHUNKED", "Transfer-Encoding: CHUNKED"),
        ("TE:\\tchunked", "Transfer-Encoding:\tchunked"),
        ("TE: chunked\\t", "Transfer-Encoding: chunked\t"),
        ("TE:\\x0bchunked", "Transfer-Encoding:\x0bchunked"),
        ("TE: \"chunked\"", "Transfer-Encoding: \"chunked\""),
        ("TE space before colon", "Transfer-Encoding : chunked"),
        ("TE obs-fold", "Transfer-Encoding:\r\n chunked"),
        (
            "X-Foo then obs-fold TE",
            "X-Foo: a\r\n Transfer-Encoding: chunked",
        ),
        (
            "TE: chunked, chunked",
            "Transfer-Encoding: chunked, chunked",
        ),
    ] {
        let i = next();
        let body = cat(&[b"0\r\n\r\n", &inner(i)]);
        let cl = hdr(format!("Content-Length: {}", body.len()));
        add(
            name,
            Kind::Teeth,
            one(raw("POST", t(i, "").as_bytes(), host, &[&cl, te], &body)),
            face1("POST", &t(i, ""), &body),
        );
    }

    // --- obs-fold on an ordinary header.
    let i = next();
    add(
        "obs-fold continuation line",
        Kind::Teeth,
        one(raw(
            "GET",
            t(i, "").as_bytes(),
            host,
            &["X-Long: a", "\tb"],
            b"",
        )),
        face1("GET", &t(i, ""), b""),
    );

    // --- Duplicate Host, duplicate or odd Content-Length.
    let i = next();
    add(
        "Host twice, the second elsewhere",
        Kind::Teeth,
        one(raw(
            "GET",
            t(i, "").as_bytes(),
            host,
            &["Host: evil.example"],
            b"",
        )),
        face1("GET", &t(i, ""), b""),
    );
    for (name, cls) in [
        (
            "Content-Length twice, different",
            &["Content-Length: 5", "Content-Length: 50"][..],
        ),
        (
            "Content-Length twice, equal",
            &["Content-Length: 50", "Content-Length: 50"][..],
        ),
        ("Content-Length: 50, 50", &["Content-Length: 50, 50"][..]),
        ("Content-Length: +50", &["Content-Length: +50"][..]),
        ("Content-Length: 0x32", &["Content-Length: 0x32"][..]),
        ("Content-Length: 5 0", &["Content-Length: 5 0"][..]),
    ] {
        let i = next();
        // 5 bytes, then a push whose head makes up the rest of a 50-byte reading.
        let body = cat(&[b"hello", &inner(i)]);
        add(
            name,
            Kind::Teeth,
            one(raw("POST", t(i, "").as_bytes(), host, cls, &body)),
            face1("POST", &t(i, ""), &body),
        );
    }
    let i = next();
    let body = inner(i);
    let cl = hdr(format!("Content-Length: {}", body.len()));
    add(
        "GET with a body",
        // Every server here reads the body of a GET by its Content-Length.
        Kind::Regression,
        one(raw("GET", t(i, "").as_bytes(), host, &[&cl], &body)),
        face1("GET", &t(i, ""), &body),
    );

    // --- Pipelining: a harmless request and a push in one write. Every server reads both,
    // as written; the teeth are that the push changes the repository when sent directly.
    let i = next();
    let get = raw("GET", t(i, "").as_bytes(), host, &[], b"");
    let p = inner(i);
    add(
        "pipelined push",
        Kind::Effect,
        one(cat(&[&get, &p])),
        vec![
            face1("GET", &t(i, ""), b"").remove(0),
            (
                "POST".into(),
                format!("/git/app.git/git-receive-pack?{}", token(i)),
                latin1(&push_body_of(&p)),
            ),
        ],
    );

    // --- Chunk sizes a lenient reader takes. The face is one 5-byte chunk, `hello`.
    for (name, size) in [
        ("chunk size 0x5", "0x5"),
        ("chunk size +5", "+5"),
        ("chunk size ' 5'", " 5"),
        ("chunk size '5 ;ext'", "5 ;ext"),
        ("chunk size 5_0", "5_0"),
        ("chunk size -5", "-5"),
        (
            "chunk size 10000000000000005 (overflows to 5)",
            "10000000000000005",
        ),
    ] {
        let i = next();
        let body = cat(&[size.as_bytes(), b"\r\nhello\r\n0\r\n\r\n"]);
        add(
            name,
            Kind::Teeth,
            one(raw(
                "POST",
                t(i, "").as_bytes(),
                host,
                &["Transfer-Encoding: chunked"],
                &body,
            )),
            face1("POST", &t(i, ""), b"hello"),
        );
    }
    let i = next();
    let body = b"3\r\nhello\r\n0\r\n\r\n";
    add(
        "chunk longer than its size",
        Kind::Teeth,
        one(raw(
            "POST",
            t(i, "").as_bytes(),
            host,
            &["Transfer-Encoding: chunked"],
            body,
        )),
        face1("POST", &t(i, ""), b"hello"),
    );
    let i = next();
    let body = b"5\nhello\n0\n\n";
    add(
        "chunked with bare LF",
        Kind::Teeth,
        one(raw(
            "POST",
            t(i, "").as_bytes(),
            host,
            &["Transfer-Encoding: chunked"],
            body,
        )),
        face1("POST", &t(i, ""), b"hello"),
    );

    // --- Bare LF line ends in the head.
    let i = next();
    add(
        "bare LF head",
        Kind::Teeth,
        one(format!("GET {} HTTP/1.1\nHost: {host}\n\n", t(i, "")).into_bytes()),
        face1("GET", &t(i, ""), b""),
    );
    let i = next();
    add(
        "bare CR in a header",
        Kind::Teeth,
        one(format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nX-A: a\rX-B: b\r\n\r\n",
            t(i, "")
        )
        .into_bytes()),
        face1("GET", &t(i, ""), b""),
    );

    // --- Targets of every character class.
    for (name, rest, kind) in [
        ("raw # in the target", &b"a#frag"[..], Kind::Teeth),
        // No server here reads `\` as `/` (IIS and some Windows stacks do): a regression row.
        ("backslash", b"a\\..\\b", Kind::Regression),
        ("%00", b"a%00b", Kind::Teeth),
        ("non-ASCII bytes", b"caf\xc3\xa9", Kind::Teeth),
        ("a space", b"a b", Kind::Teeth),
        ("a tab", b"a\tb", Kind::Teeth),
        ("//", b"a//b", Kind::Teeth),
        ("/./", b"a/./b", Kind::Teeth),
        ("/../", b"a/../b", Kind::Teeth),
        ("%2e%2e", b"a/%2e%2e/b", Kind::Teeth),
        // No server here strips path parameters (servlet containers do): a regression row.
        (";params", b"a;jsessionid=1/b", Kind::Regression),
    ] {
        let i = next();
        let target = cat(&[t(i, "").as_bytes(), rest]);
        let text = latin1(&target);
        add(
            name,
            kind,
            one(raw("GET", &target, host, &[], b"")),
            face1("GET", &text, b""),
        );
    }
    let i = next();
    let target = format!("http://evil.example{}", t(i, ""));
    add(
        "absolute form naming another host",
        Kind::Teeth,
        one(raw("GET", target.as_bytes(), host, &[], b"")),
        face1("GET", &target, b""),
    );

    // --- Request lines.
    let i = next();
    add(
        "two spaces after the method",
        Kind::Teeth,
        one(format!("GET  {} HTTP/1.1\r\nHost: {host}\r\n\r\n", t(i, "")).into_bytes()),
        face1("GET", &t(i, ""), b""),
    );
    let i = next();
    add(
        "HTTP/1.0 with chunked",
        Kind::Teeth,
        one(format!(
            "POST {} HTTP/1.0\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            t(i, "")
        )
        .into_bytes()),
        face1("POST", &t(i, ""), b"hello"),
    );

    // --- Method overrides: none of these servers honours them (no framework in front), so
    // none reads them differently here; regression rows for the gate's reading as DELETE.
    for header in [
        "X-HTTP-Method-Override: DELETE",
        "X-HTTP-Method: PUT",
        "X-Method-Override: PATCH",
    ] {
        let i = next();
        add(
            "method override",
            Kind::Regression,
            one(raw(
                "POST",
                t(i, "").as_bytes(),
                host,
                &[header, "Content-Length: 2"],
                b"{}",
            )),
            face1("POST", &t(i, ""), b"{}"),
        );
    }

    // --- Legitimate requests that look odd: must arrive intact through the gate.
    let i = next();
    let target = t(i, "@scope%2fname");
    add(
        "npm scoped package",
        Kind::Legit,
        one(raw("GET", target.as_bytes(), host, &[], b"")),
        face1("GET", &target, b""),
    );
    let i = next();
    let target = t(
        i,
        "api/v4/projects/group%2Fproject/repository/files/a%2Fb.txt?ref=main",
    );
    add(
        "GitLab %2F",
        Kind::Legit,
        one(raw("GET", target.as_bytes(), host, &[], b"")),
        face1("GET", &target, b""),
    );
    let i = next();
    let target = t(i, "bucket//key//with//slashes.txt");
    add(
        "S3 // key",
        Kind::Legit,
        one(raw(
            "PUT",
            target.as_bytes(),
            host,
            &["Content-Length: 4"],
            b"data",
        )),
        face1("PUT", &target, b"data"),
    );
    let i = next();
    let target = t(i, "upload");
    add(
        "chunked upload",
        Kind::Legit,
        one(raw(
            "POST",
            target.as_bytes(),
            host,
            &[
                "Transfer-Encoding: chunked",
                "Content-Type: application/octet-stream",
            ],
            b"3\r\nabc\r\n10\r\n0123456789abcdef\r\n1;name=value\r\nz\r\n0\r\n\r\n",
        )),
        face1("POST", &target, b"abc0123456789abcdefz"),
    );
    let i = next();
    let target = t(i, "graphql");
    let q = br#"{"query":"query { viewer { login } }"}"#;
    let (a, b) = q.split_at(11);
    let chunked = cat(&[
        format!("{:x}\r\n", a.len()).as_bytes(),
        a,
        format!("\r\n{:x}\r\n", b.len()).as_bytes(),
        b,
        b"\r\n0\r\n\r\n",
    ]);
    add(
        "small chunked GraphQL query",
        Kind::Legit,
        one(raw(
            "POST",
            target.as_bytes(),
            host,
            &[
                "Transfer-Encoding: chunked",
                "Content-Type: application/json",
            ],
            &chunked,
        )),
        face1("POST", &target, q),
    );
    let i = next();
    let target = t(i, "continue");
    add(
        "100-continue upload",
        Kind::Legit,
        vec![
            (
                raw(
                    "PUT",
                    target.as_bytes(),
                    host,
                    &["Expect: 100-continue", "Content-Length: 11"],
                    b"",
                ),
                1,
            ),
            (b"hello world".to_vec(), 0),
        ],
        face1("PUT", &target, b"hello world"),
    );
    let i = next();
    let (a, b, c) = (t(i, "1"), t(i, "2"), t(i, "3"));
    add(
        "keep-alive, 3 requests",
        Kind::Legit,
        vec![
            (raw("GET", a.as_bytes(), host, &[], b""), 1),
            (
                raw("POST", b.as_bytes(), host, &["Content-Length: 3"], b"two"),
                2,
            ),
            (raw("GET", c.as_bytes(), host, &[], b""), 0),
        ],
        vec![
            face1("GET", &a, b"").remove(0),
            face1("POST", &b, b"two").remove(0),
            face1("GET", &c, b"").remove(0),
        ],
    );
    let i = next();
    let (a, b) = (t(i, "a"), t(i, "b"));
    add(
        "pipelined GETs",
        Kind::Legit,
        one(cat(&[
            &raw("GET", a.as_bytes(), host, &[], b""),
            &raw("GET", b.as_bytes(), host, &[], b""),
        ])),
        vec![
            face1("GET", &a, b"").remove(0),
            face1("GET", &b, b"").remove(0),
        ],
    );
    cases
}

/// The body of a whole request (what follows its blank line).
fn push_body_of(request: &[u8]) -> Vec<u8> {
    let end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    request[end + 4..].to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

struct World {
    env: Env,
    servers: Vec<Server>,
    bare: PathBuf,
    /// The body of a push that creates `refs/heads/smuggled` (an existing commit, empty pack).
    push_body: Vec<u8>,
}

fn git_out(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn refs(bare: &Path) -> String {
    String::from_utf8(git_out(bare, &["for-each-ref"])).unwrap()
}

fn world() -> World {
    let pydeps = support::installed_by("install-deps-diff", "ENVGIT_DIFF_PYDEPS", "diff-py");
    let env = Env::new();
    let (remotes, bare) = env.bare_remote();
    env.clone_project_from(&format!("file://{}", bare.display()));
    let head = support::head_of(&bare);
    assert_eq!(head.len(), 40, "{head}");
    let line = format!(
        "{} {head} refs/heads/smuggled\0report-status\n",
        "0".repeat(40)
    );
    let mut push_body = format!("{:04x}{line}0000", line.len() + 4).into_bytes();
    push_body.extend_from_slice(&git_out(&bare, &["pack-objects", "--stdout", "-q"]));

    let tmp = env.tmp.path();
    let nginx_dir = tmp.join("nginx");
    std::fs::create_dir_all(&nginx_dir).unwrap();
    let mut gunicorn = Command::new("python3");
    gunicorn
        .env("PYTHONPATH", &pydeps)
        .arg(support_script("logging_wsgi.py"));
    let mut python = Command::new("python3");
    python.arg(support_script("logging_http.py"));
    let mut node = Command::new("node");
    node.arg(support_script("logging_http.js"));
    let servers = vec![
        Server::script("python", python, tmp.join("python.log")),
        Server::script("node", node, tmp.join("node.log")),
        Server::script("gunicorn", gunicorn, tmp.join("gunicorn.log")),
        Server::nginx(&nginx_dir, &remotes),
    ];
    let mut args = vec!["init".to_owned()];
    for s in &servers {
        args.push("--allow".into());
        args.push(format!("127.0.0.1:{}", s.port));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.envgit(&args).ok();
    std::fs::copy(support_script("diff_client.py"), env.path("diff_client.py")).unwrap();
    World {
        env,
        servers,
        bare,
        push_body,
    }
}

impl World {
    fn push(&self, target: &str, host: &str) -> Vec<u8> {
        raw(
            "POST",
            target.as_bytes(),
            host,
            &[
                "Content-Type: application/x-git-receive-pack-request",
                &format!("Content-Length: {}", self.push_body.len()),
            ],
            &self.push_body,
        )
    }

    /// Every server's corpus.
    fn corpora(&self) -> Vec<Vec<Case>> {
        self.servers
            .iter()
            .map(|s| {
                let host = format!("127.0.0.1:{}", s.port);
                corpus(&host, &|target| self.push(target, &host))
            })
            .collect()
    }

    /// Writes the batch for `diff_client.py` (every case to every server).
    fn batch(&self, corpora: &[Vec<Case>], file: &Path) {
        let mut list = Vec::new();
        for (s, cases) in self.servers.iter().zip(corpora) {
            for c in cases {
                let segments: Vec<Value> =
                    c.segments.iter().map(|(b, w)| json!([hex(b), w])).collect();
                list.push(json!({"port": s.port, "segments": segments}));
            }
        }
        std::fs::write(file, serde_json::to_string(&list).unwrap()).unwrap();
    }

    /// Each server's log so far.
    fn logs(&self) -> Vec<Vec<Value>> {
        self.servers.iter().map(Server::seen).collect()
    }

    /// Waits until each server has logged all it read, then returns what was logged after
    /// `before` (excluding the settle requests).
    fn logged_since(&self, before: &[Vec<Value>], mark: &str) -> Vec<Vec<Value>> {
        for s in &self.servers {
            s.settle(mark);
        }
        self.logs()
            .into_iter()
            .zip(before)
            .map(|(now, was)| {
                now.into_iter()
                    .skip(was.len())
                    .filter(|r| {
                        !r["target"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("/settle/"))
                    })
                    .collect()
            })
            .collect()
    }
}

/// The readings of every case by every server, as a table for failure messages.
fn table(w: &World, corpora: &[Vec<Case>], logged: &[Vec<Value>], replies: &[String]) -> String {
    let mut out = String::new();
    let per = corpora[0].len();
    for (ci, case) in corpora[0].iter().enumerate() {
        out.push_str(&format!(
            "#{:02} {} ({:?})\n  face: {:?}\n",
            case.id, case.name, case.kind, case.face
        ));
        for (si, s) in w.servers.iter().enumerate() {
            let r = reading_for(&logged[si], corpora[si][ci].id, true);
            let status: Vec<&str> = replies[si * per + ci]
                .lines()
                .filter(|l| l.starts_with("HTTP/1."))
                .collect();
            out.push_str(&format!("  {:8}: {:?} answered {status:?}\n", s.name, r));
        }
    }
    out
}

#[test]
fn hostile_requests_are_read_one_way_through_the_gate_and_legitimate_ones_arrive_intact() {
    let w = world();
    let corpora = w.corpora();
    let refs_before = refs(&w.bare);

    // 1. Through the gate, from inside the sandbox.
    w.batch(&corpora, &w.env.path("cases.json"));
    let before = w.logs();
    let run = w
        .env
        .envgit(&["run", "python3", "diff_client.py", "cases.json"]);
    assert_eq!(run.code, 0, "envgit run: {} {}", run.stdout, run.stderr);
    let replies: Vec<String> = serde_json::from_str(run.stdout.trim()).unwrap();
    let gated = w.logged_since(&before, "gate");
    let gated_table = table(&w, &corpora, &gated, &replies);
    eprintln!("through the gate:\n{gated_table}");

    // No push reached any server, and the repository did not move.
    for (s, entries) in w.servers.iter().zip(&gated) {
        for r in entries {
            assert!(
                !r["target"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("receive-pack"),
                "{} received a push through the gate: {r}",
                s.name
            );
        }
    }
    assert_eq!(refs(&w.bare), refs_before, "a push got through the gate");

    // One view: every server that received a case through the gate read the same requests
    // (the gate's rebuilt form), whatever the hostile bytes were.
    for (ci, case) in corpora[0].iter().enumerate() {
        let readings: Vec<Reading> = (0..w.servers.len())
            .map(|si| {
                reading_for(&gated[si], corpora[si][ci].id, false)
                    .into_iter()
                    .map(|(m, t, b)| {
                        (
                            m,
                            t,
                            b.replace(&format!("127.0.0.1:{}", w.servers[si].port), "HOST"),
                        )
                    })
                    .collect()
            })
            .collect();
        assert!(
            readings.windows(2).all(|p| p[0] == p[1]),
            "{}: the servers read it differently through the gate: {readings:?}",
            case.name
        );
    }

    // Every legitimate case arrived as it was sent, at every server.
    let mut k = 0;
    for (si, s) in w.servers.iter().enumerate() {
        for case in &corpora[si] {
            let reply = &replies[k];
            k += 1;
            if case.kind != Kind::Legit {
                continue;
            }
            let got = reading_for(&gated[si], case.id, false);
            assert_eq!(
                got, case.face,
                "{}: {} did not arrive intact through the gate; the client got {reply:?}",
                case.name, s.name
            );
            let ok = reply.matches(" 200 OK").count();
            assert_eq!(
                ok,
                case.face.len(),
                "{}: {} answered {reply:?}",
                case.name,
                s.name
            );
        }
    }

    // Every request any server received is one the gate judged and let through: same method
    // and path (the step's record has no query or body), no more of them than were judged,
    // and no body larger than the bytes the gate sent for it.
    let log = w.env.log_json();
    let mut judged: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for q in log
        .iter()
        .flat_map(|s| s["requests"].as_array().cloned().unwrap_or_default())
        .filter(|q| q["decision"] == "allowed" && q["method"] != "CONNECT")
    {
        judged
            .entry((
                q["method"].as_str().unwrap_or_default().to_owned(),
                q["path"].as_str().unwrap_or_default().to_owned(),
            ))
            .or_default()
            .push(q["bytes_out"].as_u64().unwrap_or(0));
    }
    assert!(
        !judged.is_empty(),
        "the gate recorded nothing allowed: {log:?}"
    );
    for (s, entries) in w.servers.iter().zip(&gated) {
        for r in entries {
            let method = r["method"].as_str().unwrap().to_owned();
            let target = r["target"].as_str().unwrap();
            // The gate records the target with its query, as the upstream received it.
            let path = target.to_owned();
            let body = r["body"].as_str().unwrap_or_default().len() as u64;
            let slot = judged.get_mut(&(method.clone(), path.clone()));
            let Some(sent) = slot.and_then(|v| v.pop()) else {
                panic!(
                    "{} received {method} {target}, which the gate never judged (or judged fewer times)\n{gated_table}",
                    s.name
                );
            };
            assert!(
                sent >= body,
                "{} received a {body}-byte body for {method} {target}; the gate sent {sent} bytes",
                s.name
            );
        }
    }

    // 2. Directly: the corpus has teeth.
    let before = w.logs();
    let direct_file = w.env.tmp.path().join("direct.json");
    w.batch(&corpora, &direct_file);
    let out = Command::new("python3")
        .arg(support_script("diff_client.py"))
        .arg(&direct_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let direct_replies: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    let direct = w.logged_since(&before, "direct");
    let direct_table = table(&w, &corpora, &direct, &direct_replies);
    eprintln!("directly:\n{direct_table}");
    let mut toothless = Vec::new();
    for (ci, case) in corpora[0].iter().enumerate() {
        let differs = (0..w.servers.len())
            .any(|si| reading_for(&direct[si], corpora[si][ci].id, true) != corpora[si][ci].face);
        match case.kind {
            Kind::Teeth if !differs => toothless.push(case.name),
            Kind::Regression if differs => {
                toothless.push("(a regression row that does have teeth: mark it Teeth)");
                toothless.push(case.name);
            }
            _ => {}
        }
    }
    assert!(
        toothless.is_empty(),
        "cases without teeth: {toothless:?}\n{direct_table}"
    );
    // The pipelined push, sent directly, does change the repository nginx serves.
    assert!(
        refs(&w.bare).contains("refs/heads/smuggled"),
        "a direct push did not change the repository: the effect check has no teeth\n{direct_table}"
    );
}
