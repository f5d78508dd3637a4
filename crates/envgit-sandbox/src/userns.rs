//! The first namespaces: a user namespace (always, even as root, so the workload's
//! capabilities are namespaced and inherited mounts are locked) and a network namespace.

use std::io;

use rustix::thread::UnshareFlags;

/// Enter a new user and network namespace, mapping `uid`/`gid` to themselves.
pub fn enter(uid: u32, gid: u32) -> Result<(), String> {
    // SAFETY: called while the sandbox process is single-threaded.
    if let Err(e) =
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }
    {
        return Err(explain_userns_failure(e.into()));
    }
    let write = |path: &str, content: String| {
        std::fs::write(path, content).map_err(|e| format!("cannot write {path}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Say which host setting forbids user namespaces and how to allow them.
pub fn explain_userns_failure(e: io::Error) -> String {
    let mut msg = format!("cannot create a user namespace for the sandbox ({e})");
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0")
        || e.raw_os_error() == Some(libc::ENOSPC)
    {
        msg.push_str(
            ": user namespaces are disabled or exhausted here (sysctl user.max_user_namespaces); \
             fix: `sudo sysctl -w user.max_user_namespaces=15000`",
        );
    } else if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref()
        == Some("1")
    {
        msg.push_str(
            ": AppArmor restricts unprivileged user namespaces \
             (sysctl kernel.apparmor_restrict_unprivileged_userns=1); fix: add an AppArmor profile \
             allowing `userns` for envgit, or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`",
        );
    } else if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        msg.push_str(
            ": unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0); \
             fix: `sudo sysctl -w kernel.unprivileged_userns_clone=1`",
        );
    } else {
        msg.push_str(
            ": this host (or a container around it) does not allow creating user namespaces",
        );
    }
    msg
}
