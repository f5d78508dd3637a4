//! `show`/`diff -- PATH…`: paths given relative to the current directory (as git takes them),
//! turned into paths relative to the project root, and matched as a file or a directory.

use std::path::{Component, Path, PathBuf};

use crate::failure::{CmdResult, Failure};

pub struct PathFilter {
    /// Relative to the project root, `/`-separated; an empty one is the whole project.
    prefixes: Vec<String>,
}

impl PathFilter {
    /// `base` is where relative paths start (the current directory, or `-C DIR`).
    pub fn new(root: &Path, dir: Option<&Path>, paths: &[PathBuf]) -> CmdResult<Self> {
        let base = crate::project::start_dir(dir)?;
        let mut prefixes = Vec::new();
        for p in paths {
            let joined = normalize(&base.join(p));
            let rel = joined.strip_prefix(root).map_err(|_| {
                Failure::usage(format!(
                    "{}: outside the project {} (paths are relative to the current directory)",
                    p.display(),
                    root.display()
                ))
            })?;
            prefixes.push(rel.to_string_lossy().into_owned());
        }
        Ok(Self { prefixes })
    }

    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    pub fn matches(&self, path: &str) -> bool {
        self.prefixes.is_empty()
            || self.prefixes.iter().any(|f| {
                f.is_empty()
                    || path == f
                    || (path.starts_with(f.as_str()) && path.as_bytes().get(f.len()) == Some(&b'/'))
            })
    }
}

/// `..` and `.` removed by text, as git does with a pathspec (no link is followed).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::PathFilter;

    #[test]
    fn a_directory_matches_what_is_inside_it_only() {
        let f = PathFilter {
            prefixes: vec!["src".into()],
        };
        assert!(f.matches("src"));
        assert!(f.matches("src/a.rs"));
        assert!(!f.matches("srcx/a.rs"));
        assert!(!f.matches("README.md"));
    }
}
