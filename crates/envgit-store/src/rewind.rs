//! `rewind N`: record the current state if it changed since the last step, make the working
//! tree match step N (writing only what differs), and commit that as a step of its own, so a
//! rewind can itself be rewound.

use crate::error::{Result, StoreError};
use crate::exclude::Excludes;
use crate::restore::{self, RestoreOptions, RestoreReport};
use crate::setid::{Cleared, clear_setid};
use crate::step::{Request, Step, StepDraft, StepKind, now_ms};
use crate::store::Store;
use crate::worktree::WorkTree;

pub struct RewindOptions<'a> {
    pub target: u64,
    /// Paths kept as they are now (the policy and config that runs code); empty with
    /// `--restore-policy`.
    pub protected: &'a [String],
    pub excludes: &'a Excludes,
    pub policy_hash: Option<String>,
}

#[derive(Debug)]
pub struct RewindOutcome {
    /// The step that recorded the state before the rewind, if it had changed.
    pub recorded_first: Option<Step>,
    pub step: Step,
    /// Steps numbered above the target when the rewind began.
    pub undone: u64,
    /// Irreversible requests of the steps stepped over: a rewind cannot undo them.
    pub marks: Vec<(u64, Request)>,
    pub restore: RestoreReport,
    /// Files that had the setuid or setgid bit, cleared (or that failed to be): no snapshot
    /// holds one, so the tree rewound to has none (protected paths are left as they are).
    pub setid: Cleared,
}

pub fn rewind(
    store: &mut Store,
    wt: &mut WorkTree,
    opts: &RewindOptions<'_>,
) -> Result<RewindOutcome> {
    let target_tree = store.step_tree(opts.target)?;
    let started = now_ms();
    let mut guard = store.begin_step(&format!("rewind to step {}", opts.target))?;
    let others = store.steps_in_flight(Some(&guard))?;
    if !others.is_empty() {
        return Err(StoreError::InFlight(others.join(", ")));
    }
    let (current, scan) = wt.full_scan(store, None)?;
    let mut recorded_first = None;
    if store.head().and_then(|h| h.tree) != Some(current) {
        let draft = StepDraft {
            kind: Some(StepKind::Record),
            started_at_ms: started,
            summary: format!("state before rewind to step {}", opts.target),
            policy_hash: opts.policy_hash.clone(),
            ..Default::default()
        };
        recorded_first = Some(store.commit(&mut guard, draft, current)?);
    }
    let head = store.head().map(|h| h.number).unwrap_or(0);
    let undone = head.saturating_sub(opts.target);
    let marks = store
        .steps()
        .iter()
        .filter(|s| s.number > opts.target)
        .flat_map(|s| s.marks().map(move |r| (s.number, r.clone())))
        .collect();
    // From here on the working tree changes: a rewind that dies or fails before its commit is
    // recorded as interrupted by the next command.
    guard.keep_if_uncommitted();
    let restore_opts = RestoreOptions {
        excludes: opts.excludes,
        protected: opts.protected,
    };
    let setid: Vec<_> = scan
        .setid
        .into_iter()
        .filter(|f| !is_protected(opts.protected, &f.rel))
        .collect();
    let setid = clear_setid(wt.root_fd(), &setid);
    let report = restore::restore(
        store,
        wt.root_fd(),
        Some(&current),
        &target_tree,
        &restore_opts,
    )?;
    let (after, _) = wt.rescan(store, &report.touched_dirs)?;
    let draft = StepDraft {
        kind: Some(StepKind::Rewind),
        started_at_ms: started,
        summary: format!("rewind to step {}", opts.target),
        policy_hash: opts.policy_hash.clone(),
        target: Some(opts.target),
        ..Default::default()
    };
    let step = store.commit(&mut guard, draft, after)?;
    Ok(RewindOutcome {
        recorded_first,
        step,
        undone,
        marks,
        restore: report,
        setid,
    })
}

/// `rel` is a protected path or lies below one.
fn is_protected(protected: &[String], rel: &[u8]) -> bool {
    protected.iter().any(|p| {
        let p = p.as_bytes();
        rel == p || (rel.len() > p.len() && rel.starts_with(p) && rel[p.len()] == b'/')
    })
}
