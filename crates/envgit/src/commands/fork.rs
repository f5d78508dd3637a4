//! `envgit fork N DIR`.

use std::path::Path;
use std::process::ExitCode;

use envgit_store::ForkOptions;

use crate::cli::ForkArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{POLICY_FILE, Project, store_dir};

pub fn run(dir: Option<&Path>, args: &ForkArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    let store = project.open_store()?;
    store.step_tree(args.step)?;
    let base = crate::project::start_dir(dir)?;
    let target = if args.target.is_absolute() {
        args.target.clone()
    } else {
        base.join(&args.target)
    };
    if let Ok(mut entries) = std::fs::read_dir(&target)
        && entries.next().is_some()
    {
        return Err(Failure::usage(format!(
            "{} is not empty: fork into a new or empty directory",
            target.display()
        )));
    }
    if target.starts_with(&project.root) {
        return Err(Failure::usage(format!(
            "{} is inside the project {}: fork into a directory outside it",
            target.display(),
            project.root.display()
        )));
    }
    std::fs::create_dir_all(&target)
        .map_err(|e| Failure::failed(format!("{}: {e}", target.display())))?;
    let canonical = target
        .canonicalize()
        .map_err(|e| Failure::failed(format!("{}: {e}", target.display())))?;
    let new_store = store_dir(&canonical)?;
    let opts = ForkOptions {
        step: args.step,
        replace_root_file: (!args.restore_policy)
            .then_some((POLICY_FILE, project.policy_bytes.as_slice())),
        policy_hash: Some(project.policy.hash()),
    };
    let (_, step) = envgit_store::fork(&store, &canonical, &new_store, &opts)?;
    if args.out.json {
        output::json(&step)?;
    } else {
        println!(
            "forked step {} of {} into {} (step {} of its own history)",
            args.step,
            project.root.display(),
            canonical.display(),
            step.number
        );
    }
    Ok(ExitCode::SUCCESS)
}
