//! `process/*`: each process is a command the host turns into one envgit step (`envgit run`
//! in the sandbox), with its output streamed back as `process/output` notifications.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use serde_json::{Value, json};

use crate::b64;
use crate::protocol::{
    self, ClosedNotification, Empty, ExitedNotification, OutputNotification, ProcessRef,
    ReadParams, ReadResult, SignalParams, StartParams, StartResult, TerminateResult, WriteParams,
    WriteResult, WriteStatus, notification, result,
};
use crate::rpc::{INTERNAL, INVALID_REQUEST, Out, RpcError, RpcResult};
use crate::{Host, paths};

/// Output kept for `process/read` per process; older chunks are dropped.
const KEEP_BYTES: usize = 4 << 20;

struct Chunk {
    seq: u64,
    stream: &'static str,
    data: Vec<u8>,
}

#[derive(Default)]
struct State {
    seq: u64,
    chunks: VecDeque<Chunk>,
    kept: usize,
    exit_code: Option<i32>,
    closed: bool,
}

struct Proc {
    id: String,
    pgid: Option<Pid>,
    state: Mutex<State>,
    cond: Condvar,
    stdin: Mutex<Option<std::fs::File>>,
}

impl Proc {
    fn exited(&self) -> bool {
        self.state
            .lock()
            .map(|s| s.exit_code.is_some())
            .unwrap_or(true)
    }

    /// Add an event under the state lock so that `seq` order is wire order.
    fn event(&self, out: &Out, f: impl FnOnce(&mut State, u64) -> (&'static str, Value)) {
        let Ok(mut s) = self.state.lock() else { return };
        s.seq += 1;
        let seq = s.seq;
        let (method, params) = f(&mut s, seq);
        out.notify(method, params);
        drop(s);
        self.cond.notify_all();
    }

    fn kill(&self, sig: Signal) {
        if let Some(pg) = self.pgid {
            let _ = rustix::process::kill_process_group(pg, sig);
        }
    }
}

#[derive(Default, Clone)]
pub struct Table {
    procs: Arc<Mutex<HashMap<String, Arc<Proc>>>>,
    /// How many processes (steps) have ended: what a step leaves can change what is secret
    /// (a hard link it made to `.env`).
    ended: Arc<std::sync::atomic::AtomicU64>,
}

impl Table {
    /// How many processes have ended so far.
    pub fn ended(&self) -> u64 {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }
}

fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    Ok((master, slave))
}

fn reader(proc_: Arc<Proc>, out: Out, mut src: std::fs::File, stream: &'static str) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A pty's master reads EIO once the last slave closed.
            Err(_) => break,
        };
        let data = buf[..n].to_vec();
        proc_.event(&out, |s, seq| {
            let params = notification(&OutputNotification {
                process_id: proc_.id.clone(),
                chunk: protocol::Chunk {
                    seq,
                    stream,
                    chunk: b64::encode(&data),
                },
            });
            s.kept += data.len();
            s.chunks.push_back(Chunk { seq, stream, data });
            while s.kept > KEEP_BYTES {
                match s.chunks.pop_front() {
                    Some(c) => s.kept -= c.data.len(),
                    None => break,
                }
            }
            ("process/output", params)
        });
    }
}

impl Table {
    pub fn start(&self, host: &dyn Host, p: StartParams, out: &Out) -> RpcResult {
        let id = p.process_id;
        let argv = p.argv;
        if argv.is_empty() {
            return Err(RpcError::params("argv must name a command"));
        }
        let cwd: PathBuf = match p.cwd.as_deref() {
            Some(c) => paths::parse(c)?,
            None => host.default_cwd(),
        };
        let env: Vec<(String, String)> = p.env.into_iter().collect();
        let (tty, pipe_stdin) = (p.tty, p.pipe_stdin);
        {
            let procs = self
                .procs
                .lock()
                .map_err(|_| RpcError::new(INTERNAL, "poisoned"))?;
            if procs.contains_key(&id) {
                return Err(RpcError::new(
                    INVALID_REQUEST,
                    format!("process {id} already exists"),
                ));
            }
        }
        let intent = StepIntent {
            cwd,
            argv,
            env,
            tool_call: p.metadata.and_then(|m| m.tool_call_id),
            sandbox: p.sandbox.filter(|v| !v.is_null()),
            managed_network: p.managed_network.filter(|v| !v.is_null()),
        };
        let mut cmd = host
            .step_command(&intent)
            .map_err(|e| RpcError::new(INTERNAL, e.to_string()))?;
        cmd.process_group(0);
        let mut sources: Vec<(std::fs::File, &'static str)> = Vec::new();
        let mut stdin_w: Option<std::fs::File> = None;
        let mut pty_master = None;
        if tty {
            let (master, slave) =
                open_pty().map_err(|e| RpcError::new(INTERNAL, format!("pty: {e}")))?;
            let s2 = slave.try_clone().map_err(|e| RpcError::io(&e))?;
            let s3 = slave.try_clone().map_err(|e| RpcError::io(&e))?;
            cmd.stdin(Stdio::from(slave))
                .stdout(Stdio::from(s2))
                .stderr(Stdio::from(s3));
            pty_master = Some(master);
        } else {
            cmd.stdin(if pipe_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        }
        let mut child: Child = cmd.spawn().map_err(|e| {
            let mut err = RpcError::new(INTERNAL, e.to_string());
            if e.kind() == std::io::ErrorKind::NotFound {
                err.data = Some(json!({"kind": "spawnNotFound"}));
            }
            err
        })?;
        drop(cmd);
        if let Some(master) = pty_master {
            let f = std::fs::File::from(master);
            stdin_w = f.try_clone().ok();
            sources.push((f, "pty"));
        } else {
            if let Some(o) = child.stdout.take() {
                sources.push((std::fs::File::from(OwnedFd::from(o)), "stdout"));
            }
            if let Some(e) = child.stderr.take() {
                sources.push((std::fs::File::from(OwnedFd::from(e)), "stderr"));
            }
            if let Some(i) = child.stdin.take() {
                stdin_w = Some(std::fs::File::from(OwnedFd::from(i)));
            }
        }
        let proc_ = Arc::new(Proc {
            id: id.clone(),
            pgid: Pid::from_raw(child.id() as i32),
            state: Mutex::default(),
            cond: Condvar::new(),
            stdin: Mutex::new(stdin_w),
        });
        if let Ok(mut procs) = self.procs.lock() {
            procs.insert(id.clone(), proc_.clone());
        }
        let readers: Vec<_> = sources
            .into_iter()
            .map(|(f, stream)| {
                let (p2, o2) = (proc_.clone(), out.clone());
                std::thread::spawn(move || reader(p2, o2, f, stream))
            })
            .collect();
        let (p2, o2, ended) = (proc_.clone(), out.clone(), self.ended.clone());
        std::thread::spawn(move || {
            let code = match child.wait() {
                Ok(st) => st
                    .code()
                    .or_else(|| st.signal().map(|s| 128 + s))
                    .unwrap_or(-1),
                Err(_) => -1,
            };
            // The pty's master stays open for writes, so its reader ends on EIO once the
            // slave's last holder is gone; pipes end at EOF.
            for r in readers {
                let _ = r.join();
            }
            if let Ok(mut i) = p2.stdin.lock() {
                *i = None;
            }
            // Before Codex hears of the exit, so its next `fs/*` call sees the step's end.
            ended.fetch_add(1, std::sync::atomic::Ordering::Release);
            p2.event(&o2, |s, seq| {
                s.exit_code = Some(code);
                (
                    "process/exited",
                    notification(&ExitedNotification {
                        process_id: p2.id.clone(),
                        seq,
                        exit_code: code,
                        sandbox_denied: false,
                    }),
                )
            });
            p2.event(&o2, |s, seq| {
                s.closed = true;
                (
                    "process/closed",
                    notification(&ClosedNotification {
                        process_id: p2.id.clone(),
                        seq,
                    }),
                )
            });
        });
        result(&StartResult {
            process_id: id,
            sandbox_type: "none",
        })
    }

    fn find(&self, id: &str) -> Option<Arc<Proc>> {
        self.procs.lock().ok().and_then(|m| m.get(id).cloned())
    }

    pub fn write(&self, p: &WriteParams) -> RpcResult {
        let status = |status| result(&WriteResult { status });
        let Some(proc_) = self.find(&p.process_id) else {
            return status(WriteStatus::UnknownProcess);
        };
        let data = b64::decode(&p.chunk).ok_or_else(|| RpcError::params("chunk is not base64"))?;
        let Ok(mut stdin) = proc_.stdin.lock() else {
            return status(WriteStatus::StdinClosed);
        };
        status(match stdin.as_mut() {
            Some(w) => match w.write_all(&data).and_then(|()| w.flush()) {
                Ok(()) => WriteStatus::Accepted,
                Err(_) => WriteStatus::StdinClosed,
            },
            None => WriteStatus::StdinClosed,
        })
    }

    pub fn signal(&self, p: &SignalParams) -> RpcResult {
        let sig = match p.signal.to_ascii_lowercase().trim_start_matches("sig") {
            "interrupt" | "int" => Signal::INT,
            "terminate" | "term" => Signal::TERM,
            "kill" => Signal::KILL,
            "hangup" | "hup" => Signal::HUP,
            "quit" => Signal::QUIT,
            other => return Err(RpcError::params(format!("unknown signal {other:?}"))),
        };
        if let Some(proc_) = self.find(&p.process_id)
            && !proc_.exited()
        {
            proc_.kill(sig);
        }
        result(&Empty {})
    }

    pub fn terminate(&self, p: &ProcessRef) -> RpcResult {
        let running = match self.find(&p.process_id) {
            Some(proc_) if !proc_.exited() => {
                proc_.kill(Signal::KILL);
                true
            }
            _ => false,
        };
        result(&TerminateResult { running })
    }

    /// `process/read`: a long poll; call it off the read loop.
    pub fn read(&self, p: &ReadParams) -> RpcResult {
        let Some(proc_) = self.find(&p.process_id) else {
            return Err(RpcError::params("unknown process"));
        };
        let after = p.after_seq.unwrap_or(0);
        let max = p.max_bytes.unwrap_or(u64::MAX) as usize;
        let wait = Duration::from_millis(p.wait_ms.unwrap_or(0).min(60_000));
        let deadline = Instant::now() + wait;
        let mut s = proc_
            .state
            .lock()
            .map_err(|_| RpcError::new(INTERNAL, "poisoned"))?;
        loop {
            let has_new = s.chunks.back().is_some_and(|c| c.seq > after);
            let now = Instant::now();
            if has_new || s.closed || now >= deadline {
                break;
            }
            s = proc_
                .cond
                .wait_timeout(s, deadline - now)
                .map_err(|_| RpcError::new(INTERNAL, "poisoned"))?
                .0;
        }
        let mut chunks = Vec::new();
        let mut bytes = 0usize;
        let mut next = after + 1;
        for c in s.chunks.iter().filter(|c| c.seq > after) {
            if !chunks.is_empty() && bytes + c.data.len() > max {
                break;
            }
            bytes += c.data.len();
            next = c.seq + 1;
            chunks.push(protocol::Chunk {
                seq: c.seq,
                stream: c.stream,
                chunk: b64::encode(&c.data),
            });
        }
        if chunks.is_empty() {
            next = next.max(s.seq + 1);
        }
        result(&ReadResult {
            chunks,
            next_seq: next,
            exited: s.exit_code.is_some(),
            exit_code: s.exit_code,
            closed: s.closed,
            failure: None,
            sandbox_denied: false,
        })
    }

    /// The connection closed: kill whatever still runs.
    pub fn kill_all(&self) {
        if let Ok(procs) = self.procs.lock() {
            for p in procs.values().filter(|p| !p.exited()) {
                p.kill(Signal::KILL);
            }
        }
    }

    /// Wait (bounded) until every process has closed.
    pub fn wait_closed(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let procs: Vec<Arc<Proc>> = self
            .procs
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for p in procs {
            let Ok(mut s) = p.state.lock() else { continue };
            while !s.closed {
                let now = Instant::now();
                if now >= deadline {
                    return;
                }
                match p.cond.wait_timeout(s, deadline - now) {
                    Ok(r) => s = r.0,
                    Err(_) => return,
                }
            }
        }
    }
}

/// What Codex asked to run, as the host sees it.
#[derive(Debug, Clone)]
pub struct StepIntent {
    pub cwd: PathBuf,
    pub argv: Vec<String>,
    /// Variables Codex asked for (the sandbox keeps only those it lets in).
    pub env: Vec<(String, String)>,
    pub tool_call: Option<String>,
    /// Codex's own sandbox request: recorded as intent, never obeyed instead of envgit's policy.
    pub sandbox: Option<Value>,
    pub managed_network: Option<Value>,
}
