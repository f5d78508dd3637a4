//! envgit's history: after every step a content-addressed, deduplicated snapshot of the working
//! directory and a record of what the step did; rewind and fork move through it.
//!
//! The store knows files, trees and steps, and nothing of HTTP or sandboxes: a step record is a
//! plain struct ([`StepDraft`]) the supervisor fills in.
//!
//! Objects live behind [`ObjectBackend`]: the local packs ([`PackBackend`]) by default, or
//! [`MemoryBackend`]; trees, diffs, rewind, restore, fork and fsck reach them only through
//! [`Store`]'s reads and writes.

mod backend;
pub mod bare_repository;
mod below_root;
pub mod beneath;
mod budget;
mod byte_cursor;
mod change_log;
mod change_note;
mod checked_this_boot;
mod chunk;
mod commit;
mod delta;
mod diff;
mod dirty;
mod error;
mod exclude;
mod fork;
mod fsck;
mod gc;
mod gitlayer;
mod graft;
mod guard;
mod guard_bytes;
mod id;
mod interrupted;
mod journal;
mod journal_file;
mod journal_table;
mod lock;
mod mapped;
mod memory_backend;
mod object_table;
mod pack;
mod pack_backend;
mod protect;
mod reach;
mod read;
mod remove_tree;
mod restore;
mod rewind;
mod setid;
mod stale_temporaries;
mod star_glob;
mod stat_index;
mod step;
mod step_log;
mod steps_table;
mod store;
mod trash;
mod tree;
mod tree_cache;
mod watch;
mod watches;
mod without_snapshot;
mod worktree;
mod write;

pub use backend::{ObjectBackend, ObjectInfo, Untabled};
pub use below_root::{BelowRoot, PROTECTED_RULE};
pub use budget::BudgetLimit;
pub use change_log::{ChangeLog, ChangeToken, RootGone, Since};
pub use change_note::ChangeNote;
pub use diff::{EntryDiff, diff_entries, diff_trees};
pub use error::{Result, StoreError};
pub use exclude::Excludes;
pub use fork::{ForkOptions, fork};
pub use fsck::{FsckReport, fsck};
pub use gc::{GcOptions, GcReport, gc};
pub use gitlayer::{
    BELOW_ROOT as GIT_PROTECTED_BELOW_ROOT, ConfigSecret, Disarmed as DisarmedRepository,
    Dropped as GitDropped, GIT_DATA_ONLY_RULE, GitConfigError, GitImport, GitLayer, HiddenConfig,
    HideSecretsError, NestedCode as NestedGitCode, NestedConfigError, PreStep as GitPreStep,
    RepositoryAt as ExcludedRepositoryAt, disarm_excluded as disarm_excluded_repository,
    excluded_code_paths as excluded_repository_code,
    filter_nested_config as filter_nested_git_config, hide_secrets as hide_git_config_secrets,
    import as git_import, nested_code_paths as nested_git_code_paths,
    nested_object_refusals as nested_git_object_refusals,
    nested_protected_refusals as nested_git_protected_refusals,
    nested_replace_ref_stores as nested_git_replace_ref_stores,
    only_comments as git_text_only_comments, recover as recover_git_layers,
};
pub use graft::{entry_at, graft};
pub use guard::{
    Durable, GUARD_MAX_BYTES, ProtectedCopy, Recovered as RecoveredProtected,
    recover as recover_protected, remove_planted_git_links, top_name as protected_top_name,
};
pub use id::{ObjectId, ObjectKind};
pub use lock::{Flock, StepGuard};
pub use memory_backend::MemoryBackend;
pub use pack_backend::PackBackend;
pub use protect::put_back;
pub use remove_tree::remove_tree;
pub use restore::{RestoreOptions, RestoreReport, restore};
pub use rewind::{RewindDone, RewindOptions, RewindStart, rewind_apply, rewind_start};
pub use setid::{
    Cleared as SetidCleared, SETID_BITS, SetidFile, clear_setid, clear_setid_since, setid_notes,
};
pub use step::{
    Approval, ApprovalAnswer, Change, ChangeCounts, ChangeKind, Origin, Refusal, ReplCall,
    ReplRecord, Request, RequestOutcome, Step, StepDraft, StepFlag, StepKind, ToolDecision,
    is_git_path, now_ms, project_first,
};
pub use store::{Store, envgit_home, store_dir_for};
pub use trash::{
    discard as discard_to_trash, empty as empty_trash,
    empty_in_background as empty_trash_in_background,
};
pub use tree::{EntryKind, MarkerReason, Tree, TreeEntry};
pub use watch::{LiveTree, SnapshotMode};
pub use without_snapshot::{
    EndedWithoutSnapshot, NestedProtectedReader, OwedEnd, end_without_snapshot,
    set_nested_protected_reader,
};
pub use worktree::{
    CachedEntry, DEFAULT_MAX_FILE_SIZE, MAX_TREE_DEPTH, MAX_TREE_PATH, ScanConfig, ScanProgress,
    ScanReport, StatKey, WorkTree,
};
