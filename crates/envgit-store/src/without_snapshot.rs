//! A sandboxed step's end when there is no snapshot after it to diff: the snapshot failed (the
//! step filled the disk, or left a tree the store could not take), or what follows it did. What
//! the end would have undone from the diff is then found on disk, writing nothing to the
//! store: one walk of the project (the scan's exclusions and depth limit, never through a
//! link) finds the repositories nested in it, whose code goes back to its state before the
//! step (`gitlayer::nested_code_on_disk`), and the files made setuid or setgid during the step,
//! whose bits are cleared. The protected paths are put back by content before any snapshot, and
//! the git layer's import needs none, so with this a failed snapshot leaves nothing planted
//! that git or the host would run.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::FileType;
use rustix::io::Errno;

use crate::bare_repository::{LAYOUT_ENTRIES, is_git_directory};
use crate::below_root::{BelowRoot, FoundBelow};
use crate::beneath::{self, cstr, depth_of, join_rel, lstat, parent_rel};
use crate::error::{IoContext, Result, StoreError};
use crate::exclude::Excludes;
use crate::gitlayer::nested_code_on_disk;
use crate::graft::entry_at;
use crate::id::ObjectId;
use crate::restore::{RestoreOptions, restore_trees};
use crate::setid::{Cleared, SETID_BITS, SetidFile, changed_since, clear_setid};
use crate::store::Store;
use crate::tree::{EntryKind, Tree};
use crate::worktree::{MAX_TREE_DEPTH, ScanConfig};

/// What [`end_without_snapshot`] did.
#[derive(Debug, Default)]
pub struct EndedWithoutSnapshot {
    /// The nested repositories' paths put back to their state before the step.
    pub put_back: Vec<String>,
    /// Those that could not be, and why.
    pub failed: Vec<(String, StoreError)>,
    /// The setuid and setgid bits cleared, or not.
    pub setid: Cleared,
    /// Why the nested repositories could not be checked at all (the tree before the step
    /// could not be read): nothing is known of what the step changed there.
    pub unchecked: Option<StoreError>,
    /// What the host runs from below the root ([`BelowRoot`]) put back: changed since the step
    /// began.
    pub put_back_below: Vec<String>,
    /// The directories the walk did not enter (`exclude`'s matches), project-relative.
    pub excluded_dirs: Vec<Vec<u8>>,
}

/// What a sandboxed step's end owes the project should its envgit die before making it: the
/// nested repositories checked against `before`, with the step's scan settings. Kept in the
/// step's begin record; the next open of the store makes it (`Store::recover_interrupted`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OwedEnd {
    pub before: ObjectId,
    /// `snapshot.exclude`, as the policy gives it.
    pub exclude: Vec<String>,
    pub max_file_size: u64,
    /// What the host runs from below the root, to look for (none in a record written before
    /// envgit looked).
    #[serde(default)]
    pub below: BelowRoot,
    /// The repositories the directories `exclude` leaves out held before the step, once their
    /// code was copied (the copy goes back at the next open): any other found there is the
    /// step's, and loses what git would run. `None`: not known (the step died before the copy,
    /// or a record written before envgit looked), and nothing there is touched.
    #[serde(default)]
    pub excluded_before: Option<Vec<crate::gitlayer::RepositoryAt>>,
}

/// Ends a step begun at `since_ms` from the tree `before` it, without a snapshot after it, in
/// the project at `root` scanned with `config`. What cannot be read on disk is passed over,
/// or its repository put back whole; the result says what could not be done.
///
/// What a nested repository's index and refs may not change behind its work tree is read by
/// the reader envgit set ([`set_nested_protected_reader`]), from `project` (the root's path,
/// when known): its hook manager's files, the names put back below a root, and what its git
/// config names. Without a reader, [`fixed_nested_protected`] only: the store has no reading
/// of git's configuration.
pub fn end_without_snapshot(
    store: &Store,
    root: BorrowedFd<'_>,
    config: &ScanConfig,
    before: &ObjectId,
    since_ms: u64,
    below: &BelowRoot,
    project: Option<&Path>,
) -> EndedWithoutSnapshot {
    let reader = NESTED_PROTECTED_READER.get().copied();
    let fixed = fixed_nested_protected(below);
    let protected_of = &mut |repo: Option<&str>| match reader {
        Some(read) => read(store, before, project, repo),
        None => fixed.clone(),
    };
    let found = walk(root, &config.excludes, below);
    let mut out = EndedWithoutSnapshot {
        setid: clear_setid(root, &changed_since(&found.setid, since_ms)),
        excluded_dirs: found.excluded,
        ..EndedWithoutSnapshot::default()
    };
    // What a nested repository's git configuration names (its `core.hooksPath`) is found by
    // the reader beside its fixed names.
    let mut configured = |repo: &str| {
        protected_of(Some(repo))
            .into_iter()
            .filter(|p| {
                !p.starts_with(crate::gitlayer::BELOW_ROOT)
                    && !below.repository_root_entries.contains(p)
            })
            .collect()
    };
    let below_root = below.changed(store, root, before, &found.below, since_ms, &mut configured);
    let nested = nested_code_on_disk(
        store,
        root,
        config.max_file_size,
        before,
        &found.gits,
        protected_of,
    );
    let bare =
        crate::below_root::bare_repositories_changed(store, root, before, &found.bare, since_ms);
    for (targets, below_root) in [(below_root, true), (nested, false), (bare, false)] {
        let targets = match targets {
            Ok(targets) => targets,
            Err(e) => {
                out.unchecked = Some(e);
                continue;
            }
        };
        for target in targets {
            match put_back_path(store, root, before, &target) {
                Ok(()) if below_root => out.put_back_below.push(target),
                Ok(()) => out.put_back.push(target),
                Err(e) => out.failed.push((target, e)),
            }
        }
    }
    out
}

/// A nested repository's protected paths as envgit reads them, from the store, the tree before
/// the step, the project's root and the repository's work tree (relative to the root; `None`
/// for a git directory found by its layout): what git's configuration names there needs a
/// reading of git's configuration, which is envgit's, not the store's.
pub type NestedProtectedReader = fn(&Store, &ObjectId, Option<&Path>, Option<&str>) -> Vec<String>;

static NESTED_PROTECTED_READER: std::sync::OnceLock<NestedProtectedReader> =
    std::sync::OnceLock::new();

/// Sets, once per process, how a step's end without a snapshot reads a nested repository's
/// protected paths: the end a failed snapshot leaves, and the end a killed step owed (made as
/// the store opens, whatever command opens it). Without one it judges
/// [`fixed_nested_protected`] only.
pub fn set_nested_protected_reader(reader: NestedProtectedReader) {
    let _ = NESTED_PROTECTED_READER.set(reader);
}

/// The protected paths of every nested repository that need no reading of its git config:
/// its hook manager's files and the names put back below a root.
pub(crate) fn fixed_nested_protected(below: &BelowRoot) -> Vec<String> {
    below
        .repository_root_entries
        .iter()
        .cloned()
        .chain(
            below
                .names
                .iter()
                .map(|n| format!("{}{n}", crate::gitlayer::BELOW_ROOT)),
        )
        .collect()
}

/// What the walk found (it cannot fail: what cannot be read is passed over).
#[derive(Default)]
struct Found {
    /// Every nested `.git` (directory, pointer file or link), project-relative.
    gits: Vec<Vec<u8>>,
    /// Every regular file with a setuid or setgid bit.
    setid: Vec<SetidFile>,
    /// What [`BelowRoot`] looks for.
    below: FoundBelow,
    /// The directories the excludes kept the walk out of.
    excluded: Vec<Vec<u8>>,
    /// Directories git takes for a repository by their layout alone
    /// ([`crate::bare_repository`]), the root included.
    bare: Vec<Vec<u8>>,
}

/// The project below `root`, as the scan sees it: excluded directories and what lies deeper
/// than its limit are left out, and so is the project's own `.git` (the git layer's).
fn walk(root: BorrowedFd<'_>, excludes: &Excludes, below: &BelowRoot) -> Found {
    let mut found = Found::default();
    let mut dirs: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = dirs.pop() {
        // A directory gone or replaced since its parent was listed, or one the step made
        // unreadable, holds nothing the host's git could be made to run: the walk goes on
        // (one failure must not leave what the step planted elsewhere).
        let Ok(dir) = beneath::open_dir_rel(root, &rel) else {
            continue;
        };
        let Ok(names) = beneath::read_names(dir.as_fd()) else {
            continue;
        };
        let mut layout: Vec<(&str, EntryKind)> = Vec::new();
        for name in names {
            let child = join_rel(&rel, name.to_bytes());
            let Ok(st) = lstat(dir.as_fd(), &name) else {
                continue;
            };
            let kind = beneath::file_type(&st);
            let is_dir = kind == FileType::Directory;
            if let Some(entry) = LAYOUT_ENTRIES
                .iter()
                .find(|e| e.as_bytes() == name.to_bytes())
            {
                layout.push((
                    entry,
                    match kind {
                        FileType::Directory => EntryKind::Dir,
                        FileType::Symlink => EntryKind::Symlink,
                        FileType::RegularFile => EntryKind::File,
                        _ => EntryKind::Marker(crate::tree::MarkerReason::Special),
                    },
                ));
            }
            below.note(&rel, name.to_bytes(), &child, &mut found.below);
            if name.to_bytes() == b".git" {
                if !rel.is_empty() {
                    found.gits.push(child);
                }
                continue;
            }
            if excludes.may_exclude(is_dir) && excludes.is_excluded(&child, is_dir) {
                if is_dir {
                    found.excluded.push(child);
                }
                continue;
            }
            if is_dir && depth_of(&child) <= MAX_TREE_DEPTH {
                dirs.push(child);
            } else if kind == FileType::RegularFile && st.st_mode & SETID_BITS != 0 {
                found.setid.push(SetidFile {
                    rel: child,
                    ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
                });
            }
        }
        // The root too: a project without a `.git` that the step gave that layout is the
        // repository of every git the person runs in it.
        if is_git_directory(|n| layout.iter().find(|(e, _)| *e == n).map(|(_, k)| *k)) {
            found.bare.push(rel);
        }
    }
    found
}

/// Puts `target` (project-relative) back as it was in `before`: what is there now is removed,
/// never through a link, and the entry of `before` written in its place (nothing, if it had
/// none; nothing either for a marker, whose content the store never had).
fn put_back_path(
    store: &Store,
    root: BorrowedFd<'_>,
    before: &ObjectId,
    target: &str,
) -> Result<()> {
    let at = Path::new(target);
    let rel = target.as_bytes();
    let was = entry_at(store, before, target)?;
    let parent = match beneath::open_dir_rel(root, parent_rel(rel).unwrap_or_default()) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) if was.is_none() => return Ok(()),
        Err(e) => return Err(e).at(at),
    };
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    beneath::remove_all(parent.as_fd(), &cstr(name).at(at)?, rel, &|_| false).at(at)?;
    if let Some(entry) = was.filter(|e| !e.kind.is_marker()) {
        let opts = RestoreOptions {
            excludes: &Excludes::none(),
            protected: &[],
            clone_from: None,
        };
        let one = Tree {
            entries: vec![entry],
        };
        restore_trees(store, parent.as_fd(), None, &one, &opts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use super::*;
    use crate::diff::diff_entries;
    use crate::gitlayer::{nested_code_paths, nested_replace_ref_stores, only_comments};
    use crate::worktree::WorkTree;

    const REPLACE: &str = "1111111111111111111111111111111111111111";

    fn put(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Repositories nested in a project as a step might leave them: a hook planted beside the
    /// samples, a config changed, a `.git` turned into a pointer, a clone made with git's
    /// template (inert) and one with a real exclude, replace refs loose and packed, a hook
    /// removed, alternates, a submodule's hook, a hook that is a link, a lock a killed git left,
    /// a directory 1,100 levels deep, a setuid file; one repository inside an excluded
    /// directory.
    fn before(root: &Path) {
        for repo in ["a", "b", "c", "e", "f", "g", "h", "j", "skip/x"] {
            put(root, &format!("{repo}/.git/HEAD"), "ref: refs/heads/main\n");
            put(
                root,
                &format!("{repo}/.git/config"),
                "[core]\n\tbare = false\n",
            );
            put(
                root,
                &format!("{repo}/.git/hooks/pre-commit.sample"),
                "#!/bin/sh\n",
            );
            put(
                root,
                &format!("{repo}/.git/objects/ab/{}", "c".repeat(38)),
                "x",
            );
        }
        put(root, "e/.git/packed-refs", "# pack-refs with: peeled\n");
        put(root, "f/.git/hooks/post-checkout", "#!/bin/sh\necho mine\n");
        put(root, "tool", "#!/bin/sh\n");
    }

    fn step(root: &Path) {
        let exec = |rel: &str| {
            std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        };
        put(root, "a/.git/hooks/pre-commit", "#!/bin/sh\necho planted\n");
        // Deeper than a walk holding a descriptor per level could go (the soft limit is 1024).
        put(root, &format!("a/.git/hooks/{}x", "d/".repeat(1100)), "x");
        exec("a/.git/hooks/pre-commit");
        put(
            root,
            "b/.git/config",
            "[core]\n\tfsmonitor = echo planted\n",
        );
        std::fs::remove_dir_all(root.join("c/.git")).unwrap();
        put(root, "c/.git", "gitdir: /elsewhere\n");
        for repo in ["d", "i"] {
            put(root, &format!("{repo}/.git/HEAD"), "ref: refs/heads/main\n");
            put(
                root,
                &format!("{repo}/.git/hooks/update.sample"),
                "#!/bin/sh\n",
            );
            put(
                root,
                &format!("{repo}/.git/info/exclude"),
                "# git ls-files\n\n",
            );
            put(root, &format!("{repo}/.git/description"), "Unnamed\n");
            std::fs::create_dir_all(root.join(format!("{repo}/.git/refs/heads"))).unwrap();
            std::fs::create_dir_all(root.join(format!("{repo}/.git/branches"))).unwrap();
        }
        put(root, "i/.git/info/exclude", "*.secret\n");
        let packed = format!("# pack-refs with: peeled\n{REPLACE} refs/replace/{REPLACE}\n");
        put(root, "e/.git/packed-refs", &packed);
        put(root, &format!("e/.git/refs/replace/{REPLACE}"), REPLACE);
        put(root, "e/.git/refs/heads/main", REPLACE);
        std::fs::remove_file(root.join("f/.git/hooks/post-checkout")).unwrap();
        put(
            root,
            "g/.git/objects/info/alternates",
            "/elsewhere/objects\n",
        );
        put(root, "h/.git/logs/HEAD", "log\n");
        put(root, &format!("h/.git/objects/de/{}", "f".repeat(38)), "y");
        put(root, "skip/x/.git/hooks/pre-commit", "#!/bin/sh\n");
        put(root, "j/.git/modules/sub/hooks/pre-commit", "#!/bin/sh\n");
        std::os::unix::fs::symlink("/bin/sh", root.join("j/.git/hooks/post-merge")).unwrap();
        // A lock left by a git the step's end killed.
        put(root, "h/.git/refs/heads/main.lock", REPLACE);
        std::fs::set_permissions(root.join("tool"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
    }

    /// What a step's end puts back from the diff of its two snapshots.
    fn from_the_diff(store: &Store, before: &ObjectId, after: &ObjectId) -> BTreeSet<String> {
        let changes = diff_entries(store, Some(before), Some(after)).unwrap();
        let comments = |e: &crate::tree::TreeEntry| only_comments(&store.read_file(&e.id).unwrap());
        let code = nested_code_paths(&changes, &comments);
        let replace = nested_replace_ref_stores(store, before, after, &changes).unwrap();
        code.put_back
            .into_iter()
            .chain(code.configs)
            .chain(replace)
            .collect()
    }

    #[test]
    fn without_a_snapshot_the_same_paths_go_back_as_with_one() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        before(&root);
        let store = Store::create(&tmp.path().join("s"), &root).unwrap();
        let config = ScanConfig::new(&["skip/".to_owned()], u64::MAX).unwrap();
        let mut wt = WorkTree::new(&root, config, None).unwrap();
        let (before_tree, _) = wt.full_scan(&store, None).unwrap();
        let since = crate::step::now_ms();
        step(&root);
        let (after_tree, _) = wt.full_scan(&store, None).unwrap();
        let expected = from_the_diff(&store, &before_tree, &after_tree);
        let want: BTreeSet<String> = [
            "a/.git/hooks",
            "b/.git/config",
            "c/.git",
            // Below the directory the pointer replaced, as the diff lists it.
            "c/.git/config",
            "c/.git/hooks",
            "e/.git/packed-refs",
            "e/.git/refs/replace",
            "f/.git/hooks",
            "g/.git/objects",
            "h/.git/refs",
            "i/.git/info",
            "j/.git/hooks",
            "j/.git/modules",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        assert_eq!(expected, want, "the diff's own answer changed");

        let done = end_without_snapshot(
            &store,
            wt.root_fd(),
            wt.config(),
            &before_tree,
            since,
            &BelowRoot::default(),
            None,
        );
        assert!(
            done.failed.is_empty() && done.unchecked.is_none(),
            "{done:?}"
        );
        let got: BTreeSet<String> = done.put_back.iter().cloned().collect();
        assert_eq!(got, expected);
        assert_eq!(done.setid.cleared, ["tool"]);
        // Each is now as it was before the step, and what was not put back stayed.
        let (now, _) = wt.full_scan(&store, None).unwrap();
        for p in &got {
            assert_eq!(
                entry_at(&store, &now, p).unwrap(),
                entry_at(&store, &before_tree, p).unwrap(),
                "{p}"
            );
        }
        for kept in [
            "d/.git/info/exclude",
            "h/.git/logs/HEAD",
            "skip/x/.git/hooks/pre-commit",
        ] {
            assert!(root.join(kept).exists(), "{kept}");
        }
    }
}
