//! The gate's tokio runtime, started by the first connection. Most steps never reach the
//! network (`ls`, a test run, a build from a warm cache): for them no runtime is built, no
//! worker thread made or joined, and the gate stops at once. Until then one plain thread waits
//! on the listeners; a connection waits in the listener's backlog while the runtime starts
//! (~0.2 ms), then is served as any other.

use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use tokio::sync::Notify;

use crate::approvals::Approvals;
use crate::shared::Shared;

/// What the runtime serves once it starts.
pub(crate) struct Work {
    /// The relay's listener (non-blocking).
    pub listener: UnixListener,
    pub shared: Arc<Shared>,
    pub control: Option<ControlWork>,
    pub shutdown: Arc<Notify>,
}

/// The control channel `envgit status/approve/deny` talk to.
pub(crate) struct ControlWork {
    /// Non-blocking, as the relay's.
    pub listener: UnixListener,
    pub approvals: Arc<Approvals>,
    pub label: Arc<String>,
    pub token: Arc<String>,
}

enum State {
    Waiting(Box<Work>),
    Running(tokio::runtime::Runtime),
    /// Stopped, or the runtime could not be built: the listeners are closed, so a connection
    /// is refused (fails closed).
    Over,
}

/// The listeners, waited on until their first connection, then served by a runtime.
pub(crate) struct Serving {
    state: Arc<Mutex<State>>,
    waiter: Option<JoinHandle<()>>,
    /// Dropped to end the waiter (its end of the pair then reads end-of-file).
    wake: Option<UnixStream>,
}

impl Serving {
    pub(crate) fn start(work: Work) -> io::Result<Serving> {
        let (wake, woken) = UnixStream::pair()?;
        // The waiter polls copies of the listeners' descriptors: the listeners themselves stay
        // in the state, for whoever takes it first (the waiter to serve them, or `stop`).
        let mut watched = vec![work.listener.try_clone()?];
        if let Some(control) = &work.control {
            watched.push(control.listener.try_clone()?);
        }
        let state = Arc::new(Mutex::new(State::Waiting(Box::new(work))));
        let theirs = Arc::clone(&state);
        let waiter = std::thread::Builder::new()
            .name("envgit-gate".into())
            .spawn(move || {
                if wait_for_a_connection(&watched, &woken) {
                    serve(&theirs);
                }
            })?;
        Ok(Serving {
            state,
            waiter: Some(waiter),
            wake: Some(wake),
        })
    }

    /// Whether a connection came and a runtime serves the listeners.
    pub(crate) fn is_serving(&self) -> bool {
        matches!(*self.lock(), State::Running(_))
    }

    /// Ends the waiter or the runtime (connections still open get `grace` to end); the
    /// listeners are closed. Later calls do nothing.
    pub(crate) fn stop(&mut self, grace: Duration) {
        let state = std::mem::replace(&mut *self.lock(), State::Over);
        drop(self.wake.take());
        if let Some(waiter) = self.waiter.take() {
            let _ = waiter.join();
        }
        if let State::Running(runtime) = state {
            runtime.shutdown_timeout(grace);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Waits until one of `listeners` has a connection waiting (true) or `woken` is readable, its
/// other end dropped (false).
fn wait_for_a_connection(listeners: &[UnixListener], woken: &UnixStream) -> bool {
    loop {
        let mut fds: Vec<PollFd<'_>> = listeners
            .iter()
            .map(|l| PollFd::new(l, PollFlags::IN))
            .chain([PollFd::new(woken, PollFlags::IN)])
            .collect();
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => {
                // Out of memory for the poll: back off instead of spinning.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        if ready.last().copied().unwrap_or(true) {
            return false;
        }
        if ready.contains(&true) {
            return true;
        }
    }
}

/// Builds the runtime and hands it the listeners, unless `stop` took them first.
fn serve(state: &Mutex<State>) {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let State::Waiting(work) = std::mem::replace(&mut *state, State::Over) else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("envgit-gate")
        .enable_all()
        .build()
    else {
        // No runtime (out of memory or threads): the listeners close with `work`, and the
        // sandbox's connections are refused.
        return;
    };
    let Work {
        listener,
        shared,
        control,
        shutdown,
    } = *work;
    let served = {
        let _enter = runtime.enter();
        tokio::net::UnixListener::from_std(listener).and_then(|listener| {
            let control = control
                .map(|c| {
                    tokio::net::UnixListener::from_std(c.listener)
                        .map(|l| (l, c.approvals, c.label, c.token))
                })
                .transpose()?;
            Ok((listener, control))
        })
    };
    let Ok((listener, control)) = served else {
        return;
    };
    if let Some((control, approvals, label, token)) = control {
        runtime.spawn(crate::control::serve(
            control,
            approvals,
            label,
            token,
            Arc::clone(&shutdown),
        ));
    }
    runtime.spawn(crate::listener::serve(listener, shared, shutdown));
    *state = State::Running(runtime);
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Arc;

    use crate::{Gate, GateConfig, RunCa};

    fn gate(dir: &std::path::Path) -> Gate {
        Gate::start(GateConfig {
            socket_path: dir.join("gate.sock"),
            token: "t".into(),
            policy: Arc::new(envgit_policy::Policy::default()),
            announce: None,
            ca: Arc::new(RunCa::generate("serving test").unwrap()),
            resolve: Vec::new(),
            upstream_ca_pem: Vec::new(),
            approvals: None,
            credentials: Vec::new(),
            reserved_ports: None,
        })
        .unwrap()
    }

    #[test]
    fn a_gate_nobody_connects_to_builds_no_runtime_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let g = gate(dir.path());
        assert!(!g.is_serving());
        assert!(g.stop().is_empty());
        assert!(!dir.path().join("gate.sock").exists());
    }

    #[test]
    fn the_first_connection_starts_the_runtime_and_is_served() {
        let dir = tempfile::tempdir().unwrap();
        let g = gate(dir.path());
        // No token: the gate answers with a refusal, which proves the connection was served.
        let mut s = std::os::unix::net::UnixStream::connect(dir.path().join("gate.sock")).unwrap();
        s.write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
            .unwrap();
        let mut reply = [0u8; 12];
        s.read_exact(&mut reply).unwrap();
        assert!(reply.starts_with(b"HTTP/1.1 "), "{reply:?}");
        assert!(g.is_serving());
        drop(s);
        g.stop();
        assert!(!dir.path().join("gate.sock").exists());
    }
}
