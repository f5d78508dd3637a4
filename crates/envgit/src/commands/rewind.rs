//! `envgit rewind N`.

use std::path::Path;
use std::process::ExitCode;

use envgit_policy::Policy;
use envgit_store::{EntryKind, RewindOptions, Store};

use crate::cli::RewindArgs;
use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::{POLICY_FILE, Project, ProjectDirs, broken_policy_then};

pub fn run(dir: Option<&Path>, args: &RewindArgs) -> CmdResult<ExitCode> {
    let dirs = ProjectDirs::find(dir)?;
    let (project, mut store) = match dirs.load() {
        Ok(project) => {
            let store = project.open_store()?;
            (project, store)
        }
        Err(e) if args.restore_policy => {
            output::warn(&broken_policy_then(
                &e,
                &format!("step {}'s comes back with the rewind", args.step),
            ));
            let store = dirs.open_store()?;
            let project = with_policy_of(&dirs, &store, args.step)?;
            (project, store)
        }
        Err(e) => {
            return Err(Failure::usage(format!(
                "{}\nthe current {POLICY_FILE} is broken and a rewind keeps it: fix it, or \
                 `envgit rewind {} --restore-policy` to bring back step {}'s",
                e.message, args.step, args.step
            )));
        }
    };
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

/// The project as it will be once step `n`'s policy is back (the current one is broken):
/// its excludes and size limit scan the tree, its hash marks the steps.
fn with_policy_of(dirs: &ProjectDirs, store: &Store, n: u64) -> CmdResult<Project> {
    let tree = store.read_tree(&store.step_tree(n)?)?;
    let entry = tree
        .get(POLICY_FILE.as_bytes())
        .filter(|e| e.kind == EntryKind::File)
        .ok_or_else(|| {
            Failure::usage(format!(
                "step {n} has no {POLICY_FILE} to restore and the current one is broken: \
                 fix {} by hand",
                dirs.root.join(POLICY_FILE).display()
            ))
        })?;
    let policy_bytes = store.read_file(&entry.id)?;
    let label = format!("{POLICY_FILE} of step {n}");
    let policy = Policy::parse(&label, &String::from_utf8_lossy(&policy_bytes)).map_err(|e| {
        Failure::usage(format!(
            "{e}\nstep {n}'s {POLICY_FILE} is broken too: rewind to another step with \
             `--restore-policy`, or fix {} by hand",
            dirs.root.join(POLICY_FILE).display()
        ))
    })?;
    Ok(Project {
        root: dirs.root.clone(),
        policy,
        policy_bytes,
        store_dir: dirs.store_dir.clone(),
    })
}
