//! Where a running envgit keeps what the sandbox must never see: `$ENVGIT_HOME/rt-UID` (the
//! sockets of running steps: gate, control, hooks, MCP feeds), other private directories, and
//! the random tokens that guard them.

use std::path::{Path, PathBuf};

use crate::failure::{CmdResult, Failure};

/// The gate's control socket, beside its relay socket in the run's private directory.
pub(crate) const CONTROL_SOCKET: &str = "control.sock";

/// The gate's relay socket in the run's private directory.
pub(crate) const GATE_SOCKET: &str = "gate.sock";

/// A directory only this user can enter (created with its parents).
pub(crate) fn private_dir(p: &Path) -> CmdResult<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
        .map_err(|e| Failure::failed(format!("{}: {e}", p.display())))
}

/// 128 random bits from the operating system (getrandom), hex: an unguessable handle or
/// placeholder. No randomness is an error, never a predictable token.
pub(crate) fn random_token() -> CmdResult<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        Failure::failed(format!(
            "cannot get random bytes from the operating system ({e}): envgit needs them for \
             unguessable tokens; check that getrandom(2) or /dev/urandom works here"
        ))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `$ENVGIT_HOME/rt-UID`: where the running steps keep their sockets (gate, control, hooks,
/// MCP feeds) and run files. A directory this user owns, mode 0700, never a symlink. It is
/// under envgit's own state, which the sandbox never sees (hidden), whatever
/// `TMPDIR` or `XDG_RUNTIME_DIR` point at — a runtime directory inside the project would
/// hand the sandbox the control socket. A unix socket path must stay under 108 bytes, so a
/// very long `$ENVGIT_HOME` makes binding fail with that path in the message.
pub(crate) fn runtime_dir(uid: u32) -> CmdResult<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let home = envgit_store::envgit_home()?;
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&home);
    let dir = home.join(format!("rt-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| Failure::failed(format!("{}: {e}", dir.display())))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(Failure::failed(format!(
            "{} is not a private directory of this user (mode 0700, owner {uid}); remove it and try again",
            dir.display()
        )));
    }
    Ok(dir)
}

/// Where a running step keeps its gate directory (the gate's and control sockets, the control
/// token, the trust files): `/dev/shm/envgit-UID-HASH`, HASH naming `$ENVGIT_HOME`, when
/// `/dev/shm` is a tmpfs with room and that directory is this user's own (mode 0700, never a
/// symlink); else [`runtime_dir`]. A step makes and removes these files every time: on ext4
/// each unlink took 0.2-0.5 ms here, on tmpfs a few microseconds. The sandbox never sees
/// the host's `/dev/shm` (its `/dev` is a tmpfs of its own) and the plan hides this directory
/// besides. Another user who made the directory first only sends envgit back to
/// [`runtime_dir`]. Long-lived sockets (the watch daemon's, the UI's port registry) stay in
/// [`runtime_dir`]: a binary from before this change still agrees on them.
pub(crate) fn step_dirs(uid: u32) -> CmdResult<PathBuf> {
    match fast_step_dirs(uid)? {
        Ok(dir) => Ok(dir),
        Err(_) => runtime_dir(uid),
    }
}

/// Both places steps of this user and `$ENVGIT_HOME` may keep their directories (tmpfs
/// first), for whoever looks for running steps (`envgit status`, `approve`).
pub(crate) fn step_dir_bases(uid: u32) -> CmdResult<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = fast_step_dirs(uid)?.into_iter().collect();
    out.push(runtime_dir(uid)?);
    Ok(out)
}

/// Free room `/dev/shm` must have for steps to keep their files there: a step's are ~250 KiB
/// (the trust bundle most of it); a container's default `/dev/shm` is 64 MiB.
const SHM_MIN_FREE: u64 = 16 << 20;

/// The tmpfs directory for steps' files ([`step_dirs`]), or why there is none (`envgit
/// doctor` says it).
pub(crate) fn fast_step_dirs(uid: u32) -> CmdResult<Result<PathBuf, String>> {
    let shm = Path::new("/dev/shm");
    let fs = match rustix::fs::statfs(shm) {
        Ok(fs) => fs,
        Err(e) => return Ok(Err(format!("{}: {e}", shm.display()))),
    };
    if fs.f_type != TMPFS_MAGIC {
        return Ok(Err(format!("{} is not a tmpfs", shm.display())));
    }
    let free = fs
        .f_bavail
        .saturating_mul(u64::try_from(fs.f_bsize).unwrap_or(0));
    if free < SHM_MIN_FREE {
        return Ok(Err(format!(
            "{} has {} KiB free (under {} MiB)",
            shm.display(),
            free >> 10,
            SHM_MIN_FREE >> 20
        )));
    }
    let dir = shm_step_dirs_of(uid, &envgit_store::envgit_home()?);
    Ok(own_private_dir(&dir, uid).ok_or_else(|| {
        format!(
            "{} is not a directory of this user alone (mode 0700, owner {uid}, not a symlink)",
            dir.display()
        )
    }))
}

/// `/dev/shm/envgit-UID-HASH` for the envgit home `home` ([`step_dirs`]).
fn shm_step_dirs_of(uid: u32, home: &Path) -> PathBuf {
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    let hash = blake3::hash(home.as_os_str().as_encoded_bytes()).to_hex();
    Path::new("/dev/shm").join(format!("envgit-{uid}-{}", &hash[..12]))
}

/// For an envgit home about to be removed (a probe's or the demo's temporary one): removes its
/// directory of steps on tmpfs, which would otherwise stay until the machine restarts, with
/// its projects' CAs (`step_ca`). The directory goes only once nothing else is in it (nothing
/// of a step that still runs). Call it while `home` still exists: it names the directory by
/// `home`'s canonical path.
pub(crate) fn forget_step_dirs_of(home: &Path) {
    let uid = rustix::process::getuid().as_raw();
    let dir = shm_step_dirs_of(uid, home);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(crate::step_ca::DIR_PREFIX)
            {
                let _ = envgit_store::remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// `dir`, made mode 0700 when missing, if it is a directory `uid` owns that no one else may
/// enter; `None` for anything else there (a symlink, another owner, a wider mode).
fn own_private_dir(dir: &Path, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
    let meta = std::fs::symlink_metadata(dir).ok()?;
    let private = meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0;
    private.then(|| dir.to_path_buf())
}

/// `TMPFS_MAGIC` from `linux/magic.h`.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Removes the directories of steps whose envgit is gone (killed with SIGKILL, crashed) from
/// `base`: its process no longer exists (or is this one, which has not made its own yet) and
/// its gate socket refuses a connection (a step in
/// another pid namespace sharing the directory answers). On tmpfs such leftovers are held
/// in memory, so each step clears them before making its own; usually there are none to
/// look at.
pub(crate) fn sweep_dead_steps(base: &Path) {
    sweep(base, MADE_ONE.load(std::sync::atomic::Ordering::Relaxed));
}

/// [`sweep_dead_steps`], told whether this process has a step directory of its own yet.
fn sweep(base: &Path, made_one: bool) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        // Before this process made a directory, one under its PID is an earlier process's
        // that had the same PID (PIDs wrap), gone.
        let ours = pid.as_raw_nonzero().get() as u32 == std::process::id();
        let gone = (ours && !made_one)
            || matches!(
                rustix::process::test_kill_process(pid),
                Err(rustix::io::Errno::SRCH)
            );
        let path = entry.path();
        if gone
            && std::os::unix::net::UnixStream::connect(path.join(GATE_SOCKET)).is_err()
            && entry.file_type().is_ok_and(|t| t.is_dir())
        {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Set once this process has made a step directory ([`StepDir::make`]).
static MADE_ONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A step's own directory in [`step_dirs`]: the gate's sockets, the trust files, and
/// `staging`, the empty mount point the sandbox builds its new root on. Removed with what it
/// holds when dropped, on every path out of the step.
pub(crate) struct StepDir {
    base: PathBuf,
    path: PathBuf,
}

impl StepDir {
    /// Clears the directories of steps that died (see [`sweep_dead_steps`]), then makes this
    /// step's.
    pub(crate) fn make(uid: u32) -> CmdResult<Self> {
        let base = step_dirs(uid)?;
        sweep_dead_steps(&base);
        MADE_ONE.store(true, std::sync::atomic::Ordering::Relaxed);
        let path = base.join(format!("{}-{}", std::process::id(), envgit_store::now_ms()));
        private_dir(&path)?;
        let dir = Self { base, path };
        private_dir(&dir.staging())?;
        Ok(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Where the directories of this user's steps are ([`step_dirs`]).
    pub(crate) fn base(&self) -> &Path {
        &self.base
    }

    /// The sandbox's staging mount point (on tmpfs where [`step_dirs`] is: making and removing
    /// it on ext4, in the store, cost 0.3 ms a step).
    pub(crate) fn staging(&self) -> PathBuf {
        self.path.join("staging")
    }
}

impl Drop for StepDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod token_tests {
    #[test]
    fn tokens_are_128_random_bits_in_hex() {
        let (a, b) = (super::random_token(), super::random_token());
        let (a, b) = (a.map_err(|e| e.message), b.map_err(|e| e.message));
        assert!(matches!((&a, &b), (Ok(x), Ok(y)) if x != y), "{a:?} {b:?}");
        let a = a.unwrap_or_default();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()) && a != "0".repeat(32));
    }
}

#[cfg(test)]
mod step_dir_tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn uid() -> u32 {
        rustix::process::getuid().as_raw()
    }

    #[test]
    fn a_private_directory_is_made_or_taken_only_when_it_is_this_users_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let fresh = tmp.path().join("fresh");
        assert_eq!(own_private_dir(&fresh, uid()), Some(fresh.clone()));
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Made first by someone else (here: with a mode others may enter), or a symlink to
        // a private directory: not taken.
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(own_private_dir(&open, uid()), None);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        assert_eq!(own_private_dir(&link, uid()), None);
        assert_eq!(own_private_dir(&fresh, uid() + 1), None, "another owner");
    }

    #[test]
    fn a_dead_steps_directory_is_swept_and_a_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_dir = base.join(format!("{dead}-1"));
        std::fs::create_dir(&dead_dir).unwrap();
        std::fs::write(dead_dir.join("ca-bundle.pem"), "pem").unwrap();
        // Its process is gone but its gate still answers (a step in another pid namespace).
        let answering = base.join(format!("{dead}-2"));
        std::fs::create_dir(&answering).unwrap();
        let _listener =
            std::os::unix::net::UnixListener::bind(answering.join(GATE_SOCKET)).unwrap();
        let ours = base.join(format!("{}-3", std::process::id()));
        std::fs::create_dir(&ours).unwrap();
        let stray = base.join("not-a-step");
        std::fs::create_dir(&stray).unwrap();
        sweep(base, true);
        assert!(!dead_dir.exists(), "the dead step's directory stayed");
        assert!(answering.exists() && ours.exists() && stray.exists());
        // Before this process made one, a directory under its PID is a predecessor's.
        sweep(base, false);
        assert!(!ours.exists(), "a stale directory under this PID stayed");
        assert!(answering.exists() && stray.exists());
    }
}
