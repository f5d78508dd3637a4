//! Edits made outside the sandbox between steps (the user's own, in an editor or a shell) are
//! recorded as a step of their own before the next step begins, so a step holds only what its
//! command did, and rewinding it never takes the user's edits with it. jj snapshots the working
//! copy at the start of every command the same way.
//!
//! Only where no sandboxed process of the project can be alive: before `envgit run`, and
//! before a session (`envgit claude`, `codex`, `mcp`) starts. Within a session, changes between
//! calls may come from the agent's background processes and belong to its last step.

use envgit_store::{ObjectId, Step, StepDraft, StepFlag, StepKind, Store, now_ms};

use crate::failure::CmdResult;
use crate::output;
use crate::project::Project;
use crate::step::Snapshot;

/// The summary of such a step.
pub(crate) const SUMMARY: &str = "edits made outside the sandbox";

/// Commits `tree` (the project as it is now) as a `record` step flagged `outside` when it
/// differs from the newest step's tree; says so on stderr. Nothing is recorded for a project
/// without history or whose newest snapshot was pruned (there is nothing to compare with).
pub(crate) fn record_outside_edits(
    project: &Project,
    store: &mut Store,
    tree: &ObjectId,
) -> CmdResult<Option<Step>> {
    let Some(head) = store.head() else {
        return Ok(None);
    };
    let (since, head_tree) = (head.number, head.tree);
    if head_tree.is_none() || head_tree.as_ref() == Some(tree) {
        return Ok(None);
    }
    let mut open = crate::step::begin(store, SUMMARY)?;
    let draft = StepDraft {
        kind: Some(StepKind::Record),
        started_at_ms: now_ms(),
        summary: SUMMARY.into(),
        policy_hash: Some(project.policy.hash()),
        flags: vec![StepFlag::Outside],
        ..Default::default()
    };
    let step = open.finish(store, Snapshot::Tree(*tree), None, draft)?;
    output::note(&format!(
        "step {}: your edits since step {since} ({}), recorded on their own before the next step",
        step.number,
        output::changed_files(&step)
    ));
    Ok(Some(step))
}
