//! The nested repositories' code when there is no snapshot after the step to diff (it failed:
//! the step filled the disk). Each nested `.git` is compared on disk with the tree before the
//! step, entry by entry, with ids computed as the snapshot computes them and nothing written to
//! the store; the list of what differs is the one a diff of two snapshots would give, so
//! [`nested_code_paths`] says what goes back, as after any step. Without a snapshot there is no
//! filtering either: a config the step changed goes back whole, and so does a replace-ref store
//! that gained a replace ref (a reftable changed at all). The object stores' own checks
//! ([`super::nested_object_refusals`]) need the snapshot and are not made here.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Stat};
use rustix::io::Errno;

use super::classify::{Class, REFTABLE_LIST, classify, is_object_store_path};
use super::nested::{nested_code_paths, only_comments, split_nested};
use super::nested_protected::{names_content, refusals};
use super::verify::packed_replace_refs;
use crate::beneath::{self, cstr, display_rel, join_rel, lstat, open_file, open_subdir};
use crate::chunk;
use crate::diff::EntryDiff;
use crate::error::{IoContext, Result};
use crate::graft::entry_at;
use crate::id::{ObjectId, ObjectKind};
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, Tree, TreeEntry, ZERO_ID};

/// The project-relative paths of the nested repositories `gits` (each a `.git`, found on disk)
/// to put back to their state in `before`: their code, and their index and refs when these
/// name other content for `protected_of(repo)` (relative to each repository's work tree
/// `repo`, as [`super::nested_protected_refusals`] asks it) than they did.
pub fn nested_code_on_disk(
    store: &Store,
    root: BorrowedFd<'_>,
    max_file_size: u64,
    before: &ObjectId,
    gits: &[Vec<u8>],
    protected_of: &mut dyn FnMut(Option<&str>) -> Vec<String>,
) -> Result<Vec<String>> {
    let mut walk = OnDisk {
        store,
        max_file_size,
        changes: Vec::new(),
        comments_only: HashMap::new(),
    };
    // A repository that cannot be compared (a directory the step made unreadable) goes back
    // whole: nothing of it is known to be the person's.
    let mut whole = BTreeSet::new();
    for git in gits {
        let old = entry_at(store, before, &display_rel(git))?;
        if walk.git_dir(root, git, old).is_err() {
            whole.insert(display_rel(git));
        }
    }
    let comments = |e: &TreeEntry| walk.comments_only.get(&e.id).copied().unwrap_or(false);
    let code = nested_code_paths(&walk.changes, &comments);
    let mut out: BTreeSet<String> = code.put_back.into_iter().chain(code.configs).collect();
    out.extend(whole);
    out.extend(walk.replace_ref_stores(root)?);
    let upper = |rel: &str| read_beneath(root, rel.as_bytes()).ok();
    let refused = refusals(store, before, &walk.changes, protected_of, &upper)?;
    out.extend(refused.into_iter().map(|d| d.path));
    Ok(out.into_iter().collect())
}

struct OnDisk<'a> {
    store: &'a Store,
    max_file_size: u64,
    /// What differs, as `diff_entries` would list it.
    changes: Vec<EntryDiff>,
    /// Whether the `info/exclude` files read hold only comments, by id.
    comments_only: HashMap<ObjectId, bool>,
}

/// How deep below a nested `.git` the walk goes (git's own layout is a few levels; refs a few
/// more): a directory deeper is taken as a marker, as the snapshot takes one too deep, so a
/// step cannot make the walk hold a descriptor per level until it fails.
const DEPTH: usize = 64;

/// Below a nested `.git`, what no check reads and the walk skips: the object store (its
/// alternates aside), which can be large, and the files every check takes as data (refs,
/// logs, the index…). A directory is still walked (`refs/replace/` is below `refs/`).
fn unread(rest: &str, dir: bool) -> bool {
    if rest == "objects" || rest == "objects/info" {
        return false;
    }
    if is_object_store_path(rest) {
        return true;
    }
    // What names content for the work tree is judged against its protected paths.
    let kept = rest == "packed-refs" || rest == REFTABLE_LIST || names_content(rest);
    !dir && !kept && matches!(classify(rest), Ok(class) if class != Class::Config)
}

impl OnDisk<'_> {
    /// The nested `.git` at `git` (a directory, or a pointer file or link) against `old`.
    fn git_dir(&mut self, root: BorrowedFd<'_>, git: &[u8], old: Option<TreeEntry>) -> Result<()> {
        let parent = beneath::parent_rel(git).unwrap_or_default();
        let at = Path::new(std::str::from_utf8(git).unwrap_or(".git"));
        let parent_fd = beneath::open_dir_rel(root, parent).at(at)?;
        let name = git.rsplit(|&b| b == b'/').next().unwrap_or(git);
        self.entry(parent_fd.as_fd(), name, git, "", old)
    }

    /// One entry, `name` in `dir`, at `rel` (`rest` below its `.git`), against `old`.
    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        rel: &[u8],
        rest: &str,
        old: Option<TreeEntry>,
    ) -> Result<()> {
        let at = Path::new(std::str::from_utf8(rel).unwrap_or("."));
        let c_name = cstr(name).at(at)?;
        let st = match lstat(dir, &c_name) {
            Ok(st) => Some(st),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(e).at(at),
        };
        let a_dir = st
            .as_ref()
            .is_some_and(|st| beneath::file_type(st) == FileType::Directory)
            || old.as_ref().is_some_and(|e| e.kind == EntryKind::Dir);
        if !rest.is_empty() && unread(rest, a_dir) {
            return Ok(());
        }
        let deep = too_deep_below(rest);
        let (new, sub) = match &st {
            Some(_) if deep => (Some(too_deep(name)), None),
            Some(st) => self.disk_entry(dir, &c_name, name, rest, st).at(at)?,
            None => (None, None),
        };
        let old = match old {
            Some(e) if e.kind == EntryKind::Dir && deep => Some(too_deep(name)),
            old => old,
        };
        let is_dir = |e: &Option<TreeEntry>| e.as_ref().is_some_and(|e| e.kind == EntryKind::Dir);
        if !is_dir(&old) && !is_dir(&new) {
            if old != new {
                self.changes.push(EntryDiff {
                    path: rel.to_vec(),
                    old,
                    new,
                });
            }
            return Ok(());
        }
        // As the diff lists it: a non-directory replaced by a directory (or the reverse) is
        // a delete and an add, a directory is an entry of its own only when empty.
        let old_tree = match &old {
            Some(e) if e.kind == EntryKind::Dir => self.store.read_tree(&e.id)?,
            _ => Tree::default(),
        };
        let names = match (&sub, is_dir(&new)) {
            (Some(fd), true) => beneath::read_names(fd.as_fd()).at(at)?,
            _ => Vec::new(),
        };
        if let Some(o) = old.as_ref().filter(|e| e.kind != EntryKind::Dir) {
            self.changes.push(EntryDiff {
                path: rel.to_vec(),
                old: Some(o.clone()),
                new: None,
            });
        }
        let empty_dir_change = match (&old, &new) {
            (Some(o), Some(n)) if is_dir(&old) && is_dir(&new) => {
                old_tree.entries.is_empty() && names.is_empty() && o.mode != n.mode
            }
            _ if is_dir(&old) => old_tree.entries.is_empty(),
            _ => is_dir(&new) && names.is_empty(),
        };
        if empty_dir_change {
            self.changes.push(EntryDiff {
                path: rel.to_vec(),
                old: old.clone().filter(|e| e.kind == EntryKind::Dir),
                new: new.clone().filter(|e| e.kind == EntryKind::Dir),
            });
        }
        if let Some(n) = new.as_ref().filter(|e| e.kind != EntryKind::Dir) {
            self.changes.push(EntryDiff {
                path: rel.to_vec(),
                old: None,
                new: Some(n.clone()),
            });
        }
        let mut all: BTreeSet<Vec<u8>> = names.iter().map(|n| n.to_bytes().to_vec()).collect();
        all.extend(old_tree.entries.iter().map(|e| e.name.clone()));
        for child in all {
            let child_rest = match rest {
                "" => String::from_utf8_lossy(&child).into_owned(),
                _ => format!("{rest}/{}", String::from_utf8_lossy(&child)),
            };
            let child_old = old_tree.get(&child).cloned();
            let child_rel = join_rel(rel, &child);
            match (&sub, is_dir(&new)) {
                (Some(fd), true) => {
                    self.entry(fd.as_fd(), &child, &child_rel, &child_rest, child_old)?;
                }
                _ => self.gone(&child_rel, &child_rest, child_old)?,
            }
        }
        Ok(())
    }

    /// `old` and everything below it are gone from the project.
    fn gone(&mut self, rel: &[u8], rest: &str, old: Option<TreeEntry>) -> Result<()> {
        let Some(old) = old else { return Ok(()) };
        if unread(rest, old.kind == EntryKind::Dir) {
            return Ok(());
        }
        if old.kind != EntryKind::Dir || too_deep_below(rest) {
            self.changes.push(EntryDiff {
                path: rel.to_vec(),
                old: Some(old),
                new: None,
            });
            return Ok(());
        }
        let tree = self.store.read_tree(&old.id)?;
        if tree.entries.is_empty() {
            self.changes.push(EntryDiff {
                path: rel.to_vec(),
                old: Some(old),
                new: None,
            });
        }
        for e in tree.entries {
            let child_rest = format!("{rest}/{}", String::from_utf8_lossy(&e.name));
            self.gone(&join_rel(rel, &e.name), &child_rest, Some(e))?;
        }
        Ok(())
    }

    /// The entry the snapshot would record for what `st` describes, and the directory opened
    /// when it is one.
    fn disk_entry(
        &mut self,
        dir: BorrowedFd<'_>,
        c_name: &std::ffi::CStr,
        name: &[u8],
        rest: &str,
        st: &Stat,
    ) -> rustix::io::Result<(Option<TreeEntry>, Option<OwnedFd>)> {
        let entry = |kind, mode, size, id| TreeEntry {
            name: name.to_vec(),
            kind,
            mode,
            size,
            id,
        };
        let size = st.st_size as u64;
        Ok(match beneath::file_type(st) {
            FileType::Directory => (
                Some(entry(EntryKind::Dir, st.st_mode & 0o777, 0, ZERO_ID)),
                Some(open_subdir(dir, c_name)?),
            ),
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(dir, c_name, Vec::new())?;
                let bytes = target.as_bytes();
                let id = ObjectId::of(ObjectKind::Blob, bytes);
                (
                    Some(entry(EntryKind::Symlink, 0, bytes.len() as u64, id)),
                    None,
                )
            }
            FileType::RegularFile if size > self.max_file_size => (
                Some(entry(
                    EntryKind::Marker(MarkerReason::TooLarge),
                    0,
                    size,
                    ZERO_ID,
                )),
                None,
            ),
            FileType::RegularFile => {
                let (id, size, bytes) = file_id(open_file(dir, c_name)?)?;
                if rest == "info/exclude" {
                    let comments = only_comments(bytes.as_deref().unwrap_or_default());
                    self.comments_only.insert(id, comments);
                }
                (
                    Some(entry(EntryKind::File, st.st_mode & 0o777, size, id)),
                    None,
                )
            }
            _ => (
                Some(entry(
                    EntryKind::Marker(MarkerReason::Special),
                    0,
                    0,
                    ZERO_ID,
                )),
                None,
            ),
        })
    }

    /// The nested `packed-refs` that gained a replace ref, and the reftables that changed at
    /// all (read as the step left them; the pre-step side from the store).
    fn replace_ref_stores(&self, root: BorrowedFd<'_>) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for change in &self.changes {
            let path = String::from_utf8_lossy(&change.path);
            let Some((git, rest)) = split_nested(&path) else {
                continue;
            };
            if rest == REFTABLE_LIST {
                out.push(format!("{git}/reftable"));
                continue;
            }
            if rest != "packed-refs" {
                continue;
            }
            let was = match &change.old {
                Some(e) if e.kind == EntryKind::File => self.store.read_file(&e.id)?,
                _ => Vec::new(),
            };
            let now = match &change.new {
                Some(_) => read_beneath(root, &change.path),
                None => Ok(Vec::new()),
            };
            // One that cannot be read goes back: it may hold anything.
            let none_new = now
                .is_ok_and(|now| packed_replace_refs(&now).is_subset(&packed_replace_refs(&was)));
            if !none_new {
                out.push(path.into_owned());
            }
        }
        Ok(out)
    }
}

/// Whether `rest` (below a `.git`) is deeper than the walk goes.
fn too_deep_below(rest: &str) -> bool {
    rest.split('/').count() > DEPTH
}

/// What stands for a directory deeper than [`DEPTH`] below its `.git`.
fn too_deep(name: &[u8]) -> TreeEntry {
    TreeEntry {
        name: name.to_vec(),
        kind: EntryKind::Marker(MarkerReason::TooDeep),
        mode: 0,
        size: 0,
        id: ZERO_ID,
    }
}

/// A file's id and size as the snapshot computes them (one blob, or the list of its
/// content-defined chunks above [`chunk::CHUNK_THRESHOLD`]), without storing anything; and its
/// bytes when it is one blob.
fn file_id(fd: OwnedFd) -> rustix::io::Result<(ObjectId, u64, Option<Vec<u8>>)> {
    let mut file = std::fs::File::from(fd);
    let mut head = Vec::new();
    (&mut file)
        .take(chunk::CHUNK_THRESHOLD + 1)
        .read_to_end(&mut head)
        .map_err(io_errno)?;
    if head.len() as u64 <= chunk::CHUNK_THRESHOLD {
        let size = head.len() as u64;
        return Ok((ObjectId::of(ObjectKind::Blob, &head), size, Some(head)));
    }
    let size = std::cell::Cell::new(0u64);
    let id = chunk::store_chunked(head.as_slice().chain(&mut file), |kind, bytes| {
        if kind == ObjectKind::Blob {
            size.set(size.get() + bytes.len() as u64);
        }
        Ok(Some(ObjectId::of(kind, bytes)))
    })
    .map_err(|_| Errno::IO)?
    .unwrap_or(ZERO_ID);
    Ok((id, size.get(), None))
}

fn io_errno(e: std::io::Error) -> Errno {
    e.raw_os_error().map_or(Errno::IO, Errno::from_raw_os_error)
}

/// The file at `rel` beneath `root`, never through a link.
fn read_beneath(root: BorrowedFd<'_>, rel: &[u8]) -> Result<Vec<u8>> {
    let at = Path::new(std::str::from_utf8(rel).unwrap_or("."));
    let parent =
        beneath::open_dir_rel(root, beneath::parent_rel(rel).unwrap_or_default()).at(at)?;
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    let fd = open_file(parent.as_fd(), &cstr(name).at(at)?).at(at)?;
    let mut out = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut out).at(at)?;
    Ok(out)
}
