//! What a sandboxed step changed below the project's root that the host runs from there, put
//! back after the step (found in the snapshot's diff; the root's own list is protected during
//! the step):
//!
//! - editor and agent configuration ([`envgit_policy::PROTECTED_NAMES_BELOW`]:
//!   `packages/web/.vscode`) in a directory that was there before the step, which the person
//!   opens;
//! - in a repository nested in the project that was there before the step, a hook manager's
//!   files at its root (`libs/z/.husky`) and what git's configuration has the person's git run
//!   or read there ([`crate::git_host_config`]): that repository's own `core.hooksPath`, a `!`
//!   alias's script, the person's global `core.hooksPath = scripts/hooks`, which every
//!   repository's `scripts/hooks` answers.
//!
//! What the step made (a clone, a scaffold) is its own work, which the person looks at first
//! (a new repository's hooks are checked with its `.git`).

use std::collections::HashMap;
use std::path::Path;

use envgit_store::{EntryDiff, EntryKind, ObjectId, Store};

use crate::failure::CmdResult;
use crate::snapshot_trees::SnapshotTrees;

/// The most read of a nested repository's `.git/config`: more is not a configuration a
/// person wrote.
const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// The paths to put back (project-relative, each once) for the step's `changes` from `before`;
/// `root` is the project's directory on disk.
pub(crate) fn protected_below_changed(
    store: &Store,
    root: Option<&Path>,
    before: &ObjectId,
    changes: &[EntryDiff],
) -> CmdResult<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |target: String| {
        if !out.contains(&target) {
            out.push(target);
        }
    };
    let mut repositories = NestedRepositories {
        before: SnapshotTrees::new(store, before),
    };
    // Per nested repository: the project paths its git configuration names.
    let mut named_in: HashMap<String, Vec<String>> = HashMap::new();
    for change in changes {
        let Ok(path) = std::str::from_utf8(&change.path) else {
            continue;
        };
        if let Some((target, dir)) = envgit_policy::protected_below(path)
            && envgit_store::entry_at(store, before, dir)?.is_some()
        {
            add(target.to_string());
        }
        let Some((repo, rel)) = repositories.innermost(path)? else {
            continue;
        };
        if let Some(entry) = envgit_policy::repository_root_entry(rel) {
            add(format!("{repo}/{entry}"));
        }
        let Some(root) = root else {
            continue;
        };
        if !named_in.contains_key(repo) {
            let named = named_by_git_configuration(store, before, root, repo)?;
            named_in.insert(repo.to_string(), named);
        }
        for named in &named_in[repo] {
            if crate::project_path::is_at_or_below(path, named) {
                add(named.clone());
            }
        }
    }
    Ok(out)
}

/// The paths, relative to the nested git repository `repo` that was there before the step
/// (`None`: a git directory whose work tree is not known),
/// whose content its index and refs may not change behind its work tree (they are put back
/// on disk, see [`protected_below_changed`]): its hook manager's files, the names put back
/// below a root (`**/.vscode`), and what git's configuration names there. A configuration
/// that cannot be read adds nothing: the others are still judged.
pub(crate) fn protected_in_repository(
    store: &Store,
    before: &ObjectId,
    root: Option<&Path>,
    repo: Option<&str>,
) -> Vec<String> {
    let mut out: Vec<String> = envgit_policy::REPOSITORY_ROOT_PATHS
        .iter()
        .map(|p| p.to_string())
        .chain(
            envgit_policy::PROTECTED_NAMES_BELOW
                .iter()
                .map(|n| format!("{}{n}", envgit_store::GIT_PROTECTED_BELOW_ROOT)),
        )
        .collect();
    if let (Some(root), Some(repo)) = (root, repo)
        && let Ok(named) = named_by_git_configuration(store, before, root, repo)
    {
        for path in named {
            if let Some(rel) = path.strip_prefix(repo).and_then(|r| r.strip_prefix('/'))
                && !out.iter().any(|p| p == rel)
            {
                out.push(rel.to_owned());
            }
        }
    }
    out
}

/// The repositories nested in the project that were there before the step: a directory of
/// `before` holding one of [`envgit_policy::REPOSITORY_MARKERS`].
struct NestedRepositories<'a> {
    before: SnapshotTrees<'a>,
}

impl NestedRepositories<'_> {
    /// The innermost one above `path`, and `path` relative to it.
    fn innermost<'p>(&mut self, path: &'p str) -> CmdResult<Option<(&'p str, &'p str)>> {
        let slashes: Vec<usize> = path.match_indices('/').map(|(i, _)| i).collect();
        for &slash in slashes.iter().rev() {
            let dir = &path[..slash];
            let is_repository = self.before.dir(dir)?.is_some_and(|t| {
                envgit_policy::REPOSITORY_MARKERS
                    .iter()
                    .any(|m| t.get(m.as_bytes()).is_some())
            });
            if is_repository {
                return Ok(Some((dir, &path[slash + 1..])));
            }
        }
        Ok(None)
    }
}

/// The project paths the configurations git reads in the nested git repository `repo` name:
/// its `.git/config` as it was before the step and as it is now (a step's edit of it is put
/// back or filtered, but which one the person's git ends up reading, both are covered), with
/// the system's, the person's and the environment's.
fn named_by_git_configuration(
    store: &Store,
    before: &ObjectId,
    root: &Path,
    repo: &str,
) -> CmdResult<Vec<String>> {
    if envgit_store::entry_at(store, before, &format!("{repo}/.git"))?.is_none() {
        // Another system's repository: git does not read its configuration there.
        return Ok(Vec::new());
    }
    let dir = root.join(repo);
    let config = format!("{repo}/.git/config");
    let earlier = match envgit_store::entry_at(store, before, &config)? {
        Some(e) if e.kind == EntryKind::File => store.read_file(&e.id).ok(),
        _ => None,
    };
    let mut named: Vec<String> = Vec::new();
    // As the step left it: no link followed, a pipe not waited on.
    let now = crate::nofollow::read_in_project(root, &config, CONFIG_MAX_BYTES).ok();
    for (path, _key) in crate::git_host_config::of_repository(root, &dir, earlier)
        .into_iter()
        .chain(crate::git_host_config::of_repository(root, &dir, now))
    {
        if !named.contains(&path) {
            named.push(path);
        }
    }
    Ok(named)
}
