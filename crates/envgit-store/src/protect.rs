//! After a step: every protected path (policy, hooks, config that runs code later) must be as
//! it was before the step. Mounts make them read-only, but renaming a parent (`mv .git .g &&
//! mkdir -p .git/hooks`) slips past any mount, so the supervisor compares and puts back.

use crate::error::Result;
use crate::exclude::Excludes;
use crate::graft::{entry_at, graft};
use crate::id::ObjectId;
use crate::restore::{RestoreOptions, restore};
use crate::store::Store;
use crate::worktree::WorkTree;

/// Put every path of `protected` that differs between `before` and `after` back as it was in
/// `before`. Returns the paths put back and the tree of the working directory afterwards.
pub fn put_back(
    store: &Store,
    wt: &mut WorkTree,
    before: &ObjectId,
    after: &ObjectId,
    protected: &[String],
) -> Result<(Vec<String>, ObjectId)> {
    let mut target = *after;
    let mut changed = Vec::new();
    for p in protected {
        let was = entry_at(store, before, p)?;
        let now = entry_at(store, after, p)?;
        if was != now {
            target = graft(store, &target, p, was.as_ref())?;
            changed.push(p.clone());
        }
    }
    if changed.is_empty() {
        return Ok((changed, *after));
    }
    let opts = RestoreOptions {
        excludes: &Excludes::none(),
        protected: &[],
        clone_from: None,
    };
    let report = restore(store, wt.root_fd(), Some(after), &target, &opts)?;
    let (tree, _) = wt.rescan(store, &report.touched_dirs)?;
    Ok((changed, tree))
}
