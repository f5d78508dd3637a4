//! The search paths a step could put a file on ahead of the host's own, and what each finds:
//! `PATH` programs, which the person's shell runs by name; `LD_LIBRARY_PATH` libraries, which
//! every dynamically linked program the person runs loads before the system's; `PYTHONPATH`
//! modules, which every Python program imports before Python's own library; `PERL5LIB`
//! modules, which every Perl program loads before Perl's own.

use std::ffi::CStr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Stat};

use super::{perl, python, ruby};

#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub(super) enum Search {
    Programs,
    Libraries,
    PythonModules,
    PerlModules,
    /// `RUBYLIB`'s features.
    RubyFeatures,
}

impl Search {
    pub(super) const ALL: [Search; 5] = [
        Search::Programs,
        Search::Libraries,
        Search::PythonModules,
        Search::PerlModules,
        Search::RubyFeatures,
    ];

    /// The variable that names its directories: for Perl `PERL5LIB`, or `PERLLIB` when
    /// `PERL5LIB` is unset (Perl reads the older name only then).
    pub(super) fn variable(self) -> &'static str {
        match self {
            Search::Programs => "PATH",
            Search::Libraries => "LD_LIBRARY_PATH",
            Search::PythonModules => "PYTHONPATH",
            Search::PerlModules if std::env::var_os("PERL5LIB").is_none() => "PERLLIB",
            Search::PerlModules => "PERL5LIB",
            Search::RubyFeatures => "RUBYLIB",
        }
    }

    /// What the search looks for by the file `name`: the name itself, or for Python the
    /// module it is imported as (`json` for `json.py`); `None` for a file it never takes.
    pub(super) fn key_of(self, name: &[u8]) -> Option<Vec<u8>> {
        match self {
            Search::Programs | Search::Libraries => Some(name.to_vec()),
            Search::PythonModules => {
                python::module_of(name, !name.contains(&b'.')).map(<[u8]>::to_vec)
            }
            Search::PerlModules => perl::is_module(name).then(|| name.to_vec()),
            Search::RubyFeatures => ruby::feature_of(name).map(<[u8]>::to_vec),
        }
    }

    /// The key of a host directory's entry (`dir`: whether it is a directory).
    pub(super) fn host_key_of(self, name: &[u8], dir: bool) -> Option<Vec<u8>> {
        match self {
            Search::Programs | Search::Libraries => Some(name.to_vec()),
            Search::PythonModules => python::module_of(name, dir).map(<[u8]>::to_vec),
            Search::PerlModules => (!dir && perl::is_module(name)).then(|| name.to_vec()),
            Search::RubyFeatures => ruby::feature_of(name).filter(|_| !dir).map(<[u8]>::to_vec),
        }
    }

    /// Where the search goes after the variable's own directories: the dynamic loader's
    /// system directories (its configured ones included), none for `PATH`.
    pub(super) fn after_the_variable(self) -> Vec<PathBuf> {
        match self {
            Search::Programs => Vec::new(),
            Search::PerlModules => perl::host_dirs(),
            Search::RubyFeatures => {
                let path: Vec<PathBuf> = std::env::var_os("PATH")
                    .map(|p| std::env::split_paths(&p).collect())
                    .unwrap_or_default();
                ruby::host_dirs(&path)
            }
            Search::PythonModules => {
                let path: Vec<PathBuf> = std::env::var_os("PATH")
                    .map(|p| std::env::split_paths(&p).collect())
                    .unwrap_or_default();
                let home = std::env::var_os("HOME").map(PathBuf::from);
                python::host_dirs(&path, home.as_deref())
            }
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
                    Search::Libraries
                    | Search::PythonModules
                    | Search::PerlModules
                    | Search::RubyFeatures => true,
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
                Search::Libraries
                | Search::PythonModules
                | Search::PerlModules
                | Search::RubyFeatures => true,
            },
            FileType::Directory => self == Search::PythonModules,
            _ => false,
        }
    }

    /// For Python, whether `name` in `dir` is something it imports (links followed): a
    /// module file, or a package (a directory with an `__init__`; one without is a namespace
    /// portion, which never comes before a module of the same name further on).
    pub(super) fn imports(self, dir: BorrowedFd<'_>, name: &CStr) -> bool {
        if self != Search::PythonModules {
            return true;
        }
        let Ok(st) = rustix::fs::statat(dir, name, AtFlags::empty()) else {
            return false;
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => name.to_bytes().contains(&b'.'),
            FileType::Directory => ["__init__.py", "__init__.pyc"].iter().any(|init| {
                let mut path = name.to_bytes().to_vec();
                path.push(b'/');
                path.extend_from_slice(init.as_bytes());
                rustix::fs::statat(dir, path.as_slice(), AtFlags::empty()).is_ok()
            }),
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
            Search::PythonModules => format!(
                "would be imported instead of {} by the Python programs you run (PYTHONPATH)",
                host.display()
            ),
            Search::PerlModules => format!(
                "would be loaded instead of {} by the Perl programs you run ({})",
                host.display(),
                self.variable()
            ),
            Search::RubyFeatures => format!(
                "would be required instead of {} by the Ruby programs you run (RUBYLIB)",
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

/// The installation prefixes of the programs `names` the host's `PATH` (`path_dirs`) finds,
/// added to `prefixes`: `/opt/py` for `/opt/py/bin/python3`, links resolved (a virtualenv's
/// `python3` leads to the Python it was made from).
pub(super) fn add_prefixes_on_path(
    prefixes: &mut Vec<PathBuf>,
    path_dirs: &[PathBuf],
    names: &[&str],
) {
    for dir in path_dirs {
        for name in names {
            let Ok(real) = dir.join(name).canonicalize() else {
                continue;
            };
            if let Some(prefix) = real
                .parent()
                .filter(|b| b.ends_with("bin"))
                .and_then(Path::parent)
                && !prefixes.iter().any(|p| p == prefix)
            {
                prefixes.push(prefix.to_path_buf());
            }
        }
    }
}
