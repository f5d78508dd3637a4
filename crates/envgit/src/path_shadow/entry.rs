//! One directory of a search path (`PATH`, `LD_LIBRARY_PATH`): the host's, or one a step can
//! write, found below its writable root without leaving it.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use envgit_store::beneath::open_dir_beneath_through_links as open_through_links;
use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;

/// One directory of a search path.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(super) enum Entry {
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

impl Entry {
    pub(super) fn is_writable(&self) -> bool {
        matches!(self, Entry::Writable { .. })
    }
}

/// Where `rel` below `root` is now: the directory, a link out of the root, or nothing.
pub(super) enum Found {
    Dir(OwnedFd),
    Escapes,
    Missing,
}

/// The directory `rel` below `root` as the search would reach it now.
pub(super) fn find(root: &Path, rel: &[u8]) -> Found {
    let Ok(root_fd) = envgit_store::beneath::open_root(root) else {
        return Found::Missing;
    };
    match open_through_links(root_fd.as_fd(), rel) {
        Ok(dir) => Found::Dir(dir),
        Err(Errno::XDEV) => Found::Escapes,
        Err(_) => Found::Missing,
    }
}

/// Removes the first link on the way down `rel` from `root` that leads out of `root`; returns
/// its path below `rel`'s root.
pub(super) fn remove_escaping_link(root: &Path, rel: &[u8]) -> Option<Vec<u8>> {
    let root_fd = envgit_store::beneath::open_root(root).ok()?;
    let root = root_fd.as_fd();
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
            if let Ok(next) = open_through_links(root, &walked) {
                // This link stays below the root; the escape is further down.
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

pub(super) fn shown_below(root: &Path, shown: &str, link: &[u8]) -> String {
    // `shown` names the whole directory; the link is a prefix of it below `root`.
    if Path::new(shown).is_absolute() {
        root.join(OsStr::from_bytes(link)).display().to_string()
    } else {
        String::from_utf8_lossy(link).into_owned()
    }
}

/// The entry for the search path's directory `abs`: writable when its path, as written or resolved,
/// is below one of `roots` (the first is the project's); `None` when it cannot be resolved.
pub(super) fn classify(abs: &Path, roots: &[PathBuf], project: &Path) -> Option<Entry> {
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
    let escaped_at_start = match find(root, &rel) {
        Found::Escapes => identity(root, &rel),
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
pub(super) fn identity(root: &Path, rel: &[u8]) -> Option<(u64, u64)> {
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

pub(super) fn same_entry(a: &Entry, b: &Entry) -> bool {
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
/// a search path that does not exist yet, which a step can make). `None` for a rest with `..`.
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
