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
    open_dir_resolving(
        root,
        rel,
        OFlags::NOFOLLOW,
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Open `rel` below `root` as a directory the way a search of it would reach it, following
/// the links on the way that stay below `root`; one that leads out fails with `EXDEV`.
pub fn open_dir_beneath_through_links(
    root: BorrowedFd<'_>,
    rel: &[u8],
) -> rustix::io::Result<OwnedFd> {
    open_dir_resolving(
        root,
        rel,
        OFlags::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

fn open_dir_resolving(
    root: BorrowedFd<'_>,
    rel: &[u8],
    extra: OFlags,
    resolve: ResolveFlags,
) -> rustix::io::Result<OwnedFd> {
    let path: &OsStr = if rel.is_empty() {
        OsStr::new(".")
    } else {
        OsStr::from_bytes(rel)
    };
    rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | extra,
        Mode::empty(),
        resolve,
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

/// Open `rel` below `root` as a directory like [`open_dir_beneath`], also when `rel` is longer
/// than the kernel's PATH_MAX: then it is walked one component at a time with `O_NOFOLLOW`,
/// holding at most two descriptors.
pub fn open_dir_rel(root: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    match open_dir_beneath(root, rel) {
        Err(Errno::NAMETOOLONG) => {}
        r => return r,
    }
    let mut cur: Option<OwnedFd> = None;
    for part in rel.split(|&b| b == b'/') {
        if part.is_empty() || part == b"." {
            continue;
        }
        if part == b".." {
            return Err(Errno::XDEV);
        }
        let name = cstr(part)?;
        let next = open_subdir(cur.as_ref().map_or(root, |f| f.as_fd()), &name)?;
        cur = Some(next);
    }
    match cur {
        Some(fd) => Ok(fd),
        None => open_dir_beneath(root, b""),
    }
}

/// At most this many directory descriptors are held by one [`DirChain`].
pub const CHAIN_FDS: usize = 16;

struct Level {
    fd: Option<OwnedFd>,
    dev: u64,
    ino: u64,
}

/// The directories from a base directory down to where a depth-first walk is, holding a
/// descriptor only for the deepest [`CHAIN_FDS`] of them, so a walk of any depth needs a fixed
/// number of descriptors (and no recursion). Going back up past the held ones re-opens the
/// parent through `..` of the child and checks it is the same directory (device and inode)
/// that was walked down through; if it is not (the tree was moved meanwhile) the walk fails
/// with `ESTALE` rather than continue somewhere else.
pub struct DirChain<'a> {
    base: BorrowedFd<'a>,
    levels: Vec<Level>,
    /// Levels `lo..` hold their descriptor.
    lo: usize,
}

impl<'a> DirChain<'a> {
    pub fn new(base: BorrowedFd<'a>) -> Self {
        Self {
            base,
            levels: Vec::new(),
            lo: 0,
        }
    }

    /// The directory the walk is in.
    pub fn top(&self) -> rustix::io::Result<BorrowedFd<'_>> {
        match self.levels.last() {
            None => Ok(self.base),
            Some(l) => l.fd.as_ref().map(|f| f.as_fd()).ok_or(Errno::BADF),
        }
    }

    /// Step down into the subdirectory `name` of the current directory (never a symlink).
    pub fn push(&mut self, name: &CStr) -> rustix::io::Result<()> {
        let fd = open_subdir(self.top()?, name)?;
        let st = rustix::fs::fstat(&fd)?;
        self.levels.push(Level {
            fd: Some(fd),
            dev: st.st_dev,
            ino: st.st_ino,
        });
        if self.levels.len() - self.lo > CHAIN_FDS {
            self.levels[self.lo].fd = None;
            self.lo += 1;
        }
        Ok(())
    }

    /// Step back up to the parent of the current directory.
    pub fn pop(&mut self) -> rustix::io::Result<()> {
        let Some(child) = self.levels.pop() else {
            return Err(Errno::INVAL);
        };
        let n = self.levels.len();
        if n == 0 {
            self.lo = 0;
            return Ok(());
        }
        if self.lo < n {
            return Ok(()); // the parent still holds its descriptor
        }
        let child_fd = child.fd.ok_or(Errno::BADF)?;
        let parent = rustix::fs::openat(
            &child_fd,
            c"..",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&parent)?;
        let want = &mut self.levels[n - 1];
        if (st.st_dev, st.st_ino) != (want.dev, want.ino) {
            return Err(Errno::STALE);
        }
        want.fd = Some(parent);
        self.lo = n - 1;
        Ok(())
    }
}

/// Remove `name` from `dir`, recursively for directories, without following links. Entries for
/// which `keep(rel)` is true survive (and so do their parents). Returns whether `name` is gone.
/// The walk is iterative with a bounded number of open descriptors, whatever the depth.
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
    struct Frame {
        name: CString,
        rel: Vec<u8>,
        names: Vec<CString>,
        next: usize,
        all_gone: bool,
    }
    let mut chain = DirChain::new(dir);
    chain.push(name)?;
    let mut frames = vec![Frame {
        name: name.to_owned(),
        rel: rel.to_vec(),
        names: read_names(chain.top()?)?,
        next: 0,
        all_gone: true,
    }];
    while let Some(f) = frames.last_mut() {
        if let Some(child) = f.names.get(f.next).cloned() {
            f.next += 1;
            let child_rel = join_rel(&f.rel, child.to_bytes());
            if keep(&child_rel) {
                f.all_gone = false;
                continue;
            }
            let top = chain.top()?;
            let st = match lstat(top, &child) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
            if file_type(&st) != FileType::Directory {
                match rustix::fs::unlinkat(top, &child, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(e) => return Err(e),
                }
                continue;
            }
            match chain.push(&child) {
                Ok(()) => {}
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            }
            let names = read_names(chain.top()?)?;
            frames.push(Frame {
                name: child,
                rel: child_rel,
                names,
                next: 0,
                all_gone: true,
            });
            continue;
        }
        let all_gone = f.all_gone;
        let Some(done) = frames.pop() else { break };
        chain.pop()?;
        let gone = all_gone
            && match rustix::fs::unlinkat(chain.top()?, &done.name, AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => true,
                Err(Errno::NOTEMPTY) => false,
                Err(e) => return Err(e),
            };
        match frames.last_mut() {
            Some(parent) => parent.all_gone &= gone,
            None => return Ok(gone),
        }
    }
    Ok(false)
}

/// Number of components of a relative path (the root is 0).
pub fn depth_of(rel: &[u8]) -> usize {
    if rel.is_empty() {
        0
    } else {
        rel.iter().filter(|&&b| b == b'/').count() + 1
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
