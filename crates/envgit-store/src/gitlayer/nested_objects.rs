//! The object stores of repositories nested in the project (see `nested`): their data stays as
//! the step left it, but not data that would make the user's git there read other content for
//! an id they trust, or lose history, nor an index listing a path git never lets into one
//! (`index`). A loose object and a Git LFS object must hash to their
//! names, a pack must match its index (the host's `git verify-pack`), what git derives from the
//! objects and believes over them (commit-graphs, multi-pack indexes, bitmaps) goes back, and a
//! `shallow` file may not name a commit the repository had before the step. Everything is read
//! from the snapshot (or, for what was too large for it, from the project beneath its root),
//! never through a link.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::fd::AsFd;

use sha2::Digest;

use super::classify::{Class, SHALLOW, classify, is_shared_index, lfs_oid, shallow_ids};
use super::import::Dropped;
use super::index::{HASH_SIZES, refusal as index_refusal};
use super::nested::split_nested;
use super::verify::{
    LFS_REFUSAL, LOOSE_REFUSAL, SHALLOW_REFUSAL, index_ids, loose_matches, to_hex, verify_pack,
};
use super::write;
use crate::beneath::{cstr, open_file, open_root};
use crate::diff::EntryDiff;
use crate::error::{IoContext, Result};
use crate::graft::entry_at;
use crate::id::ObjectId;
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, TreeEntry};

const DERIVED_REFUSAL: &str = "git derives it from the objects and believes it over them (a \
     commit's tree, where an object is): one the step wrote could show the user other content \
     for an id they trust; git works without it and writes it again";
const LINK_REFUSAL: &str = "git follows a link inside `.git` to data the step chose";

/// What of the nested repositories' object stores, and their `shallow` files, goes back to its
/// pre-step state, and why. `before` and `after` are the snapshots around the step. (What
/// the snapshot kept only as a marker, too large for it, the put-back removes.)
pub fn nested_object_refusals(
    store: &Store,
    before: &ObjectId,
    after: &ObjectId,
    changes: &[EntryDiff],
) -> Result<Vec<Dropped>> {
    let mut out = Vec::new();
    let refuse = |out: &mut Vec<Dropped>, path: &str, why: &str| {
        out.push(Dropped {
            path: path.to_owned(),
            why: why.to_owned(),
        });
    };
    // Each repository's packs to verify, and what the step wrote (a pack that fails goes back
    // by the files of it the step wrote).
    let mut packs: BTreeSet<(String, String)> = BTreeSet::new();
    let mut written: BTreeSet<String> = BTreeSet::new();
    let mut shallows = Vec::new();
    for change in changes {
        let path = String::from_utf8_lossy(&change.path);
        let Some((git, rest)) = split_nested(&path) else {
            continue;
        };
        // Removals stay: git does without what it derives, and an object gone is no forgery.
        let Some(new) = &change.new else {
            continue;
        };
        if rest.is_empty() {
            continue; // the `.git` itself: `nested_code_paths` puts a pointer file or link back
        }
        written.insert(path.to_string());
        match new.kind {
            EntryKind::Dir => continue,
            EntryKind::File
            | EntryKind::Marker(MarkerReason::TooLarge | MarkerReason::OverBudget) => {}
            _ => {
                if rest.starts_with("objects") || rest == SHALLOW || rest == "index" {
                    refuse(&mut out, &path, LINK_REFUSAL);
                }
                continue;
            }
        }
        if rest == SHALLOW {
            shallows.push((git.to_owned(), change));
            continue;
        }
        match classify(rest) {
            // An index (or a split index's shared part) holding a path git never lets into
            // one: the user's `git restore` there would write `.git/hooks/pre-commit`.
            Ok(Class::Cas | Class::Object) if rest == "index" || is_shared_index(rest) => {
                let shared = |hex: &str| {
                    let at = format!("{git}/sharedindex.{hex}");
                    let entry = entry_at(store, after, &at).ok().flatten()?;
                    read_entry(store, &at, &entry).ok()
                };
                let none = |_: &str| None;
                let shared: &dyn Fn(&str) -> Option<Vec<u8>> =
                    if rest == "index" { &shared } else { &none };
                if let Some(why) =
                    index_refusal(&read_entry(store, &path, new)?, HASH_SIZES, shared)
                {
                    refuse(&mut out, &path, &why);
                }
            }
            Ok(Class::Loose) if !loose_matches(rest, &read_entry(store, &path, new)?) => {
                refuse(&mut out, &path, LOOSE_REFUSAL);
            }
            Ok(Class::LfsObject) => {
                let mut sha256 = sha2::Sha256::new();
                let read = copy_entry(store, &path, new, &mut |b| {
                    sha256.update(b);
                    Ok(())
                })?;
                let oid = rest.strip_prefix("lfs/objects/").and_then(lfs_oid);
                if read && oid != Some(to_hex(&sha256.finalize()).as_str()) {
                    refuse(&mut out, &path, LFS_REFUSAL);
                }
            }
            Ok(Class::Pack) => {
                packs.insert((git.to_owned(), pack_hash(rest).to_owned()));
            }
            // A list of pack names for dumb HTTP clients of this repository: nothing git
            // believes about an object.
            Ok(Class::Derived) if rest == "objects/info/packs" => {}
            Ok(Class::Derived) => match rest.strip_suffix(".idx").or(rest.strip_suffix(".rev")) {
                // A pack's index and reverse index are checked with the pack.
                Some(_) => {
                    packs.insert((git.to_owned(), pack_hash(rest).to_owned()));
                }
                None => refuse(&mut out, &path, DERIVED_REFUSAL),
            },
            _ => {}
        }
    }
    for (git, hash) in packs {
        let base = format!("{git}/objects/pack/pack-{hash}");
        match check_pack(store, after, &base)? {
            PackCheck::Incomplete | PackCheck::Matches => {}
            PackCheck::Refused(why) => {
                for ext in ["pack", "idx", "rev"] {
                    let path = format!("{base}.{ext}");
                    if written.contains(&path) {
                        refuse(&mut out, &path, &why);
                    }
                }
            }
        }
    }
    for (git, change) in shallows {
        let path = String::from_utf8_lossy(&change.path);
        // A side the snapshot kept only as a marker: the step's is read from the project; the
        // pre-step one is unknown, so every id of the step's counts as gained.
        let ids = |e: &Option<TreeEntry>| -> Result<Option<BTreeSet<String>>> {
            Ok(match e {
                Some(e) if e.kind == EntryKind::File || change.new.as_ref() == Some(e) => {
                    shallow_ids(&read_entry(store, &path, e)?)
                }
                _ => Some(BTreeSet::new()),
            })
        };
        let Some(after_ids) = ids(&change.new)? else {
            refuse(&mut out, &path, "it is not a list of object ids");
            continue;
        };
        let before_ids = ids(&change.old)?.unwrap_or_default();
        let gained: BTreeSet<String> = after_ids.difference(&before_ids).cloned().collect();
        match had_any(store, before, &git, &gained)? {
            Ok(false) => {}
            Ok(true) => refuse(&mut out, &path, SHALLOW_REFUSAL),
            Err(why) => refuse(&mut out, &path, &why),
        }
    }
    Ok(out)
}

/// Whether the repository at `git` (project-relative) had any of `ids` in the snapshot
/// `before`, loose or in a pack; `Err` when an index of its could not be read.
fn had_any(
    store: &Store,
    before: &ObjectId,
    git: &str,
    ids: &BTreeSet<String>,
) -> Result<std::result::Result<bool, String>> {
    for id in ids {
        let loose = format!("{git}/objects/{}/{}", &id[..2], &id[2..]);
        if entry_at(store, before, &loose)?.is_some() {
            return Ok(Ok(true));
        }
    }
    let pack_dir = format!("{git}/objects/pack");
    let Some(dir) = entry_at(store, before, &pack_dir)?.filter(|e| e.kind == EntryKind::Dir) else {
        return Ok(Ok(false));
    };
    for entry in store.read_tree(&dir.id)?.entries {
        let name = String::from_utf8_lossy(&entry.name);
        if entry.kind != EntryKind::File || !name.ends_with(".idx") {
            continue;
        }
        let sha256 = pack_hash(&name).len() == 64;
        match index_ids(store.read_file(&entry.id)?, sha256) {
            Ok(listed) if listed.is_disjoint(ids) => {}
            Ok(_) => return Ok(Ok(true)),
            Err(why) => return Ok(Err(why)),
        }
    }
    Ok(Ok(false))
}

/// `objects/pack/pack-<hash>.<ext>` → `<hash>`.
fn pack_hash(rest: &str) -> &str {
    let name = rest.rsplit('/').next().unwrap_or(rest);
    let name = name.strip_prefix("pack-").unwrap_or(name);
    name.split_once('.').map_or(name, |(hash, _)| hash)
}

enum PackCheck {
    /// The pack or its index is not in the snapshot: git reads neither alone.
    Incomplete,
    /// The index names the pack's objects by their content.
    Matches,
    Refused(String),
}

/// Streams the content of `entry` (at project-relative `path` in the step's snapshot) into
/// `sink`: from the store, or, for a file the snapshot kept as a marker (over the size limit or
/// the budget), from the project, opened beneath it without following a link. `false` for an
/// entry with no content to read.
fn copy_entry(
    store: &Store,
    path: &str,
    entry: &TreeEntry,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<bool> {
    match entry.kind {
        EntryKind::File => store.read_file_into(&entry.id, sink)?,
        EntryKind::Marker(MarkerReason::TooLarge | MarkerReason::OverBudget) => {
            let at = store.project().join(path);
            let root = open_root(store.project()).at(store.project())?;
            let dir = write::parent(root.as_fd(), path, false).at(&at)?;
            let name = cstr(path.rsplit('/').next().unwrap_or(path).as_bytes()).at(&at)?;
            let mut file = std::fs::File::from(open_file(dir.as_fd(), &name).at(&at)?);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match file.read(&mut buf).at(&at)? {
                    0 => break,
                    n => sink(&buf[..n])?,
                }
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// All of [`copy_entry`]'s content (empty for an entry with none).
pub(super) fn read_entry(store: &Store, path: &str, entry: &TreeEntry) -> Result<Vec<u8>> {
    let mut content = Vec::new();
    copy_entry(store, path, entry, &mut |b| {
        content.extend_from_slice(b);
        Ok(())
    })?;
    Ok(content)
}

/// The pack `<base>.pack` against `<base>.idx` (and `<base>.rev` when there is one), copied
/// from the snapshot into a private directory of the store's and given to `git verify-pack`.
fn check_pack(store: &Store, after: &ObjectId, base: &str) -> Result<PackCheck> {
    let file = |ext: &str| -> Result<Option<TreeEntry>> {
        Ok(entry_at(store, after, &format!("{base}.{ext}"))?
            .filter(|e| e.kind == EntryKind::File || e.kind.is_marker()))
    };
    let (Some(pack), Some(idx)) = (file("pack")?, file("idx")?) else {
        return Ok(PackCheck::Incomplete);
    };
    let rev = file("rev")?;
    let scratch = tempfile::Builder::new()
        .prefix("verify-pack-")
        .tempdir_in(store.dir())
        .at(store.dir())?;
    let name = base.rsplit('/').next().unwrap_or(base);
    for (ext, entry) in [("pack", Some(pack)), ("idx", Some(idx)), ("rev", rev)] {
        if let Some(entry) = entry {
            let to = scratch.path().join(format!("{name}.{ext}"));
            let mut f = std::fs::File::create(&to).at(&to)?;
            let from = format!("{base}.{ext}");
            if !copy_entry(store, &from, &entry, &mut |b| f.write_all(b).at(&to))? {
                return Ok(PackCheck::Refused(LINK_REFUSAL.into()));
            }
        }
    }
    let sha256 = pack_hash(name).len() == 64;
    Ok(
        match verify_pack(&scratch.path().join(format!("{name}.idx")), sha256) {
            Ok(()) => PackCheck::Matches,
            Err(why) => PackCheck::Refused(why),
        },
    )
}
