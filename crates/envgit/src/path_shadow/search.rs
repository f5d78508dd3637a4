//! The search paths a step could put a file on ahead of the host's own, and what each finds:
//! `PATH` programs, which the person's shell runs by name; `LD_LIBRARY_PATH` libraries, which
//! every dynamically linked program the person runs loads before the system's.

use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Stat};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Search {
    Programs,
    Libraries,
}

impl Search {
    pub(super) const ALL: [Search; 2] = [Search::Programs, Search::Libraries];

    /// The variable that names its directories.
    pub(super) fn variable(self) -> &'static str {
        match self {
            Search::Programs => "PATH",
            Search::Libraries => "LD_LIBRARY_PATH",
        }
    }

    /// Where the search goes after the variable's own directories: the dynamic loader's
    /// system directories (its configured ones included), none for `PATH`.
    pub(super) fn after_the_variable(self) -> Vec<PathBuf> {
        match self {
            Search::Programs => Vec::new(),
            Search::Libraries => {
                let mut dirs: Vec<PathBuf> = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
                    .iter()
                    .map(PathBuf::from)
                    .collect();
                dirs.extend(loader_configured_dirs());
                dirs
            }
        }
    }

    /// `p` is what the search finds on the host: an executable that is not a directory (the
    /// shell's test), or any file (the loader's).
    pub(super) fn finds_on_host(self, p: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| {
            !m.is_dir()
                && match self {
                    Search::Programs => m.permissions().mode() & 0o111 != 0,
                    Search::Libraries => true,
                }
        })
    }

    /// A file of a writable directory (its `lstat`) that the search would take: a link, even a
    /// dangling one that a later write can complete; a regular file (executable, for `PATH`).
    pub(super) fn would_take(self, st: &Stat) -> bool {
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => true,
            FileType::RegularFile => match self {
                Search::Programs => st.st_mode & 0o111 != 0,
                Search::Libraries => true,
            },
            _ => false,
        }
    }

    /// Why a file of a writable directory is removed, beside the host's file it replaces.
    pub(super) fn instead_of(self, host: &Path) -> String {
        match self {
            Search::Programs => format!("would run instead of {} on your PATH", host.display()),
            Search::Libraries => format!(
                "would be loaded instead of {} by the programs you run (LD_LIBRARY_PATH)",
                host.display()
            ),
        }
    }
}

/// The directories `/etc/ld.so.conf.d/*.conf` add (the multiarch ones, `/usr/local/lib`).
fn loader_configured_dirs() -> Vec<PathBuf> {
    let Ok(list) = std::fs::read_dir("/etc/ld.so.conf.d") else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for entry in list.flatten() {
        if entry.path().extension().is_none_or(|e| e != "conf") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        dirs.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| l.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    dirs
}
