//! Make the working tree match a snapshot (rewind) or write a snapshot into an empty directory
//! (fork). Only what differs is written; what the target lacks is removed. Paths that are
//! markers on either side, excluded by the current policy, or protected (unless asked) are
//! never touched. Every operation goes through directory fds without following symlinks, and
//! files are written to a temporary name and renamed into place.
//!
//! Modes are the permission bits only (`& 0o777`): a restore never writes a setuid or setgid
//! bit, whatever a tree entry says. Root restoring into a directory another user owns (a
//! rewind of a project bind-mounted from the host) gives what it creates to that directory's
//! owner and group, so the project stays the owner's, writable by the commands that run as
//! them.

use std::collections::HashSet;
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::beneath::{self, display_rel, join_rel};
use crate::error::{IoContext, Result, StoreError};
use crate::exclude::Excludes;
use crate::id::ObjectId;
use crate::pack::random_u64;
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, Tree, TreeEntry};
use crate::worktree::{StatKey, WorkTree};

pub struct RestoreOptions<'a> {
    pub excludes: &'a Excludes,
    /// Relative paths (files or directories) kept as they are now.
    pub protected: &'a [String],
    /// A working tree whose files may be cloned (`FICLONE`: shared extents, copy on write)
    /// where the filesystem can, else copied in the kernel, instead of written from the
    /// store: a fork's origin. Only a file its stat index vouches for, with the content the
    /// restore wants, is taken from it.
    pub clone_from: Option<&'a WorkTree>,
}

#[derive(Debug, Default)]
pub struct RestoreReport {
    /// Directories whose entries were changed (relative paths), for a targeted rescan.
    pub touched_dirs: HashSet<Vec<u8>>,
    pub written: u64,
    pub removed: u64,
    /// Of `written`, the files cloned from `RestoreOptions::clone_from`.
    pub cloned: u64,
    /// Of `written`, the files copied in the kernel from `RestoreOptions::clone_from`.
    pub copied: u64,
    /// Paths left alone because they are protected, with the reason.
    pub kept: Vec<String>,
    /// Paths that differ but were left alone because they are markers (on either side) or
    /// excluded by the current policy, in walk order.
    pub not_restored: Vec<NotRestored>,
}

/// A path a restore did not bring in line, and why.
#[derive(Debug, Clone)]
pub struct NotRestored {
    pub path: String,
    pub reason: MarkerReason,
    /// The target has something at this path (a marker, or content now excluded); false
    /// when only the current tree has it (it was left in place, not removed).
    pub in_target: bool,
}

struct Ctx<'a> {
    store: &'a Store,
    /// Writing into a new, empty directory (fork): files are created in place with O_EXCL
    /// instead of under a temporary name and renamed.
    fresh: bool,
    opts: &'a RestoreOptions<'a>,
    touched: Mutex<HashSet<Vec<u8>>>,
    kept: Mutex<Vec<String>>,
    not_restored: Mutex<Vec<NotRestored>>,
    written: AtomicU64,
    removed: AtomicU64,
    /// Files cloned from `opts.clone_from` rather than written.
    cloned: AtomicU64,
    /// Files copied in the kernel from `opts.clone_from` rather than written.
    copied: AtomicU64,
    /// Cleared at the first clone the filesystem refuses (no reflinks there, another
    /// filesystem): the rest are copied in the kernel instead (`copy_file_range`).
    can_clone: AtomicBool,
    /// Cleared at the first in-kernel copy the filesystem refuses: the rest are written from
    /// the store.
    can_copy: AtomicBool,
    /// `(uid, gid)` to give what is created: set when envgit runs as root and the root of the
    /// restore belongs to another user.
    owner: Option<(u32, u32)>,
    /// The umask when a fresh restore began: files whose mode it leaves alone need no chmod.
    umask: Option<u32>,
}

/// Permission bits only: never setuid, setgid or sticky from a tree entry.
const MODE_BITS: u32 = 0o777;

/// The owner of `root` when envgit runs as root and `root` is another user's.
fn foreign_owner(root: BorrowedFd<'_>) -> Option<(u32, u32)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let st = rustix::fs::fstat(root).ok()?;
    (st.st_uid != 0).then_some((st.st_uid, st.st_gid))
}

/// Turn the tree at `root` (whose current snapshot is `current`, `None` for an empty
/// directory) into `target`.
pub fn restore(
    store: &Store,
    root: BorrowedFd<'_>,
    current: Option<&ObjectId>,
    target: &ObjectId,
    opts: &RestoreOptions<'_>,
) -> Result<RestoreReport> {
    let cur = match current {
        Some(id) => Some(store.read_tree(id)?),
        None => None,
    };
    let tgt = store.read_tree(target)?;
    restore_trees(store, root, cur.as_ref(), &tgt, opts)
}

/// [`restore`] with the root trees given: `current` `None` writes `target` into an empty
/// directory (fork), one directory per task, in parallel.
pub(crate) fn restore_trees(
    store: &Store,
    root: BorrowedFd<'_>,
    current: Option<&Tree>,
    target: &Tree,
    opts: &RestoreOptions<'_>,
) -> Result<RestoreReport> {
    let ctx = Ctx {
        store,
        owner: foreign_owner(root),
        fresh: current.is_none(),
        umask: if current.is_none() { umask() } else { None },
        opts,
        touched: Mutex::default(),
        kept: Mutex::default(),
        not_restored: Mutex::default(),
        written: AtomicU64::new(0),
        removed: AtomicU64::new(0),
        cloned: AtomicU64::new(0),
        copied: AtomicU64::new(0),
        can_clone: AtomicBool::new(opts.clone_from.is_some()),
        can_copy: AtomicBool::new(opts.clone_from.is_some()),
    };
    let dir = beneath::open_dir_beneath(root, b"").at(&PathBuf::from("."))?;
    match current {
        Some(cur) => ctx.walk(dir.as_fd(), cur, target)?,
        None => ctx.walk_fresh(dir.as_fd(), target)?,
    }
    Ok(RestoreReport {
        touched_dirs: ctx.touched.into_inner().unwrap_or_default(),
        written: ctx.written.load(Ordering::Relaxed),
        cloned: ctx.cloned.load(Ordering::Relaxed),
        copied: ctx.copied.load(Ordering::Relaxed),
        removed: ctx.removed.load(Ordering::Relaxed),
        kept: ctx.kept.into_inner().unwrap_or_default(),
        not_restored: ctx.not_restored.into_inner().unwrap_or_default(),
    })
}

fn io_at(rel: &[u8]) -> PathBuf {
    PathBuf::from(display_rel(rel))
}

/// A subdirectory to descend into: its path, its current tree (`None`: new) and its target.
type Descend = (Vec<u8>, Option<ObjectId>, ObjectId);

/// The directory the walk is back in after finishing a child (for error messages).
fn child_parent(frames: &[(Vec<Descend>, usize)]) -> Vec<u8> {
    frames
        .last()
        .and_then(|(list, next)| list.get(next.wrapping_sub(1)))
        .and_then(|(rel, _, _)| beneath::parent_rel(rel).map(<[u8]>::to_vec))
        .unwrap_or_default()
}

fn stale(e: Errno, rel: &[u8]) -> StoreError {
    if e == Errno::STALE {
        return StoreError::Refused(format!(
            "{}: a directory was moved while envgit was writing into it; run the command again",
            if rel.is_empty() {
                ".".into()
            } else {
                display_rel(rel)
            }
        ));
    }
    StoreError::Io {
        path: io_at(rel),
        source: e.into(),
    }
}

impl Ctx<'_> {
    fn is_protected(&self, rel: &[u8]) -> bool {
        self.opts.protected.iter().any(|p| {
            let p = p.as_bytes();
            rel == p || (rel.len() > p.len() && rel.starts_with(p) && rel[p.len()] == b'/')
        })
    }

    /// True for a path, or a directory holding a path, that must survive a removal.
    fn must_keep(&self, rel: &[u8]) -> bool {
        self.is_protected(rel)
            || self.opts.protected.iter().any(|p| {
                let p = p.as_bytes();
                p.len() > rel.len() && p.starts_with(rel) && p[rel.len()] == b'/'
            })
    }

    fn not_restored(&self, rel: &[u8], reason: MarkerReason, in_target: bool) {
        if let Ok(mut n) = self.not_restored.lock() {
            n.push(NotRestored {
                path: display_rel(rel),
                reason,
                in_target,
            });
        }
    }

    fn touch(&self, rel: &[u8]) {
        if let Ok(mut t) = self.touched.lock() {
            t.insert(rel.to_vec());
        }
    }

    /// Depth first with an explicit stack and a bounded number of open directories
    /// ([`beneath::DirChain`]): any depth costs neither stack nor descriptors.
    fn walk(&self, root: BorrowedFd<'_>, cur: &Tree, tgt: &Tree) -> Result<()> {
        let mut chain = beneath::DirChain::new(root);
        let first = self.dir(root, b"", cur, tgt)?;
        let mut frames: Vec<(Vec<Descend>, usize)> = vec![(first, 0)];
        while let Some((list, next)) = frames.last_mut() {
            let Some((child, c, t)) = list.get(*next).cloned() else {
                frames.pop();
                if !frames.is_empty() {
                    chain.pop().map_err(|e| stale(e, &child_parent(&frames)))?;
                }
                continue;
            };
            *next += 1;
            let name = child.rsplit(|&b| b == b'/').next().unwrap_or(&child);
            let cname = beneath::cstr(name).at(&io_at(&child))?;
            chain.push(&cname).at(&io_at(&child))?;
            let ct = match c {
                Some(id) => self.store.read_tree(&id)?,
                None => Tree::default(),
            };
            let tt = self.store.read_tree(&t)?;
            let top = chain.top().at(&io_at(&child))?;
            let sub = self.dir(top, &child, &ct, &tt)?;
            frames.push((sub, 0));
        }
        Ok(())
    }

    /// Write `tgt` into the empty directory `root`: each directory is one task, which creates
    /// its entries and hands its subdirectories to new tasks, so directories are written in
    /// parallel. A task opens its directory from `root` beneath-only (no symlink followed) and
    /// holds that one descriptor while it runs; tasks wait in a queue, not on a stack, so any
    /// depth costs neither stack nor descriptors. The first error stops the rest.
    fn walk_fresh(&self, root: BorrowedFd<'_>, tgt: &Tree) -> Result<()> {
        let first = self.dir(root, b"", &Tree::default(), tgt)?;
        let failed: Mutex<Option<StoreError>> = Mutex::new(None);
        rayon::scope(|s| {
            for (rel, _, id) in first {
                self.spawn_fresh(s, root, rel, id, &failed);
            }
        });
        match failed.into_inner() {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(e),
            Err(_) => Err(StoreError::corrupt("poisoned")),
        }
    }

    fn spawn_fresh<'s>(
        &'s self,
        s: &rayon::Scope<'s>,
        root: BorrowedFd<'s>,
        rel: Vec<u8>,
        id: ObjectId,
        failed: &'s Mutex<Option<StoreError>>,
    ) {
        s.spawn(move |s| {
            if failed.lock().map_or(true, |f| f.is_some()) {
                return;
            }
            let written = (|| {
                let fd = beneath::open_dir_rel(root, &rel).map_err(|e| stale(e, &rel))?;
                let tree = self.store.read_tree(&id)?;
                self.dir(fd.as_fd(), &rel, &Tree::default(), &tree)
            })();
            match written {
                Ok(subdirs) => {
                    for (rel, _, id) in subdirs {
                        self.spawn_fresh(s, root, rel, id, failed);
                    }
                }
                Err(e) => {
                    if let Ok(mut f) = failed.lock() {
                        f.get_or_insert(e);
                    }
                }
            }
        });
    }

    /// Bring one directory's entries in line; returns the subdirectories to descend into.
    fn dir(&self, dir: BorrowedFd<'_>, rel: &[u8], cur: &Tree, tgt: &Tree) -> Result<Vec<Descend>> {
        let mut names: Vec<&[u8]> = cur
            .entries
            .iter()
            .chain(tgt.entries.iter())
            .map(|e| e.name.as_slice())
            .collect();
        names.sort_unstable();
        names.dedup();
        let mut recurse: Vec<Descend> = Vec::new();
        for name in names {
            let c = cur.get(name);
            let t = tgt.get(name);
            if c == t {
                continue;
            }
            let child = join_rel(rel, name);
            let marker = |e: Option<&TreeEntry>| match e.map(|e| e.kind) {
                Some(EntryKind::Marker(r)) => Some(r),
                _ => None,
            };
            // A fifo the step made where the snapshot holds a file or nothing goes: it holds no
            // content to lose, and the person's git hangs reading a `.gitattributes` that is
            // one. A socket stays (a live service may be bound to it), as do other markers.
            let planted_fifo = marker(c) == Some(MarkerReason::Special)
                && t.is_none_or(|t| !matches!(t.kind, EntryKind::Marker(_)))
                && beneath::cstr(name).is_ok_and(|n| {
                    beneath::lstat(dir, &n)
                        .is_ok_and(|st| beneath::file_type(&st) == rustix::fs::FileType::Fifo)
                });
            if !planted_fifo && let Some(reason) = marker(t).or(marker(c)) {
                self.not_restored(&child, reason, t.is_some());
                continue;
            }
            if self.is_protected(&child) {
                if let Ok(mut k) = self.kept.lock() {
                    k.push(display_rel(&child));
                }
                continue;
            }
            let t_is_dir = t.is_some_and(|e| e.kind == EntryKind::Dir);
            if c.is_none() && self.opts.excludes.is_excluded(&child, t_is_dir) {
                self.not_restored(&child, MarkerReason::Excluded, true);
                continue;
            }
            let cname = beneath::cstr(name).at(&io_at(&child))?;
            match (c, t) {
                (Some(c), Some(t)) if c.kind == EntryKind::Dir && t.kind == EntryKind::Dir => {
                    if c.mode != t.mode {
                        self.chmod(dir.as_fd(), &cname, &child, t.mode, true)?;
                    }
                    if c.id != t.id {
                        recurse.push((child, Some(c.id), t.id));
                    }
                }
                (Some(c), Some(t))
                    if c.kind == EntryKind::File && t.kind == EntryKind::File && c.id == t.id =>
                {
                    self.chmod(dir.as_fd(), &cname, &child, t.mode, false)?;
                    self.touch(rel);
                }
                (c, t) => {
                    if c.is_some() {
                        let gone = beneath::remove_all(dir.as_fd(), &cname, &child, &|r| {
                            self.must_keep(r)
                        })
                        .at(&io_at(&child))?;
                        self.touch(rel);
                        self.removed.fetch_add(1, Ordering::Relaxed);
                        if !gone {
                            if let Ok(mut k) = self.kept.lock() {
                                k.push(display_rel(&child));
                            }
                            continue; // something protected lives below: leave it be
                        }
                    }
                    if let Some(t) = t {
                        self.create(dir.as_fd(), &cname, &child, t, &mut recurse)?;
                        self.touch(rel);
                    }
                }
            }
        }
        Ok(recurse)
    }

    fn chmod(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        rel: &[u8],
        mode: u32,
        is_dir: bool,
    ) -> Result<()> {
        let flags = if is_dir {
            OFlags::DIRECTORY
        } else {
            OFlags::empty()
        };
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | flags,
            Mode::empty(),
        )
        .at(&io_at(rel))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & MODE_BITS)).at(&io_at(rel))
    }

    /// Give the file just created to the project's owner, if set.
    fn fchown_new(&self, file: &File, rel: &[u8]) -> Result<()> {
        let Some((uid, gid)) = self.owner else {
            return Ok(());
        };
        let (uid, gid) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        rustix::fs::fchown(file, Some(uid), Some(gid)).at(&io_at(rel))
    }

    /// Give `name` (just created, not followed if a link) to the project's owner, if set.
    fn chown_new(&self, dir: BorrowedFd<'_>, name: &CStr, rel: &[u8]) -> Result<()> {
        let Some((uid, gid)) = self.owner else {
            return Ok(());
        };
        let (uid, gid) = (
            rustix::fs::Uid::from_raw(uid),
            rustix::fs::Gid::from_raw(gid),
        );
        rustix::fs::chownat(dir, name, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)
            .at(&io_at(rel))
    }

    fn create(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        rel: &[u8],
        t: &TreeEntry,
        recurse: &mut Vec<Descend>,
    ) -> Result<()> {
        match t.kind {
            EntryKind::Dir => {
                match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700)) {
                    Ok(()) => self.chown_new(dir, name, rel)?,
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(e).at(&io_at(rel)),
                }
                self.chmod(dir, name, rel, t.mode, true)?;
                recurse.push((rel.to_vec(), None, t.id));
            }
            EntryKind::File => self.write_file(dir, name, rel, t)?,
            EntryKind::Symlink => {
                let target = self.store.read_file(&t.id)?;
                let tmp = tmp_name();
                rustix::fs::symlinkat(target.as_slice(), dir, tmp.as_c_str()).at(&io_at(rel))?;
                let placed = self.chown_new(dir, tmp.as_c_str(), rel).and_then(|()| {
                    rustix::fs::renameat(dir, tmp.as_c_str(), dir, name).at(&io_at(rel))
                });
                if let Err(e) = placed {
                    let _ = rustix::fs::unlinkat(dir, tmp.as_c_str(), AtFlags::empty());
                    return Err(e);
                }
            }
            EntryKind::Marker(_) => {}
        }
        self.written.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write_file(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        rel: &[u8],
        t: &TreeEntry,
    ) -> Result<()> {
        if self.fresh {
            // Created with its final mode (a new directory: nothing to hide while it is
            // written), so the umask alone decides whether a chmod is needed.
            let mode = t.mode & MODE_BITS;
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode),
            )
            .at(&io_at(rel))?;
            let file = File::from(fd);
            self.fchown_new(&file, rel)?;
            if !self.filled_from_origin(&file, rel, t)? {
                self.fill(&file, rel, t)?;
            }
            if self.umask.is_none_or(|u| mode & u != 0) {
                rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).at(&io_at(rel))?;
            }
            return Ok(());
        }
        let tmp = tmp_name();
        let fd = rustix::fs::openat(
            dir,
            tmp.as_c_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .at(&io_at(rel))?;
        let file = File::from(fd);
        let result = (|| {
            self.fchown_new(&file, rel)?;
            self.fill(&file, rel, t)?;
            rustix::fs::fchmod(&file, Mode::from_raw_mode(t.mode & MODE_BITS)).at(&io_at(rel))?;
            rustix::fs::renameat(dir, tmp.as_c_str(), dir, name).at(&io_at(rel))
        })();
        if result.is_err() {
            let _ = rustix::fs::unlinkat(dir, tmp.as_c_str(), AtFlags::empty());
        }
        result
    }
}

impl Ctx<'_> {
    /// Fills the new, empty `file` from the origin's copy of `rel` (`opts.clone_from`) when the
    /// origin's stat index vouches that copy holds `t`'s content and its `lstat` is the same
    /// before and after (opened beneath the origin's root, never through a link): a clone
    /// (`FICLONE`, shared extents) where the filesystem has reflinks, else a copy in the kernel
    /// (`copy_file_range`: neither the store's decompression nor its hashing, which were most
    /// of a fork's own CPU), but for a sparse file, which the store's path keeps sparse.
    /// Whether it did; `file` is left empty otherwise.
    fn filled_from_origin(&self, file: &File, rel: &[u8], t: &TreeEntry) -> Result<bool> {
        let Some(origin) = self.opts.clone_from else {
            return Ok(false);
        };
        if !self.can_clone.load(Ordering::Relaxed) && !self.can_copy.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let (dir, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], rel),
        };
        let Some(want) = origin.vouched_stat(dir, name, &t.id) else {
            return Ok(false);
        };
        let source = beneath::open_dir_rel(origin.root_fd(), dir).and_then(|d| {
            rustix::fs::openat(
                &d,
                beneath::cstr(name)?.as_c_str(),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
        });
        let Ok(source) = source else {
            return Ok(false);
        };
        let stat = || rustix::fs::fstat(&source).ok();
        let Some(st) = stat().filter(|st| StatKey::of(st) == want) else {
            return Ok(false);
        };
        let cloned = self.can_clone.load(Ordering::Relaxed) && self.clone(file, &source);
        if !cloned {
            let sparse = u64::try_from(st.st_blocks).unwrap_or(0) * 512 < st.st_size as u64;
            if sparse || !self.copied(file, &source, st.st_size as u64) {
                file.set_len(0).at(&io_at(rel))?;
                return Ok(false);
            }
        }
        if stat().is_some_and(|st| StatKey::of(&st) == want) {
            let count = if cloned { &self.cloned } else { &self.copied };
            count.fetch_add(1, Ordering::Relaxed);
            return Ok(true);
        }
        // Written to while it was read: emptied, for the store's content instead.
        file.set_len(0).at(&io_at(rel))?;
        Ok(false)
    }

    /// `FICLONE` of `source` into `file`; the first refusal of the filesystem ends the tries.
    fn clone(&self, file: &File, source: &impl AsFd) -> bool {
        match rustix::fs::ioctl_ficlone(file, source) {
            Ok(()) => true,
            Err(Errno::OPNOTSUPP | Errno::XDEV | Errno::INVAL | Errno::NOTTY | Errno::PERM) => {
                self.can_clone.store(false, Ordering::Relaxed);
                false
            }
            Err(_) => false,
        }
    }

    /// `len` bytes of `source` copied into `file` in the kernel; the first refusal of the
    /// filesystem ends the tries. False when the copy fell short (the file grew or shrank).
    fn copied(&self, file: &File, source: &impl AsFd, len: u64) -> bool {
        if !self.can_copy.load(Ordering::Relaxed) {
            return false;
        }
        let mut done = 0u64;
        while done < len {
            let want = usize::try_from(len - done).unwrap_or(usize::MAX);
            match rustix::fs::copy_file_range(source, None, file, None, want) {
                Ok(0) => return false,
                Ok(n) => done += n as u64,
                Err(Errno::INTR) => {}
                Err(Errno::OPNOTSUPP | Errno::XDEV | Errno::INVAL | Errno::NOSYS) => {
                    self.can_copy.store(false, Ordering::Relaxed);
                    return false;
                }
                Err(_) => return false,
            }
        }
        true
    }

    /// Write a file's content into a new, empty `file`, chunk by chunk (never the whole file in
    /// memory), leaving holes where the content has blocks of zeros: a sparse file stays sparse
    /// (a 96 MiB disk image with a few KiB of data costs a few KiB, not 96 MiB).
    fn fill(&self, file: &File, rel: &[u8], t: &TreeEntry) -> Result<()> {
        let mut pos: u64 = 0;
        let mut written_end: u64 = 0;
        self.store.read_file_into(&t.id, &mut |b| {
            if let Some(end) = write_sparse(file, pos, b).at(&io_at(rel))? {
                written_end = end;
            }
            pos += b.len() as u64;
            Ok(())
        })?;
        // Trailing zeros were skipped: the length makes them a hole at the end.
        if written_end < pos {
            file.set_len(pos).at(&io_at(rel))?;
        }
        Ok(())
    }
}

/// Holes are made for zero runs of at least this many aligned bytes (a filesystem block).
const HOLE_BLOCK: usize = 4096;
static ZEROS: [u8; HOLE_BLOCK] = [0; HOLE_BLOCK];

/// Write `buf` at `offset` of a file that is all hole beyond what was written: blocks of
/// zeros are skipped, runs of other blocks are written with one call each. Returns the end
/// of the last run written, if any.
fn write_sparse(file: &File, offset: u64, buf: &[u8]) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let mut run_start: Option<usize> = None;
    let mut last_end = None;
    let mut i = 0;
    while i < buf.len() {
        // Blocks aligned to the file offset, so a skipped block is a whole filesystem block.
        let abs = offset + i as u64;
        let to_boundary = HOLE_BLOCK - (abs % HOLE_BLOCK as u64) as usize;
        let end = (i + to_boundary).min(buf.len());
        let block = &buf[i..end];
        let zero = block == &ZEROS[..block.len()];
        match (zero, run_start) {
            (true, Some(s)) => {
                file.write_all_at(&buf[s..i], offset + s as u64)?;
                last_end = Some(offset + i as u64);
                run_start = None;
            }
            (false, None) => run_start = Some(i),
            _ => {}
        }
        i = end;
    }
    if let Some(s) = run_start {
        file.write_all_at(&buf[s..], offset + s as u64)?;
        last_end = Some(offset + buf.len() as u64);
    }
    Ok(last_end)
}

/// The process's umask, from `/proc/self/status` (reading it with `umask(2)` means setting
/// it, which races with other threads); `None` if it cannot be read.
fn umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

fn tmp_name() -> std::ffi::CString {
    std::ffi::CString::new(format!(".envgit-tmp-{:016x}", random_u64())).unwrap_or_default()
}

#[cfg(test)]
mod tests;
