//! `envgit record`: a step for the current state of the project (hook integrations use it).

use std::path::Path;
use std::process::ExitCode;

use envgit_store::{StepDraft, StepKind, now_ms};

use crate::cli::{RecordArgs, RecordKind};
use crate::failure::CmdResult;
use crate::leave_to_exit::leave_to_exit;
use crate::output;
use crate::project::Project;
use crate::step::Snapshot;

pub fn run(dir: Option<&Path>, args: &RecordArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    let (mut store, mut wt) = project.open_store_and_worktree()?;
    let kind = match args.kind {
        RecordKind::Record => StepKind::Record,
        RecordKind::Tool => StepKind::Tool,
        RecordKind::Run => StepKind::Run,
        RecordKind::Repl => StepKind::Repl,
    };
    let started = now_ms();
    let mut step = crate::step::begin(&store, kind.as_str())?;
    let draft = StepDraft {
        kind: Some(kind),
        started_at_ms: started,
        summary: args.summary.clone().unwrap_or_default(),
        policy_hash: Some(project.policy.hash()),
        ..Default::default()
    };
    let step = step.finish(&mut store, Snapshot::Scan(&mut wt, None), None, draft)?;
    wt.save_index(&store)?;
    leave_to_exit((store, wt));
    if args.out.json {
        output::json(&step)?;
    } else {
        output::note(&format!(
            "step {} {}: {}",
            step.number,
            step.kind.as_str(),
            output::changed_files(&step)
        ));
    }
    Ok(ExitCode::SUCCESS)
}
