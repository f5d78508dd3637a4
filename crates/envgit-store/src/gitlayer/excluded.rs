//! Repositories in the directories the snapshot leaves out (`snapshot.exclude`): the `.git`
//! of `pip install -e git+…` in `.venv/src/pkg/`, a `target/` a step made a repository. No
//! snapshot holds them, so the diff that puts back a nested repository's code elsewhere in
//! the project never sees them, while the person's git runs their configuration and hooks (a
//! shell prompt's `git status` there, an editor that opens each repository it finds below the
//! project runs `core.fsmonitor`).
//!
//! So their code ([`excluded_code_paths`]: what git runs or follows) is copied with the
//! protected paths before a step and put back from that copy after it; one found after the
//! step that no copy covered is new, and loses what git would run ([`disarm_excluded`]): its
//! hooks (git's sample hooks stay), `info/` (an `info/exclude` of comments stays), `commondir`,
//! `config.worktree`, replace refs, a `.git` that is a `gitdir:` file or a link, and its
//! `config` keeps only the allow-listed keys (a clone keeps its remote), as for a repository
//! the step made elsewhere in the project.

use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::FileType;
use rustix::io::Errno;

use super::import::Dropped;
use super::nested::{filter_nested_config, only_comments};
use super::write;
use crate::beneath::{cstr, display_rel, file_type, join_rel, lstat, open_dir_rel, open_root};
use crate::beneath::{read_names, remove_all};
use crate::error::{IoContext, Result, StoreError};

/// Below a git directory, what git runs or follows.
const CODE: &[&str] = &[
    "config",
    "config.worktree",
    "hooks",
    "info",
    "commondir",
    "refs/replace",
];

/// The project-relative paths of the code of the repository at `dir` (below `root`): of its
/// git directory (`dir` itself when `layout`, else `dir/.git`); when that `.git` is a file or
/// a link, the `.git` itself, and for a `gitdir:` file naming a directory inside the project
/// (a submodule's, `../.git/modules/x`) that directory's code too.
pub fn excluded_code_paths(root: &Path, dir: &[u8], layout: bool) -> Vec<Vec<u8>> {
    let code_of =
        |git: &[u8]| -> Vec<Vec<u8>> { CODE.iter().map(|c| join_rel(git, c.as_bytes())).collect() };
    if layout {
        return code_of(dir);
    }
    let dot_git = join_rel(dir, b".git");
    let Ok(fd) = open_root(root) else {
        return vec![dot_git];
    };
    let kind = open_dir_rel(fd.as_fd(), dir)
        .and_then(|d| lstat(d.as_fd(), c".git"))
        .map(|st| file_type(&st));
    match kind {
        Ok(FileType::Directory) => code_of(&dot_git),
        Ok(FileType::RegularFile) => {
            let mut out = vec![dot_git.clone()];
            if let Some(git) = gitdir_inside(fd.as_fd(), dir) {
                out.extend(code_of(&git));
            }
            out
        }
        _ => vec![dot_git],
    }
}

/// The project-relative directory a `gitdir:` file at `dir/.git` names, when it lies inside
/// the project (resolved by name: every later operation on it refuses a link anyway).
fn gitdir_inside(root: std::os::fd::BorrowedFd<'_>, dir: &[u8]) -> Option<Vec<u8>> {
    let d = open_dir_rel(root, dir).ok()?;
    let text = write::read(d.as_fd(), ".git").ok()??;
    let line = text.split(|&b| b == b'\n').next()?;
    let target = line.strip_prefix(b"gitdir:")?.trim_ascii();
    if target.first() == Some(&b'/') {
        // Absolute: inside the project only as a path below its root, which the caller
        // cannot tell without the root's own name; the step's sandbox cannot write outside.
        return None;
    }
    let mut parts: Vec<&[u8]> = dir
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    for part in target.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then(|| parts.join(&b'/'))
}

/// A repository in an excluded directory: `dir` (project-relative) holds a `.git` (`layout`
/// false), or is a git directory by its layout alone (true).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct RepositoryAt {
    pub dir: Vec<u8>,
    pub layout: bool,
}

/// The most entries [`repositories_below`] looks at, as the sandbox's listing of the excluded
/// directories bounds its own.
const MAX_LOOKED_AT: usize = 1 << 20;

/// The repositories at and below `roots` (project-relative directories below `root`), never
/// through a link, and whether the bound on entries stopped the walk first. What cannot be
/// read is passed over: a directory gone or made unreadable holds nothing git could run.
pub fn repositories_below(
    root: std::os::fd::BorrowedFd<'_>,
    roots: &[Vec<u8>],
) -> (Vec<RepositoryAt>, bool) {
    use crate::bare_repository::{LAYOUT_ENTRIES, is_git_directory};
    use crate::tree::EntryKind;
    let mut found = Vec::new();
    let mut looked_at = 0usize;
    let mut dirs: Vec<Vec<u8>> = roots.to_vec();
    while let Some(rel) = dirs.pop() {
        let Ok(dir) = open_dir_rel(root, &rel) else {
            continue;
        };
        let Ok(names) = read_names(dir.as_fd()) else {
            continue;
        };
        looked_at += names.len();
        if looked_at > MAX_LOOKED_AT {
            return (found, true);
        }
        let mut layout: Vec<(&str, EntryKind)> = Vec::new();
        for name in names {
            let Ok(st) = lstat(dir.as_fd(), &name) else {
                continue;
            };
            let kind = file_type(&st);
            if name.to_bytes() == b".git" {
                found.push(RepositoryAt {
                    dir: rel.clone(),
                    layout: false,
                });
                continue;
            }
            if let Some(entry) = LAYOUT_ENTRIES
                .iter()
                .find(|e| e.as_bytes() == name.to_bytes())
            {
                let kind = match kind {
                    FileType::Directory => EntryKind::Dir,
                    FileType::Symlink => EntryKind::Symlink,
                    FileType::RegularFile => EntryKind::File,
                    _ => EntryKind::Marker(crate::tree::MarkerReason::Special),
                };
                layout.push((entry, kind));
            }
            let child = join_rel(&rel, name.to_bytes());
            if kind == FileType::Directory && crate::beneath::depth_of(&child) <= MAX_DEPTH {
                dirs.push(child);
            }
        }
        if is_git_directory(|n| layout.iter().find(|(e, _)| *e == n).map(|(_, k)| *k)) {
            found.push(RepositoryAt {
                dir: rel,
                layout: true,
            });
        }
    }
    found.sort();
    (found, false)
}

/// How deep [`repositories_below`] goes, as the store's trees do.
const MAX_DEPTH: usize = crate::worktree::MAX_TREE_DEPTH;

/// What [`disarm_excluded`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Disarmed {
    /// Project-relative paths removed.
    pub removed: Vec<String>,
    /// Config keys taken out, as `path key`.
    pub dropped: Vec<Dropped>,
}

/// Takes from the code `paths` ([`excluded_code_paths`]) of a repository no pre-step copy
/// covered (new since: absent before) what git would run, below `root` and never through a
/// link. What git's template writes is left (sample hooks, an `info/exclude` of comments).
pub fn disarm_excluded(root: &Path, paths: &[Vec<u8>]) -> Result<Disarmed> {
    let fd = open_root(root).at(root)?;
    let mut out = Disarmed::default();
    let at = |rel: &[u8]| root.join(display_rel(rel));
    for rel in paths {
        let (parent, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&b""[..], &rel[..]),
        };
        let dir = match open_dir_rel(fd.as_fd(), parent) {
            Ok(d) => d,
            // Nothing there, or not a directory: nothing of it for git to run.
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
            Err(e) => return Err(e).at(&at(parent)),
        };
        let cname = cstr(name).at(&at(rel))?;
        let st = match lstat(dir.as_fd(), &cname) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(e).at(&at(rel)),
        };
        let is_dir = file_type(&st) == FileType::Directory;
        match name {
            b"config" if file_type(&st) == FileType::RegularFile => {
                let shown = display_rel(rel);
                let dropped = filter_nested_config(root, &shown, b"").map_err(|e| {
                    StoreError::Refused(format!("{}: {e}", root.join(&shown).display()))
                })?;
                out.dropped.extend(dropped);
            }
            b"hooks" | b"info" if is_dir => {
                let inner = open_dir_rel(fd.as_fd(), rel).at(&at(rel))?;
                for entry in read_names(inner.as_fd()).at(&at(rel))? {
                    let entry_rel = join_rel(rel, entry.to_bytes());
                    if inert(inner.as_fd(), name, &entry) {
                        continue;
                    }
                    remove_all(inner.as_fd(), &entry, &entry_rel, &|_| false)
                        .at(&at(&entry_rel))?;
                    out.removed.push(display_rel(&entry_rel));
                }
            }
            _ => {
                remove_all(dir.as_fd(), &cname, rel, &|_| false).at(&at(rel))?;
                out.removed.push(display_rel(rel));
            }
        }
    }
    Ok(out)
}

/// Whether `entry` of a new repository's `hooks/` or `info/` is what git's template writes and
/// git never runs: a regular `*.sample` hook (git runs a hook only by its exact name), an
/// `info/exclude` of comments.
fn inert(dir: std::os::fd::BorrowedFd<'_>, parent: &[u8], entry: &std::ffi::CStr) -> bool {
    let regular = lstat(dir, entry).is_ok_and(|st| file_type(&st) == FileType::RegularFile);
    let name = entry.to_bytes();
    match parent {
        b"hooks" => regular && name.ends_with(b".sample"),
        b"info" => {
            regular
                && name == b"exclude"
                && std::str::from_utf8(name).is_ok_and(|n| {
                    write::read(dir, n).is_ok_and(|t| t.is_some_and(|t| only_comments(&t)))
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// A `.git` of any kind and a layout are found at any depth below the roots; a link is
    /// never followed, and nothing outside the roots is looked at.
    #[test]
    fn repositories_below_finds_each_kind_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let mk = |rel: &str| std::fs::create_dir_all(root.join(rel)).unwrap();
        mk("target/a/.git");
        mk("node_modules/b/lib");
        std::fs::write(root.join("node_modules/b/lib/.git"), "gitdir: ../x\n").unwrap();
        for d in ["objects", "refs"] {
            mk(&format!("node_modules/c/{d}"));
        }
        std::fs::write(root.join("node_modules/c/HEAD"), "ref: refs/heads/main\n").unwrap();
        // Outside the roots, and behind a link: neither is looked at.
        mk("src/d/.git");
        mk("elsewhere/e/.git");
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("target/link")).unwrap();
        let fd = open_root(root).unwrap();
        let roots = [b"target".to_vec(), b"node_modules".to_vec()];
        let (found, stopped) = repositories_below(fd.as_fd(), &roots);
        let at = |dir: &str, layout| RepositoryAt {
            dir: dir.as_bytes().to_vec(),
            layout,
        };
        assert!(!stopped);
        assert_eq!(
            found,
            [
                at("node_modules/b/lib", false),
                at("node_modules/c", true),
                at("target/a", false)
            ]
        );
    }

    #[test]
    fn a_new_repository_keeps_its_data_and_allowed_keys_and_loses_its_code() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let repo = root.join("target/x");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        git(
            &repo,
            &["config", "remote.origin.url", "https://example.com/x"],
        );
        git(&repo, &["config", "core.fsmonitor", "touch /tmp/owned"]);
        std::fs::write(repo.join(".git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(repo.join(".git/info/attributes"), "* filter=x\n").unwrap();
        std::fs::write(repo.join(".git/commondir"), "../../elsewhere\n").unwrap();
        let paths = excluded_code_paths(root, b"target/x", false);
        assert!(
            paths.contains(&b"target/x/.git/config".to_vec()),
            "{paths:?}"
        );
        let done = disarm_excluded(root, &paths).unwrap();
        let config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
        assert!(!config.contains("fsmonitor"), "{config}");
        assert!(config.contains("https://example.com/x"), "{config}");
        assert!(!repo.join(".git/hooks/pre-commit").exists());
        assert!(repo.join(".git/hooks/pre-commit.sample").exists());
        assert!(repo.join(".git/info/exclude").exists());
        assert!(!repo.join(".git/info/attributes").exists());
        assert!(!repo.join(".git/commondir").exists());
        assert!(repo.join(".git/HEAD").exists() && repo.join(".git/objects").is_dir());
        assert!(
            done.dropped
                .iter()
                .any(|d| d.path == "target/x/.git/config core.fsmonitor"),
            "{done:?}"
        );
        assert!(
            done.removed
                .contains(&"target/x/.git/hooks/pre-commit".to_string()),
            "{done:?}"
        );
    }

    #[test]
    fn a_gitdir_file_names_the_directory_it_points_into() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("v/a/sub")).unwrap();
        std::fs::write(root.join("v/a/sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        let paths = excluded_code_paths(root, b"v/a/sub", false);
        assert!(paths.contains(&b"v/a/sub/.git".to_vec()), "{paths:?}");
        assert!(
            paths.contains(&b"v/a/.git/modules/sub/config".to_vec()),
            "{paths:?}"
        );
        // A `gitdir:` file is itself what a new repository loses.
        let done = disarm_excluded(root, &paths).unwrap();
        assert!(!root.join("v/a/sub/.git").exists());
        assert_eq!(done.removed, vec!["v/a/sub/.git".to_string()]);
    }

    #[test]
    fn a_link_on_the_way_is_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(outside.path().join(".git/hooks")).unwrap();
        std::fs::write(outside.path().join(".git/hooks/post-checkout"), "x").unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("target/x")).unwrap();
        let paths: Vec<Vec<u8>> = CODE
            .iter()
            .map(|c| join_rel(b"target/x/.git", c.as_bytes()))
            .collect();
        disarm_excluded(root, &paths).unwrap();
        assert!(outside.path().join(".git/hooks/post-checkout").exists());
    }
}
