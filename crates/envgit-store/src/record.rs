//! Taking a step: snapshot the working tree and commit a step record for it.

use crate::error::Result;
use crate::lock::StepGuard;
use crate::step::{Step, StepDraft, StepFlag};
use crate::store::Store;
use crate::worktree::{ScanProgress, ScanReport, WorkTree};

/// Snapshot `wt` with a full scan (the stat cache keeps unchanged files at one `lstat`) and
/// commit it as a step. The guard must have been taken before the step's work began.
pub fn record(
    store: &mut Store,
    wt: &mut WorkTree,
    guard: &mut StepGuard,
    draft: StepDraft,
    progress: Option<&ScanProgress>,
) -> Result<Step> {
    record_with(store, wt, guard, draft, progress, &mut |_, _| {})
}

/// [`record`], with `on_scan` called between the snapshot and the commit: what the scan
/// noticed (files left out for the budget, trees too deep) can become warnings and notes on
/// the step.
pub fn record_with(
    store: &mut Store,
    wt: &mut WorkTree,
    guard: &mut StepGuard,
    mut draft: StepDraft,
    progress: Option<&ScanProgress>,
    on_scan: &mut dyn FnMut(&ScanReport, &mut StepDraft),
) -> Result<Step> {
    let (tree, report) = wt.full_scan(store, progress)?;
    if !report.unstable.is_empty() {
        draft.flags.push(StepFlag::UnstableFiles);
    }
    on_scan(&report, &mut draft);
    store.commit(guard, draft, tree)
}
