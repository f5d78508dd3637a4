//! Running a helper program with a deadline, finding programs on PATH, and a scratch
//! directory removed afterwards (doctor's and selftest's temporary projects).

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub struct Ran {
    /// The exit code; `None` when killed by a signal (or by the deadline).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub elapsed: Duration,
}

impl Ran {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// How it ended, for a message: `exit 3`, `killed by a signal`, `timed out after 20 s`.
    pub fn status(&self) -> String {
        match (self.timed_out, self.code) {
            (true, _) => format!("timed out after {} s", self.elapsed.as_secs()),
            (false, Some(c)) => format!("exit {c}"),
            (false, None) => "killed by a signal".into(),
        }
    }

    /// The last few lines of stderr, trimmed: what a person needs to see.
    pub fn stderr_tail(&self) -> String {
        let lines: Vec<&str> = self.stderr.trim().lines().collect();
        let start = lines.len().saturating_sub(6);
        lines[start..].join("\n")
    }
}

fn reader(mut r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

/// Run `cmd` (stdin closed, in a process group of its own) and wait at most `timeout`; past
/// it the whole group is killed. Output left open by a stray grandchild is not waited for.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> std::io::Result<Ran> {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let out = child.stdout.take().map(reader);
    let err = child.stderr.take().map(reader);
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if started.elapsed() >= timeout {
            timed_out = true;
            let pid = rustix::process::Pid::from_child(&child);
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let collect = |rx: Option<mpsc::Receiver<String>>| {
        rx.and_then(|rx| rx.recv_timeout(Duration::from_secs(2)).ok())
            .unwrap_or_default()
    };
    Ok(Ran {
        code: if timed_out { None } else { status.code() },
        stdout: collect(out),
        stderr: collect(err),
        timed_out,
        elapsed: started.elapsed(),
    })
}

/// The first executable file called `name` in a directory of PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The first `N.N[.N…]` in `text`.
pub fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map(|w| w.trim_matches('.'))
        .find(|w| w.contains('.') && w.split('.').all(|p| !p.is_empty()))
        .map(str::to_string)
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Short on purpose: the gate's unix socket lives deep inside the store, and a socket path
    /// must fit in 108 bytes.
    pub fn new(prefix: &str) -> std::io::Result<Self> {
        let mut last = None;
        for attempt in 0..8u32 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let tag = nanos ^ std::process::id().rotate_left(16) ^ attempt;
            let path = base().join(format!("{prefix}-{tag:08x}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                // The sandbox sees canonical paths; so should the store.
                Ok(()) => {
                    return match path.canonicalize() {
                        Ok(c) => Ok(Self(c)),
                        Err(e) => {
                            let _ = std::fs::remove_dir(&path);
                            Err(e)
                        }
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no attempt made")))
    }
}

impl TempDir {
    /// The envgit home of the temporary project (`ENVGIT_HOME` of the commands run there).
    pub fn envgit_home(&self) -> PathBuf {
        self.0.join("s")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        crate::runtime::forget_step_dirs_of(&self.envgit_home());
        // A store inside it has the home overlay's work directory, mode 0.
        let _ = envgit_store::remove_tree(&self.0);
    }
}

/// Where the probe's temporary project goes.
fn base() -> PathBuf {
    std::env::temp_dir()
}

#[cfg(test)]
mod tests {
    use super::version_in;

    #[test]
    fn versions_are_found_in_version_lines() {
        assert_eq!(
            version_in("2.1.332 (Claude Code)").as_deref(),
            Some("2.1.332")
        );
        assert_eq!(version_in("codex-cli 0.171.0").as_deref(), Some("0.171.0"));
        assert_eq!(
            version_in("GitHub Copilot CLI 1.0.102.\nRun 'copilot update'").as_deref(),
            Some("1.0.102")
        );
        assert_eq!(version_in("git version 2.43.0").as_deref(), Some("2.43.0"));
        assert_eq!(version_in("no digits here"), None);
    }
}
