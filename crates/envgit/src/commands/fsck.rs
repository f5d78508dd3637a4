//! `envgit fsck`: exit 0 when every object and step checks out, 1 otherwise.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cli::JsonArg;
use crate::commands::progress::Ticker;
use crate::failure::CmdResult;
use crate::output;
use crate::project::ProjectDirs;

pub fn run(dir: Option<&Path>, args: &JsonArg) -> CmdResult<ExitCode> {
    let project = ProjectDirs::find_for_reading(dir)?;
    let store = project.open_store()?;
    let done = Arc::new(AtomicU64::new(0));
    let total = store.object_count();
    let report = {
        let d = done.clone();
        let _t = Ticker::start(move || {
            format!("checking objects: {}/{total}", d.load(Ordering::Relaxed))
        });
        envgit_store::fsck(&store, Some(&done))?
    };
    if args.json {
        output::json(&report)?;
    } else {
        for (id, why) in &report.bad_objects {
            output::error(&format!("object {id}: {why}"));
        }
        for (step, paths) in &report.broken_steps {
            let shown: Vec<&str> = paths.iter().take(5).map(String::as_str).collect();
            let more = paths.len().saturating_sub(5);
            let more = if more > 0 {
                format!(" (+{more} more)")
            } else {
                String::new()
            };
            output::error(&format!(
                "step {step} cannot be fully restored: {}{more}",
                shown.join(", ")
            ));
        }
        let verdict = if report.is_clean() {
            "clean"
        } else {
            "CORRUPT"
        };
        println!(
            "fsck: {} objects, {} steps checked: {verdict}",
            report.objects_checked, report.steps_checked
        );
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
