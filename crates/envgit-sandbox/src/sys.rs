//! The few system calls the sandbox needs that have no safe wrapper. Each is small and says
//! why it is sound.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

pub enum Forked {
    Parent(i32),
    Child,
}

/// fork(2). Only called from the single-threaded sandbox process, so the child is a faithful
/// copy with no locks held by other threads.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: the sandbox process never starts threads before its last fork (the relay, which
    // may start threads, runs in a child that never forks again).
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        p => Ok(Forked::Parent(p)),
    }
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// mount_setattr(2): set attributes on the mount at `fd` (and below it when `recursive`).
pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, set: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: the path is a valid empty C string, `attr` lives across the call and its size is
    // passed; the kernel only reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Bring the loopback interface up (the new network namespace starts with it down).
pub fn loopback_up() -> io::Result<()> {
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    // SAFETY: ifreq is plain old data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) == -1 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Signals whose delivery PID 1 forwards to the command.
pub const FORWARDED: [i32; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = FORWARD_TO.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(-pid, sig);
            libc::kill(pid, sig);
        }
    }
}

/// Forward the signals in [`FORWARDED`] to process group `pgid` (the command's session).
pub fn forward_signals_to(pgid: i32) -> io::Result<()> {
    FORWARD_TO.store(pgid, std::sync::atomic::Ordering::Relaxed);
    for sig in FORWARDED {
        set_handler(sig, forward as *const () as libc::sighandler_t)?;
    }
    Ok(())
}

/// Ignore a signal (SIG_IGN), or restore the default (SIG_DFL).
pub fn set_ignored(sig: i32, ignored: bool) -> io::Result<()> {
    set_handler(
        sig,
        if ignored {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        },
    )
}

fn set_handler(sig: i32, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler is SIG_IGN, SIG_DFL or an extern "C" fn
    // that only calls async-signal-safe functions.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Close every fd from 3 up, except those listed.
pub fn close_fds_except(keep: &[i32]) {
    let mut start = 3;
    let mut keep: Vec<i32> = keep.iter().copied().filter(|&f| f >= 3).collect();
    keep.sort_unstable();
    for k in keep.into_iter().chain(std::iter::once(i32::MAX)) {
        if k > start {
            // SAFETY: closing fds the process owns; nothing else uses them after this point.
            unsafe {
                libc::syscall(
                    libc::SYS_close_range,
                    start as libc::c_uint,
                    (k - 1) as libc::c_uint,
                    0,
                );
            }
        }
        start = k.saturating_add(1);
    }
}

/// From PID 1: SIGKILL every other process of the pid namespace.
pub fn kill_everyone_else() {
    // SAFETY: kill(-1, SIGKILL) takes no pointers; from PID 1 it reaches only this namespace.
    unsafe {
        libc::kill(-1, libc::SIGKILL);
    }
}
