//! Protected paths reached through symbolic links. The host's git and editors follow links:
//! with `.git/hooks -> ../tools/hooks`, a hook that is a link to `scripts/pre-commit.sh`, or
//! `.github -> ci/github`, what they run is the link's target, an ordinary path of the project
//! the step could write. Every target inside the project of such a link is protected as well:
//! mounted read-only in the sandbox, copied before the step and put back after it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Entries read below protected directories and link targets, at most: these are hooks and
/// editor settings, a few dozen files; a tree past this is not walked further.
const MAX_ENTRIES: usize = 10_000;

/// The project-relative targets inside `root` of the links at, above or below the protected
/// paths `protected` (patterns are skipped: the root's matches are listed among them). Each
/// target is read on the host as it is before the step; a link pointing outside the project,
/// or at the project's root itself, adds nothing.
pub(crate) fn link_targets(root: &Path, protected: &[String]) -> Vec<String> {
    // Compared with resolved paths, so resolved itself.
    let Ok(root) = root.canonicalize() else {
        return Vec::new();
    };
    let root = root.as_path();
    let mut found = BTreeSet::new();
    let mut queue: Vec<PathBuf> = protected
        .iter()
        .filter(|p| !p.contains('*'))
        .map(|p| root.join(p))
        .collect();
    let mut walked = BTreeSet::new();
    let mut budget = MAX_ENTRIES;
    while let Some(path) = queue.pop() {
        // A link at the path or on its way there: its resolved place is what the host reads.
        let Some(real) = resolved(root, &path) else {
            continue;
        };
        if real != path
            && let Some(rel) = inside(root, &real)
        {
            found.insert(rel);
        }
        // Links below it, in its resolved place (each target walked once: links may loop).
        if !real.is_dir() || !walked.insert(real.clone()) || real == root {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&real) else {
            continue;
        };
        for entry in entries.flatten() {
            if budget == 0 {
                return found.into_iter().collect();
            }
            budget -= 1;
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() || kind.is_dir() {
                queue.push(entry.path());
            }
        }
    }
    found.into_iter().collect()
}

/// Where `path` (beneath `root`, itself resolved) leads; `None` when nothing is there. Most
/// protected paths are absent or hold no link, which a few `lstat`s below the root show
/// without resolving the whole path again from `/` (this runs before every step).
fn resolved(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        let meta = at.symlink_metadata().ok()?;
        if meta.file_type().is_symlink() {
            return path.canonicalize().ok();
        }
    }
    Some(at)
}

/// `real` relative to `root` when it lies strictly inside it.
fn inside(root: &Path, real: &Path) -> Option<String> {
    let rel = real.strip_prefix(root).ok()?;
    if rel.as_os_str().is_empty() {
        return None;
    }
    rel.to_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap().join("p");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        (tmp, root)
    }

    #[test]
    fn a_linked_protected_directory_and_the_links_inside_it() {
        let (_tmp, root) = project();
        std::fs::create_dir_all(root.join("tools/hooks")).unwrap();
        std::fs::write(root.join("scripts.sh"), "x").unwrap();
        symlink("../../scripts.sh", root.join("tools/hooks/pre-push")).unwrap();
        symlink("../tools/hooks", root.join(".git/hooks")).unwrap();
        let found = link_targets(&root, &[".git/hooks".into()]);
        assert_eq!(found, vec!["scripts.sh".to_string(), "tools/hooks".into()]);
    }

    #[test]
    fn a_linked_parent_and_nothing_outside_or_at_the_root() {
        let (tmp, root) = project();
        std::fs::create_dir_all(root.join("ci/github/hooks")).unwrap();
        symlink("ci/github", root.join(".github")).unwrap();
        std::fs::create_dir_all(root.join(".vscode")).unwrap();
        symlink(tmp.path(), root.join(".vscode/outside")).unwrap();
        symlink("..", root.join(".vscode/root")).unwrap();
        symlink("loop", root.join(".vscode/loop")).unwrap();
        let found = link_targets(
            &root,
            &[
                ".github/hooks".into(),
                ".vscode".into(),
                "*.code-workspace".into(),
            ],
        );
        assert_eq!(found, vec!["ci/github/hooks".to_string()]);
    }
}
