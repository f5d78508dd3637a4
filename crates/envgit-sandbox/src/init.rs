//! PID 1 of the sandbox: starts the command, forwards signals to it, reaps every orphan, and
//! when the command ends, ends everything else in the namespace and exits with its status.

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
