//! The host side: start the sandbox process (a re-execution of this binary) with the spec on a
//! pipe, and learn whether envgit itself failed (exit 125 with a message) or the command ran.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::child::{ERR_FD_ENV, SPEC_FD_ENV};
use crate::console::{self, CONSOLE_FD_ENV};
use crate::spec::Spec;

/// The hidden subcommand the binary must route to [`crate::sandbox_main`].
pub const HIDDEN_SUBCOMMAND: &str = "__sandbox";

pub struct SandboxChild {
    child: Child,
    err: std::fs::File,
    /// envgit's end of the console socket, when the command gets a terminal.
    console: Option<OwnedFd>,
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
    spawn_on(exe, spec, false)
}

/// [`spawn`]; with `terminal`, the command runs on a pty the sandbox makes on its own devpts
/// instead of envgit's standard streams: take its master with
/// [`SandboxChild::take_terminal`], set it up, then [`SandboxChild::start_command`].
pub fn spawn_on(exe: &Path, spec: &Spec, terminal: bool) -> std::io::Result<SandboxChild> {
    let (spec_r, spec_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    inheritable(&spec_r, true)?;
    inheritable(&err_w, true)?;
    let console = terminal.then(console::socket_pair).transpose()?;
    // Nothing of envgit's environment reaches the sandbox process: the command's environment
    // travels in the spec.
    let mut command = Command::new(exe);
    command
        .arg(HIDDEN_SUBCOMMAND)
        .env_clear()
        .env(SPEC_FD_ENV, spec_r.as_raw_fd().to_string())
        .env(ERR_FD_ENV, err_w.as_raw_fd().to_string());
    if let Some((_, theirs)) = &console {
        inheritable(theirs, true)?;
        // The sandbox never holds envgit's real terminal, not even before the command starts.
        command
            .env(CONSOLE_FD_ENV, theirs.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    }
    let child = command.spawn();
    drop(spec_r);
    drop(err_w);
    let console = console.map(|(ours, _theirs)| ours);
    let child = child?;
    let bytes = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
    std::fs::File::from(spec_w).write_all(&bytes)?;
    Ok(SandboxChild {
        child,
        err: std::fs::File::from(err_r),
        console,
    })
}

impl SandboxChild {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The master of the command's pty, once the sandbox has made it; `None` when no terminal
    /// was asked for, or when the sandbox ended first (then [`SandboxChild::wait`] says why).
    pub fn take_terminal(&mut self) -> std::io::Result<Option<OwnedFd>> {
        match &self.console {
            Some(socket) => console::receive_master(socket),
            None => Ok(None),
        }
    }

    /// The pty has its modes and size: the command may start.
    pub fn start_command(&mut self) -> std::io::Result<()> {
        match self.console.take() {
            Some(socket) => console::release(socket),
            None => Ok(()),
        }
    }

    pub fn wait(mut self) -> std::io::Result<Outcome> {
        // A sandbox still waiting for its go gets an end instead, and says so.
        self.console = None;
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
