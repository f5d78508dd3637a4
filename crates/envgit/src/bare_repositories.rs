//! Directories git takes for a repository with no `.git` in them, by their layout alone
//! (`envgit_store::bare_repository` says which and why that runs the step's code on the host),
//! checked from the step's snapshot.
//!
//! So, after each step, for each directory a changed path names one of git's repository
//! entries in:
//! - one the step made a repository that was a plain directory before: the entries that make
//!   it one (`HEAD`, `commondir`) go back to what they were, and git no longer takes it;
//! - one that is new (the step's `git init --bare`, `git clone --bare`) or was a repository
//!   before (a fixture's `tests/fixtures/repo.git`): what git runs there goes back or through
//!   the allow-list, as for a nested `.git`: its `config` filtered, `hooks/`, `info/` and
//!   `commondir` put back.
//!
//! A `.git` directory (the project's, a nested repository's, `modules/` inside one) is the git
//! layer's (`envgit_store::nested_git_code_paths`), and is left out here. A step with no
//! snapshot after it is checked on disk by the store (`end_without_snapshot`).

use std::collections::HashMap;

use envgit_store::{EntryDiff, NestedGitCode, ObjectId, Store, Tree};

use crate::failure::CmdResult;
use crate::snapshot_trees::SnapshotTrees;

use envgit_store::bare_repository::{
    CODE_ENTRIES, CONFIG_ENTRY, LAYOUT_ENTRIES, MAKING_ENTRIES, is_git_directory,
};

/// Whether git takes the directory whose listing is `tree` for a repository.
fn is_repository(tree: &Tree) -> bool {
    is_git_directory(|name| tree.get(name.as_bytes()).map(|e| e.kind))
}

/// What goes back, or through the allow-list, of the repositories without a `.git` the step's
/// `changes` (from `before` to `after`) touched.
pub(crate) fn code(
    store: &Store,
    before: &ObjectId,
    after: &ObjectId,
    changes: &[EntryDiff],
) -> CmdResult<NestedGitCode> {
    let mut out = NestedGitCode::default();
    let add = |list: &mut Vec<String>, path: String| {
        if !list.contains(&path) {
            list.push(path);
        }
    };
    let mut before_trees = SnapshotTrees::new(store, before);
    let mut after_trees = SnapshotTrees::new(store, after);
    // Per directory: what it was before the step (absent, a plain directory, a repository)
    // and whether it is a repository after.
    let mut seen: HashMap<String, (Was, bool)> = HashMap::new();
    for change in changes {
        let Ok(path) = std::str::from_utf8(&change.path) else {
            continue;
        };
        for (dir, name) in candidates(path) {
            if !seen.contains_key(dir) {
                let was = match before_trees.dir(dir)? {
                    None => Was::Absent,
                    Some(t) if is_repository(&t) => Was::Repository,
                    Some(_) => Was::Plain,
                };
                let is = after_trees.dir(dir)?.is_some_and(|t| is_repository(&t));
                seen.insert(dir.to_string(), (was, is));
            }
            let at = |entry: &str| match dir {
                "" => entry.to_string(),
                _ => format!("{dir}/{entry}"),
            };
            match seen[dir] {
                (Was::Plain, true) => {
                    for entry in MAKING_ENTRIES {
                        add(&mut out.put_back, at(entry));
                    }
                }
                (Was::Absent, true) | (Was::Repository, _) if name == CONFIG_ENTRY => {
                    add(&mut out.configs, at(CONFIG_ENTRY));
                }
                (Was::Absent, true) | (Was::Repository, _) if CODE_ENTRIES.contains(&name) => {
                    add(&mut out.put_back, at(name));
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Was {
    Absent,
    Plain,
    Repository,
}

/// Each directory of `path` (project-relative) a repository's entry is named in, with that
/// entry's name: `src` and `hooks` for `src/hooks/pre-commit`. Nothing at or below a `.git`.
fn candidates(path: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    for part in path.split('/') {
        if part == ".git" {
            break;
        }
        if LAYOUT_ENTRIES.contains(&part) || CODE_ENTRIES.contains(&part) || part == CONFIG_ENTRY {
            let dir = if start == 0 { "" } else { &path[..start - 1] };
            out.push((dir, part));
        }
        start += part.len() + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directories_a_path_names_repository_entries_in() {
        assert_eq!(
            candidates("src/hooks/pre-commit"),
            [("src", "hooks")],
            "the entry's directory"
        );
        assert_eq!(candidates("HEAD"), [("", "HEAD")]);
        assert_eq!(
            candidates("a/config/refs/x"),
            [("a", "config"), ("a/config", "refs")]
        );
        assert!(candidates("lib/.git/hooks/pre-commit").is_empty());
        assert!(candidates("src/main.rs").is_empty());
    }
}
