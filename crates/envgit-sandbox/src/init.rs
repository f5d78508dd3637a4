//! PID 1 of the sandbox: starts the command, forwards signals to it, reaps every orphan, and
//! when the command ends, ends everything else in the namespace, reaps it, and tells the
//! sandbox process the command's status before it exits itself.

use std::os::fd::{AsRawFd, OwnedFd};

use rustix::io::Errno;
use rustix::process::WaitOptions;

use crate::sys;

/// Wait for `worker`; returns the exit code to report (128 + signal for a signal death).
pub fn supervise(worker: i32) -> i32 {
    let _ = sys::forward_signals_to(worker);
    loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((pid, status))) => {
                if pid.as_raw_nonzero().get() == worker {
                    let code = if let Some(c) = status.exit_status() {
                        c
                    } else if let Some(s) = status.terminating_signal() {
                        128 + s
                    } else {
                        1
                    };
                    // Background processes die with the step's sandbox.
                    sys::kill_everyone_else();
                    return code;
                }
            }
            Ok(None) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return 1,
        }
    }
}

/// After the command ended and `supervise` killed everything else: reap every process left in
/// the namespace (orphans come to PID 1), so that nothing of the step runs or writes any more;
/// then write `code` on `verdict` and wait until `release` ends (the sandbox process exited).
///
/// Why PID 1 stays: the mount namespace (and the IPC, UTS, network and user ones) dies with
/// its last process, and that exit waits in the kernel for the unmounts and an RCU grace
/// period: 1.5-2.1 ms a step here, once 237 ms. Whichever of PID 1 and the sandbox process
/// exits last pays it; envgit waits for the sandbox process, so PID 1 goes last, unwaited for.
pub fn report_and_linger(code: i32, verdict: OwnedFd, release: OwnedFd) -> ! {
    sys::kill_everyone_else();
    // Until no child is left (ECHILD): every process of the namespace is then gone.
    while let Ok(Some(_)) | Err(Errno::INTR) = rustix::process::wait(WaitOptions::empty()) {}
    // Nothing of the step's stays open here: the terminal, stdout and the channels end now.
    sys::close_fds_except(&[verdict.as_raw_fd(), release.as_raw_fd()]);
    for fd in 0..3 {
        // SAFETY: closing the standard descriptors this process owns; nothing uses them after.
        unsafe {
            libc::close(fd);
        }
    }
    let _ = rustix::io::write(&verdict, &code.to_le_bytes());
    drop(verdict);
    let mut byte = [0u8; 1];
    while let Err(Errno::INTR) = rustix::io::read(&release, &mut byte) {}
    std::process::exit(code)
}

/// A code written on a pipe as four little-endian bytes (PID 1's verdict, the sandbox
/// process's exit code on its `done` pipe), or `None` if the writer ended without one.
pub fn read_verdict(verdict: OwnedFd) -> Option<i32> {
    let mut bytes = [0u8; 4];
    let mut got = 0;
    while got < bytes.len() {
        match rustix::io::read(&verdict, &mut bytes[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(_) => return None,
        }
    }
    Some(i32::from_le_bytes(bytes))
}
