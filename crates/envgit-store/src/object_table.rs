//! The committed objects as of a point in the journal, sorted by id and saved beside it
//! (`objects.table`; git's pack `.idx` idea). Opening a store read every objects frame of the
//! journal into a hash map: at 100,000 files that was 6 MB of entries and 24–32 ms of every
//! one-shot command (`perf`: the map's inserts and the page faults of its memory). With the
//! table an open reads one file, checks it, and decodes only the objects frames after the
//! point it covers; a lookup that misses those is a binary search in the table's bytes.
//!
//! It is a cache: written to a temporary and renamed into place (no fsync: a torn file fails
//! its checksum), and ignored, never trusted, unless it is sound and names the journal as it
//! is — the same file (device, inode) whose bytes just before the point it covers are the
//! checksum of the frame that ended there when it was written. gc rewrites the journal (a new
//! file) and removes the table.
//!
//! `EGOBJT01`, journal device and inode (u64 each), the journal position it covers (u64) and
//! the 4 bytes before it, the packs' committed ends (count u32, then pack u64 and end u64
//! each), the entry count (u64), the entries (the journal's [`journal::ENTRY_LEN`]-byte
//! encoding) in id order without duplicates, then a CRC-32C of everything before it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::id::{ObjectId, ObjectKind};
use crate::journal::{self, ENTRY_LEN};
use crate::journal_file::JournalMark;
use crate::journal_table;
use crate::mapped::FileBytes;
use crate::pack::Location;

const MAGIC: &[u8; 8] = b"EGOBJT01";

/// Where the table of the store at `store_dir` is.
pub(crate) fn path(store_dir: &Path) -> PathBuf {
    store_dir.join("objects.table")
}

pub(crate) struct ObjectTable {
    /// The file's bytes.
    bytes: FileBytes,
    /// Where the entries start in `bytes`.
    entries_at: usize,
    count: usize,
    /// The journal position it covers: objects frames before it are in the table.
    pub covers: u64,
    /// Per pack, the end of its last committed object as of `covers`.
    pub pack_ends: HashMap<u64, u64>,
}

impl ObjectTable {
    /// The table of the store at `store_dir` if it is sound and covers a committed point of
    /// the journal `journal` (device, inode) as it is now.
    pub(crate) fn load(store_dir: &Path, journal: (u64, u64)) -> Option<Self> {
        if journal == (0, 0) {
            return None;
        }
        let (bytes, opened) = FileBytes::of_replaced_file_opened(&path(store_dir)).ok()?;
        let checked = opened.was_checked();
        let (mut r, covers) =
            journal_table::open_checked(store_dir, &bytes, MAGIC, journal, checked)?;
        let pack_ends = journal_table::read_pack_ends(&mut r)?;
        let count = usize::try_from(r.u64()?).ok()?;
        let entries_at = r.pos;
        if r.b.len() - entries_at != count.checked_mul(ENTRY_LEN)? {
            return None;
        }
        let table = Self {
            entries_at,
            count,
            covers,
            pack_ends,
            bytes,
        };
        // Binary search needs strictly increasing ids; one pass over what the CRC read anyway.
        if !checked {
            if !(1..count).all(|i| table.id_at(i - 1) < table.id_at(i)) {
                return None;
            }
            opened.passed();
        }
        Some(table)
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    fn entry(&self, i: usize) -> &[u8; ENTRY_LEN] {
        let at = self.entries_at + i * ENTRY_LEN;
        self.bytes[at..at + ENTRY_LEN]
            .try_into()
            .unwrap_or(&[0; ENTRY_LEN])
    }

    fn id_at(&self, i: usize) -> &[u8] {
        &self.entry(i)[..32]
    }

    /// Where `id` is, if the table has it.
    pub(crate) fn get(&self, id: &ObjectId) -> Option<Location> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.id_at(mid).cmp(&id.0) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    return journal::decode_entry(self.entry(mid)).map(|e| e.1);
                }
            }
        }
        None
    }

    /// Every entry, in id order (an entry of an unknown kind, which a sound table never has,
    /// is left out).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (ObjectId, Location)> + '_ {
        (0..self.count).filter_map(|i| journal::decode_entry(self.entry(i)))
    }

    /// The ids of one kind.
    pub(crate) fn ids_of(&self, kind: ObjectKind) -> impl Iterator<Item = ObjectId> + '_ {
        self.iter()
            .filter(move |(_, l)| l.kind == kind)
            .map(|(id, _)| id)
    }
}

/// Writes the table of `entries` (sorted by id, no duplicates) covering the journal up to
/// `mark`, whose committed packs end at `pack_ends`; the table written. Best effort: a table
/// that cannot be written leaves the next open to read the journal's objects frames, as
/// before there was one.
pub(crate) fn write<'a>(
    store_dir: &Path,
    mark: JournalMark,
    pack_ends: &HashMap<u64, u64>,
    count: usize,
    entries: impl Iterator<Item = (&'a ObjectId, &'a Location)>,
) -> Option<ObjectTable> {
    let capacity = 16 + pack_ends.len() * 16 + count * ENTRY_LEN;
    let mut out = journal_table::begin(store_dir, MAGIC, mark, capacity)?;
    journal_table::write_pack_ends(&mut out, pack_ends);
    out.extend_from_slice(&(count as u64).to_le_bytes());
    let entries_at = out.len();
    for (id, loc) in entries {
        journal::encode_entry(&mut out, id, loc);
    }
    // Kept in memory whether or not it reached the disk: it is what the journal says.
    journal_table::seal_and_replace(store_dir, &path(store_dir), &mut out);
    Some(ObjectTable {
        count: (out.len() - 4 - entries_at) / ENTRY_LEN,
        bytes: FileBytes::Held(out),
        entries_at,
        covers: mark.pos,
        pack_ends: pack_ends.clone(),
    })
}

/// Removes the table (gc, before it replaces the journal). Best effort: a table of another
/// journal is ignored anyway.
pub(crate) fn remove(store_dir: &Path) {
    let _ = std::fs::remove_file(path(store_dir));
    crate::checked_this_boot::forget(&path(store_dir));
}
