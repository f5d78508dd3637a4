//! Codex's exec-server protocol (as Codex 0.171.0 speaks it; `protocol.rs` types every
//! message envgit handles), served by envgit: JSON-RPC-shaped objects without a
//! `"jsonrpc"` field, one per line over stdio.
//!
//! - `initialize` (answered with a session id) → `initialized` → calls, answered by id; a long
//!   call (`process/read`) never blocks the read loop.
//! - `process/start|read|write|signal|terminate`: the [`Host`] turns each process into a command
//!   that runs as one envgit step in the sandbox (a shell-rule match exits 126 with the reason
//!   on stderr, which Codex shows the model); output is streamed as `process/output`, then
//!   `process/exited` and `process/closed`.
//! - `fs/*`: applied on the host by [`fs::Fs`], inside the project only, refusing what the
//!   sandbox would refuse; writes (and refusals) are recorded as a step per burst of calls
//!   (one `apply_patch` is one burst).
//! - anything else: `-32601`. Closing the connection kills the connection's processes.

pub mod b64;
pub mod config;
pub mod fs;
pub mod paths;
pub mod process;
pub mod protocol;
pub mod rpc;
mod step_error;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use fs::{Effect, FsPolicy, Refusal};
pub use process::StepIntent;
use protocol::{EnvironmentInfo, Incoming, InitializeResult, Shell};
pub use rpc::Trace;
use rpc::{METHOD_NOT_FOUND, Out, RpcError};
pub use step_error::StepCommandError;

/// A burst of `fs/*` writes ends after this much quiet, or when a process starts.
const FS_GROUP_QUIET: Duration = Duration::from_millis(300);

/// What envgit provides to the server: how a process becomes a step, and how `fs/*` effects
/// are recorded.
pub trait Host: Send + Sync {
    /// A command that runs `intent.argv` in `intent.cwd` as one envgit step in the sandbox.
    /// The server sets its stdio and process group.
    fn step_command(&self, intent: &StepIntent) -> Result<std::process::Command, StepCommandError>;
    /// Record what a burst of `fs/*` calls wrote or was refused, as one step.
    fn record_fs(&self, effect: Effect);
    /// Before a burst's first call that may write: what changed since the last step is the
    /// person's, recorded as theirs, so the burst's step (and what its checks put back) is
    /// Codex's alone.
    fn before_fs_writes(&self) {}
    /// The paths unreadable in the sandbox as its plan finds them now (a step that ended may
    /// have made another: a hard link to `.env`); `None` when they cannot be found.
    fn denied_reads(&self) -> Option<Vec<PathBuf>> {
        None
    }
    /// The directory processes start in when Codex names none.
    fn default_cwd(&self) -> PathBuf;
}

struct Pending {
    effect: Effect,
    last: Instant,
}

struct Server {
    host: Arc<dyn Host>,
    fs: fs::Fs,
    procs: process::Table,
    out: Out,
    pending: Arc<Mutex<Option<Pending>>>,
    session: String,
    /// The number of processes ended when the unreadable paths were last found.
    denies_as_of: std::sync::atomic::AtomicU64,
}

/// `n` random bytes from the operating system (getrandom), hex. No randomness is an error,
/// never a predictable session id.
fn random_hex(n: usize) -> std::io::Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| {
        std::io::Error::other(format!(
            "cannot get random bytes from the operating system for the exec-server session \
             id: {e}"
        ))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn flush(host: &dyn Host, pending: &Mutex<Option<Pending>>, only_if_quiet: bool) {
    let taken = match pending.lock() {
        Ok(mut p) => match p.as_ref() {
            Some(g) if !only_if_quiet || g.last.elapsed() >= FS_GROUP_QUIET => p.take(),
            _ => None,
        },
        Err(_) => None,
    };
    if let Some(g) = taken {
        host.record_fs(g.effect);
    }
}

impl Server {
    fn add_effect(&self, e: Effect) {
        if e.wrote.is_empty() && e.refused.is_empty() {
            return;
        }
        if let Ok(mut p) = self.pending.lock() {
            let g = p.get_or_insert_with(|| Pending {
                effect: Effect::default(),
                last: Instant::now(),
            });
            for w in e.wrote {
                if !g.effect.wrote.contains(&w) {
                    g.effect.wrote.push(w);
                }
            }
            g.effect.refused.extend(e.refused);
            g.last = Instant::now();
        }
    }

    fn request(&self, id: Value, method: &str, params: Value) {
        let result = match method {
            "initialize" => protocol::result(&InitializeResult {
                session_id: self.session.clone(),
                environment_info: EnvironmentInfo {
                    shell: Shell {
                        name: "bash".into(),
                        path: "/bin/bash".into(),
                    },
                    cwd: paths::to_uri(&self.host.default_cwd()),
                },
            }),
            "process/start" => {
                // The fs writes before this command are their own step.
                flush(&*self.host, &self.pending, false);
                protocol::params(method, &params)
                    .and_then(|p| self.procs.start(&*self.host, p, &self.out))
            }
            "process/write" => protocol::params(method, &params).and_then(|p| self.procs.write(&p)),
            "process/signal" => {
                protocol::params(method, &params).and_then(|p| self.procs.signal(&p))
            }
            "process/terminate" => {
                protocol::params(method, &params).and_then(|p| self.procs.terminate(&p))
            }
            "process/read" => {
                let p = match protocol::params(method, &params) {
                    Ok(p) => p,
                    Err(e) => return self.out.answer(&id, Err(e)),
                };
                let (procs, out) = (self.procs.clone(), self.out.clone());
                std::thread::spawn(move || out.answer(&id, procs.read(&p)));
                return;
            }
            m if m.starts_with("fs/") => {
                let ended = self.procs.ended();
                let as_of = self
                    .denies_as_of
                    .swap(ended, std::sync::atomic::Ordering::AcqRel);
                if as_of != ended
                    && let Some(denied) = self.host.denied_reads()
                {
                    self.fs.deny_also(denied);
                }
                let burst_begins = self.pending.lock().is_ok_and(|p| p.is_none());
                if burst_begins && fs::may_write(m) {
                    self.host.before_fs_writes();
                }
                let mut effect = Effect::default();
                let r = self.fs.call(m, &params, &mut effect);
                self.add_effect(effect);
                r.unwrap_or_else(|| Err(unknown(m)))
            }
            m => Err(unknown(m)),
        };
        self.out.answer(&id, result);
    }
}

fn unknown(method: &str) -> RpcError {
    RpcError::new(METHOD_NOT_FOUND, format!("method not found: {method}"))
}

/// Serve one connection until `input` ends; then kill its processes and record what is left.
pub fn serve(
    input: impl BufRead,
    output: Box<dyn std::io::Write + Send>,
    host: Arc<dyn Host>,
    policy: FsPolicy,
    trace: rpc::Trace,
) -> std::io::Result<()> {
    let server = Server {
        host: host.clone(),
        fs: fs::Fs::new(policy)?,
        procs: process::Table::default(),
        out: Out::new(output, trace),
        pending: Arc::default(),
        session: random_hex(16)?,
        denies_as_of: std::sync::atomic::AtomicU64::new(0),
    };
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (host, pending, done) = (host.clone(), server.pending.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                flush(&*host, &pending, true);
            }
        })
    };
    for line in input.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        server.out.trace().line("> ", line.as_bytes());
        let msg: Incoming = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                server.out.answer(
                    &Value::Null,
                    Err(RpcError::new(-32700, format!("parse error: {e}"))),
                );
                continue;
            }
        };
        let params = msg.params;
        match (msg.id, msg.method) {
            (Some(id), Some(m)) => server.request(id, &m, params),
            // `initialized` and any other notification need no answer.
            (None, Some(_)) => {}
            // Answers to requests we never send: ignore.
            _ => {}
        }
    }
    server.out.trace().line("# ", b"connection closed");
    server.procs.kill_all();
    server.procs.wait_closed(Duration::from_secs(10));
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flusher.join();
    flush(&*host, &server.pending, false);
    server.out.trace().line("# ", b"recorded");
    Ok(())
}

/// Whether `p` is `root` or beneath it.
pub fn inside(root: &Path, p: &Path) -> bool {
    p.starts_with(root)
}

#[cfg(test)]
mod token_tests {
    #[test]
    fn session_ids_are_random_hex() {
        let (a, b) = (super::random_hex(16), super::random_hex(16));
        assert!(
            matches!((&a, &b), (Ok(x), Ok(y)) if x != y && x.len() == 32),
            "{a:?} {b:?}"
        );
    }
}
