//! After a step: every protected path (policy, hooks, config that runs code later) must be as
//! it was before the step. Mounts make them read-only, but renaming a parent (`mv .git .g &&
//! mkdir -p .git/hooks`) slips past any mount, so the supervisor compares and puts back.

use std::path::Path;

use rustix::fs::AtFlags;
use rustix::io::Errno;

use crate::beneath::{cstr, open_dir_rel, parent_rel};
use crate::error::{IoContext, Result};
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
    let mut dirty = report.touched_dirs;
    // A restore never touches a marker: what the step left there that the snapshot could not
    // hold (a hook padded past `snapshot.max_file_size`) is not in it to put back from, so it
    // is removed, beneath the root, never through a link.
    for left in &report.not_restored {
        let rel = left.path.as_bytes();
        let under = |p: &String| {
            let p = p.as_bytes();
            rel == p || (rel.len() > p.len() && rel.starts_with(p) && rel[p.len()] == b'/')
        };
        if !changed.iter().any(under) {
            continue;
        }
        let now = entry_at(store, after, &left.path)?;
        if now.is_none() || now == entry_at(store, &target, &left.path)? {
            continue;
        }
        remove_file(wt, rel).at(Path::new(&left.path))?;
        dirty.insert(parent_rel(rel).unwrap_or_default().to_vec());
    }
    let (tree, _) = wt.rescan(store, &dirty)?;
    Ok((changed, tree))
}

/// Unlinks the non-directory `rel` beneath the working tree's root (absent: nothing to do).
fn remove_file(wt: &WorkTree, rel: &[u8]) -> rustix::io::Result<()> {
    let dir = open_dir_rel(wt.root_fd(), parent_rel(rel).unwrap_or_default())?;
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    match rustix::fs::unlinkat(&dir, cstr(name)?.as_c_str(), AtFlags::empty()) {
        // A directory kept as a marker (nested too deep) is no file git runs: it stays.
        Ok(()) | Err(Errno::NOENT | Errno::ISDIR) => Ok(()),
        Err(e) => Err(e),
    }
}
