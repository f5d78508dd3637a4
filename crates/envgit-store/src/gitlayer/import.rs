//! The after-step import: walk the upper layer iteratively without following links, and bring
//! into the host's `.git` only regular files of a data class (see `classify`), refs
//! compare-and-swap, config through the allow-list, objects for what their content is.
//! Whiteouts delete data paths only.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::classify::{
    Class, REFTABLE_LIST, SHALLOW, classify, is_leftover, is_object_store_path, is_shared_index,
    names_commits, shallow_ids, valid_head, valid_tables_list,
};
use super::verify::{self, lfs_matches, loose_matches};
use super::{config, write};
use crate::beneath::{lstat, open_dir_rel, open_file, read_names};

/// Git's index, beneath `.git`.
const INDEX: &str = "index";

/// One path (or config key) not imported, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dropped {
    pub path: String,
    pub why: String,
}

/// What one import did.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct GitImport {
    pub imported: Vec<String>,
    pub removed: Vec<String>,
    pub dropped: Vec<Dropped>,
    /// Refs the host changed since the step began: the host's value was kept.
    pub conflicts: Vec<Dropped>,
}

/// The host's `.git` as the step began: every ref file, `packed-refs`, `HEAD` and the index
/// as they were (absent = not there), and the config's text. Saved beside the layer so a
/// crash leaves what the import needs.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreStep {
    /// Each file's [`stat_mark`] when it had been still for [`STILL_FOR_NS`] as the step
    /// began, else its content's hash (as every file was known before: an older layer's state
    /// still reads).
    pub hashes: BTreeMap<String, String>,
    pub config: Vec<u8>,
    /// Each upper path as the last import found it (inode, size, mtime, mode): a path whose
    /// fingerprint has not changed is neither read again nor reported again, so a session's
    /// imports cost what changed, and a dropped hook is said once.
    #[serde(default)]
    pub seen: BTreeMap<String, String>,
    /// Placeholders standing in for credentials in the config the sandbox sees: a key set to a
    /// value holding one is never imported (the host's real value stays).
    #[serde(default)]
    pub placeholders: Vec<String>,
    /// The paths the run protects (project-relative; `*` a name at the top): the step's
    /// index, refs and `HEAD` may not change what the host's git holds for them
    /// (`protected`).
    #[serde(default)]
    pub protected: Vec<String>,
}

fn hash(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// A compare-and-swap file whose inode has not changed for this long before the step began is
/// known by its stat data, not by its content: reading and hashing the index at every step
/// cost 1.6-6 ms in a 20,000-file repository. Anything that writes the file, in place or by
/// git's lock and rename, gives it a new ctime (which nothing can set back) or a new inode; a
/// file changed within this margin could change again in the same clock tick with the same
/// stamps (git's racy-timestamp case), so it is hashed. Two seconds cover coarse filesystem
/// clocks as the store's stat index does.
const STILL_FOR_NS: i64 = 2_000_000_000;

/// What a [`stat_mark`] begins with: a hash is hex and never does.
const STAT_MARK: &str = "stat:";

/// A file's identity and stamps: device, inode, size, mtime and ctime.
fn stat_mark(st: &rustix::fs::Stat) -> String {
    format!(
        "{STAT_MARK}{}:{}:{}:{}.{}:{}.{}",
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime,
        st.st_mtime_nsec,
        st.st_ctime,
        st.st_ctime_nsec
    )
}

/// The metadata of `rel` beneath `root`, never through a symlink; `None` when absent or
/// unreachable.
pub(super) fn stat_beneath(root: BorrowedFd<'_>, rel: &str) -> Option<rustix::fs::Stat> {
    let (dir, name) = match rel.rsplit_once('/') {
        Some((_, name)) => (Some(write::parent(root, rel, false).ok()?), name),
        None => (None, rel),
    };
    let name = std::ffi::CString::new(name).ok()?;
    let dir = dir.as_ref().map_or(root, |d| d.as_fd());
    lstat(dir, &name).ok()
}

fn open_git(path: &Path) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// One non-directory entry of a walk: its path, its type (a whiteout is a character device),
/// and its fingerprint.
struct Found {
    rel: String,
    ft: FileType,
    fingerprint: String,
    st: rustix::fs::Stat,
}

/// Every non-directory entry below `top` ('/'-relative to `root`), iteratively, without
/// following links.
fn files_below(root: BorrowedFd<'_>, top: &str) -> Vec<Found> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_string()];
    while let Some(rel) = stack.pop() {
        let Ok(dir) = open_dir_rel(root, rel.as_bytes()) else {
            continue;
        };
        for name in read_names(dir.as_fd()).unwrap_or_default() {
            let Ok(st) = lstat(dir.as_fd(), &name) else {
                continue;
            };
            let n = name.to_string_lossy();
            let child = if rel.is_empty() {
                n.to_string()
            } else {
                format!("{rel}/{n}")
            };
            let ft = FileType::from_raw_mode(st.st_mode);
            if ft == FileType::Directory {
                stack.push(child);
                continue;
            }
            let whiteout = ft == FileType::CharacterDevice && st.st_rdev == 0;
            out.push(Found {
                rel: child,
                ft: if whiteout {
                    FileType::CharacterDevice
                } else {
                    ft
                },
                fingerprint: format!(
                    "{}:{}:{}.{}:{:o}",
                    st.st_ino, st.st_size, st.st_mtime, st.st_mtime_nsec, st.st_mode
                ),
                st,
            });
        }
    }
    out
}

impl PreStep {
    /// Record the host's `.git` before a step.
    pub fn capture(git_dir: &Path) -> std::io::Result<Self> {
        Self::capture_still_for(git_dir, STILL_FOR_NS)
    }

    /// [`Self::capture`], with files still for `still_ns` known by their stat data (a test's
    /// shorter margin).
    #[doc(hidden)]
    pub fn capture_still_for(git_dir: &Path, still_ns: i64) -> std::io::Result<Self> {
        let root = open_git(git_dir)?;
        let still_since = crate::worktree::now_ns().saturating_sub(still_ns);
        let mut pre = Self::default();
        let mut known: Vec<(String, Option<rustix::fs::Stat>)> =
            ["HEAD", INDEX, "packed-refs", REFTABLE_LIST, SHALLOW]
                .into_iter()
                .map(|n| (n.to_string(), stat_beneath(root.as_fd(), n)))
                .collect();
        known.extend(
            files_below(root.as_fd(), "refs")
                .into_iter()
                .filter(|f| f.ft == FileType::RegularFile)
                .map(|f| (f.rel, Some(f.st))),
        );
        for (n, st) in known {
            let still = st.filter(|st| {
                FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && st
                        .st_ctime
                        .saturating_mul(1_000_000_000)
                        .saturating_add(i64::try_from(st.st_ctime_nsec).unwrap_or(0))
                        < still_since
            });
            if let Some(st) = still {
                pre.hashes.insert(n, stat_mark(&st));
            } else if st.is_some()
                && let Ok(Some(data)) = write::read(root.as_fd(), &n)
            {
                pre.hashes.insert(n, hash(&data));
            }
        }
        pre.config = write::read(root.as_fd(), "config")?.unwrap_or_default();
        Ok(pre)
    }
}

/// Import `upper` (the overlay's upper directory over `git_dir`) into `git_dir`. `pre` is
/// updated to what was imported, so a session's next import compares against it. The
/// protected paths are on disk as they were before the step (see [`import_beside`]).
pub fn import(git_dir: &Path, upper: &Path, pre: &mut PreStep) -> std::io::Result<GitImport> {
    import_beside(git_dir, upper, pre, &mut || {}, &|_| true)
}

/// [`import`] beside the put-back of the protected paths: `put_back` returns once they are
/// back on disk as they were before the step. Called (at most once) only when an index entry
/// or a commit of the step's holds other content for a protected path than the pre-step
/// index, to see whether that content is the file's own. `existed_before` says whether the
/// project held a directory before the step: a protected name below the root (`**/.vscode`)
/// is put back after the import only in one that did, so a commit may hold the step's own
/// only in one that did not (unknown: `true`).
pub fn import_beside(
    git_dir: &Path,
    upper: &Path,
    pre: &mut PreStep,
    put_back: &mut dyn FnMut(),
    existed_before: &dyn Fn(&[u8]) -> bool,
) -> std::io::Result<GitImport> {
    let root = open_git(git_dir)?;
    let up = open_git(upper)?;
    let mut rep = GitImport::default();
    let mut work: Vec<(Class, String, bool)> = Vec::new();
    // An object of the step's the host did not take: refs, `HEAD` and the index that may name
    // it are not taken either (a branch naming a missing commit breaks the host's `git log`).
    let mut objects_refused = false;
    // Before any object arrives: after, the host would have every commit the step brought.
    let shallow_refused = shallow_refusal(git_dir, root.as_fd(), up.as_fd());
    for Found {
        rel,
        ft,
        fingerprint,
        ..
    } in files_below(up.as_fd(), "")
    {
        // Handled by an earlier import and not touched since.
        if pre.seen.get(&rel) == Some(&fingerprint) {
            continue;
        }
        pre.seen.insert(rel.clone(), fingerprint);
        if is_leftover(&rel) {
            continue;
        }
        let whiteout = ft == FileType::CharacterDevice;
        match classify(&rel) {
            // The host's git rebuilds it from the objects; the step's copy is never taken.
            Ok(Class::Derived) => {}
            // Removed inside (`git gc`, a repack, a compaction): the host keeps its copy until
            // its own git retires it. A step never removes an object from the host.
            Ok(Class::Object | Class::Loose | Class::LfsObject | Class::Pack) if whiteout => {}
            Ok(Class::Pack) if ft == FileType::RegularFile => {
                objects_refused |= !import_pack(git_dir, root.as_fd(), up.as_fd(), &rel, &mut rep);
            }
            Ok(c) if ft == FileType::RegularFile || whiteout => work.push((c, rel, whiteout)),
            Ok(_) => rep.dropped.push(Dropped {
                path: rel,
                why: "only regular files are imported (a link or special file is never)".into(),
            }),
            Err(why) => {
                // A file copied up unchanged (a chmod, a rewrite with the same bytes) is no news.
                if !whiteout && same_as_host(root.as_fd(), up.as_fd(), &rel) {
                    continue;
                }
                // A directory of the object store emptied inside (`git gc` packing the loose
                // objects of `objects/78`): the host keeps its objects, as for each one.
                if whiteout && is_object_store_path(&rel) {
                    continue;
                }
                rep.dropped.push(Dropped {
                    path: rel,
                    why: why.into(),
                });
            }
        }
    }
    // Objects first, so no ref ever names an object the host lacks; HEAD last.
    work.sort();
    // Why the step's index, refs and `HEAD` stay out: they change a protected path behind the
    // working tree. Judged once, when the first of them comes (the objects are in by then).
    // The pseudo-refs and reflogs, which name commits too, come with them.
    let mut protected_refused: Option<Option<String>> = None;
    for (class, rel, whiteout) in work.clone() {
        if class == Class::Config {
            if !whiteout {
                import_config(git_dir, up.as_fd(), pre, &mut rep);
            }
            continue;
        }
        let names_refs = matches!(class, Class::Cas | Class::Head)
            || (class == Class::Data && names_commits(&rel));
        if objects_refused && names_refs {
            rep.dropped.push(Dropped {
                path: rel,
                why: "an object of the step's was refused, and this may name it".into(),
            });
            continue;
        }
        if names_refs
            && let Some(why) = protected_refused.get_or_insert_with(|| {
                let upper = |rel: &str| upper_file(up.as_fd(), rel).ok();
                super::protected::refusal(
                    git_dir,
                    root.as_fd(),
                    &upper,
                    &work,
                    &pre.protected,
                    put_back,
                    existed_before,
                )
            })
        {
            rep.dropped.push(Dropped {
                path: rel,
                why: why.clone(),
            });
            continue;
        }
        if rel == SHALLOW
            && !whiteout
            && let Some(why) = &shallow_refused
        {
            rep.dropped.push(Dropped {
                path: rel,
                why: why.clone(),
            });
            continue;
        }
        let sides = Sides {
            git_dir,
            root: root.as_fd(),
            up: up.as_fd(),
        };
        let dropped = rep.dropped.len();
        one(&sides, class, &rel, whiteout, pre, &mut rep);
        objects_refused |= class == Class::Loose
            && rep.dropped.len() > dropped
            && !write::exists(root.as_fd(), &rel);
    }
    Ok(rep)
}

/// Why the step's `shallow` may not be imported: it names a commit the host already has (its
/// history would vanish behind it), or a line that is no object id. A `git fetch --deepen`
/// names only commits it fetched; `--unshallow` removes the file.
fn shallow_refusal(git_dir: &Path, root: BorrowedFd<'_>, up: BorrowedFd<'_>) -> Option<String> {
    let new = upper_file(up, SHALLOW).ok()?;
    let Some(after) = shallow_ids(&new) else {
        return Some("it is not a list of object ids".into());
    };
    let cur = write::read(root, SHALLOW)
        .ok()
        .flatten()
        .unwrap_or_default();
    let before = shallow_ids(&cur).unwrap_or_default();
    let gained: BTreeSet<String> = after.difference(&before).cloned().collect();
    if gained.is_empty() {
        return None;
    }
    match verify::host_has(git_dir, &gained) {
        Ok(has) if has.is_empty() => None,
        Ok(_) => Some(verify::SHALLOW_REFUSAL.into()),
        Err(why) => Some(why),
    }
}

/// A pack from the step, indexed by the host's git (see `verify`); one the host has by that
/// name is the same pack (its name is its checksum) and is left as it is. Whether the host
/// has it now.
fn import_pack(
    git_dir: &Path,
    root: BorrowedFd<'_>,
    up: BorrowedFd<'_>,
    rel: &str,
    rep: &mut GitImport,
) -> bool {
    if write::exists(root, rel) {
        return true;
    }
    match super::verify::index_pack(git_dir, root, up, rel) {
        Ok(hash) => {
            rep.imported.push(format!("objects/pack/pack-{hash}.pack"));
            true
        }
        Err(why) => {
            rep.dropped.push(Dropped {
                path: rel.into(),
                why,
            });
            false
        }
    }
}

fn same_as_host(root: BorrowedFd<'_>, up: BorrowedFd<'_>, rel: &str) -> bool {
    matches!((write::read(root, rel), upper_file(up, rel)), (Ok(Some(a)), Ok(b)) if a == b)
}

/// A regular file of the upper layer with a single link (a hard link into elsewhere is not
/// imported).
fn upper_file(up: BorrowedFd<'_>, rel: &str) -> std::io::Result<Vec<u8>> {
    let dir = write::parent(up, rel, false)?;
    let name = crate::beneath::cstr(rel.rsplit('/').next().unwrap_or(rel).as_bytes())?;
    let fd = open_file(dir.as_fd(), &name)?;
    if rustix::fs::fstat(&fd)?.st_nlink != 1 {
        return Err(std::io::Error::other("a hard link"));
    }
    Ok(write::read_fd(fd)?)
}

/// The host's `.git` (by path and open) and the step's upper layer over it.
struct Sides<'a> {
    git_dir: &'a Path,
    root: BorrowedFd<'a>,
    up: BorrowedFd<'a>,
}

fn one(
    sides: &Sides<'_>,
    class: Class,
    rel: &str,
    whiteout: bool,
    pre: &mut PreStep,
    rep: &mut GitImport,
) {
    let Sides { git_dir, root, up } = *sides;
    let drop = |rep: &mut GitImport, why: String| {
        rep.dropped.push(Dropped {
            path: rel.into(),
            why,
        })
    };
    let new = if whiteout {
        None
    } else {
        match upper_file(up, rel) {
            Ok(d) => Some(d),
            Err(e) => return drop(rep, format!("not a plain file: {e}")),
        }
    };
    if class == Class::Head && new.as_deref().is_some_and(|d| !valid_head(d)) {
        return drop(
            rep,
            "HEAD is neither `ref: refs/...` nor an object id".into(),
        );
    }
    if rel == REFTABLE_LIST && new.as_deref().is_some_and(|d| !valid_tables_list(d)) {
        return drop(
            rep,
            "tables.list names a file that is not a reftable table".into(),
        );
    }
    // An index (or a split index's shared part) holding a path git itself never lets into
    // one: the host's `git restore` would write its blob there (`.git/hooks/pre-commit`).
    if (rel == INDEX || is_shared_index(rel))
        && let Some(d) = new.as_deref()
    {
        let shared = |hex: &str| {
            let rel = format!("sharedindex.{hex}");
            upper_file(up, &rel)
                .ok()
                .or_else(|| write::read(root, &rel).ok().flatten())
        };
        let none = |_: &str| None;
        let shared: &dyn Fn(&str) -> Option<Vec<u8>> = if rel == INDEX { &shared } else { &none };
        let config = write::read(root, "config").ok().flatten();
        let sizes = super::index::hash_sizes(config.as_deref());
        if let Some(why) = super::index::refusal(d, sizes, shared) {
            return drop(rep, why);
        }
    }
    let cur = match write::read(root, rel) {
        Ok(c) => c,
        Err(e) => return drop(rep, format!("the host's copy is not a plain file: {e}")),
    };
    // Git's racy-timestamp rule reads the index's time: a file it lists that is not older than
    // the index is read again at every `git status`, and git rewrites the index to end that.
    // The index arrives with the time git gave it inside, even when its bytes did not change.
    let index_time = (rel == INDEX && !whiteout)
        .then(|| write::mtime(up, rel).ok())
        .flatten();
    if cur == new {
        if let Some(t) = index_time {
            // Best effort: left as it was, git reads the listed files again, as before.
            let _ = write::advance_mtime(root, rel, t);
        }
        return;
    }
    if class == Class::Loose && !new.as_deref().is_some_and(|d| loose_matches(rel, d)) {
        return drop(rep, verify::LOOSE_REFUSAL.into());
    }
    if class == Class::LfsObject && !new.as_deref().is_some_and(|d| lfs_matches(rel, d)) {
        return drop(rep, verify::LFS_REFUSAL.into());
    }
    if matches!(class, Class::Object | Class::Loose | Class::LfsObject) && cur.is_some() {
        // An object is named by its content: one the host has is never rewritten (a write
        // through it inside, say a hard link `clone --local` made, stays in the layer).
        return drop(
            rep,
            "the host already has this object; objects are never rewritten".into(),
        );
    }
    if matches!(class, Class::Cas | Class::Head) {
        let unchanged = match pre.hashes.get(rel) {
            Some(mark) if mark.starts_with(STAT_MARK) => {
                stat_beneath(root, rel).is_some_and(|st| stat_mark(&st) == *mark)
            }
            before => cur.as_deref().map(hash).as_ref() == before,
        };
        if !unchanged {
            rep.conflicts.push(Dropped {
                path: rel.into(),
                why: "the host changed it during the step; its value was kept".into(),
            });
            return;
        }
    }
    if let Err(why) = no_new_replace_refs(git_dir, root, rel, cur.as_deref(), new.as_deref()) {
        return drop(rep, why);
    }
    let r = match &new {
        Some(d) => write::write(
            root,
            rel,
            d,
            matches!(class, Class::Object | Class::Loose | Class::LfsObject),
            index_time,
        ),
        None => write::remove(root, rel),
    };
    match r {
        Ok(()) => match &new {
            Some(d) => {
                pre.hashes.insert(rel.into(), hash(d));
                rep.imported.push(rel.into());
            }
            None => {
                pre.hashes.remove(rel);
                rep.removed.push(rel.into());
            }
        },
        Err(e) => drop(rep, format!("writing it failed: {e}")),
    }
}

/// A ref store's new content (`packed-refs`, reftable's `tables.list`) that adds or changes a
/// replace ref is refused: loose ones are never imported (`classify`).
fn no_new_replace_refs(
    git_dir: &Path,
    root: BorrowedFd<'_>,
    rel: &str,
    cur: Option<&[u8]>,
    new: Option<&[u8]>,
) -> Result<(), String> {
    let Some(new) = new else {
        return Ok(());
    };
    let (before, after) = match rel {
        "packed-refs" => (
            verify::packed_replace_refs(cur.unwrap_or_default()),
            verify::packed_replace_refs(new),
        ),
        REFTABLE_LIST => (
            verify::host_replace_refs(git_dir)?,
            verify::reftable_replace_refs(new, |name| {
                write::read(root, &format!("reftable/{name}"))
                    .ok()
                    .flatten()
                    .ok_or_else(|| format!("it names reftable/{name}, which is not there"))
            })?,
        ),
        _ => return Ok(()),
    };
    if after.is_subset(&before) {
        Ok(())
    } else {
        Err(verify::REPLACE_REFUSAL.into())
    }
}

fn import_config(git_dir: &Path, up: BorrowedFd<'_>, pre: &mut PreStep, rep: &mut GitImport) {
    let after_text = match upper_file(up, "config") {
        Ok(t) => t,
        Err(e) => {
            rep.dropped.push(Dropped {
                path: "config".into(),
                why: format!("not a plain file: {e}"),
            });
            return;
        }
    };
    let (before, after) = match (config::read(&pre.config), config::read(&after_text)) {
        (Ok(b), Ok(a)) => (b, a),
        (_, Err(e)) | (Err(e), _) => {
            rep.dropped.push(Dropped {
                path: "config".into(),
                why: format!("git cannot read it: {e}"),
            });
            return;
        }
    };
    let host = git_dir.join("config");
    for key in config::changed(&before, &after) {
        let path = format!("config {key}");
        if let Some(why) = config::refusal(&key, &before, &after) {
            rep.dropped.push(Dropped {
                path,
                why: why.into(),
            });
            continue;
        }
        let values = after.get(&key).cloned().unwrap_or_default();
        let holds_placeholder = values
            .iter()
            .flatten()
            .any(|v| pre.placeholders.iter().any(|p| v.contains(p.as_str())));
        if holds_placeholder {
            rep.dropped.push(Dropped {
                path,
                why: "its value holds a credential placeholder; the host keeps its own value"
                    .into(),
            });
            continue;
        }
        match config::apply(&host, &key, &values) {
            Ok(()) => rep.imported.push(path),
            Err(e) => rep.dropped.push(Dropped {
                path,
                why: e.to_string(),
            }),
        }
    }
    pre.config = after_text; // the next import reports only new changes
}
