//! The sandbox plan's facts about the project's files (secrets to mask, files hard-linked to
//! outside it), taken from the stat index of the scan a step already made: no walk of its own.

use std::path::Path;

use envgit_sandbox::plan::{ListingVouch, ProjectFacts, ProjectIndex, Seen, project_facts};
use envgit_store::{EntryKind, MarkerReason, Store, WorkTree};

use crate::failure::{CmdResult, Failure};
use crate::output;
use crate::project::Project;

/// A scanned [`WorkTree`] as the plan reads it.
struct Index<'a>(&'a WorkTree);

impl ProjectIndex for Index<'_> {
    fn visit(&self, skip_dir: &dyn Fn(&[u8]) -> bool, f: &mut dyn FnMut(&[u8], Seen)) {
        let mut rel = Vec::new();
        self.0.visit_entries(skip_dir, |dir, name, kind, st| {
            rel.clear();
            if !dir.is_empty() {
                rel.extend_from_slice(dir);
                rel.push(b'/');
            }
            rel.extend_from_slice(name);
            let file = Seen::File {
                dev: st.dev,
                ino: st.ino,
                nlink: u64::from(st.nlink),
            };
            let seen = match kind {
                EntryKind::File => file,
                EntryKind::Dir => Seen::Dir,
                EntryKind::Symlink => Seen::Other,
                // A marker keeps the lstat of what it stands for.
                EntryKind::Marker(MarkerReason::Excluded | MarkerReason::TooDeep)
                    if st.is_dir() =>
                {
                    Seen::Unwalked
                }
                EntryKind::Marker(_) if st.is_file() => file,
                EntryKind::Marker(_) if st.is_socket() => Seen::Socket,
                EntryKind::Marker(_) => Seen::Other,
            };
            f(&rel, seen);
        });
    }
}

/// The store's cache of what the excluded directories held when last listed.
const LISTING_CACHE: &str = "listing.cache";

/// From `wt`, just scanned; warns about what the search could not cover. The listing of the
/// directories the scan does not enter is cached in the store at `store_dir`, and taken as it
/// is while the watching daemon's count for them (`vouch`, asked before) has not moved.
pub(crate) fn of(
    project: &Project,
    store_dir: &Path,
    wt: &WorkTree,
    vouch: Option<ListingVouch>,
) -> CmdResult<ProjectFacts> {
    let cache = store_dir.join(LISTING_CACHE);
    let facts = project_facts(
        &project.policy,
        &project.root,
        &Index(wt),
        Some(&cache),
        vouch,
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    for n in &facts.notes {
        output::warn(n);
    }
    if facts.listing_vouched {
        crate::timings::note("the excluded directories' listing taken on the daemon's word");
    }
    Ok(facts)
}

/// From the stat cache the last step saved (a scan first if there is none), for a sandbox
/// started without a step's own scan at hand.
pub(crate) fn from_cache(project: &Project, store: &Store) -> CmdResult<ProjectFacts> {
    let mut wt = project.worktree(store)?;
    if wt.root_tree().is_none() {
        wt.full_scan(store, None)?;
    }
    of(project, store.dir(), &wt, None)
}
