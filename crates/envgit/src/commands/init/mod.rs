//! `envgit init`: write the commented envgit.yaml, create the store, record step 1 (import).

mod scan;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use envgit_policy::INIT_TEMPLATE;
use envgit_policy::registries::{self, Wanted};
use envgit_store::{ScanProgress, StepDraft, StepKind, Store, now_ms};

use crate::cli::InitArgs;
use crate::commands::progress::Ticker;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{POLICY_FILE, Project, start_dir, store_dir};
use crate::step::Snapshot;

pub fn run(dir: Option<&Path>, args: &InitArgs) -> CmdResult<ExitCode> {
    let root = start_dir(dir)?;
    crate::own_exe::refuse_inside(&root)?;
    let policy_path = root.join(POLICY_FILE);
    if policy_path.symlink_metadata().is_ok() {
        return Err(Failure::usage(format!(
            "{} is already an envgit project ({POLICY_FILE} exists); `envgit log` shows its history",
            root.display()
        )));
    }
    let sdir = store_dir(&root)?;
    if sdir.join("store.json").exists() {
        return Err(Failure::usage(format!(
            "a store for {} already exists at {}; remove that directory to start over",
            root.display(),
            sdir.display()
        )));
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&policy_path)
        .map_err(|e| Failure::failed(format!("{}: {e}", policy_path.display())))?;
    // Root initializing another user's project leaves the policy file theirs, like the rest.
    let owner = crate::owner::project_owner(&root);
    f.write_all(policy_text(&args.allow, &scan::wanted(&root)).as_bytes())
        .and_then(|()| match owner {
            Some((uid, gid)) => std::os::unix::fs::fchown(&f, Some(uid), Some(gid)),
            None => Ok(()),
        })
        .and_then(|()| f.sync_all())
        .map_err(|e| Failure::failed(format!("{}: {e}", policy_path.display())))?;
    match import(dir) {
        Ok(step) => {
            if args.out.json {
                output::json(&step)?;
            } else {
                let t = &step.changes_total;
                output::note(&format!(
                    "initialized envgit in {} (store: {})\nstep 1 import: {} files, {}",
                    root.display(),
                    sdir.display(),
                    t.added,
                    output::size(t.bytes_written)
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // Leave nothing half-made behind.
            let _ = std::fs::remove_file(&policy_path);
            let _ = std::fs::remove_dir_all(&sdir);
            Err(e)
        }
    }
}

fn import(dir: Option<&Path>) -> CmdResult<envgit_store::Step> {
    let project = Project::find(dir)?;
    let mut store = Store::create(&project.store_dir, &project.root)?;
    let mut wt = project.worktree(&store)?;
    let started = now_ms();
    let mut step = crate::step::begin(&store, "import")?;
    let progress = Arc::new(ScanProgress::default());
    let draft = StepDraft {
        kind: Some(StepKind::Import),
        started_at_ms: started,
        summary: "import".into(),
        policy_hash: Some(project.policy.hash()),
        ..Default::default()
    };
    let step = {
        let p = progress.clone();
        let _ticker = Ticker::start(move || {
            format!(
                "snapshot: {} files, {}",
                p.files.load(Ordering::Relaxed),
                output::size(p.bytes.load(Ordering::Relaxed))
            )
        });
        step.finish(
            &mut store,
            Snapshot::Scan(&mut wt, Some(&progress)),
            None,
            draft,
        )?
    };
    wt.save_index(&store)?;
    Ok(step)
}

/// The commented template, with `--allow` entries and the registry hosts the project and
/// the host's package configuration ask for as a live `network.allow`.
fn policy_text(allow: &[String], wanted: &[Wanted]) -> String {
    if allow.is_empty() && wanted.is_empty() {
        return INIT_TEMPLATE.to_string();
    }
    let block = registries::render(wanted, allow);
    INIT_TEMPLATE.replacen(
        "# network:\n#   allow:",
        &format!("{block}# Example:\n#   allow:"),
        1,
    )
}
