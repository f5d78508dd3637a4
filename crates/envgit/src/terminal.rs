//! The pty relay: when `envgit run` is started from a terminal, the sandboxed
//! command gets a pseudo-terminal of its own, never the real one, and envgit copies bytes
//! between the two. The sandbox makes that pty on its own devpts and hands envgit the master
//! (`envgit_sandbox::console`), so inside, `tty` names it and it is the command's controlling
//! terminal. The relay also lets envgit itself ask the person on its own terminal when a
//! request is held (`ask`): the question is printed there and the next key answers it (`y`
//! lets the request out, anything else refuses it), through the same control socket
//! `envgit approve` uses.
//!
//! The real terminal is put in raw mode while the command runs, as `ssh -t` does: Ctrl-C and
//! Ctrl-Z travel as bytes to the command's pty, whose line discipline signals the command's
//! foreground job (a shell's job control works inside). When the real terminal is resized
//! (SIGWINCH), the pty gets the new size, and the kernel tells the command.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use envgit_gate::{Approver, AskFuture, ControlOp, PendingAsk, answered_over_control};

use crate::signal_watch::SignalWatch;
use rustix::termios::{OptionalActions, Termios};

/// A pseudo-terminal between the real terminal and the sandbox.
pub struct PtyRelay {
    /// The pty's master, once the sandbox has handed it over ([`PtyRelay::start`]).
    master: Option<OwnedFd>,
    /// The real terminal's modes: the pty starts with them, and they are put back at the end.
    saved: Termios,
    asks: Arc<Mutex<Vec<PendingAsk>>>,
    stop: Arc<AtomicBool>,
    output: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Passes window sizes on until dropped.
    resize: Mutex<Option<SignalWatch>>,
}

impl PtyRelay {
    /// A relay when standard input and output are both terminals; `None` otherwise (pipes, as
    /// under an agent: nothing to protect and nobody to ask).
    pub fn open_if_terminal() -> Option<PtyRelay> {
        let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
        if !rustix::termios::isatty(stdin.as_fd()) || !rustix::termios::isatty(stdout.as_fd()) {
            return None;
        }
        let saved = rustix::termios::tcgetattr(stdin.as_fd()).ok()?;
        Some(PtyRelay {
            master: None,
            saved,
            asks: Arc::default(),
            stop: Arc::default(),
            output: Mutex::default(),
            resize: Mutex::default(),
        })
    }

    /// The approver that asks on this terminal (the gate's requests while the command runs).
    pub fn prompt(&self) -> TerminalPrompt {
        TerminalPrompt {
            asks: Arc::clone(&self.asks),
        }
    }

    /// Takes the sandbox's pty `master`, gives the pty the real terminal's modes and size,
    /// puts the real terminal in raw mode (the pty's own line discipline does the rest: a
    /// `\n` shown as `\r\n` once, not `\r\r\n`) and starts copying. Keys typed while a
    /// question is open answer it over `control_socket` instead of reaching the pty.
    pub fn start(&mut self, master: OwnedFd, control_socket: PathBuf) -> std::io::Result<()> {
        rustix::termios::tcsetattr(&master, OptionalActions::Now, &self.saved)?;
        if let Ok(size) = rustix::termios::tcgetwinsize(std::io::stdout().as_fd()) {
            let _ = rustix::termios::tcsetwinsize(&master, size);
        }
        let mut raw = self.saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(std::io::stdin().as_fd(), OptionalActions::Now, &raw)?;
        crate::output::set_terminal_raw(true);
        let mut to_pty = std::fs::File::from(master.try_clone()?);
        let mut from_pty = std::fs::File::from(master.try_clone()?);
        self.master = Some(master);
        let asks = Arc::clone(&self.asks);
        let stop = Arc::clone(&self.stop);
        std::thread::Builder::new()
            .name("envgit-pty-in".into())
            .spawn(move || {
                let mut stdin = std::io::stdin();
                let mut byte = [0u8; 1024];
                while !stop.load(Ordering::Relaxed) {
                    let n = match stdin.read(&mut byte) {
                        // A signal to this thread is not the end of the input.
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let mut rest = &byte[..n];
                    let open = asks.lock().unwrap_or_else(|p| p.into_inner()).pop();
                    if let Some(ask) = open {
                        let yes = matches!(rest.first(), Some(b'y' | b'Y'));
                        rest = &rest[1..];
                        answer(&control_socket, &ask, yes);
                    }
                    if !rest.is_empty() && to_pty.write_all(rest).is_err() {
                        return;
                    }
                }
            })?;
        let output = std::thread::Builder::new()
            .name("envgit-pty-out".into())
            .spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                loop {
                    match from_pty.read(&mut buf) {
                        // A signal (the sandbox's exit) is not the end of the output: what
                        // the command wrote last is still to be shown.
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            let mut out = std::io::stdout().lock();
                            if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                                return;
                            }
                        }
                    }
                }
            })?;
        *self.output.lock().unwrap_or_else(|p| p.into_inner()) = Some(output);
        self.pass_resizes_on()?;
        Ok(())
    }

    /// Gives the pty the real terminal's size each time it changes.
    fn pass_resizes_on(&self) -> std::io::Result<()> {
        let Some(master) = &self.master else {
            return Ok(());
        };
        let master = master.try_clone()?;
        let watch = SignalWatch::start(
            signal_hook::consts::SIGWINCH,
            "envgit-pty-resize",
            move || {
                if let Ok(size) = rustix::termios::tcgetwinsize(std::io::stdout().as_fd()) {
                    let _ = rustix::termios::tcsetwinsize(&master, size);
                }
            },
        )?;
        *self.resize.lock().unwrap_or_else(|p| p.into_inner()) = Some(watch);
        Ok(())
    }

    /// Waits for the sandbox's last output, then gives the real terminal back as it was.
    pub fn finish(&self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.resize.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(output) = self.output.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = output.join();
        }
        let _ =
            rustix::termios::tcsetattr(std::io::stdin().as_fd(), OptionalActions::Now, &self.saved);
        crate::output::set_terminal_raw(false);
    }
}

/// Asks on envgit's own terminal: the question is printed there and the next key answers it,
/// over the control socket (see [`PtyRelay::start`]).
pub struct TerminalPrompt {
    asks: Arc<Mutex<Vec<PendingAsk>>>,
}

impl Approver for TerminalPrompt {
    fn ask<'a>(&'a self, ask: &'a PendingAsk) -> AskFuture<'a> {
        // Open before it is shown: a key pressed the moment the question appears answers it.
        self.asks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ask.clone());
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "\r\nenvgit: let {} {}{} out? (rule {}) {}\r\n  [y/N] ",
            ask.method, ask.host, ask.path, ask.rule, ask.summary
        );
        let _ = out.flush();
        answered_over_control()
    }
}

impl Drop for PtyRelay {
    fn drop(&mut self) {
        self.finish();
    }
}

fn answer(control_socket: &std::path::Path, ask: &PendingAsk, yes: bool) {
    // The gate records who answered from the connection (envgit itself: this terminal).
    let req = if yes {
        ControlOp::Approve { id: Some(ask.id) }
    } else {
        ControlOp::Deny { id: Some(ask.id) }
    };
    let said = if yes { "y: let out" } else { "n: refused" };
    let sent = envgit_gate::control_request(control_socket, req);
    let mut out = std::io::stdout().lock();
    let _ = match sent {
        Ok(_) => write!(out, "{said}\r\n"),
        Err(e) => write!(out, "envgit: could not answer: {e}\r\n"),
    };
    let _ = out.flush();
}
