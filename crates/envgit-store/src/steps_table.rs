//! Where each step record is in the journal, as of a point in it, saved beside it
//! (`steps.table`): the object table's idea ([`crate::object_table`]) for the step records.
//! Opening a store read every step frame of the journal, ~1.2 µs a step: a 1,380-step project
//! paid 1.7 ms of every `envgit run`, growing with every command. With the table an open reads
//! 20 bytes a step and the journal only after the point the table covers; a record is read from
//! the journal when it is asked for, and checked then as a whole read would check it.
//!
//! It is a cache: written to a temporary and renamed into place (no fsync: a torn file fails
//! its checksum), and ignored, never trusted, unless it is sound and names the journal as it
//! is: the same file (device, inode) whose bytes just before the point it covers are the
//! checksum of the frame that ended there when it was written. gc rewrites the journal (a new
//! file) and removes the table.
//!
//! It also carries the committed objects the object table did not hold at its point
//! ([`Untabled`]): without them an open read every frame after the object table's point to
//! find its objects frames, and steps that add no object push that point ever further back
//! (835 KB of journal read at every open of a 1,381-step project).
//!
//! `EGSTPT01`, journal device and inode (u64 each), the journal position it covers (u64) and
//! the 4 bytes before it, the record count (u64), then per record, oldest first, its number
//! (u64), where its frame starts (u64) and its payload's length (u32); then the objects: the
//! object table's point they continue from (u64; 0 for none, `u64::MAX` for no objects
//! part), the packs' committed ends (count u32, then pack u64 and end u64 each), the entry
//! count (u64) and the entries (the journal's [`journal::ENTRY_LEN`]-byte encoding); then a
//! CRC-32C of everything before it.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::backend::Untabled;
use crate::byte_cursor::ByteCursor;
use crate::journal::{self, ENTRY_LEN as OBJECT_ENTRY_LEN, frame_len};
use crate::journal_file::JournalMark;
use crate::journal_table;
use crate::mapped::FileBytes;

const MAGIC: &[u8; 8] = b"EGSTPT01";
const ENTRY_LEN: usize = 8 + 8 + 4;

/// Where the table of the store at `store_dir` is.
pub(crate) fn path(store_dir: &Path) -> PathBuf {
    store_dir.join("steps.table")
}

/// One step record: its number, where its frame starts, how long its payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableEntry {
    pub number: u64,
    pub start: u64,
    pub len: u32,
}

pub(crate) struct StepsTable {
    /// The journal position it covers: step frames before it are its entries.
    pub covers: u64,
    pub entries: Entries,
    /// The objects committed as of `covers` that the object table did not hold.
    pub objects: Option<Untabled>,
}

/// The table's step entries, oldest first, each read from the table's bytes (mapped) when
/// asked for: an open makes nothing per step (a 5,200-step project's open made 5,200 records
/// and copied the 110 KB table, ~0.3 ms of a step in page faults).
pub(crate) struct Entries {
    bytes: FileBytes,
    /// Where the first entry starts in `bytes`.
    from: usize,
    count: usize,
}

impl Entries {
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Entry `i` (checked at load: every one is in the bytes).
    pub(crate) fn get(&self, i: usize) -> Option<TableEntry> {
        if i >= self.count {
            return None;
        }
        let at = self.from + i * ENTRY_LEN;
        let mut r = ByteCursor::new(self.bytes.get(at..at + ENTRY_LEN)?);
        Some(TableEntry {
            number: r.u64()?,
            start: r.u64()?,
            len: r.u32()?,
        })
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = TableEntry> + '_ {
        (0..self.count).filter_map(|i| self.get(i))
    }
}

/// `from` when a table carries no objects.
const NO_OBJECTS: u64 = u64::MAX;

/// The table of the store at `store_dir` if it is sound and covers a committed point of the
/// journal `journal` (device, inode) as it is now; with the journal opened (that very file,
/// for the records to be read from later, whatever replaces it).
pub(crate) fn load(store_dir: &Path, journal: (u64, u64)) -> Option<(StepsTable, File)> {
    // Replaced only by a rename (`journal_table::seal_and_replace`): it may be mapped.
    let bytes = FileBytes::of_replaced_file(&path(store_dir)).ok()?;
    let (from, count, covers, objects) = {
        let (mut r, covers) = journal_table::open(store_dir, &bytes, MAGIC, journal)?;
        let count = usize::try_from(r.u64()?).ok()?;
        let from = r.pos;
        r.take(count.checked_mul(ENTRY_LEN)?)?;
        let objects = read_objects(&mut r)?;
        if !r.at_end() {
            return None;
        }
        (from, count, covers, objects)
    };
    let entries = Entries { bytes, from, count };
    // Frames in journal order, none overlapping the next, the last ending at `covers`.
    let mut free_from = 0;
    for e in entries.iter() {
        if e.start < free_from {
            return None;
        }
        free_from = e.start.checked_add(frame_len(e.len))?;
    }
    if free_from != covers {
        return None;
    }
    let file = File::open(store_dir.join("journal")).ok()?;
    let m = file.metadata().ok()?;
    if (m.dev(), m.ino()) != journal {
        return None;
    }
    Some((
        StepsTable {
            covers,
            entries,
            objects,
        },
        file,
    ))
}

/// The objects part; `Some(None)` for a table without one, `None` for a malformed one.
fn read_objects(r: &mut ByteCursor<'_>) -> Option<Option<Untabled>> {
    let from = r.u64()?;
    if from == NO_OBJECTS {
        return Some(None);
    }
    let pack_ends = journal_table::read_pack_ends(r)?;
    let count = usize::try_from(r.u64()?).ok()?;
    let bytes = r.take(count.checked_mul(OBJECT_ENTRY_LEN)?)?;
    let entries = bytes
        .as_chunks::<OBJECT_ENTRY_LEN>()
        .0
        .iter()
        .map(journal::decode_entry)
        .collect::<Option<Vec<_>>>()?;
    Some(Some(Untabled {
        from,
        pack_ends,
        entries,
    }))
}

/// Writes the table of `entries` (every step record, oldest first, the last ending at
/// `mark`); whether it was written. Best effort: a table that cannot be written leaves the
/// next open to read the step frames, as before there was one.
pub(crate) fn write(
    store_dir: &Path,
    mark: JournalMark,
    entries: &[TableEntry],
    objects: Option<&Untabled>,
) -> bool {
    let ends_at_mark = entries
        .last()
        .is_some_and(|e| e.start + frame_len(e.len) == mark.pos);
    let capacity = 8
        + entries.len() * ENTRY_LEN
        + objects.map_or(8, |o| {
            20 + o.pack_ends.len() * 16 + o.entries.len() * OBJECT_ENTRY_LEN
        });
    let Some(mut out) =
        journal_table::begin(store_dir, MAGIC, mark, capacity).filter(|_| ends_at_mark)
    else {
        return false;
    };
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        out.extend_from_slice(&e.number.to_le_bytes());
        out.extend_from_slice(&e.start.to_le_bytes());
        out.extend_from_slice(&e.len.to_le_bytes());
    }
    match objects {
        None => out.extend_from_slice(&NO_OBJECTS.to_le_bytes()),
        Some(o) => {
            out.extend_from_slice(&o.from.to_le_bytes());
            journal_table::write_pack_ends(&mut out, &o.pack_ends);
            out.extend_from_slice(&(o.entries.len() as u64).to_le_bytes());
            for (id, loc) in &o.entries {
                journal::encode_entry(&mut out, id, loc);
            }
        }
    }
    journal_table::seal_and_replace(store_dir, &path(store_dir), &mut out)
}

/// Removes the table (gc, before it replaces the journal). Best effort: a table of another
/// journal is ignored anyway.
pub(crate) fn remove(store_dir: &Path) {
    let _ = std::fs::remove_file(path(store_dir));
}
