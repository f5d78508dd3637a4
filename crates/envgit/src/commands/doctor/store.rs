//! The store: where it is, that envgit can use it, and room to grow.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::Access;

use super::Check;
use crate::output;

/// Below this much free space on the store's filesystem the check fails.
const MIN_FREE: u64 = 1 << 30;

/// The checks of the store at `envgit_home()`.
pub fn checks() -> Vec<Check> {
    let home = match envgit_store::envgit_home() {
        Ok(h) => h,
        Err(e) => {
            return vec![Check::fail(
                "store location",
                e.to_string(),
                "export ENVGIT_HOME=DIR (a directory of your own, e.g. ~/.local/share/envgit)",
            )];
        }
    };
    let home = std::path::absolute(&home).unwrap_or(home);
    let mut out = vec![location(&home)];
    if home.is_dir() {
        out.push(permissions(&home));
        out.push(access(&home));
    }
    out.push(free_space(&home));
    out.push(step_files());
    out
}

/// Where each step keeps its sockets and trust files: on tmpfs they cost microseconds to make
/// and remove, on ext4 about a millisecond of every step ([`crate::runtime::step_dirs`]).
fn step_files() -> Check {
    const NAME: &str = "step files";
    let uid = rustix::process::getuid().as_raw();
    match crate::runtime::fast_step_dirs(uid) {
        Ok(Ok(dir)) => Check::pass(NAME, format!("{} (tmpfs)", dir.display())).optional(),
        Ok(Err(why)) => Check::fail(
            NAME,
            format!("under $ENVGIT_HOME/rt-{uid}, on its disk: {why}"),
            "nothing is wrong, each step is ~1 ms slower; to gain it, mount a tmpfs on /dev/shm \
             (most systems do) or remove what another user made there",
        )
        .optional(),
        Err(e) => Check::skip(NAME, e.message),
    }
}

/// Where the store's directory comes from.
fn source() -> &'static str {
    let set = |v: &str| std::env::var_os(v).is_some_and(|h| !h.is_empty());
    if set("ENVGIT_HOME") {
        "from $ENVGIT_HOME"
    } else if set("XDG_DATA_HOME") {
        "from $XDG_DATA_HOME/envgit"
    } else {
        "the default: neither ENVGIT_HOME nor XDG_DATA_HOME is set"
    }
}

/// `path` itself or its nearest ancestor that exists.
fn existing_ancestor(path: &Path) -> Option<&Path> {
    path.ancestors().find(|p| p.symlink_metadata().is_ok())
}

fn location(home: &Path) -> Check {
    const NAME: &str = "store location";
    let d = home.display();
    let src = source();
    match std::fs::metadata(home) {
        Ok(m) if m.is_dir() => Check::pass(NAME, format!("{d} ({src})")),
        Ok(_) => Check::fail(
            NAME,
            format!("{d} ({src}) exists but is not a directory"),
            format!("move {d} aside, or export ENVGIT_HOME=DIR to put the store elsewhere"),
        ),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Check::fail(
            NAME,
            format!("{d} ({src}): {e}"),
            format!(
                "make {d} reachable (chmod u+x on its parents), or export ENVGIT_HOME=DIR to put the store elsewhere"
            ),
        ),
        Err(_) => {
            let Some(parent) = existing_ancestor(home) else {
                return Check::fail(
                    NAME,
                    format!("{d}: no part of the path exists"),
                    "export ENVGIT_HOME=DIR (an absolute path to a directory of your own)",
                );
            };
            match rustix::fs::access(parent, Access::WRITE_OK | Access::EXEC_OK) {
                Ok(()) => Check::pass(
                    NAME,
                    format!("{d} ({src}) does not exist yet; `envgit init` creates it (mode 700)"),
                ),
                Err(e) => Check::fail(
                    NAME,
                    format!(
                        "{d} ({src}) does not exist and cannot be created: {} is not writable ({e})",
                        parent.display()
                    ),
                    format!(
                        "mkdir -p -m 700 {d} (as a user who can, then chown it to yourself), or export ENVGIT_HOME=DIR"
                    ),
                ),
            }
        }
    }
}

/// Mode 700 and owned by this user. This also catches what root would not notice by trying:
/// root reads and writes a mode-000 directory, but envgit refuses to use one.
fn permissions(home: &Path) -> Check {
    const NAME: &str = "store permissions";
    let d = home.display();
    let meta = match std::fs::metadata(home) {
        Ok(m) => m,
        Err(e) => {
            return Check::fail(NAME, format!("{d}: {e}"), format!("chmod 700 {d}"));
        }
    };
    let mode = meta.mode() & 0o7777;
    let euid = rustix::process::geteuid().as_raw();
    if mode & 0o700 != 0o700 {
        return Check::fail(
            NAME,
            format!("store directory {d} has mode {mode:03o}: envgit cannot use it"),
            format!("chmod 700 {d}"),
        );
    }
    if meta.uid() != euid {
        return Check::fail(
            NAME,
            format!(
                "store directory {d} is owned by uid {}, but envgit runs as uid {euid}",
                meta.uid()
            ),
            format!("chown -R {euid} {d} (or export ENVGIT_HOME=DIR to use a store of your own)"),
        );
    }
    if mode & 0o077 != 0 {
        return Check::fail(
            NAME,
            format!(
                "store directory {d} has mode {mode:03o}: other users can read the snapshots (they may hold secrets)"
            ),
            format!("chmod 700 {d}"),
        );
    }
    Check::pass(NAME, format!("mode {mode:03o}, owned by you (uid {euid})"))
}

/// That this user can list, read and write it, asked of the kernel and then really tried.
fn access(home: &Path) -> Check {
    const NAME: &str = "store access";
    let d = home.display();
    let fix = format!("chmod 700 {d} (and chown it to yourself if another user owns it)");
    if let Err(e) = rustix::fs::access(home, Access::READ_OK | Access::WRITE_OK | Access::EXEC_OK) {
        return Check::fail(
            NAME,
            format!("{d} is not readable and writable by this user: {e}"),
            fix,
        );
    }
    if let Err(e) = std::fs::read_dir(home) {
        return Check::fail(NAME, format!("cannot list {d}: {e}"), fix);
    }
    let as_root = if rustix::process::geteuid().is_root() {
        " (as root, which ignores permission bits)"
    } else {
        ""
    };
    Check::pass(NAME, format!("readable and writable{as_root}"))
}

fn free_space(home: &Path) -> Check {
    const NAME: &str = "store free space";
    let probe: PathBuf = existing_ancestor(home)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    match rustix::fs::statvfs(&probe) {
        Ok(st) => {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            let total = st.f_blocks.saturating_mul(st.f_frsize);
            let detail = format!(
                "{} free of {} on the filesystem of {}",
                output::size(free),
                output::size(total),
                probe.display()
            );
            if free >= MIN_FREE {
                Check::pass(NAME, detail)
            } else {
                Check::fail(
                    NAME,
                    format!("only {detail} (envgit wants at least 1 GiB)"),
                    "free space on that filesystem (`envgit gc` trims old snapshots), or export ENVGIT_HOME=DIR on a larger one",
                )
            }
        }
        Err(e) => Check::fail(
            NAME,
            format!("cannot measure free space at {}: {e}", probe.display()),
            format!(
                "make {} reachable, or export ENVGIT_HOME=DIR",
                probe.display()
            ),
        ),
    }
}
