//! The unix sockets the gate listens on (the relay's and the control channel's): mode 0600,
//! in a directory the caller made 0700.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Binds `path`, readable and writable by its owner only; non-blocking, for a runtime to
/// take over ([`tokio::net::UnixListener::from_std`]).
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
