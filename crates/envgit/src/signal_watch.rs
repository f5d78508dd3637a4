//! A thread that runs a callback each time a signal arrives, until dropped (SIGWINCH for the pty
//! relay, SIGTERM for `envgit mcp`).

use signal_hook::iterator::{Handle, Signals};

pub(crate) struct SignalWatch(Handle);

impl SignalWatch {
    pub fn start(
        signal: i32,
        name: &str,
        mut each: impl FnMut() + Send + 'static,
    ) -> std::io::Result<SignalWatch> {
        let mut signals = Signals::new([signal])?;
        let handle = signals.handle();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for _ in signals.forever() {
                    each();
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
