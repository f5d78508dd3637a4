//! `envgit rewind N`.

use std::path::Path;
use std::process::ExitCode;

use envgit_store::RewindOptions;

use crate::cli::RewindArgs;
use crate::failure::CmdResult;
use crate::output;
use crate::project::Project;

pub fn run(dir: Option<&Path>, args: &RewindArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    let mut store = project.open_store()?;
    // Check the target before touching anything.
    store.step_tree(args.step)?;
    let mut wt = project.worktree(&store)?;
    let protected = if args.restore_policy {
        Vec::new()
    } else {
        project.protected_paths()
    };
    let opts = RewindOptions {
        target: args.step,
        protected: &protected,
        excludes: &project.scan_config()?.excludes,
        policy_hash: Some(project.policy.hash()),
    };
    let outcome = envgit_store::rewind(&mut store, &mut wt, &opts)?;
    wt.save_cache(&store.stat_cache_path())?;
    for (n, r) in &outcome.marks {
        let rule = r.rule.as_deref().unwrap_or("no rule");
        output::warn(&format!(
            "step {n} sent {} {}{} ({rule}): rewind cannot undo it",
            r.method, r.host, r.path
        ));
    }
    if args.out.json {
        output::json(&serde_json::json!({
            "target": args.step,
            "undone": outcome.undone,
            "recorded_first": outcome.recorded_first,
            "step": outcome.step,
            "kept": outcome.restore.kept,
            "written": outcome.restore.written,
            "removed": outcome.restore.removed,
        }))?;
    } else {
        if let Some(r) = &outcome.recorded_first {
            output::note(&format!(
                "recorded the current state first as step {}",
                r.number
            ));
        }
        for k in &outcome.restore.kept {
            output::note(&format!(
                "kept {k} as it is now (protected; `--restore-policy` restores it too)"
            ));
        }
        println!(
            "rewound to step {} ({} step(s) undone)",
            args.step, outcome.undone
        );
    }
    Ok(ExitCode::SUCCESS)
}
