//! The stat index's byte format. Both files share one record per directory (its path, tree
//! id, scan stamp and entries with their `lstat` data), each after its length; a header names
//! the format, the scan configuration and the base the tail belongs to, and a CRC-32C of
//! everything before it ends each file. The length lets a base be read a record at a time
//! through a small buffer: at 100,000 files it is 12 MB, and reading it whole into fresh
//! memory cost a page fault per 4 KiB.
//!
//! - base (`stat.cache`): `EGSTAT04`, configuration, base id, every directory's record in
//!   path order.
//! - tail (`stat.tail`): `EGSTTL04`, configuration, the base id it applies to, the paths of
//!   the base's directories that are gone, then the records that replace or add to the base's.

use std::ops::Range;

use crate::byte_cursor::ByteCursor as Cursor;
use crate::id::ObjectId;
use crate::mapped::FileBytes;
use crate::tree::{EntryKind, MarkerReason, TreeEntry};
use crate::worktree::{CachedEntry, DirMap, DirState, Held, RecordCodec, StatKey};

/// 04: a base with an id, and tails (03 was one file).
pub(super) const BASE_MAGIC: &[u8; 8] = b"EGSTAT04";
pub(super) const TAIL_MAGIC: &[u8; 8] = b"EGSTTL04";

/// Bytes of one entry besides its name.
const ENTRY_FIXED: usize = 1 + 4 + 8 + 32 + 2 + 8 * 5 + 4 + 4;

/// Directories' states by relative path.
pub(super) type Dirs = DirMap;
pub(super) use crate::worktree::RecordSums;

/// A base as encoded: the file's bytes (checksum included) and where each directory's
/// record lies in them, in path order.
pub(super) struct EncodedBase<'a> {
    pub bytes: Vec<u8>,
    pub records: Vec<(&'a [u8], Range<usize>, u32)>,
}

fn header(out: &mut Vec<u8>, magic: &[u8; 8], fingerprint: &str, base_id: u64) {
    out.extend_from_slice(magic);
    out.extend_from_slice(&(fingerprint.len() as u32).to_le_bytes());
    out.extend_from_slice(fingerprint.as_bytes());
    out.extend_from_slice(&base_id.to_le_bytes());
}

fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub(super) fn encode_base<'a>(dirs: &'a Dirs, fingerprint: &str, base_id: u64) -> EncodedBase<'a> {
    let mut out = Vec::with_capacity(dirs.len() * 4096 + 64);
    header(&mut out, BASE_MAGIC, fingerprint, base_id);
    out.extend_from_slice(&(dirs.len() as u32).to_le_bytes());
    let mut records = Vec::with_capacity(dirs.len());
    for rel in in_path_order(dirs) {
        let start = out.len();
        let crc = match dirs.held(rel) {
            // Still the loaded record: the same bytes, not decoded to be encoded again.
            Some(Held::Record(record)) => {
                out.extend_from_slice(&(record.len() as u32).to_le_bytes());
                out.extend_from_slice(record);
                crc32c::crc32c(record)
            }
            Some(Held::State(d)) => append_record(&mut out, rel, d),
            None => continue,
        };
        records.push((rel.as_slice(), start..out.len(), crc));
    }
    EncodedBase {
        bytes: seal(out),
        records,
    }
}

/// The directories' paths in order: the same state always gives the same records.
pub(super) fn in_path_order(dirs: &Dirs) -> Vec<&Vec<u8>> {
    let mut sorted: Vec<&Vec<u8>> = dirs.keys().collect();
    sorted.sort_unstable();
    sorted
}

/// One directory's record after its length, appended to `out`; the record's checksum.
pub(super) fn append_record(out: &mut Vec<u8>, rel: &[u8], d: &DirState) -> u32 {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    encode_record(out, rel, d);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    crc32c::crc32c(&out[at + 4..])
}

/// A tail over base `base_id`: `removed` are the base's directories that are gone, `changed`
/// the `count` records (as [`append_record`] wrote them) that replace or add to the base's.
pub(super) fn encode_tail(
    fingerprint: &str,
    base_id: u64,
    removed: &[&[u8]],
    count: usize,
    changed: &[u8],
) -> Vec<u8> {
    let size: usize = removed.iter().map(|r| r.len() + 4).sum::<usize>() + changed.len();
    let mut out = Vec::with_capacity(size + fingerprint.len() + 64);
    header(&mut out, TAIL_MAGIC, fingerprint, base_id);
    out.extend_from_slice(&(removed.len() as u32).to_le_bytes());
    for rel in removed {
        out.extend_from_slice(&(rel.len() as u32).to_le_bytes());
        out.extend_from_slice(rel);
    }
    out.extend_from_slice(&(count as u32).to_le_bytes());
    out.extend_from_slice(changed);
    seal(out)
}

fn encode_record(out: &mut Vec<u8>, rel: &[u8], d: &DirState) {
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

/// An encoded file's checksum (its last 4 bytes) and length, in one word: equal summaries of
/// two encodings mean the same bytes. A collision would only leave an older index on disk,
/// which the next scan checks against `lstat` like any other.
pub(super) fn summary_of(encoded: &[u8]) -> u64 {
    let crc = encoded
        .len()
        .checked_sub(4)
        .and_then(|at| encoded.get(at..))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, u32::from_le_bytes);
    ((encoded.len() as u64 & 0xffff_ffff) << 32) | u64::from(crc)
}

/// The body of a sound file of this format and configuration, after its header, and the base
/// id the header names.
fn open<'a>(b: &'a [u8], magic: &[u8; 8], fingerprint: &str) -> Option<(Cursor<'a>, u64)> {
    open_checked(b, magic, fingerprint, false)
}

/// [`open`], its checksum taken as good when `checked` (earlier in this boot: see
/// [`crate::checked_this_boot`]).
fn open_checked<'a>(
    b: &'a [u8],
    magic: &[u8; 8],
    fingerprint: &str,
    checked: bool,
) -> Option<(Cursor<'a>, u64)> {
    if b.len() < 12 || &b[..8] != magic {
        return None;
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if !checked && crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut r = Cursor { b: body, pos: 8 };
    let fp_len = r.u32()? as usize;
    if r.take(fp_len)? != fingerprint.as_bytes() {
        return None;
    }
    let base_id = r.u64()?;
    Some((r, base_id))
}

/// A base: its id, its directories and their record checksums.
#[cfg(test)]
pub(super) fn decode_base(b: &[u8], fingerprint: &str) -> Option<(u64, Dirs, RecordSums)> {
    read_base(FileBytes::Held(b.to_vec()), fingerprint, false)
}

/// The base whose bytes are `b`: its id, its directories (each record checked, and decoded
/// only when used: [`DirMap`]) and their record checksums. `checked`: these bytes passed
/// every check earlier in this boot ([`crate::checked_this_boot`]), so only each record's
/// place and path are read.
pub(super) fn read_base(
    b: FileBytes,
    fingerprint: &str,
    checked: bool,
) -> Option<(u64, Dirs, RecordSums)> {
    let (mut r, base_id) = open_checked(&b, BASE_MAGIC, fingerprint, checked)?;
    let ndirs = r.u32()? as usize;
    let mut records = Vec::with_capacity(ndirs.min(b.len() / 48));
    let mut seen = std::collections::HashSet::with_capacity_and_hasher(
        records.capacity(),
        foldhash::fast::RandomState::default(),
    );
    for _ in 0..ndirs {
        let len = r.u32()? as usize;
        let start = r.pos;
        let record = r.take(len)?;
        let mut c = Cursor::new(record);
        let rel = if checked {
            record_rel(&mut c)?
        } else {
            let rel = parse_record(&mut c, b.len(), |_| {})?.rel;
            if !c.at_end() {
                return None;
            }
            rel
        };
        if !seen.insert(rel) {
            return None;
        }
        records.push((rel.to_vec(), start..start + len));
    }
    if !r.at_end() {
        return None;
    }
    drop(seen);
    let b = std::sync::Arc::new(b);
    let sums = RecordSums::at(b.clone(), records.iter().cloned());
    let codec = RecordCodec {
        decode: decode_checked_record,
        tree: checked_record_tree,
        stamp_if_same: checked_record_stamp_if_same,
    };
    let dirs = DirMap::of_records(b, records, codec);
    Some((base_id, dirs, sums))
}

/// The path at the head of a record, which [`parse_record`] reads first.
fn record_rel<'a>(r: &mut Cursor<'a>) -> Option<&'a [u8]> {
    let rel_len = r.u32()? as usize;
    let rel = r.take(rel_len)?;
    sound_rel(rel).then_some(rel)
}

/// Each entry's name, kind and `lstat` in a record [`read_base`] checked, without decoding it.
pub(crate) fn visit_record(record: &[u8], mut f: impl FnMut(&[u8], EntryKind, &StatKey)) {
    let mut c = Cursor::new(record);
    parse_record(&mut c, record.len(), |e| f(e.name, e.kind, &e.stat));
}

/// A record [`read_base`] checked, decoded.
fn decode_checked_record(record: &[u8]) -> Option<DirState> {
    let mut c = Cursor::new(record);
    decode_record(&mut c, record.len()).map(|(_, state)| state)
}

/// The tree id of a record [`read_base`] checked, read from its head alone.
fn checked_record_tree(record: &[u8]) -> Option<ObjectId> {
    let mut c = Cursor::new(record);
    let rel_len = c.u32()? as usize;
    c.take(rel_len)?;
    Some(ObjectId(c.take(32)?.try_into().ok()?))
}

/// The stamp of a record [`read_base`] checked, when its entries are exactly `entries` (as a
/// decoded state's would compare equal), without decoding them.
fn checked_record_stamp_if_same(record: &[u8], entries: &[CachedEntry]) -> Option<i64> {
    let mut c = Cursor::new(record);
    let mut at = 0;
    let mut same = true;
    let head = parse_record(&mut c, record.len(), |e| {
        same = same
            && entries.get(at).is_some_and(|x| {
                x.entry.name == e.name
                    && x.entry.kind == e.kind
                    && x.entry.mode == e.mode
                    && x.entry.size == e.size
                    && x.entry.id == e.id
                    && x.stat == e.stat
            });
        at += 1;
    })?;
    (same && at == entries.len()).then_some(head.stamp_ns)
}

/// Applies a tail to the base `base_id` it was written for; `None` (and `dirs` untouched) if
/// it is unsound, of another configuration or of another base.
pub(super) fn apply_tail(b: &[u8], fingerprint: &str, base_id: u64, dirs: &mut Dirs) -> Option<()> {
    let (mut r, of) = open(b, TAIL_MAGIC, fingerprint)?;
    if of != base_id {
        return None;
    }
    let nremoved = r.u32()? as usize;
    let mut removed = Vec::with_capacity(nremoved.min(b.len() / 4));
    for _ in 0..nremoved {
        let len = r.u32()? as usize;
        let rel = r.take(len)?;
        if !sound_rel(rel) {
            return None;
        }
        removed.push(rel);
    }
    let nchanged = r.u32()? as usize;
    let mut changed = Vec::with_capacity(nchanged.min(b.len() / 48));
    for _ in 0..nchanged {
        let len = r.u32()? as usize;
        let mut record = Cursor {
            b: r.take(len)?,
            pos: 0,
        };
        changed.push(decode_record(&mut record, b.len())?);
        if !record.at_end() {
            return None;
        }
    }
    if !r.at_end() {
        return None;
    }
    for rel in removed {
        dirs.remove(rel);
    }
    dirs.extend(changed);
    Some(())
}

/// What a record holds besides its entries.
struct RecordHead<'a> {
    rel: &'a [u8],
    tree: ObjectId,
    stamp_ns: i64,
}

/// One entry as a record holds it.
struct RecordEntry<'a> {
    name: &'a [u8],
    kind: EntryKind,
    mode: u32,
    size: u64,
    id: ObjectId,
    stat: StatKey,
}

/// Reads one record, handing each entry to `on_entry`; `None` if it is not sound (a bad path,
/// name or kind, names out of order, or bytes missing).
fn parse_record<'a>(
    r: &mut Cursor<'a>,
    file_len: usize,
    mut on_entry: impl FnMut(RecordEntry<'a>),
) -> Option<RecordHead<'a>> {
    let rel_len = r.u32()? as usize;
    let rel = r.take(rel_len)?;
    if !sound_rel(rel) {
        return None;
    }
    let tree = ObjectId(r.take(32)?.try_into().ok()?);
    let stamp_ns = r.i64()?;
    let n = r.u32()? as usize;
    if n > file_len / ENTRY_FIXED {
        return None;
    }
    let mut prev: Option<&[u8]> = None;
    for _ in 0..n {
        let kind = kind_of(r.take(1)?[0])?;
        let mode = r.u32()?;
        let size = r.u64()?;
        let id = ObjectId(r.take(32)?.try_into().ok()?);
        let len = usize::from(u16::from_le_bytes(r.take(2)?.try_into().ok()?));
        let name = r.take(len)?;
        if !sound_name(name) || prev.is_some_and(|p| p >= name) {
            return None;
        }
        prev = Some(name);
        let stat = StatKey {
            mtime_ns: r.i64()?,
            ctime_ns: r.i64()?,
            ino: r.u64()?,
            dev: r.u64()?,
            size: r.u64()?,
            mode: r.u32()?,
            nlink: r.u32()?,
        };
        on_entry(RecordEntry {
            name,
            kind,
            mode,
            size,
            id,
            stat,
        });
    }
    Some(RecordHead {
        rel,
        tree,
        stamp_ns,
    })
}

fn decode_record(r: &mut Cursor<'_>, file_len: usize) -> Option<(Vec<u8>, DirState)> {
    let mut entries: Vec<CachedEntry> = Vec::new();
    let head = parse_record(r, file_len, |e| {
        entries.push(CachedEntry {
            entry: TreeEntry {
                name: e.name.to_vec(),
                kind: e.kind,
                mode: e.mode,
                size: e.size,
                id: e.id,
            },
            stat: e.stat,
        });
    })?;
    Some((
        head.rel.to_vec(),
        DirState {
            tree: head.tree,
            stamp_ns: head.stamp_ns,
            entries,
        },
    ))
}

/// The base id a base file's header names, read without decoding the rest.
pub(super) fn base_id_in_header(head: &[u8], fingerprint: &str) -> Option<u64> {
    if head.get(..8)? != BASE_MAGIC {
        return None;
    }
    let mut r = Cursor { b: head, pos: 8 };
    let fp_len = r.u32()? as usize;
    if r.take(fp_len)? != fingerprint.as_bytes() {
        return None;
    }
    r.u64()
}

/// Bytes a base's header takes for this configuration.
pub(super) fn header_len(fingerprint: &str) -> usize {
    8 + 4 + fingerprint.len() + 8
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

/// A relative directory path as the scan makes them: empty (the root) or `/`-joined names.
fn sound_rel(rel: &[u8]) -> bool {
    rel.is_empty() || rel.split(|&b| b == b'/').all(sound_name)
}

fn sound_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}
