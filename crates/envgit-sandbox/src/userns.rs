//! The first namespaces: a user namespace (always, even as root, so the workload's
//! capabilities are namespaced and inherited mounts are locked) and a network namespace.
//!
//! Who is mapped. The command runs as `Spec::uid`/`gid`, mapped 1:1:
//!
//! - envgit's own user (the usual case, and root on a project root owns): the sandbox process
//!   maps its own ids itself (`U U 1`), which needs no privilege;
//! - envgit running as root on a project another user owns (a container's root on a
//!   bind-mounted repository): the command runs as that owner. A process cannot map an id
//!   other than its own once it is inside the new namespace, even as root (it has no
//!   capability left in the parent namespace), so a helper forked *before* the unshare, still
//!   root in the parent namespace, writes the maps (as `newuidmap` would): `0 0 1` and
//!   `OWNER OWNER 1`. Mapping root too keeps the whole set-up (relay, PID 1, the mounts)
//!   exactly as for a root run: it reaches envgit's root-owned state (staging, the home
//!   overlay's upper layer, the gate's socket in a 0700 directory) and creates the mount
//!   points. Only the command's process switches to the owner, in [`become_user`], right
//!   after the capability bounding set is emptied: `setresuid` away from uid 0 clears every
//!   capability, then `no_new_privs`, Landlock and seccomp follow as for any run. Root's
//!   supplementary groups are dropped before the unshare (`setgroups` is then denied inside),
//!   so the command has the owner's uid and one group, nothing of root's.
//!
//! The alternative, `setresuid` to the owner before the unshare, would need unprivileged user
//! namespaces on hosts that restrict them (AppArmor's `restrict_unprivileged_userns`, Debian's
//! `unprivileged_userns_clone`) and would leave the relay unable to reach the gate's socket.

use std::io::{self, Read, Write};

use rustix::thread::UnshareFlags;

use crate::sys::{self, Forked};

/// Why the sandbox could not enter its user namespace or become the command's user.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    #[error(
        "cannot run the command as uid {uid}: envgit runs as uid {own}, and only root can \
         map another user into the sandbox"
    )]
    NotRoot { uid: u32, own: u32 },
    /// `unshare` refused; `hint` names the host setting that forbids it and the fix.
    #[error("cannot create a user namespace for the sandbox ({source}){hint}")]
    Unshare {
        #[source]
        source: io::Error,
        hint: &'static str,
    },
    #[error("cannot write {path}: {source}")]
    WriteMap {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("dropping root's supplementary groups: {0}")]
    DropGroups(#[source] io::Error),
    /// `pipe` or `fork` for the helper that writes the maps.
    #[error("{call}: {source}")]
    Helper {
        call: &'static str,
        #[source]
        source: io::Error,
    },
    /// The helper's own report, read back from its pipe.
    #[error("mapping uid {uid} into the sandbox: {report}")]
    HelperReported { uid: u32, report: String },
    #[error("mapping uid {uid} into the sandbox: the helper failed")]
    HelperFailed { uid: u32 },
    #[error("becoming uid {uid} gid {gid}: {source}")]
    BecomeUser {
        uid: u32,
        gid: u32,
        #[source]
        source: io::Error,
    },
    #[error("becoming uid {uid} gid {gid}: the ids did not change")]
    IdsUnchanged { uid: u32, gid: u32 },
}

/// Enter a new user and network namespace in which `uid`/`gid`, the ids the command runs as,
/// are mapped to themselves (see the module's comment for who writes the maps).
pub fn enter(uid: u32, gid: u32) -> Result<(), UsernsError> {
    let own = rustix::process::geteuid().as_raw();
    if uid == own {
        return enter_as_self(uid, gid);
    }
    if own != 0 {
        return Err(UsernsError::NotRoot { uid, own });
    }
    enter_as_root_for(uid, gid)
}

fn unshare_user_and_net() -> Result<(), UsernsError> {
    // SAFETY: called while the sandbox process is single-threaded.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }.map_err(
        |e| {
            let source = io::Error::from(e);
            let hint = userns_hint(&source);
            UsernsError::Unshare { source, hint }
        },
    )
}

fn write(path: &str, content: &str) -> Result<(), UsernsError> {
    std::fs::write(path, content).map_err(|source| UsernsError::WriteMap {
        path: path.to_owned(),
        source,
    })
}

fn enter_as_self(uid: u32, gid: u32) -> Result<(), UsernsError> {
    unshare_user_and_net()?;
    write("/proc/self/setgroups", "deny")?;
    write("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// `0 0 1` and `ID ID 1` (just the first when `id` is 0).
fn root_and(id: u32) -> String {
    if id == 0 {
        "0 0 1\n".into()
    } else {
        format!("0 0 1\n{id} {id} 1\n")
    }
}

/// Root, mapping root and the project's owner: the maps are written by a helper that stays
/// in the parent namespace, where root holds CAP_SETUID/CAP_SETGID.
fn enter_as_root_for(uid: u32, gid: u32) -> Result<(), UsernsError> {
    // SAFETY: setgroups(0, NULL) reads no memory; the process is single-threaded.
    if unsafe { libc::setgroups(0, std::ptr::null()) } == -1 {
        return Err(UsernsError::DropGroups(io::Error::last_os_error()));
    }
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let pipe = || {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| UsernsError::Helper {
            call: "pipe",
            source: e.into(),
        })
    };
    let (go_r, go_w) = pipe()?;
    let (res_r, res_w) = pipe()?;
    match sys::fork().map_err(|source| UsernsError::Helper {
        call: "fork",
        source,
    })? {
        Forked::Child => {
            drop(go_w);
            drop(res_r);
            let _ = rustix::process::set_parent_process_death_signal(Some(
                rustix::process::Signal::KILL,
            ));
            let mut b = [0u8; 1];
            let code = match std::fs::File::from(go_r).read(&mut b) {
                Ok(1) => match write_maps(me, uid, gid) {
                    Ok(()) => 0,
                    Err(m) => {
                        let _ = std::fs::File::from(res_w).write_all(m.to_string().as_bytes());
                        1
                    }
                },
                // The sandbox process could not unshare (it says why): nothing to map.
                _ => 1,
            };
            // SAFETY: _exit ends this forked helper without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        Forked::Parent(helper) => {
            drop(go_r);
            drop(res_w);
            let unshared = unshare_user_and_net();
            if unshared.is_ok() {
                let _ = std::fs::File::from(go_w).write_all(b"g");
            } else {
                drop(go_w);
            }
            let mut msg = String::new();
            let _ = std::fs::File::from(res_r).read_to_string(&mut msg);
            let status = wait(helper);
            unshared?;
            if !msg.is_empty() {
                return Err(UsernsError::HelperReported { uid, report: msg });
            }
            if status != Some(0) {
                return Err(UsernsError::HelperFailed { uid });
            }
            Ok(())
        }
    }
}

fn write_maps(pid: i32, uid: u32, gid: u32) -> Result<(), UsernsError> {
    write(&format!("/proc/{pid}/setgroups"), "deny")?;
    write(&format!("/proc/{pid}/uid_map"), &root_and(uid))?;
    write(&format!("/proc/{pid}/gid_map"), &root_and(gid))
}

fn wait(pid: i32) -> Option<i32> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    loop {
        match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
            Ok(Some((_, status))) => return status.exit_status(),
            Err(rustix::io::Errno::INTR) => continue,
            _ => return None,
        }
    }
}

/// In the command's process, after the capability bounding set is emptied and before
/// `no_new_privs`: become `uid`/`gid` if the process is not already (the project owner's
/// ids, when envgit runs as root on a project another user owns). Leaving uid 0 clears the
/// permitted, effective and ambient capabilities (the caller empties them again, and
/// checks); the ids are checked here.
pub fn become_user(uid: u32, gid: u32) -> Result<(), UsernsError> {
    if rustix::process::geteuid().as_raw() == uid && rustix::process::getegid().as_raw() == gid {
        return Ok(());
    }
    // SAFETY: plain id-setting system calls on this single-threaded process; no memory passed.
    let r = unsafe {
        if libc::setresgid(gid, gid, gid) == -1 {
            -1
        } else {
            libc::setresuid(uid, uid, uid)
        }
    };
    if r == -1 {
        return Err(UsernsError::BecomeUser {
            uid,
            gid,
            source: io::Error::last_os_error(),
        });
    }
    let (mut ru, mut eu, mut su) = (0, 0, 0);
    // SAFETY: getresuid writes the three ids into the locals passed.
    unsafe { libc::getresuid(&mut ru, &mut eu, &mut su) };
    if [ru, eu, su] != [uid; 3] || rustix::process::getgid().as_raw() != gid {
        return Err(UsernsError::IdsUnchanged { uid, gid });
    }
    Ok(())
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Say which host setting forbids user namespaces and how to allow them.
pub fn explain_userns_failure(e: io::Error) -> String {
    let hint = userns_hint(&e);
    UsernsError::Unshare { source: e, hint }.to_string()
}

/// The host setting that forbids creating a user namespace, and how to allow it (`: …`).
fn userns_hint(e: &io::Error) -> &'static str {
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0")
        || e.raw_os_error() == Some(libc::ENOSPC)
    {
        ": user namespaces are disabled or exhausted here (sysctl user.max_user_namespaces); \
         fix: `sudo sysctl -w user.max_user_namespaces=15000`"
    } else if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref()
        == Some("1")
    {
        ": AppArmor restricts unprivileged user namespaces \
         (sysctl kernel.apparmor_restrict_unprivileged_userns=1); fix: add an AppArmor profile \
         allowing `userns` for envgit, or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
    } else if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        ": unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0); \
         fix: `sudo sysctl -w kernel.unprivileged_userns_clone=1`"
    } else {
        ": this host (or a container around it) does not allow creating user namespaces"
    }
}
