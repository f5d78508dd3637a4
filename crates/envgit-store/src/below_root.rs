//! What the host runs from below a project's root, found on disk for a step's end that has no
//! snapshot to diff ([`crate::end_without_snapshot`]: the snapshot failed, or envgit was
//! killed): editor and agent configuration (`packages/web/.vscode`) in a directory that was
//! there before the step, and the entries at the root of a repository nested in the project
//! that was there before it (a hook manager's files, another version control system's
//! configuration). The names are the caller's (this crate knows no policy). What the step
//! changed is told by inode change times, which nothing a step does can set back: a write, a
//! rename, a new link, a `chmod` each stamp the inode, and an entry added or removed stamps its
//! directory.

use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::FileType;
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::bare_repository::{CODE_ENTRIES, CONFIG_ENTRY, MAKING_ENTRIES, is_git_directory};
use crate::beneath::{self, cstr, display_rel, join_rel, lstat, parent_rel};
use crate::error::Result;
use crate::graft::entry_at;
use crate::id::ObjectId;
use crate::store::Store;
use crate::tree::EntryKind;

/// The rule a put-back of these names (as the policy's protected paths' put-back does).
pub const PROTECTED_RULE: &str = "filesystem.protected";

/// What to look for below the root.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BelowRoot {
    /// Names whose entry in any directory below the root goes back when changed (`.vscode`).
    pub names: Vec<String>,
    /// What makes a directory a repository's root (`.git`, `.hg`).
    pub repository_markers: Vec<String>,
    /// Entries at a nested repository's root that go back when changed (`.husky`,
    /// `.hg/hgrc`, `lefthook.*`: one `*` in the last component).
    pub repository_root_entries: Vec<String>,
}

/// What the walk of the project found for [`BelowRoot`].
#[derive(Debug, Default)]
pub(crate) struct FoundBelow {
    /// Entries named in [`BelowRoot::names`], not at the root.
    below: Vec<Vec<u8>>,
    /// Directories holding a repository marker, not the root.
    repositories: Vec<Vec<u8>>,
}

/// How much of a changed-looking entry is looked at before it is taken as changed: a step
/// cannot make the look endless.
const MOST_ENTRIES: usize = 10_000;
const MOST_DEPTH: usize = 32;

/// Margin for the coarse clock that stamps ctime (as for the setid bits).
const CTIME_MARGIN_NS: i64 = 1_000_000_000;

impl BelowRoot {
    /// Notes `name` in the directory `dir` (its path `child`), as the walk lists it.
    pub(crate) fn note(&self, dir: &[u8], name: &[u8], child: &[u8], found: &mut FoundBelow) {
        if dir.is_empty() {
            return;
        }
        if self.names.iter().any(|n| n.as_bytes() == name) {
            found.below.push(child.to_vec());
        }
        let marker = self.repository_markers.iter().any(|m| m.as_bytes() == name);
        if marker && found.repositories.last().map(Vec::as_slice) != Some(dir) {
            found.repositories.push(dir.to_vec());
        }
    }

    /// What of `found` changed since `since_ms` (ms since the epoch) and was there before the
    /// step in its place: its directory, or for a repository's entry the repository. A
    /// repository's entries are its hook managers' files and `configured(repo)`: what its git
    /// configuration names there (relative to it).
    pub(crate) fn changed(
        &self,
        store: &Store,
        root: BorrowedFd<'_>,
        before: &ObjectId,
        found: &FoundBelow,
        since_ms: u64,
        configured: &mut dyn FnMut(&str) -> Vec<String>,
    ) -> Result<Vec<String>> {
        let since_ns = (since_ms as i64).saturating_mul(1_000_000) - CTIME_MARGIN_NS;
        let mut out: Vec<String> = Vec::new();
        let mut add = |rel: &[u8]| {
            let shown = display_rel(rel);
            if !out.contains(&shown) {
                out.push(shown);
            }
        };
        for entry in &found.below {
            let dir = display_rel(parent_rel(entry).unwrap_or_default());
            let was_dir = entry_at(store, before, &dir)?.is_some_and(|e| e.kind == EntryKind::Dir);
            if was_dir && touched_since(root, entry, since_ns) {
                add(entry);
            }
        }
        for repo in &found.repositories {
            let shown = display_rel(repo);
            let mut was_repository = false;
            for m in &self.repository_markers {
                was_repository |= entry_at(store, before, &format!("{shown}/{m}"))?.is_some();
            }
            if !was_repository {
                continue;
            }
            let named = configured(&shown);
            for pattern in self.repository_root_entries.iter().chain(&named) {
                for rel in on_disk(root, repo, pattern) {
                    if touched_since(root, &rel, since_ns) {
                        add(&rel);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// What goes back of the directories git takes for a repository by their layout alone
/// (`dirs`, found on disk; [`crate::bare_repository`]): of one that was a plain directory
/// before the step, the entries that made it one; of one that is new or was a repository
/// before, what git runs there ([`CODE_ENTRIES`] and its `config`, whole) that changed since
/// `since_ms`.
pub(crate) fn bare_repositories_changed(
    store: &Store,
    root: BorrowedFd<'_>,
    before: &ObjectId,
    dirs: &[Vec<u8>],
    since_ms: u64,
) -> Result<Vec<String>> {
    let since_ns = (since_ms as i64).saturating_mul(1_000_000) - CTIME_MARGIN_NS;
    let mut out = Vec::new();
    for dir in dirs {
        let shown = display_rel(dir);
        // The project's root is the tree `before` itself.
        let was = match dir.is_empty() {
            true => Some(*before),
            false => match entry_at(store, before, &shown)? {
                Some(e) if e.kind == EntryKind::Dir => Some(e.id),
                _ => None,
            },
        };
        let was_plain = match was {
            Some(id) => {
                let tree = store.read_tree(&id)?;
                !is_git_directory(|n| tree.get(n.as_bytes()).map(|e| e.kind))
            }
            None => false,
        };
        let entries: Vec<&str> = if was_plain {
            MAKING_ENTRIES.to_vec()
        } else {
            CODE_ENTRIES
                .iter()
                .copied()
                .chain([CONFIG_ENTRY])
                .filter(|e| touched_since(root, &join_rel(dir, e.as_bytes()), since_ns))
                .collect()
        };
        for e in entries {
            let target = display_rel(&join_rel(dir, e.as_bytes()));
            if !out.contains(&target) {
                out.push(target);
            }
        }
    }
    Ok(out)
}

/// The paths `pattern` names below the directory `repo` (one `*` in its last component, matched
/// against a listing of its directory).
fn on_disk(root: BorrowedFd<'_>, repo: &[u8], pattern: &str) -> Vec<Vec<u8>> {
    let (dir, last) = pattern.rsplit_once('/').unwrap_or(("", pattern));
    let dir = if dir.is_empty() {
        repo.to_vec()
    } else {
        join_rel(repo, dir.as_bytes())
    };
    let Some((head, tail)) = last.split_once('*') else {
        return vec![join_rel(&dir, last.as_bytes())];
    };
    let Ok(fd) = beneath::open_dir_rel(root, &dir) else {
        return Vec::new();
    };
    let Ok(names) = beneath::read_names(fd.as_fd()) else {
        return Vec::new();
    };
    names
        .iter()
        .map(|n| n.to_bytes())
        .filter(|n| {
            n.len() >= head.len() + tail.len()
                && n.starts_with(head.as_bytes())
                && n.ends_with(tail.as_bytes())
        })
        .map(|n| join_rel(&dir, n))
        .collect()
}

/// Whether the entry at `rel`, or anything below it, changed since `since_ns`. What cannot be
/// looked at is taken as changed (it goes back); an entry that is not there did not change.
fn touched_since(root: BorrowedFd<'_>, rel: &[u8], since_ns: i64) -> bool {
    let Ok(parent) = beneath::open_dir_rel(root, parent_rel(rel).unwrap_or_default()) else {
        return false;
    };
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    let Ok(name) = cstr(name) else {
        return true;
    };
    let mut budget = MOST_ENTRIES;
    entry_touched(parent.as_fd(), &name, since_ns, 0, &mut budget)
}

fn entry_touched(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    since_ns: i64,
    depth: usize,
    budget: &mut usize,
) -> bool {
    let st = match lstat(dir, name) {
        Ok(st) => st,
        Err(Errno::NOENT) => return false,
        Err(_) => return true,
    };
    if st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64 >= since_ns {
        return true;
    }
    if beneath::file_type(&st) != FileType::Directory {
        return false;
    }
    if depth >= MOST_DEPTH || *budget == 0 {
        return true;
    }
    let Ok(fd) = beneath::open_dir_rel(dir, name.to_bytes()) else {
        return true;
    };
    let Ok(names) = beneath::read_names(fd.as_fd()) else {
        return true;
    };
    names.iter().any(|n| {
        *budget = budget.saturating_sub(1);
        entry_touched(fd.as_fd(), n, since_ns, depth + 1, budget)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(root: &std::path::Path, rel: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }

    #[test]
    fn a_pattern_names_what_is_on_disk_and_a_plain_path_itself() {
        let tmp = tempfile::tempdir().unwrap();
        for rel in [
            "z/lefthook.yml",
            "z/lefthook-local.yml",
            "z/.config/lefthook.toml",
        ] {
            put(tmp.path(), rel);
        }
        let root = beneath::open_root(tmp.path()).unwrap();
        let shown = |pattern: &str| -> Vec<String> {
            let mut v: Vec<String> = on_disk(root.as_fd(), b"z", pattern)
                .iter()
                .map(|r| display_rel(r))
                .collect();
            v.sort();
            v
        };
        assert_eq!(shown("lefthook.*"), ["z/lefthook.yml"]);
        assert_eq!(shown(".config/lefthook.*"), ["z/.config/lefthook.toml"]);
        assert_eq!(shown(".hg/hgrc"), ["z/.hg/hgrc"]);
        assert!(shown(".nothing/x.*").is_empty());
    }

    #[test]
    fn a_change_anywhere_below_an_entry_counts_and_an_absent_one_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        put(tmp.path(), "w/.vscode/deep/settings.json");
        let root = beneath::open_root(tmp.path()).unwrap();
        // Everything is older than a start in the future, newer than one long past.
        let future = i64::MAX / 2;
        assert!(!touched_since(root.as_fd(), b"w/.vscode", future));
        assert!(touched_since(root.as_fd(), b"w/.vscode", 0));
        assert!(!touched_since(root.as_fd(), b"w/.absent", 0));
        // A step that began after the entry was made (a few clock ticks later): unchanged,
        // until a file is written deep below it.
        let tick = std::time::Duration::from_millis(20);
        std::thread::sleep(tick);
        let began = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64;
        assert!(!touched_since(root.as_fd(), b"w/.vscode", began));
        std::thread::sleep(tick);
        put(tmp.path(), "w/.vscode/deep/new.json");
        assert!(touched_since(root.as_fd(), b"w/.vscode", began));
    }
}
