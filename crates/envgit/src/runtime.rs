//! Where a running envgit keeps what the sandbox must never see: `$ENVGIT_HOME/rt-UID` (the
//! sockets of running steps: gate, control, hooks, MCP feeds), other private directories, and
//! the random tokens that guard them.

use std::path::{Path, PathBuf};

use crate::failure::{CmdResult, Failure};

/// The gate's control socket, beside its relay socket in the run's private directory.
pub(crate) const CONTROL_SOCKET: &str = "control.sock";

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
