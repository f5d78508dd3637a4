//! `/etc`'s private files for a process that asks before every tool call of a session
//! ([`crate::host_secrets::HostSecrets::now`]): the walk's cache check is ~470 `lstat`s (1.4 ms
//! on this project's machines), so the answer is kept, with an inotify watch on each directory
//! the walk listed, and looked for again only once one of them reported something. Those
//! watches see what can change the answer (`etc_cache.rs`): an entry made, removed or moved
//! in or out (`IN_CREATE`, `IN_DELETE`, `IN_MOVED_*`), an entry's mode (`IN_ATTRIB`, which a
//! directory's watch reports for its entries too), a directory itself going
//! (`IN_DELETE_SELF`, `IN_MOVE_SELF`), and a lost event (`IN_Q_OVERFLOW`).

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
use rustix::io::Errno;

const WATCH_MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW);

/// Tries at arming the watches while the tree keeps changing under them, before giving up
/// keeping the answer (each ask then walks, or checks the cache).
const ARMING_TRIES: usize = 3;

/// The private entries below one directory, kept while its watches are quiet.
pub(crate) struct EtcWatch {
    top: PathBuf,
    cache: Option<PathBuf>,
    /// The watches and the answer they keep; `None` when they could not be armed.
    kept: Option<(OwnedFd, Vec<PathBuf>)>,
    /// How many times the tree was looked at (walked or its cache checked).
    looks: usize,
}

impl EtcWatch {
    pub(crate) fn new(top: &Path, cache: Option<PathBuf>) -> Self {
        EtcWatch {
            top: top.to_path_buf(),
            cache,
            kept: None,
            looks: 0,
        }
    }

    /// What below the top others may not read, now.
    pub(crate) fn private_now(&mut self) -> Vec<PathBuf> {
        if let Some((fd, private)) = &self.kept
            && quiet(fd)
        {
            return private.clone();
        }
        self.kept = None;
        for _ in 0..ARMING_TRIES {
            let (private, listed) = self.look();
            let Some(fd) = watch_all(&listed) else {
                return private;
            };
            // A change between the look and the watches is only seen by a look after them:
            // the same directories and answer again, and the answer is kept.
            let (again, listed_again) = self.look();
            if again == private && listed_again == listed && quiet(&fd) {
                self.kept = Some((fd, private));
                return again;
            }
        }
        self.look().0
    }

    fn look(&mut self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        self.looks += 1;
        crate::etc_cache::private_and_listed(&self.top, self.cache.as_deref())
    }

    #[cfg(test)]
    fn looks(&self) -> usize {
        self.looks
    }
}

/// A fresh inotify instance watching each of `dirs`; `None` when any cannot be watched (gone
/// meanwhile, or out of watches): then nothing is kept.
fn watch_all(dirs: &[PathBuf]) -> Option<OwnedFd> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    for d in dirs {
        inotify::add_watch(&fd, d.as_path(), WATCH_MASK).ok()?;
    }
    Some(fd)
}

/// Nothing was reported since the watches were set (a read that would block).
fn quiet(fd: &OwnedFd) -> bool {
    let mut buf = [MaybeUninit::<u8>::uninit(); 256];
    let mut reader = inotify::Reader::new(fd, &mut buf);
    matches!(reader.next(), Err(Errno::AGAIN))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn set(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A tree like `/etc`: a private file, a public one in a subdirectory.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("etc");
        std::fs::create_dir_all(top.join("app")).unwrap();
        std::fs::write(top.join("shadow"), "s").unwrap();
        std::fs::write(top.join("app/app.conf"), "c").unwrap();
        set(&top.join("shadow"), 0o600);
        (tmp, top)
    }

    fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
        v.sort();
        v
    }

    #[test]
    fn a_quiet_tree_is_not_looked_at_again_and_every_change_is_seen() {
        let (tmp, top) = tree();
        let mut w = EtcWatch::new(&top, Some(tmp.path().join("cache")));
        assert_eq!(w.private_now(), [top.join("shadow")]);
        let armed = w.looks();
        assert_eq!(w.private_now(), [top.join("shadow")]);
        assert_eq!(w.looks(), armed, "a quiet tree was looked at again");

        // A chmod in a subdirectory: no name changed anywhere.
        set(&top.join("app/app.conf"), 0o640);
        assert_eq!(
            sorted(w.private_now()),
            [top.join("app/app.conf"), top.join("shadow")]
        );
        // A new private file in a new directory, the first found by its parent's watch.
        std::fs::create_dir(top.join("app/keys")).unwrap();
        std::fs::write(top.join("app/keys/deploy.key"), "k").unwrap();
        set(&top.join("app/keys/deploy.key"), 0o600);
        assert!(
            w.private_now().contains(&top.join("app/keys/deploy.key")),
            "{:?}",
            w.private_now()
        );
        // Then a file saved into that new directory, by its own watch.
        std::fs::write(top.join("app/keys/ci.key"), "k").unwrap();
        set(&top.join("app/keys/ci.key"), 0o600);
        assert!(w.private_now().contains(&top.join("app/keys/ci.key")));
        // A private file made public, and one removed.
        set(&top.join("shadow"), 0o644);
        std::fs::remove_file(top.join("app/keys/ci.key")).unwrap();
        assert_eq!(
            sorted(w.private_now()),
            [top.join("app/app.conf"), top.join("app/keys/deploy.key")]
        );
    }
}
