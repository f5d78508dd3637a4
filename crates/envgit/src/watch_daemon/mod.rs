//! `envgit watch`: a per-project daemon that keeps inotify watches on the project (git's
//! `fsmonitor--daemon` idea, [`envgit_store::ChangeLog`]), so that a one-shot `envgit run`
//! reads only what changed since its last step instead of walking the whole project.
//!
//! It listens on `$ENVGIT_HOME/rt-UID/watch-HASH.sock` (the private runtime directory the
//! sandbox never sees), answers only its own user (`SO_PEERCRED`), and exits when asked to,
//! when its socket is removed, or when the project root moves or goes. A client that cannot
//! reach it, or gets no answer in time, reads everything as before: the daemon only ever
//! makes a step cheaper, never different.

pub(crate) mod client;
pub(crate) mod serve;
mod wire;

use std::path::{Path, PathBuf};

use crate::failure::CmdResult;

/// The daemon's socket for the project whose store is `store_dir`.
pub(crate) fn socket_path(store_dir: &Path) -> CmdResult<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let name = store_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The store's directory ends in a hash of the project's path; the rest is its name.
    let hash = name.rsplit('-').next().unwrap_or(&name);
    Ok(crate::runtime::runtime_dir(uid)?.join(format!("watch-{hash}.sock")))
}
