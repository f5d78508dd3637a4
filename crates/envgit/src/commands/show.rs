//! `envgit show N`: one step in detail.

use std::path::Path;
use std::process::ExitCode;

use crate::cli::ShowArgs;
use crate::failure::CmdResult;
use crate::output::{self, Style};
use crate::project::ProjectDirs;

pub fn run(dir: Option<&Path>, args: &ShowArgs) -> CmdResult<ExitCode> {
    let project = ProjectDirs::find_for_reading(dir)?;
    let store = project.open_store()?;
    let mut step = store.step(args.step)?.clone();
    if step.changes_truncated
        && let Some(tree) = step.tree
    {
        let parent = match step.parent {
            Some(p) => store.step(p)?.tree.map(Some),
            None => Some(None),
        };
        // A pruned parent leaves only the recorded part.
        if let Some(parent) = parent {
            step.changes = envgit_store::diff_trees(&store, parent.as_ref(), Some(&tree))?;
            step.changes_truncated = false;
        }
    }
    if args.out.json {
        output::json(&step)?;
        return Ok(ExitCode::SUCCESS);
    }
    let style = Style::stdout();
    print!(
        "{}\n{}",
        super::log::line(&step, &style),
        super::log::detail(&step, &style)
    );
    Ok(ExitCode::SUCCESS)
}
