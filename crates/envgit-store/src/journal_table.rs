//! What the tables kept beside the journal share (the object table, the steps table): each
//! is a cache of what the journal says up to a point, trusted only while it names the journal
//! as it is. A table is its magic, the journal's device and inode (u64 each), the position it
//! covers (u64) and the 4 bytes before that position (the checksum of the frame that ended
//! there), then its own body, then a CRC-32C of everything before it. It is written to a
//! temporary and renamed into place, without fsync: a torn file fails its checksum.

use std::collections::HashMap;
use std::path::Path;

use crate::byte_cursor::ByteCursor;
use crate::journal_file::{JournalMark, frame_end_at, journal_ends_with};

/// The body of `bytes`, a table of kind `magic` in the store at `store_dir`, and the journal
/// position it covers; `None` unless it is sound and names the journal `journal` (device,
/// inode) as it is now.
pub(crate) fn open<'a>(
    store_dir: &Path,
    bytes: &'a [u8],
    magic: &[u8; 8],
    journal: (u64, u64),
) -> Option<(ByteCursor<'a>, u64)> {
    open_checked(store_dir, bytes, magic, journal, false)
}

/// [`open`], the table's checksum taken as good when `checked` (earlier in this boot: see
/// [`crate::checked_this_boot`]).
pub(crate) fn open_checked<'a>(
    store_dir: &Path,
    bytes: &'a [u8],
    magic: &[u8; 8],
    journal: (u64, u64),
    checked: bool,
) -> Option<(ByteCursor<'a>, u64)> {
    if journal == (0, 0) {
        return None;
    }
    let (body, crc) = bytes.split_last_chunk::<4>()?;
    if !checked && crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
        return None;
    }
    let mut r = ByteCursor::new(body);
    if r.take(8)? != magic || (r.u64()?, r.u64()?) != journal {
        return None;
    }
    let covers = r.u64()?;
    let frame_end: [u8; 4] = r.take(4)?.try_into().ok()?;
    journal_ends_with(store_dir, covers, frame_end).then_some((r, covers))
}

/// A table of kind `magic` covering the journal up to `mark`, its header written, with room
/// for `capacity` bytes in all; `None` if the journal does not reach `mark`.
pub(crate) fn begin(
    store_dir: &Path,
    magic: &[u8; 8],
    mark: JournalMark,
    capacity: usize,
) -> Option<Vec<u8>> {
    let frame_end = frame_end_at(store_dir, mark.pos)?;
    let mut out = Vec::with_capacity(capacity + 40);
    out.extend_from_slice(magic);
    out.extend_from_slice(&mark.ident.0.to_le_bytes());
    out.extend_from_slice(&mark.ident.1.to_le_bytes());
    out.extend_from_slice(&mark.pos.to_le_bytes());
    out.extend_from_slice(&frame_end);
    Some(out)
}

/// Seals `out` with its checksum and puts it at `path` (a temporary in `store_dir`, renamed);
/// whether it got there. Best effort: a table that cannot be written only leaves the next
/// open to read more of the journal.
pub(crate) fn seal_and_replace(store_dir: &Path, path: &Path, out: &mut Vec<u8>) -> bool {
    let crc = crc32c::crc32c(out);
    out.extend_from_slice(&crc.to_le_bytes());
    let tmp = store_dir.join(format!(".tmp-{:016x}", crate::pack::random_u64()));
    if std::fs::write(&tmp, &out).is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
        return false;
    }
    true
}

/// The packs' committed ends: a count (u32), then pack and end (u64 each) per pack.
pub(crate) fn write_pack_ends(out: &mut Vec<u8>, pack_ends: &HashMap<u64, u64>) {
    out.extend_from_slice(&(pack_ends.len() as u32).to_le_bytes());
    for (pack, end) in pack_ends {
        out.extend_from_slice(&pack.to_le_bytes());
        out.extend_from_slice(&end.to_le_bytes());
    }
}

/// What [`write_pack_ends`] wrote.
pub(crate) fn read_pack_ends(r: &mut ByteCursor<'_>) -> Option<HashMap<u64, u64>> {
    let npacks = r.u32()? as usize;
    let mut pack_ends = HashMap::with_capacity(npacks.min(r.b.len() / 16));
    for _ in 0..npacks {
        pack_ends.insert(r.u64()?, r.u64()?);
    }
    Some(pack_ends)
}
