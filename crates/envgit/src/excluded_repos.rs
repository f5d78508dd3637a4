//! Repositories in the directories the snapshot leaves out (`snapshot.exclude`: a `.git` in
//! `.venv/src/pkg/`, a `target/` made a repository): the snapshot's diff never sees them, so
//! their code is copied before a step and put back after it, and one found after the step
//! that no copy covered (new) loses what git would run (`envgit_store`'s
//! `gitlayer/excluded.rs` says what that is).

use std::path::Path;

use envgit_policy::Policy;
use envgit_sandbox::plan::ExcludedRepository;
use envgit_store::{
    ExcludedRepositoryAt, GIT_DATA_ONLY_RULE, ProtectedCopy, StepDraft, StepFlag, WorkTree,
};

use crate::failure::CmdResult;
use crate::output;
use crate::project::Project;
use crate::step::refuse_write;

/// The code of `repos` (found before a step), as protected paths to copy. A path that is not
/// UTF-8 cannot be copied: its repository is then taken for a new one after the step.
pub(crate) fn code_paths(root: &Path, repos: &[ExcludedRepository]) -> Vec<String> {
    repos
        .iter()
        .flat_map(|r| envgit_store::excluded_repository_code(root, &r.dir, r.layout))
        .filter_map(|p| String::from_utf8(p).ok())
        .collect()
}

/// The code of the repositories in the directories `wt`'s scan did not enter, as protected
/// paths (a session's copy, taken once before its first call), and the repositories, as an
/// interrupted call's end is owed them ([`owed`]).
pub(crate) fn code_before(
    project: &Project,
    store_dir: &Path,
    wt: &WorkTree,
) -> (Vec<String>, Vec<ExcludedRepositoryAt>) {
    let (repos, notes) = list(
        (&project.policy, &project.root),
        store_dir,
        crate::project_facts::unwalked_roots(wt),
    );
    for n in notes {
        output::warn(&n);
    }
    (code_paths(&project.root, &repos), owed(&repos))
}

/// `repos`, found before a step whose code is copied, as its begin record keeps them: should
/// envgit die before the step's end, the next command disarms any other repository there
/// (`StepGuard::owe_excluded`).
pub(crate) fn owed(repos: &[ExcludedRepository]) -> Vec<ExcludedRepositoryAt> {
    let at = |r: &ExcludedRepository| ExcludedRepositoryAt {
        dir: r.dir.clone(),
        layout: r.layout,
    };
    repos.iter().map(at).collect()
}

/// The repositories below `roots` now, and what could not be looked at.
fn list(
    (policy, root): (&Policy, &Path),
    store_dir: &Path,
    roots: Vec<Vec<u8>>,
) -> (Vec<ExcludedRepository>, Vec<String>) {
    envgit_sandbox::plan::excluded_repositories(
        policy,
        root,
        roots,
        Some(&crate::project_facts::listing_cache(store_dir)),
    )
}

/// A copy of the code of `repos`, found by the step's listing before it (`envgit run`, whose
/// protected copy is taken before that listing ends); `None` when there is none.
pub(crate) fn copy_before(
    project: &Project,
    store_dir: &Path,
    repos: &[ExcludedRepository],
) -> CmdResult<Option<ProtectedCopy>> {
    if repos.is_empty() {
        return Ok(None);
    }
    let paths = code_paths(&project.root, repos);
    Ok(Some(ProtectedCopy::take(store_dir, &project.root, &paths)?))
}

/// Where the listing before a step started (the directories the scan did not enter) and the
/// repositories it found.
pub(crate) struct ListedBefore {
    pub roots: Vec<Vec<u8>>,
    pub repos: Vec<ExcludedRepository>,
}

/// What a sandboxed step's end needs for these repositories.
pub(crate) struct Excluded<'a> {
    pub project: &'a Project,
    /// The copy of their code taken before the step, when the step's protected copy does not
    /// hold it.
    pub copy: Option<&'a ProtectedCopy>,
    /// What the listing before the step found, when a watching daemon says nothing happened
    /// in those directories since: not listed again.
    pub unchanged: Option<Vec<ExcludedRepository>>,
    /// The directories that listing started from (`None`: found in the stat index, a visit
    /// of every entry: ~2 ms at 100,000 files).
    pub roots_before: Option<Vec<Vec<u8>>>,
}

/// The listing of the directories the scan did not enter before the step, made again on a
/// thread while the step ends (the git layer's import, the put-back, the snapshot: at ~1,000
/// directories of `node_modules/` it is a few milliseconds of `lstat`s).
pub(crate) struct Looking {
    roots: Vec<Vec<u8>>,
    found: Option<Found>,
}

/// What a [`Looking`] found, or will.
enum Found {
    Listing(std::thread::JoinHandle<(Vec<ExcludedRepository>, Vec<String>)>),
    Known(Vec<ExcludedRepository>),
}

impl Excluded<'_> {
    /// Begins the listing below the directories `wt` (its index as before the step) did not
    /// enter; [`after_step`] lists those the step made besides.
    pub(crate) fn start_looking(&self, wt: &WorkTree, store_dir: &Path) -> Looking {
        let roots = match &self.roots_before {
            Some(roots) => roots.clone(),
            None => crate::project_facts::unwalked_roots(wt),
        };
        if let Some(known) = &self.unchanged {
            crate::timings::note("the excluded directories unchanged on the daemon's word");
            let found = Some(Found::Known(known.clone()));
            return Looking { roots, found };
        }
        if roots.is_empty() {
            return Looking { roots, found: None };
        }
        let (policy, root) = (self.project.policy.clone(), self.project.root.clone());
        let (store_dir, listed) = (store_dir.to_path_buf(), roots.clone());
        let found = std::thread::Builder::new()
            .name("envgit-excluded".into())
            .spawn(move || list((&policy, &root), &store_dir, listed))
            .ok()
            .map(Found::Listing);
        Looking { roots, found }
    }
}

/// After a step (any snapshot taken, `wt` as it left the index): the code of the repositories
/// found before it goes back from `ex.copy`; each repository there is now that no copy in
/// `covered` (the step's protected copy) holds is new, and is disarmed. Said, refused and
/// flagged on `draft`. `looking` is the listing begun as the step ended (none: listed here);
/// `made` the directories the scan does not enter that the snapshot's diff shows new (none:
/// unknown, the stat index is visited for them).
pub(crate) fn after_step(
    ex: &Excluded<'_>,
    (looking, made): (Option<Looking>, Option<Vec<Vec<u8>>>),
    wt: &WorkTree,
    store_dir: &Path,
    covered: Option<&ProtectedCopy>,
    draft: &mut StepDraft,
) -> CmdResult<()> {
    let rule = GIT_DATA_ONLY_RULE;
    let mut any = false;
    if let Some(copy) = ex.copy {
        for p in copy.put_back()? {
            let said = format!(
                "{p} of a repository inside a directory snapshot.exclude leaves out changed \
                 during the step and was put back: git would run or follow it on the host \
                 (rule {rule})"
            );
            refuse_write(draft, &p, rule, &said);
            any = true;
        }
    }
    let root = &ex.project.root;
    // The directories the step made that the scan does not enter (a new `target/`), and the
    // listing of the others; a thread that failed to start or panicked is listed again here.
    // The directories to look below now: those looked below as the step ended and the ones
    // it made, or (no listing begun) all the stat index holds.
    let looked_before = looking.is_some();
    let (looked, found) = match looking {
        Some(Looking { roots, found }) => (
            roots,
            found.and_then(|f| match f {
                Found::Listing(h) => h.join().ok(),
                Found::Known(repos) => Some((repos, Vec::new())),
            }),
        ),
        None => (Vec::new(), None),
    };
    let now = match made {
        Some(made) if looked_before => looked.iter().cloned().chain(made).collect(),
        _ => crate::project_facts::unwalked_roots(wt),
    };
    let listed: &[Vec<u8>] = if found.is_some() { &looked } else { &[] };
    let (mut repos, mut notes) = found.unwrap_or_default();
    let below_listed = |r: &Vec<u8>| {
        listed
            .iter()
            .any(|l| r == l || (r.starts_with(l) && r.get(l.len()) == Some(&b'/')))
    };
    let rest: Vec<Vec<u8>> = now.into_iter().filter(|r| !below_listed(r)).collect();
    let (more, more_notes) = list((&ex.project.policy, root), store_dir, rest);
    repos.extend(more);
    repos.sort();
    repos.dedup();
    notes.extend(more_notes);
    for n in notes {
        output::warn(&n);
    }
    let copied = |p: &[u8]| {
        let held = |c: &ProtectedCopy| c.paths().iter().any(|h| h.as_bytes() == p);
        ex.copy.is_some_and(held) || covered.is_some_and(held)
    };
    for repo in &repos {
        let code = envgit_store::excluded_repository_code(root, &repo.dir, repo.layout);
        if code.iter().all(|p| copied(p)) {
            continue;
        }
        // Only what is the repository's own: a `gitdir:` file's target elsewhere is judged
        // where it is (the snapshot's diff, or its own listing here).
        let mut own = repo.dir.clone();
        own.push(b'/');
        let code: Vec<Vec<u8>> = code.into_iter().filter(|p| p.starts_with(&own)).collect();
        let done = envgit_store::disarm_excluded_repository(root, &code)?;
        for p in &done.removed {
            let said = format!(
                "{p} of a repository the step made inside a directory snapshot.exclude leaves \
                 out was removed: git would run or follow it on the host (rule {rule})"
            );
            refuse_write(draft, p, rule, &said);
            any = true;
        }
        for d in &done.dropped {
            let said = format!(
                "{} of a repository the step made inside a directory snapshot.exclude leaves \
                 out was removed: {} (rule {rule})",
                d.path, d.why
            );
            refuse_write(draft, &d.path, rule, &said);
            any = true;
        }
    }
    if any {
        draft.flag(StepFlag::GitDropped);
    }
    Ok(())
}
