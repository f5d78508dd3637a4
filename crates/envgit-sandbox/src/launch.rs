//! The host side: start the sandbox process (the zygote forked at envgit's start, else a
//! re-execution of this binary) with the spec on a pipe, and learn whether envgit itself
//! failed (exit 125 with a message) or the command ran.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::child::{ERR_FD_ENV, SPEC_FD_ENV};
use crate::console::{self, CONSOLE_FD_ENV};
use crate::spec::Spec;

/// The hidden subcommand the binary must route to [`crate::sandbox_main`].
pub const HIDDEN_SUBCOMMAND: &str = "__sandbox";

pub struct SandboxChild {
    process: Process,
    /// The forked sandbox process writes the command's exit code here just before it exits
    /// ([`SandboxChild::wait`] reads it instead of waiting for that exit).
    done: Option<OwnedFd>,
    err: std::fs::File,
    /// envgit's end of the console socket, when the command gets a terminal.
    console: Option<OwnedFd>,
}

/// The sandbox process: a re-executed envgit, or the zygote forked at envgit's start.
enum Process {
    Spawned(Child),
    Forked(i32),
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
    if let Some(mut zygote) = crate::zygote::take() {
        // What the zygote was moved into already it must not join again: a move costs a
        // grace period even when the process is there.
        let moved = zygote.moved_into();
        let mut spec = spec.clone();
        spec.cgroups.retain(|c| !moved.contains(c));
        let spec = &spec;
        let (done_r, done_w) = pipe()?;
        let started = zygote.start(
            spec_r.as_fd(),
            err_w.as_fd(),
            done_w.as_fd(),
            console.as_ref().map(|(_, theirs)| theirs.as_fd()),
        );
        // A zygote that is gone (a signal took it) leaves the re-execution below.
        if let Ok(pid) = started {
            drop(spec_r);
            drop(err_w);
            drop(done_w);
            let bytes = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
            std::fs::File::from(spec_w).write_all(&bytes)?;
            return Ok(SandboxChild {
                process: Process::Forked(pid),
                done: Some(done_r),
                err: std::fs::File::from(err_r),
                console: console.map(|(ours, _theirs)| ours),
            });
        }
    }
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
        // The sandbox never holds envgit's real terminal, not even before the command starts:
        // the streams that are one get the console inside; a pipe or a file stays.
        let terminal_or = |fd: BorrowedFd<'_>| {
            if rustix::termios::isatty(fd) {
                Stdio::null()
            } else {
                Stdio::inherit()
            }
        };
        command
            .env(CONSOLE_FD_ENV, theirs.as_raw_fd().to_string())
            .stdin(terminal_or(rustix::stdio::stdin()))
            .stdout(terminal_or(rustix::stdio::stdout()))
            .stderr(terminal_or(rustix::stdio::stderr()));
    }
    let child = command.spawn();
    drop(spec_r);
    drop(err_w);
    let console = console.map(|(ours, _theirs)| ours);
    let child = child?;
    let bytes = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
    std::fs::File::from(spec_w).write_all(&bytes)?;
    Ok(SandboxChild {
        process: Process::Spawned(child),
        done: None,
        err: std::fs::File::from(err_r),
        console,
    })
}

impl SandboxChild {
    pub fn id(&self) -> u32 {
        match &self.process {
            Process::Spawned(child) => child.id(),
            Process::Forked(pid) => *pid as u32,
        }
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
        let code = match &mut self.process {
            Process::Spawned(child) => {
                use std::os::unix::process::ExitStatusExt;
                let status = child.wait()?;
                status
                    .code()
                    .or_else(|| status.signal().map(|s| 128 + s))
                    .unwrap_or(125)
            }
            Process::Forked(pid) => match self.done.take().and_then(crate::init::read_verdict) {
                // Its exit (unmapping a fork of envgit) goes on beside the step's end; it is
                // reaped now if it is over, else when envgit exits.
                Some(code) => {
                    reap_if_gone(*pid);
                    code
                }
                // It ended without a word (killed): its own status says how.
                None => wait_forked(*pid)?,
            },
        };
        let mut msg = String::new();
        let _ = self.err.read_to_string(&mut msg);
        if !msg.is_empty() {
            return Ok(Outcome::SetupFailed(msg));
        }
        Ok(Outcome::Exited(code))
    }
}

fn reap_if_gone(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
    }
}

/// The exit code of the forked sandbox process `pid` (128 + signal when a signal ended it).
fn wait_forked(pid: i32) -> std::io::Result<i32> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| std::io::Error::other("the sandbox process has no pid"))?;
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => {
                return Ok(status
                    .exit_status()
                    .or_else(|| status.terminating_signal().map(|s| 128 + s))
                    .unwrap_or(125));
            }
            Ok(None) | Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
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
