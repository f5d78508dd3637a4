//! A git smart-HTTP server on 127.0.0.1 for the demo: git's own `http-backend` (CGI) behind a
//! small HTTP/1.1 server. It records what it saw, so the demo can show what reached the remote.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

/// One request the remote saw: `GET /remote.git/info/refs?service=git-receive-pack`.
pub type Seen = Arc<Mutex<Vec<String>>>;

pub struct GitServer {
    pub port: u16,
    pub seen: Seen,
}

impl GitServer {
    /// Serve the repositories under `root` until the process exits.
    pub fn start(root: &Path) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let seen: Seen = Arc::default();
        let (root, log) = (root.to_path_buf(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (root, log) = (root.clone(), log.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &root, &log);
                });
            }
        });
        Ok(Self { port, seen })
    }

    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn serve(stream: TcpStream, root: &PathBuf, seen: &Seen) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(&mut reader)?
    } else {
        let n: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut b = vec![0u8; n];
        reader.read_exact(&mut b)?;
        b
    };
    if method.is_empty() {
        return Ok(()); // a connection opened and closed without a request
    }
    if let Ok(mut s) = seen.lock() {
        s.push(format!("{method} {target}"));
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut child = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_HTTP_MAX_REQUEST_BUFFER", "100M")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "demo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&body)?;
    }
    let out = child.wait_with_output()?;
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, 2))
        });
    let (cgi_head, cgi_body) = match split {
        Some((i, n)) => (
            String::from_utf8_lossy(&out.stdout[..i]).into_owned(),
            &out.stdout[i + n..],
        ),
        None => (String::new(), &out.stdout[..]),
    };
    let mut status = "200 OK".to_string();
    let mut resp_headers = String::new();
    for h in cgi_head.lines() {
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_string(),
            Some(_) => {
                resp_headers.push_str(h.trim_end());
                resp_headers.push_str("\r\n");
            }
            None => {}
        }
    }
    let mut w = stream;
    write!(
        w,
        "HTTP/1.1 {status}\r\n{resp_headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        cgi_body.len()
    )?;
    w.write_all(cgi_body)?;
    w.flush()
}

fn read_chunked(r: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if size == 0 {
            let mut end = String::new();
            while r.read_line(&mut end)? > 0 && end != "\r\n" && end != "\n" {
                end.clear();
            }
            return Ok(out);
        }
        let start = out.len();
        out.resize(start + size, 0);
        r.read_exact(&mut out[start..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
}
