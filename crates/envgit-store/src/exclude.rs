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
    /// Every pattern ends with `/`, so it matches directories only (gitignore semantics): a
    /// file is never excluded, and the scan skips the matcher for every file (the default
    /// `target/`, `node_modules/`… are such; matching costs more than the file's `lstat`).
    dirs_only: bool,
}

impl Excludes {
    pub fn none() -> Self {
        Self {
            matcher: None,
            dirs_only: true,
        }
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
            dirs_only: patterns.iter().all(|p| p.ends_with('/')),
        })
    }

    /// Whether some pattern could match an entry of this kind (else `is_excluded` is false
    /// without being asked).
    pub fn may_exclude(&self, is_dir: bool) -> bool {
        self.matcher.is_some() && (is_dir || !self.dirs_only)
    }

    /// `rel` is '/'-separated and relative to the project root.
    pub fn is_excluded(&self, rel: &[u8], is_dir: bool) -> bool {
        if !is_dir && self.dirs_only {
            return false;
        }
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

    /// The shortcut for directory-only patterns gives the matcher's answers.
    #[test]
    fn directory_only_patterns_never_exclude_a_file() {
        let pats: Vec<String> = ["target/", "node_modules/", "!keep/", "a/**/b/"]
            .iter()
            .map(|p| p.to_string())
            .collect();
        let e = Excludes::new(&pats).unwrap();
        assert!(e.dirs_only);
        let full = Excludes {
            dirs_only: false,
            ..e.clone()
        };
        for rel in [
            &b"target"[..],
            b"x/target",
            b"node_modules",
            b"a/c/b",
            b"keep",
            b"f.txt",
        ] {
            for is_dir in [true, false] {
                assert_eq!(
                    e.is_excluded(rel, is_dir),
                    full.is_excluded(rel, is_dir),
                    "{} {is_dir}",
                    String::from_utf8_lossy(rel)
                );
            }
        }
        assert!(e.is_excluded(b"x/target", true) && !e.is_excluded(b"x/target", false));
        let mixed = Excludes::new(&["target/".into(), "*.log".into()]).unwrap();
        assert!(!mixed.dirs_only && mixed.is_excluded(b"a.log", false));
    }
}
