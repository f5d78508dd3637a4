//! Repositories inside the project other than its own `.git` (a clone into `vendor/x`, a
//! submodule's checkout, a gitlink the step added to the index): no overlay can cover a
//! directory the step creates, so after the step everything of theirs git would run or follow
//! is put back to its pre-step state (absent when new): hooks, `config`, `commondir`, `info/`,
//! rebase state, and a `.git` that is a file (a `gitdir:` pointer) or a link. Their objects,
//! refs, index and logs stay: data, as for the project's own `.git`.

use super::classify::{Class, classify};
use crate::diff::EntryDiff;
use crate::tree::EntryKind;

/// The project-relative paths to put back, from the step's changes.
pub fn nested_code_paths(changes: &[EntryDiff]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for change in changes {
        let path = String::from_utf8_lossy(&change.path);
        let parts: Vec<&str> = path.split('/').collect();
        // The project's own `.git` is the layer's; below index 0 only nested ones.
        let Some(i) = parts
            .iter()
            .skip(1)
            .position(|p| *p == ".git")
            .map(|i| i + 1)
        else {
            continue;
        };
        if parts[0] == ".git" {
            continue; // inside the project's own `.git` (its `modules/`): the layer's
        }
        let git = parts[..=i].join("/");
        let target = if i + 1 == parts.len() {
            // `.git` itself: a pointer file or a link is put back; a directory is walked.
            match change.new.as_ref().map(|e| e.kind) {
                Some(EntryKind::Dir) | None => continue,
                Some(_) => git,
            }
        } else {
            let rest = parts[i + 1..].join("/");
            match classify(&rest) {
                Ok(Class::Config) => format!("{git}/config"),
                Ok(_) => continue,
                Err(_) => format!("{git}/{}", parts[i + 1]),
            }
        };
        if !out.contains(&target) {
            out.push(target);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ObjectId;
    use crate::tree::TreeEntry;

    fn added(path: &str, kind: EntryKind) -> EntryDiff {
        EntryDiff {
            path: path.as_bytes().to_vec(),
            old: None,
            new: Some(TreeEntry {
                name: path.rsplit('/').next().unwrap_or(path).as_bytes().to_vec(),
                kind,
                mode: 0o644,
                size: 1,
                id: ObjectId([0; 32]),
            }),
        }
    }

    #[test]
    fn code_of_nested_repositories_is_put_back_data_stays() {
        let changes = [
            added("vendor/x/.git/hooks/pre-commit", EntryKind::File),
            added("vendor/x/.git/hooks/post-checkout", EntryKind::File),
            added("vendor/x/.git/config", EntryKind::File),
            added("vendor/x/.git/objects/ab/cdef", EntryKind::File),
            added("vendor/x/.git/refs/heads/main", EntryKind::File),
            added("vendor/x/.git/commondir", EntryKind::File),
            added("sub/.git", EntryKind::File),
            added("link/.git", EntryKind::Symlink),
            added(".git/hooks/pre-commit", EntryKind::File),
            added(".git/modules/m/config", EntryKind::File),
            added("src/main.rs", EntryKind::File),
            added("empty/.git", EntryKind::Dir),
        ];
        assert_eq!(
            nested_code_paths(&changes),
            [
                "vendor/x/.git/hooks",
                "vendor/x/.git/config",
                "vendor/x/.git/commondir",
                "sub/.git",
                "link/.git",
            ]
        );
    }
}
