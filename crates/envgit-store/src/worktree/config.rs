//! What a scan captures: exclusions, the file-size limit, the store's budget, and the limits
//! on depth and path length that bound what an agent can make a scan hold.

use crate::error::Result;
use crate::exclude::Excludes;

/// The default of `snapshot.max_file_size`.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 100 << 20;
/// Directories deeper than this (components below the project root) are recorded as a
/// `too_deep` marker instead of being walked: a chain of nested directories planted by the
/// agent must not cost unbounded memory (every directory's path is kept) nor produce paths no
/// tool can open. git's `core.maxTreeDepth` defaults to 4096; real projects stay far below.
pub const MAX_TREE_DEPTH: usize = 1024;
/// Directories whose path (relative to the project root) is longer than this many bytes are
/// recorded as a `too_deep` marker too (four times Linux's PATH_MAX).
pub const MAX_TREE_PATH: usize = 16 << 10;

#[derive(Clone)]
pub struct ScanConfig {
    pub excludes: Excludes,
    pub max_file_size: u64,
    /// Part of the stat cache's key: a different config means a cold cache.
    pub fingerprint: String,
    /// `snapshot.budget`: bytes the store may use. A file whose new content would take it past
    /// this (or its filesystem below the free-space reserve, which applies even with `None`)
    /// is recorded as an `over_budget` marker. Not part of the fingerprint: such a marker is
    /// never taken from the cache, so the file is tried again at every scan.
    pub budget: Option<u64>,
}

impl ScanConfig {
    /// From `snapshot.exclude` and `snapshot.max_file_size`; the fingerprint that keys the stat
    /// cache is derived here, so every caller gets the same one.
    pub fn new(exclude: &[String], max_file_size: u64) -> Result<Self> {
        Ok(Self {
            excludes: Excludes::new(exclude)?,
            max_file_size,
            fingerprint: format!("{exclude:?}|{max_file_size}"),
            budget: None,
        })
    }

    /// With `snapshot.budget`.
    pub fn with_budget(mut self, budget: Option<u64>) -> Self {
        self.budget = budget;
        self
    }
}

impl Default for ScanConfig {
    fn default() -> Self {
        Self {
            excludes: Excludes::none(),
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            fingerprint: String::new(),
            budget: None,
        }
    }
}
