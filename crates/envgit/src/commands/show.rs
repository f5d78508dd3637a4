//! `envgit show N [-- PATH…]`: one step in detail.

use std::path::Path;
use std::process::ExitCode;

use crate::cli::ShowArgs;
use crate::failure::CmdResult;
use crate::output::{self, Style};
use crate::project::ProjectDirs;

use super::path_filter::PathFilter;

pub fn run(dir: Option<&Path>, args: &ShowArgs) -> CmdResult<ExitCode> {
    let project = ProjectDirs::find_for_reading(dir)?;
    let store = project.open_store()?;
    let filter = PathFilter::new(&project.root, dir, &args.paths)?;
    let number = args.step.resolve(&store)?;
    let mut step = whole_step(&store, number)?;
    if !filter.is_empty() {
        step.changes.retain(|c| filter.matches(&c.path));
    }
    if args.out.json {
        output::json(&step)?;
        return Ok(ExitCode::SUCCESS);
    }
    let style = Style::stdout();
    crate::pager::page(&format!(
        "{}\n{}",
        super::log::line(&step, &style),
        super::log::detail(&step, &style)
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Step `number` with every change listed (a record keeps 200; the rest come from its trees),
/// the project's files first. `envgit ui`'s step page shows the same.
pub(crate) fn whole_step(
    store: &envgit_store::Store,
    number: u64,
) -> CmdResult<envgit_store::Step> {
    let mut step = store.step(number)?.clone();
    if step.changes_truncated
        && let Some(tree) = step.tree
    {
        let parent = match step.parent {
            Some(p) => store.step(p)?.tree.map(Some),
            None => Some(None),
        };
        // A pruned parent leaves only the recorded part.
        if let Some(parent) = parent {
            step.changes = envgit_store::diff_trees(store, parent.as_ref(), Some(&tree))?;
            step.changes_truncated = false;
            step.changes_omitted = 0;
        }
    }
    envgit_store::project_first(&mut step.changes, |c| c.path.as_bytes());
    Ok(step)
}
