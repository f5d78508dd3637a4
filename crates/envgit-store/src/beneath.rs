//! Host-side file operations on the project that never follow a symlink the agent could have
//! planted: every path is walked one component at a time from a directory fd with
//! `O_NOFOLLOW`, or opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// Open a directory that the caller names (the project root): the only path that is resolved
/// the ordinary way, because the user gave it.
pub fn open_root(path: &std::path::Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Open `rel` ('/'-separated, relative) below `root` as a directory, refusing any symlink and
/// any escape. The empty path is the root itself.
pub fn open_dir_beneath(root: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    let path: &OsStr = if rel.is_empty() {
        OsStr::new(".")
    } else {
        OsStr::from_bytes(rel)
    };
    rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Open the subdirectory `name` of `dir` without following a symlink.
pub fn open_subdir(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::empty(),
    )
}

/// Open the regular file `name` of `dir` for reading without following a symlink or blocking
/// on a fifo swapped in after the lstat.
pub fn open_file(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
}

pub fn lstat(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<Stat> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
}

/// Entry names of a directory, without `.` and `..`, sorted by bytes.
pub fn read_names(dir: BorrowedFd<'_>) -> rustix::io::Result<Vec<CString>> {
    let mut d = Dir::read_from(dir)?;
    let mut names = Vec::new();
    while let Some(entry) = d.read() {
        let entry = entry?;
        let name = entry.file_name();
        let b = name.to_bytes();
        if b == b"." || b == b".." {
            continue;
        }
        names.push(name.to_owned());
    }
    names.sort_unstable();
    Ok(names)
}

pub fn cstr(name: &[u8]) -> rustix::io::Result<CString> {
    CString::new(name).map_err(|_| Errno::INVAL)
}

pub fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// Remove `name` from `dir`, recursively for directories, without following links. Entries for
/// which `keep(rel)` is true survive (and so do their parents). Returns whether `name` is gone.
pub fn remove_all(
    dir: BorrowedFd<'_>,
    name: &CStr,
    rel: &[u8],
    keep: &dyn Fn(&[u8]) -> bool,
) -> rustix::io::Result<bool> {
    if keep(rel) {
        return Ok(false);
    }
    let st = match lstat(dir, name) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(true),
        Err(e) => return Err(e),
    };
    if file_type(&st) != FileType::Directory {
        return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(true),
            Err(e) => Err(e),
        };
    }
    let sub = open_subdir(dir, name)?;
    let mut all_gone = true;
    for child in read_names(sub.as_fd())? {
        let child_rel = join_rel(rel, child.to_bytes());
        all_gone &= remove_all(sub.as_fd(), &child, &child_rel, keep)?;
    }
    if !all_gone {
        return Ok(false);
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(true),
        Err(Errno::NOTEMPTY) => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn join_rel(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        return name.to_vec();
    }
    let mut out = Vec::with_capacity(parent.len() + 1 + name.len());
    out.extend_from_slice(parent);
    out.push(b'/');
    out.extend_from_slice(name);
    out
}

pub fn parent_rel(rel: &[u8]) -> Option<&[u8]> {
    if rel.is_empty() {
        return None;
    }
    Some(match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => &rel[..i],
        None => b"",
    })
}

pub fn display_rel(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_beneath_refuses_symlinks_and_escapes() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("link")).unwrap();
        let root = open_root(t.path()).unwrap();
        assert!(open_dir_beneath(root.as_fd(), b"d").is_ok());
        assert!(open_dir_beneath(root.as_fd(), b"").is_ok());
        assert!(open_dir_beneath(root.as_fd(), b"link").is_err());
        assert!(open_dir_beneath(root.as_fd(), b"../").is_err());
        assert!(open_subdir(root.as_fd(), c"link").is_err());
    }

    #[test]
    fn rel_helpers() {
        assert_eq!(join_rel(b"", b"a"), b"a");
        assert_eq!(join_rel(b"a", b"b"), b"a/b");
        assert_eq!(parent_rel(b"a/b"), Some(&b"a"[..]));
        assert_eq!(parent_rel(b"a"), Some(&b""[..]));
        assert_eq!(parent_rel(b""), None);
    }
}
