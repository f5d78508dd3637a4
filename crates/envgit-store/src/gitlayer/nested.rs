//! Repositories inside the project other than its own `.git` (a clone into `vendor/x`, a
//! submodule's checkout, a gitlink the step added to the index): no overlay can cover a
//! directory the step creates, so after the step everything of theirs git would run or follow
//! is put back to its pre-step state (absent when new): hooks, `commondir`, `info/`, rebase
//! state, and a `.git` that is a file (a `gitdir:` pointer) or a link. Their `config` keeps
//! the allow-listed keys the step set (a clone keeps its remote) and loses the others. Their
//! objects, refs, index and logs stay: data, as for the project's own `.git` (an index listing
//! a path git never lets into one goes back: `nested_objects`).

use std::os::fd::AsFd;
use std::path::Path;

use super::classify::{Class, REFTABLE_LIST, classify, is_object_store_path};
use super::config;
use super::import::Dropped;
use super::nested_objects::read_entry;
use super::verify::{packed_replace_refs, reftable_replace_refs};
use super::write;
use crate::beneath::{open_dir_rel, open_root};
use crate::diff::EntryDiff;
use crate::error::Result;
use crate::graft::entry_at;
use crate::id::ObjectId;
use crate::store::Store;
use crate::tree::{EntryKind, TreeEntry};

/// What of the nested repositories the step touched needs a look.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NestedCode {
    /// Project-relative paths to put back to their pre-step state.
    pub put_back: Vec<String>,
    /// Project-relative `…/.git/config` files to filter through the allow-list.
    pub configs: Vec<String>,
}

/// The project-relative paths to put back and configs to filter, from the step's changes.
/// `comments_only` says whether a file holds only comments and blank lines (what `git init`
/// writes into `info/exclude`).
pub fn nested_code_paths(
    changes: &[EntryDiff],
    comments_only: &dyn Fn(&TreeEntry) -> bool,
) -> NestedCode {
    let mut out = NestedCode::default();
    for change in changes {
        let path = String::from_utf8_lossy(&change.path);
        let Some((git, rest)) = split_nested(&path) else {
            continue;
        };
        if change
            .new
            .as_ref()
            .is_some_and(|new| is_inert_template(rest, new, comments_only))
        {
            continue;
        }
        let target = if rest.is_empty() {
            // `.git` itself: a pointer file or a link is put back; a directory is walked.
            match change.new.as_ref().map(|e| e.kind) {
                Some(EntryKind::Dir) | None => continue,
                Some(_) => git.to_owned(),
            }
        } else {
            match classify(rest) {
                Ok(Class::Config) => {
                    let config = format!("{git}/config");
                    if !out.configs.contains(&config) {
                        out.configs.push(config);
                    }
                    continue;
                }
                // Data; the object store's is checked by `nested_object_refusals`.
                Ok(_) => continue,
                Err(_) if is_object_store_path(rest) => continue,
                // Replace refs alone, not the repository's other refs.
                Err(_) if rest.starts_with("refs/replace/") => format!("{git}/refs/replace"),
                Err(_) => format!("{git}/{}", rest.split('/').next().unwrap_or(rest)),
            }
        };
        if !out.put_back.contains(&target) {
            out.put_back.push(target);
        }
    }
    out
}

/// Whether `rest` (below a nested `.git`) is what `git init` and `git clone` write from git's
/// template and git never runs nor reads as configuration: a `hooks/*.sample` (git runs a hook
/// only by its exact name), an `info/exclude` of comments, an empty `branches`, `hooks` or
/// `info`. A clone made in a step is then no news; anything else there still goes back.
fn is_inert_template(
    rest: &str,
    new: &TreeEntry,
    comments_only: &dyn Fn(&TreeEntry) -> bool,
) -> bool {
    let sample = rest
        .strip_prefix("hooks/")
        .is_some_and(|name| !name.contains('/') && name.ends_with(".sample"));
    match new.kind {
        EntryKind::Dir => matches!(rest, "branches" | "hooks" | "info"),
        EntryKind::File => sample || (rest == "info/exclude" && comments_only(new)),
        // Too large for the snapshot: a sample hook is inert whatever it holds.
        EntryKind::Marker(_) => sample,
        EntryKind::Symlink => false,
    }
}

/// Whether `text` holds only comments and blank lines (what `git init` writes into
/// `info/exclude`).
pub fn only_comments(text: &[u8]) -> bool {
    String::from_utf8_lossy(text)
        .lines()
        .all(|l| l.trim().is_empty() || l.starts_with('#'))
}

/// A path inside a repository nested in the project: its `.git` (project-relative) and the
/// path below it (empty for the `.git` itself). `None` outside one, and inside the project's
/// own `.git` (its `modules/` included: the layer's).
pub(super) fn split_nested(path: &str) -> Option<(&str, &str)> {
    if path == ".git" || path.starts_with(".git/") {
        return None;
    }
    let mut end = 0;
    for part in path.split('/') {
        end += part.len();
        if part == ".git" {
            return Some((&path[..end], path.get(end + 1..).unwrap_or("")));
        }
        end += 1;
    }
    None
}

/// The nested repositories' ref stores the step gave a replace ref: a `packed-refs` (`git
/// replace`, then `git pack-refs`) goes back whole, and so does the `reftable/` directory of a
/// reftable repository (a loose replace ref goes back alone, see [`nested_code_paths`]).
/// Contents are read from `store`, in the snapshots `before` and `after` the step; a reftable
/// that cannot be read goes back too.
pub fn nested_replace_ref_stores(
    store: &Store,
    before: &ObjectId,
    after: &ObjectId,
    changes: &[EntryDiff],
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for change in changes {
        let path = String::from_utf8_lossy(&change.path);
        let Some((git, rest)) = split_nested(&path) else {
            continue;
        };
        if rest != "packed-refs" && rest != REFTABLE_LIST {
            continue;
        }
        // The step's side too large for the snapshot is read from the project; the pre-step
        // side is then unknown, and counts as empty (every replace ref the step's holds is new).
        let text = |e: &Option<TreeEntry>, step_side: bool| -> Result<Vec<u8>> {
            match e {
                Some(e) if e.kind == EntryKind::File || step_side => read_entry(store, &path, e),
                _ => Ok(Vec::new()),
            }
        };
        let (old, new) = (text(&change.old, false)?, text(&change.new, true)?);
        if rest == "packed-refs" {
            if !packed_replace_refs(&new).is_subset(&packed_replace_refs(&old)) {
                out.push(path.into_owned());
            }
        } else if rest == REFTABLE_LIST {
            let refs = |tree: &ObjectId, list: &[u8]| {
                reftable_replace_refs(list, |name| {
                    let table = format!("{git}/reftable/{name}");
                    match entry_at(store, tree, &table) {
                        Ok(Some(e)) if e.kind == EntryKind::File => {
                            store.read_file(&e.id).map_err(|e| e.to_string())
                        }
                        Ok(_) => Err(format!("{table} is not in the snapshot")),
                        Err(e) => Err(e.to_string()),
                    }
                })
            };
            let gained = match (refs(before, &old), refs(after, &new)) {
                (Ok(was), Ok(now)) => !now.is_subset(&was),
                _ => true,
            };
            if gained {
                out.push(format!("{git}/reftable"));
            }
        }
    }
    Ok(out)
}

/// Why a nested repository's config could not be filtered (it is then put back whole).
#[derive(Debug, thiserror::Error)]
pub enum NestedConfigError {
    /// Opening, reading or writing `path` beneath the project, never through a link.
    #[error("{path}: {source}")]
    Access {
        path: String,
        #[source]
        source: rustix::io::Errno,
    },
    /// git could not read the file or apply a key to the filtered copy.
    #[error(transparent)]
    Config(#[from] config::GitConfigError),
    /// The private copy git builds the filtered file in.
    #[error("a temporary file: {0}")]
    TempFile(#[source] std::io::Error),
}

fn access(path: impl Into<String>) -> impl FnOnce(rustix::io::Errno) -> NestedConfigError {
    let path = path.into();
    move |source| NestedConfigError::Access { path, source }
}

/// Filters the config file at `rel` (below `root`, reached without following a link) against
/// `before` (its pre-step text; empty when new): keys outside the allow-list that the step
/// added, changed or removed get their pre-step values back; the others stay as the step left
/// them. Returns the keys put back (none: the file was not touched).
pub fn filter_nested_config(
    root: &Path,
    rel: &str,
    before: &[u8],
) -> Result<Vec<Dropped>, NestedConfigError> {
    let (dir_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let root_fd = open_root(root).map_err(access(root.display().to_string()))?;
    let dir = open_dir_rel(root_fd.as_fd(), dir_rel.as_bytes()).map_err(access(dir_rel))?;
    let Some(after_text) = write::read(dir.as_fd(), name).map_err(access(rel))? else {
        return Ok(Vec::new());
    };
    let before_entries = config::read(before)?;
    let after = config::read(&after_text)?;
    let changed = config::changed(&before_entries, &after);
    let (allowed, refused): (Vec<String>, Vec<(String, &str)>) =
        changed
            .into_iter()
            .fold((Vec::new(), Vec::new()), |(mut ok, mut no), k| {
                match config::refusal(&k, &before_entries, &after) {
                    Some(why) => no.push((k, why)),
                    None => ok.push(k),
                }
                (ok, no)
            });
    if refused.is_empty() {
        return Ok(Vec::new());
    }
    // The pre-step file with the allowed changes applied, built by git itself in a private
    // temporary file, then written in place beneath the repository's directory.
    let tmp = tempfile::NamedTempFile::new().map_err(NestedConfigError::TempFile)?;
    std::fs::write(tmp.path(), before).map_err(NestedConfigError::TempFile)?;
    for key in &allowed {
        let values = after.get(key).cloned().unwrap_or_default();
        config::apply(tmp.path(), key, &values)?;
    }
    let text = std::fs::read(tmp.path()).map_err(NestedConfigError::TempFile)?;
    write::write(dir.as_fd(), name, &text, false, None).map_err(access(rel))?;
    Ok(refused
        .into_iter()
        .map(|(k, why)| Dropped {
            path: format!("{rel} {k}"),
            why: why.into(),
        })
        .collect())
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
            added(
                "vendor/x/.git/refs/replace/0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a",
                EntryKind::File,
            ),
            added("vendor/x/.git/commondir", EntryKind::File),
            added("sub/.git", EntryKind::File),
            added("link/.git", EntryKind::Symlink),
            added(".git/hooks/pre-commit", EntryKind::File),
            added(".git/modules/m/config", EntryKind::File),
            added("src/main.rs", EntryKind::File),
            added("empty/.git", EntryKind::Dir),
            // What `git clone` writes from git's template: no news.
            added("clone/.git/hooks/pre-commit.sample", EntryKind::File),
            added("clone/.git/info/exclude", EntryKind::File),
            added("clone/.git/branches", EntryKind::Dir),
            // Not the template: goes back.
            added("t/.git/hooks/x.sample/pre-commit", EntryKind::File),
            added("t/.git/info/exclude", EntryKind::File),
        ];
        let comments_only = |e: &TreeEntry| e.size == 1 && !e.name.is_empty();
        let mut excludes = changes;
        excludes[17].new.as_mut().unwrap().size = 2; // t/…/info/exclude: a pattern
        assert_eq!(
            nested_code_paths(&excludes, &comments_only),
            NestedCode {
                put_back: [
                    "vendor/x/.git/hooks",
                    "vendor/x/.git/refs/replace",
                    "vendor/x/.git/commondir",
                    "sub/.git",
                    "link/.git",
                    "t/.git/hooks",
                    "t/.git/info",
                ]
                .map(String::from)
                .into(),
                configs: vec!["vendor/x/.git/config".to_string()],
            }
        );
    }

    #[test]
    fn a_config_whose_directory_is_gone_is_an_error_naming_that_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let e = filter_nested_config(tmp.path(), "vendor/x/.git/config", b"").unwrap_err();
        assert!(
            matches!(&e, NestedConfigError::Access { path, source }
                if path == "vendor/x/.git" && *source == rustix::io::Errno::NOENT),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("vendor/x/.git: "), "{e}");
    }
}
