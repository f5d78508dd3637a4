//! G6: rewind of a 10-file step on the big tree. Every rewind goes to the step before the
//! head: consecutive steps differ by one 10-file edit, and a rewind's own step does too, so
//! each one writes back 10 files.
//!
//! Three ways: the one-shot CLI (a new process: open the store, load the stat cache, full
//! scan, restore, save the cache), `envgit_store::rewind` in-process with a warm `WorkTree`
//! (it still begins with a full scan, the safety snapshot), and the same operation composed
//! from a `LiveTree` and `envgit_store::restore`, to show what a watcher-aware rewind costs.

use anyhow::{Result, bail};
use std::path::Path;

use envgit_store::{
    LiveTree, RestoreOptions, RewindOptions, StepKind, Store, WorkTree, restore, rewind_apply,
    rewind_start,
};

use super::steps::Session;
use super::{Envgit, cli_phases, draft, walk};
use crate::report::{Goal, Report, Row};
use crate::util::{Samples, ms_since, progress, timed};

fn target(store: &mut Store) -> Result<u64> {
    store.catch_up()?;
    match store.head() {
        Some(h) if h.number >= 2 => Ok(h.number - 1),
        _ => bail!("no step to rewind to"),
    }
}

/// The step `envgit rewind` goes back to: the one before the head.
pub(super) fn target_of(store: &mut Store) -> Result<u64> {
    target(store)
}

pub fn measure(
    envgit: &Envgit,
    s: &mut Session,
    reps: usize,
    scratch: &Path,
    report: &mut Report,
) -> Result<()> {
    let goal = Goal::AtMost(50.0);

    progress(&format!(
        "rewind: {reps} × `envgit rewind` (CLI), alternating with bare walks"
    ));
    let (mut cli, mut cli_cpu, mut walks) =
        (Samples::default(), Samples::default(), Samples::default());
    for _ in 0..reps {
        walk::sample(&s.root, &mut walks)?;
        let t = target(&mut s.store)?;
        let r = envgit.run(&s.root, &["rewind", &t.to_string()])?;
        cli.push(r.ms);
        cli_cpu.push(r.cpu_ms);
    }
    let phases = cli_phases(&s.root, &s.store_dir, scratch, 3)?;
    report.push(
        Row::ms("rewind 10-file step: CLI one-shot, p50", cli.p50())
            .anchor("bare lstat walk of the tree, one thread", walks.p50())
            .goal(Goal::AnchorTimes(1.2))
            .note(format!(
                "{}; CPU p50 {:.0} ms; walks beside these {}; the ≤ 50 ms goal needs a \
                 watcher (`envgit watch`, and below); {phases}",
                cli.summary_ms(),
                cli_cpu.p50(),
                walks.summary_ms()
            )),
    );

    progress(&format!(
        "rewind: {reps} × envgit_store::rewind in-process (warm WorkTree)"
    ));
    let mut inproc = Samples::default();
    let mut written = Samples::default();
    // One untimed: the CLI rewinds changed files this WorkTree has not seen.
    for i in 0..=reps {
        let t = target(&mut s.store)?;
        let o = RewindOptions {
            target: t,
            protected: &s.cfg.protected,
            excludes: &s.cfg.scan.excludes,
            policy_hash: Some(s.cfg.policy_hash.clone()),
            known_changes: None,
        };
        let (written_now, ms) = timed(|| rewind(&mut s.store, &mut s.wt, &o))?;
        if i > 0 {
            inproc.push(ms);
            written.push(written_now as f64);
        }
    }
    let ((_, scan), scan_ms) = timed(|| Ok(s.wt.full_scan(&s.store, None)?))?;
    report.push(
        Row::ms(
            "rewind 10-file step: rewind() in-process, p50",
            inproc.p50(),
        )
        .goal(goal)
        .note(format!(
            "{}; files written p50 {:.0}; a bare full scan of the same warm WorkTree takes \
                 {scan_ms:.0} ms ({} re-read): rewind() always starts with one",
            inproc.summary_ms(),
            written.p50(),
            scan.hashed
        )),
    );

    progress(&format!(
        "rewind: {reps} × LiveTree + restore (composed, not an API)"
    ));
    let mut live = LiveTree::new(&s.root, s.cfg.scan.clone(), Some(&s.store_dir))?;
    live.tree_mut().load_index(&s.store);
    live.snapshot(&s.store)?;
    let ropts = RestoreOptions {
        excludes: &s.cfg.scan.excludes,
        protected: &s.cfg.protected,
        clone_from: None,
    };
    let (mut total, mut safety, mut write, mut after) = (
        Samples::default(),
        Samples::default(),
        Samples::default(),
        Samples::default(),
    );
    for i in 0..=reps {
        let tgt_num = target(&mut s.store)?;
        let tgt = s.store.step_tree(tgt_num)?;
        let t0 = std::time::Instant::now();
        let mut guard = s.store.begin_step("rewind")?;
        // The safety snapshot: the current state, committed only if it differs from the head.
        let (current, _, _) = live.snapshot(&s.store)?;
        if s.store.head().and_then(|h| h.tree) != Some(current) {
            let d = draft(StepKind::Record, "state before rewind", &s.cfg);
            s.store.commit(&mut guard, d, current)?;
        }
        let t1 = ms_since(t0);
        let rep = restore(
            &s.store,
            live.tree().root_fd(),
            Some(&current),
            &tgt,
            &ropts,
        )?;
        let t2 = ms_since(t0);
        live.mark_dirty(rep.touched_dirs);
        let (tree, _, _) = live.snapshot(&s.store)?;
        let mut d = draft(StepKind::Rewind, "rewind", &s.cfg);
        d.target = Some(tgt_num);
        s.store.commit(&mut guard, d, tree)?;
        drop(guard);
        let t3 = ms_since(t0);
        if i > 0 {
            total.push(t3);
            safety.push(t1);
            write.push(t2 - t1);
            after.push(t3 - t2);
        }
    }
    drop(live);
    report.push(
        Row::ms("rewind 10-file step: LiveTree + restore, p50", total.p50())
            .goal(goal)
            .note(format!(
                "composed in the benchmark from public API (what a supervisor holding a LiveTree \
                 could do; envgit_store::rewind takes a WorkTree and always full-scans): safety \
                 snapshot p50 {:.1} ms, restore {:.1} ms, snapshot + commit {:.1} ms; {}",
                safety.p50(),
                write.p50(),
                after.p50(),
                total.summary_ms()
            )),
    );
    // Leave the on-disk stat cache current for the phases after this one.
    s.wt.full_scan(&s.store, None)?;
    s.wt.save_index(&s.store)?;
    Ok(())
}

/// A whole rewind in-process, as `envgit rewind` takes it (its steps begun and committed
/// around the store's file work); returns how many files it wrote.
fn rewind(store: &mut Store, wt: &mut WorkTree, o: &RewindOptions<'_>) -> Result<u64> {
    let mut g = store.begin_step("rewind")?;
    let start = rewind_start(store, wt, &g, o)?;
    if let Some(d) = start.record_first.clone() {
        store.commit(&mut g, d, start.current)?;
    }
    let done = rewind_apply(store, wt, start, o)?;
    store.commit(&mut g, done.draft, done.tree)?;
    Ok(done.restore.written)
}
