//! The host side: start the sandbox process (a re-execution of this binary) with the spec on a
//! pipe, and learn whether envgit itself failed (exit 125 with a message) or the command ran.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::child::{ERR_FD_ENV, SPEC_FD_ENV};
use crate::spec::Spec;

/// The hidden subcommand the binary must route to [`crate::sandbox_main`].
pub const HIDDEN_SUBCOMMAND: &str = "__sandbox";

pub struct SandboxChild {
    child: Child,
    err: std::fs::File,
}

/// How the sandboxed command ended.
#[derive(Debug)]
pub enum Outcome {
    /// The command ran; its exit code (128 + signal when a signal ended it).
    Exited(i32),
    /// envgit could not set the sandbox up; nothing ran.
    SetupFailed(String),
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Let `fd` survive exec for one spawn.
fn inheritable(fd: &OwnedFd, yes: bool) -> std::io::Result<()> {
    let flags = if yes {
        rustix::io::FdFlags::empty()
    } else {
        rustix::io::FdFlags::CLOEXEC
    };
    Ok(rustix::io::fcntl_setfd(fd.as_fd(), flags)?)
}

/// Start `spec` in a sandbox; stdio is inherited from envgit.
pub fn spawn(exe: &Path, spec: &Spec) -> std::io::Result<SandboxChild> {
    spawn_on(exe, spec, None)
}

/// [`spawn`] with the command's standard input, output and error on `terminal` (a pty's
/// slave end) instead of envgit's own.
pub fn spawn_on(
    exe: &Path,
    spec: &Spec,
    terminal: Option<&std::os::fd::OwnedFd>,
) -> std::io::Result<SandboxChild> {
    let stdio = |t: Option<&std::os::fd::OwnedFd>| -> std::io::Result<Stdio> {
        Ok(match t {
            Some(fd) => Stdio::from(fd.try_clone()?),
            None => Stdio::inherit(),
        })
    };
    let (spec_r, spec_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    inheritable(&spec_r, true)?;
    inheritable(&err_w, true)?;
    // Nothing of envgit's environment reaches the sandbox process: the command's environment
    // travels in the spec.
    let child = Command::new(exe)
        .arg(HIDDEN_SUBCOMMAND)
        .env_clear()
        .env(SPEC_FD_ENV, spec_r.as_raw_fd().to_string())
        .env(ERR_FD_ENV, err_w.as_raw_fd().to_string())
        .stdin(stdio(terminal)?)
        .stdout(stdio(terminal)?)
        .stderr(stdio(terminal)?)
        .spawn();
    drop(spec_r);
    drop(err_w);
    let child = child?;
    let bytes = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
    std::fs::File::from(spec_w).write_all(&bytes)?;
    Ok(SandboxChild {
        child,
        err: std::fs::File::from(err_r),
    })
}

impl SandboxChild {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn wait(mut self) -> std::io::Result<Outcome> {
        let status = self.child.wait()?;
        let mut msg = String::new();
        let _ = self.err.read_to_string(&mut msg);
        if !msg.is_empty() {
            return Ok(Outcome::SetupFailed(msg));
        }
        use std::os::unix::process::ExitStatusExt;
        Ok(Outcome::Exited(
            status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(125),
        ))
    }
}

/// While it lives, Ctrl-C and Ctrl-\ at the terminal reach the sandboxed command (through its
/// PID 1) instead of ending envgit before it records the step.
pub struct SignalGuard(());

impl SignalGuard {
    pub fn ignore_terminal_signals() -> Self {
        let _ = crate::sys::set_ignored(libc::SIGINT, true);
        let _ = crate::sys::set_ignored(libc::SIGQUIT, true);
        Self(())
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let _ = crate::sys::set_ignored(libc::SIGINT, false);
        let _ = crate::sys::set_ignored(libc::SIGQUIT, false);
    }
}
