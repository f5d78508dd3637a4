//! Directories a scan may take as the last scan left it without an `lstat` of each file: the
//! project's own git loose objects, `.git/objects/xx`.
//!
//! git names each loose object by its content's hash and writes it once, to a temporary file
//! it then links or renames into place; it never rewrites one. A file there changes only by
//! being added, removed or replaced, and each of those changes the directory's mtime and
//! ctime. So a directory whose `lstat` is the one the last scan recorded, and whose last change
//! was clearly before the scan that listed it (the racy rule), holds what that scan found.
//! A freshly committed project has thousands of loose objects (git packs them only past
//! 6,700): their `lstat`s were half of a step's walk on a 10,000-file npm project.
//!
//! Only the project's own `.git`: a step never writes it in place (the git layer overlays it
//! and its import renames what it writes). A nested repository's objects, a directory holding
//! anything but plain files, a file with several links (`git clone --local` shares objects
//! between repositories by hard links, so another path could write one in place) or a set-id
//! bit are read as any directory. What this does not see: an in-place edit of a loose object
//! made on the host (a corrupt object, which git itself never writes), until that directory
//! next changes.

use super::entry::{CachedEntry, DirState, StatKey};
use super::racy::RacyRule;
use crate::setid::SETID_BITS;
use crate::tree::EntryKind;

/// `.git/objects/` and two lowercase hex digits: a directory of the project's loose objects.
pub(super) fn is_loose_object_dir(rel: &[u8]) -> bool {
    const PREFIX: &[u8] = b".git/objects/";
    rel.len() == PREFIX.len() + 2
        && rel.starts_with(PREFIX)
        && rel[PREFIX.len()..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Whether the directory at `rel`, whose `lstat` is now `now`, recorded in its parent's last
/// state as `recorded` and last read as `known`, can be taken as `known` unread.
pub(super) fn unchanged(
    rel: &[u8],
    recorded: Option<&CachedEntry>,
    now: &StatKey,
    known: &DirState,
    racy: &RacyRule,
) -> bool {
    let Some(recorded) = recorded else {
        return false;
    };
    is_loose_object_dir(rel)
        && recorded.entry.kind == EntryKind::Dir
        && recorded.stat == *now
        && !racy.is_racy(now, known.stamp_ns)
        && known.entries.iter().all(|e| {
            e.entry.kind == EntryKind::File
                && e.stat.nlink == 1
                && e.stat.mode & SETID_BITS == 0
                && !racy.is_racy(&e.stat, known.stamp_ns)
        })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::is_loose_object_dir;
    use crate::id::ObjectId;
    use crate::store::Store;
    use crate::worktree::config::ScanConfig;
    use crate::worktree::entry::StatKey;
    use crate::worktree::{WorkTree, racy_settle_time};

    fn git(root: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(root)
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// A git project of `files` committed files (as many loose objects, and trees and a
    /// commit), its store, and a scan state that has scanned it once after its last change
    /// settled.
    fn committed(files: usize) -> (tempfile::TempDir, Store, WorkTree) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("p");
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        for i in 0..files {
            std::fs::write(root.join(format!("src/f{i}.txt")), format!("file {i}\n"))
                .expect("write");
        }
        git(&root, &["init", "-q"]);
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "first"]);
        let store = Store::create(&tmp.path().join("s"), &root).expect("store");
        std::thread::sleep(racy_settle_time(&root));
        let mut wt = WorkTree::new(&root, ScanConfig::default(), None).expect("worktree");
        wt.full_scan(&store, None).expect("first scan");
        (tmp, store, wt)
    }

    /// What a scan with no state of its own makes of the project now.
    fn fresh_tree(root: &Path, store: &Store) -> ObjectId {
        let mut wt = WorkTree::new(root, ScanConfig::default(), None).expect("worktree");
        wt.full_scan(store, None).expect("scan").0
    }

    fn object_dirs(root: &Path) -> Vec<String> {
        let mut dirs: Vec<String> = std::fs::read_dir(root.join(".git/objects"))
            .expect("objects")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.len() == 2)
            .collect();
        dirs.sort();
        dirs
    }

    /// Unchanged object directories are kept unread, and what the scans make is what a scan
    /// reading everything makes, through commits (new objects, new directories) and removals.
    #[test]
    fn unchanged_object_directories_are_kept_and_the_tree_is_a_full_reads() {
        let (tmp, store, mut wt) = committed(60);
        let root = tmp.path().join("p");
        let dirs = object_dirs(&root).len() as u64;
        assert!(
            dirs > 20,
            "a commit of 60 files spreads over many directories"
        );
        let (t, r) = wt.full_scan(&store, None).expect("scan");
        assert_eq!(
            r.kept_object_dirs, dirs,
            "every settled object directory is kept"
        );
        assert_eq!((t, r.hashed), (fresh_tree(&root, &store), 0));

        // A second commit: new objects in old directories and in new ones.
        for i in 0..30 {
            std::fs::write(root.join(format!("src/g{i}.txt")), format!("more {i}\n"))
                .expect("write");
        }
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", "second"]);
        let (t, r) = wt.full_scan(&store, None).expect("scan");
        assert!(
            r.kept_object_dirs < dirs,
            "directories git wrote in were read again"
        );
        assert_eq!(
            t,
            fresh_tree(&root, &store),
            "a kept directory missed a new object"
        );

        // A removed object.
        std::thread::sleep(racy_settle_time(&root));
        wt.full_scan(&store, None).expect("scan");
        let gone = object_dirs(&root)[0].clone();
        let dir = root.join(".git/objects").join(&gone);
        let first = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .next()
            .expect("an object");
        std::fs::remove_file(first.path()).expect("remove");
        let (t, _) = wt.full_scan(&store, None).expect("scan");
        assert_eq!(
            t,
            fresh_tree(&root, &store),
            "a kept directory kept a removed object"
        );
    }

    /// git's racy rule at the directory: a directory changed in the tick of the scan that
    /// listed it keeps an identical `lstat` and is still read again.
    #[test]
    fn a_racy_object_directory_is_read_again() {
        let (tmp, store, mut wt) = committed(10);
        let root = tmp.path().join("p");
        let name = object_dirs(&root)[0].clone();
        let rel = format!(".git/objects/{name}");
        std::fs::write(root.join(&rel).join("0".repeat(38)), "x").expect("plant");
        // The recorded state as if the scan had listed it just before that write, in its tick.
        let st = rustix::fs::lstat(root.join(&rel)).expect("lstat");
        let objects = wt
            .dirs
            .get_mut(b".git/objects".as_slice())
            .expect("objects state");
        objects
            .entries
            .iter_mut()
            .find(|e| e.entry.name == name.as_bytes())
            .expect("entry")
            .stat = StatKey::of(&st);
        let state = wt.dirs.get_mut(rel.as_bytes()).expect("dir state");
        state.stamp_ns = super::super::walk::now_ns();
        let (t, r) = wt.full_scan(&store, None).expect("scan");
        assert_eq!(
            t,
            fresh_tree(&root, &store),
            "a racy object directory was trusted"
        );
        assert!(r.hashed >= 1);
    }

    /// A nested repository's objects, and an object directory holding a file with another
    /// link, are read whatever their `lstat` says.
    #[test]
    fn nested_repositories_and_linked_objects_are_read() {
        let (tmp, store, mut wt) = committed(10);
        let root = tmp.path().join("p");
        let nested = root.join("vendor/lib");
        std::fs::create_dir_all(&nested).expect("mkdir");
        std::fs::write(nested.join("a.txt"), "nested\n").expect("write");
        git(&nested, &["init", "-q"]);
        git(&nested, &["add", "-A"]);
        git(&nested, &["commit", "-qm", "nested"]);
        let linked = object_dirs(&root)[0].clone();
        let dir = root.join(".git/objects").join(&linked);
        let object = std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .next()
            .expect("an object");
        std::fs::hard_link(object.path(), tmp.path().join("elsewhere")).expect("link");
        // A link made elsewhere does not change the directory: what was recorded before it
        // still vouches for the directory (the module's note); a state that has read the
        // link does not.
        wt.clear();
        std::thread::sleep(racy_settle_time(&root));
        wt.full_scan(&store, None).expect("scan");
        let (_, r) = wt.full_scan(&store, None).expect("scan");
        assert_eq!(
            r.kept_object_dirs,
            object_dirs(&root).len() as u64 - 1,
            "only the project's own, unlinked object directories are kept"
        );
    }

    #[test]
    fn only_the_projects_own_loose_object_directories() {
        assert!(is_loose_object_dir(b".git/objects/00"));
        assert!(is_loose_object_dir(b".git/objects/af"));
        for not in [
            b".git/objects".as_slice(),
            b".git/objects/pack",
            b".git/objects/info",
            b".git/objects/AF",
            b".git/objects/a",
            b".git/objects/abc",
            b"sub/.git/objects/af",
            b".git/objects/af/x",
            b"src/af",
        ] {
            assert!(
                !is_loose_object_dir(not),
                "{}",
                String::from_utf8_lossy(not)
            );
        }
    }
}
