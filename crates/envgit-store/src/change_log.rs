//! The watching daemon's core (git's `fsmonitor--daemon` idea): inotify watches on every
//! directory a scan would read, and a log of what changed, numbered, so that a one-shot command
//! can ask "what changed since the token my stat index was saved with?" and read only that
//! instead of walking the whole project ([`crate::LiveTree::feed`]).
//!
//! No cookie file is needed to sync with a client (git needs one for macOS's FSEvents): inotify
//! queues an event inside the system call that causes it, so when a client asks, everything
//! that happened before is in the queue already, and [`ChangeLog::since`] drains it first.
//!
//! A token is only answered when the log holds every change after it: a token of another
//! daemon, one from before a queue overflow, or one older than what the bounded log keeps gets
//! `None`, and the client reads everything. A directory that appears is watched (and, below
//! it, every directory) while its event is taken, before any later question is answered; the
//! client walks such a directory whole, so what happened in it before its watch is read too.
//!
//! The directories a scan does not enter (`snapshot.exclude`, deeper than a scan goes) are
//! watched too, for one question only: did any name in them change since a count the client
//! holds ([`Since::unscanned`])? A step lists them to find the `.env` files to mask, and checks
//! its cached listing with one `lstat` per directory (~1,000 in an npm project's
//! `node_modules`); when the daemon says nothing changed there, the listing holds as it is.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::inotify::ReadFlags;
use rustix::fs::{Dir, FileType};
use rustix::io::Errno;

use crate::beneath::{self, join_rel};
use crate::change_note::{ChangeNote, Meaning};
use crate::error::{IoContext, Result};
use crate::watches::Watches;
use crate::worktree::{MAX_TREE_DEPTH, MAX_TREE_PATH, ScanConfig};

/// Changes kept; older tokens are answered `None` (a full scan). At ~100 bytes a note, ~50 MiB.
const MAX_NOTES: usize = 500_000;

/// The share of the user's inotify watches (`fs.inotify.max_user_watches`) the directories a
/// scan does not enter may take: past it they are given up, so that the project's own
/// directories (which the step's snapshot needs) never run out because of a `node_modules/`.
const UNSCANNED_SHARE: usize = 4;

fn unscanned_watch_limit() -> usize {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .map_or(8192 / UNSCANNED_SHARE, |n| n / UNSCANNED_SHARE)
}

/// Where a client's view of the project stands in a daemon's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeToken {
    /// Random per daemon: a token of another one (restarted) is never taken for this one's.
    pub instance: u64,
    /// How many changes the daemon had logged.
    pub seq: u64,
}

impl std::fmt::Display for ChangeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}:{}", self.instance, self.seq)
    }
}

impl std::str::FromStr for ChangeToken {
    type Err = ();
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        let (i, q) = s.trim().split_once(':').ok_or(())?;
        Ok(Self {
            instance: u64::from_str_radix(i, 16).map_err(|_| ())?,
            seq: q.parse().map_err(|_| ())?,
        })
    }
}

/// The answer to "what changed since": the token to ask with next time, and the changes in
/// order, or `None` when the log cannot vouch for the time since (read everything).
pub struct Since {
    pub token: ChangeToken,
    pub changes: Option<Vec<ChangeNote>>,
    /// How many events the directories a scan does not enter have had, counted from this
    /// daemon's start (with its `instance`, a client can tell "none since my listing");
    /// `None` when their watches do not cover them all.
    pub unscanned: Option<u64>,
}

/// Why the log stopped: the project root moved or was removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootGone;

pub struct ChangeLog {
    root: PathBuf,
    root_fd: OwnedFd,
    config: ScanConfig,
    /// The store's directory when it sits inside the project: never watched.
    skip: Option<(u64, u64)>,
    watches: Watches,
    instance: u64,
    /// Changes logged so far; the newest note's number.
    seq: u64,
    /// Tokens below this are not answered (a queue overflow, or notes dropped for room).
    floor: u64,
    notes: VecDeque<ChangeNote>,
    /// At most this many notes are kept ([`MAX_NOTES`]; smaller in tests).
    max_notes: usize,
    /// Out of inotify watches: nothing is vouched for until a restart.
    degraded: bool,
    root_gone: bool,
    /// The watches on directories a scan does not enter, by descriptor: their paths (as they
    /// were when watched; a moved directory is watched again where it lands).
    unscanned: HashMap<i32, Vec<u8>>,
    /// Events in those directories, and every time their watches started over.
    unscanned_seq: u64,
    /// Whether those watches cover every directory a scan does not enter. Lost for good when
    /// one could not be added, or the store lies inside the project (it is not watched).
    unscanned_whole: bool,
    /// At most this many ([`UNSCANNED_SHARE`]).
    unscanned_limit: usize,
}

impl ChangeLog {
    /// Watch every directory of `root` a scan with `config` reads. Costs one walk of the
    /// directories (not the files).
    pub fn start(root: &Path, config: ScanConfig, store_dir: Option<&Path>) -> Result<Self> {
        let root_fd = beneath::open_root(root).at(root)?;
        let skip = store_dir.and_then(|d| std::fs::metadata(d).ok()).map(|m| {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        });
        let mut log = Self {
            root: root.to_path_buf(),
            root_fd,
            config,
            skip,
            watches: Watches::new().at(root)?,
            instance: crate::pack::random_u64(),
            seq: 0,
            floor: 0,
            notes: VecDeque::new(),
            max_notes: MAX_NOTES,
            degraded: false,
            root_gone: false,
            unscanned: HashMap::new(),
            unscanned_seq: 0,
            unscanned_whole: true,
            unscanned_limit: unscanned_watch_limit(),
        };
        log.watch_below(Vec::new());
        if log.degraded {
            return Err(crate::error::StoreError::Refused(format!(
                "{}: out of inotify watches; raise fs.inotify.max_user_watches \
                 (`sysctl fs.inotify.max_user_watches=1048576`) and try again",
                root.display()
            )));
        }
        Ok(log)
    }

    /// The inotify descriptor, to poll: readable when there are events to [`ChangeLog::pump`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.watches.fd()
    }

    /// The scan configuration's fingerprint: a client whose stat index was made with another
    /// one must not take this log's word.
    pub fn fingerprint(&self) -> &str {
        &self.config.fingerprint
    }

    pub fn watches(&self) -> usize {
        self.watches.len()
    }

    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// Directories a scan does not enter that are watched, and whether they are all of them
    /// ([`Since::unscanned`] is given).
    pub fn unscanned_watches(&self) -> (usize, bool) {
        (self.unscanned.len(), self.unscanned_whole && !self.degraded)
    }

    /// Changes logged and still kept.
    pub fn kept(&self) -> usize {
        self.notes.len()
    }

    pub fn token(&self) -> ChangeToken {
        ChangeToken {
            instance: self.instance,
            seq: self.seq,
        }
    }

    /// What changed since `token`, after taking every queued event.
    pub fn since(&mut self, token: Option<ChangeToken>) -> std::result::Result<Since, RootGone> {
        self.pump()?;
        let changes = token
            .filter(|t| {
                !self.degraded
                    && t.instance == self.instance
                    && t.seq >= self.floor
                    && t.seq <= self.seq
            })
            .map(|t| {
                let first = self.seq - self.notes.len() as u64;
                let skip = usize::try_from(t.seq - first).unwrap_or(usize::MAX);
                self.notes.iter().skip(skip).cloned().collect()
            });
        Ok(Since {
            token: self.token(),
            changes,
            unscanned: (self.unscanned_whole && !self.degraded).then_some(self.unscanned_seq),
        })
    }

    /// Take every queued event into the log.
    pub fn pump(&mut self) -> std::result::Result<(), RootGone> {
        if self.root_gone {
            return Err(RootGone);
        }
        loop {
            // A failed read (the instance broken) vouches for nothing from now on: every
            // answer is "read everything" until a restart.
            let Ok(events) = self.watches.read() else {
                self.degraded = true;
                return Ok(());
            };
            if events.is_empty() {
                return Ok(());
            }
            for (wd, flags, name) in events {
                if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    self.overflowed();
                    break;
                }
                self.take(wd, flags, name.as_deref());
                if self.root_gone {
                    return Err(RootGone);
                }
            }
        }
    }

    fn take(&mut self, wd: i32, flags: ReadFlags, name: Option<&[u8]>) {
        if self.unscanned.contains_key(&wd) {
            self.take_unscanned(wd, flags, name);
            return;
        }
        match self.watches.understand(wd, flags, name) {
            Some(Meaning::RootLost) => self.root_gone = true,
            Some(Meaning::Change(change)) => {
                if let ChangeNote::Name {
                    dir,
                    name,
                    fresh: true,
                } = &change
                {
                    // Whatever is there now (a directory moved in, made, or nothing) is
                    // watched before the next question: the client walks it whole.
                    self.watch_below(join_rel(dir, name));
                }
                self.log(change);
            }
            _ => {}
        }
    }

    fn log(&mut self, change: ChangeNote) {
        self.seq += 1;
        self.notes.push_back(change);
        if self.notes.len() > self.max_notes {
            let drop = self.max_notes / 2;
            self.notes.drain(..drop);
            self.floor = self.seq - self.notes.len() as u64;
        }
    }

    /// Any event in a directory a scan does not enter is counted; a directory made or moved
    /// there is watched (with all below it, at the path it has now) before the next question.
    fn take_unscanned(&mut self, wd: i32, flags: ReadFlags, name: Option<&[u8]>) {
        self.unscanned_seq += 1;
        if flags.contains(ReadFlags::IGNORED) {
            self.unscanned.remove(&wd);
            return;
        }
        if flags.contains(ReadFlags::ISDIR)
            && flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
            && let (Some(name), Some(dir)) = (name, self.unscanned.get(&wd))
        {
            let below = join_rel(dir, name);
            self.watch_unscanned_below(below);
        }
    }

    /// Events were dropped: start over, and no token from before is answered.
    fn overflowed(&mut self) {
        self.notes.clear();
        self.seq += 1;
        self.floor = self.seq;
        self.unscanned.clear();
        self.unscanned_seq += 1;
        match self.watches.reset() {
            Ok(()) => self.watch_below(Vec::new()),
            Err(_) => self.degraded = true,
        }
    }

    /// Watch the directory at `top` (if one is there) and every directory below it a scan
    /// reads: each is watched before it is listed, so an entry made after the listing is an
    /// event. Symbolic links are never followed.
    fn watch_below(&mut self, top: Vec<u8>) {
        let mut stack = vec![top];
        while let Some(rel) = stack.pop() {
            if self.degraded {
                return;
            }
            let Ok(fd) = beneath::open_dir_rel(self.root_fd.as_fd(), &rel) else {
                continue; // gone, or not a directory: its parent's event said so
            };
            if !rel.is_empty() && !self.scanned(fd.as_fd(), &rel) {
                if self.is_store(fd.as_fd()) {
                    // The store is never watched, and a step would list it: no vouching.
                    self.unscanned_whole = false;
                } else {
                    self.watch_unscanned_below(rel);
                }
                continue;
            }
            match self.watches.add(fd.as_fd()) {
                Ok(wd) => {
                    // A directory moved out of a part the scan leaves out: scanned from now on.
                    self.unscanned.remove(&wd);
                    self.watches.added(rel.clone(), wd);
                }
                Err(Errno::NOSPC | Errno::NOMEM) => {
                    // Out of watches (fs.inotify.max_user_watches): give them all back and
                    // vouch for nothing.
                    self.degraded = true;
                    self.unscanned.clear();
                    let _ = self.watches.reset();
                    return;
                }
                Err(_) => continue,
            }
            // A directory that cannot be read whole keeps what was read of it.
            let _ = push_subdirs(fd.as_fd(), &rel, &mut stack);
        }
    }

    /// Watch the directory at `top` and every directory below it, for [`Since::unscanned`]:
    /// each before it is listed, as in [`ChangeLog::watch_below`]. A watch that cannot be added
    /// (out of watches, past [`UNSCANNED_SHARE`]) or that a scanned directory holds ends the
    /// vouching.
    fn watch_unscanned_below(&mut self, top: Vec<u8>) {
        let mut stack = vec![top];
        while let Some(rel) = stack.pop() {
            if !self.unscanned_whole {
                return;
            }
            if self.unscanned.len() >= self.unscanned_limit {
                self.give_up_unscanned();
                return;
            }
            let fd = match beneath::open_dir_rel(self.root_fd.as_fd(), &rel) {
                Ok(fd) => fd,
                // Gone, or not a directory (a symlink): its parent's event said so.
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
                // Unreadable now (a step lists it the day it is not): nothing is vouched for.
                Err(_) => {
                    self.give_up_unscanned();
                    return;
                }
            };
            match self.watches.add(fd.as_fd()) {
                Ok(wd) if self.watches.has_wd(wd) => {
                    self.give_up_unscanned();
                    return;
                }
                Ok(wd) => {
                    self.unscanned.insert(wd, rel.clone());
                }
                Err(_) => {
                    self.give_up_unscanned();
                    return;
                }
            }
            if push_subdirs(fd.as_fd(), &rel, &mut stack).is_err() {
                self.give_up_unscanned();
                return;
            }
        }
    }

    /// Vouch for the unscanned directories no more (until a restart), and free their watches.
    fn give_up_unscanned(&mut self) {
        self.unscanned_whole = false;
        for (wd, _) in self.unscanned.drain() {
            self.watches.remove_unrecorded(wd);
        }
    }

    fn is_store(&self, fd: BorrowedFd<'_>) -> bool {
        match (self.skip, rustix::fs::fstat(fd)) {
            (Some(skip), Ok(st)) => skip == (st.st_dev, st.st_ino),
            _ => false,
        }
    }

    /// Whether a scan reads the directory `rel` (open as `fd`): not excluded, not the store,
    /// not deeper than a scan goes (it records a marker there instead).
    fn scanned(&self, fd: BorrowedFd<'_>, rel: &[u8]) -> bool {
        // The walk's own limits (`worktree::walk`): deeper, it records a marker.
        if beneath::depth_of(rel) > MAX_TREE_DEPTH || rel.len() > MAX_TREE_PATH {
            return false;
        }
        if self.config.excludes.may_exclude(true) && self.config.excludes.is_excluded(rel, true) {
            return false;
        }
        match (self.skip, rustix::fs::fstat(fd)) {
            (Some(skip), Ok(st)) => skip != (st.st_dev, st.st_ino),
            _ => true,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Pushes the subdirectories of the open directory `fd` (at `rel`) onto `stack`; symbolic
/// links are not directories here. An error stops the listing where it is.
fn push_subdirs(
    fd: BorrowedFd<'_>,
    rel: &[u8],
    stack: &mut Vec<Vec<u8>>,
) -> rustix::io::Result<()> {
    let mut dir = Dir::read_from(fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => beneath::lstat(fd, entry.file_name())
                .is_ok_and(|st| beneath::file_type(&st) == FileType::Directory),
            _ => false,
        };
        if is_dir {
            stack.push(join_rel(rel, name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(root: &Path, name: &str) {
        std::fs::write(root.join(name), name).unwrap();
    }

    #[test]
    fn a_token_is_answered_only_while_the_log_holds_everything_after_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let mut log = ChangeLog::start(root, ScanConfig::default(), None).unwrap();
        log.max_notes = 4;
        let t0 = log.since(None).unwrap();
        assert!(t0.changes.is_none(), "no token: read everything");
        edit(root, "a");
        let t1 = log.since(Some(t0.token)).unwrap();
        let names: Vec<ChangeNote> = t1.changes.clone().unwrap();
        assert!(!names.is_empty());
        assert!(
            names
                .iter()
                .all(|c| matches!(c, ChangeNote::Name { name, .. } if name == b"a"))
        );
        // Nothing since: an empty answer, and the same token.
        let again = log.since(Some(t1.token)).unwrap();
        assert_eq!((again.changes, again.token), (Some(Vec::new()), t1.token));
        // More notes than the log keeps: the old token is refused, a recent one is not.
        for n in ["b", "c", "d", "e", "f", "g"] {
            edit(root, n);
        }
        let late = log.since(Some(t1.token)).unwrap();
        assert!(late.changes.is_none(), "notes after the token were dropped");
        edit(root, "h");
        let recent = log.since(Some(late.token)).unwrap();
        assert!(recent.changes.is_some_and(|c| !c.is_empty()));
        // A token from the future (another daemon's count) is refused too.
        let ahead = ChangeToken {
            seq: log.token().seq + 10,
            ..log.token()
        };
        assert!(log.since(Some(ahead)).unwrap().changes.is_none());
    }

    #[test]
    fn any_change_in_a_directory_the_scan_leaves_out_is_counted_at_any_depth() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("node_modules/a/b")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        let config = ScanConfig::new(&["node_modules/".to_owned()], u64::MAX).unwrap();
        let mut log = ChangeLog::start(root, config, None).unwrap();
        let count = |log: &mut ChangeLog| log.since(None).unwrap().unscanned;
        let start = count(&mut log).expect("the unscanned watches cover everything");
        // Edits in the scanned part are the log's, not the count's.
        edit(&root.join("src"), "main.rs");
        assert_eq!(count(&mut log), Some(start));
        let at = |log: &mut ChangeLog, before: u64, what: &str| {
            let now = count(log).unwrap();
            assert!(now > before, "{what}: not counted");
            now
        };
        edit(&root.join("node_modules/a/b"), ".env");
        let start = at(&mut log, start, "a name made deep inside");
        // A directory made there is watched before the next question, and so is one moved
        // in; what is made inside either later is counted too.
        std::fs::create_dir_all(root.join("node_modules/new/deeper")).unwrap();
        let start = at(&mut log, start, "a directory made");
        edit(&root.join("node_modules/new/deeper"), ".env.local");
        let start = at(&mut log, start, "a name made in a new directory");
        std::fs::rename(
            root.join("node_modules/a"),
            root.join("node_modules/new/a2"),
        )
        .unwrap();
        let start = at(&mut log, start, "a directory moved");
        // Below a moved directory, a new directory is watched where it really is.
        std::fs::create_dir(root.join("node_modules/new/a2/b/sub")).unwrap();
        let start = at(&mut log, start, "a directory made in a moved directory");
        edit(&root.join("node_modules/new/a2/b/sub"), "x");
        let start = at(&mut log, start, "a name made below a moved directory");
        std::fs::remove_dir_all(root.join("node_modules/new")).unwrap();
        at(&mut log, start, "a directory removed");
        // Moved out into the scanned part: scanned from then on, its edits in the log.
        std::fs::create_dir_all(root.join("node_modules/c")).unwrap();
        let _ = count(&mut log);
        std::fs::rename(root.join("node_modules/c"), root.join("src/c")).unwrap();
        let t = log.since(None).unwrap().token;
        let before = count(&mut log).unwrap();
        edit(&root.join("src/c"), "lib.rs");
        assert_eq!(count(&mut log), Some(before), "a scanned directory counted");
        let changes = log.since(Some(t)).unwrap().changes.unwrap();
        assert!(
            !changes.is_empty(),
            "the moved directory's edit is not in the log"
        );
        // An overflow starts the count over, past every number given out before.
        log.overflowed();
        assert!(count(&mut log).unwrap() > before);
        // Past its share of the user's watches, nothing is vouched for (and they are freed).
        log.unscanned_limit = log.unscanned.len();
        std::fs::create_dir_all(root.join("node_modules/d")).unwrap();
        assert_eq!(count(&mut log), None);
        assert!(log.unscanned.is_empty());
    }

    #[test]
    fn a_token_reads_back_as_written_and_garbage_is_no_token() {
        let t = ChangeToken {
            instance: 0x0123_4567_89ab_cdef,
            seq: 42,
        };
        assert_eq!(t.to_string().parse::<ChangeToken>(), Ok(t));
        for bad in ["", "none", "12", "xyz:1", "1:-1", "1:2:3"] {
            assert!(bad.parse::<ChangeToken>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_root_moving_stops_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        std::fs::create_dir(&root).unwrap();
        let mut log = ChangeLog::start(&root, ScanConfig::default(), None).unwrap();
        std::fs::rename(&root, tmp.path().join("q")).unwrap();
        assert!(log.since(None).is_err());
    }
}
