//! A store file's bytes, mapped instead of read. Reading the stat index (825 KiB at 10,000
//! files) and the object table into a fresh buffer cost every one-shot command a page fault
//! per 4 KiB of new memory, zeroed, then a copy: ~1.9 ms and ~0.8 ms of CPU a step (`perf`,
//! `clear_page_erms` and `_copy_to_iter` under `read`). Mapped, the pages already in the page
//! cache are mapped as they are, 16 to a fault.
//!
//! Only for files the store replaces whole by a rename and never writes or truncates in place
//! (`stat.cache`, `stat.tail`, `objects.table`, `steps.table`): a mapping keeps the inode it was made from,
//! so a writer's new file never changes bytes under a reader. The store's directory is its
//! user's alone and hidden from every sandbox.

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::Path;

/// A file's bytes: mapped, or held (a file too small to be worth a mapping, or bytes this
/// process made).
pub(crate) enum FileBytes {
    Mapped(memmap2::Mmap),
    Held(Vec<u8>),
}

/// Below this a read costs less than a mapping and its unmapping.
const MAP_FROM: u64 = 64 << 10;

impl FileBytes {
    /// The bytes of the file at `path`, which must be one the store replaces only by a rename.
    pub(crate) fn of_replaced_file(path: &Path) -> io::Result<Self> {
        Self::of_replaced_file_opened(path).map(|(bytes, _)| bytes)
    }

    /// [`Self::of_replaced_file`], and the file as opened: whether it passed its checks
    /// earlier in this boot ([`crate::checked_this_boot`]).
    pub(crate) fn of_replaced_file_opened(
        path: &Path,
    ) -> io::Result<(Self, crate::checked_this_boot::Opened)> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        let opened = crate::checked_this_boot::Opened::new(path, &meta);
        let len = meta.len();
        if len < MAP_FROM {
            let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
            io::Read::read_to_end(&mut &file, &mut bytes)?;
            return Ok((Self::Held(bytes), opened));
        }
        // SAFETY: a mapping is undefined behaviour only if the file changes under it. The store
        // never writes or truncates these files once they are renamed into place (each is
        // written whole to a temporary first), and their directory is this user's, hidden from
        // every sandbox: only a process of this user that sets out to truncate one could fault
        // this one, as with git's mapped index and packs.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok((Self::Mapped(map), opened))
    }
}

impl Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(m) => m,
            Self::Held(v) => v,
        }
    }
}

impl Default for FileBytes {
    fn default() -> Self {
        Self::Held(Vec::new())
    }
}
