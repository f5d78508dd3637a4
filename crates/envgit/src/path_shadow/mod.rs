//! Files a step puts on the person's search paths ahead of the host's own. An activated
//! virtualenv (`.venv/bin`), direnv's `PATH_add bin` or `layout node` put directories of the
//! project first on the person's `PATH`, in their shell and so in envgit's: a `git` or `sudo`
//! the agent writes there runs on the host, unsandboxed, the next time the person types `git`
//! or `sudo` in the project. A project's `build/lib` on `LD_LIBRARY_PATH` is the same for every
//! program they run, through a library named like the system's. They did not choose to run the
//! project's code, as they do when they run its build or its tests.
//!
//! So at the start of a run envgit reads its own `PATH` and `LD_LIBRARY_PATH`, keeps the
//! entries the sandbox can write (inside the project or an `allow_write` path), and notes which
//! files there already come before a host file of the same name: those are the person's. After
//! each step, a file there that the search would now take instead of a host file, and that was
//! not there when the run began, is removed (rule `filesystem.path-shadow`). A link to the very
//! file it shadows (a virtualenv's `python3`) is not a different file and stays; what shadows
//! nothing of the host's (a tool a `pip install` adds, the project's own library) stays too.
//!
//! `PYTHONPATH` is read the same way, by module: a `json.py` or a package `email/` a step puts
//! in a writable directory of it would be imported instead of Python's own by every Python
//! program the person runs (`pip` included), so it goes too; `PERL5LIB` (or `PERLLIB`), by its
//! directories' own `.pm` files; `RUBYLIB`, by feature (`json.rb`, `etc.so`).
//!
//! Host-side operations resolve a directory beneath its writable root only
//! (`RESOLVE_BENEATH`). A link that leads it out of the root is removed, unless it is the
//! person's own and leads where it led when the run began.

mod entry;
mod owed;
pub(crate) use owed::{keep_with as keep_owed_sweep_with, sweep_owed};
mod perl;
mod python;
mod python_stdlib;
mod ruby;
mod search;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::AtFlags;

use entry::{Entry, Found};
use search::Search;

/// The rule a removal names.
pub(crate) const RULE: &str = "filesystem.path-shadow";

/// The search paths as the run found them: only those with a directory a step can write.
pub(crate) struct PathShadows {
    searches: Vec<SearchPath>,
    /// Names the policy lets a step put ahead of the host's (`filesystem.allow_shadowing`).
    allowed: HashSet<Vec<u8>>,
}

/// One search path as the run found it, and the files in its writable directories that came
/// before a host file of the same name then.
struct SearchPath {
    search: Search,
    entries: Vec<Entry>,
    /// Keys (names; Python's modules) in the host's directories after the first writable one
    /// (a filter before a `stat`): no other can be shadowed.
    host_names: HashSet<Vec<u8>>,
    /// For Python, each host directory's modules and the file or package each is (indexed
    /// like `entries`; empty for the others).
    modules: Vec<HashMap<Vec<u8>, PathBuf>>,
    /// For each entry, the shadowing files it held at the start of the run.
    accepted: Vec<BTreeSet<Vec<u8>>>,
}

/// A file removed from a writable directory of a search path (or the link that led the
/// directory out of its root), and why.
pub(crate) struct Removed {
    pub shown: String,
    pub why: String,
    /// What the person can do to keep it.
    pub fix: String,
}

/// A file the search would take instead of a host file, as found now.
struct Shadow {
    name: Vec<u8>,
    /// What the search looks for by it (the name, or a Python module).
    key: Vec<u8>,
    host: PathBuf,
}

impl PathShadows {
    /// [`PathShadows::of_environment`] for `project`'s root and its policy's `allow_write`.
    pub fn of_project(project: &crate::project::Project, cwd: &Path) -> Option<PathShadows> {
        let uid = rustix::process::getuid().as_raw();
        let homes = crate::supervisor::homes(uid);
        let allow_write = envgit_sandbox::plan::allow_write_paths(
            &project.policy,
            homes.first().map(PathBuf::as_path),
        );
        // What direnv and mise put first on PATH at the person's next prompt in the project.
        let prompt: Vec<PathBuf> = project
            .host_loads()
            .path_dirs
            .iter()
            .map(|d| project.root.join(d))
            .collect();
        let mut shadows = Self::of_environment(&project.root, &allow_write, &prompt, cwd)?;
        shadows.allowed = project
            .policy
            .filesystem
            .allow_shadowing
            .iter()
            .map(|n| n.as_bytes().to_vec())
            .collect();
        Some(shadows)
    }

    /// Reads envgit's own search paths (relative entries against `cwd`), with `first_on_path`
    /// before `PATH`'s. `None` when no entry is writable by a step, the usual case: there is
    /// nothing to check after a step.
    pub fn of_environment(
        project_root: &Path,
        allow_write: &[PathBuf],
        first_on_path: &[PathBuf],
        cwd: &Path,
    ) -> Option<PathShadows> {
        let project = project_root
            .canonicalize()
            .unwrap_or_else(|_| project_root.to_path_buf());
        let mut roots = vec![project.clone()];
        roots.extend(allow_write.iter().cloned());
        let searches: Vec<SearchPath> = Search::ALL
            .iter()
            .filter_map(|&search| {
                let first: &[PathBuf] = match search {
                    Search::Programs => first_on_path,
                    Search::Libraries
                    | Search::PythonModules
                    | Search::PerlModules
                    | Search::RubyFeatures => &[],
                };
                SearchPath::read(search, first, &roots, &project, cwd)
            })
            .collect();
        (!searches.is_empty()).then_some(PathShadows {
            searches,
            allowed: HashSet::new(),
        })
    }

    /// After a step: removes each file of a writable directory that its search would take
    /// instead of a host file and that was not there when the run began. Returns what it
    /// removed; a removal that fails is said and the path returned all the same, so the step
    /// names it.
    pub fn sweep(&self) -> Vec<Removed> {
        let mut removed = Vec::new();
        for search in &self.searches {
            search.sweep(&self.allowed, &mut removed);
        }
        removed
    }
}

impl SearchPath {
    fn read(
        search: Search,
        first: &[PathBuf],
        roots: &[PathBuf],
        project: &Path,
        cwd: &Path,
    ) -> Option<SearchPath> {
        // Unset is no entry at all; set, an empty entry is the working directory.
        let value = std::env::var_os(search.variable());
        let listed = value.iter().flat_map(std::env::split_paths);
        let mut entries: Vec<Entry> = Vec::new();
        for raw in first.iter().cloned().chain(listed) {
            let abs = if raw.as_os_str().is_empty() {
                cwd.to_path_buf()
            } else {
                cwd.join(&raw)
            };
            if let Some(entry) = entry::classify(&abs, roots, project)
                && !entries.iter().any(|e| entry::same_entry(e, &entry))
            {
                entries.push(entry);
            }
        }
        entries.extend(search.after_the_variable().into_iter().map(Entry::Host));
        let mut read = SearchPath::of_entries(search, entries)?;
        read.accepted = (0..read.entries.len())
            .map(|i| match read.dir(i) {
                Some(Found::Dir(dir)) => read
                    .shadows_of(i, dir.as_fd())
                    .into_iter()
                    .map(|s| s.name)
                    .collect(),
                _ => BTreeSet::new(),
            })
            .collect();
        Some(read)
    }

    /// The search over `entries` (the host's directories read now), nothing accepted yet;
    /// `None` when none of them is writable.
    fn of_entries(search: Search, entries: Vec<Entry>) -> Option<SearchPath> {
        let first_writable = entries.iter().position(Entry::is_writable)?;
        let mut host_names = HashSet::new();
        let mut modules = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let mut found = HashMap::new();
            // Python's modules are looked up by key in every host directory (one before the
            // writable ones hides the rest); only those after can be shadowed.
            let python = search == Search::PythonModules;
            if let Entry::Host(dir) = e
                && (i > first_writable || python)
                && let Ok(list) = std::fs::read_dir(dir)
            {
                for d in list.flatten() {
                    let name = d.file_name();
                    let is_dir = d
                        .file_type()
                        .is_ok_and(|t| t.is_dir() || (t.is_symlink() && d.path().is_dir()));
                    let Some(key) = search.host_key_of(name.as_bytes(), is_dir) else {
                        continue;
                    };
                    if python {
                        found.entry(key.clone()).or_insert_with(|| d.path());
                    }
                    if i > first_writable {
                        host_names.insert(key);
                    }
                }
            }
            modules.push(found);
        }
        match search {
            // Wherever the person's Python or Ruby keeps its library, these are in it.
            Search::PythonModules => {
                host_names.extend(python::always_on_host().map(<[u8]>::to_vec));
            }
            Search::RubyFeatures => host_names.extend(ruby::always_on_host().map(<[u8]>::to_vec)),
            _ => {}
        }
        Some(SearchPath {
            search,
            entries,
            host_names,
            modules,
            accepted: Vec::new(),
        })
    }

    fn dir(&self, i: usize) -> Option<Found> {
        match &self.entries[i] {
            Entry::Writable { root, rel, .. } => Some(entry::find(root, rel)),
            Entry::Host(_) => None,
        }
    }

    fn sweep(&self, allowed: &HashSet<Vec<u8>>, removed: &mut Vec<Removed>) {
        let var = self.search.variable();
        for (i, e) in self.entries.iter().enumerate() {
            let Entry::Writable {
                root,
                rel,
                shown,
                escaped_at_start,
            } = e
            else {
                continue;
            };
            let dir = match entry::find(root, rel) {
                Found::Dir(dir) => dir,
                Found::Missing => continue,
                Found::Escapes => {
                    // A link now leads the directory out of its root: the search would go
                    // wherever it points, where the step may have written; unless it is the
                    // person's own link, as it was.
                    if escaped_at_start.is_some() && entry::identity(root, rel) == *escaped_at_start
                    {
                        continue;
                    }
                    if let Some(link) = entry::remove_escaping_link(root, rel) {
                        let link = entry::shown_below(root, shown, &link);
                        let why = if link == *shown {
                            format!(
                                "is a directory on your {var} that now links out of {}",
                                root.display()
                            )
                        } else {
                            format!(
                                "links {shown}, a directory on your {var}, out of {}",
                                root.display()
                            )
                        };
                        removed.push(Removed {
                            shown: link,
                            why,
                            fix: "if the link is yours, make it outside envgit".into(),
                        });
                    }
                    continue;
                }
            };
            for s in self.shadows_of(i, dir.as_fd()) {
                if self.accepted[i].contains(&s.name)
                    || allowed.contains(&s.name)
                    || allowed.contains(&s.key)
                {
                    continue;
                }
                let name = String::from_utf8_lossy(&s.key).into_owned();
                let path = Path::new(shown.as_str()).join(OsStr::from_bytes(&s.name));
                if let Ok(c) = CString::new(s.name.clone())
                    && let Err(e) = remove(dir.as_fd(), &c, &s.name)
                {
                    crate::output::error(&format!("cannot remove {}: {e}", path.display()));
                }
                removed.push(Removed {
                    shown: path.display().to_string(),
                    why: format!(
                        "{}, and was not there when the run began",
                        self.search.instead_of(&s.host)
                    ),
                    fix: format!(
                        "to let steps put it there, add `{name}` to `filesystem.allow_shadowing` \
                         in envgit.yaml, or make it outside envgit"
                    ),
                });
            }
        }
    }

    /// The files of entry `i` (open as `dir`) its search would take instead of a host file.
    fn shadows_of(&self, i: usize, dir: BorrowedFd<'_>) -> Vec<Shadow> {
        let Ok(names) = envgit_store::beneath::read_names(dir) else {
            return Vec::new();
        };
        names
            .into_iter()
            .filter_map(|n| {
                let key = self.search.key_of(n.to_bytes())?;
                if !self.host_names.contains(&key) {
                    return None;
                }
                let host = self.host_file(i, &key)?;
                (self.replaces(dir, &n, &host) && self.search.imports(dir, &n)).then(|| Shadow {
                    name: n.into_bytes(),
                    key,
                    host,
                })
            })
            .collect()
    }

    /// `name` in `dir` is one the search would take instead of `host`, and not a link to
    /// `host` itself (a virtualenv's `python3`).
    fn replaces(&self, dir: BorrowedFd<'_>, name: &CStr, host: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return false;
        };
        if !self.search.would_take(&st) {
            return false;
        }
        let target = rustix::fs::statat(dir, name, AtFlags::empty());
        let host = std::fs::metadata(host);
        !matches!((target, host), (Ok(t), Ok(h)) if h.dev() == t.st_dev && h.ino() == t.st_ino)
    }

    /// The host file `key` names that entry `i` would come before: the first in a host
    /// directory after it, unless a host directory before it has one (which the search then
    /// takes); for a Python module every host has (the standard library's, a start-up hook)
    /// found in none, that.
    fn host_file(&self, i: usize, key: &[u8]) -> Option<PathBuf> {
        let found = |j: usize| match &self.entries[j] {
            Entry::Host(_) if self.search == Search::PythonModules => {
                self.modules[j].get(key).cloned()
            }
            Entry::Host(dir) if self.search == Search::RubyFeatures => ruby::files_of(dir, key)
                .into_iter()
                .find(|p| self.search.finds_on_host(p)),
            Entry::Host(dir) => {
                let p = dir.join(OsStr::from_bytes(key));
                self.search.finds_on_host(&p).then_some(p)
            }
            Entry::Writable { .. } => None,
        };
        if (0..i).any(|j| found(j).is_some()) {
            return None;
        }
        let on_every_host = || match self.search {
            Search::PythonModules => python::on_every_host(key).map(PathBuf::from),
            Search::RubyFeatures => ruby::on_every_host(key).map(PathBuf::from),
            _ => None,
        };
        (i + 1..self.entries.len())
            .find_map(found)
            .or_else(on_every_host)
    }
}

/// Removes `name` from `dir`: a file or a link, or a whole package a step made.
fn remove(dir: BorrowedFd<'_>, name: &CStr, rel: &[u8]) -> rustix::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Err(rustix::io::Errno::ISDIR) => {
            envgit_store::beneath::remove_all(dir, name, rel, &|_| false).map(|_| ())
        }
        done => done,
    }
}
