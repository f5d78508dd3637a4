//! The walk of `/etc` for what others may not read ([`crate::plan::etc_private`]), and what it
//! found kept in a file only this user can write, taken again without the walk while every
//! directory it listed and every entry it read is as it was: ~470 `lstat`s instead of listing
//! ~150 directories (~1,250 entries, the directory hashing and the listing most of the cost)
//! and reading the same modes. The walk was a step's largest piece of set-up: leaving it out
//! took 1.2 ms off a 10.8 ms `envgit run true`.
//!
//! Why the cache cannot hide a private entry: a name added, removed or renamed in a
//! directory changes that directory's mtime and ctime; a `chmod` changes the entry's mode,
//! which is compared itself; a replaced entry has another inode. A directory whose stamps fall
//! within [`RACY_MARGIN_NS`] of the walk's start may have changed again in the same clock tick
//! with the same stamps, so such a cache is not trusted (the walk runs until `/etc` has been
//! still for that long). Symbolic links are neither masked nor followed: the walk skips them,
//! and one replaced by a file or directory changes its directory. A missing, torn, foreign or
//! other-version cache is ignored and the walk runs.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::project_index::now_ns;

/// As the store's stat index on a filesystem it does not know: a directory changed this
/// close to the walk's start is walked again.
pub(crate) const RACY_MARGIN_NS: i64 = 2_000_000_000;

const VERSION: u32 = 1;

/// One directory or entry as the walk saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    path: PathBuf,
    ino: u64,
    mode: u32,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Seen {
    fn of(path: PathBuf, meta: &std::fs::Metadata) -> Self {
        Self {
            path,
            ino: meta.ino(),
            mode: meta.mode(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        }
    }
}

/// A walk of `top`: what it found, the directories it listed and the entries it read.
#[derive(Debug, Serialize, Deserialize)]
struct Walk {
    version: u32,
    top: PathBuf,
    /// When the walk began (ns since the epoch).
    walked_ns: i64,
    listed: Vec<Seen>,
    read: Vec<Seen>,
    private: Vec<PathBuf>,
}

/// Files and directories below `top` that others may not read (not descending into them);
/// symbolic links are never followed nor listed.
pub(crate) fn private_below(top: &Path) -> Vec<PathBuf> {
    walk(top).private
}

/// [`private_below`], taken from the cache at `cache` while it still holds (see the module's
/// note), else walked and the cache written; whether the cache was taken.
pub fn private_below_cached(top: &Path, cache: &Path) -> (Vec<PathBuf>, bool) {
    private_below_with(top, cache, RACY_MARGIN_NS)
}

fn private_below_with(top: &Path, cache: &Path, margin_ns: i64) -> (Vec<PathBuf>, bool) {
    let (w, taken) = walk_cached(top, cache, margin_ns);
    (w.private, taken)
}

/// [`private_below_cached`] and the directories its walk listed (what a change below `top`
/// that could change the answer changes: see the module's note).
/// Without a cache, walked.
pub(crate) fn private_and_listed(top: &Path, cache: Option<&Path>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let w = match cache {
        Some(cache) => walk_cached(top, cache, RACY_MARGIN_NS).0,
        None => walk(top),
    };
    (w.private, w.listed.into_iter().map(|d| d.path).collect())
}

fn walk_cached(top: &Path, cache: &Path, margin_ns: i64) -> (Walk, bool) {
    if let Some(kept) = std::fs::read(cache)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Walk>(&bytes).ok())
        .filter(|w| still_holds(w, top, margin_ns))
    {
        return (kept, true);
    }
    let walked = walk(top);
    save(&walked, cache);
    (walked, false)
}

fn walk(top: &Path) -> Walk {
    let mut w = Walk {
        version: VERSION,
        top: top.to_path_buf(),
        walked_ns: now_ns(),
        listed: Vec::new(),
        read: Vec::new(),
        private: Vec::new(),
    };
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        // Its stamps before its listing: a name added during the listing moves them on.
        let Ok(meta) = stat_listed(&dir, top) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        w.listed.push(Seen::of(dir.clone(), &meta));
        for e in entries.flatten() {
            // The entry's type comes with the listing, and its mode from a stat relative to the
            // open directory: no path is resolved again from `/` (this walk runs every step).
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            let Ok(meta) = e.metadata() else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let private = meta.mode() & 0o004 == 0;
            if private {
                w.private.push(e.path());
                w.read.push(Seen::of(e.path(), &meta));
            } else if meta.is_dir() {
                stack.push(e.path());
            } else {
                w.read.push(Seen::of(e.path(), &meta));
            }
        }
    }
    w
}

/// A listed directory's metadata: `top` itself through a link, as `read_dir` reaches it;
/// below it the walk never follows one.
fn stat_listed(dir: &Path, top: &Path) -> std::io::Result<std::fs::Metadata> {
    if dir == top {
        std::fs::metadata(dir)
    } else {
        std::fs::symlink_metadata(dir)
    }
}

/// Every directory listed has its inode, mode and stamps, clearly older than the walk; every
/// entry read has its inode and mode.
fn still_holds(w: &Walk, top: &Path, margin_ns: i64) -> bool {
    let cutoff = w.walked_ns.saturating_sub(margin_ns);
    w.version == VERSION
        && w.top == top
        && w.listed.iter().all(|d| {
            stat_listed(&d.path, top).is_ok_and(|m| {
                let now = Seen::of(d.path.clone(), &m);
                now == *d && d.mtime_ns.max(d.ctime_ns) < cutoff
            })
        })
        && w.read.iter().all(|e| {
            std::fs::symlink_metadata(&e.path).is_ok_and(|m| m.ino() == e.ino && m.mode() == e.mode)
        })
}

/// Written beside itself and renamed into place, readable by this user only; a failure only
/// means the next step walks again.
fn save(w: &Walk, cache: &Path) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(bytes) = serde_json::to_vec(w) else {
        return;
    };
    let tmp = cache.with_extension(format!("tmp-{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes));
    if written.and_then(|()| std::fs::rename(&tmp, cache)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A margin short enough for a test, long enough for this machine's file clock.
    const MARGIN: i64 = 100_000_000;

    fn set(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn settle() {
        std::thread::sleep(std::time::Duration::from_nanos(MARGIN as u64 + 20_000_000));
    }

    /// A tree like `/etc`, settled: a private file, a private directory, public files and
    /// directories, a link.
    fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("etc");
        std::fs::create_dir_all(top.join("ssl/private")).unwrap();
        std::fs::create_dir_all(top.join("app")).unwrap();
        std::fs::write(top.join("ssl/private/key.pem"), "k").unwrap();
        std::fs::write(top.join("shadow"), "s").unwrap();
        std::fs::write(top.join("hosts"), "h").unwrap();
        std::fs::write(top.join("app/app.conf"), "c").unwrap();
        set(&top.join("ssl/private/key.pem"), 0o600);
        set(&top.join("ssl/private"), 0o700);
        set(&top.join("shadow"), 0o640);
        // A link to a private file is not the file, and a link out is never followed.
        std::os::unix::fs::symlink(top.join("shadow"), top.join("shadow-link")).unwrap();
        std::os::unix::fs::symlink("/root", top.join("root-link")).unwrap();
        let cache = tmp.path().join("etc.cache");
        settle();
        (tmp, top, cache)
    }

    fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
        v.sort();
        v
    }

    #[test]
    fn an_unchanged_tree_is_taken_from_the_cache() {
        let (_tmp, top, cache) = tree();
        let (first, kept) = private_below_with(&top, &cache, MARGIN);
        assert!(!kept);
        assert_eq!(
            sorted(first.clone()),
            [top.join("shadow"), top.join("ssl/private")]
        );
        let (again, kept) = private_below_with(&top, &cache, MARGIN);
        assert!(kept, "the cache of an unchanged tree was not taken");
        assert_eq!(again, first);
    }

    /// Every change that makes an entry private, or a private one public, is seen: a chmod in
    /// a directory that did not change, a new private file, a private directory opened up.
    #[test]
    fn what_turns_private_or_public_is_walked_again() {
        let (_tmp, top, cache) = tree();
        private_below_with(&top, &cache, MARGIN);
        // A chmod changes no directory: the entry's own mode says it.
        set(&top.join("app/app.conf"), 0o600);
        let (found, kept) = private_below_with(&top, &cache, MARGIN);
        assert!(!kept, "a chmod to private was taken from the cache");
        assert!(found.contains(&top.join("app/app.conf")), "{found:?}");

        settle();
        private_below_with(&top, &cache, MARGIN);
        std::fs::write(top.join("app/new.key"), "n").unwrap();
        set(&top.join("app/new.key"), 0o600);
        let (found, _) = private_below_with(&top, &cache, MARGIN);
        assert!(found.contains(&top.join("app/new.key")), "{found:?}");

        settle();
        private_below_with(&top, &cache, MARGIN);
        set(&top.join("ssl/private"), 0o755);
        let (found, _) = private_below_with(&top, &cache, MARGIN);
        assert!(!found.contains(&top.join("ssl/private")), "{found:?}");
        assert!(
            found.contains(&top.join("ssl/private/key.pem")),
            "an opened private directory's own private files: {found:?}"
        );
    }

    /// A directory changed in the walk's clock tick could change again with the same stamps:
    /// the cache is not taken until it has been still for the margin.
    #[test]
    fn a_tree_changed_just_before_its_walk_is_walked_again() {
        let (_tmp, top, cache) = tree();
        std::fs::write(top.join("app/fresh.conf"), "f").unwrap();
        private_below_with(&top, &cache, MARGIN);
        let (_, kept) = private_below_with(&top, &cache, MARGIN);
        assert!(
            !kept,
            "a walk of a directory changed in its tick was trusted"
        );
        settle();
        private_below_with(&top, &cache, MARGIN);
        let (_, kept) = private_below_with(&top, &cache, MARGIN);
        assert!(kept);
    }

    #[test]
    fn a_torn_or_foreign_cache_is_walked_past() {
        let (_tmp, top, cache) = tree();
        private_below_with(&top, &cache, MARGIN);
        let bytes = std::fs::read(&cache).unwrap();
        std::fs::write(&cache, &bytes[..bytes.len() / 2]).unwrap();
        let (found, kept) = private_below_with(&top, &cache, MARGIN);
        assert!(!kept);
        assert_eq!(sorted(found), [top.join("shadow"), top.join("ssl/private")]);
        let other = top.join("app");
        let (found, kept) = private_below_with(&other, &cache, MARGIN);
        assert!(!kept, "another tree's cache was taken");
        assert!(found.is_empty(), "{found:?}");
    }
}
