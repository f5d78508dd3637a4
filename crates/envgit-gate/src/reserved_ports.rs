//! Ports a running `envgit ui` serves, each registered as a file named by the port (holding
//! the UI's pid) in a directory only envgit sees. While its UI lives, an entry is held with an
//! exclusive `flock`, which the kernel drops when the process dies however it dies (SIGKILL
//! included). An entry nobody holds whose recorded process is gone is stale: it refuses
//! nothing, and the next `envgit ui` removes it. Anything else counts as live — an entry that
//! cannot be opened, read or probed, content that is not a pid, or a recorded process still
//! running (an `envgit ui` from before the lock, or a pid already reused) — so a UI that may
//! be alive is never let through to a sandbox (fail closed).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::FlockOperation;
use rustix::io::Errno;
use rustix::process::Pid;

/// Does the entry at `path` still reserve its port?
pub fn entry_is_live(path: &Path) -> bool {
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
    {
        Ok(f) => f,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    // A shared probe: it fails while the UI holds its exclusive lock. The probe is released
    // when `file` closes, at the end of this function.
    if rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared).is_err() {
        return true;
    }
    let mut text = String::new();
    if file.read_to_string(&mut text).is_err() {
        return true;
    }
    match text.trim().parse::<i32>().ok().and_then(Pid::from_raw) {
        Some(pid) => process_exists(pid),
        None => true,
    }
}

/// Is there a process with this pid (of any user)? Only "no such process" says no.
fn process_exists(pid: Pid) -> bool {
    !matches!(rustix::process::test_kill_process(pid), Err(Errno::SRCH))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The pid of a process that has exited and been reaped.
    fn gone_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn an_entry_is_live_while_locked_or_its_process_runs_and_stale_only_when_both_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        assert!(!entry_is_live(&dir.path().join("1234")), "no entry");
        let dead = entry("1", &format!("{}\n", gone_pid()));
        assert!(
            !entry_is_live(&dead),
            "nobody holds it and its process is gone"
        );
        let running = entry("2", &format!("{}\n", std::process::id()));
        assert!(entry_is_live(&running), "its process still runs");
        let garbage = entry("3", "not a pid\n");
        assert!(entry_is_live(&garbage), "unreadable content is live");
        // Held by another open file (as the UI holds it): live whatever the pid says.
        let held = entry("4", &format!("{}\n", gone_pid()));
        let lock = std::fs::File::open(&held).unwrap();
        rustix::fs::flock(&lock, FlockOperation::LockExclusive).unwrap();
        assert!(entry_is_live(&held), "its lock is held");
        drop(lock);
        assert!(!entry_is_live(&held), "its lock went with its holder");
        // A link is not followed, and not taken for absent.
        std::os::unix::fs::symlink(&dead, dir.path().join("5")).unwrap();
        assert!(entry_is_live(&dir.path().join("5")));
    }
}
