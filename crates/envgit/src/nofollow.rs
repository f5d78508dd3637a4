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

/// Read the file `rel` ('/'-separated) below `root` without following any symlink on the way
/// (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a directory of the project on the way may be a
/// link the agent planted.
pub fn read_beneath(root: &Path, rel: &str) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let dir = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let fd = rustix::fs::openat2(
        &dir,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let mut f = std::fs::File::from(fd);
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}
