//! What a one-shot run leaves to a child after this process has gone: the last close of a
//! descriptor whose close waits in the kernel, and the removal of the run's cgroups.
//!
//! The last close of an inotify instance waits for an SRCU grace period before the kernel frees
//! its watches (0.2–25 ms measured here, whatever the number of watches), and a process's exit
//! waits for the closes of its descriptors: a one-shot `envgit run`, whose working tree is
//! watched during the step, spent ~11 ms (p50) ending after its work was done. The run's
//! cgroups can be removed only once the sandbox's PID 1 has left them, at the end of its exit,
//! after the teardown of the sandbox's namespaces (1.5–2 ms): waiting for that kept a step
//! 0.3–0.7 ms. A child does both instead; nobody waits for it (it is reparented and reaped when
//! envgit has gone).

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use rustix::io::Errno;
use rustix::pipe::{PipeFlags, pipe_with};

/// Closes `fd` in a child of its own, after this process has closed its own copy, and removes
/// the cgroups left to it ([`crate::limits::RunLimits::remove_after_exit`]) once they are
/// empty: the caller (and its exit) never waits for either. Falls back to doing both here when
/// no child can be started. Only for a descriptor whose close has no effect anyone waits for
/// (an inotify instance); the child keeps nothing else open, standard output and error
/// included, so a reader of envgit's output sees its end as envgit exits.
pub fn close_detached(fd: OwnedFd) {
    let cgroups = crate::limits::take_after_exit();
    match hand_to_child(fd, &cgroups) {
        Some(release) => drop(release),
        None => crate::limits::remove_dirs(&cgroups),
    }
}

/// The closer's stack. It runs in this process's memory, so the stack is leaked: this process
/// makes one closer, as it ends.
const CLOSER_STACK: usize = 64 << 10;

/// What the child is given, leaked: it reads it after this process has gone.
struct Leftovers {
    fd: i32,
    wait_for: i32,
    cgroups: &'static [&'static CStr],
}

/// Starts the child that will close `fd` and remove `cgroups`, and closes this process's copy
/// of `fd`. The child closes everything else at once, removes the cgroups, and closes `fd`
/// when the returned descriptor (the write end of a pipe it waits on) is closed. `None`: no
/// child, `fd` closed here.
///
/// The child shares this process's memory (`CLONE_VM`, not a fork): a fork of envgit at this
/// point copied ~0.4 ms of page tables, and while the child holds the memory this process's
/// exit does not unmap it; the child's exit does, unwaited for. Its descriptor table is its own.
fn hand_to_child(fd: OwnedFd, cgroups: &[PathBuf]) -> Option<OwnedFd> {
    let (wait_for, release) = pipe_with(PipeFlags::CLOEXEC).ok()?;
    let stack: &'static mut [u8] = Box::leak(vec![0u8; CLOSER_STACK].into_boxed_slice());
    let cgroups: Vec<&'static CStr> = cgroups
        .iter()
        .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
        .map(|c| &*Box::leak(c.into_boxed_c_str()))
        .collect();
    let leftovers: &'static Leftovers = Box::leak(Box::new(Leftovers {
        fd: fd.as_raw_fd(),
        wait_for: wait_for.as_raw_fd(),
        cgroups: Box::leak(cgroups.into_boxed_slice()),
    }));
    // The top of the stack, 16-byte aligned as the ABI wants (stacks grow down).
    let top = (stack.as_mut_ptr() as usize + CLOSER_STACK) & !15;
    // The child starts with every signal blocked: a handler of this process must never run
    // in it, on memory this process still uses.
    let blocked = BlockedSignals::all();
    // SAFETY: `closer` runs on a stack nobody else uses, reads `leftovers` (leaked, never
    // written again) and makes only system calls that leave this process's memory alone (no
    // errno, no allocation, no lock) until it exits; it never returns into Rust code.
    let pid = unsafe {
        libc::clone(
            closer,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::SIGCHLD,
            leftovers as *const Leftovers as *mut libc::c_void,
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

/// The child's entry: `arg` points at the leaked [`Leftovers`].
extern "C" fn closer(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked `Leftovers` `hand_to_child` passed, and this is the child.
    unsafe { finish(&*(arg as *const Leftovers)) }
}

/// The child: every descriptor but `fd` and `wait_for` closed, the cgroups removed, then `fd`
/// closed once `wait_for` reads its end (the parent closed its copies, or exited). Raw system
/// calls only (rustix's, which never touch errno): the child shares the parent's memory, errno
/// included, so nothing here may set errno, allocate or take a lock.
///
/// # Safety
/// Only in the child `hand_to_child` started, which this ends.
unsafe fn finish(leftovers: &Leftovers) -> ! {
    let Leftovers {
        fd,
        wait_for,
        cgroups,
    } = *leftovers;
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
    for dir in cgroups {
        remove_when_empty(dir);
    }
    // SAFETY: `wait_for` is open in this child until it exits.
    let waiting = unsafe { BorrowedFd::borrow_raw(wait_for) };
    // Returns 0 once every write end is closed.
    while let Err(Errno::INTR) = rustix::io::read(waiting, &mut [0u8; 1]) {}
    // SAFETY: `fd` is this child's and nothing uses it after; exit_group ends only this child
    // (no CLONE_THREAD) and runs no destructor.
    unsafe {
        rustix::io::close(fd);
        libc::_exit(0)
    }
}

/// Removes the (cgroup) directory `dir` once it is empty: the kernel refuses while a process
/// is in it (`EBUSY`). Given up on after [`crate::limits::REMOVE_TRIES`] tries a millisecond
/// apart, as the in-process removal is.
fn remove_when_empty(dir: &CStr) {
    let a_millisecond = rustix::thread::Timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..crate::limits::REMOVE_TRIES {
        match rustix::fs::unlinkat(rustix::fs::CWD, dir, rustix::fs::AtFlags::REMOVEDIR) {
            Err(Errno::BUSY | Errno::NOTEMPTY) => {
                let _ = rustix::thread::nanosleep(&a_millisecond);
            }
            _ => return,
        }
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
        let release = hand_to_child(w, &[]).expect("a child");
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

    /// The run's cgroups are removed by the child once they are empty (a directory with a
    /// file in it stands for a cgroup with a process in it), without waiting for this
    /// process to let go.
    #[test]
    fn the_child_removes_the_directories_once_they_are_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let (busy, empty) = (tmp.path().join("busy"), tmp.path().join("empty"));
        for dir in [&busy, &empty] {
            std::fs::create_dir(dir).unwrap();
        }
        std::fs::write(busy.join("task"), b"").unwrap();
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).unwrap();
        let release = hand_to_child(w, &[busy.clone(), empty.clone()]).expect("a child");
        std::fs::remove_file(busy.join("task")).unwrap();
        // Bounded (10 s), not timed: the child tries every millisecond.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while (busy.exists() || empty.exists()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!busy.exists(), "the directory once busy was never removed");
        assert!(!empty.exists(), "the empty directory was never removed");
        assert!(!closed_now(&r), "the child let go before it was released");
        drop(release);
        assert!(
            writers_all_closed(&r),
            "the child never closed the descriptor"
        );
    }
}
