//! `rewind N`: record the current state if it changed since the last step, make the working
//! tree match step N (writing only what differs), and commit that as a step of its own, so a
//! rewind can itself be rewound. The file work is here; the steps are begun and committed by
//! the caller's step lifecycle ([`rewind_start`], then [`rewind_apply`]).

use crate::error::{Result, StoreError};
use crate::exclude::Excludes;
use crate::id::ObjectId;
use crate::lock::StepGuard;
use crate::restore::{self, RestoreOptions, RestoreReport};
use crate::setid::{Cleared, clear_setid};
use crate::step::{Request, StepDraft, StepKind, now_ms};
use crate::store::Store;
use crate::worktree::WorkTree;

pub struct RewindOptions<'a> {
    pub target: u64,
    /// Paths kept as they are now (the policy and config that runs code); empty with
    /// `--restore-policy`.
    pub protected: &'a [String],
    pub excludes: &'a Excludes,
    pub policy_hash: Option<String>,
    /// What changed since the stat index the working tree was loaded from, from the watching
    /// daemon (`ChangeLog`): read instead of scanning the whole project. `None`: scan.
    pub known_changes: Option<Vec<crate::ChangeNote>>,
}

/// A rewind, begun: what it found before touching the working tree. Nothing is written yet.
pub struct RewindStart {
    /// The working tree as it is now.
    pub current: ObjectId,
    /// The current state differs from the newest step: the caller records it first, as a
    /// step of this draft with the tree `current`, so the rewind can itself be undone.
    pub record_first: Option<StepDraft>,
    /// Steps numbered above the target (counting the record-first step).
    pub undone: u64,
    /// Irreversible requests of the steps stepped over: a rewind cannot undo them.
    pub marks: Vec<(u64, Request)>,
    target_tree: ObjectId,
    started: u64,
    setid: Vec<crate::setid::SetidFile>,
}

/// What a rewind did to the working tree, and the step that records it (the caller commits
/// `draft` with `tree`).
pub struct RewindDone {
    pub draft: StepDraft,
    pub tree: ObjectId,
    pub restore: RestoreReport,
    /// Files that had the setuid or setgid bit, cleared (or that failed to be): no snapshot
    /// holds one, so the tree rewound to has none (protected paths are left as they are).
    pub setid: Cleared,
}

/// Begins `rewind N` under the caller's step (`guard`): refuses while another step of the
/// project is in flight, scans the working tree, and says whether its state must be recorded
/// first. The step lifecycle (begin, commit) is the caller's.
pub fn rewind_start(
    store: &Store,
    wt: &mut WorkTree,
    guard: &StepGuard,
    opts: &RewindOptions<'_>,
) -> Result<RewindStart> {
    let target_tree = store.step_tree(opts.target)?;
    let started = now_ms();
    let others = store.steps_in_flight(Some(guard))?;
    if !others.is_empty() {
        return Err(StoreError::InFlight(others.join(", ")));
    }
    let (current, scan) = match &opts.known_changes {
        Some(changes) => wt.catch_up(store, changes.clone())?,
        None => wt.full_scan(store, None)?,
    };
    let record_first = (store.head().and_then(|h| h.tree) != Some(current)).then(|| StepDraft {
        kind: Some(StepKind::Record),
        started_at_ms: started,
        summary: format!("state before rewind to step {}", opts.target),
        policy_hash: opts.policy_hash.clone(),
        ..Default::default()
    });
    let head = store.head().map(|h| h.number).unwrap_or(0) + u64::from(record_first.is_some());
    // Only the steps after the target are decoded: newest first, then put in order.
    let mut undone_steps = Vec::new();
    for s in store.steps_newest_first() {
        let s = s?;
        if s.number <= opts.target {
            break;
        }
        undone_steps.push(s);
    }
    let marks = undone_steps
        .into_iter()
        .rev()
        .flat_map(|s| s.marks().map(move |r| (s.number, r.clone())))
        .collect();
    Ok(RewindStart {
        current,
        record_first,
        undone: head.saturating_sub(opts.target),
        marks,
        target_tree,
        started,
        setid: scan.setid,
    })
}

/// Makes the working tree step N's (writing only what differs, protected paths kept), after
/// [`rewind_start`] and the record-first step. The caller commits the returned draft.
pub fn rewind_apply(
    store: &Store,
    wt: &mut WorkTree,
    start: RewindStart,
    opts: &RewindOptions<'_>,
) -> Result<RewindDone> {
    let restore_opts = RestoreOptions {
        excludes: opts.excludes,
        protected: opts.protected,
        clone_from: None,
    };
    let setid: Vec<_> = start
        .setid
        .into_iter()
        .filter(|f| !is_protected(opts.protected, &f.rel))
        .collect();
    let setid = clear_setid(wt.root_fd(), &setid);
    let restore = restore::restore(
        store,
        wt.root_fd(),
        Some(&start.current),
        &start.target_tree,
        &restore_opts,
    )?;
    let (tree, _) = wt.rescan(store, &restore.touched_dirs)?;
    let draft = StepDraft {
        kind: Some(StepKind::Rewind),
        started_at_ms: start.started,
        summary: format!("rewind to step {}", opts.target),
        policy_hash: opts.policy_hash.clone(),
        target: Some(opts.target),
        ..Default::default()
    };
    Ok(RewindDone {
        draft,
        tree,
        restore,
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
