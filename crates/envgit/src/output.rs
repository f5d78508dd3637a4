//! Printing: envgit's own messages on stderr, data on stdout; colour only on a terminal and
//! never with NO_COLOR.

use std::borrow::Cow;
use std::io::IsTerminal;

use envgit_store::{ChangeKind, Step, StepFlag};

fn colour_on(stream_is_tty: bool) -> bool {
    stream_is_tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Text from a step (a file name, a command line, a directory, a note: the agent's text) as a
/// terminal may be given it: every control character escaped ([`envgit_policy::escape_controls`]).
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    envgit_policy::escape_controls(text, &[])
}

/// How text is rendered on one stream: colour, and, on a terminal, a file's own control
/// characters escaped (a diff shows the agent's file content).
pub struct Style {
    on: bool,
    terminal: bool,
}

impl Style {
    /// No colour whatever the terminal (text that goes into JSON).
    pub fn plain() -> Self {
        Self {
            on: false,
            terminal: false,
        }
    }
    pub fn stdout() -> Self {
        let terminal = std::io::stdout().is_terminal();
        Self {
            on: colour_on(terminal),
            terminal,
        }
    }
    pub fn stderr() -> Self {
        let terminal = std::io::stderr().is_terminal();
        Self {
            on: colour_on(terminal),
            terminal,
        }
    }
    /// A line of a file as this stream may be given it: on a terminal its control characters
    /// but tabs escaped (the file is the agent's), elsewhere exact (a patch stays a patch).
    pub fn file_line<'t>(&self, line: &'t str) -> Cow<'t, str> {
        if self.terminal {
            envgit_policy::escape_controls(line, &['\t'])
        } else {
            Cow::Borrowed(line)
        }
    }
    fn paint(&self, code: &str, s: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    pub fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }
    pub fn red(&self, s: &str) -> String {
        self.paint("31", s)
    }
    pub fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
    pub fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }
}

/// While the pty relay runs, the real terminal does no output processing (the command's pty
/// already turned its `\n` into `\r\n` once): envgit's own lines then end in `\r\n` itself.
static TERMINAL_RAW: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says whether the real terminal is in raw output mode (set by the pty relay).
pub fn set_terminal_raw(raw: bool) {
    TERMINAL_RAW.store(raw, std::sync::atomic::Ordering::SeqCst);
}

/// One line of envgit's own on stderr, ended as the terminal needs it now.
fn line(text: &str) {
    if TERMINAL_RAW.load(std::sync::atomic::Ordering::SeqCst) {
        eprint!("{}\r\n", text.replace('\n', "\r\n"));
    } else {
        eprintln!("{text}");
    }
}

/// One of envgit's messages as the terminal is given it: every control character escaped but
/// the message's own newlines (a path it names is the agent's, [`escape_controls`]).
fn message_text(msg: &str) -> Cow<'_, str> {
    envgit_policy::escape_controls(msg, &['\n'])
}

/// `s` as a POSIX shell word, so a command envgit prints (a fix, a transcript line, a hook's
/// command) can be pasted or run as it is: bare when it holds only safe characters, else in
/// single quotes.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

pub fn error(msg: &str) {
    let s = Style::stderr();
    line(&format!("{} {}", s.red("envgit:"), message_text(msg)));
}

pub fn warn(msg: &str) {
    let s = Style::stderr();
    line(&format!("{} {}", s.yellow("warning:"), message_text(msg)));
}

pub fn note(msg: &str) {
    line(&message_text(msg));
}

pub fn json<T: serde::Serialize>(value: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    text.push('\n');
    print(&text)
}

/// The exit code when stdout's reader went away (`envgit log | head`): what a shell reports for
/// a process ended by SIGPIPE (git and coreutils in the same pipeline), with no message.
pub const BROKEN_PIPE_EXIT: i32 = 141;

/// Write data to stdout. A reader that went away (EPIPE) ends envgit quietly with
/// [`BROKEN_PIPE_EXIT`]; any other failure (a full disk behind a redirect) is returned.
pub fn print(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => broken_pipe(),
        r => r,
    }
}

fn broken_pipe() -> ! {
    std::process::exit(BROKEN_PIPE_EXIT)
}

/// For output that still goes through `print!`/`println!` (which panic when stdout's reader
/// went away): that panic ends envgit quietly with [`BROKEN_PIPE_EXIT`] instead of a message
/// and a backtrace. Every other panic is reported as before. Installed once, first thing in
/// `main`.
pub fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        let epipe = format!("(os error {})", rustix::io::Errno::PIPE.raw_os_error());
        if msg.starts_with("failed printing to stdout") && msg.contains(&epipe) {
            broken_pipe();
        }
        default(info);
    }));
}

/// At most five changed paths, those outside `.git` first, then `.git (+k)`.
pub fn changed_files(step: &Step) -> String {
    const MAX: usize = 5;
    let is_git = |p: &str| p == ".git" || p.starts_with(".git/");
    let outside: Vec<&str> = step
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .filter(|p| !is_git(p))
        .collect();
    let kept_git = step.changes.iter().filter(|c| is_git(&c.path)).count() as u64;
    let total = step.changes_total.added + step.changes_total.modified + step.changes_total.deleted;
    // Older records say that they were cut, not by how much.
    let omitted = match (step.changes_truncated, step.changes_omitted) {
        (true, 0) => total.saturating_sub(step.changes.len() as u64),
        (_, n) => n,
    };
    // A record keeps the project's changes before `.git`'s: once a kept one is under `.git`,
    // every change cut off is too. Otherwise the cut-off ones could be either, and are counted
    // with the project's as "more".
    let (git_count, unnamed) = if kept_git > 0 {
        (kept_git + omitted, 0)
    } else {
        (0, omitted)
    };
    let mut parts: Vec<String> = Vec::new();
    let shown = outside.len().min(if git_count > 0 { MAX - 1 } else { MAX });
    for c in step.changes.iter().filter(|c| !is_git(&c.path)).take(shown) {
        let sign = match c.change {
            ChangeKind::Added => "+",
            ChangeKind::Modified => "",
            ChangeKind::Deleted => "-",
        };
        parts.push(format!("{sign}{}", escape_controls(&c.path)));
    }
    let rest = (outside.len() - shown) as u64 + unnamed;
    if rest > 0 {
        parts.push(format!("(+{rest} more)"));
    }
    if git_count > 0 {
        parts.push(format!(".git (+{git_count})"));
    }
    if parts.is_empty() {
        return "no changes".into();
    }
    parts.join(", ")
}

pub fn flag_names(step: &Step) -> Vec<&'static str> {
    step.flags
        .iter()
        .map(|f| match f {
            StepFlag::Overlapped => "overlapped",
            StepFlag::ProtectedRestored => "protected-restored",
            StepFlag::GitDropped => "git-dropped",
            StepFlag::WatcherFallback => "watcher-fallback",
            StepFlag::UnstableFiles => "unstable-files",
            StepFlag::Pruned => "pruned",
            StepFlag::Irreversible => "irreversible",
            StepFlag::Purged => "purged",
            StepFlag::LowReturn => "low-return",
            StepFlag::Outside => "outside",
        })
        .collect()
}

pub fn time(ms: u64) -> String {
    match jiff::Timestamp::from_millisecond(ms as i64) {
        Ok(ts) => ts
            .to_zoned_datetime(jiff::tz::TimeZone::system())
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string(),
        Err(_) => ms.to_string(),
    }
}

pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::{changed_files, shell_quote};
    use envgit_store::Step;

    #[test]
    fn a_word_is_quoted_only_when_the_shell_would_read_it_otherwise() {
        assert_eq!(shell_quote("/work/a-b_c.d"), "/work/a-b_c.d");
        assert_eq!(shell_quote("/work/it's here"), "'/work/it'\\''s here'");
        assert_eq!(shell_quote("a*b"), "'a*b'");
        assert_eq!(shell_quote(""), "''");
    }

    /// A step record with `kept` project files and `kept_git` files under `.git` kept, of
    /// `total` changes in all.
    fn step(kept: usize, kept_git: usize, total: u64, omitted: Option<u64>) -> Step {
        let mut changes: Vec<serde_json::Value> = (0..kept)
            .map(|i| serde_json::json!({"path": format!("src/f{i}"), "change": "modified", "entry": "file"}))
            .collect();
        changes.extend((0..kept_git).map(|i| {
            serde_json::json!({"path": format!(".git/objects/o{i}"), "change": "modified", "entry": "file"})
        }));
        let shown = (kept + kept_git) as u64;
        let mut record = serde_json::json!({
            "number": 2, "kind": "record", "parent": 1, "started_at_ms": 0, "ended_at_ms": 0,
            "tree": null, "summary": "", "changes": changes,
            "changes_total": {"added": total, "modified": 0, "deleted": 0, "bytes_written": 0},
            "changes_truncated": total > shown,
        });
        if let Some(n) = omitted {
            record["changes_omitted"] = n.into();
        }
        serde_json::from_value(record).expect("a step record")
    }

    #[test]
    fn changes_cut_off_after_project_files_are_not_called_git() {
        // 200 project files kept of 100,001: what was cut off is not known to be under .git.
        let line = changed_files(&step(200, 0, 100_001, Some(99_801)));
        assert_eq!(
            line, "src/f0, src/f1, src/f2, src/f3, src/f4, (+99996 more)",
            "{line}"
        );
    }

    #[test]
    fn changes_cut_off_after_git_files_are_git() {
        let line = changed_files(&step(3, 197, 1_000, Some(800)));
        assert_eq!(line, "src/f0, src/f1, src/f2, .git (+997)", "{line}");
    }

    #[test]
    fn an_older_record_without_the_omitted_count_is_counted_from_the_totals() {
        let line = changed_files(&step(200, 0, 250, None));
        assert_eq!(
            line, "src/f0, src/f1, src/f2, src/f3, src/f4, (+245 more)",
            "{line}"
        );
        let line = changed_files(&step(1, 199, 250, None));
        assert_eq!(line, "src/f0, .git (+249)", "{line}");
    }

    #[test]
    fn a_whole_record_names_its_git_files_apart() {
        let line = changed_files(&step(2, 3, 5, None));
        assert_eq!(line, "src/f0, src/f1, .git (+3)", "{line}");
    }
}
