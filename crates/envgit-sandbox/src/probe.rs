//! What this host offers the sandbox, asked without building one: for `envgit doctor`.

use std::io;

/// `LANDLOCK_CREATE_RULESET_VERSION` from `<linux/landlock.h>` (libc does not define it).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// The Landlock ABI version the running kernel offers, or `None` when Landlock is not built in
/// or not enabled at boot.
pub fn landlock_abi() -> Option<i32> {
    landlock_abi_or_error().ok()
}

/// Like [`landlock_abi`], with the kernel's reason when there is none: `ENOSYS` (not built in)
/// or `EOPNOTSUPP` (built in but not enabled at boot).
pub fn landlock_abi_or_error() -> io::Result<i32> {
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the kernel reads no
    // memory and creates nothing; it only returns the ABI version (or -1 with errno).
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

/// Whether seccomp filters can be installed: the kernel has seccomp (`PR_GET_SECCOMP` answers
/// 0, or 2 when a container's filter is already in place — filters stack) and offers the
/// actions envgit's filter uses (`kill_process`, `errno`).
pub fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP takes no pointer arguments and only reads the calling thread's
    // seccomp mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode != 0 && mode != 2 {
        return false;
    }
    let actions =
        std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    let has = |a: &str| actions.split_whitespace().any(|w| w == a);
    has("kill_process") && has("errno")
}

/// The sandbox's own explanation of a failure to create a user namespace: which sysctl forbids
/// it and the command that allows it.
pub fn explain_userns_failure(e: io::Error) -> String {
    crate::userns::explain_userns_failure(e)
}
