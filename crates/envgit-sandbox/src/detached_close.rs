//! Closing a descriptor whose last close waits in the kernel, after this process has gone.
//!
//! The last close of an inotify instance waits for an SRCU grace period before the kernel frees
//! its watches (0.2–25 ms measured here, whatever the number of watches), and a process's exit
//! waits for the closes of its descriptors: a one-shot `envgit run`, whose working tree is
//! watched during the step, spent ~11 ms (p50) ending after its work was done. A forked child
//! holds the last reference instead and closes it once this process has let go of its own
//! copy; nobody waits for that child (it is reparented and reaped when envgit has gone).

use std::os::fd::{AsRawFd, OwnedFd};

use rustix::pipe::{PipeFlags, pipe_with};

/// Closes `fd` in a forked child, after this process has closed its own copy: the caller (and
/// its exit) never waits for the close. Falls back to closing it here when no child can be
/// forked. Only for a descriptor whose close has no effect anyone waits for (an inotify
/// instance); the child keeps nothing else open, standard output and error included, so a
/// reader of envgit's output sees its end as envgit exits.
pub fn close_detached(fd: OwnedFd) {
    drop(hand_to_child(fd));
}

/// Forks the child that will close `fd`, and closes this process's copy. The child closes
/// everything else at once and `fd` when the returned descriptor (the write end of a pipe it
/// waits on) is closed. `None`: no child, `fd` closed here.
fn hand_to_child(fd: OwnedFd) -> Option<OwnedFd> {
    let (wait_for, release) = pipe_with(PipeFlags::CLOEXEC).ok()?;
    // SAFETY: this process may have threads; the child makes only async-signal-safe system
    // calls (close_range, read, close, _exit) and never returns into Rust code, so locks other
    // threads held at the fork do not matter.
    match unsafe { libc::fork() } {
        // SAFETY: in the child just forked.
        0 => unsafe { close_when_released(fd.as_raw_fd(), wait_for.as_raw_fd()) },
        -1 => None,
        _ => Some(release),
    }
}

/// The child: every descriptor but `fd` and `wait_for` closed, then `fd` once `wait_for` reads
/// its end (the parent closed its copies, or exited).
///
/// # Safety
/// Only in a freshly forked child, which this ends.
unsafe fn close_when_released(fd: i32, wait_for: i32) -> ! {
    let (low, high) = if fd < wait_for {
        (fd, wait_for)
    } else {
        (wait_for, fd)
    };
    for (first, last) in [(0, low - 1), (low + 1, high - 1), (high + 1, i32::MAX)] {
        if first <= last {
            // SAFETY: closes descriptors this child owns and never uses again.
            unsafe {
                libc::syscall(
                    libc::SYS_close_range,
                    first as libc::c_uint,
                    last as libc::c_uint,
                    0,
                )
            };
        }
    }
    let mut byte = 0u8;
    // SAFETY: reads at most one byte into a local; returns 0 once every write end is closed.
    while unsafe { libc::read(wait_for, (&raw mut byte).cast(), 1) } < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    // SAFETY: plain system calls on descriptors this child owns; _exit runs no destructors.
    unsafe {
        libc::close(fd);
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, OwnedFd};

    use rustix::pipe::{PipeFlags, pipe_with};

    use super::{close_detached, hand_to_child};

    /// Waits (at most 10 s, a bound, not a measure) until every write end of `read_end`'s pipe
    /// is closed.
    fn writers_all_closed(read_end: &OwnedFd) -> bool {
        let mut p = libc::pollfd {
            fd: read_end.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, its count passed.
        let n = unsafe { libc::poll(&mut p, 1, 10_000) };
        n == 1 && p.revents & libc::POLLHUP != 0
    }

    /// Whether the pipe's write ends are all closed, right now.
    fn closed_now(read_end: &OwnedFd) -> bool {
        let mut p = libc::pollfd {
            fd: read_end.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, its count passed.
        unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLHUP != 0 }
    }

    #[test]
    fn the_last_copy_is_closed_by_the_child() {
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        close_detached(w);
        assert!(
            writers_all_closed(&r),
            "the child never closed the descriptor"
        );
    }

    #[test]
    fn the_child_holds_only_its_descriptor_until_released() {
        // Stands for envgit's standard output: its reader must see the end when envgit exits,
        // not when the child is done.
        let (out_r, out_w) = pipe_with(PipeFlags::empty()).unwrap();
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let release = hand_to_child(w).expect("fork");
        drop(out_w);
        assert!(
            writers_all_closed(&out_r),
            "the child kept a copy of another descriptor"
        );
        assert!(!closed_now(&r), "the child let go before it was released");
        drop(release);
        assert!(
            writers_all_closed(&r),
            "the child never closed the descriptor"
        );
    }
}
