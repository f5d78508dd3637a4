//! Closing a descriptor whose last close waits in the kernel, after this process has gone.
//!
//! The last close of an inotify instance waits for an SRCU grace period before the kernel frees
//! its watches (0.2–25 ms measured here, whatever the number of watches), and a process's exit
//! waits for the closes of its descriptors: a one-shot `envgit run`, whose working tree is
//! watched during the step, spent ~11 ms (p50) ending after its work was done. A child holds
//! the last reference instead and closes it once this process has let go of its own copy;
//! nobody waits for that child (it is reparented and reaped when envgit has gone).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::pipe::{PipeFlags, pipe_with};

/// Closes `fd` in a child of its own, after this process has closed its own copy: the caller (and
/// its exit) never waits for the close. Falls back to closing it here when no child can be
/// started. Only for a descriptor whose close has no effect anyone waits for (an inotify
/// instance); the child keeps nothing else open, standard output and error included, so a
/// reader of envgit's output sees its end as envgit exits.
pub fn close_detached(fd: OwnedFd) {
    drop(hand_to_child(fd));
}

/// The closer's stack. It runs in this process's memory, so the stack is leaked: this process
/// makes one closer, as it ends.
const CLOSER_STACK: usize = 64 << 10;

/// Starts the child that will close `fd`, and closes this process's copy. The child closes
/// everything else at once and `fd` when the returned descriptor (the write end of a pipe it
/// waits on) is closed. `None`: no child, `fd` closed here.
///
/// The child shares this process's memory (`CLONE_VM`, not a fork): a fork of envgit at this
/// point copied ~0.4 ms of page tables, and while the child holds the memory this process's
/// exit does not unmap it; the child's exit does, unwaited for. Its descriptor table is its own.
fn hand_to_child(fd: OwnedFd) -> Option<OwnedFd> {
    let (wait_for, release) = pipe_with(PipeFlags::CLOEXEC).ok()?;
    let stack: &'static mut [u8] = Box::leak(vec![0u8; CLOSER_STACK].into_boxed_slice());
    let fds: &'static [i32; 2] = Box::leak(Box::new([fd.as_raw_fd(), wait_for.as_raw_fd()]));
    // The top of the stack, 16-byte aligned as the ABI wants (stacks grow down).
    let top = (stack.as_mut_ptr() as usize + CLOSER_STACK) & !15;
    // The child starts with every signal blocked: a handler of this process must never run
    // in it, on memory this process still uses.
    let blocked = BlockedSignals::all();
    // SAFETY: `closer` runs on a stack nobody else uses, reads `fds` (leaked, never written
    // again) and makes only system calls that leave this process's memory alone (no errno,
    // no allocation, no lock) until it exits; it never returns into Rust code.
    let pid = unsafe {
        libc::clone(
            closer,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            fds.as_ptr() as *mut libc::c_void,
        )
    };
    drop(blocked);
    (pid > 0).then_some(release)
}

/// This thread's signals blocked until dropped.
struct BlockedSignals(libc::sigset_t);

impl BlockedSignals {
    fn all() -> Self {
        // SAFETY: sigset_t is plain data, filled by sigfillset; the old mask is written into
        // memory we own.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            Self(old)
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `all`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// The child's entry: `arg` points at `[fd, wait_for]`.
extern "C" fn closer(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked pair `hand_to_child` passed, and this is the child.
    unsafe {
        let [fd, wait_for] = *(arg as *const [i32; 2]);
        close_when_released(fd, wait_for)
    }
}

/// The child: every descriptor but `fd` and `wait_for` closed, then `fd` once `wait_for` reads
/// its end (the parent closed its copies, or exited). Raw system calls only: the child shares
/// the parent's memory, errno included, so nothing here may set errno or take a lock.
///
/// # Safety
/// Only in the child `hand_to_child` started, which this ends.
unsafe fn close_when_released(fd: i32, wait_for: i32) -> ! {
    let (low, high) = if fd < wait_for {
        (fd, wait_for)
    } else {
        (wait_for, fd)
    };
    for (first, last) in [(0, low - 1), (low + 1, high - 1), (high + 1, i32::MAX)] {
        if first <= last {
            // SAFETY: closes descriptors this child owns and never uses again; close_range
            // of a valid range does not fail, so errno is left alone.
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
    // SAFETY: `wait_for` is open in this child until it exits.
    let waiting = unsafe { BorrowedFd::borrow_raw(wait_for) };
    // Returns 0 once every write end is closed (rustix's calls never touch errno).
    while let Err(rustix::io::Errno::INTR) = rustix::io::read(waiting, &mut [0u8; 1]) {}
    // SAFETY: `fd` is this child's and nothing uses it after; exit_group ends only this child
    // (no CLONE_THREAD) and runs no destructor.
    unsafe {
        rustix::io::close(fd);
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
        let release = hand_to_child(w).expect("a child");
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
