//! The stat index on disk (git's index idea): per directory of the last tree, its tree id,
//! the start of the scan that read it, and its entries with their `lstat` data (mtime and
//! ctime in ns, size, inode, device, mode, links). A one-shot command loads it so that an
//! unchanged file costs one `lstat`; the racy-timestamp rule (in the scan, `worktree::racy`)
//! re-reads any entry that changed too close to its directory's scan.
//!
//! It is two files (git's split index idea): a base (`stat.cache`) with every directory, and a
//! tail (`stat.tail`) with only the directories that differ from that base. A step that
//! changed ten directories writes a tail of ten records instead of a base of every one (at
//! 100,000 files the base is 12 MB: writing it and freeing the old one's blocks took 25-45 ms
//! of every one-shot rewind). The tail names its base by a random id; once it outgrows a
//! quarter of the base, a new base is written and the tail goes.
//!
//! It is a cache: written to a temporary file and renamed into place (no fsync; a torn file
//! fails its checksum), not written at all when what it would hold is on disk already, and a
//! missing, torn, corrupt, foreign (another scan configuration) or other-version file is
//! ignored — the scan then reads every file — never trusted; a tail is ignored unless its base
//! is the one on disk. Every record is one directory as a scan saw it, so an older record
//! (a tail lost, a base rewritten by another process) vouches for less, never more: a file
//! changed since has a newer ctime. Its encoding is its own, not the tree objects'.

mod codec;
mod watch_token;

use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};
use crate::lock::Flock;
use crate::mapped::FileBytes;
use crate::store::Store;
use crate::worktree::{Held, IndexOnDisk, WorkTree};

use codec::{
    Dirs, EncodedBase, append_record, apply_tail, encode_base, encode_tail, in_path_order,
    read_base, summary_of,
};

pub(crate) use codec::visit_record;

/// A tail larger than this share of its base's bytes is folded into a new base.
const TAIL_SHARE: usize = 4;

/// What a save writes.
enum Plan {
    /// What is on disk already.
    Nothing,
    Tail(Vec<u8>),
    Base,
}

impl WorkTree {
    /// Save the state as the store's stat index, renamed into place under the store's commit
    /// lock (like every file the store replaces). A full disk is not an error: the step it
    /// follows is committed already, and an older index or none only makes the next scan read
    /// more.
    pub fn save_index(&self, store: &Store) -> Result<()> {
        let fingerprint = &self.config().fingerprint;
        let mut on_disk = self.on_disk();
        let lock = store.dir().join("lock");
        if let Some(known) = on_disk.as_mut() {
            match plan(known, &self.dirs, fingerprint) {
                Plan::Nothing => return Ok(()),
                Plan::Tail(tail) => {
                    let tail_path = store.stat_tail_path();
                    let Some(tmp) = write_temp(&tail_path, &tail)? else {
                        return Ok(());
                    };
                    let _held = Flock::exclusive(&lock).inspect_err(|_| remove(&tmp))?;
                    // Another process may have written a new base since: a tail is only worth
                    // writing over the base it was made against.
                    if base_id_on_disk(&store.stat_cache_path(), fingerprint) == Some(known.base_id)
                    {
                        rename_into(&tmp, &tail_path)?;
                        known.tail = Some(summary_of(&tail));
                        return Ok(());
                    }
                    remove(&tmp);
                }
                Plan::Base => {}
            }
        }
        let base_id = crate::pack::random_u64();
        let base = encode_base(&self.dirs, fingerprint, base_id);
        let base_path = store.stat_cache_path();
        let Some(tmp) = write_temp(&base_path, &base.bytes)? else {
            return Ok(());
        };
        let _held = Flock::exclusive(&lock).inspect_err(|_| remove(&tmp))?;
        rename_into(&tmp, &base_path)?;
        // A tail names the base it belongs to, so the old one would be ignored; removed all
        // the same, to keep the store tidy.
        remove(&store.stat_tail_path());
        *on_disk = Some(IndexOnDisk {
            base_id,
            base_len: base.bytes.len(),
            record_sums: record_sums(&base),
            tail: None,
        });
        Ok(())
    }

    /// Load the store's stat index if it is sound and made with this scan configuration.
    pub fn load_index(&mut self, store: &Store) {
        self.load_index_of(store.dir());
    }

    /// [`WorkTree::load_index`] for the store at `store_dir`, before (or while) it is opened.
    pub fn load_index_of(&mut self, store_dir: &Path) {
        let mut known = self.load_base(&crate::store::stat_cache_path(store_dir));
        if let Some(known) = known.as_mut()
            && let Ok(tail) = FileBytes::of_replaced_file(&crate::store::stat_tail_path(store_dir))
        {
            let fingerprint = self.config().fingerprint.clone();
            if apply_tail(&tail, &fingerprint, known.base_id, &mut self.dirs).is_some() {
                known.tail = Some(summary_of(&tail));
            }
        }
        *self.on_disk() = known;
    }

    /// Save the state to `path` as a base alone (a copy: no store lock is taken, no tail).
    pub fn save_cache(&self, path: &Path) -> Result<()> {
        let base = encode_base(
            &self.dirs,
            &self.config().fingerprint,
            crate::pack::random_u64(),
        );
        if let Some(tmp) = write_temp(path, &base.bytes)? {
            rename_into(&tmp, path)?;
        }
        Ok(())
    }

    /// Load a state saved with [`WorkTree::save_cache`]; anything unsound is ignored.
    pub fn load_cache(&mut self, path: &Path) {
        self.load_base(path);
        // Not the store's index: the next save_index writes a whole base whatever it holds.
        *self.on_disk() = None;
    }

    /// The base at `path` if it is sound, as the state's directories; what it is on disk.
    fn load_base(&mut self, path: &Path) -> Option<IndexOnDisk> {
        let (bytes, opened) = FileBytes::of_replaced_file_opened(path).ok()?;
        let len = bytes.len();
        let checked = opened.was_checked();
        let (base_id, dirs, record_sums) = read_base(bytes, &self.config().fingerprint, checked)?;
        if !checked {
            opened.passed();
        }
        self.dirs = dirs;
        Some(IndexOnDisk {
            base_id,
            base_len: len,
            record_sums,
            tail: None,
        })
    }

    fn on_disk(&self) -> std::sync::MutexGuard<'_, Option<IndexOnDisk>> {
        self.index_on_disk
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Compares the state with the base and tail on disk, a directory's record at a time (at
/// 100,000 files encoding a whole base costs more than writing a tail): the directories whose
/// records differ from the base's go to a tail, unless the tail would be what is on disk
/// already, or more than a quarter of the base.
fn plan(known: &IndexOnDisk, dirs: &Dirs, fingerprint: &str) -> Plan {
    let mut scratch = Vec::new();
    let mut changed = Vec::new();
    let mut count = 0;
    // How many of the base's directories are still here: all of them, usually.
    let mut kept = 0;
    let sorted = in_path_order(dirs);
    for rel in &sorted {
        kept += usize::from(known.record_sums.contains(rel));
        let d = match dirs.held(rel) {
            // The base's own record, neither used nor changed since it was loaded.
            Some(Held::Record(_)) => continue,
            Some(Held::State(d)) => d,
            None => continue,
        };
        scratch.clear();
        let crc = append_record(&mut scratch, rel, d);
        if known.record_sums.get(rel) != Some(crc) {
            changed.extend_from_slice(&scratch);
            count += 1;
            if changed.len() > known.base_len / TAIL_SHARE {
                return Plan::Base;
            }
        }
    }
    let mut removed: Vec<&[u8]> = if kept < known.record_sums.len() {
        let now: std::collections::HashSet<&[u8]> =
            sorted.iter().map(|rel| rel.as_slice()).collect();
        known
            .record_sums
            .keys()
            .map(Vec::as_slice)
            .filter(|rel| !now.contains(rel))
            .collect()
    } else {
        Vec::new()
    };
    removed.sort_unstable();
    if count == 0 && removed.is_empty() && known.tail.is_none() {
        return Plan::Nothing;
    }
    let tail = encode_tail(fingerprint, known.base_id, &removed, count, &changed);
    if known.tail == Some(summary_of(&tail)) {
        return Plan::Nothing;
    }
    Plan::Tail(tail)
}

fn record_sums(base: &EncodedBase<'_>) -> crate::worktree::RecordSums {
    crate::worktree::RecordSums::known(
        base.records
            .iter()
            .map(|(rel, _, crc)| (rel.to_vec(), *crc)),
    )
}

/// The id in the header of the base at `path`, if it is one of this configuration.
fn base_id_on_disk(path: &Path, fingerprint: &str) -> Option<u64> {
    use std::io::Read;
    let mut head = vec![0; codec::header_len(fingerprint)];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    codec::base_id_in_header(&head, fingerprint)
}

/// Writes `bytes` to a temporary beside `path`; `None` when the disk was full (nothing left
/// behind).
fn write_temp(path: &Path, bytes: &[u8]) -> Result<Option<PathBuf>> {
    let tmp = path.with_extension(format!("tmp-{:016x}", crate::pack::random_u64()));
    match std::fs::write(&tmp, bytes).at(&tmp) {
        Ok(()) => Ok(Some(tmp)),
        Err(e) => {
            remove(&tmp);
            if e.is_disk_full() { Ok(None) } else { Err(e) }
        }
    }
}

fn rename_into(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path)
        .at(path)
        .inspect_err(|_| remove(tmp))
}

/// Best effort: what is left only costs space, and the next open sweeps temporaries.
fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

#[cfg(test)]
mod tests;
