//! The stat index on disk (the store's `stat.cache`, git's index idea): per directory of the
//! last tree, its tree id, the start of the scan that read it, and its entries with their
//! `lstat` data (mtime and ctime in ns, size, inode, device, mode, links). A one-shot command
//! loads it so that an unchanged file costs one `lstat`; the racy-timestamp rule (in the scan)
//! re-reads any entry whose mtime is not older than its directory's scan.
//!
//! It is a cache: written to a temporary file and renamed into place (no fsync; a torn file
//! fails its checksum), and not written at all when its bytes would be those on disk (a
//! directory whose entries did not change keeps its stamp, so an unchanged project encodes
//! the same), and a missing, torn, corrupt, foreign (another scan configuration) or
//! other-version index is ignored — the scan then reads every file — never trusted. Its
//! encoding is its own, not the tree objects'.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::error::{IoContext, Result};
use crate::id::ObjectId;
use crate::lock::Flock;
use crate::store::Store;
use crate::tree::{EntryKind, MarkerReason, TreeEntry};
use crate::worktree::{CachedEntry, DirState, INDEX_NOT_ON_DISK, StatKey, WorkTree};

/// 03: its own entry encoding (02 embedded tree objects).
const MAGIC: &[u8; 8] = b"EGSTAT03";

impl WorkTree {
    /// Save the state as the store's stat index, renamed into place under the store's commit
    /// lock (like every file the store replaces). A full disk is not an error: the step it
    /// follows is committed already, and an older index or none only makes the next scan read
    /// more.
    pub fn save_index(&self, store: &Store) -> Result<()> {
        let out = encode(self);
        let summary = summary_of(&out);
        if self.index_on_disk.load(Ordering::Relaxed) == summary {
            // What is on disk already (a step that changed nothing): not written again.
            return Ok(());
        }
        self.write_with_lock(
            &store.stat_cache_path(),
            &out,
            Some(&store.dir().join("lock")),
        )?;
        self.index_on_disk.store(summary, Ordering::Relaxed);
        Ok(())
    }

    /// Load the store's stat index if it is sound and made with this scan configuration.
    pub fn load_index(&mut self, store: &Store) {
        self.load_index_of(store.dir());
    }

    /// [`WorkTree::load_index`] for the store at `store_dir`, before (or while) it is opened.
    pub fn load_index_of(&mut self, store_dir: &Path) {
        let summary = self.load_from(&crate::store::stat_cache_path(store_dir));
        self.index_on_disk
            .store(summary.unwrap_or(INDEX_NOT_ON_DISK), Ordering::Relaxed);
    }

    /// Save the state to `path` (a copy: no store lock is taken).
    pub fn save_cache(&self, path: &Path) -> Result<()> {
        self.write_with_lock(path, &encode(self), None)
    }

    /// Load a state saved with [`WorkTree::save_cache`]; anything unsound is ignored.
    pub fn load_cache(&mut self, path: &Path) {
        self.load_from(path);
        // Not the store's index: the next save_index writes it whatever it holds.
        self.index_on_disk
            .store(INDEX_NOT_ON_DISK, Ordering::Relaxed);
    }

    /// The state at `path` if it is sound; its summary when it was taken.
    fn load_from(&mut self, path: &Path) -> Option<u64> {
        let bytes = std::fs::read(path).ok()?;
        let dirs = decode(&bytes, &self.config().fingerprint)?;
        self.dirs = dirs;
        Some(summary_of(&bytes))
    }

    fn write_with_lock(&self, path: &Path, out: &[u8], lock: Option<&Path>) -> Result<()> {
        let tmp = path.with_extension(format!("tmp-{:016x}", crate::pack::random_u64()));
        if let Err(e) = std::fs::write(&tmp, out).at(&tmp) {
            let _ = std::fs::remove_file(&tmp);
            return if e.is_disk_full() { Ok(()) } else { Err(e) };
        }
        let _held = match lock {
            Some(l) => match Flock::exclusive(l) {
                Ok(held) => Some(held),
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            },
            None => None,
        };
        let renamed = std::fs::rename(&tmp, path).at(path);
        if renamed.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        renamed
    }
}

/// An encoded index's checksum (its last 4 bytes) and length, in one word: equal summaries of
/// two encodings of the same scan configuration mean the same bytes. A collision would only
/// leave an older index on disk, which the next scan checks against `lstat` like any other.
fn summary_of(encoded: &[u8]) -> u64 {
    let crc = encoded
        .len()
        .checked_sub(4)
        .and_then(|at| encoded.get(at..))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_le_bytes);
    ((encoded.len() as u64 & 0xffff_ffff) << 32) | u64::from(crc)
}

fn kind_byte(kind: EntryKind) -> u8 {
    match kind {
        EntryKind::File => 1,
        EntryKind::Symlink => 2,
        EntryKind::Dir => 3,
        EntryKind::Marker(r) => 0x80 | r as u8,
    }
}

fn kind_of(b: u8) -> Option<EntryKind> {
    Some(match b {
        1 => EntryKind::File,
        2 => EntryKind::Symlink,
        3 => EntryKind::Dir,
        _ => EntryKind::Marker(match b ^ 0x80 {
            1 => MarkerReason::Excluded,
            2 => MarkerReason::TooLarge,
            3 => MarkerReason::Special,
            4 => MarkerReason::Unreadable,
            5 => MarkerReason::Purged,
            6 => MarkerReason::TooDeep,
            7 => MarkerReason::OverBudget,
            _ => return None,
        }),
    })
}

/// Bytes of one entry besides its name.
const ENTRY_FIXED: usize = 1 + 4 + 8 + 32 + 2 + 8 * 5 + 4 + 4;

fn encode(wt: &WorkTree) -> Vec<u8> {
    let entries: usize = wt.dirs.values().map(|d| d.entries.len()).sum();
    let mut out = Vec::with_capacity(entries * (ENTRY_FIXED + 16) + wt.dirs.len() * 64 + 64);
    out.extend_from_slice(MAGIC);
    let fp = wt.config().fingerprint.as_bytes();
    out.extend_from_slice(&(fp.len() as u32).to_le_bytes());
    out.extend_from_slice(fp);
    out.extend_from_slice(&(wt.dirs.len() as u32).to_le_bytes());
    // In path order: the same state always encodes to the same bytes (see `summary_of`).
    let mut dirs: Vec<(&Vec<u8>, &DirState)> = wt.dirs.iter().collect();
    dirs.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (rel, d) in dirs {
        out.extend_from_slice(&(rel.len() as u32).to_le_bytes());
        out.extend_from_slice(rel);
        out.extend_from_slice(&d.tree.0);
        out.extend_from_slice(&d.stamp_ns.to_le_bytes());
        out.extend_from_slice(&(d.entries.len() as u32).to_le_bytes());
        for CachedEntry { entry: e, stat: s } in &d.entries {
            // Names come from readdir: at most 255 bytes.
            let len = u16::try_from(e.name.len()).unwrap_or(u16::MAX);
            out.push(kind_byte(e.kind));
            out.extend_from_slice(&e.mode.to_le_bytes());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&e.id.0);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&e.name[..usize::from(len)]);
            out.extend_from_slice(&s.mtime_ns.to_le_bytes());
            out.extend_from_slice(&s.ctime_ns.to_le_bytes());
            out.extend_from_slice(&s.ino.to_le_bytes());
            out.extend_from_slice(&s.dev.to_le_bytes());
            out.extend_from_slice(&s.size.to_le_bytes());
            out.extend_from_slice(&s.mode.to_le_bytes());
            out.extend_from_slice(&s.nlink.to_le_bytes());
        }
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A relative directory path as the scan makes them: empty (the root) or `/`-joined names.
fn sound_rel(rel: &[u8]) -> bool {
    rel.is_empty() || rel.split(|&b| b == b'/').all(sound_name)
}

fn sound_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

fn decode(b: &[u8], fingerprint: &str) -> Option<HashMap<Vec<u8>, DirState>> {
    if b.len() < 12 || &b[..8] != MAGIC {
        return None;
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut r = Cursor { b: body, pos: 8 };
    let fp_len = r.u32()? as usize;
    if r.take(fp_len)? != fingerprint.as_bytes() {
        return None;
    }
    let ndirs = r.u32()? as usize;
    let mut dirs = HashMap::with_capacity(ndirs.min(body.len() / 48));
    for _ in 0..ndirs {
        let rel_len = r.u32()? as usize;
        let rel = r.take(rel_len)?.to_vec();
        if !sound_rel(&rel) {
            return None;
        }
        let tree = ObjectId(r.take(32)?.try_into().ok()?);
        let stamp_ns = r.i64()?;
        let n = r.u32()? as usize;
        let mut entries: Vec<CachedEntry> = Vec::with_capacity(n.min(body.len() / ENTRY_FIXED));
        for _ in 0..n {
            let kind = kind_of(r.take(1)?[0])?;
            let mode = r.u32()?;
            let size = r.u64()?;
            let id = ObjectId(r.take(32)?.try_into().ok()?);
            let len = usize::from(u16::from_le_bytes(r.take(2)?.try_into().ok()?));
            let name = r.take(len)?;
            if !sound_name(name)
                || entries
                    .last()
                    .is_some_and(|p| p.entry.name.as_slice() >= name)
            {
                return None;
            }
            let entry = TreeEntry {
                name: name.to_vec(),
                kind,
                mode,
                size,
                id,
            };
            let stat = StatKey {
                mtime_ns: r.i64()?,
                ctime_ns: r.i64()?,
                ino: r.u64()?,
                dev: r.u64()?,
                size: r.u64()?,
                mode: r.u32()?,
                nlink: r.u32()?,
            };
            entries.push(CachedEntry { entry, stat });
        }
        if dirs
            .insert(
                rel,
                DirState {
                    tree,
                    stamp_ns,
                    entries,
                },
            )
            .is_some()
        {
            return None;
        }
    }
    (r.pos == body.len()).then_some(dirs)
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worktree::ScanConfig;

    #[test]
    fn round_trip_and_every_damage_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("d/e/f"), "f").unwrap();
        std::os::unix::fs::symlink("x", root.join("d/l")).unwrap();
        let store = Store::create(&tmp.path().join("s"), &root).unwrap();
        let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
        wt.full_scan(&store, None).unwrap();
        let bytes = encode(&wt);
        let dirs = decode(&bytes, "").unwrap();
        assert_eq!(dirs.len(), wt.dirs.len());
        for (rel, d) in &wt.dirs {
            let got = &dirs[rel];
            assert_eq!((got.tree, got.stamp_ns), (d.tree, d.stamp_ns));
            let pairs = got.entries.iter().zip(&d.entries);
            assert!(
                pairs
                    .into_iter()
                    .all(|(a, b)| a.entry == b.entry && a.stat == b.stat)
            );
        }
        assert!(decode(&bytes, "another configuration").is_none());
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 1;
            assert!(decode(&bad, "").is_none(), "byte {i} flipped");
            assert!(decode(&bytes[..i], "").is_none(), "cut at {i}");
        }
    }

    /// Every file of `root`, its mtime set an hour back: older than any racy margin.
    fn age_files(root: &Path) {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for e in walk_files(root) {
            std::fs::File::options()
                .write(true)
                .open(&e)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
    }

    fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk_files(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    fn inode(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).unwrap().ino()
    }

    /// A scan that finds nothing changed keeps every directory's stamp, so the index it would
    /// save is the one on disk: not written again. An edit that keeps size and mtime is still
    /// found (its ctime moved), and the index is written.
    #[test]
    fn an_unchanged_project_does_not_rewrite_the_index() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("p");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("d/e/f"), "ffff").unwrap();
        std::fs::write(root.join("g"), "gggg").unwrap();
        age_files(&root);
        let store = Store::create(&tmp.path().join("s"), &root).unwrap();
        let index = store.stat_cache_path();
        let scan = |store: &Store| {
            let mut wt = WorkTree::new(&root, ScanConfig::default(), None).unwrap();
            wt.load_index(store);
            let (tree, _) = wt.full_scan(store, None).unwrap();
            wt.save_index(store).unwrap();
            tree
        };
        let first = scan(&store);
        // Twice: the first reload may settle what the first scan found too recent (the
        // directories' own stamps), after that nothing moves.
        scan(&store);
        let settled = inode(&index);
        assert_eq!(scan(&store), first);
        assert_eq!(
            inode(&index),
            settled,
            "an unchanged scan rewrote the index"
        );

        let f = root.join("d/e/f");
        let mtime = std::fs::metadata(&f).unwrap().modified().unwrap();
        std::fs::write(&f, "FFFF").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let edited = scan(&store);
        assert_ne!(edited, first, "an edit keeping size and mtime was missed");
        assert_ne!(
            inode(&index),
            settled,
            "the index of a changed tree was not written"
        );
        assert_eq!(scan(&store), edited);
    }
}
