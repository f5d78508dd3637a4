//! History output through a pager on a terminal, as git does: `$ENVGIT_PAGER`, else `$PAGER`,
//! else `less` with `LESS=FRX` when `LESS` is unset (quit if one screen, keep colours, leave
//! the screen as it was). Spawned through `sh -c` like git, so `PAGER="less -S"` works.

use std::io::{IsTerminal, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

static DISABLED: AtomicBool = AtomicBool::new(false);

/// `--no-pager`: set once from the command line.
pub fn disable(off: bool) {
    DISABLED.store(off, Ordering::Relaxed);
}

fn command() -> Option<String> {
    let pick = std::env::var("ENVGIT_PAGER")
        .ok()
        .or_else(|| std::env::var("PAGER").ok())
        .unwrap_or_else(|| "less".into());
    // git's convention: an empty pager or `cat` means none.
    let pick = pick.trim().to_string();
    (!pick.is_empty() && pick != "cat").then_some(pick)
}

/// Show `text`: through the pager when stdout is a terminal, else as [`crate::output::print`].
/// The user quitting the pager early is not an error.
pub fn page(text: &str) -> std::io::Result<()> {
    let wanted = !DISABLED.load(Ordering::Relaxed) && std::io::stdout().is_terminal();
    let Some(cmd) = command().filter(|_| wanted) else {
        return crate::output::print(text);
    };
    let mut c = Command::new("sh");
    c.arg("-c").arg(&cmd).stdin(Stdio::piped());
    if std::env::var_os("LESS").is_none() {
        c.env("LESS", "FRX");
    }
    let mut child = match c.spawn() {
        Ok(child) => child,
        // No shell to start it: the text still reaches the terminal.
        Err(_) => return crate::output::print(text),
    };
    if let Some(mut stdin) = child.stdin.take() {
        match stdin.write_all(text.as_bytes()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e),
            _ => {}
        }
    }
    child.wait()?;
    Ok(())
}
