//! A file's content into the store: taken from the stat cache when its `lstat` vouches for it,
//! otherwise read (blob, or chunks for a large file) within the scan's budget; trees and link
//! targets are always written.

use std::ffi::CStr;
use std::fs::File;
use std::io::Read;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use rustix::fs::FileType;
use rustix::io::Errno;

use crate::beneath;
use crate::budget::Reservation;
use crate::chunk;
use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::tree::{EntryKind, MarkerReason, TreeEntry};

use super::entry::{CachedEntry, DirState, StatKey, marker, marker_of};
use super::walk::Ctx;

impl Ctx<'_> {
    /// The cached entry of an unchanged file: its `lstat` matches the one recorded, it last
    /// changed clearly before the scan that recorded it (the racy-timestamp rule), its content is in
    /// the store, and it is not over `snapshot.max_file_size`. `vouched`: the caller found
    /// `prev`'s tree in the store, which vouches for every object it names (see
    /// `Ctx::read_named`); else each file's object is looked up.
    pub(super) fn cached_file(
        &self,
        name: &[u8],
        st: &rustix::fs::Stat,
        prev: Option<&DirState>,
        vouched: bool,
    ) -> Option<CachedEntry> {
        let d = prev?;
        let p = d.get(name)?;
        let key = StatKey::of(st);
        let hit = p.entry.kind == EntryKind::File
            && p.stat == key
            && key.size <= self.config.max_file_size
            && !self.racy.is_racy(&p.stat, d.stamp_ns)
            && (vouched || self.store.has(&p.entry.id));
        if !hit {
            return None;
        }
        if let Some(pr) = self.progress {
            pr.files.fetch_add(1, Ordering::Relaxed);
        }
        Some(p.clone())
    }

    pub(super) fn file_entry(
        &self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        rel: &[u8],
        st: &rustix::fs::Stat,
        prev: Option<&DirState>,
    ) -> Result<CachedEntry> {
        let nb = name.to_bytes();
        let key = StatKey::of(st);
        let mode = st.st_mode & 0o777;
        if key.size > self.config.max_file_size {
            return Ok(marker_of(nb, MarkerReason::TooLarge, key.size, key));
        }
        if let Some(hit) = self.cached_file(nb, st, prev, false) {
            return Ok(hit);
        }
        // Room for the most reading it could append, known from the lstat: nothing is
        // measured or read before this, so an unchanged tree never pays for the budget.
        let room = self.budget.reserve(self.store, key.size);
        if !room.granted()
            && let Some(p) = prev.and_then(|p| p.get(nb))
            && p.entry.kind == EntryKind::Marker(MarkerReason::OverBudget)
            && p.stat == key
        {
            // Left out before and unchanged since: its content is still not in the store.
            self.budget.left_out(rel, key.size);
            return Ok(p.clone());
        }
        let path = || PathBuf::from(beneath::display_rel(rel));
        let mut attempt = 0;
        loop {
            let fd = match beneath::open_file(dir, name) {
                Ok(fd) => fd,
                Err(Errno::ACCESS | Errno::PERM) => {
                    return Ok(marker_of(nb, MarkerReason::Unreadable, key.size, key));
                }
                Err(Errno::LOOP | Errno::NOENT) => {
                    return Ok(marker(nb, MarkerReason::Unreadable, 0));
                }
                Err(e) => return Err(e).at(&path()),
            };
            let before = rustix::fs::fstat(&fd).at(&path())?;
            let before_key = StatKey::of(&before);
            if beneath::file_type(&before) != FileType::RegularFile {
                return Ok(marker_of(nb, MarkerReason::Special, 0, before_key));
            }
            if before_key.size > self.config.max_file_size {
                return Ok(marker_of(
                    nb,
                    MarkerReason::TooLarge,
                    before_key.size,
                    before_key,
                ));
            }
            let mut file = File::from(fd);
            let stored = self
                .hash_and_store(&mut file, before_key.size, &room)
                .map_err(|e| match e {
                    StoreError::Io { source, .. } => StoreError::Io {
                        path: path(),
                        source,
                    },
                    e => e,
                })?;
            let Some((id, size)) = stored else {
                // New content that does not fit: a marker, never a full disk.
                self.budget.left_out(rel, before_key.size);
                return Ok(marker_of(
                    nb,
                    MarkerReason::OverBudget,
                    before_key.size,
                    before_key,
                ));
            };
            let after = StatKey::of(&rustix::fs::fstat(&file).at(&path())?);
            self.hashed.fetch_add(1, Ordering::Relaxed);
            if let Some(pr) = self.progress {
                pr.files.fetch_add(1, Ordering::Relaxed);
                pr.bytes.fetch_add(size, Ordering::Relaxed);
            }
            let stable = after == before_key && after.size == size;
            if stable || attempt == 1 {
                if !stable {
                    self.any_unstable.store(true, Ordering::Relaxed);
                    if let Ok(mut u) = self.unstable.lock() {
                        u.push(beneath::display_rel(rel));
                    }
                }
                return Ok(CachedEntry {
                    entry: TreeEntry {
                        name: nb.to_vec(),
                        kind: EntryKind::File,
                        mode,
                        size,
                        id,
                    },
                    stat: if stable { after } else { after.smudged() },
                });
            }
            attempt += 1;
        }
    }

    /// The file's id and size, its new content appended within `room`; `None` when that
    /// content is new and does not fit (nothing of it is then kept, at most what a file that
    /// grew past its reservation wrote before it ran out).
    pub(super) fn hash_and_store(
        &self,
        file: &mut File,
        size_hint: u64,
        room: &Reservation<'_>,
    ) -> Result<Option<(ObjectId, u64)>> {
        if size_hint > chunk::CHUNK_THRESHOLD {
            let mut counted = CountingReader { inner: file, n: 0 };
            let id = chunk::store_chunked(&mut counted, |kind, bytes| {
                self.store.put_within(kind, bytes, room)
            })?;
            return Ok(id.map(|id| (id, counted.n)));
        }
        // At most the chunking threshold in memory: a file that grew since its stat is
        // streamed through the chunker from what was read on.
        let mut buf = Vec::with_capacity(size_hint as usize + 1);
        (&mut *file)
            .take(chunk::CHUNK_THRESHOLD + 1)
            .read_to_end(&mut buf)
            .map_err(|source| StoreError::Io {
                path: PathBuf::new(),
                source,
            })?;
        if buf.len() as u64 > chunk::CHUNK_THRESHOLD {
            let mut counted = CountingReader { inner: file, n: 0 };
            let id = chunk::store_chunked(buf.as_slice().chain(&mut counted), |kind, bytes| {
                self.store.put_within(kind, bytes, room)
            })?;
            return Ok(id.map(|id| (id, buf.len() as u64 + counted.n)));
        }
        let id = self.store.put_within(ObjectKind::Blob, &buf, room)?;
        Ok(id.map(|id| (id, buf.len() as u64)))
    }
}

struct CountingReader<'a> {
    inner: &'a mut File,
    n: u64,
}

impl Read for CountingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}
