//! Mounts added to a sandbox that is already running: a session (`envgit claude`, `envgit
//! mcp`'s downstream servers) keeps one sandbox for all its tool calls, and a secret made
//! since it was set up (a key the person saved into a new `.env`, one an editor saved by
//! renaming a new file over the masked one) is masked before the next call; a file linked
//! outside since is made read-only.
//!
//! `setns` into a mount namespace needs a single-threaded caller, which envgit is not, so a
//! fresh process of this binary does it ([`SUBCOMMAND`], routed by `main` to [`helper_main`]
//! before anything else runs): it joins the sandbox's user and mount namespaces through a
//! pidfd of the sandbox's first process and mounts with the new mount API on targets opened
//! beneath the sandbox's root without following a link, so nothing a step planted can
//! redirect a mount.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::fs::{Mode, OFlags};
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags, fsconfig_create,
    fsconfig_set_string, fsmount, fsopen, move_mount, open_tree,
};
use rustix::thread::{ThreadNameSpaceType, move_into_thread_name_spaces};

use crate::sys;

/// The hidden subcommand the binary must route to [`helper_main`].
pub const SUBCOMMAND: &str = "__cover";

/// The helper finds the sandbox's first process, as a pidfd, on this descriptor.
const SANDBOX_FD: i32 = 3;

/// Whether the sandbox whose first process `sandbox` is (a pidfd) has ended. That process
/// lives until nothing else runs in the sandbox (its PID 1 says so, or dies and takes the
/// rest with it), so once it is gone nothing there can read or write a file: no mount is owed.
pub fn has_ended(sandbox: BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(&sandbox, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&now)).is_ok_and(|ready| ready > 0)
}

/// The unix sockets at absolute paths the processes of the sandbox whose first process is `pid`
/// are listening on and no host process is: a server the session started (sockets bound in
/// the sandbox's network namespace, read through that process; a host service's are in the
/// host's, which envgit's own process is in). A session's look before each call leaves them
/// as they are, where a socket anything else made is masked.
pub fn own_sockets(pid: u32) -> Vec<PathBuf> {
    let host = crate::plan::bound_sockets(Path::new("/proc/self/net/unix"));
    let mut own =
        crate::plan::bound_sockets(&Path::new("/proc").join(pid.to_string()).join("net/unix"));
    own.retain(|p| !host.contains(p));
    own
}

/// What to add to the running sandbox whose first process `sandbox` (a pidfd: it names that
/// process and no other, whatever pid it had) is: `masks` become unreadable, `read_only`
/// read-only (absolute paths, as inside). Runs `exe` (this binary) as the helper. Says, for
/// each of `masks` then `read_only`, whether it is covered now: one the sandbox does not see
/// (absent inside, as a file made in the host's home after the home's overlay looked for it)
/// got no mount, and may appear there later.
pub fn cover_running(
    exe: &Path,
    sandbox: BorrowedFd<'_>,
    masks: &[PathBuf],
    read_only: &[PathBuf],
) -> Result<Vec<bool>, String> {
    let mut cmd = Command::new(exe);
    cmd.arg(SUBCOMMAND);
    for (how, paths) in [("mask", masks), ("read-only", read_only)] {
        for p in paths {
            cmd.arg(how).arg(p);
        }
    }
    let fd = sandbox.as_raw_fd();
    // SAFETY: between fork and exec the closure makes only async-signal-safe calls (dup2,
    // fcntl) on a descriptor this process keeps open across the spawn.
    unsafe {
        cmd.pre_exec(move || {
            let r = if fd == SANDBOX_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, SANDBOX_FD)
            };
            if r == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    if out.status.success() {
        let said: Vec<bool> = out.stdout.iter().map(|&b| b == COVERED).collect();
        if said.len() != masks.len() + read_only.len() {
            return Err("the helper did not say what it covered".into());
        }
        return Ok(said);
    }
    let said = String::from_utf8_lossy(&out.stderr);
    Err(match said.trim() {
        "" => format!("the helper ended with {}", out.status),
        said => said.to_string(),
    })
}

/// What the helper writes on stdout for each path, in order: [`COVERED`], or [`ABSENT`] when
/// the sandbox does not see it.
const COVERED: u8 = b'c';
const ABSENT: u8 = b'a';

/// The helper: `__cover (mask|read-only PATH)…`, the sandbox's pidfd on descriptor 3. Exits 0
/// once every path the sandbox sees is covered, having said which on stdout, else 1 with why
/// on stderr. Never returns.
pub fn helper_main() -> ! {
    let args: Vec<OsString> = std::env::args_os().skip(2).collect();
    match helper(&args) {
        Ok(said) => {
            use std::io::Write;
            match std::io::stdout().write_all(&said) {
                Ok(()) => std::process::exit(0),
                Err(_) => std::process::exit(1),
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    }
}

fn helper(args: &[OsString]) -> Result<Vec<u8>, String> {
    let mut todo = Vec::new();
    for pair in args.chunks(2) {
        match pair {
            [how, path] if how == "mask" || how == "read-only" => {
                todo.push((how == "mask", PathBuf::from(path)));
            }
            _ => return Err(
                "expected `mask PATH` or `read-only PATH` (this subcommand is internal to envgit)"
                    .into(),
            ),
        }
    }
    // SAFETY: the parent left the pidfd open on this descriptor for this process
    // (`cover_running`); nothing else here uses or closes it.
    let sandbox = unsafe { BorrowedFd::borrow_raw(SANDBOX_FD) };
    // The user namespace with the mount namespace: it gives the capabilities the mount
    // namespace asks for. This process has one thread, as `setns` into either needs.
    move_into_thread_name_spaces(
        sandbox,
        ThreadNameSpaceType::USER | ThreadNameSpaceType::MOUNT,
    )
    .map_err(|e| format!("joining the sandbox's namespaces: {e}"))?;
    // Now this process's root is the sandbox's.
    let root = rustix::fs::open(
        "/",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("the sandbox's root: {e}"))?;
    let mut said = Vec::with_capacity(todo.len());
    for (mask, path) in &todo {
        let target = match crate::mounts::open_beneath(&root, path) {
            Ok(t) => t,
            Err(rustix::io::Errno::NOENT) => {
                said.push(ABSENT);
                continue;
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let done = if *mask {
            mask_at(&target)
        } else {
            read_only_at(&target)
        };
        done.map_err(|e| format!("covering {}: {e}", path.display()))?;
        said.push(COVERED);
    }
    Ok(said)
}

const NOTHING_RUNS: u64 = sys::MOUNT_ATTR_RDONLY
    | sys::MOUNT_ATTR_NOSUID
    | sys::MOUNT_ATTR_NODEV
    | sys::MOUNT_ATTR_NOEXEC;

/// A directory becomes an empty, read-only tmpfs nobody may enter; anything else the
/// sandbox's `/dev/null` on a mount without devices, which no one can open.
fn mask_at(target: &OwnedFd) -> std::io::Result<()> {
    let st = rustix::fs::fstat(target)?;
    let cover = if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
        let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
        fsconfig_set_string(fs.as_fd(), "mode", "000")?;
        fsconfig_create(fs.as_fd())?;
        fsmount(
            fs.as_fd(),
            FsMountFlags::FSMOUNT_CLOEXEC,
            MountAttrFlags::MOUNT_ATTR_RDONLY
                | MountAttrFlags::MOUNT_ATTR_NOSUID
                | MountAttrFlags::MOUNT_ATTR_NODEV
                | MountAttrFlags::MOUNT_ATTR_NOEXEC,
        )?
    } else {
        // The command may have replaced `/dev/null` (with a link to the very secret): only
        // the null device itself, reached without a link, is a mask.
        let null = open_tree(
            rustix::fs::CWD,
            "/dev/null",
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        let st = rustix::fs::fstat(&null)?;
        let is_null = rustix::fs::FileType::from_raw_mode(st.st_mode)
            == rustix::fs::FileType::CharacterDevice
            && (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)) == (1, 3);
        if !is_null {
            return Err(std::io::Error::other(
                "the sandbox's /dev/null is not the null device",
            ));
        }
        sys::mount_setattr(null.as_fd(), false, NOTHING_RUNS)?;
        null
    };
    attach(&cover, target)
}

/// The file bound over itself, read-only.
fn read_only_at(target: &OwnedFd) -> std::io::Result<()> {
    let tree = open_tree(
        target,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )?;
    sys::mount_setattr(tree.as_fd(), false, sys::MOUNT_ATTR_RDONLY)?;
    attach(&tree, target)
}

fn attach(mount: &OwnedFd, target: &OwnedFd) -> std::io::Result<()> {
    move_mount(
        mount,
        "",
        target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )?;
    Ok(())
}
