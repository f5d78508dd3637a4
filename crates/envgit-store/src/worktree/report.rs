//! What a scan reports besides its tree, and the counters a progress bar reads while it runs.

use std::sync::atomic::AtomicU64;

use crate::beneath;
use crate::budget::{BudgetLimit, ScanBudget};
use crate::setid::SetidFile;

/// Counters a progress bar can read while a scan runs.
#[derive(Default)]
pub struct ScanProgress {
    pub files: AtomicU64,
    pub bytes: AtomicU64,
}

/// What one scan noticed besides the tree.
#[derive(Default, Debug)]
pub struct ScanReport {
    pub unstable: Vec<String>,
    pub hashed: u64,
    /// Directories of the project's loose git objects taken from the last scan without an
    /// `lstat` of their files: unchanged since (`worktree/sealed.rs`).
    pub kept_object_dirs: u64,
    /// The whole tree was visited.
    pub full: bool,
    /// Directories seen for the first time by a partial rescan (the watcher adds watches).
    pub new_dirs: Vec<Vec<u8>>,
    /// Directories recorded as `too_deep` markers (over [`crate::MAX_TREE_DEPTH`] levels or
    /// [`crate::MAX_TREE_PATH`] bytes): the caller warns about each, naming the limit.
    pub too_deep: Vec<String>,
    /// Regular files read with the setuid or setgid bit (whatever the stat cache said; the
    /// bits are not part of the snapshot): the step's end clears those the step made
    /// ([`crate::clear_setid`]).
    pub setid: Vec<SetidFile>,
    /// Files recorded as `over_budget` markers, with their sizes, in path order: their new
    /// content would have taken the store past `snapshot.budget` or its disk below the
    /// free-space reserve. The caller warns and notes them on the step.
    pub over_budget: Vec<(String, u64)>,
    /// What bounded the store, when `over_budget` is not empty.
    pub budget_limit: Option<BudgetLimit>,
    /// The directories holding `over_budget` files (a watcher rereads them next time, so a
    /// file is tried again once there is room).
    pub over_budget_dirs: Vec<Vec<u8>>,
}

impl ScanReport {
    pub(super) fn take_budget(&mut self, budget: &ScanBudget) {
        let (over, limit) = budget.take_report();
        for (rel, size) in over {
            let dir = beneath::parent_rel(&rel).unwrap_or_default().to_vec();
            if !self.over_budget_dirs.contains(&dir) {
                self.over_budget_dirs.push(dir);
            }
            self.over_budget.push((beneath::display_rel(&rel), size));
        }
        if limit.is_some() {
            self.budget_limit = limit;
        }
    }
}
