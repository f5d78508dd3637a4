//! The anchor both sandbox benchmarks measure against (included by path by each binary).

use std::path::Path;
use std::process::Command;

/// bwrap with the namespaces and mounts envgit's sandbox has: user, net, pid, ipc, uts; the host
/// read-only, the project read-write, private /tmp, /dev and /proc.
pub fn bwrap_cmd(project: &Path) -> Command {
    let mut c = Command::new("bwrap");
    c.args([
        "--unshare-user",
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/",
        "/",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]);
    c.arg("--bind").arg(project).arg(project);
    c.arg("true");
    c
}
