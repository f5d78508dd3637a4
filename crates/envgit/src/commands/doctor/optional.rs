//! Informational checks that never change the exit code: the agent CLIs envgit attaches to
//! against the versions it was tested with, inotify watches for agent sessions, and
//! /dev/kvm for the VM backend.

use std::process::Command;
use std::time::Duration;

use super::Check;
use super::proc::{run_bounded, version_in, which};

struct Agent {
    command: &'static str,
    product: &'static str,
    /// Versions envgit was tested with, the main one first.
    tested: &'static [&'static str],
    install: &'static str,
}

const AGENTS: [Agent; 3] = [
    Agent {
        command: "claude",
        product: "Claude Code",
        tested: &["2.1.332", "2.1.197"],
        install: "npm install -g @anthropic-ai/claude-code",
    },
    Agent {
        command: "codex",
        product: "Codex",
        tested: &["0.171.0"],
        install: "npm install -g @openai/codex",
    },
    Agent {
        command: "copilot",
        product: "Copilot CLI",
        tested: &["1.0.102"],
        install: "npm install -g @github/copilot",
    },
];

/// Below this many inotify watches per user, an agent session on a large project runs out and
/// falls back to rescanning the whole tree at every tool call.
const WATCHES_WANTED: u64 = 65_536;

/// `envgit claude` watches every directory of the project for the whole session.
pub fn inotify() -> Check {
    let name = "inotify watches";
    let path = "/proc/sys/fs/inotify/max_user_watches";
    let Some(watches) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
    else {
        return Check::skip(name, format!("cannot read {path}"));
    };
    let detail = format!("{watches} per user (an agent session watches each project directory)");
    if watches >= WATCHES_WANTED {
        return Check::pass(name, detail).optional();
    }
    Check::fail(
        name,
        detail,
        format!(
            "sudo sysctl fs.inotify.max_user_watches=524288 (and put the same line in \
             /etc/sysctl.d/60-envgit.conf to keep it); below {WATCHES_WANTED}, a session on a \
             large project rescans it at every tool call"
        ),
    )
    .optional()
}

pub fn agents() -> Vec<Check> {
    AGENTS.iter().map(agent).collect()
}

fn agent(a: &Agent) -> Check {
    let name = a.command;
    let tested = a.tested.join(", ");
    let Some(path) = which(a.command) else {
        return Check::fail(
            name,
            format!("{} not on PATH", a.product),
            format!(
                "to use it with envgit: {}@{}",
                a.install,
                a.tested.first().copied().unwrap_or("latest")
            ),
        )
        .optional();
    };
    let ran = match run_bounded(Command::new(&path).arg("--version"), Duration::from_secs(5)) {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                name,
                format!("{}: cannot run it: {e}", path.display()),
                format!("reinstall {}: {}", a.product, a.install),
            )
            .optional();
        }
    };
    let said = format!("{}{}", ran.stdout, ran.stderr);
    let version = version_in(&said);
    match (ran.success(), version) {
        (true, Some(v)) if a.tested.contains(&v.as_str()) => Check::pass(
            name,
            format!("{} {v} at {}: tested", a.product, path.display()),
        )
        .optional(),
        (true, Some(v)) => Check::fail(
            name,
            format!(
                "{} {v} at {}: untested version (tested: {tested})",
                a.product,
                path.display()
            ),
            format!(
                "it may well work; the tested one is {}@{}",
                a.install,
                a.tested.first().copied().unwrap_or("latest")
            ),
        )
        .optional(),
        _ => Check::fail(
            name,
            format!(
                "`{} --version` at {} said nothing usable ({}): {}",
                a.command,
                path.display(),
                ran.status(),
                said.split_whitespace()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            format!("reinstall {}: {}", a.product, a.install),
        )
        .optional(),
    }
}

pub fn kvm() -> Check {
    const NAME: &str = "/dev/kvm";
    let path = std::path::Path::new("/dev/kvm");
    if path.symlink_metadata().is_err() {
        return Check::fail(
            NAME,
            "absent: the VM backend cannot run guests here (the namespace sandbox does not need it)",
            "enable virtualization (VT-x/AMD-V) in the firmware, or nested virtualization if this is a VM, \
             then `sudo modprobe kvm_intel` (or kvm_amd)",
        )
        .optional();
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => Check::pass(
            NAME,
            "present and opens read-write: can run guests (VM backend)",
        )
        .optional(),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Check::fail(
            NAME,
            format!("present but not openable read-write by this user ({e}): the VM backend cannot run guests"),
            "sudo usermod -aG kvm $USER, then log in again",
        )
        .optional(),
        Err(e) => Check::fail(
            NAME,
            format!("present but cannot be opened ({e}): the VM backend cannot run guests"),
            "load the KVM module: `sudo modprobe kvm_intel` (or kvm_amd)",
        )
        .optional(),
    }
}
