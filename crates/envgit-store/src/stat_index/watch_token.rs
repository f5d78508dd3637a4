//! The watching daemon's token beside the stat index (`stat.watch`): "this index is the
//! project as of that point of that daemon's log" ([`crate::ChangeLog`]). It names the index
//! it belongs to (its base's id and its tail's summary), so an index written since by a
//! command that did not ask the daemon (a rewind, a session) makes it void, and the next
//! command reads everything once. Like the index, it is a cache: anything unsound is ignored.

use std::path::Path;

use crate::change_log::ChangeToken;
use crate::error::Result;
use crate::store::Store;
use crate::worktree::WorkTree;

const FILE: &str = "stat.watch";

impl WorkTree {
    /// The token saved with the stat index this state loaded or last saved, if it is for that
    /// index.
    pub fn watch_token(&self, store_dir: &Path) -> Option<ChangeToken> {
        let text = std::fs::read_to_string(store_dir.join(FILE)).ok()?;
        let (index, token) = text.trim().split_once(' ')?;
        (Some(index) == self.index_name().as_deref()).then(|| token.parse().ok())?
    }

    /// Save `token` for the stat index as this state last loaded or saved it (call after
    /// [`WorkTree::save_index`]); with no index on disk, the old token is removed.
    pub fn save_watch_token(&self, store: &Store, token: ChangeToken) -> Result<()> {
        let path = store.dir().join(FILE);
        let Some(index) = self.index_name() else {
            let _ = std::fs::remove_file(&path);
            return Ok(());
        };
        // As the index itself: renamed into place under the store's lock; a full disk only
        // makes the next command read everything.
        let Some(tmp) = super::write_temp(&path, format!("{index} {token}\n").as_bytes())? else {
            return Ok(());
        };
        let _held = crate::lock::Flock::exclusive(&store.dir().join("lock"))
            .inspect_err(|_| super::remove(&tmp))?;
        super::rename_into(&tmp, &path)
    }

    /// The stat index on disk as this state knows it: its base's id and its tail's summary.
    fn index_name(&self) -> Option<String> {
        let on_disk = self
            .index_on_disk
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        on_disk
            .as_ref()
            .map(|d| format!("{:016x}.{:016x}", d.base_id, d.tail.unwrap_or(0)))
    }
}
