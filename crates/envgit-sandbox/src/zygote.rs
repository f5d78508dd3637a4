//! The sandbox process, forked from envgit at its start while envgit is still single-threaded,
//! and waiting for its channels: starting a step's sandbox then costs a fork instead of a
//! re-execution of the whole envgit binary (mapping it and faulting its pages in,
//! libc's and Rust's start-up: about 2.4 ms of a step, measured). Used by one-shot commands
//! that run one sandbox (`envgit run`); anything else, or a zygote that is gone, falls back to
//! re-executing the binary ([`crate::launch`]).
//!
//! The zygote keeps nothing envgit opens after the fork, dies with envgit (`PDEATHSIG`), and
//! ends quietly when envgit closes its socket without using it.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

use crate::child::Channels;
use crate::sys::{self, Forked};

static PREFORKED: Mutex<Option<Zygote>> = Mutex::new(None);

/// A forked sandbox process waiting for its channels.
pub(crate) struct Zygote {
    pid: i32,
    socket: OwnedFd,
    /// The move into the run's cgroups, when envgit started it early ([`move_into_cgroups`]):
    /// it ends with the cgroups the zygote is in.
    moving: Option<JoinHandle<Vec<PathBuf>>>,
}

/// Forks the zygote. Call it first thing in `main`, before any thread exists: a process
/// with threads is not forked (the fork would copy locks other threads hold), and the first
/// sandbox is then started by re-execution as before.
pub fn prefork() {
    if !single_threaded() {
        return;
    }
    let Ok((ours, theirs)) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    ) else {
        return;
    };
    let parent = rustix::process::getpid();
    match sys::fork() {
        Ok(Forked::Child) => {
            drop(ours);
            wait_for_channels(theirs, parent)
        }
        Ok(Forked::Parent(pid)) => {
            drop(theirs);
            *PREFORKED.lock().unwrap_or_else(|p| p.into_inner()) = Some(Zygote {
                pid,
                socket: ours,
                moving: None,
            });
        }
        Err(_) => {}
    }
}

/// The zygote, once: the first sandbox of this process.
pub(crate) fn take() -> Option<Zygote> {
    PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Starts moving the zygote into the run's cgroup v2 directories on a thread, while envgit
/// sets up the rest of the step. Moving a whole process between cgroups waits for the
/// kernel's RCU grace period (`cgroup_threadgroup_rwsem`): 11 ms of a step when the sandbox
/// process did it itself, first thing after it was given its channels. A cgroup v1 directory
/// is left to the sandbox process, which joins it one thread at a time at no cost
/// ([`crate::limits::join`]). The sandbox process then joins only the cgroups this did not
/// move it into (starting the zygote waits for the move, so nothing the sandbox forks is ever
/// outside them). No zygote: nothing to do, the sandbox process joins them itself.
pub fn move_into_cgroups(cgroups: &[PathBuf]) {
    let mut preforked = PREFORKED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(zygote) = preforked.as_mut() else {
        return;
    };
    if zygote.moving.is_some() || cgroups.is_empty() {
        return;
    }
    // A cgroup v1 the sandbox process joins by itself when it starts, in no time
    // ([`crate::limits::join`]).
    let cgroups: Vec<PathBuf> = cgroups
        .iter()
        .filter(|dir| !crate::limits::joins_by_thread(dir))
        .cloned()
        .collect();
    if cgroups.is_empty() {
        return;
    }
    let pid = zygote.pid.to_string();
    zygote.moving = std::thread::Builder::new()
        .name("envgit-cgroup-move".into())
        .spawn(move || {
            cgroups
                .into_iter()
                .filter(|dir| std::fs::write(dir.join("cgroup.procs"), &pid).is_ok())
                .collect()
        })
        .ok();
}

pub(crate) fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}

/// Ends the zygote unused (the step failed before its sandbox started), waiting until it is
/// gone: the run's cgroups it was moved into can then be removed.
pub fn discard_zygote() {
    let Some(mut zygote) = take() else {
        return;
    };
    zygote.moved_into();
    if let Some(pid) = rustix::process::Pid::from_raw(zygote.pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    }
}

impl Zygote {
    /// The cgroups the zygote was moved into early, once the move is over.
    pub(crate) fn moved_into(&mut self) -> Vec<PathBuf> {
        self.moving
            .take()
            .and_then(|m| m.join().ok())
            .unwrap_or_default()
    }

    /// Gives the zygote its channels; it is the sandbox process from here. Returns its pid.
    pub(crate) fn start(
        self,
        spec: BorrowedFd<'_>,
        err: BorrowedFd<'_>,
        console: Option<BorrowedFd<'_>>,
    ) -> std::io::Result<i32> {
        let mut fds = vec![spec, err];
        fds.extend(console);
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(std::io::Error::other("no room for the sandbox's channels"));
        }
        rustix::net::sendmsg(
            &self.socket,
            &[IoSlice::new(b"s")],
            &mut control,
            SendFlags::empty(),
        )?;
        Ok(self.pid)
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // Unused: closing the socket ends it; reap it if it is gone already.
        let _ = rustix::process::waitpid(
            rustix::process::Pid::from_raw(self.pid),
            rustix::process::WaitOptions::NOHANG,
        );
    }
}

/// The zygote's life: wait, then become the sandbox process (or end when envgit goes away).
fn wait_for_channels(socket: OwnedFd, parent: rustix::process::Pid) -> ! {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // Ctrl-C at the terminal before the step starts is envgit's to handle.
    let _ = sys::set_ignored(libc::SIGINT, true);
    let _ = sys::set_ignored(libc::SIGQUIT, true);
    if rustix::process::getppid() != Some(parent) {
        std::process::exit(0);
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = loop {
        match rustix::net::recvmsg(
            &socket,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other,
        }
    };
    drop(socket);
    let mut fds: Vec<OwnedFd> = Vec::new();
    if matches!(got, Ok(ref r) if r.bytes == 1) {
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
    }
    let mut fds = fds.into_iter();
    let (Some(spec), Some(err)) = (fds.next(), fds.next()) else {
        // Not needed after all.
        std::process::exit(0);
    };
    let console = fds.next();
    if console.is_some() && !detach_from_envgits_terminal() {
        std::process::exit(125);
    }
    crate::child::sandbox_main_with(Channels {
        spec,
        err: Some(err),
        console,
    })
}

/// With a console, the sandbox holds nothing of envgit's terminal: its standard streams are
/// `/dev/null`, as a re-executed one gets.
fn detach_from_envgits_terminal() -> bool {
    let Ok(null) = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return false;
    };
    rustix::stdio::dup2_stdin(null.as_fd()).is_ok()
        && rustix::stdio::dup2_stdout(null.as_fd()).is_ok()
        && rustix::stdio::dup2_stderr(null.as_fd()).is_ok()
}
