//! The pty relay: when `envgit run` is started from a terminal, the sandboxed
//! command gets a pseudo-terminal of its own, never the real one, and envgit copies bytes
//! between the two. The sandbox makes that pty on its own devpts and hands envgit the master
//! (`envgit_sandbox::console`), so inside, `tty` names it and it is the command's controlling
//! terminal. The relay also lets envgit itself ask the person on its own terminal when a
//! request is held (`ask`): the question is printed there and, once it has been shown for half
//! a second (`[y/N]` appears then), the next key answers it (`y` lets the request out, anything
//! else refuses it; a key already on its way when the question came does not count), through the same control socket
//! `envgit approve` uses. While a question is open the command's output is held back and shown
//! once it closes (however it closes: here, from another terminal, or by the timeout): a
//! command that keeps printing could otherwise erase the question and draw one of its own
//! over it, and the person's `y` would let out a request they never saw. The question comes
//! with the terminal's attributes reset, so text the command made invisible does not hide it.
//! What the command writes goes through [`TerminalFilter`]: sequences that act on the host
//! (the clipboard, file transfers, a multiplexer's passthrough) never reach the real terminal.
//!
//! The real terminal is put in raw mode while the command runs, as `ssh -t` does: Ctrl-C and
//! Ctrl-Z travel as bytes to the command's pty, whose line discipline signals the command's
//! foreground job (a shell's job control works inside). When the real terminal is resized
//! (SIGWINCH), the pty gets the new size, and the kernel tells the command.

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};

use envgit_gate::{Answer, Approver, AskFuture, ControlOp, PendingAsk, answered_over_control};

use crate::output::escape_controls;
use crate::signal_watch::SignalWatch;
use crate::terminal_filter::TerminalFilter;
use rustix::termios::{OptionalActions, Termios};

/// A pseudo-terminal between the real terminal and the sandbox.
pub struct PtyRelay {
    /// The pty's master, once the sandbox has handed it over ([`PtyRelay::start`]).
    master: Option<OwnedFd>,
    /// The real terminal's modes: the pty starts with them, and they are put back at the end.
    saved: Termios,
    /// Which of envgit's standard input, output and error are the terminal: those become the
    /// pty inside; the others (a pipe, a file) are passed as they are.
    stdio: [bool; 3],
    screen: Arc<Screen>,
    stop: Arc<AtomicBool>,
    output: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Passes window sizes on until dropped.
    resize: Mutex<Option<SignalWatch>>,
}

/// envgit's standard input (0), output (1) or error (2).
fn std_fd(i: usize) -> BorrowedFd<'static> {
    match i {
        0 => rustix::stdio::stdin(),
        1 => rustix::stdio::stdout(),
        _ => rustix::stdio::stderr(),
    }
}

impl PtyRelay {
    /// A relay when any of standard input, output or error is a terminal: the command never
    /// gets the real one, whichever it is. `None` with no terminal at all (pipes, as under an
    /// agent: nothing to protect and nobody to ask).
    pub fn open_if_terminal() -> Option<PtyRelay> {
        let stdio = [0, 1, 2].map(|i| rustix::termios::isatty(std_fd(i)));
        let first = stdio.iter().position(|t| *t)?;
        let saved = rustix::termios::tcgetattr(std_fd(first)).ok()?;
        Some(PtyRelay {
            master: None,
            saved,
            stdio,
            screen: Arc::default(),
            stop: Arc::default(),
            output: Mutex::default(),
            resize: Mutex::default(),
        })
    }

    /// Which of the command's standard input, output and error are its pty.
    pub fn stdio(&self) -> [bool; 3] {
        self.stdio
    }

    /// Whether the person can be asked here: keys come from the terminal and the question
    /// can be shown on it.
    pub fn can_ask(&self) -> bool {
        self.stdio[0] && (self.stdio[1] || self.stdio[2])
    }

    /// The terminal, through whichever of envgit's standard streams it is.
    fn terminal(&self) -> BorrowedFd<'static> {
        std_fd(self.stdio.iter().position(|t| *t).unwrap_or(0))
    }

    /// The approver that asks on this terminal (the gate's requests while the command runs).
    pub fn prompt(&self) -> TerminalPrompt {
        TerminalPrompt {
            screen: Arc::clone(&self.screen),
        }
    }

    /// Takes the sandbox's pty `master`, gives the pty the real terminal's modes and size,
    /// puts the real terminal in raw mode when keys come from it (the pty's own line
    /// discipline does the rest: a `\n` shown as `\r\n` once, not `\r\r\n`) and starts copying.
    /// Keys typed while a question is open answer it over `control_socket` instead of
    /// reaching the pty. What the pty shows goes to envgit's standard output when that is the
    /// terminal, else to its standard error, else to its standard input's terminal.
    pub fn start(&mut self, master: OwnedFd, control_socket: PathBuf) -> std::io::Result<()> {
        let mut modes = self.saved.clone();
        if !self.stdio[0] {
            // The real terminal is not made raw (no keys come from it), so it goes on turning
            // `\n` into `\r\n` itself: the pty must not do it first.
            modes
                .output_modes
                .remove(rustix::termios::OutputModes::OPOST);
        }
        rustix::termios::tcsetattr(&master, OptionalActions::Now, &modes)?;
        if let Ok(size) = rustix::termios::tcgetwinsize(self.terminal()) {
            let _ = rustix::termios::tcsetwinsize(&master, size);
        }
        let out = [1, 2, 0]
            .into_iter()
            .find(|&i| self.stdio[i])
            .map(|i| std_fd(i).try_clone_to_owned())
            .transpose()?
            .map(std::fs::File::from);
        self.screen.lock().out = out;
        if self.stdio[0] {
            let mut raw = self.saved.clone();
            raw.make_raw();
            rustix::termios::tcsetattr(std_fd(0), OptionalActions::Now, &raw)?;
            crate::output::set_terminal_raw(self.stdio[2]);
        }
        let mut from_pty = std::fs::File::from(master.try_clone()?);
        if self.stdio[0] {
            let to_pty = std::fs::File::from(master.try_clone()?);
            self.pass_keys_on(to_pty, control_socket)?;
        }
        self.master = Some(master);
        let screen = Arc::clone(&self.screen);
        let output = std::thread::Builder::new()
            .name("envgit-pty-out".into())
            .spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                let mut filter = TerminalFilter::new();
                let mut shown = Vec::with_capacity(buf.len());
                loop {
                    match from_pty.read(&mut buf) {
                        // A signal (the sandbox's exit) is not the end of the output: what
                        // the command wrote last is still to be shown.
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            shown.clear();
                            filter.feed(&buf[..n], &mut shown);
                            if screen.show_or_hold(&shown).is_err() {
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

    /// Copies the keys typed on the real terminal to the pty, but the one that answers an open
    /// question.
    fn pass_keys_on(
        &self,
        mut to_pty: std::fs::File,
        control_socket: PathBuf,
    ) -> std::io::Result<()> {
        let screen = Arc::clone(&self.screen);
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
                    // A key typed on its own arrives alone; text that comes at once (a paste,
                    // an escape sequence) is not an answer, however it starts: it goes on to
                    // the command as any key does while no question is open.
                    if let [key] = rest {
                        let yes = matches!(key, b'y' | b'Y');
                        if let Some(ask) = screen.take_answer(yes) {
                            rest = &[];
                            answer(&control_socket, &screen, &ask, yes);
                        }
                    }
                    if !rest.is_empty() && to_pty.write_all(rest).is_err() {
                        return;
                    }
                }
            })?;
        Ok(())
    }

    /// Gives the pty the real terminal's size each time it changes.
    fn pass_resizes_on(&self) -> std::io::Result<()> {
        let Some(master) = &self.master else {
            return Ok(());
        };
        let master = master.try_clone()?;
        let terminal = self.terminal();
        let watch = SignalWatch::start(
            &[signal_hook::consts::SIGWINCH],
            "envgit-pty-resize",
            move |_| {
                if let Ok(size) = rustix::termios::tcgetwinsize(terminal) {
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
        // Nothing is held back once the command is over, whatever is still open.
        self.screen.release_all();
        if let Some(output) = self.output.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = output.join();
        }
        self.screen.lock().show(PLAIN.as_bytes()).ok();
        if self.stdio[0] {
            let _ = rustix::termios::tcsetattr(std_fd(0), OptionalActions::Now, &self.saved);
        }
        crate::output::set_terminal_raw(false);
    }
}

/// Asks on envgit's own terminal: the question is printed there and, once `[y/N]` shows
/// ([`ARMING`]), the next key answers it over the control socket (see [`PtyRelay::start`]).
pub struct TerminalPrompt {
    screen: Arc<Screen>,
}

impl Approver for TerminalPrompt {
    fn ask<'a>(&'a self, ask: &'a PendingAsk) -> AskFuture<'a> {
        {
            // From here the command's output is held back.
            let mut state = self.screen.lock();
            state.open.push(ask.clone());
            let _ = state.show(
                format!(
                    "{PLAIN}{LINE}envgit: let {} {}{} out? (rule {}) {}{LINE}",
                    ask.method,
                    escape_controls(&ask.host),
                    escape_controls(&ask.path),
                    ask.rule,
                    escape_controls(&ask.summary)
                )
                .as_bytes(),
            );
        }
        // A key counts only once the person could have read the question: one already on its
        // way (meant for a question the command printed just before) must not answer it.
        let screen = Arc::clone(&self.screen);
        let id = ask.id;
        let _ = std::thread::Builder::new()
            .name("envgit-ask-arm".into())
            .spawn(move || {
                std::thread::sleep(ARMING);
                let mut state = screen.lock();
                if state.open.iter().any(|a| a.id == id) {
                    state.armed.push(id);
                    let _ = state.show(b"  [y/N] ");
                }
            });
        Box::pin(OpenQuestion {
            answer: answered_over_control(),
            screen: Arc::clone(&self.screen),
            id: ask.id,
        })
    }
}

/// Text drawn as text, whatever the command left the terminal in (the relay keeps it from
/// changing the colours themselves, `terminal_filter.rs`): every attribute back to the
/// default (`SGR 0`: nothing invisible, blinking or in the background's colour); ASCII in G0
/// and G1 and G0 shifted in (the line-drawing set turns letters into box lines); normal video;
/// autowrap (without it the end of a long line, the rule and what the request does, is drawn
/// over in the last column). Before the question, and once the command is over, before
/// envgit's own report.
const PLAIN: &str = "\x1b[0m\x0f\x1b(B\x1b)B\x1b[?5l\x1b[?7h";

/// A new line of envgit's, single-width (`DECSWL`): the command may have made the lines below
/// the cursor double-width, which shows half of a line.
const LINE: &str = "\r\n\x1b#5";

/// How long a question is shown before a key answers it (`[y/N]` then appears), as a
/// browser's security dialog waits before its buttons work.
const ARMING: std::time::Duration = std::time::Duration::from_millis(500);

/// How much of the command's output is held while a question is open; past it the command
/// waits to write, as it would on a slow terminal.
const HOLD_MAX: usize = 1 << 20;

/// What the relay shows on the real terminal, and holds back while a question is open.
#[derive(Default)]
struct Screen {
    state: Mutex<ScreenState>,
    /// Signalled when the held output has been shown.
    room: Condvar,
}

#[derive(Default)]
struct ScreenState {
    /// The questions open on this terminal; a key answers the last one not yet answered.
    open: Vec<PendingAsk>,
    /// How the person answered here, by ask id, until the question closes.
    answered: Vec<(u64, bool)>,
    /// The questions a key may answer now ([`ARMING`]).
    armed: Vec<u64>,
    /// The command's output that came while a question was open.
    held: Vec<u8>,
    /// The command is over: nothing is held any more.
    released: bool,
    /// Where the terminal is written: envgit's standard output, error or input, whichever is
    /// the terminal first ([`PtyRelay::start`]).
    out: Option<std::fs::File>,
}

impl Screen {
    fn lock(&self) -> MutexGuard<'_, ScreenState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The command's `bytes`: shown now, or held while a question is open (waiting for room
    /// when the hold is full). `Err` when the real terminal is gone.
    fn show_or_hold(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut state = self.lock();
        while state.holding() && state.held.len() >= HOLD_MAX {
            state = self.room.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        if state.holding() {
            state.held.extend_from_slice(bytes);
            return Ok(());
        }
        state.show(bytes)
    }

    /// The question a key answers (the last open one shown long enough and not answered here
    /// yet), marked answered.
    fn take_answer(&self, yes: bool) -> Option<PendingAsk> {
        let mut state = self.lock();
        let ask = state
            .open
            .iter()
            .rev()
            .filter(|a| state.armed.contains(&a.id))
            .find(|a| !state.answered.iter().any(|(id, _)| *id == a.id))?
            .clone();
        state.answered.push((ask.id, yes));
        Some(ask)
    }

    /// Question `id` closed (answered anywhere, or timed out): says how, and once no question
    /// is open shows what the command wrote meanwhile.
    fn close(&self, id: u64) {
        let mut state = self.lock();
        let Some(at) = state.open.iter().position(|a| a.id == id) else {
            return;
        };
        state.open.remove(at);
        state.armed.retain(|a| *a != id);
        let how = match state.answered.iter().position(|(a, _)| *a == id) {
            Some(i) if state.answered.remove(i).1 => "y: let out",
            Some(_) => "n: refused",
            None => "envgit: the question was answered elsewhere or timed out",
        };
        let _ = state.show(format!("{how}\r\n").as_bytes());
        if !state.holding() {
            let held = std::mem::take(&mut state.held);
            let _ = state.show(&held);
        }
        self.room.notify_all();
    }

    /// Shows everything held and holds nothing from now on.
    fn release_all(&self) {
        let mut state = self.lock();
        state.released = true;
        let held = std::mem::take(&mut state.held);
        let _ = state.show(&held);
        self.room.notify_all();
    }
}

impl ScreenState {
    fn holding(&self) -> bool {
        !self.open.is_empty() && !self.released
    }

    /// Writes `bytes` to the real terminal (nowhere when no output stream is one).
    fn show(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.out {
            Some(out) => out.write_all(bytes),
            None => Ok(()),
        }
    }
}

/// An open question's answer: the gate drops it when the question closes, however it closes,
/// and then the terminal shows how and what was held back.
struct OpenQuestion<'a> {
    answer: AskFuture<'a>,
    screen: Arc<Screen>,
    id: u64,
}

impl Future for OpenQuestion<'_> {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        self.answer.as_mut().poll(cx)
    }
}

impl Drop for OpenQuestion<'_> {
    fn drop(&mut self) {
        self.screen.close(self.id);
    }
}

impl Drop for PtyRelay {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Sends the person's answer to `ask`; the line saying it is printed when the question
/// closes ([`Screen::close`]). A failure is said at once and the question stays open.
fn answer(control_socket: &std::path::Path, screen: &Screen, ask: &PendingAsk, yes: bool) {
    // The gate records who answered from the connection (envgit itself: this terminal).
    let req = if yes {
        ControlOp::Approve { id: Some(ask.id) }
    } else {
        ControlOp::Deny { id: Some(ask.id) }
    };
    if let Err(e) = envgit_gate::control_request(control_socket, req) {
        let mut state = screen.lock();
        state.answered.retain(|(id, _)| *id != ask.id);
        let _ = state.show(format!("envgit: could not answer: {e}\r\n  [y/N] ").as_bytes());
    }
}
