//! The protected paths behind the working tree of a repository nested in the project (see
//! `protected`, which judges the project's own `.git`). After a step its hook manager's files
//! at its root (`libs/z/.husky/pre-commit`, `lefthook.yml`, what its git config names) are put
//! back on disk, but its `.git` is no overlay: an index entry, a commit, `ORIG_HEAD`, a reflog
//! line, `FETCH_HEAD`, a cache-tree node or a sparse directory entry the step left there naming
//! other content for one of them had the person's `git reset --hard`, `git checkout -- .` or
//! next commit there write the agent's hook. Judged as the project's are, against the
//! snapshot before the step: when they name a change, the step's index, refs, `HEAD`,
//! pseudo-refs and reflogs of that repository go back together to their pre-step state.

use std::collections::{BTreeMap, BTreeSet};

use super::classify::{Class, REFTABLE_LIST, SHALLOW, classify, names_commits};
use super::import::Dropped;
use super::nested::split_nested;
use super::nested_objects::read_entry;
use super::protected::{ReftableBefore, Sides, blob_id, judge};
use super::verify;
use crate::bare_repository::is_git_directory;
use crate::diff::EntryDiff;
use crate::error::Result;
use crate::graft::entry_at;
use crate::id::ObjectId;
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason};

/// What of the nested repositories' refs and indexes goes back, and why: for each repository
/// nested in the project that was there before the step (a `.git` directory in `before`) and
/// whose index, refs, `HEAD`, pseudo-refs or reflogs the step changed, judged against
/// `protected_of(repo)` (its protected paths, relative to its work tree `repo`; `None` for a
/// git directory found by its layout, whose work tree is not known). `after` is the snapshot
/// after the step.
pub fn nested_protected_refusals(
    store: &Store,
    before: &ObjectId,
    after: &ObjectId,
    changes: &[EntryDiff],
    protected_of: &mut dyn FnMut(Option<&str>) -> Vec<String>,
) -> Result<Vec<Dropped>> {
    let upper = |rel: &str| read_file(store, after, rel);
    refusals(store, before, changes, protected_of, &upper)
}

/// Whether `rest` (below a `.git`) names content the work tree gets: the index (and a split
/// index's shared part), refs, `HEAD`, the reftable's tables, pseudo-refs, reflogs.
pub(super) fn names_content(rest: &str) -> bool {
    match classify(rest) {
        Ok(Class::Cas | Class::Head) => rest != SHALLOW,
        Ok(Class::Data) => names_commits(rest),
        Ok(Class::Object) => !rest.starts_with("objects/"),
        _ => false,
    }
}

/// [`nested_protected_refusals`] with the step's side of each file read by `upper`
/// (project-relative; regular files only).
pub(super) fn refusals(
    store: &Store,
    before: &ObjectId,
    changes: &[EntryDiff],
    protected_of: &mut dyn FnMut(Option<&str>) -> Vec<String>,
    upper: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Result<Vec<Dropped>> {
    // Per git directory: what the step changed there that names content (class, path below
    // it, removed).
    let mut work: BTreeMap<String, Vec<(Class, String, bool)>> = BTreeMap::new();
    let mut git_dirs = GitDirs {
        store,
        before,
        known: BTreeMap::new(),
    };
    for change in changes {
        let path = String::from_utf8_lossy(&change.path);
        // A `.git` directory first; only then a directory git takes for one by its layout.
        let found = match split_nested(&path) {
            Some(found) => Some(found),
            None => git_dirs.holding(&path)?,
        };
        let Some((git, rest)) = found else {
            continue;
        };
        let Ok(class) = classify(rest) else {
            continue;
        };
        // The tables and shared indexes are read through what names them.
        if names_content(rest) && class != Class::Object {
            let removed = change.new.is_none();
            work.entry(git.to_owned())
                .or_default()
                .push((class, rest.to_owned(), removed));
        }
    }
    let mut out = Vec::new();
    for (git, work) in work {
        // A repository the step made is its own work; a `.git` file or link is put back.
        if !matches!(entry_at(store, before, &git)?, Some(e) if e.kind == EntryKind::Dir) {
            continue;
        }
        // A git directory by its layout (`git init --separate-git-dir`, a `.git` file naming
        // it) has no work tree of its own to read: every change of a protected path counts.
        let repo = git.strip_suffix("/.git");
        let protected = protected_of(repo);
        let upper = |rel: &str| upper(&format!("{git}/{rel}"));
        if let Some(why) = judge_repository(store, before, &git, repo, &upper, &work, &protected) {
            let mut back: BTreeSet<String> = BTreeSet::new();
            for (_, rest, _) in &work {
                back.insert(match rest.as_str() {
                    // The tables it lists go back with it.
                    REFTABLE_LIST => format!("{git}/reftable"),
                    _ => format!("{git}/{rest}"),
                });
            }
            out.extend(back.into_iter().map(|path| Dropped {
                path,
                why: why.clone(),
            }));
        }
    }
    Ok(out)
}

/// The directories of the project that were git directories by their layout before the step
/// (`crate::bare_repository`), looked up once each.
struct GitDirs<'a> {
    store: &'a Store,
    before: &'a ObjectId,
    known: BTreeMap<String, bool>,
}

impl GitDirs<'_> {
    /// For a path below such a directory that names content ([`names_content`]), the
    /// directory and the path below it.
    fn holding<'p>(&mut self, path: &'p str) -> Result<Option<(&'p str, &'p str)>> {
        // The project's own `.git` (its `modules/` too) is the git layer's.
        if path.starts_with(".git/") {
            return Ok(None);
        }
        for (slash, _) in path.match_indices('/') {
            let (dir, rest) = (&path[..slash], &path[slash + 1..]);
            if !names_content(rest) {
                continue;
            }
            let is = match self.known.get(dir) {
                Some(is) => *is,
                None => {
                    let is = match entry_at(self.store, self.before, dir)? {
                        Some(e) if e.kind == EntryKind::Dir => {
                            let tree = self.store.read_tree(&e.id)?;
                            is_git_directory(|n| tree.get(n.as_bytes()).map(|e| e.kind))
                        }
                        _ => false,
                    };
                    self.known.insert(dir.to_owned(), is);
                    is
                }
            };
            if is {
                return Ok(Some((dir, rest)));
            }
        }
        Ok(None)
    }
}

/// The file at `rel` in the snapshot `tree` (or, too large for it, in the project), else
/// `None`.
fn read_file(store: &Store, tree: &ObjectId, rel: &str) -> Option<Vec<u8>> {
    let entry = entry_at(store, tree, rel).ok().flatten()?;
    match entry.kind {
        EntryKind::File | EntryKind::Marker(MarkerReason::TooLarge | MarkerReason::OverBudget) => {
            read_entry(store, rel, &entry).ok()
        }
        _ => None,
    }
}

/// [`judge`] for the nested repository whose `.git` is `git` and work tree `repo`: its files
/// before the step read from the snapshot, the step's by `upper` (below `.git`), its objects
/// (the step's included) by the host's git from the project.
fn judge_repository(
    store: &Store,
    before: &ObjectId,
    git: &str,
    repo: Option<&str>,
    upper: &dyn Fn(&str) -> Option<Vec<u8>>,
    work: &[(Class, String, bool)],
    protected: &[String],
) -> Option<String> {
    let host = |rel: &str| read_file(store, before, &format!("{git}/{rel}"));
    let git_dir = store.project().join(git);
    let reftable_before = || -> std::result::Result<ReftableBefore, String> {
        let Some(list) = host(REFTABLE_LIST) else {
            return Ok(Default::default());
        };
        let table = |name: &str| {
            let table = format!("reftable/{name}");
            host(&table).ok_or_else(|| format!("it named {table}, which was not there"))
        };
        let refs = verify::reftable_refs(&list, table, "")?;
        let named = verify::reftable_named(&list, table, &git_dir.join("objects"))?;
        Ok((refs, named))
    };
    // The put-back leaves the repository's protected files as the snapshot before the step
    // holds them.
    let holds = |path: &[u8], mode: u32, oid: &str| {
        let (Some(repo), Ok(path)) = (repo, std::str::from_utf8(path)) else {
            return false;
        };
        let at = format!("{repo}/{path}");
        let Ok(Some(entry)) = entry_at(store, before, &at) else {
            return false;
        };
        if entry.kind != EntryKind::File
            || !matches!(mode, 0o100644 | 0o100755)
            || (entry.mode & 0o100 != 0) != (mode == 0o100755)
        {
            return false;
        }
        let Ok(content) = store.read_file(&entry.id) else {
            return false;
        };
        blob_id(&content, oid.len() == 64) == oid
    };
    let existed_before = |dir: &[u8]| {
        let Some(repo) = repo else {
            return true;
        };
        let at = format!("{repo}/{}", String::from_utf8_lossy(dir));
        entry_at(store, before, &at).map_or(true, |e| e.is_some())
    };
    let sides = Sides {
        git_dir: &git_dir,
        host: &host,
        upper,
        reftable_before: &reftable_before,
        holds: &holds,
        existed_before: &existed_before,
    };
    judge(&sides, work, protected)
}
