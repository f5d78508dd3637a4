//! What the working tree remembers of each entry: its `lstat` (the stat cache's key), its tree
//! entry, and per directory the start of the scan that read it (git's racy-timestamp rule).

use crate::id::ObjectId;
use crate::tree::{EntryKind, MarkerReason, TreeEntry, ZERO_ID};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatKey {
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    pub size: u64,
    /// File type and permission bits (`st_mode`).
    pub mode: u32,
    /// Hard links to the inode (saturating): the sandbox makes a file read-only when some of
    /// its links are outside the project. A change also changes ctime, so it costs no rehash
    /// of its own.
    pub nlink: u32,
}

impl StatKey {
    pub(crate) fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
            ino: st.st_ino,
            dev: st.st_dev,
            size: st.st_size as u64,
            mode: st.st_mode,
            nlink: u32::try_from(st.st_nlink).unwrap_or(u32::MAX),
        }
    }

    /// A directory (a marker keeps the `lstat` of what it stands for, or none: mode 0).
    pub fn is_dir(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFDIR
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFREG
    }
    /// A socket: a host process may be listening on it.
    pub fn is_socket(&self) -> bool {
        self.mode & libc_mode::S_IFMT == libc_mode::S_IFSOCK
    }

    /// A key that never matches: the file is read again next time.
    pub(crate) fn smudged(mut self) -> Self {
        self.size = u64::MAX;
        self
    }
}

/// `st_mode`'s file-type bits (the same on every Linux architecture).
mod libc_mode {
    pub const S_IFMT: u32 = 0o170_000;
    pub const S_IFDIR: u32 = 0o040_000;
    pub const S_IFREG: u32 = 0o100_000;
    pub const S_IFSOCK: u32 = 0o140_000;
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedEntry {
    pub entry: TreeEntry,
    /// The entry's `lstat` when it was read; for a marker, that of the path it stands for
    /// (mode 0 when there is none: the store's own directory, a path that raced away).
    pub stat: StatKey,
}

#[derive(Clone, Debug)]
pub struct DirState {
    pub tree: ObjectId,
    /// Start of the scan that last read this directory (ns since the epoch): the racy-timestamp
    /// rule compares its entries' mtimes with it.
    pub stamp_ns: i64,
    /// Sorted by name.
    pub entries: Vec<CachedEntry>,
}

/// An empty directory whose tree is not known.
impl Default for DirState {
    fn default() -> Self {
        Self {
            tree: ZERO_ID,
            stamp_ns: 0,
            entries: Vec::new(),
        }
    }
}

impl DirState {
    pub(super) fn get(&self, name: &[u8]) -> Option<&CachedEntry> {
        self.entries
            .binary_search_by(|e| e.entry.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }
}

/// Where a file still to be read goes (replaced before the entries are used).
pub(super) fn placeholder() -> CachedEntry {
    marker(b"", MarkerReason::Unreadable, 0)
}

pub(super) fn marker(name: &[u8], reason: MarkerReason, size: u64) -> CachedEntry {
    marker_of(name, reason, size, StatKey::default())
}

/// A marker that keeps the `lstat` of the path it stands for (the sandbox's plan reads link
/// counts and directory-ness from the index).
pub(super) fn marker_of(
    name: &[u8],
    reason: MarkerReason,
    size: u64,
    stat: StatKey,
) -> CachedEntry {
    CachedEntry {
        entry: TreeEntry {
            name: name.to_vec(),
            kind: EntryKind::Marker(reason),
            mode: 0,
            size,
            id: ZERO_ID,
        },
        stat,
    }
}
