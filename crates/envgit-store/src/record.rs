//! Taking a step: snapshot the working tree and commit a step record for it.

use crate::error::Result;
use crate::lock::StepGuard;
use crate::step::{Step, StepDraft, StepFlag};
use crate::store::Store;
use crate::worktree::{ScanProgress, WorkTree};

/// Snapshot `wt` with a full scan (the stat cache keeps unchanged files at one `lstat`) and
/// commit it as a step. The guard must have been taken before the step's work began.
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
    store.commit(guard, draft, tree)
}
