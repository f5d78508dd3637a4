//! The host's git receives data, never code. Inside the sandbox the project's `.git` is an
//! overlay whose writes land in an upper directory envgit owns; after the step this module
//! imports from that upper directory only data git reads (objects, refs, the index, logs, the
//! allow-listed config keys) and lists everything else as dropped. Refs, `packed-refs`, `HEAD`
//! and the index are written compare-and-swap against their pre-step content; objects are
//! taken only for what their content is (`verify`); an index only when git could have written
//! its every path (`index`), and refs and the index only when they leave the protected paths
//! as the host's git had them (`protected`).

mod cache_tree;
mod classify;
mod config;
mod excluded;
mod import;
mod index;
mod index_extensions;
mod layer;
mod nested;
mod nested_objects;
mod nested_on_disk;
mod nested_protected;
mod protected;
mod secrets;
mod verify;
mod write;

/// The rule a write into a `.git` that envgit undid or did not import is recorded under.
pub const GIT_DATA_ONLY_RULE: &str = "git.data-only";

pub use config::GitConfigError;
pub use excluded::{
    Disarmed, RepositoryAt, disarm_excluded, excluded_code_paths, repositories_below,
};
pub use import::{Dropped, GitImport, PreStep, import};
pub use index::BELOW_ROOT;
pub use layer::{GitLayer, recover};
pub use nested::{
    NestedCode, NestedConfigError, filter_nested_config, nested_code_paths,
    nested_replace_ref_stores, only_comments,
};
pub use nested_objects::nested_object_refusals;
pub use nested_on_disk::nested_code_on_disk;
pub use nested_protected::nested_protected_refusals;
pub use secrets::{ConfigSecret, HiddenConfig, HideSecretsError, hide_secrets};
