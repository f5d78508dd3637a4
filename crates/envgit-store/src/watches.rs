//! Directory watches on one inotify instance, by relative path both ways: what the in-process
//! watcher ([`crate::LiveTree`]) and the watching daemon's log ([`crate::ChangeLog`]) share.

use std::collections::{BTreeMap, HashMap};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

use crate::beneath::join_rel;
use crate::change_note::{ChangeNote, Meaning, meaning};

/// What a directory watch reports: its entries made, removed, written, changed in mode or
/// owner, moved in and out, and the directory itself moving or going.
const WATCH_MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

/// One event: the watch, what happened, and the entry's name (`None`: the directory itself).
pub(crate) type Event = (i32, ReadFlags, Option<Vec<u8>>);

pub(crate) struct Watches {
    inotify: OwnedFd,
    /// watch descriptor -> directory (relative path)
    wds: HashMap<i32, Vec<u8>>,
    /// directory -> its watch descriptor; ordered, so a moved or removed subtree's watches are
    /// one range.
    watched: BTreeMap<Vec<u8>, i32>,
    buf: Vec<MaybeUninit<u8>>,
}

impl Watches {
    pub fn new() -> rustix::io::Result<Self> {
        Ok(Self {
            inotify: inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?,
            wds: HashMap::new(),
            watched: BTreeMap::new(),
            buf: vec![MaybeUninit::uninit(); 256 << 10],
        })
    }

    /// The inotify descriptor: to poll, or to close elsewhere.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }

    pub fn into_fd(self) -> OwnedFd {
        self.inotify
    }

    pub fn is_watched(&self, rel: &[u8]) -> bool {
        self.watched.contains_key(rel)
    }

    pub fn len(&self) -> usize {
        self.watched.len()
    }

    /// Adds a watch on the open directory `dir` (through the fd, so a directory swapped for a
    /// symlink is never watched). Safe to call from several threads; record each with
    /// [`Watches::added`].
    pub fn add(&self, dir: BorrowedFd<'_>) -> rustix::io::Result<i32> {
        let proc_path = format!("/proc/self/fd/{}", dir.as_raw_fd());
        inotify::add_watch(&self.inotify, proc_path.as_str(), WATCH_MASK)
    }

    /// `wd` watches `rel`. The same inode watched under another path (a hard-linked or moved
    /// directory): the path it is at now wins.
    pub fn added(&mut self, rel: Vec<u8>, wd: i32) {
        if let Some(old) = self.wds.insert(wd, rel.clone())
            && self.watched.get(&old) == Some(&wd)
        {
            self.watched.remove(&old);
        }
        self.watched.insert(rel, wd);
    }

    /// Whether `wd` watches a directory recorded with [`Watches::added`].
    pub fn has_wd(&self, wd: i32) -> bool {
        self.wds.contains_key(&wd)
    }

    /// Gives up a watch never recorded with [`Watches::added`] (one the caller keeps track of).
    pub fn remove_unrecorded(&self, wd: i32) {
        let _ = inotify::remove_watch(&self.inotify, wd);
    }

    /// The kernel dropped `wd` (`IN_IGNORED`: its directory moved or went).
    fn gone(&mut self, wd: i32) {
        if let Some(rel) = self.wds.remove(&wd)
            && self.watched.get(&rel) == Some(&wd)
        {
            self.watched.remove(&rel);
        }
    }

    /// Gives up the watches at `rel` and below: they name paths that are no longer right (a
    /// moved directory keeps its watches, which would report its old paths).
    pub fn forget_below(&mut self, rel: &[u8]) {
        let prefix = join_rel(rel, b"");
        let below: Vec<(Vec<u8>, i32)> = self
            .watched
            .get_key_value(rel)
            .into_iter()
            .chain(
                self.watched
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix)),
            )
            .map(|(k, wd)| (k.clone(), *wd))
            .collect();
        for (k, wd) in below {
            self.watched.remove(&k);
            self.wds.remove(&wd);
            let _ = inotify::remove_watch(&self.inotify, wd);
        }
    }

    /// Every watch given up, on a fresh instance (the old one's watches name paths nobody
    /// trusts any more, or there were too many).
    pub fn reset(&mut self) -> rustix::io::Result<()> {
        self.wds.clear();
        self.watched.clear();
        self.inotify = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        Ok(())
    }

    /// What an event means, with this side's bookkeeping done: a watch the kernel dropped is
    /// forgotten, and the watches at and below a directory that came or went are given up
    /// (they name paths that are no longer right). `None`: the event is about a watch given
    /// up already; whoever reads that directory reads it whole.
    pub fn understand(
        &mut self,
        wd: i32,
        flags: ReadFlags,
        name: Option<&[u8]>,
    ) -> Option<Meaning> {
        let rel = self.wds.get(&wd)?;
        let m = meaning(rel, flags, name);
        match &m {
            Meaning::WatchGone => self.gone(wd),
            Meaning::Change(ChangeNote::Name {
                dir,
                name,
                fresh: true,
            }) => self.forget_below(&join_rel(dir, name)),
            _ => {}
        }
        Some(m)
    }

    /// The events queued now, in order; empty when there are none.
    pub fn read(&mut self) -> rustix::io::Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut reader = inotify::Reader::new(&self.inotify, &mut self.buf);
        loop {
            match reader.next() {
                Ok(ev) => events.push((
                    ev.wd(),
                    ev.events(),
                    ev.file_name()
                        .map(|n| n.to_bytes().to_vec())
                        .filter(|n| !n.is_empty()),
                )),
                Err(Errno::AGAIN) => break,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e),
            }
            if reader.is_buffer_empty() {
                break;
            }
        }
        Ok(events)
    }
}
