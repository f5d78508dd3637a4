//! The directories of one snapshot, each read from the store once: the checks after a step
//! look up the directories above thousands of changed paths, which share most of them.

use std::collections::HashMap;
use std::rc::Rc;

use envgit_store::{EntryKind, ObjectId, Store, Tree};

use crate::failure::CmdResult;

pub(crate) struct SnapshotTrees<'a> {
    store: &'a Store,
    root: &'a ObjectId,
    /// A directory's tree (`None`: not a directory there); the root's is `""`'s.
    trees: HashMap<String, Option<Rc<Tree>>>,
}

impl<'a> SnapshotTrees<'a> {
    /// The snapshot whose root tree is `root`.
    pub(crate) fn new(store: &'a Store, root: &'a ObjectId) -> Self {
        SnapshotTrees {
            store,
            root,
            trees: HashMap::new(),
        }
    }

    /// The tree of project-relative directory `dir` (`""` for the root), read from its
    /// parent's; `None` when it is not a directory in the snapshot.
    pub(crate) fn dir(&mut self, dir: &str) -> CmdResult<Option<Rc<Tree>>> {
        if let Some(known) = self.trees.get(dir) {
            return Ok(known.clone());
        }
        if dir.is_empty() {
            let root = Some(Rc::new(self.store.read_tree(self.root)?));
            self.trees.insert(String::new(), root.clone());
            return Ok(root);
        }
        let (parent, name) = dir.rsplit_once('/').unwrap_or(("", dir));
        let parent = self.dir(parent)?;
        let tree = match parent.as_deref().and_then(|p| p.get(name.as_bytes())) {
            Some(e) if e.kind == EntryKind::Dir => Some(Rc::new(self.store.read_tree(&e.id)?)),
            _ => None,
        };
        self.trees.insert(dir.to_string(), tree.clone());
        Ok(tree)
    }
}
