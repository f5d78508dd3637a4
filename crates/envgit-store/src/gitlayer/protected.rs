//! The protected paths behind the working tree. The put-back keeps a protected file on disk
//! as it was, but the host's git writes what its index and its commits hold for that path
//! (`git restore`, `git stash`, `git reset --hard`, `git checkout <branch>`): an index entry
//! or a commit the step made with other content for `.husky/pre-commit` would plant the
//! step's hook all the same. So an index from the step must keep the protected paths' entries
//! of the host's index as it was before the step, and every ref (or detached `HEAD`) the step
//! moved must name a commit whose protected paths hold what that index held (or what the
//! ref's previous commit held): otherwise the step's refs, `HEAD` and index stay out together.
//! What git keeps beside the refs names commits the same way (`git reset --hard ORIG_HEAD`,
//! `HEAD@{1}`, `FETCH_HEAD`): each id on a pseudo-ref's or reflog's new line is judged as a
//! ref's commit is (against what its ref held), and those files stay out with the refs.
//!
//! The reference is the pre-step index, not the file on disk: the put-back runs beside the
//! import (the disk is not yet the pre-step state while the import reads it), and a person's
//! own unstaged edit of a protected file must not make every later `git add` of the step's
//! refused. What the index held before the step is what the person's git would already
//! write; anything else the step chose.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, BorrowedFd};

use sha1::Digest;
use std::path::Path;

use super::cache_tree;
use super::classify::{Class, REFTABLE_LIST, names_commits, valid_tables_list};
use super::index::{self, ProtectedView, is_protected};
use super::verify;
use super::write;

/// A path's entry in a commit or at stage 0 of an index: mode and object id (hex).
type Entries = BTreeMap<Vec<u8>, (u32, String)>;

/// The step's index, refs and `HEAD` to be written (`work`: class, path below `.git`,
/// whiteout), judged against `protected`: why they stay out, or `None`. `upper` reads a file
/// of the step's (regular files only), `root` is the host's `.git`, whose objects already
/// include the step's.
pub fn refusal(
    git_dir: &Path,
    root: BorrowedFd<'_>,
    upper: &dyn Fn(&str) -> Option<Vec<u8>>,
    work: &[(Class, String, bool)],
    protected: &[String],
    put_back: &mut dyn FnMut(),
    existed_before: &dyn Fn(&[u8]) -> bool,
) -> Option<String> {
    if protected.is_empty() {
        return None;
    }
    let project = git_dir
        .parent()
        .and_then(|p| crate::beneath::open_root(p).ok());
    // An entry for a protected path holding what its file holds once the put-back is done
    // (what it held before the step) is the person's own content (an untracked `.envrc` a
    // `git add -A` staged). Waited for only when an entry differs from the pre-step index.
    let put_back = std::cell::RefCell::new(Some(put_back));
    let holds = |path: &[u8], mode: u32, oid: &str| {
        if let Some(wait) = put_back.borrow_mut().take() {
            wait();
        }
        project
            .as_ref()
            .is_some_and(|root| disk_holds(root.as_fd(), path, mode, oid))
    };
    let host = |rel: &str| write::read(root, rel).ok().flatten();
    let reftable_before = || {
        Ok((
            verify::host_refs(git_dir, "")?,
            verify::host_named(git_dir)?,
        ))
    };
    let sides = Sides {
        git_dir,
        host: &host,
        upper,
        reftable_before: &reftable_before,
        holds: &holds,
        existed_before,
    };
    judge(&sides, work, protected)
}

/// The refs (`<id> <name>` lines) and the ids the refs, `HEAD` and the reflogs name
/// (`verify::host_named`) of a reftable repository before the step.
pub(super) type ReftableBefore = (BTreeSet<String>, BTreeSet<String>);

/// Where [`judge`] reads a repository on each side of the step: the project's own `.git`
/// (the host's directory and the layer's upper), or a repository nested in the project (the
/// snapshots before and after the step).
pub(super) struct Sides<'a> {
    /// The repository's `.git` as the host's git reads commits there: its objects hold the
    /// step's.
    pub git_dir: &'a Path,
    /// A file below `.git` as it was before the step.
    pub host: &'a dyn Fn(&str) -> Option<Vec<u8>>,
    /// A file below `.git` as the step left it (regular files only).
    pub upper: &'a dyn Fn(&str) -> Option<Vec<u8>>,
    /// [`ReftableBefore`], read when the step changed a reftable.
    pub reftable_before: &'a dyn Fn() -> Result<ReftableBefore, String>,
    /// Whether the work tree's file at `path` (relative to it) holds the blob `oid` with
    /// `mode` once the put-back is done.
    pub holds: &'a dyn Fn(&[u8], u32, &str) -> bool,
    /// Whether the work tree's directory `dir` was there before the step.
    pub existed_before: &'a dyn Fn(&[u8]) -> bool,
}

/// [`refusal`] for a repository read through `sides`.
pub(super) fn judge(
    sides: &Sides<'_>,
    work: &[(Class, String, bool)],
    protected: &[String],
) -> Option<String> {
    if protected.is_empty() {
        return None;
    }
    let Sides {
        git_dir,
        host,
        upper,
        reftable_before,
        holds,
        existed_before,
    } = *sides;
    let on_disk = |path: &[u8], (mode, oid): &(u32, String)| holds(path, *mode, oid);
    let protected_paths = index::ProtectedPaths::new(protected);
    // A commit's tree is read for the paths at the root; the names below it
    // (`index::BELOW_ROOT`) are found among what the commit changed.
    let at_root: Vec<String> = protected
        .iter()
        .filter(|p| !p.starts_with(index::BELOW_ROOT))
        .cloned()
        .collect();
    let root_paths = index::ProtectedPaths::new(&at_root);
    // Whether the step's entry `v` for the protected `path` is the person's or its own work:
    // at the root, what the file holds once the put-back is done; below it, where the names
    // are put back after the import and only in a directory that was there, any in a
    // directory the step made (a scaffold), none elsewhere. Removing one plants nothing.
    let fine = |path: &[u8], v: Option<&(u32, String)>| {
        if root_paths.contains(path) {
            v.is_some_and(|v| on_disk(path, v))
        } else if let Some(dir) = protected_paths.below_dir(path) {
            v.is_none() || !existed_before(dir)
        } else {
            false
        }
    };
    let host_shared = |hex: &str| host(&format!("sharedindex.{hex}"));
    let step_shared = |hex: &str| {
        let rel = format!("sharedindex.{hex}");
        upper(&rel).or_else(|| host(&rel))
    };
    // The host's index as the step began (a host that changed it meanwhile keeps its own: the
    // compare-and-swap refuses the step's).
    let sizes = index::hash_sizes(host("config").as_deref());
    let before: Vec<ProtectedView> = host("index")
        .map(|d| {
            index::protected_entries(&d, sizes, &host_shared, &protected_paths).unwrap_or_default()
        })
        .unwrap_or_default();
    let mut targets: Vec<(String, String, Option<String>)> = Vec::new();
    // The trees of the step's index as judged below (its valid root cache-tree node, the tree
    // its entries make): a commit of one of these holds what that index holds.
    let mut judged_trees: BTreeSet<String> = BTreeSet::new();
    // What an index the host did not have (or could not read) holds: nothing.
    let no_index = ProtectedView::default();
    for (class, rel, whiteout) in work {
        if *whiteout {
            continue;
        }
        match (class, rel.as_str()) {
            (Class::Cas, "index") => {
                let Some(new) = upper("index") else { continue };
                // An index git itself could not have written is refused on its own (`one`),
                // and its refs need not stay out with it.
                if index::refusal(&new, sizes, &step_shared).is_some() {
                    continue;
                }
                let after =
                    match index::protected_entries(&new, sizes, &step_shared, &protected_paths) {
                        Ok(a) => a,
                        Err(why) => return Some(format!("git cannot read the index: {why}")),
                    };
                // Judged against the pre-step index read the same way (an index the host could
                // not read counts as holding no protected entry).
                for a in &after {
                    if before.contains(a) {
                        judged_trees.extend(a.cache_tree.get(&b""[..]).map(|(_, t)| t.clone()));
                        continue;
                    }
                    let b = before.first().unwrap_or(&no_index);
                    let changed = first_difference(&b.entries, &a.entries, |(path, stage), v| {
                        *stage == 0 && fine(path, v)
                    });
                    if let Some((path, _)) = changed {
                        return Some(index_refusal(&path));
                    }
                    // git's commit takes a valid cache-tree node's tree without reading the
                    // entries below it: each node the step changed must be the tree they make.
                    if a.cache_tree != b.cache_tree {
                        let entries = match index::all_entries(&new, a.hashsz, &step_shared) {
                            Ok(e) => e,
                            Err(why) => return Some(format!("git cannot read the index: {why}")),
                        };
                        if let Some(why) =
                            cache_tree::lie(&entries, &a.cache_tree, &b.cache_tree, a.hashsz)
                        {
                            return Some(why);
                        }
                    }
                    judged_trees.extend(a.cache_tree.get(&b""[..]).map(|(_, t)| t.clone()));
                }
            }
            (Class::Cas, "packed-refs") => {
                let new = upper(rel).unwrap_or_default();
                let old = packed(&host(rel).unwrap_or_default());
                for (name, id) in packed(&new) {
                    // Replace refs are refused on their own (`no_new_replace_refs`).
                    if old.get(&name) != Some(&id) && !name.starts_with("refs/replace/") {
                        targets.push((name.clone(), id, old.get(&name).cloned()));
                    }
                }
            }
            (Class::Cas, REFTABLE_LIST) => {
                let new = upper(rel).unwrap_or_default();
                // A list naming anything but tables is refused on its own (`one`).
                if !valid_tables_list(&new) {
                    continue;
                }
                let after = verify::reftable_refs(
                    &new,
                    |name| {
                        let table = format!("reftable/{name}");
                        upper(&table)
                            .or_else(|| host(&table))
                            .ok_or_else(|| format!("it names {table}, which is not there"))
                    },
                    "",
                );
                let host_before = reftable_before();
                let before = host_before.as_ref().map(|(refs, _)| refs.clone());
                let (after, before) = match (after, before.map_err(String::clone)) {
                    (Ok(a), Ok(b)) => (split_refs(&a), split_refs(&b)),
                    (Err(why), _) | (_, Err(why)) => {
                        return Some(format!("the step's refs could not be read: {why}"));
                    }
                };
                for (name, id) in &after {
                    if before.get(name) != Some(id) && !name.starts_with("refs/replace/") {
                        targets.push((name.clone(), id.clone(), before.get(name).cloned()));
                    }
                }
                // A detached `HEAD` and the reflogs live in the tables too: each id one names
                // that the host's did not is judged as a ref's commit, against what its ref
                // held (the person's own commit is not looked up).
                let named_after = verify::reftable_named(
                    &new,
                    |name| {
                        let table = format!("reftable/{name}");
                        upper(&table)
                            .or_else(|| host(&table))
                            .ok_or_else(|| format!("it names {table}, which is not there"))
                    },
                    &git_dir.join("objects"),
                );
                let named_before = host_before.map(|(_, named)| named);
                let (named_after, named_before) = match (named_after, named_before) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(why), _) | (_, Err(why)) => {
                        return Some(format!("the step's refs could not be read: {why}"));
                    }
                };
                for line in named_after.difference(&named_before) {
                    let Some((id, name)) = line.split_once(' ') else {
                        continue;
                    };
                    let of = name.strip_suffix("@{log}").unwrap_or(name);
                    let was = before.get(of).cloned();
                    if was.as_deref() != Some(id) {
                        targets.push((name.to_owned(), id.to_ascii_lowercase(), was));
                    }
                }
            }
            (Class::Data, _) if names_commits(rel) => {
                // Every id on a line the host's file did not have: a reflog's line names two
                // (`HEAD@{n}` reads the new one; past the oldest entry, its old one), a
                // pseudo-ref one per line. Judged against what the ref it is kept for held.
                let host_file = host(rel).unwrap_or_default();
                let had: BTreeSet<&[u8]> = host_file.split(|&b| b == b'\n').collect();
                let new = upper(rel).unwrap_or_default();
                let was = host_ref(host, rel.strip_prefix("logs/").unwrap_or("HEAD"));
                for line in new.split(|&b| b == b'\n').filter(|l| !had.contains(l)) {
                    // What the ref held before the step is the person's own (a commit's
                    // reflog line starts from it): not looked up again.
                    for id in named_ids(rel, line)
                        .into_iter()
                        .filter(|id| Some(id) != was.as_ref())
                    {
                        targets.push((rel.clone(), id, was.clone()));
                    }
                }
            }
            (Class::Cas | Class::Head, _) if rel == "HEAD" || rel.starts_with("refs/") => {
                let Some(new) = upper(rel).as_deref().and_then(object_id) else {
                    continue; // a symbolic ref names a branch, whose own file is judged
                };
                let old = host(rel).as_deref().and_then(object_id);
                if old.as_deref() != Some(new.as_str()) {
                    targets.push((rel.clone(), new, old));
                }
            }
            _ => {}
        }
    }
    if targets.is_empty() {
        return None;
    }
    // The pre-step index's stage-0 entries, as a commit's tree would hold them.
    let staged: Entries = before
        .first()
        .map(|b| {
            b.entries
                .iter()
                .filter(|((_, stage), _)| *stage == 0)
                .map(|((p, _), v)| (p.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let staged_at_root: Entries = staged
        .iter()
        .filter(|(p, _)| root_paths.contains(p))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    let head_before = host_ref(host, "HEAD");
    let mut known: BTreeMap<String, Result<Option<Entries>, String>> = BTreeMap::new();
    let mut tree = |id: &str| {
        known
            .entry(id.to_owned())
            .or_insert_with(|| tree_entries(git_dir, id, &at_root))
            .clone()
    };
    let mut known_below: BTreeMap<(Option<String>, String), Result<Changes, String>> =
        BTreeMap::new();
    for (name, new, old) in targets {
        // `git commit`'s commit: its tree is the step's index, whose every protected entry
        // was judged above by the same rules (no `git` runs for it).
        if loose_commit_tree(upper, &new).is_some_and(|t| judged_trees.contains(&t)) {
            continue;
        }
        let now = match tree(&new) {
            Ok(Some(t)) => t,
            // No tree to check out (a tag of a blob).
            Ok(None) => continue,
            Err(why) => {
                return Some(format!(
                    "{name}: the protected paths of the commit it names could not be read: {why}"
                ));
            }
        };
        let mut changed = first_difference(&staged_at_root, &now, |p, v| {
            v.is_some_and(|v| on_disk(p, v))
        });
        if changed.is_some()
            && let Some(old) = &old
            && let Ok(Some(was)) = tree(old)
            && first_difference(&was, &now, |_, _| false).is_none()
        {
            changed = None;
        }
        if changed.is_none() && protected_paths.has_names_below() {
            let base = old.clone().or_else(|| head_before.clone());
            let below = known_below
                .entry((base.clone(), new.clone()))
                .or_insert_with(|| changed_below(git_dir, base.as_deref(), &new, &protected_paths));
            match below {
                Ok(changes) => {
                    changed = changes
                        .iter()
                        .find(|(p, v)| staged.get(*p) != v.as_ref() && !fine(p, v.as_ref()))
                        .map(|(p, _)| p.clone());
                }
                Err(why) => {
                    return Some(format!(
                        "{name}: what the commit it names changes could not be read: {why}"
                    ));
                }
            }
        }
        let Some(path) = changed else {
            continue;
        };
        return Some(format!(
            "{name} names a commit whose `{}` (a protected path) is not what the host's index \
             held before the step: the host's `git reset --hard`, `git stash` or `git checkout` \
             would write the step's version",
            String::from_utf8_lossy(&path).escape_debug()
        ));
    }
    None
}

fn index_refusal(path: &[u8]) -> String {
    format!(
        "it changes `{}`, a protected path, behind the working tree: the host's `git restore`, \
         `git stash` or `git checkout -- .` would write the step's version",
        String::from_utf8_lossy(path).escape_debug()
    )
}

/// The first key whose value differs between `before` and `after`, unless `fine` takes
/// `after`'s value (`None`: gone).
fn first_difference<K: Ord + Clone, V: PartialEq>(
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
    fine: impl Fn(&K, Option<&V>) -> bool,
) -> Option<K> {
    let keys: BTreeSet<&K> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .find(|k| before.get(*k) != after.get(*k) && !fine(k, after.get(*k)))
        .cloned()
}

/// Whether the project's file at `path` (beneath `root`, never through a link) is a regular
/// file whose content is the blob `oid`, with `mode`'s executable bit.
fn disk_holds(root: BorrowedFd<'_>, path: &[u8], mode: u32, oid: &str) -> bool {
    let Ok(rel) = std::str::from_utf8(path) else {
        return false;
    };
    if !matches!(mode, 0o100644 | 0o100755) {
        return false;
    }
    let Some(st) = super::import::stat_beneath(root, rel) else {
        return false;
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
        || (st.st_mode & 0o100 != 0) != (mode == 0o100755)
    {
        return false;
    }
    let Ok(Some(content)) = write::read(root, rel) else {
        return false;
    };
    blob_id(&content, oid.len() == 64) == oid
}

/// git's id (hex) of a blob holding `content`, SHA-256 or SHA-1.
pub(super) fn blob_id(content: &[u8], sha256: bool) -> String {
    let header = format!("blob {}\0", content.len());
    if sha256 {
        let mut h = sha2::Sha256::new();
        h.update(header.as_bytes());
        h.update(content);
        verify::to_hex(&h.finalize())
    } else {
        let mut h = sha1::Sha1::new();
        h.update(header.as_bytes());
        h.update(content);
        verify::to_hex(&h.finalize())
    }
}

/// An object id in hex, `content` trimmed; `None` for anything else (a symbolic ref).
fn object_id(content: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(content).ok()?.trim();
    ((s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| s.to_ascii_lowercase())
}

/// The object ids one line of the data file `rel` names: a reflog line's old and new ids, the
/// id a pseudo-ref's line begins with (`FETCH_HEAD`'s before its tab). Never the null id.
fn named_ids(rel: &str, line: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(line);
    let mut fields = text.split(['\t', ' ']);
    let ids: Vec<Option<String>> = if rel.starts_with("logs/") {
        vec![fields.next().and_then(id_of), fields.next().and_then(id_of)]
    } else {
        vec![fields.next().and_then(id_of)]
    };
    ids.into_iter().flatten().collect()
}

fn id_of(field: &str) -> Option<String> {
    object_id(field.as_bytes()).filter(|id| id.bytes().any(|b| b != b'0'))
}

/// What the host's ref `name` held before the step: a loose ref or `packed-refs`, `HEAD`
/// followed once to its branch. `None` when it names nothing (or lives in a reftable).
fn host_ref(host: &dyn Fn(&str) -> Option<Vec<u8>>, name: &str) -> Option<String> {
    if let Some(content) = host(name) {
        if let Some(id) = object_id(&content) {
            return Some(id);
        }
        let text = String::from_utf8_lossy(&content);
        if name == "HEAD"
            && let Some(branch) = text.trim().strip_prefix("ref: ")
            && branch.starts_with("refs/")
        {
            return host_ref(host, branch);
        }
    }
    packed(&host("packed-refs").unwrap_or_default())
        .get(name)
        .cloned()
}

/// `packed-refs`' refs: name → id (peeled lines and comments left out).
fn packed(text: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(text)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| {
            let (id, name) = l.split_once(' ')?;
            Some((name.to_owned(), object_id(id.as_bytes())?))
        })
        .collect()
}

/// `<id> <name>` lines as name → id.
fn split_refs(lines: &BTreeSet<String>) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| {
            let (id, name) = l.split_once(' ')?;
            Some((name.to_owned(), id.to_ascii_lowercase()))
        })
        .collect()
}

/// The entries at protected paths in the tree of `id` (a commit, or a tag of one), read by
/// the host's `git ls-tree`: its top level first, then, recursively, only the protected
/// paths whose first component is there (most are absent).
fn tree_entries(git_dir: &Path, id: &str, protected: &[String]) -> Result<Option<Entries>, String> {
    let Some(top) = ls_tree(git_dir, id, &[], false)? else {
        return Ok(None);
    };
    let names: BTreeSet<&[u8]> = top.keys().map(Vec::as_slice).collect();
    let mut wanted: Vec<String> = Vec::new();
    for p in protected {
        if p.contains('*') && p.contains('/') {
            // A pattern below a directory at the top: that directory, filtered below.
            let dir = p.split('/').next().unwrap_or(p);
            if names.contains(dir.as_bytes()) {
                wanted.push(dir.to_owned());
            }
        } else if p.contains('*') {
            for n in &names {
                if is_protected(n, std::slice::from_ref(p)) {
                    wanted.push(String::from_utf8_lossy(n).into_owned());
                }
            }
        } else if names.contains(p.split('/').next().unwrap_or(p).as_bytes()) {
            wanted.push(p.clone());
        }
    }
    if wanted.is_empty() {
        return Ok(Some(Entries::new()));
    }
    let mut out = ls_tree(git_dir, id, &wanted, true)?.unwrap_or_default();
    let protected_paths = index::ProtectedPaths::new(protected);
    out.retain(|p, _| protected_paths.contains(p));
    Ok(Some(out))
}

/// The paths below the root a commit changed that a protected name lies on
/// (`index::BELOW_ROOT`), with what the commit holds there (`None`: removed).
type Changes = BTreeMap<Vec<u8>, Option<(u32, String)>>;

/// [`Changes`] of the commit `new` against `base` (the ref's commit before the step, else
/// `HEAD`'s), by the host's `git diff-tree`; against nothing, every path of `new`.
fn changed_below(
    git_dir: &Path,
    base: Option<&str>,
    new: &str,
    protected: &index::ProtectedPaths<'_>,
) -> Result<Changes, String> {
    let mut out = Changes::new();
    let Some(base) = base else {
        let all = ls_tree(git_dir, new, &[], true)?.unwrap_or_default();
        for (p, v) in all {
            if protected.contains(&p) {
                out.insert(p, Some(v));
            }
        }
        return Ok(out);
    };
    let run = verify::git()
        .env("LC_ALL", "C")
        .arg("--git-dir")
        .arg(git_dir)
        .args([
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--no-ext-diff",
            base,
            new,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("the host's `git diff-tree` could not run: {e}"))?;
    if !run.status.success() {
        return Err(String::from_utf8_lossy(&run.stderr).trim().to_owned());
    }
    // `:<old mode> <new mode> <old id> <new id> <status>` NUL `<path>` NUL
    let mut fields = run.stdout.split(|&b| b == 0);
    while let Some(meta) = fields.next().filter(|m| !m.is_empty()) {
        let path = fields.next().ok_or("bad diff-tree output")?;
        let meta = String::from_utf8_lossy(meta);
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [_, mode, _, id, _] = parts[..] else {
            return Err("bad diff-tree output".into());
        };
        if !protected.contains(path) {
            continue;
        }
        let mode = u32::from_str_radix(mode, 8).map_err(|_| "bad diff-tree output")?;
        let held = (mode != 0).then(|| (mode, id.to_ascii_lowercase()));
        out.insert(path.to_vec(), held);
    }
    Ok(out)
}

/// The tree the commit `id` names, when the step wrote it as a loose object (read by `upper`
/// and checked against its id); `None` for anything else.
fn loose_commit_tree(upper: &dyn Fn(&str) -> Option<Vec<u8>>, id: &str) -> Option<String> {
    use std::io::Read;
    let rel = format!("objects/{}/{}", id.get(..2)?, id.get(2..)?);
    let compressed = upper(&rel)?;
    if !verify::loose_matches(&rel, &compressed) {
        return None;
    }
    // `commit <size>\0tree <hex>\n…`: the first line of a commit is its tree.
    let mut head = Vec::new();
    flate2::read::ZlibDecoder::new(&compressed[..])
        .take(256)
        .read_to_end(&mut head)
        .ok()?;
    let nul = head.iter().position(|&b| b == 0)?;
    if !head.starts_with(b"commit ") {
        return None;
    }
    let line = head[nul + 1..].strip_prefix(b"tree ")?;
    let end = line.iter().position(|&b| b == b'\n')?;
    object_id(&line[..end])
}

/// `None`: `id` names no tree-ish (a blob).
fn ls_tree(
    git_dir: &Path,
    id: &str,
    paths: &[String],
    recurse: bool,
) -> Result<Option<Entries>, String> {
    let mut cmd = verify::git();
    cmd.env("LC_ALL", "C")
        .arg("--literal-pathspecs")
        .arg("--git-dir")
        .arg(git_dir)
        .args(["ls-tree", "-z", "--full-tree"]);
    if recurse {
        cmd.arg("-r");
    }
    let out = cmd
        .arg(id)
        .arg("--")
        .args(paths)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("the host's `git ls-tree` could not run: {e}"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if why.contains("not a tree object") {
            return Ok(None);
        }
        return Err(why);
    }
    // `<mode> SP <type> SP <id> TAB <path> NUL`
    let mut entries = Entries::new();
    for item in out.stdout.split(|&b| b == 0).filter(|i| !i.is_empty()) {
        let tab = item
            .iter()
            .position(|&b| b == b'\t')
            .ok_or("bad ls-tree output")?;
        let meta = String::from_utf8_lossy(&item[..tab]);
        let mut parts = meta.split(' ');
        let mode = parts
            .next()
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or("bad ls-tree output")?;
        let oid = parts
            .nth(1)
            .ok_or("bad ls-tree output")?
            .to_ascii_lowercase();
        entries.insert(item[tab + 1..].to_vec(), (mode, oid));
    }
    Ok(Some(entries))
}
