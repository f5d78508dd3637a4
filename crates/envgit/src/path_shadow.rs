//! Programs a step puts on the person's `PATH` ahead of the host's own. An activated
//! virtualenv (`.venv/bin`), direnv's `PATH_add bin` or `layout node` put directories of the
//! project first on the person's `PATH`, in their shell and so in envgit's: a `git` or `sudo`
//! the agent writes there runs on the host, unsandboxed, the next time the person types `git`
//! or `sudo` in the project. They did not choose to run the project's code, as they do when
//! they run its build or its tests.
//!
//! So at the start of a run envgit reads its own `PATH`, keeps the entries the sandbox can
//! write (inside the project or an `allow_write` path), and notes which programs there already
//! come before a host program of the same name: those are the person's. After each step, a
//! program there that would now run instead of a host program and was not there when the run
//! began is removed (rule `filesystem.path-shadow`). A link to the very program it shadows
//! (a virtualenv's `python3`) is not a different program and stays; what shadows no host
//! program (a tool a `pip install` adds) stays too.
//!
//! Host-side operations resolve a `PATH` directory beneath its writable root only
//! (`RESOLVE_BENEATH`). A link that leads it out of the root is removed, unless it is the
//! person's own and leads where it led when the run began.

use std::collections::{BTreeSet, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// The rule a removal names.
pub(crate) const RULE: &str = "filesystem.path-shadow";

/// One entry of envgit's `PATH`.
enum Entry {
    /// A directory the sandbox can write: `rel` ('/'-separated, maybe empty) below `root`.
    Writable {
        root: PathBuf,
        rel: Vec<u8>,
        /// As the person reads it: relative to the project, or absolute.
        shown: String,
        /// The directory (device, inode) it led to out of `root` when the run began, through
        /// the person's own link (`.venv -> /opt/venvs/app`).
        escaped_at_start: Option<(u64, u64)>,
    },
    /// A directory of the host's, which the step cannot change.
    Host(PathBuf),
}

/// The `PATH` as the run found it, and the programs in its writable directories that came
/// before a host program of the same name then.
pub(crate) struct PathShadows {
    entries: Vec<Entry>,
    /// Names in the host's directories (a first filter before a `stat`).
    host_names: HashSet<Vec<u8>>,
    /// For each entry, the shadowing programs it held at the start of the run.
    accepted: Vec<BTreeSet<Vec<u8>>>,
}

/// A program removed from a writable `PATH` directory (or the link that led the directory out
/// of its root), and why.
pub(crate) struct Removed {
    pub shown: String,
    pub why: String,
}

/// A program that would run instead of a host program, as found now.
struct Shadow {
    name: Vec<u8>,
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
        Self::of_environment(&project.root, &allow_write, cwd)
    }

    /// Reads envgit's own `PATH` (relative entries against `cwd`). `None` when no entry is
    /// writable by a step, the usual case: there is nothing to check after a step.
    pub fn of_environment(
        project_root: &Path,
        allow_write: &[PathBuf],
        cwd: &Path,
    ) -> Option<PathShadows> {
        let path = std::env::var_os("PATH")?;
        let project = project_root
            .canonicalize()
            .unwrap_or_else(|_| project_root.to_path_buf());
        let mut roots = vec![project.clone()];
        roots.extend(allow_write.iter().cloned());
        let mut entries: Vec<Entry> = Vec::new();
        for raw in std::env::split_paths(&path) {
            let abs = if raw.as_os_str().is_empty() {
                cwd.to_path_buf()
            } else {
                cwd.join(&raw)
            };
            let Some(entry) = classify(&abs, &roots, &project) else {
                continue;
            };
            let seen = entries.iter().any(|e| same_entry(e, &entry));
            if !seen {
                entries.push(entry);
            }
        }
        if !entries.iter().any(|e| matches!(e, Entry::Writable { .. })) {
            return None;
        }
        // A host directory before every writable one decides every name it holds: only the
        // ones after the first writable directory can be shadowed.
        let first_writable = entries
            .iter()
            .position(|e| matches!(e, Entry::Writable { .. }))
            .unwrap_or(0);
        let mut host_names = HashSet::new();
        for e in &entries[first_writable..] {
            if let Entry::Host(dir) = e
                && let Ok(list) = std::fs::read_dir(dir)
            {
                host_names.extend(list.flatten().map(|d| d.file_name().as_bytes().to_vec()));
            }
        }
        let mut shadows = PathShadows {
            entries,
            host_names,
            accepted: Vec::new(),
        };
        shadows.accepted = (0..shadows.entries.len())
            .map(|i| shadows.shadows_in(i).into_iter().map(|s| s.name).collect())
            .collect();
        Some(shadows)
    }

    /// After a step: removes each program of a writable `PATH` directory that would run
    /// instead of a host program and was not there when the run began. Returns what it
    /// removed; a removal that fails is said and the path returned all the same, so the step
    /// names it.
    pub fn sweep(&self) -> Vec<Removed> {
        let mut removed = Vec::new();
        for (i, entry) in self.entries.iter().enumerate() {
            let Entry::Writable {
                root,
                rel,
                shown,
                escaped_at_start,
            } = entry
            else {
                continue;
            };
            let Ok(root_fd) = envgit_store::beneath::open_root(root) else {
                continue;
            };
            let dir = match open_beneath(root_fd.as_fd(), rel) {
                Ok(dir) => dir,
                Err(Errno::XDEV) => {
                    // A link now leads the directory out of its root: the shell would search
                    // wherever it points, where the step may have written; unless it is the
                    // person's own link, as it was.
                    if escaped_at_start.is_some() && identity(root, rel) == *escaped_at_start {
                        continue;
                    }
                    if let Some(link) = remove_escaping_link(root_fd.as_fd(), rel) {
                        let link = shown_below(root, shown, &link);
                        let why = if link == *shown {
                            format!(
                                "is a directory on your PATH that now links out of {}",
                                root.display()
                            )
                        } else {
                            format!(
                                "links {shown}, a directory on your PATH, out of {}",
                                root.display()
                            )
                        };
                        removed.push(Removed { shown: link, why });
                    }
                    continue;
                }
                Err(_) => continue,
            };
            for s in self.shadows_of(i, dir.as_fd()) {
                if self.accepted[i].contains(&s.name) {
                    continue;
                }
                let name = OsStr::from_bytes(&s.name);
                let path = Path::new(shown.as_str()).join(name);
                if let Ok(c) = CString::new(s.name.clone())
                    && let Err(e) = rustix::fs::unlinkat(dir.as_fd(), &c, AtFlags::empty())
                {
                    crate::output::error(&format!("cannot remove {}: {e}", path.display()));
                }
                removed.push(Removed {
                    shown: path.display().to_string(),
                    why: format!(
                        "would run instead of {} on your PATH, and was not there when the run began",
                        s.host.display()
                    ),
                });
            }
        }
        removed
    }

    /// The programs of entry `i` that would run instead of a host program now.
    fn shadows_in(&self, i: usize) -> Vec<Shadow> {
        let Entry::Writable { root, rel, .. } = &self.entries[i] else {
            return Vec::new();
        };
        let Ok(root_fd) = envgit_store::beneath::open_root(root) else {
            return Vec::new();
        };
        match open_beneath(root_fd.as_fd(), rel) {
            Ok(dir) => self.shadows_of(i, dir.as_fd()),
            Err(_) => Vec::new(),
        }
    }

    fn shadows_of(&self, i: usize, dir: BorrowedFd<'_>) -> Vec<Shadow> {
        let Ok(names) = envgit_store::beneath::read_names(dir) else {
            return Vec::new();
        };
        names
            .into_iter()
            .filter(|n| self.host_names.contains(n.to_bytes()))
            .filter_map(|n| {
                let host = self.host_program(i, n.to_bytes())?;
                runs_instead_of(dir, &n, &host).then(|| Shadow {
                    name: n.into_bytes(),
                    host,
                })
            })
            .collect()
    }

    /// The host program `name` that entry `i` would come before: the first in a host
    /// directory after it, unless a host directory before it has one (which then runs).
    fn host_program(&self, i: usize, name: &[u8]) -> Option<PathBuf> {
        let found = |e: &Entry| match e {
            Entry::Host(dir) => {
                let p = dir.join(OsStr::from_bytes(name));
                is_program(&p).then_some(p)
            }
            Entry::Writable { .. } => None,
        };
        if self.entries[..i].iter().any(|e| found(e).is_some()) {
            return None;
        }
        self.entries[i + 1..].iter().find_map(found)
    }
}

/// `name` in `dir` is a program the shell would run instead of `host`: a link (unless to
/// `host` itself: a virtualenv's `python3`), even a dangling one that a later write can
/// complete, or an executable regular file.
fn runs_instead_of(dir: BorrowedFd<'_>, name: &CStr, host: &Path) -> bool {
    let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return false;
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            let target = rustix::fs::statat(dir, name, AtFlags::empty());
            let host = std::fs::metadata(host);
            !matches!((target, host), (Ok(t), Ok(h))
                if std::os::unix::fs::MetadataExt::dev(&h) == t.st_dev
                    && std::os::unix::fs::MetadataExt::ino(&h) == t.st_ino)
        }
        FileType::RegularFile => st.st_mode & 0o111 != 0,
        _ => false,
    }
}

/// A host program: what the shell would run (an executable that is not a directory).
fn is_program(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| !m.is_dir() && m.permissions().mode() & 0o111 != 0)
}

/// `rel` below `root` as a directory, through links that stay below `root`.
fn open_beneath(root: BorrowedFd<'_>, rel: &[u8]) -> rustix::io::Result<OwnedFd> {
    let path: &OsStr = if rel.is_empty() {
        OsStr::new(".")
    } else {
        OsStr::from_bytes(rel)
    };
    rustix::fs::openat2(
        root,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Removes the first link on the way down `rel` from `root` that leads out of `root`; returns
/// its path below `rel`'s root.
fn remove_escaping_link(root: BorrowedFd<'_>, rel: &[u8]) -> Option<Vec<u8>> {
    let mut cur: Option<OwnedFd> = None;
    let mut walked: Vec<u8> = Vec::new();
    for part in rel.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        let dir = cur.as_ref().map_or(root, |f| f.as_fd());
        let name = CString::new(part).ok()?;
        if !walked.is_empty() {
            walked.push(b'/');
        }
        walked.extend_from_slice(part);
        let st = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            if open_beneath(root, &walked).is_ok() {
                // This link stays below the root; the escape is further down.
                let next = open_beneath(root, &walked).ok()?;
                cur = Some(next);
                continue;
            }
            rustix::fs::unlinkat(dir, &name, AtFlags::empty()).ok()?;
            return Some(walked);
        }
        cur = Some(envgit_store::beneath::open_subdir(dir, &name).ok()?);
    }
    None
}

fn shown_below(root: &Path, shown: &str, link: &[u8]) -> String {
    // `shown` names the whole directory; the link is a prefix of it below `root`.
    if Path::new(shown).is_absolute() {
        root.join(OsStr::from_bytes(link)).display().to_string()
    } else {
        String::from_utf8_lossy(link).into_owned()
    }
}

/// The entry for the `PATH` directory `abs`: writable when its path, as written or resolved,
/// is below one of `roots` (the first is the project's); `None` when it cannot be resolved.
fn classify(abs: &Path, roots: &[PathBuf], project: &Path) -> Option<Entry> {
    // As written first: the shell follows the links on the way each time it looks, and a
    // link below the root is the step's to change.
    let written = normal(abs);
    let (root, rel) = match written
        .as_ref()
        .and_then(|w| roots.iter().find(|r| w.starts_with(r)).map(|r| (r, w)))
    {
        Some((root, w)) => (root, w.strip_prefix(root).ok()?.to_path_buf()),
        None => {
            let real = resolved(abs)?;
            match roots.iter().find(|r| real.starts_with(r)) {
                Some(root) => (root, real.strip_prefix(root).ok()?.to_path_buf()),
                None => return Some(Entry::Host(real)),
            }
        }
    };
    let shown = if root == project {
        if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.display().to_string()
        }
    } else {
        root.join(&rel).display().to_string()
    };
    let rel = rel.as_os_str().as_bytes().to_vec();
    let escaped_at_start = match envgit_store::beneath::open_root(root)
        .and_then(|fd| open_beneath(fd.as_fd(), &rel))
    {
        Err(Errno::XDEV) => identity(root, &rel),
        _ => None,
    };
    Some(Entry::Writable {
        root: root.clone(),
        rel,
        shown,
        escaped_at_start,
    })
}

/// The directory `rel` below `root` leads to, every link followed as the shell would.
fn identity(root: &Path, rel: &[u8]) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(root.join(OsStr::from_bytes(rel))).ok()?;
    m.is_dir().then(|| (m.dev(), m.ino()))
}

/// `p` absolute with `.` removed; `None` when it holds `..` (left to the resolved path).
fn normal(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::Normal(_) => out.push(c),
            Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn same_entry(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (Entry::Host(x), Entry::Host(y)) => x == y,
        (
            Entry::Writable {
                root: r1, rel: p1, ..
            },
            Entry::Writable {
                root: r2, rel: p2, ..
            },
        ) => r1 == r2 && p1 == p2,
        _ => false,
    }
}

/// `p` with its links resolved, as far as it exists; the rest kept as written (a directory on
/// `PATH` that does not exist yet, which a step can make). `None` for a rest with `..`.
fn resolved(p: &Path) -> Option<PathBuf> {
    if let Ok(real) = p.canonicalize() {
        return Some(real);
    }
    let mut rest: Vec<&OsStr> = Vec::new();
    let mut base = p;
    loop {
        let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
            return None;
        };
        rest.push(name);
        base = parent;
        if let Ok(real) = base.canonicalize() {
            let mut out = real;
            for name in rest.iter().rev() {
                out.push(name);
            }
            let clean = out
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            return clean.then_some(out);
        }
    }
}
