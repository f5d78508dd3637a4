//! Taking a step: snapshot the working tree and commit a step record for it.

use crate::error::Result;
use crate::lock::StepGuard;
use crate::step::{Step, StepDraft, StepFlag};
use crate::store::Store;
use crate::worktree::{ScanProgress, WorkTree};

/// The step's notes for the setuid/setgid bits its end cleared, or failed to.
pub fn setid_notes(done: &crate::setid::Cleared) -> Vec<String> {
    let cleared = done
        .cleared
        .iter()
        .map(|p| format!("{p}: setuid/setgid bit cleared (envgit never keeps one a step made)"));
    let failed = done
        .failed
        .iter()
        .map(|(p, e)| format!("{p}: made setuid/setgid by the step; clearing the bit failed: {e}"));
    cleared.chain(failed).collect()
}

/// Snapshot `wt` with a full scan (the stat cache keeps unchanged files at one `lstat`) and
/// commit it as a step. The guard must have been taken before the step's work began. A setuid
/// or setgid bit set since the step began is cleared and noted on the step
/// ([`crate::clear_setid_since`]).
pub fn record(
    store: &mut Store,
    wt: &mut WorkTree,
    guard: &mut StepGuard,
    mut draft: StepDraft,
    progress: Option<&ScanProgress>,
) -> Result<Step> {
    let (tree, report) = wt.full_scan(store, progress)?;
    if !report.unstable.is_empty() {
        draft.flags.push(StepFlag::UnstableFiles);
    }
    let setid = crate::setid::clear_setid_since(wt, &report, draft.started_at_ms);
    draft.notes.extend(setid_notes(&setid));
    store.commit(guard, draft, tree)
}
