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

/// A pty of the sandbox's devpts (PID 1, after `pivot_root`): the slave belongs to the
/// command's user, as `login` gives a user their terminal.
pub(crate) struct Console {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Console {
    pub(crate) fn open(uid: u32, gid: u32) -> Result<Console, String> {
        let master = rustix::pty::openpt(
            rustix::pty::OpenptFlags::RDWR
                | rustix::pty::OpenptFlags::NOCTTY
                | rustix::pty::OpenptFlags::CLOEXEC,
        )
        .map_err(|e| format!("opening /dev/ptmx inside: {e}"))?;
        rustix::pty::unlockpt(&master).map_err(|e| format!("unlockpt: {e}"))?;
        let name =
            rustix::pty::ptsname(&master, Vec::new()).map_err(|e| format!("ptsname: {e}"))?;
        let slave = rustix::fs::open(
            name.as_c_str(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("opening {}: {e}", name.to_string_lossy()))?;
        rustix::fs::fchown(
            &slave,
            Some(rustix::process::Uid::from_raw(uid)),
            Some(rustix::process::Gid::from_raw(gid)),
        )
        .map_err(|e| format!("giving {} to uid {uid}: {e}", name.to_string_lossy()))?;
        Ok(Console { master, slave })
    }

    /// Hands the master to envgit and waits for its go. Returns the slave; PID 1 keeps no
    /// copy of the master, so the pty ends for envgit when the command's last process does.
    pub(crate) fn hand_over(self, socket: OwnedFd) -> Result<OwnedFd, String> {
        let fds = [self.master.as_fd()];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err("console message: no room for the terminal".into());
        }
        rustix::net::sendmsg(
            &socket,
            &[IoSlice::new(b"t")],
            &mut control,
            SendFlags::empty(),
        )
        .map_err(|e| format!("handing the terminal to envgit: {e}"))?;
        drop(self.master);
        let mut go = [0u8; 1];
        let mut socket = std::fs::File::from(socket);
        match socket.read(&mut go) {
            Ok(1) => Ok(self.slave),
            Ok(_) => Err("envgit went away before the command started".into()),
            Err(e) => Err(format!("waiting for envgit to set the terminal up: {e}")),
        }
    }
}

/// The worker, a session leader with no terminal yet: the slave becomes its controlling
/// terminal and its standard input, output and error.
pub(crate) fn take_as_controlling(slave: OwnedFd) -> Result<(), String> {
    rustix::process::ioctl_tiocsctty(&slave).map_err(|e| format!("TIOCSCTTY: {e}"))?;
    rustix::stdio::dup2_stdin(&slave).map_err(|e| format!("terminal as stdin: {e}"))?;
    rustix::stdio::dup2_stdout(&slave).map_err(|e| format!("terminal as stdout: {e}"))?;
    rustix::stdio::dup2_stderr(&slave).map_err(|e| format!("terminal as stderr: {e}"))?;
    Ok(())
}
