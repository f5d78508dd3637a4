//! A sandboxed run: `envgit run`'s one step (begun and finished through [`crate::step`]), and
//! the sandbox behind a gate of its own that every agent session runs in.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use envgit_gate::{Credential, Decision, EventTap, Gate, GateConfig, GateEvent};
use envgit_sandbox::plan::{PlanInput, plan_keeping_secrets};
use envgit_sandbox::spec::RelaySpec;
use envgit_sandbox::{Outcome, SignalGuard};

use envgit_store::{
    Approval, ApprovalAnswer, ProtectedCopy, Refusal, Request, RequestOutcome, StepDraft, StepKind,
    now_ms,
};

use crate::failure::{CmdResult, Failure};
use crate::home_claim::HomeClaim;
use crate::output;
use crate::owner::RunAs;
use crate::project::Project;
use crate::runtime::{CONTROL_SOCKET, GATE_SOCKET, StepDir, random_token};
use crate::step::{Sandboxed, Snapshot};
use crate::terminal::PtyRelay;
use crate::upstreams::Upstreams;

/// envgit itself failed: the exit code of `envgit run` then.
pub const EXIT_ENVGIT_FAILED: i32 = 125;
/// envgit refused to start the command (a shell rule).
pub const EXIT_REFUSED: i32 = 126;

fn passwd_home(uid: u32) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2].parse::<u32>().ok() == Some(uid)).then(|| PathBuf::from(f[5]))
    })
}

pub(crate) fn homes(uid: u32) -> Vec<PathBuf> {
    let mut h: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        h.push(PathBuf::from(home));
    }
    if let Some(p) = passwd_home(uid) {
        h.push(p);
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for p in h {
        let p = p.canonicalize().unwrap_or(p);
        if !out.contains(&p) && p != Path::new("/") {
            out.push(p);
        }
    }
    out
}

/// Run `argv` as one step; returns the exit code envgit exits with.
pub fn run_step(
    project: &Project,
    cwd: &Path,
    argv: Vec<String>,
    upstreams: &Upstreams,
    notes: Vec<String>,
) -> CmdResult<i32> {
    // The sandbox process-to-be enters its first namespaces on the other core while the
    // store opens and the run is set up; not for a command the policy refuses. It is told
    // who the command runs as first, and starts then; once the step's directory is made and
    // the project's CA taken, it also builds the part of the new root no command shapes (the
    // system directories, `/dev`, `/run/envgit`, the home) in the step's staging mount point.
    // Of the two paths, this thread's to the spec and the zygote's, this one is the longer
    // since the zygote starts here (by ~1-2 ms): cutting the zygote's alone gains nothing.
    let refused = project.policy.check_command(&argv);
    // Not for a project without a store (moved, or ENVGIT_HOME changed): deciding who runs
    // would make the home's directories where its store should be, and the open below says
    // what is wrong.
    let has_store = project.store_dir.join("store.json").exists();
    let early = match refused {
        Some(_) => None,
        None if !has_store => None,
        None => {
            let uid = rustix::process::getuid().as_raw();
            let run_as = RunAs::decide(&project.root, &project.store_dir, homes(uid))?;
            envgit_sandbox::enter_namespaces_early(run_as.uid, run_as.gid);
            let step_dir = StepDir::make(uid)?;
            let trust = crate::step_ca::for_project(step_dir.base(), &project.root)?;
            let exe = own_binary()?;
            let base = run_as.root_base(&project.root, step_dir.staging(), &trust.files, &exe);
            let system = base.system.clone();
            envgit_sandbox::build_base_early(base);
            Some(EarlyRun {
                step_dir,
                run_as,
                system,
                trust,
            })
        }
    };
    let (mut store, mut live, daemon) = project.open_store_and_live_tree()?;
    crate::timings::mark("open store, stat index");
    crate::owner::first_run(&project.root, &store);
    let line = envgit_policy::command_line(&argv);
    let started = now_ms();
    let policy_hash = project.policy.hash();
    if let Some(m) = refused {
        // `ask` has no approver yet: it fails closed like `deny`.
        output::error(&format!("denied command {line} (rule {})", m.rule));
        let (tree, _) = live.tree_mut().full_scan(&store, None)?;
        crate::outside::record_outside_edits(project, &mut store, &tree)?;
        let mut step = crate::step::begin(&store, &line)?;
        let draft = StepDraft {
            kind: Some(StepKind::Run),
            started_at_ms: started,
            summary: line.clone(),
            command: Some(argv),
            cwd: Some(cwd.display().to_string()),
            exit_code: Some(EXIT_REFUSED),
            policy_hash: Some(policy_hash),
            refusals: vec![Refusal {
                what: format!("command {line}"),
                rule: m.rule.into(),
            }],
            notes,
            ..Default::default()
        };
        step.finish(&mut store, Snapshot::Tree(tree), None, draft)?;
        return Ok(EXIT_REFUSED);
    }
    // Watched from before the walk, so the snapshot after the command reads only the
    // directories written during the step (inotify is told of writes from inside the sandbox:
    // the project is the same inodes there). A write inotify does not report (through a
    // shared mmap) is caught by the next step's walk, as an outside edit.
    // With `envgit watch`, its daemon says what changed instead (none of the walk).
    let mut feed = crate::watch_daemon::client::Feed::start(daemon, store.dir(), &mut live);
    if feed.is_some() {
        crate::timings::mark("watching daemon asked");
    }
    // The host's `.git` under the git layer: only the layer's import writes there during the
    // step, and the step reads again what it wrote. Its directories get no watches (hundreds
    // of them in a project with loose objects); what the person's own git does there
    // meanwhile is read by the next step's walk, as their edit.
    let git_unwatched = feed.is_none()
        && std::fs::symlink_metadata(project.root.join(".git")).is_ok_and(|m| m.is_dir());
    if git_unwatched {
        live.leave_unwatched(b".git");
    }
    // The git layer over `.git` and the protected copy read the project and write only in the
    // store's directory, which the scan never reads: taken on a thread beside it (envgit's
    // thread to the sandbox's spec is the step's longest path). The layer and the protected
    // list come back as soon as they are known (the plan needs them); the copy, which only
    // has to exist before the command starts, is joined then. A failure there is said where
    // it was said before, after the outside edits are recorded, or just before the command
    // would have started.
    let shadows_slot = std::sync::Mutex::new(None);
    let copy_slot = std::sync::Mutex::new(EarlyCopy(None));
    // What the listing of the excluded directories found, and the copy of its repositories'
    // code (that listing ends after the protected copy was taken): filled on the facts'
    // thread, the copy on disk before the command starts.
    let excluded_slot: std::sync::Mutex<Option<ExcludedBefore>> = std::sync::Mutex::new(None);
    let (ran, mut step, git, protected, notes_rx, before, walked) = std::thread::scope(|s| {
        // Owned: the thread outlives the store's borrows below (the outside edits' record).
        let store_dir = store.dir().to_path_buf();
        let (layer_tx, layer_rx) = std::sync::mpsc::sync_channel::<CmdResult<EarlyLayer>>(1);
        let taking = std::thread::Builder::new()
            .name("envgit-guard".into())
            .spawn_scoped(s, move || -> CmdResult<EarlyCopy> {
                let git = match crate::git_layer::open(&store_dir, &project.root) {
                    Ok(git) => git,
                    Err(e) => {
                        let _ = layer_tx.send(Err(e));
                        return Ok(EarlyCopy(None));
                    }
                };
                // Read before the command runs: `core.hooksPath` comes from the trusted
                // .git/config.
                let protected =
                    crate::git_layer::protected_under(git.as_deref(), project.protected_paths());
                let layer = EarlyLayer(Some((git, protected.clone())));
                if layer_tx.send(Ok(layer)).is_err() {
                    // The step ended before it took the layer (its drop finished it).
                    return Ok(EarlyCopy(None));
                }
                let copy = ProtectedCopy::take(&store_dir, &project.root, &protected)?;
                Ok(EarlyCopy(Some(copy)))
            })
            .map_err(|e| Failure::failed(format!("cannot start a thread: {e}")))?;
        let scanned = live.snapshot(&store);
        crate::timings::mark("scan before");
        let Ok(layer) = layer_rx.recv() else {
            // The thread ended without a word: it panicked.
            if let Err(panic) = taking.join() {
                std::panic::resume_unwind(panic);
            }
            return Err(Failure::failed(
                "the git layer's thread ended without its layer".to_string(),
            ));
        };
        crate::timings::mark("git layer taken");
        let (before, walked, _) = scanned?;
        // The plan's facts come from the scan just made; they are gathered on a thread while
        // the step is begun and the run set up (`run_sandboxed` waits for them before its
        // plan). The same thread then reads the host's PATH directories (~0.5 ms when one of
        // them is the project's), needed only before the command starts.
        let store_dir = store.dir().to_path_buf();
        let tree = live.tree();
        let vouch = feed.as_ref().and_then(|f| f.listing_vouch());
        let (facts_tx, facts) = std::sync::mpsc::channel();
        let excluded_write = &excluded_slot;
        let reading_path = std::thread::Builder::new()
            .name("envgit-facts".into())
            .spawn_scoped(s, move || {
                let facts = crate::project_facts::of(project, &store_dir, tree, vouch);
                let (roots, repos) = facts
                    .as_ref()
                    .map(|f| (f.unwalked.clone(), f.excluded_repositories.clone()))
                    .unwrap_or_default();
                let _ = facts_tx.send(facts);
                let copy = crate::excluded_repos::copy_before(project, &store_dir, &repos);
                *excluded_write.lock().unwrap_or_else(|p| p.into_inner()) = Some(ExcludedBefore {
                    listed: crate::excluded_repos::ListedBefore { roots, repos },
                    copy: copy.map(EarlyCopy),
                });
                crate::path_shadow::PathShadows::of_project(project, cwd)
            })
            .map_err(|e| Failure::failed(format!("cannot start a thread: {e}")))?;
        // The user's edits since the last step are theirs, not this command's.
        crate::outside::record_outside_edits(project, &mut store, &before)?;
        crate::timings::mark("outside edits");
        let mut step = crate::step::begin(&store, &line)?;
        let (git, protected) = layer?
            .parts()
            .ok_or_else(|| Failure::failed("the git layer was taken twice".to_string()))?;
        let shadows_read = &shadows_slot;
        let copy_read = &copy_slot;
        let excluded_read = &excluded_slot;
        step.guard().describe(
            &argv,
            Some(&cwd.display().to_string()),
            Some(project.owed_end(before)),
        )?;
        let guard = step.guard();
        // From just before the command starts, a crash, a kill or a failed commit leaves the
        // step for the next command to record as interrupted, with its command; a run refused
        // during its set-up (too many hard links out, a gate that cannot start) leaves none.
        let before_start = move || -> CmdResult<()> {
            let copy = taking
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            crate::timings::mark("protected copy taken");
            let mut slot = copy_read.lock().unwrap_or_else(|p| p.into_inner());
            *slot = copy;
            let copy_on_disk = slot
                .0
                .as_ref()
                .ok_or_else(|| Failure::failed("the protected copy was not taken".to_string()))?
                .durable();
            drop(slot);
            copy_on_disk()?;
            let read = reading_path
                .join()
                .map_err(|_| Failure::failed("the thread reading PATH panicked".to_string()))?;
            // Should envgit die before the step's end, the next command sweeps for it.
            if let (Some(shadows), Some(copy)) = (
                &read,
                &copy_read.lock().unwrap_or_else(|p| p.into_inner()).0,
            ) {
                crate::path_shadow::keep_owed_sweep_with(copy, shadows)?;
            }
            *shadows_read.lock().unwrap_or_else(|p| p.into_inner()) = read;
            if let Some(before) = excluded_read
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                match &before.copy {
                    Ok(EarlyCopy(Some(copy))) => copy.wait_durable()?,
                    Ok(EarlyCopy(None)) => {}
                    Err(_) => {
                        return std::mem::replace(&mut before.copy, Ok(EarlyCopy(None))).map(drop);
                    }
                }
                // Should envgit die before the step's end, the next command disarms what
                // else it finds there (their code copied and on disk: it puts theirs back).
                guard.owe_excluded(crate::excluded_repos::owed(&before.listed.repos))?;
            }
            guard.keep_if_uncommitted();
            Ok(())
        };
        let (notes_tx, notes_rx) = std::sync::mpsc::channel();
        let ran = run_sandboxed(
            project,
            store.dir(),
            cwd,
            &argv,
            &protected,
            upstreams,
            RunExtras {
                step_notes: Some(notes_tx),
                git: git.clone(),
                facts: Some(Facts::Pending(facts)),
                before_start: Some(Box::new(before_start)),
                early,
                cgroups_after_exit: true,
                ..RunExtras::default()
            },
        );
        CmdResult::Ok((ran, step, git, protected, notes_rx, before, walked))
    })?;
    // Taken once the command was about to start; none when the set-up failed before (the
    // thread's copy was then discarded with its result).
    let mut copy = copy_slot.into_inner().unwrap_or_else(|p| p.into_inner());
    let shadows = shadows_slot.into_inner().unwrap_or_else(|p| p.into_inner());
    let (listed_before, excluded_copy) = match excluded_slot
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
    {
        Some(ExcludedBefore {
            listed,
            copy: Ok(mut copy),
        }) => (Some(listed), copy.take()),
        _ => (None, None),
    };
    if git_unwatched && git.is_none() {
        // `.git` went before the layer could open: the sandbox wrote whatever is there now
        // directly, unwatched.
        live.invalidate();
    }
    let (code, gate) = match ran {
        Ok(ran) => ran,
        Err(f) => {
            // envgit failed around the command: its protected paths are put back all the same,
            // and what it wrote in `.git` is imported as data.
            for copy in [copy.take(), excluded_copy].into_iter().flatten() {
                put_back_now(&copy);
                copy.discard();
            }
            crate::git_layer::finish(git);
            return Err(f);
        }
    };
    let copy = copy
        .take()
        .ok_or_else(|| Failure::failed("the sandbox ran without a protected copy".to_string()))?;
    let mut notes = notes;
    notes.extend(notes_rx.try_iter());
    let draft = StepDraft {
        kind: Some(StepKind::Run),
        started_at_ms: started,
        summary: line,
        command: Some(argv),
        cwd: Some(cwd.display().to_string()),
        exit_code: Some(code),
        policy_hash: Some(policy_hash),
        notes,
        ..Default::default()
    };
    // The gate stops beside the git layer's import; its events join the record after it,
    // ahead of what the import and the put-back refused. The gate announced its refusals as
    // they happened.
    let gate_events = move |draft: &mut StepDraft| {
        let record = requests_of(&gate.events());
        draft.requests = record.requests;
        draft.refusals.splice(0..0, record.refusals);
        draft.approvals.splice(0..0, record.approvals);
        draft.notes.extend(record.notes);
    };
    let mut sandboxed = Sandboxed {
        protected: &protected,
        copy: Some(&copy),
        shadows: shadows.as_ref(),
        git: git.as_deref(),
        before: Some(before),
        too_deep_before: &walked.too_deep,
        late: Some(Box::new(gate_events)),
        excluded: Some(crate::excluded_repos::Excluded {
            project,
            copy: excluded_copy.as_ref(),
            unchanged: None,
            roots_before: None,
        }),
    };
    if let Some(feed) = &mut feed {
        feed.refresh(&mut live);
    }
    if let (Some(ex), Some(listed)) = (&mut sandboxed.excluded, listed_before) {
        ex.roots_before = Some(listed.roots);
        if feed.as_ref().is_some_and(|f| f.unscanned_unchanged()) {
            ex.unchanged = Some(listed.repos);
        }
    }
    let committed = step.finish(
        &mut store,
        Snapshot::Live(&mut live),
        Some(sandboxed),
        draft,
    );
    crate::timings::mark("finish step (import, snapshot, commit)");
    // The git layer (its last import) and the protected copy go to the store's trash on a
    // thread while the stat index is saved (the copy's is one rename: no thread of its own);
    // a later step empties the trash. Both are over before this returns, whatever happened.
    let saved = std::thread::scope(|s| {
        let removing = s.spawn(|| {
            crate::git_layer::finish(git);
            copy.discard();
            if let Some(copy) = excluded_copy {
                copy.discard();
            }
        });
        let saved = committed.map(drop).and_then(|()| {
            drop(step);
            live.tree().save_index(&store)?;
            if let Some(feed) = &feed {
                feed.save(&store, &live)?;
            }
            CmdResult::Ok(())
        });
        crate::timings::mark("save stat index");
        if let Err(panic) = removing.join() {
            std::panic::resume_unwind(panic);
        }
        crate::timings::mark("protected copy, git layer removed");
        saved
    });
    saved?;
    let (tree, watches) = live.into_tree_and_watches();
    crate::leave_to_exit::leave_to_exit((store, tree));
    // Its last close waits ~11 ms (p50) for the kernel, and the run's cgroups can go only
    // after the sandbox's namespaces are torn down: both done by a child, not by our exit.
    envgit_sandbox::close_detached(watches);
    Ok(code)
}

/// Watches for `signals` on one thread; the first one kills the sandbox whose PID 1 is `pid`
/// (its whole pid namespace goes with it) and is kept in `ended_by`.
fn end_sandbox_on(
    pid: u32,
    ended_by: &Arc<std::sync::atomic::AtomicI32>,
    signals: &[i32],
) -> Option<crate::signal_watch::SignalWatch> {
    let ended_by = Arc::clone(ended_by);
    crate::signal_watch::SignalWatch::start(signals, "envgit-end-step", move |sig| {
        let first = ended_by.compare_exchange(
            0,
            sig,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
        );
        if first.is_ok()
            && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    })
    .ok()
}

/// Puts protected paths back from `copy` outside the usual path (an error, a signal), saying
/// what it put back.
pub(crate) fn put_back_now(copy: &ProtectedCopy) {
    match copy.put_back() {
        Ok(paths) => {
            for p in paths {
                output::warn(&format!(
                    "{p} changed during the step and was put back (protected path)"
                ));
            }
        }
        Err(e) => output::error(&format!("putting protected paths back: {e}")),
    }
}

/// The (host, rule) refusals announced in the current step: later ones are only counted.
static ANNOUNCED: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// `denied CONNECT example.com:443 (rule network.allow) — <reason>`, as printed and recorded.
fn refusal_line(e: &GateEvent) -> String {
    let rule = e.rule.as_deref().unwrap_or("gate");
    let (_, target) = event_target(e);
    match &e.reason {
        Some(reason) => format!("denied {} {target} (rule {rule}) — {reason}", e.method),
        None => format!("denied {} {target} (rule {rule})", e.method),
    }
}

/// `CONNECT example.com:443`, with ` — <reason and fix>` when the gate gave one.
fn refusal_what(e: &GateEvent) -> String {
    let (_, target) = event_target(e);
    match &e.reason {
        Some(reason) => format!("{} {target} — {reason}", e.method),
        None => format!("{} {target}", e.method),
    }
}

/// The step ended: repeated refusals of one host under one rule get a count line, and the
/// next step announces afresh.
fn count_repeats(events: &[GateEvent]) {
    let mut seen: Vec<((&str, &str), &GateEvent, u64, bool)> = Vec::new();
    for e in events {
        let Some(rule) = e.rule.as_deref() else {
            continue;
        };
        if e.decision == Decision::Allowed {
            continue;
        }
        match seen
            .iter_mut()
            .find(|(key, ..)| *key == (e.host.as_str(), rule))
        {
            Some((_, first, n, varied)) => {
                *n += e.unlisted.max(1);
                *varied |= event_target(first).1 != event_target(e).1 || first.method != e.method;
            }
            None => seen.push(((e.host.as_str(), rule), e, e.unlisted.max(1), false)),
        }
    }
    for ((host, rule), first, n, varied) in seen {
        if n < 2 {
            continue;
        }
        let (_, target) = event_target(first);
        let what = if varied {
            format!("{} {target} and other requests to {host}", first.method)
        } else {
            format!("{} {target}", first.method)
        };
        output::error(&format!("denied {what} (rule {rule}) ({n} times)"));
    }
    ANNOUNCED.lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// The gate's events as step records: every request listed, the refused ones as refusals, and
/// each count of requests past the listed ones as a note (and a refusal when refused). Prints
/// the count of repeated refusals (the step has ended).
pub(crate) fn requests_of(events: &[GateEvent]) -> GateRecord {
    count_repeats(events);
    let mut requests = Vec::new();
    let mut refusals = Vec::new();
    let mut approvals = Vec::new();
    let mut notes = Vec::new();
    for e in events {
        let (host, target) = event_target(e);
        if e.unlisted > 0 {
            let what = unlisted_line(e, &host);
            if e.decision != Decision::Allowed {
                refusals.push(Refusal {
                    what: what.clone(),
                    rule: e.rule.clone().unwrap_or_else(|| "gate".into()),
                });
            }
            notes.push(what);
            continue;
        }
        if let Some(a) = &e.approval {
            approvals.push(Approval {
                what: format!("{} {target}: {}", e.method, a.summary),
                rule: e.rule.clone().unwrap_or_default(),
                approver: a.by.clone(),
                answer: match a.answer {
                    envgit_gate::ApprovalAnswer::Approved => ApprovalAnswer::Approved,
                    envgit_gate::ApprovalAnswer::Refused => ApprovalAnswer::Refused,
                },
                at_ms: a.at_ms,
            });
        }
        if e.decision != Decision::Allowed {
            refusals.push(Refusal {
                what: refusal_what(e),
                rule: e.rule.clone().unwrap_or_else(|| "gate".into()),
            });
        }
        requests.push(Request {
            method: e.method.clone(),
            host,
            path: e.path.clone(),
            status: e.status,
            bytes_out: e.bytes_out,
            bytes_in: e.bytes_in,
            decision: match (&e.approval, e.uninspected, e.decision) {
                (Some(a), ..) => match a.answer {
                    envgit_gate::ApprovalAnswer::Approved => RequestOutcome::Approved,
                    envgit_gate::ApprovalAnswer::Refused => RequestOutcome::Refused,
                },
                (None, true, Decision::Allowed) => RequestOutcome::Uninspected,
                (None, _, Decision::Allowed) => RequestOutcome::Allowed,
                (None, _, Decision::Denied) => RequestOutcome::Denied,
            },
            rule: e.rule.clone(),
            irreversible: e.irreversible,
        });
    }
    GateRecord {
        requests,
        refusals,
        approvals,
        notes,
    }
}

/// What a step's gate events become in its record: the requests listed one by one, the
/// refusals and approvals among them, and a note for each count of requests past the listed
/// ones.
pub(crate) struct GateRecord {
    pub(crate) requests: Vec<Request>,
    pub(crate) refusals: Vec<Refusal>,
    pub(crate) approvals: Vec<Approval>,
    pub(crate) notes: Vec<String>,
}

/// `2000 more request(s) to example.com, allowed, past the 10000 listed one by one (… bytes
/// out, … in)`.
fn unlisted_line(e: &GateEvent, host: &str) -> String {
    let outcome = match (e.decision, &e.rule) {
        (Decision::Allowed, _) => "allowed".to_owned(),
        (Decision::Denied, Some(rule)) => format!("denied (rule {rule})"),
        (Decision::Denied, None) => "denied".to_owned(),
    };
    let host = if host == "*" { "other hosts" } else { host };
    format!(
        "{} more request(s) to {host}, {outcome}, past the {} listed one by one \
         ({} bytes out, {} in){}",
        e.unlisted,
        envgit_gate::LISTED_MAX,
        e.bytes_out,
        e.bytes_in,
        if e.irreversible {
            "; irreversible ones among them"
        } else {
            ""
        }
    )
}

/// `(host, what)`: CONNECT names host:port; a request names host (with a non-default port)
/// and path.
fn event_target(e: &GateEvent) -> (String, String) {
    let default_port = e.port == 80 || e.port == 443 || e.port == 0;
    let host = if e.method == "CONNECT" || !default_port {
        format!("{}:{}", e.host, e.port)
    } else {
        e.host.clone()
    };
    let what = format!("{host}{}", e.path);
    (host, what)
}

/// Request timeouts of the usual clients, raised past the time an `ask` may hold a request so
/// the client is still waiting when the answer comes.
fn client_timeouts(ask_timeout: u64) -> Vec<(String, String)> {
    let secs = ask_timeout + 30;
    vec![
        ("PIP_DEFAULT_TIMEOUT".into(), secs.to_string()),
        ("UV_HTTP_TIMEOUT".into(), secs.to_string()),
        ("CARGO_HTTP_TIMEOUT".into(), secs.to_string()),
        ("npm_config_fetch_timeout".into(), (secs * 1000).to_string()),
    ]
}

/// Proxy variables for clients that honour them (both spellings).
fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        env.push((name.to_string(), url.clone()));
        env.push((name.to_lowercase(), url.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_string(), "localhost,127.0.0.1,::1".to_string()));
    }
    env
}

const PROXY_PORT: u16 = 3128;

/// envgit's own binary, mounted at `/run/envgit/envgit` inside.
fn own_binary() -> CmdResult<PathBuf> {
    std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find envgit's own binary: {e}")))
}

/// What a caller adds to a sandboxed run besides the command: an agent session needs a socket
/// for its hooks, its own variables, and credentials the gate puts on its model requests.
#[derive(Default)]
pub(crate) struct RunExtras<'scope> {
    /// Files (or sockets) bound under `/run/envgit/NAME` inside.
    pub run_files: Vec<(String, PathBuf)>,
    /// Variables set inside (after the policy's).
    pub env: Vec<(String, String)>,
    /// Paths outside the project made read-only inside (those that exist).
    pub read_only: Vec<PathBuf>,
    /// `(host file, path inside)`: the file bound read-only over an existing path (a
    /// placeholder credentials file over a masked real one).
    pub file_overrides: Vec<(PathBuf, PathBuf)>,
    pub credentials: Vec<Credential>,
    /// Gets a tap on the gate's events once it runs, before the command starts.
    pub tap: Option<std::sync::mpsc::Sender<EventTap>>,
    /// Gets what the step's record should say about its run: the limits ("memory not
    /// limited", …), who the command ran as, which git credentials were hidden.
    pub step_notes: Option<std::sync::mpsc::Sender<String>>,
    /// The run's layer over `.git`, mounted as an overlay inside.
    pub git: Option<Arc<envgit_store::GitLayer>>,
    /// The project's secrets and hard-linked files, from a scan just made; else from the stat
    /// cache (`project_facts`).
    pub facts: Option<Facts>,
    /// Called just before the command starts, after the whole set-up: `envgit run` waits there
    /// for its protected copy to be on disk (its sync ran beside the set-up) and marks its step
    /// as begun.
    pub before_start: Option<Box<dyn FnOnce() -> CmdResult<()> + 'scope>>,
    /// The step's directory and who its command runs as, when the caller decided them early
    /// (`run_step`, for the zygote's early start); else they are decided here.
    pub early: Option<EarlyRun>,
    /// The process ends with this run (`envgit run`): its cgroups are removed by the child
    /// that ends it (`close_detached`), not waited for here.
    pub cgroups_after_exit: bool,
    /// Gets the sandbox's first process and homes once it is spawned: a session adds mounts
    /// to the running sandbox through it (`envgit_sandbox::cover`).
    pub sandbox: Option<Arc<std::sync::OnceLock<SandboxStarted>>>,
}

/// A session's sandbox, once spawned.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct SandboxStarted {
    /// Its first process (envgit's child until envgit waits for it).
    pub pid: u32,
    /// Where its plan found the secrets outside the project it masked: looked at again
    /// before each call.
    pub secrets: envgit_sandbox::host_secrets::HostSecrets,
    /// What its plan masked, each with the `(dev, ino)` found there before the sandbox
    /// mounted over it.
    pub masked: Vec<(PathBuf, (u64, u64))>,
}

/// The git layer and the protected list, taken beside the scan, until the step owns them: a
/// step that fails before that (the scan, the outside edits' record) finishes the layer.
struct EarlyLayer(Option<(Option<Arc<envgit_store::GitLayer>>, Vec<String>)>);

impl EarlyLayer {
    fn parts(mut self) -> Option<(Option<Arc<envgit_store::GitLayer>>, Vec<String>)> {
        self.0.take()
    }
}

impl Drop for EarlyLayer {
    fn drop(&mut self) {
        if let Some((git, _)) = self.0.take() {
            crate::git_layer::finish(git);
        }
    }
}

/// The protected copy, taken beside the run's set-up, until the step owns it: dropped before
/// (a set-up that failed: nothing ran) it is discarded, since left behind the next command
/// would take it for an interrupted step's and put the paths back.
struct EarlyCopy(Option<ProtectedCopy>);

impl EarlyCopy {
    fn take(&mut self) -> Option<ProtectedCopy> {
        self.0.take()
    }
}

impl Drop for EarlyCopy {
    fn drop(&mut self) {
        if let Some(copy) = self.0.take() {
            copy.discard();
        }
    }
}

/// The listing before the step of the repositories in excluded directories, and the copy of
/// their code (none when it found none).
struct ExcludedBefore {
    listed: crate::excluded_repos::ListedBefore,
    copy: CmdResult<EarlyCopy>,
}

/// What `run_step` decides before the store opens, for the zygote's early start.
pub(crate) struct EarlyRun {
    step_dir: StepDir,
    run_as: RunAs,
    /// The early base's system directories: the plan's too.
    system: Vec<PathBuf>,
    /// The CA and trust files, which the early base mounts.
    trust: crate::step_ca::StepTrust,
}

/// The project's secrets to mask and files hard-linked outside it, for the sandbox's plan.
pub(crate) enum Facts {
    Known(envgit_sandbox::plan::ProjectFacts),
    /// Being gathered on a thread of the caller's, which sends them.
    Pending(std::sync::mpsc::Receiver<CmdResult<envgit_sandbox::plan::ProjectFacts>>),
}

/// Runs `argv` in the sandbox behind a gate of its own; `state` is the project's store
/// directory (the home overlay and staging live there). Returns the exit code and the gate's
/// stop, which gives the events not taken through a tap once it is over.
pub(crate) fn run_sandboxed(
    project: &Project,
    state: &Path,
    cwd: &Path,
    argv: &[String],
    protected: &[String],
    upstreams: &Upstreams,
    extras: RunExtras<'_>,
) -> CmdResult<(i32, GateStop)> {
    // The last step's cgroups, if a long-lived session ran one, are gone first.
    envgit_sandbox::limits::finish_removals();
    // The run's cgroups, made at envgit's start for `envgit run`, else now: the sandbox
    // process-to-be (the zygote) is moved into the v2 ones on a thread while the rest of the
    // run is set up, since moving a whole process waits for a kernel grace period
    // (`move_into_cgroups`); it joins v1 ones itself, one thread, at no cost.
    let limits = envgit_sandbox::limits::take_early().unwrap_or_else(|| {
        let limits =
            envgit_sandbox::limits::prepare(&format!("envgit-{}-{}", std::process::id(), now_ms()));
        envgit_sandbox::move_into_cgroups(&limits.cgroups);
        limits
    });
    let mut unused_limits = UnusedLimits(Some(&limits));
    // The walk of /etc for what only root may read is the plan's largest cost: it runs on
    // its own thread, begun in `main` for `envgit run`, while the rest of the run is set up.
    let etc_private = envgit_sandbox::etc_walk::take_or_start();
    let uid = rustix::process::getuid().as_raw();
    let envgit_home = envgit_store::envgit_home()?;
    // Who the command runs as (the project's owner when envgit runs as root on a project
    // another user owns), its home and the home's overlay. The gate's sockets and the trust
    // files live in a private directory the sandbox never sees, on tmpfs where there is one
    // (see `step_dirs`).
    let (run_as, step_dir, system, trust) = match extras.early {
        Some(EarlyRun {
            step_dir,
            run_as,
            system,
            trust,
        }) => (run_as, step_dir, Some(system), Some(trust)),
        None => (
            RunAs::decide(&project.root, state, homes(uid))?,
            StepDir::make(uid)?,
            None,
            None,
        ),
    };
    crate::timings::mark("run as");
    let gate_dir = step_dir.path();
    let step_dirs = step_dir.base();
    let staging = step_dir.staging();
    let token = random_token()?;
    let socket_path = gate_dir.join(GATE_SOCKET);
    // The command gets a pty of its own when envgit runs on a terminal: it never
    // holds the real one, and envgit can ask the person there.
    let mut pty = PtyRelay::open_if_terminal();
    crate::timings::mark("gate dir, staging, token");
    // One CA and trust bundle per project and day, kept beside the steps' directories.
    let crate::step_ca::StepTrust { ca, files: trust } = match trust {
        Some(early) => early,
        None => crate::step_ca::for_project(step_dirs, &project.root)?,
    };
    crate::timings::mark("CA and trust bundle");
    // Tokens in git's configuration stay outside: placeholders inside, swapped at the gate.
    let hidden = crate::git_layer::hide_credentials(
        extras.git.as_deref(),
        run_as.homes.first().map(PathBuf::as_path),
        gate_dir,
    )?;
    let mut credentials = extras.credentials;
    credentials.extend(hidden.credentials);
    crate::timings::mark("hide git credentials");
    if let Some(tx) = &extras.step_notes {
        for n in &hidden.notes {
            let _ = tx.send(n.clone());
        }
    }
    let gate = Gate::start(GateConfig {
        socket_path: socket_path.clone(),
        token: token.clone(),
        policy: Arc::new(project.policy.clone()),
        announce: Some(Box::new(|e: &GateEvent| {
            // Once per host and rule per step, at once; the repeats are counted when the
            // step's events become its records (`requests_of`).
            let rule = e.rule.as_deref().unwrap_or("gate");
            let first = ANNOUNCED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((e.host.clone(), rule.to_owned()));
            if first {
                output::error(&refusal_line(e));
            }
        })),
        ca,
        resolve: upstreams.resolve.clone(),
        upstream_ca_pem: upstreams.extra_ca_pem.clone(),
        approvals: crate::approvers::approval_config(
            project,
            gate_dir,
            pty.as_ref()
                .filter(|p| project.policy.approvers.terminal && p.can_ask()),
        )?,
        credentials,
        reserved_ports: Some(crate::ui::port_registry::dir()?),
    })
    .map_err(|e| Failure::failed(format!("cannot start the gate: {e}")))?;
    crate::timings::mark("gate start");
    if let Some(tap) = &extras.tap {
        let _ = tap.send(gate.tap());
    }
    let relay = RelaySpec {
        gate_socket: socket_path,
        token,
        proxy_port: PROXY_PORT,
        dns_port: 53,
        capture_ports: vec![80, 443],
        forwards: envgit_policy::loopback_forwards(&project.policy),
        allow_names: project.policy.network.allow.clone(),
    };
    let exe = own_binary()?;
    let facts = match extras.facts {
        Some(Facts::Pending(gathering)) => gathering.recv().map_err(|_| {
            Failure::failed("the thread gathering the project's facts ended without them")
        })??,
        Some(Facts::Known(facts)) => facts,
        None => crate::project_facts::from_cache(project, &envgit_store::Store::open(state)?)?,
    };
    crate::timings::mark("project facts joined");
    let etc_private = etc_private.and_then(|walk| walk.join().ok());
    crate::timings::mark("etc walk joined");
    if envgit_sandbox::etc_walk::taken_from_cache() {
        crate::timings::note("the walk of /etc taken from its cache");
    }
    let (spec, secrets) = plan_keeping_secrets(PlanInput {
        system,
        policy: &project.policy,
        project: &project.root,
        cwd: cwd.to_path_buf(),
        argv: argv.to_vec(),
        homes: run_as.homes.clone(),
        uid: run_as.uid,
        gid: run_as.gid,
        state_dirs: std::iter::once(envgit_home.canonicalize().unwrap_or(envgit_home))
            .chain([step_dirs.to_path_buf()])
            .collect(),
        staging: staging.clone(),
        home_overlay: run_as.home_overlay.clone(),
        caller_env: {
            let env: Vec<(String, String)> = std::env::vars().collect();
            for (name, why) in envgit_sandbox::registry_env::split(&env).1 {
                crate::output::note(&format!(
                    "envgit: {name} is not passed into the sandbox: {why}; \
                     set it without the credential (a token file the registry client reads) to use that registry"
                ));
            }
            env
        },
        extra_env: {
            let mut env = proxy_env(PROXY_PORT);
            env.extend(run_as.env.iter().cloned());
            if project.policy.approvers.socket {
                env.extend(client_timeouts(project.policy.approvers.timeout));
            }
            env.extend(extras.env);
            env
        },
        relay: Some(relay),
        trust: Some(trust),
        envgit_exe: Some(exe.clone()),
        protected: protected.to_vec(),
        more_masks: hidden.credential_stores.clone(),
        facts,
        etc_private,
    });
    let mut spec = spec;
    // Only a session asks (`extras.sandbox`): a step's sandbox is gone before anyone looks.
    // Each inode is taken before the sandbox mounts over the path: one replaced between the
    // two is looked at again at the next call.
    let masked: Vec<(PathBuf, (u64, u64))> = match &extras.sandbox {
        Some(_) => spec
            .masks
            .iter()
            .filter_map(|p| crate::project_facts::inode(p).map(|i| (p.clone(), i)))
            .collect(),
        None => Vec::new(),
    };
    crate::timings::mark("plan");
    spec.cgroups = limits.cgroups.clone();
    if let Some(tx) = &extras.step_notes {
        for n in &limits.notes {
            let _ = tx.send(n.clone());
        }
    }
    spec.nproc = limits.pids_max;
    crate::timings::mark("limits");
    spec.run_files.extend(extras.run_files);
    spec.read_only.extend(extras.read_only);
    spec.file_overrides.extend(extras.file_overrides);
    spec.file_overrides.extend(hidden.file_overrides);
    spec.git = extras.git.as_deref().map(crate::git_layer::overlay);
    if let Some(pty) = &pty {
        spec.terminal_stdio = pty.stdio();
    }
    run_as.fit(&mut spec, step_dirs)?;
    if let Some(tx) = &extras.step_notes {
        let home = run_as.home_claim.as_ref().and_then(HomeClaim::note);
        for note in run_as.note.iter().cloned().chain(home) {
            let _ = tx.send(note);
        }
    }
    if let Some(wait) = extras.before_start {
        wait()?;
    }
    crate::timings::mark("protected copy on disk");
    let outcome = {
        let _signals = SignalGuard::ignore_terminal_signals();
        let mut child = envgit_sandbox::spawn_on(&exe, &spec, pty.is_some())
            .map_err(|e| Failure::failed(format!("cannot start the sandbox: {e}")))?;
        unused_limits.0 = None;
        if let Some(slot) = &extras.sandbox {
            let _ = slot.set(SandboxStarted {
                pid: child.id(),
                secrets,
                masked,
            });
        }
        crate::timings::mark("spawn");
        // The directories earlier runs were done with, removed while this one's sandbox runs
        // and envgit's own thread only waits.
        envgit_store::empty_trash_in_background(state);
        // SIGTERM or SIGHUP to envgit (a `kill`, a closed terminal) ends the sandbox first,
        // then the step ends as any other: its protected paths put back, its record written.
        let ended_by = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let _term_watches = end_sandbox_on(
            child.id(),
            &ended_by,
            &[signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP],
        );
        // The sandbox makes the command's pty on its own devpts and hands over the master;
        // none comes when its set-up failed (then `wait` says why).
        if let Some(pty) = &mut pty
            && let Some(master) = child
                .take_terminal()
                .map_err(|e| Failure::failed(format!("cannot set up the terminal: {e}")))?
        {
            pty.start(master, gate_dir.join(CONTROL_SOCKET))
                .and_then(|()| child.start_command())
                .map_err(|e| Failure::failed(format!("cannot set up the terminal: {e}")))?;
        }
        let outcome = child.wait();
        crate::timings::mark("sandbox ran");
        let signalled = ended_by.load(std::sync::atomic::Ordering::SeqCst);
        let outcome = match outcome {
            Ok(Outcome::Exited(_)) if signalled != 0 => Ok(Outcome::Exited(128 + signalled)),
            other => other,
        };
        if let Some(pty) = &pty {
            pty.finish();
        }
        outcome
    };
    // Disarmed once the sandbox started: the limits are the sandbox's now.
    drop(unused_limits);
    if extras.cgroups_after_exit {
        limits.remove_after_exit();
    } else {
        limits.remove_when_empty();
    }
    crate::timings::mark("limits removed");
    let gate = GateStop::start(gate, step_dir);
    match outcome {
        Ok(Outcome::Exited(code)) => Ok((code, gate)),
        Ok(Outcome::SetupFailed(msg)) => Err(Failure {
            code: EXIT_ENVGIT_FAILED as u8,
            message: format!("sandbox: {msg}"),
        }),
        Err(e) => Err(Failure {
            code: EXIT_ENVGIT_FAILED as u8,
            message: format!("sandbox: {e}"),
        }),
    }
}

/// A run's gate being stopped on a thread of its own (its runtime's threads joined: 0.2–0.3 ms),
/// then its step directory removed, while the caller goes on with the step's end (the git
/// layer's import). [`GateStop::events`] waits for it; a drop waits too. A gate the step never
/// connected to has no runtime, and is stopped at once.
pub(crate) enum GateStop {
    Stopping(Option<std::thread::JoinHandle<Vec<GateEvent>>>),
    /// No thread could start: stopped here.
    Stopped(Vec<GateEvent>),
}

impl GateStop {
    fn start(gate: Gate, step_dir: StepDir) -> Self {
        let stop = |gate: Gate, step_dir: StepDir| {
            let events = gate.stop();
            drop(step_dir);
            events
        };
        // A gate nobody connected to has no runtime to join: it stops here, at once.
        if !gate.is_serving() {
            return GateStop::Stopped(stop(gate, step_dir));
        }
        // Taken by the thread, or here when none starts.
        let slot = Arc::new(std::sync::Mutex::new(Some((gate, step_dir))));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("envgit-gate-stop".into())
            .spawn(move || {
                let taken = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
                taken.map(|(g, d)| stop(g, d)).unwrap_or_default()
            });
        match spawned {
            Ok(handle) => GateStop::Stopping(Some(handle)),
            Err(_) => {
                let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                GateStop::Stopped(taken.map(|(g, d)| stop(g, d)).unwrap_or_default())
            }
        }
    }

    /// Every event the gate recorded and nobody took through a tap, once it has stopped.
    pub(crate) fn events(mut self) -> Vec<GateEvent> {
        let events = self.take();
        crate::timings::mark("gate stopped");
        events
    }

    fn take(&mut self) -> Vec<GateEvent> {
        match self {
            GateStop::Stopping(handle) => match handle.take().map(std::thread::JoinHandle::join) {
                Some(Ok(events)) => events,
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => Vec::new(),
            },
            GateStop::Stopped(events) => std::mem::take(events),
        }
    }
}

impl Drop for GateStop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.take();
        }
    }
}

/// The run's cgroups while the step may still fail before its sandbox starts: on such a
/// failure the zygote moved into them is ended and they are removed, never left behind.
struct UnusedLimits<'a>(Option<&'a envgit_sandbox::limits::RunLimits>);

impl Drop for UnusedLimits<'_> {
    fn drop(&mut self) {
        if let Some(limits) = self.0 {
            envgit_sandbox::discard_zygote();
            limits.remove();
        }
    }
}
