//! `fork N DIR`: step N materialized into a new directory with a history of its own, whose
//! first step names where it came from. The objects step N needs are copied into the new
//! store verbatim (no recompression), so the two stores never depend on each other.

use std::collections::HashSet;
use std::path::Path;

use crate::error::{IoContext, Result, StoreError};
use crate::exclude::Excludes;
use crate::id::{ObjectId, ObjectKind};
use crate::reach;
use crate::restore::{self, RestoreOptions};
use crate::step::{Origin, StepDraft, StepKind, now_ms};
use crate::store::Store;
use crate::tree::{EntryKind, Tree, TreeEntry};
use crate::worktree::WorkTree;

pub struct ForkOptions<'a> {
    pub step: u64,
    /// Replace this root-level file's content in the fork (the origin's current `envgit.yaml`,
    /// so an older, looser policy does not come back with the fork).
    pub replace_root_file: Option<(&'a str, &'a [u8])>,
    pub policy_hash: Option<String>,
    /// The origin's working tree with its stat index: files it vouches for are cloned from
    /// it where the filesystem has reflinks (xfs, btrfs; not ext4), not written again.
    pub clone_from: Option<&'a WorkTree>,
}

/// Materializes step N into `dir` with a new store of its own; returns that store, the tree
/// and the draft of its first step, which the caller's step lifecycle commits.
pub fn fork(
    origin: &Store,
    dir: &Path,
    new_store_dir: &Path,
    opts: &ForkOptions<'_>,
) -> Result<(Store, ObjectId, StepDraft)> {
    let mut tree = origin.step_tree(opts.step)?;
    let started = now_ms();
    std::fs::create_dir_all(dir).at(dir)?;
    if std::fs::read_dir(dir).at(dir)?.next().is_some() {
        return Err(StoreError::Refused(format!(
            "{} is not empty: fork into a new or empty directory",
            dir.display()
        )));
    }
    let canonical = dir.canonicalize().at(dir)?;
    let store = Store::create(new_store_dir, &canonical)?;
    let mut needed = HashSet::new();
    reach::collect(origin, &tree, &mut needed)?;
    reach::add_delta_bases(origin, &mut needed)?;
    let ids: Vec<ObjectId> = needed.into_iter().collect();
    // The files are written from the origin's store while its objects are copied into the new
    // one (and made durable): the two overlap. A root file that is replaced is left out and
    // written once the new store has its content.
    let origin_root = origin.read_tree(&tree)?;
    let mut first_pass = origin_root.clone();
    if let Some((name, _)) = opts.replace_root_file {
        first_pass.entries.retain(|e| e.name != name.as_bytes());
    }
    let root = crate::beneath::open_root(&canonical).at(&canonical)?;
    let restore_opts = RestoreOptions {
        excludes: &Excludes::none(),
        protected: &[],
        clone_from: opts.clone_from,
    };
    use std::os::fd::AsFd;
    let (copied, written) = rayon::join(
        || -> Result<ObjectId> {
            store.copy_objects_from(origin, &ids)?;
            let tree = match opts.replace_root_file {
                Some((name, content)) => replace_root_file(&store, &tree, name, content)?,
                None => tree,
            };
            store.sync_objects()?;
            Ok(tree)
        },
        || restore::restore_trees(origin, root.as_fd(), None, &first_pass, &restore_opts),
    );
    let written = written?;
    tree = copied?;
    if opts.replace_root_file.is_some() {
        let new_root = store.read_tree(&tree)?;
        restore::restore_trees(
            &store,
            root.as_fd(),
            Some(&first_pass),
            &new_root,
            &restore_opts,
        )?;
    }
    let draft = StepDraft {
        kind: Some(StepKind::Fork),
        started_at_ms: started,
        summary: format!(
            "fork of {} at step {}",
            origin.project().display(),
            opts.step
        ),
        policy_hash: opts.policy_hash.clone(),
        origin: Some(Origin {
            project: origin.project().display().to_string(),
            step: opts.step,
        }),
        notes: [
            (written.cloned > 0).then(|| {
                format!(
                    "{} files share their data with the origin's copies (reflinks)",
                    written.cloned
                )
            }),
            (written.copied > 0).then(|| {
                format!(
                    "{} files were copied from the origin's working tree, which held the \
                     step's content (its stat index said so)",
                    written.copied
                )
            }),
        ]
        .into_iter()
        .flatten()
        .collect(),
        ..Default::default()
    };
    Ok((store, tree, draft))
}

fn replace_root_file(
    store: &Store,
    tree: &ObjectId,
    name: &str,
    content: &[u8],
) -> Result<ObjectId> {
    let mut t: Tree = store.read_tree(tree)?;
    let blob = store.put(ObjectKind::Blob, content)?;
    let entry = TreeEntry {
        name: name.as_bytes().to_vec(),
        kind: EntryKind::File,
        mode: 0o644,
        size: content.len() as u64,
        id: blob,
    };
    match t
        .entries
        .binary_search_by(|e| e.name.as_slice().cmp(name.as_bytes()))
    {
        Ok(i) => {
            t.entries[i] = TreeEntry {
                mode: t.entries[i].mode.max(0o600) & 0o666,
                ..entry
            }
        }
        Err(i) => t.entries.insert(i, entry),
    }
    store.put(ObjectKind::Tree, &t.encode())
}
