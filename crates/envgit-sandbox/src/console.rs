//! The command's terminal, made inside the sandbox (runc's "console socket"): PID 1 opens a
//! pty on the sandbox's own devpts once the view is built, hands the master to envgit over a
//! socket (`SCM_RIGHTS`) and waits until envgit has set it up; the command gets the slave as
//! its controlling terminal. So `tty` names `/dev/pts/N` of the view it lives in, `/dev/tty`
//! opens and shells get job control — and the command never holds envgit's real terminal.
//!
//! The socket carries exactly one message each way: the master (sandbox → envgit), then one
//! byte (envgit → sandbox) meaning "the pty has its modes and size; start the command".

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// Names the sandbox process's end of the console socket, when envgit wants a terminal.
pub const CONSOLE_FD_ENV: &str = "ENVGIT_SANDBOX_CONSOLE_FD";

/// A connected pair: envgit keeps the first, the sandbox process inherits the second.
pub fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// envgit's side: the pty master the sandbox made, or `None` when the sandbox ended (its setup
/// failed) before making one.
pub fn receive_master(socket: &OwnedFd) -> std::io::Result<Option<OwnedFd>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    if got.bytes == 0 {
        return Ok(None);
    }
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = message
            && let Some(master) = fds.next()
        {
            return Ok(Some(master));
        }
    }
    Err(std::io::Error::other(
        "the sandbox sent no terminal with its console message",
    ))
}

/// envgit's side: the pty is ready; the command may start.
pub fn release(socket: OwnedFd) -> std::io::Result<()> {
    std::fs::File::from(socket).write_all(b"g")
}

/// Why PID 1 could not make the command's terminal or hand it to envgit.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConsoleError {
    /// A pty call failed; `what` names the step (`unlockpt`, `opening /dev/pts/3`, …).
    #[error("{what}: {source}")]
    Pty {
        what: String,
        #[source]
        source: rustix::io::Errno,
    },
    #[error("console message: no room for the terminal")]
    NoRoom,
    #[error("handing the terminal to envgit: {0}")]
    Send(#[source] rustix::io::Errno),
    #[error("envgit went away before the command started")]
    EnvgitGone,
    #[error("waiting for envgit to set the terminal up: {0}")]
    Wait(#[source] std::io::Error),
}

fn pty(what: impl Into<String>) -> impl FnOnce(rustix::io::Errno) -> ConsoleError {
    let what = what.into();
    move |source| ConsoleError::Pty { what, source }
}

/// A pty of the sandbox's devpts (PID 1, after `pivot_root`): the slave belongs to the
/// command's user, as `login` gives a user their terminal.
pub(crate) struct Console {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Console {
    pub(crate) fn open(uid: u32, gid: u32) -> Result<Console, ConsoleError> {
        let master = rustix::pty::openpt(
            rustix::pty::OpenptFlags::RDWR
                | rustix::pty::OpenptFlags::NOCTTY
                | rustix::pty::OpenptFlags::CLOEXEC,
        )
        .map_err(pty("opening /dev/ptmx inside"))?;
        rustix::pty::unlockpt(&master).map_err(pty("unlockpt"))?;
        let name = rustix::pty::ptsname(&master, Vec::new()).map_err(pty("ptsname"))?;
        let slave = rustix::fs::open(
            name.as_c_str(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(pty(format!("opening {}", name.to_string_lossy())))?;
        rustix::fs::fchown(
            &slave,
            Some(rustix::process::Uid::from_raw(uid)),
            Some(rustix::process::Gid::from_raw(gid)),
        )
        .map_err(pty(format!(
            "giving {} to uid {uid}",
            name.to_string_lossy()
        )))?;
        Ok(Console { master, slave })
    }

    /// Hands the master to envgit and waits for its go. Returns the slave; PID 1 keeps no
    /// copy of the master, so the pty ends for envgit when the command's last process does.
    pub(crate) fn hand_over(self, socket: OwnedFd) -> Result<OwnedFd, ConsoleError> {
        let fds = [self.master.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(ConsoleError::NoRoom);
        }
        rustix::net::sendmsg(
            &socket,
            &[IoSlice::new(b"t")],
            &mut control,
            SendFlags::empty(),
        )
        .map_err(ConsoleError::Send)?;
        drop(self.master);
        let mut go = [0u8; 1];
        let mut socket = std::fs::File::from(socket);
        match socket.read(&mut go) {
            Ok(1) => Ok(self.slave),
            Ok(_) => Err(ConsoleError::EnvgitGone),
            Err(e) => Err(ConsoleError::Wait(e)),
        }
    }
}

/// The worker, a session leader with no terminal yet: the slave becomes its controlling
/// terminal and those of its standard input, output and error that `stdio` names (the ones
/// that were a terminal on envgit's side; the others stay as envgit passed them).
pub(crate) fn take_as_controlling(slave: OwnedFd, stdio: [bool; 3]) -> Result<(), ConsoleError> {
    rustix::process::ioctl_tiocsctty(&slave).map_err(pty("TIOCSCTTY"))?;
    if stdio[0] {
        rustix::stdio::dup2_stdin(&slave).map_err(pty("terminal as stdin"))?;
    }
    if stdio[1] {
        rustix::stdio::dup2_stdout(&slave).map_err(pty("terminal as stdout"))?;
    }
    if stdio[2] {
        rustix::stdio::dup2_stderr(&slave).map_err(pty("terminal as stderr"))?;
    }
    Ok(())
}
