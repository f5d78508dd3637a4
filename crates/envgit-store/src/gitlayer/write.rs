//! Writes into the host's `.git`: beneath its directory fd, never through a symlink, atomic
//! (a temporary file renamed over the target in the same directory), no exec or setuid bits.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;

use crate::beneath::{cstr, lstat, open_file, open_subdir};

/// Whom what envgit writes into `root` must belong to: its owner, when envgit runs as root on
/// another user's repository (a root-owned directory in their `.git` would stop their own git
/// from writing objects there). `None`: keep envgit's own ids.
fn owner_to_give(root: BorrowedFd<'_>) -> Option<(rustix::fs::Uid, rustix::fs::Gid)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let st = rustix::fs::fstat(root).ok()?;
    (st.st_uid != 0).then(|| {
        (
            rustix::fs::Uid::from_raw(st.st_uid),
            rustix::fs::Gid::from_raw(st.st_gid),
        )
    })
}

/// Open (creating when `create`) the parent directory of `rel` beneath `root`.
pub fn parent(root: BorrowedFd<'_>, rel: &str, create: bool) -> rustix::io::Result<OwnedFd> {
    let owner = if create { owner_to_give(root) } else { None };
    let mut cur = rustix::io::dup(root)?;
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len() - 1] {
        if part.is_empty() || *part == "." || *part == ".." {
            return Err(Errno::INVAL);
        }
        let name = cstr(part.as_bytes())?;
        let mut made = false;
        if create {
            match rustix::fs::mkdirat(cur.as_fd(), &name, Mode::from_raw_mode(0o755)) {
                Ok(()) => made = true,
                Err(Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
        }
        cur = open_subdir(cur.as_fd(), &name)?;
        if let (true, Some((uid, gid))) = (made, owner) {
            rustix::fs::fchown(&cur, Some(uid), Some(gid))?;
        }
    }
    Ok(cur)
}

fn leaf(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// The content of `rel` in the host's `.git`: `None` when absent; an error when it is not a
/// regular file (a symlink is never followed).
pub fn read(root: BorrowedFd<'_>, rel: &str) -> rustix::io::Result<Option<Vec<u8>>> {
    let dir = match parent(root, rel, false) {
        Ok(d) => d,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let name = cstr(leaf(rel).as_bytes())?;
    let fd = match open_file(dir.as_fd(), &name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    read_fd(fd).map(Some)
}

/// Whether anything is at `rel` (never through a symlink); an unreadable path counts as
/// there.
pub fn exists(root: BorrowedFd<'_>, rel: &str) -> bool {
    let dir = match parent(root, rel, false) {
        Ok(d) => d,
        Err(Errno::NOENT) => return false,
        Err(_) => return true,
    };
    match cstr(leaf(rel).as_bytes()) {
        Ok(name) => !matches!(lstat(dir.as_fd(), &name), Err(Errno::NOENT)),
        Err(_) => true,
    }
}

/// Read a regular file's whole content from `fd`.
pub fn read_fd(fd: OwnedFd) -> rustix::io::Result<Vec<u8>> {
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Errno::INVAL);
    }
    let mut f = std::fs::File::from(fd);
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut buf).map_err(|e| {
        Errno::from_raw_os_error(e.raw_os_error().unwrap_or(Errno::IO.raw_os_error()))
    })?;
    Ok(buf)
}

/// Replace `rel` with `data` (mode 0644, or 0444 for immutable objects), modified at `mtime`
/// when given (now otherwise).
pub fn write(
    root: BorrowedFd<'_>,
    rel: &str,
    data: &[u8],
    readonly: bool,
    mtime: Option<Timespec>,
) -> rustix::io::Result<()> {
    let dir = parent(root, rel, true)?;
    let name = cstr(leaf(rel).as_bytes())?;
    if let Ok(st) = lstat(dir.as_fd(), &name)
        && rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
    {
        return Err(Errno::ISDIR);
    }
    let tmp = cstr(format!(".envgit-import-{}.tmp", std::process::id()).as_bytes())?;
    let _ = rustix::fs::unlinkat(dir.as_fd(), &tmp, AtFlags::empty());
    let mode = if readonly { 0o444 } else { 0o644 };
    let fd = rustix::fs::openat(
        dir.as_fd(),
        &tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?;
    if let Some((uid, gid)) = owner_to_give(root) {
        rustix::fs::fchown(&fd, Some(uid), Some(gid))?;
    }
    let mut f = std::fs::File::from(fd);
    // The time is set once the data is in (a write moves it) and before the sync.
    let r = std::io::Write::write_all(&mut f, data)
        .and_then(|()| match mtime {
            Some(t) => rustix::fs::futimens(&f, &keep_atime(t)).map_err(std::io::Error::from),
            None => Ok(()),
        })
        .and_then(|()| f.sync_data());
    if let Err(e) = r {
        let _ = rustix::fs::unlinkat(dir.as_fd(), &tmp, AtFlags::empty());
        return Err(Errno::from_raw_os_error(
            e.raw_os_error().unwrap_or(Errno::IO.raw_os_error()),
        ));
    }
    rustix::fs::renameat(dir.as_fd(), &tmp, dir.as_fd(), &name)
}

fn keep_atime(mtime: Timespec) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: mtime,
    }
}

/// The modification time of the regular file `rel` (never through a symlink).
pub fn mtime(root: BorrowedFd<'_>, rel: &str) -> rustix::io::Result<Timespec> {
    let dir = parent(root, rel, false)?;
    let fd = open_file(dir.as_fd(), &cstr(leaf(rel).as_bytes())?)?;
    let st = rustix::fs::fstat(&fd)?;
    Ok(Timespec {
        tv_sec: st.st_mtime,
        tv_nsec: st.st_mtime_nsec as _,
    })
}

/// Move the regular file `rel`'s modification time forward to `mtime`; one already as new is
/// left alone.
pub fn advance_mtime(root: BorrowedFd<'_>, rel: &str, mtime: Timespec) -> rustix::io::Result<()> {
    let dir = parent(root, rel, false)?;
    let fd = open_file(dir.as_fd(), &cstr(leaf(rel).as_bytes())?)?;
    let st = rustix::fs::fstat(&fd)?;
    if (st.st_mtime, st.st_mtime_nsec as i64) >= (mtime.tv_sec, mtime.tv_nsec) {
        return Ok(());
    }
    rustix::fs::futimens(&fd, &keep_atime(mtime))
}

/// Give the file `rel` (never through a symlink) to the repository's owner, when envgit runs
/// as root on another user's repository (see `owner_to_give`); a no-op otherwise.
pub fn give_to_owner(root: BorrowedFd<'_>, rel: &str) -> rustix::io::Result<()> {
    let Some((uid, gid)) = owner_to_give(root) else {
        return Ok(());
    };
    let dir = parent(root, rel, false)?;
    rustix::fs::chownat(
        dir.as_fd(),
        &cstr(leaf(rel).as_bytes())?,
        Some(uid),
        Some(gid),
        AtFlags::SYMLINK_NOFOLLOW,
    )
}

/// Remove the file `rel` (absent is fine).
pub fn remove(root: BorrowedFd<'_>, rel: &str) -> rustix::io::Result<()> {
    let dir = match parent(root, rel, false) {
        Ok(d) => d,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    let name = cstr(leaf(rel).as_bytes())?;
    match rustix::fs::unlinkat(dir.as_fd(), &name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}
