//! A thread that runs a callback each time one of its signals arrives, until dropped (SIGWINCH
//! for the pty relay, SIGTERM for `envgit mcp`, SIGTERM and SIGHUP for a step).

use signal_hook::iterator::{Handle, Signals};

pub(crate) struct SignalWatch(Handle);

impl SignalWatch {
    /// One thread for all of `signals`: `each` is told which one came.
    pub fn start(
        signals: &[i32],
        name: &str,
        mut each: impl FnMut(i32) + Send + 'static,
    ) -> std::io::Result<SignalWatch> {
        let mut signals = Signals::new(signals)?;
        let handle = signals.handle();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for signal in signals.forever() {
                    each(signal);
                }
            })?;
        Ok(SignalWatch(handle))
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.0.close();
    }
}
