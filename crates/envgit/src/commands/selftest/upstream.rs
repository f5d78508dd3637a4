//! The loopback upstream `envgit selftest` aims at: it parses what arrives with a parser of
//! its own (httparse; bodies by `Content-Length` or chunked), answers each request `200`, and
//! keeps both the requests it read and the raw bytes, so the selftest can compare what
//! reached it with what the gate recorded as judged.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A request as the upstream read it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub target: String,
}

#[derive(Default)]
struct Log {
    seen: Vec<Seen>,
    raw: Vec<u8>,
}

pub struct Upstream {
    pub port: u16,
    log: Arc<Mutex<Log>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Upstream {
    pub fn start() -> std::io::Result<Upstream> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let log = Arc::new(Mutex::new(Log::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let log = Arc::clone(&log);
                            std::thread::spawn(move || serve(conn, &log));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        Ok(Upstream {
            port,
            log,
            stop,
            thread: Some(thread),
        })
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.log.lock().map(|l| l.seen.clone()).unwrap_or_default()
    }

    /// Did `needle` ever arrive, in any bytes of any connection?
    pub fn received(&self, needle: &str) -> bool {
        self.log.lock().is_ok_and(|l| {
            l.raw
                .windows(needle.len())
                .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
        })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(mut conn: TcpStream, log: &Mutex<Log>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        // Answer every whole request buffered so far.
        while let Some((seen, used)) = parse_one(&buf) {
            buf.drain(..used);
            if let Ok(mut l) = log.lock() {
                l.seen.push(seen);
            }
            let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
            if conn.write_all(reply).is_err() {
                return;
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if let Ok(mut l) = log.lock() {
                    l.raw.extend_from_slice(&chunk[..n]);
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// One whole request at the start of `buf`: what it was and how many bytes it took.
fn parse_one(buf: &[u8]) -> Option<(Seen, usize)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return None,
    };
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    let body_len = if header("transfer-encoding").is_some_and(|t| t.ends_with("chunked")) {
        chunked_len(&buf[head..])?
    } else {
        header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let end = head.checked_add(body_len)?;
    if buf.len() < end {
        return None;
    }
    Some((
        Seen {
            method: req.method.unwrap_or("?").to_owned(),
            target: req.path.unwrap_or("?").to_owned(),
        },
        end,
    ))
}

/// The length of a whole chunked body at the start of `b` (framing included).
fn chunked_len(b: &[u8]) -> Option<usize> {
    let mut at = 0usize;
    loop {
        let nl = b.get(at..)?.iter().position(|&c| c == b'\n')?;
        let line = std::str::from_utf8(&b[at..at + nl]).ok()?;
        let size = usize::from_str_radix(line.trim().split(';').next()?.trim(), 16).ok()?;
        at = at.checked_add(nl + 1)?;
        if size == 0 {
            // Trailers end with an empty line.
            loop {
                let nl = b.get(at..)?.iter().position(|&c| c == b'\n')?;
                let empty = b[at..at + nl].iter().all(|&c| c == b'\r');
                at += nl + 1;
                if empty {
                    return Some(at);
                }
            }
        }
        at = at.checked_add(size)?.checked_add(2)?;
        if at > b.len() {
            return None;
        }
    }
}
