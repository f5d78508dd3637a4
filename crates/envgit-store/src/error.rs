//! The store's errors. Each says what was wrong and where; the binary maps them to exit codes.

use std::path::{Path, PathBuf};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    #[error("step {0} does not exist")]
    NoSuchStep(u64),
    #[error("step {0} was pruned by `envgit gc`; its snapshot is gone and it cannot be restored")]
    Pruned(u64),
    #[error("a step of this project is in flight ({0}); wait for it to finish and try again")]
    InFlight(String),
    #[error("{0}")]
    Refused(String),
}

impl StoreError {
    pub fn corrupt(what: impl Into<String>) -> Self {
        Self::Corrupt(what.into())
    }

    /// True when the disk (or a quota) is full: the CLI says so plainly.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error())
            || source.raw_os_error() == Some(rustix::io::Errno::DQUOT.raw_os_error()))
    }
}

/// Attach a path to an I/O error.
pub trait IoContext<T> {
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

impl<T> IoContext<T> for rustix::io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| StoreError::Io {
            path: path.to_path_buf(),
            source: e.into(),
        })
    }
}
