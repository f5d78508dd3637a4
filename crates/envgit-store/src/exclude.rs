//! Exclusions come only from `snapshot.exclude` in `envgit.yaml`, with gitignore semantics
//! (`target/` matches a directory named target at any depth).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::error::{Result, StoreError};

#[derive(Clone)]
pub struct Excludes {
    matcher: Option<Gitignore>,
}

impl Excludes {
    pub fn none() -> Self {
        Self { matcher: None }
    }

    pub fn new(patterns: &[String]) -> Result<Self> {
        if patterns.is_empty() {
            return Ok(Self::none());
        }
        let mut b = GitignoreBuilder::new("/");
        for p in patterns {
            b.add_line(None, p).map_err(|e| {
                StoreError::Refused(format!("snapshot.exclude: bad pattern `{p}`: {e}"))
            })?;
        }
        let matcher = b
            .build()
            .map_err(|e| StoreError::Refused(format!("snapshot.exclude: {e}")))?;
        Ok(Self {
            matcher: Some(matcher),
        })
    }

    /// `rel` is '/'-separated and relative to the project root.
    pub fn is_excluded(&self, rel: &[u8], is_dir: bool) -> bool {
        match &self.matcher {
            None => false,
            Some(m) => {
                let path = Path::new("/").join(Path::new(OsStr::from_bytes(rel)));
                m.matched(&path, is_dir).is_ignore()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitignore_semantics() {
        let e = Excludes::new(&[
            "target/".into(),
            "node_modules/.cache/**".into(),
            "*.log".into(),
        ])
        .unwrap();
        assert!(e.is_excluded(b"target", true));
        assert!(e.is_excluded(b"sub/target", true));
        assert!(!e.is_excluded(b"target", false));
        assert!(e.is_excluded(b"node_modules/.cache/x", false));
        assert!(!e.is_excluded(b"node_modules/y", false));
        assert!(e.is_excluded(b"a/b.log", false));
        assert!(!Excludes::none().is_excluded(b"target", true));
    }
}
