//! `envgit gc`.

use std::path::Path;
use std::process::ExitCode;

use envgit_store::GcOptions;

use crate::cli::GcArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::Project;

/// The newest steps gc never prunes.
const KEEP_RECENT: usize = 20;

pub fn run(dir: Option<&Path>, args: &GcArgs) -> CmdResult<ExitCode> {
    let project = Project::find(dir)?;
    let mut store = project.open_store()?;
    let budget = match &args.budget {
        Some(b) => envgit_policy::parse_size(b)
            .map_err(|e| Failure::usage(format!("--budget {b}: {e}")))?,
        None => project.policy.snapshot.budget,
    };
    let opts = GcOptions {
        budget,
        keep_recent: KEEP_RECENT,
        purge: args.purge.clone(),
    };
    let report = envgit_store::gc(&mut store, &opts)?;
    if !args.purge.is_empty() {
        // The stat cache would otherwise vouch for the purged content.
        store.forget_stat_index();
    }
    if args.out.json {
        output::json(&report)?;
    } else {
        if !report.pruned_steps.is_empty() {
            output::note(&format!(
                "pruned {} step(s) to stay under {}",
                report.pruned_steps.len(),
                output::size(budget)
            ));
        }
        for p in &args.purge {
            output::note(&format!(
                "purged {p} from {} step(s); if it is still in the project, the next step captures it again",
                report.purged_steps.len()
            ));
        }
        println!(
            "gc: {} -> {} ({} pack(s) compacted, {} object(s) dropped)",
            output::size(report.bytes_before),
            output::size(report.bytes_after),
            report.packs_compacted,
            report.objects_dropped
        );
    }
    Ok(ExitCode::SUCCESS)
}
