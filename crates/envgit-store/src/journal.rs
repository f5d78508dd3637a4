//! The journal: the store's single source of truth for which objects exist and which steps
//! were committed. An append-only file of CRC-framed records:
//!
//! `magic u32 | type u8 | len u32 | payload | crc32c u32` (CRC over type, len and payload).
//!
//! An `Objects` frame lists the locations of objects a step added; the `Step` frame that
//! follows commits them. Anything after the last valid `Step` frame belongs to a step that never
//! committed: readers ignore it and the next writer cuts it off (borg's COMMIT rule). Only the
//! end can be torn: a damaged frame with an intact one after it is damage inside committed
//! history, and is reported (never read past, never cut off).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use crate::error::{IoContext, Result, StoreError};
use crate::id::{ObjectId, ObjectKind};
use crate::pack::Location;
use crate::step::Step;

const MAGIC: u32 = 0x4547_4a31; // "EGJ1"
const FRAME_OVERHEAD: u64 = 4 + 1 + 4 + 4;
const ENTRY_LEN: usize = 32 + 1 + 8 + 8 + 4 + 8;
/// Set in an entry's kind byte when the object is stored as a delta (store format 2).
const DELTA_BIT: u8 = 0x80;
/// A frame this large is garbage, not a record.
const MAX_FRAME: u32 = 1 << 30;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum FrameType {
    Objects = 1,
    Step = 2,
}

pub fn encode_objects(entries: &[(ObjectId, Location)]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(entries.len() * ENTRY_LEN);
    for (id, loc) in entries {
        payload.extend_from_slice(&id.0);
        payload.push(loc.kind as u8 | if loc.delta { DELTA_BIT } else { 0 });
        payload.extend_from_slice(&loc.pack.to_le_bytes());
        payload.extend_from_slice(&loc.offset.to_le_bytes());
        payload.extend_from_slice(&loc.stored_len.to_le_bytes());
        payload.extend_from_slice(&loc.raw_len.to_le_bytes());
    }
    frame(FrameType::Objects, &payload)
}

pub fn encode_step(step: &Step) -> Result<Vec<u8>> {
    let payload = serde_json::to_vec(step)
        .map_err(|e| StoreError::corrupt(format!("step does not serialize: {e}")))?;
    Ok(frame(FrameType::Step, &payload))
}

fn frame(ty: FrameType, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + FRAME_OVERHEAD as usize);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(ty as u8);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    let crc = crc32c::crc32c(&out[4..]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn decode_objects(payload: &[u8]) -> Result<Vec<(ObjectId, Location)>> {
    if !payload.len().is_multiple_of(ENTRY_LEN) {
        return Err(StoreError::corrupt(
            "journal objects frame has a bad length",
        ));
    }
    let mut out = Vec::with_capacity(payload.len() / ENTRY_LEN);
    for e in payload.chunks_exact(ENTRY_LEN) {
        let mut id = [0u8; 32];
        id.copy_from_slice(&e[..32]);
        let kind = ObjectKind::from_byte(e[32] & !DELTA_BIT)
            .ok_or_else(|| StoreError::corrupt("journal names an unknown object kind"))?;
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&e[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let mut len = [0u8; 4];
        len.copy_from_slice(&e[49..53]);
        out.push((
            ObjectId(id),
            Location {
                kind,
                pack: u64_at(33),
                offset: u64_at(41),
                stored_len: u32::from_le_bytes(len),
                raw_len: u64_at(53),
                delta: e[32] & DELTA_BIT != 0,
            },
        ));
    }
    Ok(out)
}

/// What a read of the journal found.
#[derive(Default)]
pub struct JournalRead {
    /// Committed objects, in journal order.
    pub objects: Vec<(ObjectId, Location)>,
    pub steps: Vec<Step>,
    /// End of the last committed frame: everything after it is an uncommitted tail.
    pub committed_end: u64,
}

/// Read committed frames starting at `from` (a frame boundary). With `want_objects` false the
/// objects frames are skipped without being read (what `log` needs).
pub fn read(path: &Path, from: u64, want_objects: bool) -> Result<JournalRead> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(JournalRead::default()),
        Err(e) => return Err(e).at(path),
    };
    let file_len = file.metadata().at(path)?.len();
    let mut r = BufReader::with_capacity(256 << 10, file);
    r.seek(SeekFrom::Start(from)).at(path)?;
    let mut out = JournalRead {
        committed_end: from,
        ..Default::default()
    };
    let mut pending: Vec<(ObjectId, Location)> = Vec::new();
    let mut pos = from;
    let mut damage = None;
    loop {
        let mut head = [0u8; 9];
        if pos + FRAME_OVERHEAD > file_len || r.read_exact(&mut head).is_err() {
            break;
        }
        let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let ty = head[4];
        let len = u32::from_le_bytes([head[5], head[6], head[7], head[8]]);
        if magic != MAGIC || len > MAX_FRAME || pos + FRAME_OVERHEAD + u64::from(len) > file_len {
            damage = Some("its header is not a frame header");
            break;
        }
        let frame_start = pos;
        let frame_end = pos + FRAME_OVERHEAD + u64::from(len);
        if ty == FrameType::Objects as u8 && !want_objects {
            // Committing frames are only trusted once their Step frame verifies; skipping is
            // safe because a torn Objects frame can never be followed by a valid Step frame
            // at the right offset by chance with a matching CRC.
            r.seek_relative(i64::from(len) + 4).at(path)?;
            pos = frame_end;
            continue;
        }
        let mut payload = vec![0u8; len as usize];
        let mut crc = [0u8; 4];
        if r.read_exact(&mut payload).is_err() || r.read_exact(&mut crc).is_err() {
            damage = Some("it ends before its length says");
            break;
        }
        let mut h = crc32c::crc32c(&head[4..]);
        h = crc32c::crc32c_append(h, &payload);
        if h != u32::from_le_bytes(crc) {
            damage = Some("its checksum does not match");
            break;
        }
        pos = frame_end;
        if ty == FrameType::Objects as u8 {
            pending.extend(decode_objects(&payload)?);
        } else if ty == FrameType::Step as u8 {
            let step: Step = serde_json::from_slice(&payload).map_err(|e| {
                StoreError::corrupt(format!("journal step record at byte {pos}: {e}"))
            })?;
            out.objects.append(&mut pending);
            out.steps.push(step);
            out.committed_end = pos;
        } else {
            // Checksummed, so written on purpose: by a newer envgit. Ending the journal here
            // would let the next commit cut off whatever that version wrote after it.
            return Err(StoreError::corrupt(format!(
                "{}: the frame at byte {frame_start} has type {ty}, which this envgit does not \
                 know (was the store written by a newer envgit?); nothing was changed: use the \
                 envgit that wrote it",
                path.display()
            )));
        }
    }
    if let Some(reason) = damage
        && let Some(next) = next_valid_frame(path, pos + 1)?
    {
        // A torn write only ever damages the end. Intact frames after a damaged one mean the
        // damage is inside committed history: reading on would skip steps, and treating it as
        // a tail would let the next commit cut them all off.
        return Err(StoreError::corrupt(format!(
            "{}: the frame at byte {pos} is damaged ({reason}), but an intact frame follows at \
             byte {next}: committed history is damaged, not an interrupted write. Nothing was \
             cut off or changed; copy the store aside before any repair, and restore the \
             journal from a backup if you have one",
            path.display()
        )));
    }
    Ok(out)
}

/// Where the first intact frame (magic, sane length, matching checksum) at or after `from`
/// begins, if any.
fn next_valid_frame(path: &Path, from: u64) -> Result<Option<u64>> {
    let mut file = File::open(path).at(path)?;
    file.seek(SeekFrom::Start(from)).at(path)?;
    let mut rest = Vec::new();
    file.read_to_end(&mut rest).at(path)?;
    let magic = MAGIC.to_le_bytes();
    let overhead = FRAME_OVERHEAD as usize;
    let mut at = 0;
    while at + overhead <= rest.len() {
        let Some(found) = rest[at..].windows(4).position(|w| w == magic) else {
            return Ok(None);
        };
        let start = at + found;
        if let Some(head) = rest.get(start + 4..start + 9) {
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let end = start + 9 + len;
            if let Some(crc) = rest.get(end..end + 4) {
                let body = &rest[start + 4..end];
                if crc32c::crc32c(body) == u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
                    return Ok(Some(from + start as u64));
                }
            }
        }
        at = start + 1;
    }
    Ok(None)
}
