//! A downstream server's own network requests, carried from the `envgit mcp --downstream NAME`
//! process (which runs the server's sandbox and gate) to the `envgit mcp` that records the REPL
//! steps, so each request lands on a step (every request is recorded on its step).
//!
//! `envgit mcp` listens on a unix socket in a private runtime directory of its own (mode 0700;
//! the sandbox never sees the runtime directory) and passes its path with `--events`; the
//! downstream process connects before it starts the sandbox. One JSON line per message:
//!
//! - downstream → `envgit mcp`: `{"event": GateEvent}`, what the gate recorded, polled every
//!   [`POLL`] and sent as it comes; `{"flushed": N}` once everything the gate held when flush
//!   request `N` arrived has been sent; `{"sandbox": {"pid": PID, "homes": […]}}` once,
//!   when the server's sandbox runs.
//! - `envgit mcp` → downstream: `N`, a flush request.
//!
//! `envgit mcp` files everything received under the next step it commits. A cell that called a
//! downstream server first flushes that server (a round trip on the socket, well under a
//! millisecond, bounded by [`FLUSH_TIMEOUT`]): a request the server made for that call finished
//! before the call's answer came back, so it is on the call's step. Cells that called no server
//! never wait. What a server does on its own (outside its tool calls) arrives by the poll, so a
//! request finishing within a poll interval of a cell's end can land on the next step. So can
//! one the gate finishes after the server has its answer: the gate records an exchange when it
//! is done with it, and on a `Connection: close` exchange that is when the upstream hangs up.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use envgit_gate::{EventList, EventTap, GateEvent};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::watch;

use super::error::FeedError;
use crate::supervisor::SandboxStarted;

/// How often the downstream process looks at its gate's events when nobody asks.
const POLL: Duration = Duration::from_millis(50);
/// A write to the other side that takes longer than this ends the feed (that side is stuck).
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a step waits for a downstream server's flush before it is committed without it
/// (what was not there yet goes on the next step).
const FLUSH_TIMEOUT: Duration = Duration::from_millis(250);
/// How long the downstream process has to connect after it was started.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `envgit mcp` waits, once a downstream server was closed, for the rest of its events.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// A longer line is not an event (it is dropped).
const MAX_LINE: u64 = 1 << 20;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Event(Box<GateEvent>),
    Flushed(u64),
    /// The first process of the server's sandbox and its homes, once it runs: `envgit mcp`
    /// adds mounts to it before a call (`envgit_sandbox::cover`).
    Sandbox(SandboxStarted),
}

// ----- the downstream process -----

/// Sends the gate's events to `envgit mcp` from a thread of the downstream process.
pub(crate) struct Forwarder {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Option<UnixStream>>,
}

impl Forwarder {
    /// Connects to `envgit mcp` at `path`; forwards once the gate's tap arrives on `taps`, and
    /// the sandbox's pid once it is in `sandbox`.
    pub fn start(
        path: &Path,
        taps: Receiver<EventTap>,
        sandbox: Arc<OnceLock<SandboxStarted>>,
    ) -> std::io::Result<Forwarder> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(POLL))?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("envgit-feed".into())
            .spawn(move || forward(stream, &taps, &sandbox, &flag))?;
        Ok(Forwarder { stop, thread })
    }

    /// The server exited: sends what the tap still holds, then `rest` (what the stopped gate
    /// returned). Returns the events that could not be delivered.
    pub fn finish(self, rest: Vec<GateEvent>) -> Vec<GateEvent> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.join() {
            Ok(Some(mut stream)) => {
                let lines: Vec<Line> = rest
                    .iter()
                    .cloned()
                    .map(|e| Line::Event(Box::new(e)))
                    .collect();
                if send(&mut stream, &lines).is_ok() {
                    Vec::new()
                } else {
                    rest
                }
            }
            _ => rest,
        }
    }
}

/// The forwarding loop: wait up to [`POLL`] for flush requests, send what the gate recorded
/// and the markers of the requests read. Returns the stream when stopped, `None` when the
/// other side went away.
fn forward(
    mut stream: UnixStream,
    taps: &Receiver<EventTap>,
    sandbox: &OnceLock<SandboxStarted>,
    stop: &AtomicBool,
) -> Option<UnixStream> {
    let mut tap: Option<EventTap> = None;
    let mut sandbox_said = false;
    let mut inbox: Vec<u8> = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        if tap.is_none() {
            tap = taps.try_recv().ok();
        }
        match stream.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => inbox.extend_from_slice(buf.get(..n).unwrap_or_default()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
        // Requests read now are answered after the take below: everything the gate recorded
        // before they arrived goes first.
        let mut flushed = None;
        while let Some(end) = inbox.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = inbox.drain(..=end).collect();
            if let Some(n) = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.trim().parse::<u64>().ok())
            {
                flushed = Some(flushed.map_or(n, |m: u64| m.max(n)));
            }
        }
        if inbox.len() > 64 {
            return None;
        }
        let mut lines: Vec<Line> = tap
            .as_ref()
            .map(EventTap::take)
            .unwrap_or_default()
            .into_iter()
            .map(|e| Line::Event(Box::new(e)))
            .collect();
        lines.extend(flushed.map(Line::Flushed));
        if !sandbox_said && let Some(started) = sandbox.get() {
            lines.push(Line::Sandbox(started.clone()));
            sandbox_said = true;
        }
        if send(&mut stream, &lines).is_err() {
            return None;
        }
        if stopping {
            return Some(stream);
        }
    }
}

fn send(stream: &mut UnixStream, lines: &[Line]) -> std::io::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut out = Vec::new();
    for l in lines {
        serde_json::to_writer(&mut out, l)?;
        out.push(b'\n');
    }
    stream.write_all(&out)
}

// ----- envgit mcp -----

/// The feeds of all downstream servers of one `envgit mcp`, and what they sent that no step
/// has taken yet.
pub(crate) struct Feeds {
    dir: Option<PathBuf>,
    pending: Arc<Mutex<EventList>>,
    opened: usize,
    sandboxes: Sandboxes,
}

/// The downstream servers' sandboxes as their processes said them: a pidfd of each one's first
/// process, and what its plan masked and where it looked for the secrets outside the project.
pub(crate) type Sandboxes = Arc<Mutex<Vec<(OwnedFd, SandboxStarted)>>>;

impl Feeds {
    pub fn new() -> Feeds {
        Feeds {
            dir: None,
            pending: Arc::default(),
            opened: 0,
            sandboxes: Arc::default(),
        }
    }

    /// A feed for one more downstream server: the socket path to pass with `--events`, and the
    /// feed (it accepts one connection, then reads it until it closes).
    pub fn open(&mut self) -> Result<(PathBuf, Feed), FeedError> {
        let dir = match &self.dir {
            Some(d) => d.clone(),
            None => {
                let uid = rustix::process::getuid().as_raw();
                let base = crate::runtime::runtime_dir(uid)
                    .map_err(|f| FeedError::RuntimeDir(f.message))?;
                let d = base.join(format!(
                    "mcp-{}-{}",
                    std::process::id(),
                    envgit_store::now_ms()
                ));
                crate::runtime::private_dir(&d).map_err(|f| FeedError::RuntimeDir(f.message))?;
                self.dir = Some(d.clone());
                d
            }
        };
        self.opened += 1;
        let path = dir.join(format!("{}.sock", self.opened));
        let listener = tokio::net::UnixListener::bind(&path).map_err(|source| FeedError::Bind {
            path: path.clone(),
            source,
        })?;
        let writer = Arc::new(tokio::sync::Mutex::new(None));
        let (tx, flushed) = watch::channel(0u64);
        let task = tokio::spawn(read_feed(
            listener,
            path.clone(),
            writer.clone(),
            tx,
            self.pending.clone(),
            self.sandboxes.clone(),
        ));
        let feed = Feed {
            writer,
            flushed,
            asked: AtomicU64::new(0),
            task: tokio::sync::Mutex::new(Some(task)),
        };
        Ok((path, feed))
    }

    /// The downstream servers' sandboxes said so far.
    pub fn sandboxes(&self) -> Sandboxes {
        self.sandboxes.clone()
    }

    /// Everything received and not yet taken, oldest first.
    pub fn take(&self) -> Vec<GateEvent> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Drop for Feeds {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Accepts the downstream process's connection and reads its lines until it closes.
async fn read_feed(
    listener: tokio::net::UnixListener,
    path: PathBuf,
    writer: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
    flushed: watch::Sender<u64>,
    pending: Arc<Mutex<EventList>>,
    sandboxes: Sandboxes,
) {
    let accepted = tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept()).await;
    // One connection only: nothing else can connect once the path is gone.
    let _ = std::fs::remove_file(&path);
    drop(listener);
    if let Ok(Ok((stream, _))) = accepted {
        let (read, write) = stream.into_split();
        *writer.lock().await = Some(write);
        let mut reader = BufReader::new(read);
        let mut line = String::new();
        loop {
            line.clear();
            match (&mut reader).take(MAX_LINE).read_line(&mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            match serde_json::from_str::<Line>(&line) {
                Ok(Line::Event(e)) => pending.lock().unwrap_or_else(|p| p.into_inner()).push(*e),
                Ok(Line::Flushed(n)) => {
                    flushed.send_modify(|v| *v = (*v).max(n));
                }
                // The downstream process waits for its sandbox, its child: the pid names
                // that process until then, and the pidfd for good.
                Ok(Line::Sandbox(started)) => {
                    let pid = rustix::process::Pid::from_raw(started.pid as i32);
                    let fd = pid.and_then(|pid| {
                        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                    });
                    if let Some(fd) = fd {
                        let mut said = sandboxes.lock().unwrap_or_else(|p| p.into_inner());
                        said.push((fd, started));
                    }
                }
                Err(_) => {}
            }
        }
        *writer.lock().await = None;
    }
    // Closed: nobody waits for a flush any more.
    flushed.send_replace(u64::MAX);
}

/// One downstream server's feed.
pub(crate) struct Feed {
    writer: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
    flushed: watch::Receiver<u64>,
    asked: AtomicU64,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Feed {
    /// Asks the downstream process to send what its gate holds now; returns the request's
    /// number for [`Feed::flushed`], or `None` when the feed is not (or no longer) connected.
    pub async fn ask(&self) -> Option<u64> {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let mut w = self.writer.lock().await;
        let writer = w.as_mut()?;
        let sent =
            tokio::time::timeout(WRITE_TIMEOUT, writer.write_all(format!("{n}\n").as_bytes()))
                .await;
        if !matches!(sent, Ok(Ok(()))) {
            *w = None;
            return None;
        }
        Some(n)
    }

    /// Waits until flush request `n` was answered (everything it covers received), at most
    /// until `deadline`.
    pub async fn flushed(&self, n: u64, deadline: tokio::time::Instant) {
        let mut rx = self.flushed.clone();
        let _ = tokio::time::timeout_at(deadline, rx.wait_for(|v| *v >= n)).await;
    }

    /// After the downstream server was closed: waits (bounded) until its process has sent
    /// everything and closed the feed.
    pub async fn drain(&self) {
        if let Some(task) = self.task.lock().await.take() {
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, task).await;
        }
    }
}

/// The deadline of the flushes before one step.
pub(crate) fn flush_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + FLUSH_TIMEOUT
}
