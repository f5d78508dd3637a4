//! The step lifecycle: every kind of step the binary takes — a run, a tool call, a REPL
//! `execute`, a record, a hook's, Codex's `fs/*`, the import at `init`, the user's edits made
//! outside, a rewind, a fork — begins with [`begin`] and ends with [`OpenStep::finish`], the
//! one place where a snapshot becomes a step (the store does the file work in between, never a
//! step of its own). A sandboxed step's finish always runs, in this order: the git layer's
//! import, the put-back of protected paths by content (before the snapshot, which may fail),
//! the snapshot, the nested repositories' code and the setid bits, the put-back of what the
//! snapshot shows, the flags, the commit. When the import, the put-back, the snapshot or the
//! checks after it fail, the nested repositories' code and the setid bits are found on disk
//! instead, and the step fails.

use std::path::Path;

use envgit_store::{
    EntryKind, GitDropped, GitLayer, LiveTree, MarkerReason, ObjectId, ProtectedCopy, Refusal,
    ScanProgress, ScanReport, SnapshotMode, Step, StepDraft, StepFlag, StepGuard, Store, WorkTree,
};

use crate::failure::CmdResult;
use crate::output;

/// A step begun and not yet committed. A session keeps one open across its calls, each
/// [`OpenStep::finish`] committing one step.
pub(crate) struct OpenStep {
    guard: StepGuard,
}

/// Begins a step: from here a crash leaves a record the next command finds.
pub(crate) fn begin(store: &Store, what: &str) -> CmdResult<OpenStep> {
    Ok(OpenStep {
        guard: store.begin_step(what)?,
    })
}

/// How a step's tree is found.
pub(crate) enum Snapshot<'a> {
    /// A walk of the whole tree (the stat cache keeps unchanged files at one `lstat`).
    Scan(&'a mut WorkTree, Option<&'a ScanProgress>),
    /// A long-lived session's inotify-fed tree, which reads only what changed.
    Live(&'a mut LiveTree),
    /// Already taken by the caller.
    Tree(ObjectId),
}

/// Adds to a step's draft what was gathered while the step ended ([`Sandboxed::late`]).
pub(crate) type CompleteDraft<'a> = Box<dyn FnOnce(&mut StepDraft) + 'a>;

/// What ends a step that ran in the sandbox, beside its snapshot.
pub(crate) struct Sandboxed<'a> {
    /// Protected paths put back to their state in `before` when the snapshot shows a change.
    pub protected: &'a [String],
    /// The protected paths as they were before the step, put back by content.
    pub copy: Option<&'a ProtectedCopy>,
    /// The writable directories of the person's `PATH`: a program a step put there ahead of
    /// the host's is removed.
    pub shadows: Option<&'a crate::path_shadow::PathShadows>,
    /// The run's layer over `.git`: what the step wrote there is imported as data.
    pub git: Option<&'a GitLayer>,
    /// The tree the step began from; `None` when unknown (no comparison with a snapshot).
    pub before: Option<ObjectId>,
    /// What the walk before the step recorded as too deep: a watcher's snapshot after it
    /// reads only what changed, and the step still says what it keeps as a marker.
    pub too_deep_before: &'a [String],
    /// Completes the draft once the git layer's import and the put-back are done: what was
    /// still being gathered beside them (`envgit run`: the gate's events, its stop on a thread).
    pub late: Option<CompleteDraft<'a>>,
    /// The repositories in the directories the snapshot leaves out: their code goes back, new
    /// ones are disarmed ([`crate::excluded_repos`]). `None`: not looked at.
    pub excluded: Option<crate::excluded_repos::Excluded<'a>>,
}

impl Snapshot<'_> {
    /// The tree as it is now, the scan's report, and whether a watcher fell back to a rescan.
    fn take(&mut self, store: &Store) -> CmdResult<(ObjectId, ScanReport, bool)> {
        Ok(match self {
            Snapshot::Scan(wt, progress) => {
                let (id, report) = wt.full_scan(store, *progress)?;
                (id, report, false)
            }
            Snapshot::Live(live) => {
                let (id, report, mode) = live.snapshot(store)?;
                (id, report, mode == SnapshotMode::FullRescan)
            }
            Snapshot::Tree(id) => (*id, ScanReport::default(), false),
        })
    }

    /// The project's root, when this snapshot walks it.
    fn root(&self) -> Option<&Path> {
        match self {
            Snapshot::Scan(wt, _) => Some(wt.root()),
            Snapshot::Live(live) => Some(live.tree().root()),
            Snapshot::Tree(_) => None,
        }
    }

    /// `paths` (the project's, relative) were written by envgit: the directories holding one
    /// are read again by a watcher's snapshot, each ancestor too (a directory made for one is
    /// new in its parent). The root's own entries, always watched, only for a path at the top.
    fn mark_written(&mut self, paths: &[String]) {
        let Snapshot::Live(live) = self else {
            return;
        };
        let mut dirs = std::collections::BTreeSet::new();
        for p in paths {
            let mut rel = p.as_bytes();
            if !rel.contains(&b'/') {
                dirs.insert(Vec::new());
            }
            while let Some(slash) = rel.iter().rposition(|&b| b == b'/') {
                rel = &rel[..slash];
                dirs.insert(rel.to_vec());
            }
        }
        live.mark_dirty(dirs);
    }

    fn work_tree(&mut self) -> Option<&mut WorkTree> {
        match self {
            Snapshot::Scan(wt, _) => Some(wt),
            Snapshot::Live(live) => Some(live.tree_mut()),
            Snapshot::Tree(_) => None,
        }
    }
}

impl OpenStep {
    /// The store's handle on the step in flight (to describe it, or keep it on failure).
    pub fn guard(&mut self) -> &mut StepGuard {
        &mut self.guard
    }

    /// Ends the step: the sandbox's checks when it ran in one, the snapshot, the flags, the
    /// commit. Returns the step committed.
    pub fn finish(
        &mut self,
        store: &mut Store,
        mut snapshot: Snapshot<'_>,
        mut sandboxed: Option<Sandboxed<'_>>,
        mut draft: StepDraft,
    ) -> CmdResult<Step> {
        let mut put_back = Vec::new();
        // The listing for repositories in excluded directories runs beside the step's end.
        let mut looking = match (&sandboxed, snapshot.work_tree()) {
            (
                Some(Sandboxed {
                    excluded: Some(ex), ..
                }),
                Some(wt),
            ) => Some(ex.start_looking(wt, store.dir())),
            _ => None,
        };
        if let Some(s) = &sandboxed {
            // What envgit itself writes is read again by the snapshot whether or not a watch
            // saw it (a one-shot step leaves the host's `.git` unwatched).
            // By content, from the pre-step copy: never skipped for a marker, and done before
            // the snapshot, which may fail (a tree too deep, a full disk). Each of the three
            // runs whatever the others did, and only then is a failure returned: an import
            // or a put-back that failed (the step filled the disk) must not leave what the
            // step planted elsewhere. The put-back and the sweep run on a thread beside the
            // import (0.3 ms each on a small project, the other core idle): none writes where
            // another does (the import takes no hook, `commondir` nor `config.worktree`,
            // nothing but regular files, and nothing outside `.git`).
            let (copy, shadows) = (s.copy, s.shadows);
            let put_back_and_sweep = move || {
                (
                    copy.map(ProtectedCopy::put_back),
                    shadows.map(|sh| sh.sweep()),
                )
            };
            let (import, (restored, swept)) = std::thread::scope(|scope| {
                let mut beside = Some(
                    std::thread::Builder::new()
                        .name("envgit-put-back".into())
                        .spawn_scoped(scope, put_back_and_sweep),
                );
                let mut others = None;
                // Waited for by the import only when it must read a protected file as the
                // put-back leaves it; otherwise after it.
                let mut put_back = || {
                    if let Some(beside) = beside.take() {
                        others = Some(match beside {
                            Ok(beside) => beside
                                .join()
                                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                            // No thread: here, after the import or when it asks.
                            Err(_) => put_back_and_sweep(),
                        });
                    }
                };
                // In the snapshot before the step (unknown: it was, and the import judges as
                // strictly as it can).
                let store_read: &Store = store;
                let existed_before = |dir: &[u8]| {
                    let (Some(before), Ok(dir)) = (&s.before, std::str::from_utf8(dir)) else {
                        return true;
                    };
                    envgit_store::entry_at(store_read, before, dir).map_or(true, |e| e.is_some())
                };
                let import = s.git.map(|git| {
                    crate::git_layer::import_into(git, &mut draft, &mut put_back, &existed_before)
                });
                put_back();
                (import, others.unwrap_or_else(put_back_and_sweep))
            });
            if let Some(swept) = swept {
                note_path_shadows(&swept, &mut draft);
            }
            let mut failed = None;
            match restored {
                Some(Ok(restored)) => {
                    put_back = restored;
                    snapshot.mark_written(&put_back);
                }
                Some(Err(e)) => failed = Some(e.into()),
                None => {}
            }
            match import {
                Some(Ok(import)) => {
                    snapshot.mark_written(&crate::git_layer::written_paths(&import));
                }
                Some(Err(e)) => failed = failed.or(Some(e)),
                None => {}
            }
            if let Some(e) = failed {
                // The step fails before its snapshot: what the snapshot's diff would have
                // undone is found on disk, as when the snapshot itself fails.
                excluded_after(store, &mut snapshot, s, &mut draft);
                if let Some(before) = s.before {
                    end_without_snapshot(store, &mut snapshot, &before, draft.started_at_ms);
                }
                return Err(e);
            }
        }
        crate::timings::mark("  git import, put back");
        if let Some(late) = sandboxed.as_mut().and_then(|s| s.late.take()) {
            late(&mut draft);
        }
        let mut made_unwalked = None;
        let checked = snapshot_checked(
            store,
            &mut snapshot,
            sandboxed.as_ref(),
            (&mut put_back, &mut made_unwalked),
            &mut draft,
        );
        let (tree, report, rescanned) = match checked {
            Ok(taken) => taken,
            Err(e) => {
                // No snapshot to diff: what the diff would have undone is found on disk.
                if let Some(s) = &sandboxed {
                    excluded_after(store, &mut snapshot, s, &mut draft);
                    if let Some(before) = s.before {
                        end_without_snapshot(store, &mut snapshot, &before, draft.started_at_ms);
                    }
                }
                return Err(e);
            }
        };
        crate::timings::mark("  diff, nested, put back");
        if let Some(s) = &sandboxed
            && let Some(ex) = &s.excluded
            && let Some(wt) = snapshot.work_tree()
        {
            crate::excluded_repos::after_step(
                ex,
                (looking.take(), made_unwalked),
                wt,
                store.dir(),
                s.copy,
                &mut draft,
            )?;
            crate::timings::mark("  excluded repositories");
        }
        if sandboxed.is_some() {
            note_put_back(&put_back, snapshot.root(), &mut draft);
        }
        if let Some(wt) = snapshot.work_tree() {
            crate::owner::clear_setid(wt, &report, draft.started_at_ms, &mut draft.notes);
        }
        note_scan(&report, rescanned, &mut draft);
        let step = store.commit(&mut self.guard, draft, tree)?;
        crate::timings::mark("  commit");
        Ok(step)
    }
}

/// What the step made that the scan does not enter (a `target/` it created): the markers the
/// diff shows new or changed, which the listing for repositories looks below (one that is no
/// directory is passed over there).
fn made_unwalked_of(changes: &[envgit_store::EntryDiff]) -> Vec<Vec<u8>> {
    let unwalked = |e: &Option<envgit_store::TreeEntry>| {
        e.as_ref().is_some_and(|e| {
            matches!(
                e.kind,
                EntryKind::Marker(MarkerReason::Excluded | MarkerReason::TooDeep)
            )
        })
    };
    changes
        .iter()
        .filter(|c| unwalked(&c.new) && !unwalked(&c.old))
        .map(|c| c.path.clone())
        .collect()
}

/// [`crate::excluded_repos::after_step`] on a step that fails: said, never in the way of the
/// step's own failure.
fn excluded_after(
    store: &Store,
    snapshot: &mut Snapshot<'_>,
    s: &Sandboxed<'_>,
    draft: &mut StepDraft,
) {
    if let Some(ex) = &s.excluded
        && let Some(wt) = snapshot.work_tree()
        && let Err(e) =
            crate::excluded_repos::after_step(ex, (None, None), wt, store.dir(), s.copy, draft)
    {
        output::error(&format!(
            "putting back the code of repositories inside excluded directories: {}",
            e.message
        ));
    }
}

/// The snapshot after a step, and for a sandboxed one what the diff from `before` undoes: the
/// nested repositories' code and the protected paths the snapshot shows changed (added to
/// `put_back`).
fn snapshot_checked(
    store: &mut Store,
    snapshot: &mut Snapshot<'_>,
    sandboxed: Option<&Sandboxed<'_>>,
    (put_back, made_unwalked): (&mut Vec<String>, &mut Option<Vec<Vec<u8>>>),
    draft: &mut StepDraft,
) -> CmdResult<(ObjectId, ScanReport, bool)> {
    let (mut tree, mut report, mut rescanned) = snapshot.take(store)?;
    if !report.full
        && let Some(s) = &sandboxed
    {
        for p in s.too_deep_before {
            if !report.too_deep.contains(p) {
                report.too_deep.push(p.clone());
            }
        }
    }
    crate::timings::mark("  snapshot");
    if let Some(s) = sandboxed
        && let Some(before) = s.before
        && !matches!(snapshot, Snapshot::Tree(_))
    {
        let changes = envgit_store::diff_entries(store, Some(&before), Some(&tree))?;
        *made_unwalked = Some(made_unwalked_of(&changes));
        note_gitmodules(&changes, draft);
        crate::scan_notes::unreadable(&changes, draft);
        // Repositories the step made or changed inside the project: their code goes back.
        let comments_only = |e: &envgit_store::TreeEntry| {
            // Read failures count as content: the file then goes back.
            store
                .read_file(&e.id)
                .is_ok_and(|text| envgit_store::git_text_only_comments(&text))
        };
        let mut nested = envgit_store::nested_git_code_paths(&changes, &comments_only);
        // Directories git takes for a repository by their layout alone (no `.git`): the same.
        let bare = crate::bare_repositories::code(store, &before, &tree, &changes)?;
        nested.put_back.extend(bare.put_back);
        nested.configs.extend(bare.configs);
        nested
            .put_back
            .extend(envgit_store::nested_git_replace_ref_stores(
                store, &before, &tree, &changes,
            )?);
        // Their objects must be what their names say, their history stays whole.
        let mut refused =
            envgit_store::nested_git_object_refusals(store, &before, &tree, &changes)?;
        nested
            .put_back
            .extend(refused.iter().map(|d| d.path.clone()));
        let (rewritten, unfiltered) =
            crate::git_layer::filter_nested_configs(store, &before, &nested, draft)?;
        if rewritten {
            // A config was rewritten after the snapshot: take it again (stat-cached).
            (tree, report, rescanned) = snapshot.take(store)?;
        }
        // Nor may their index, refs, pseudo-refs and reflogs name other content for their
        // hook manager's files than they did: the put-back below keeps those files on disk,
        // the person's `git reset --hard` there would write the step's.
        let root_dir = snapshot.root().map(Path::to_path_buf);
        let mut protected_of = |repo: Option<&str>| {
            crate::below_root::protected_in_repository(store, &before, root_dir.as_deref(), repo)
        };
        let named = envgit_store::nested_git_protected_refusals(
            store,
            &before,
            &tree,
            &changes,
            &mut protected_of,
        )?;
        nested.put_back.extend(named.iter().map(|d| d.path.clone()));
        refused.extend(named);
        let mut nested_paths = nested.put_back;
        nested_paths.extend(unfiltered);
        let mut protected = s.protected.to_vec();
        protected.extend(nested_paths.iter().cloned());
        let root = snapshot.work_tree().map(|wt| wt.root().to_path_buf());
        protected.extend(crate::below_root::protected_below_changed(
            store,
            root.as_deref(),
            &before,
            &changes,
        )?);
        if let Some(wt) = snapshot.work_tree() {
            let (from_snapshot, after) =
                envgit_store::put_back(store, wt, &before, &tree, &protected)?;
            tree = after;
            for p in from_snapshot {
                if !put_back.contains(&p) {
                    put_back.push(p);
                }
            }
        }
        let nested_back;
        (nested_back, *put_back) = std::mem::take(put_back)
            .into_iter()
            .partition(|p| nested_paths.contains(p));
        note_nested_put_back(&nested_back, &refused, draft);
    }
    Ok((tree, report, rescanned))
}

/// The snapshot after a sandboxed step failed, or what follows it did: the nested
/// repositories' code goes back and setuid bits go all the same, found on disk (see
/// [`envgit_store::end_without_snapshot`]). Said; the step itself is not committed.
fn end_without_snapshot(
    store: &Store,
    snapshot: &mut Snapshot<'_>,
    before: &ObjectId,
    started_at_ms: u64,
) {
    // Each nested repository's protected paths are read as the snapshot's judging reads them
    // (the reader `main` set), what its git config names included.
    let root = snapshot.root().map(Path::to_path_buf);
    let Some(wt) = snapshot.work_tree() else {
        return;
    };
    let rule = crate::git_layer::RULE;
    let done = envgit_store::end_without_snapshot(
        store,
        wt.root_fd(),
        wt.config(),
        before,
        started_at_ms,
        &crate::project::below_root_checks(),
        root.as_deref(),
    );
    if let Some(e) = &done.unchecked {
        output::error(&format!(
            "the step's snapshot failed, and so did the look for code it left in \
             repositories inside the project ({e}): check their .git/hooks and .git/config \
             before running git in them (rule {rule})"
        ));
    }
    for p in &done.put_back {
        output::warn(&format!(
            "{p} of a repository inside the project changed during the step and was put back: \
             git would run or follow it on the host (rule {rule}; compared on disk, as the \
             step's snapshot failed)"
        ));
    }
    for p in &done.put_back_below {
        output::warn(&format!(
            "{p} changed during the step and was put back: the host runs it from there (rule \
             {}; found on disk, as the step's snapshot failed)",
            envgit_store::PROTECTED_RULE
        ));
    }
    for (p, e) in &done.failed {
        output::error(&format!(
            "{p} of a repository inside the project changed during the step and could not be \
             put back ({e}; rule {rule}): remove it before running git in that repository"
        ));
    }
    crate::owner::say_setid_cleared(&done.setid);
    snapshot.mark_written(&done.put_back);
    snapshot.mark_written(&done.put_back_below);
}

/// A write of the step's to `path` that envgit undid: said (`said` names the rule) and
/// refused on the step.
pub(crate) fn refuse_write(draft: &mut StepDraft, path: &str, rule: &str, said: &str) {
    output::warn(said);
    draft.refusals.push(Refusal {
        what: format!("write {path}"),
        rule: rule.into(),
    });
}

/// Repositories inside the project whose code was put back (`paths`), or whose data was put
/// back or removed (`refused`, with why: forged objects, or an index or refs naming another
/// hook than they did): said, refused, flagged.
fn note_nested_put_back(paths: &[String], refused: &[GitDropped], draft: &mut StepDraft) {
    let rule = crate::git_layer::RULE;
    let code = paths
        .iter()
        .filter(|p| !refused.iter().any(|d| d.path == **p))
        .map(|p| {
            let what = "changed during the step and was put back: git would run or follow it \
                        on the host";
            (p, what.to_owned())
        });
    let data = refused
        .iter()
        .map(|d| (&d.path, format!("was put back: {}", d.why)));
    let mut any = false;
    for (p, what) in code.chain(data) {
        let said = format!("{p} of a repository inside the project {what} (rule {rule})");
        refuse_write(draft, p, rule, &said);
        any = true;
    }
    if any {
        draft.flag(StepFlag::GitDropped);
    }
}

/// Protected paths put back: said (only what was put back, and why when the person's own
/// settings protect it), refused, flagged.
fn note_put_back(paths: &[String], root: Option<&Path>, draft: &mut StepDraft) {
    let named = match root {
        Some(root) if !paths.is_empty() => crate::protected_by_settings::list(root),
        _ => Vec::new(),
    };
    for p in paths {
        let why = match crate::protected_by_settings::why(&named, p) {
            Some(by) => format!("protected path: {by}"),
            None => "protected path".to_string(),
        };
        let said = format!("{p} changed during the step and was put back ({why})");
        refuse_write(draft, p, "filesystem.protected", &said);
    }
    if !paths.is_empty() {
        draft.flag(StepFlag::ProtectedRestored);
    }
}

/// Programs removed from the person's `PATH`: said, refused, flagged.
fn note_path_shadows(removed: &[crate::path_shadow::Removed], draft: &mut StepDraft) {
    let rule = crate::path_shadow::RULE;
    for r in removed {
        let said = format!("{} {}: removed (rule {rule}; {})", r.shown, r.why, r.fix);
        refuse_write(draft, &r.shown, rule, &said);
    }
    if !removed.is_empty() {
        draft.flag(StepFlag::ProtectedRestored);
    }
}

/// What the scan itself found: files that kept changing, trees too deep, a watcher fallback.
fn note_scan(report: &ScanReport, rescanned: bool, draft: &mut StepDraft) {
    if !report.unstable.is_empty() {
        draft.flags.push(StepFlag::UnstableFiles);
    }
    crate::scan_notes::budget(report, draft);
    for p in &report.too_deep {
        // A marker, like a file over the size limit: rewind and fork leave it alone.
        output::warn(&format!(
            "{p} is nested too deep to snapshot (over {} directories or {} bytes of path) and was recorded as a marker",
            envgit_store::MAX_TREE_DEPTH,
            envgit_store::MAX_TREE_PATH
        ));
        draft
            .notes
            .push(format!("{p}: too deep to snapshot, recorded as a marker"));
    }
    if rescanned {
        draft.flags.push(StepFlag::WatcherFallback);
    }
}

/// `.gitmodules` names where the host's `git submodule update` fetches from: a change to it is
/// data git keeps, but the user should know before running submodule commands.
fn note_gitmodules(changes: &[envgit_store::EntryDiff], draft: &mut StepDraft) {
    if changes.iter().any(|c| c.path == b".gitmodules") {
        let note = ".gitmodules changed during the step: check its submodule URLs before \
                    running `git submodule` on the host";
        output::warn(note);
        draft.notes.push(note.to_string());
    }
}
