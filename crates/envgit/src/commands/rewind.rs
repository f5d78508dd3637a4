//! `envgit rewind N`.

use std::path::Path;
use std::process::ExitCode;

use envgit_policy::Policy;
use envgit_store::{
    EntryKind, MarkerReason, Request, RestoreReport, RewindOptions, SetidCleared, Step, Store,
    WorkTree,
};

use crate::cli::RewindArgs;
use crate::commands::step_ref::StepRef;
use crate::failure::{CmdResult, Failure};
use crate::leave_to_exit::leave_to_exit;
use crate::output;
use crate::project::{POLICY_FILE, Project, ProjectDirs, broken_policy_then};
use crate::step::Snapshot;

/// What a rewind did: the step that recorded the state first (when it had changed), the
/// rewind's own step, and what the file work reported.
struct RewindOutcome {
    recorded_first: Option<Step>,
    step: Step,
    undone: u64,
    marks: Vec<(u64, Request)>,
    restore: RestoreReport,
    setid: SetidCleared,
}

/// The rewind's steps through the step lifecycle; the store does the file work between.
fn rewind(
    store: &mut Store,
    wt: &mut WorkTree,
    opts: &RewindOptions<'_>,
) -> CmdResult<RewindOutcome> {
    let mut step = crate::step::begin(store, &format!("rewind to step {}", opts.target))?;
    let start = envgit_store::rewind_start(store, wt, step.guard(), opts)?;
    crate::timings::mark("scan, diff with the target");
    let recorded_first = match start.record_first.clone() {
        Some(draft) => Some(step.finish(store, Snapshot::Tree(start.current), None, draft)?),
        None => None,
    };
    let (undone, marks) = (start.undone, start.marks.clone());
    // From here on the working tree changes: a rewind that dies or fails before its commit is
    // recorded as interrupted by the next command.
    step.guard().keep_if_uncommitted();
    let done = envgit_store::rewind_apply(store, wt, start, opts)?;
    crate::timings::mark("restore");
    let committed = step.finish(store, Snapshot::Tree(done.tree), None, done.draft)?;
    Ok(RewindOutcome {
        recorded_first,
        step: committed,
        undone,
        marks,
        restore: done.restore,
        setid: done.setid,
    })
}

pub fn run(dir: Option<&Path>, args: &RewindArgs) -> CmdResult<ExitCode> {
    let (project, mut store, step, mut wt) =
        load_with_worktree(dir, args.restore_policy, "rewind", args.step)?;
    crate::timings::mark("open store, stat index");
    // Check the target before touching anything.
    store.step_tree(step)?;
    let protected = if args.restore_policy {
        Vec::new()
    } else {
        project.protected_paths()
    };
    // With `envgit watch`, its daemon says what changed since the stat index was saved: no
    // walk of the whole project.
    let mut asked =
        crate::watch_daemon::client::since_index(project.watch_daemon(), store.dir(), &wt);
    if asked.is_some() {
        crate::timings::mark("watching daemon asked");
    }
    let opts = RewindOptions {
        target: step,
        protected: &protected,
        excludes: &project.scan_config()?.excludes,
        policy_hash: Some(project.policy.hash()),
        known_changes: asked.as_mut().and_then(|a| a.changes.take()),
    };
    let outcome = rewind(&mut store, &mut wt, &opts)?;
    wt.save_index(&store)?;
    // The token from before the scan: what the restore wrote is read again next time.
    if let Some(asked) = &asked {
        wt.save_watch_token(&store, asked.token)?;
    }
    crate::timings::mark("save stat index");
    leave_to_exit((store, wt));
    let skipped: Vec<Skipped> = outcome
        .restore
        .not_restored
        .iter()
        .map(|n| Skipped::new(&n.path, n.reason, n.in_target))
        .collect();
    for s in &skipped {
        s.say(step);
    }
    for p in &outcome.setid.cleared {
        output::warn(&format!(
            "{p}: setuid/setgid bit cleared (no step records one)"
        ));
    }
    for (p, e) in &outcome.setid.failed {
        output::error(&format!(
            "{p} is setuid/setgid (no step records that) and the bit could not be cleared ({e}): \
             `chmod ug-s {p}`"
        ));
    }
    for (n, r) in &outcome.marks {
        let rule = r.rule.as_deref().unwrap_or("no rule");
        output::warn(&format!(
            "step {n} sent {} {}{} ({rule}): rewind cannot undo it",
            r.method, r.host, r.path
        ));
    }
    if args.out.json {
        output::json(&serde_json::json!({
            "target": step,
            "undone": outcome.undone,
            "recorded_first": outcome.recorded_first,
            "step": outcome.step,
            "kept": outcome.restore.kept,
            "written": outcome.restore.written,
            "removed": outcome.restore.removed,
            "not_restored": skipped,
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
            step, outcome.undone
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// [`load`] and the project's working tree with its stat index, read beside the store's open
/// when the policy is sound.
fn load_with_worktree(
    dir: Option<&Path>,
    restore_policy: bool,
    verb: &str,
    step: StepRef,
) -> CmdResult<(Project, Store, u64, WorkTree)> {
    let dirs = ProjectDirs::find(dir)?;
    if let Ok(project) = dirs.load() {
        let (store, wt) = project.open_store_and_worktree()?;
        let n = step.resolve(&store)?;
        return Ok((project, store, n, wt));
    }
    let (project, store, n) = load_in(dirs, restore_policy, verb, step)?;
    let wt = project.worktree(&store)?;
    Ok((project, store, n, wt))
}

/// The project and its store. A broken current policy refuses (`verb` says what keeps it)
/// unless `restore_policy` is given: then step `n`'s policy stands in for it.
pub(super) fn load(
    dir: Option<&Path>,
    restore_policy: bool,
    verb: &str,
    step: StepRef,
) -> CmdResult<(Project, Store, u64)> {
    load_in(ProjectDirs::find(dir)?, restore_policy, verb, step)
}

/// [`load`] in the project at `dirs`.
fn load_in(
    dirs: ProjectDirs,
    restore_policy: bool,
    verb: &str,
    step: StepRef,
) -> CmdResult<(Project, Store, u64)> {
    match dirs.load() {
        Ok(project) => {
            let store = project.open_store()?;
            let n = step.resolve(&store)?;
            Ok((project, store, n))
        }
        Err(e) if restore_policy => {
            let store = dirs.open_store()?;
            let n = step.resolve(&store)?;
            output::warn(&broken_policy_then(
                &e,
                &format!("step {n}'s comes back with the {verb}"),
            ));
            let project = with_policy_of(&dirs, &store, n)?;
            Ok((project, store, n))
        }
        Err(e) => {
            let dir_arg = if verb == "fork" { " DIR" } else { "" };
            Err(Failure::usage(format!(
                "{}\nthe current {POLICY_FILE} is broken and a {verb} keeps it: fix it, or \
                 `envgit {verb} {step}{dir_arg} --restore-policy` to bring back step {step}'s",
                e.message
            )))
        }
    }
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
        host_loads_read: std::sync::OnceLock::new(),
    })
}

/// A path a rewind or fork left alone (excluded, or a marker: too large, a socket, too
/// deep): named on stderr, one line each, and listed in `--json`.
#[derive(serde::Serialize)]
pub struct Skipped {
    pub path: String,
    /// What kind of path it is (`excluded by snapshot.exclude`, `over snapshot.max_file_size`…).
    pub reason: &'static str,
    /// How to bring it back, for the usual regenerable directories.
    pub hint: Option<&'static str>,
    /// False when only the current tree has it: it was left in place, not removed.
    pub in_target: bool,
    #[serde(skip)]
    excluded: bool,
}

impl Skipped {
    pub fn new(path: &str, reason: MarkerReason, in_target: bool) -> Self {
        let name = path.rsplit('/').next().unwrap_or(path);
        let (hint, dir) = match name {
            "node_modules" => (Some("run npm install"), true),
            "target" => (Some("run cargo build"), true),
            ".venv" => (Some("run pip install"), true),
            "__pycache__" => (None, true),
            _ => (None, false),
        };
        let excluded = reason == MarkerReason::Excluded;
        Self {
            path: path.to_string(),
            reason: reason.describe(),
            hint: if excluded { hint } else { None },
            in_target,
            excluded: excluded && dir,
        }
    }

    fn shown(&self) -> String {
        // Display paths as the user sees them: the known excluded directories with their `/`.
        let p = crate::output::escape_controls(&self.path);
        if self.excluded {
            format!("{p}/")
        } else {
            p.into_owned()
        }
    }

    /// `envgit: node_modules/ is excluded and was not restored: run npm install`
    pub fn say(&self, step: u64) {
        let what = if self.reason == MarkerReason::Excluded.describe() {
            format!("{} is excluded and", self.shown())
        } else {
            format!("{} ({})", self.shown(), self.reason)
        };
        let done = if self.in_target {
            "was not restored".to_string()
        } else {
            format!("was left as it is (step {step} did not have it)")
        };
        let hint = match self.hint.filter(|_| self.in_target) {
            Some(h) => format!(": {h}"),
            None if self.reason == MarkerReason::Unreadable.describe() => {
                if self.in_target {
                    ": its content was never in a snapshot".to_string()
                } else {
                    // What no snapshot holds is not removed; once readable, the rewind's own
                    // scan records it as an edit of the person's first, then removes it.
                    format!(
                        ": its content is in no snapshot; to have it recorded and then \
                         removed, `chmod -R u+rwX {}` and rewind again",
                        crate::output::shell_quote(&self.path)
                    )
                }
            }
            None => String::new(),
        };
        eprintln!("envgit: {what} {done}{hint}");
    }
}
