//! Host-side reads of files the agent could have replaced with a symlink.

use std::io::Read;
use std::path::Path;

/// Read a file of the project without following a symlink: the agent may have planted one.
pub fn read_nofollow(path: &Path) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut f = std::fs::File::from(fd);
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}
