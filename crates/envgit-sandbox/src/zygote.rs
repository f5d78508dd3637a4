//! The sandbox process, forked from envgit at its start while envgit is still single-threaded,
//! and waiting for its channels: starting a step's sandbox then costs a fork instead of a
//! re-execution of the whole envgit binary (the dynamic loader's relocations, page faults,
//! libc's and Rust's start-up: about 2.4 ms of a step, measured). Used by one-shot commands
//! that run one sandbox (`envgit run`); anything else, or a zygote that is gone, falls back to
//! re-executing the binary ([`crate::launch`]).
//!
//! The zygote keeps nothing envgit opens after the fork, dies with envgit (`PDEATHSIG`), and
//! ends quietly when envgit closes its socket without using it.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

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
            *PREFORKED.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Zygote { pid, socket: ours });
        }
        Err(_) => {}
    }
}

/// The zygote, once: the first sandbox of this process.
pub(crate) fn take() -> Option<Zygote> {
    PREFORKED.lock().unwrap_or_else(|p| p.into_inner()).take()
}

fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.count() == 1)
}

impl Zygote {
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
