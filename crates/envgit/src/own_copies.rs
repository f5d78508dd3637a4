//! The project's own copy of each file in its excluded directories that shares its inode with
//! another link. pnpm links every file of `node_modules/` to its store, uv every file of a
//! `.venv/` to its cache, and both are shared by all the person's projects, which run them on
//! the host: a write inside the sandbox through such a link would change them all. There are
//! too many to bind read-only one by one (a mount each), so before the step each becomes a
//! copy of its own (a clone where the filesystem has reflinks), with its mode, owner and
//! times, renamed over the link. The file outside is never written.
//!
//! Every path is opened beneath the project's root without following a symlink the agent
//! could have planted, and a file is copied only if it is still a regular file with more than
//! one link when opened.

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use envgit_store::beneath;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, Timespec, Timestamps};

/// From this many files on, a progress line says how far the copying is.
const PROGRESS_FROM: usize = 2_000;

/// What [`make_own_copies`] did.
#[derive(Debug, Default)]
pub(crate) struct OwnCopies {
    /// Files that became copies of their own, and their bytes.
    pub copied: usize,
    pub bytes: u64,
    /// Files that could not (with why): they are still links.
    pub failed: Vec<(PathBuf, io::Error)>,
}

/// Gives the project at `root` its own copy of each of `files` (absolute paths below it,
/// sorted).
pub(crate) fn make_own_copies(root: &Path, files: &[PathBuf]) -> OwnCopies {
    let root_fd = match beneath::open_root(root) {
        Ok(fd) => fd,
        Err(e) => {
            return OwnCopies {
                failed: files.iter().map(|f| (f.clone(), e.into())).collect(),
                ..OwnCopies::default()
            };
        }
    };
    let done = Arc::new(AtomicUsize::new(0));
    let _progress = (files.len() >= PROGRESS_FROM).then(|| {
        let (done, total) = (Arc::clone(&done), files.len());
        crate::commands::progress::Ticker::start(move || {
            format!(
                "giving the project its own copies of files linked outside it: {}/{total}",
                done.load(Ordering::Relaxed)
            )
        })
    });
    // Making a file is most of a copy's cost. On tmpfs (the CPU's part) four workers made
    // 30,000 in 0.7x the time of one, and of `cp -a`. Each worker takes a run of neighbours
    // (one directory's files are next to each other), so most directories are opened once.
    let workers = files.len().div_ceil(PER_WORKER_AT_LEAST).clamp(1, WORKERS);
    let parts: Vec<OwnCopies> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(files.len().div_ceil(workers).max(1))
            .map(|part| s.spawn(|| copy_each(root, root_fd.as_fd(), part, &done)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    parts
        .into_iter()
        .fold(OwnCopies::default(), |mut all, part| {
            all.copied += part.copied;
            all.bytes += part.bytes;
            all.failed.extend(part.failed);
            all
        })
}

/// How many temporary names this process has taken.
static TEMPORARIES: AtomicUsize = AtomicUsize::new(0);

/// Copies made at once, at most, and the files that make another worker worth starting.
const WORKERS: usize = 4;
const PER_WORKER_AT_LEAST: usize = 64;

/// [`make_own_copies`] of `files`, one after the other, each counted in `done`.
fn copy_each(
    root: &Path,
    root_fd: BorrowedFd<'_>,
    files: &[PathBuf],
    done: &AtomicUsize,
) -> OwnCopies {
    let mut out = OwnCopies::default();
    let mut open_dir: Option<(&[u8], OwnedFd)> = None;
    for path in files {
        done.fetch_add(1, Ordering::Relaxed);
        let copied = (|| {
            let rel = path
                .strip_prefix(root)
                .map_err(|_| io::Error::other("not below the project"))?
                .as_os_str()
                .as_bytes();
            let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
                Some(i) => (&rel[..i], &rel[i + 1..]),
                None => (&b""[..], rel),
            };
            let dir_fd = match &open_dir {
                Some((d, fd)) if *d == dir => fd,
                _ => {
                    &open_dir
                        .insert((dir, beneath::open_dir_rel(root_fd, dir)?))
                        .1
                }
            };
            // One name per copy: workers may copy in the same directory at once.
            let n = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
            let tmp =
                beneath::cstr(format!(".envgit-own-copy.{}.{n}", std::process::id()).as_bytes())?;
            copy_over(dir_fd.as_fd(), &beneath::cstr(name)?, &tmp)
        })();
        match copied {
            Ok(Some(bytes)) => {
                out.copied += 1;
                out.bytes += bytes;
            }
            Ok(None) => {}
            Err(e) => out.failed.push((path.clone(), e)),
        }
    }
    out
}

/// A short description of where `files` are: their top directories below `root`.
pub(crate) fn where_they_are(root: &Path, files: &[PathBuf]) -> String {
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|f| f.strip_prefix(root).ok()?.components().next())
        .map(|c| format!("{}/", c.as_os_str().to_string_lossy()))
        .collect();
    let mut names: Vec<String> = tops.iter().take(3).cloned().collect();
    if tops.len() > 3 {
        names.push(format!("{} more", tops.len() - 3));
    }
    names.join(", ")
}

/// Replaces the file `name` of `dir` by a copy of its own, made at the name `tmp`, when it is
/// a regular file with more than one link: its size, or `None` when it was not (any more).
fn copy_over(dir: BorrowedFd<'_>, name: &CStr, tmp: &CStr) -> io::Result<Option<u64>> {
    let source = File::from(beneath::open_file(dir, name)?);
    let st = rustix::fs::fstat(&source)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_nlink <= 1 {
        return Ok(None);
    }
    let create = || {
        rustix::fs::openat(
            dir,
            tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
    };
    let copy = match create() {
        // Left by an envgit that died copying (or planted): only the name is ours to remove.
        Err(rustix::io::Errno::EXIST) => {
            rustix::fs::unlinkat(dir, tmp, AtFlags::empty())?;
            create()?
        }
        created => created?,
    };
    let copy = File::from(copy);
    let filled = fill(&copy, &source, &st).and_then(|()| {
        rustix::fs::renameat(dir, tmp, dir, name)?;
        Ok(())
    });
    if filled.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
    }
    filled.map(|()| Some(st.st_size as u64))
}

/// `copy` made what `source` (whose `fstat` is `st`) holds, with its owner, mode and times:
/// a build tool that compares times sees the same file.
fn fill(copy: &File, source: &File, st: &Stat) -> io::Result<()> {
    if rustix::fs::ioctl_ficlone(copy, source).is_err() {
        // Linux's `std::io::copy` of a file to a file copies in the kernel
        // (`copy_file_range`) where it can.
        io::copy(&mut &*source, &mut &*copy)?;
    }
    let after = rustix::fs::fstat(source)?;
    if (after.st_size, after.st_mtime, after.st_mtime_nsec)
        != (st.st_size, st.st_mtime, st.st_mtime_nsec)
    {
        return Err(io::Error::other("it changed while it was copied"));
    }
    let mine = rustix::fs::fstat(copy)?;
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid) {
        rustix::fs::fchown(
            copy,
            Some(rustix::process::Uid::from_raw(st.st_uid)),
            Some(rustix::process::Gid::from_raw(st.st_gid)),
        )?;
    }
    // Without set-id bits: a copy envgit made is never a set-id program.
    rustix::fs::fchmod(copy, Mode::from_raw_mode(st.st_mode & 0o1777))?;
    let at = |s: i64, ns: u64| Timespec {
        tv_sec: s,
        tv_nsec: ns as _,
    };
    rustix::fs::futimens(
        copy,
        &Timestamps {
            last_access: at(st.st_atime, st.st_atime_nsec),
            last_modification: at(st.st_mtime, st.st_mtime_nsec),
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// A project with `node_modules/a/x.js` linked to `store/x.js`, which sits beside it.
    fn linked_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let (root, store) = (tmp.path().join("p"), tmp.path().join("store"));
        std::fs::create_dir_all(root.join("node_modules/a")).unwrap();
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("x.js"), "x").unwrap();
        std::fs::hard_link(store.join("x.js"), root.join("node_modules/a/x.js")).unwrap();
        (tmp, root, store)
    }

    #[test]
    fn a_linked_file_becomes_a_copy_with_its_mode_and_times() {
        let (_tmp, root, store) = linked_project();
        let file = root.join("node_modules/a/x.js");
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o4755))
            .unwrap();
        let before = std::fs::metadata(&file).unwrap();
        let plain = root.join("node_modules/a/plain.js");
        std::fs::write(&plain, "p").unwrap();
        let done = make_own_copies(&root, &[file.clone(), plain.clone()]);
        assert_eq!((done.copied, done.bytes), (1, 1), "{:?}", done.failed);
        assert!(done.failed.is_empty());
        let after = std::fs::metadata(&file).unwrap();
        assert_eq!(after.nlink(), 1);
        assert_ne!(after.ino(), before.ino());
        assert_eq!(after.mode() & 0o7777, 0o755, "set-id bit dropped");
        assert_eq!(
            (after.mtime(), after.mtime_nsec(), after.uid(), after.gid()),
            (
                before.mtime(),
                before.mtime_nsec(),
                before.uid(),
                before.gid()
            )
        );
        std::fs::write(&file, "changed").unwrap();
        assert_eq!(std::fs::read_to_string(store.join("x.js")).unwrap(), "x");
        assert_eq!(std::fs::metadata(store.join("x.js")).unwrap().nlink(), 1);
        assert_eq!(where_they_are(&root, &[file, plain]), "node_modules/");
    }

    /// A directory on the way swapped for a symlink is not followed, and a directory planted
    /// where the copy is made is not written into: the file stays a link, reported as failed.
    /// A file at that name (left by a copy that died half way) is removed, and the copy made.
    #[test]
    fn links_on_the_way_and_planted_names_are_not_followed() {
        let (tmp, root, store) = linked_project();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::hard_link(store.join("x.js"), elsewhere.join("y.js")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("node_modules/b")).unwrap();
        let through_link = [root.join("node_modules/b/y.js")];
        let done = make_own_copies(&root, &through_link);
        assert_eq!(done.copied, 0);
        assert_eq!(done.failed.len(), 1);
        assert_eq!(
            std::fs::metadata(elsewhere.join("y.js")).unwrap().nlink(),
            3
        );
        let dir = beneath::open_root(&root.join("node_modules/a")).unwrap();
        let (name, at) = (c"x.js", c".envgit-own-copy.test");
        let planted = root.join("node_modules/a/.envgit-own-copy.test");
        std::fs::create_dir(&planted).unwrap();
        assert!(copy_over(dir.as_fd(), name, at).is_err());
        assert_eq!(std::fs::metadata(store.join("x.js")).unwrap().nlink(), 3);
        assert!(planted.is_dir());
        std::fs::remove_dir(&planted).unwrap();
        std::fs::write(&planted, "half").unwrap();
        assert_eq!(copy_over(dir.as_fd(), name, at).unwrap(), Some(1));
        assert!(!planted.exists());
        assert_eq!(std::fs::metadata(store.join("x.js")).unwrap().nlink(), 2);
    }
}
