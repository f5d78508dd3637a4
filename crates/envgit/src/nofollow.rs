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

/// Read the file `rel` ('/'-separated) below the directory `root` is open as, without
/// following any symlink on the way (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a directory of
/// the project on the way may be a link the agent planted. At most `limit` bytes are read.
pub fn read_beneath_at(
    root: std::os::fd::BorrowedFd<'_>,
    rel: &str,
    limit: u64,
) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let fd = rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )?;
    let mut out = Vec::new();
    std::fs::File::from(fd).take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// [`read_beneath_at`] from the project directory `root` itself: `rel` below it, no link
/// followed on the way, a pipe read without waiting, at most `limit` bytes.
pub fn read_in_project(root: &Path, rel: &str, limit: u64) -> std::io::Result<Vec<u8>> {
    let dir = envgit_store::beneath::open_root(root)?;
    read_beneath_at(std::os::fd::AsFd::as_fd(&dir), rel, limit)
}

/// Read the person's own file at `path` (a link followed: `~/.gitconfig` may lead into a
/// dotfiles project, where a step could have put a pipe or a huge file in its place): a
/// regular file only, opened without blocking, at most `limit` bytes (more is an error).
pub fn read_regular_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    std::fs::File::from(fd)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(std::io::Error::other("larger than a configuration file"));
    }
    Ok(out)
}
