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
use crate::step_log::StepRecord;

const MAGIC: u32 = 0x4547_4a31; // "EGJ1"
const FRAME_OVERHEAD: u64 = 4 + 1 + 4 + 4;
pub(crate) const ENTRY_LEN: usize = 32 + 1 + 8 + 8 + 4 + 8;
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
        encode_entry(&mut payload, id, loc);
    }
    frame(FrameType::Objects, &payload)
}

/// One object's entry ([`ENTRY_LEN`] bytes): its id, kind, and where it is. The object table
/// ([`crate::object_table`]) keeps the same entries, sorted.
pub(crate) fn encode_entry(out: &mut Vec<u8>, id: &ObjectId, loc: &Location) {
    out.extend_from_slice(&id.0);
    out.push(loc.kind as u8 | if loc.delta { DELTA_BIT } else { 0 });
    out.extend_from_slice(&loc.pack.to_le_bytes());
    out.extend_from_slice(&loc.offset.to_le_bytes());
    out.extend_from_slice(&loc.stored_len.to_le_bytes());
    out.extend_from_slice(&loc.raw_len.to_le_bytes());
}

/// The entry [`encode_entry`] wrote; `None` for an unknown kind.
pub(crate) fn decode_entry(e: &[u8; ENTRY_LEN]) -> Option<(ObjectId, Location)> {
    let id = ObjectId(e[..32].try_into().ok()?);
    let kind = ObjectKind::from_byte(e[32] & !DELTA_BIT)?;
    let u64_at = |i: usize| e[i..i + 8].try_into().ok().map(u64::from_le_bytes);
    Some((
        id,
        Location {
            kind,
            pack: u64_at(33)?,
            offset: u64_at(41)?,
            stored_len: u32::from_le_bytes(e[49..53].try_into().ok()?),
            raw_len: u64_at(53)?,
            delta: e[32] & DELTA_BIT != 0,
        },
    ))
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

/// Appends the frame's objects to `out`.
fn decode_objects(payload: &[u8], out: &mut Vec<(ObjectId, Location)>) -> Result<()> {
    if !payload.len().is_multiple_of(ENTRY_LEN) {
        return Err(StoreError::corrupt(
            "journal objects frame has a bad length",
        ));
    }
    out.reserve(payload.len() / ENTRY_LEN);
    for e in payload.as_chunks::<ENTRY_LEN>().0 {
        out.push(
            decode_entry(e)
                .ok_or_else(|| StoreError::corrupt("journal names an unknown object kind"))?,
        );
    }
    Ok(())
}

/// What a read of the journal found.
#[derive(Default)]
pub struct JournalRead {
    /// Committed objects, in journal order.
    pub objects: Vec<(ObjectId, Location)>,
    /// Step records, decoded when asked for ([`crate::step_log`]).
    pub steps: Vec<StepRecord>,
    /// End of the last committed frame: everything after it is an uncommitted tail.
    pub committed_end: u64,
}

/// Read committed frames starting at `from` (a frame boundary). With `want_objects` false the
/// objects frames are skipped without being read (what `log` needs).
pub fn read(path: &Path, from: u64, want_objects: bool) -> Result<JournalRead> {
    read_frames(path, from, if want_objects { from } else { u64::MAX }, from)
}

/// [`read`], decoding only the objects frames that start at or after `objects_from` (those
/// before it are what the object table, [`crate::object_table`], already holds) and reading
/// only the step frames that start at or after `steps_from`: those before it are what the
/// steps table ([`crate::steps_table`]) already holds. Such a frame is skipped unread, and commits the objects frames before it as a read
/// one would (the table vouches that it is there and intact when it was written, and it names
/// this very file).
pub fn read_frames(
    path: &Path,
    from: u64,
    objects_from: u64,
    steps_from: u64,
) -> Result<JournalRead> {
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
    let mut payload: Vec<u8> = Vec::new();
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
        if ty == FrameType::Objects as u8 && frame_start < objects_from {
            // Committing frames are only trusted once their Step frame verifies; skipping is
            // safe because a torn Objects frame can never be followed by a valid Step frame
            // at the right offset by chance with a matching CRC.
            r.seek_relative(i64::from(len) + 4).at(path)?;
            pos = frame_end;
            continue;
        }
        if ty == FrameType::Step as u8 && frame_start < steps_from {
            r.seek_relative(i64::from(len) + 4).at(path)?;
            pos = frame_end;
            commit_pending(&mut out.objects, &mut pending);
            out.committed_end = pos;
            continue;
        }
        // One buffer for every frame, filled without zeroing it first: at 100,000 files the
        // first frame alone is 6 MB, and each new page is a fault.
        payload.clear();
        let mut crc = [0u8; 4];
        let got = (&mut r).take(u64::from(len)).read_to_end(&mut payload);
        if !matches!(got, Ok(n) if n == len as usize) || r.read_exact(&mut crc).is_err() {
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
            decode_objects(&payload, &mut pending)?;
        } else if ty == FrameType::Step as u8 {
            let step = StepRecord::read(payload.clone(), frame_start)?;
            commit_pending(&mut out.objects, &mut pending);
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

/// The payload of the step record whose frame starts at `start` in `file` and holds `len`
/// payload bytes, checked as a read of the whole journal would check it (header, length,
/// checksum). `path` names the journal in errors.
pub(crate) fn read_step_frame(file: &File, path: &Path, start: u64, len: u32) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut frame = vec![0u8; FRAME_OVERHEAD as usize + len as usize];
    file.read_exact_at(&mut frame, start).at(path)?;
    step_payload(&frame, path, start)?;
    frame.truncate(frame.len() - 4);
    frame.drain(..9);
    Ok(frame)
}

/// The payload of `frame` (the bytes of one step frame, header to checksum, that started at
/// byte `start` of the journal at `path`) if it is one, whole and intact.
pub(crate) fn step_payload<'a>(frame: &'a [u8], path: &Path, start: u64) -> Result<&'a [u8]> {
    let damaged = |why: &str| {
        StoreError::corrupt(format!(
            "{}: the step record at byte {start} is damaged ({why}); nothing was changed: \
             `envgit fsck` says what else is",
            path.display()
        ))
    };
    let (head, rest) = frame
        .split_at_checked(9)
        .ok_or_else(|| damaged("it is cut short"))?;
    let (payload, crc) = rest
        .split_last_chunk::<4>()
        .ok_or_else(|| damaged("it is cut short"))?;
    if head[..4] != MAGIC.to_le_bytes()
        || head[4] != FrameType::Step as u8
        || u32::from_le_bytes([head[5], head[6], head[7], head[8]]) as usize != payload.len()
    {
        return Err(damaged("its header is not a step record's"));
    }
    let sum = crc32c::crc32c_append(crc32c::crc32c(&head[4..]), payload);
    if sum != u32::from_le_bytes(*crc) {
        return Err(damaged("its checksum does not match"));
    }
    Ok(payload)
}

/// The payload length of `frame` (one frame's bytes, as [`encode_step`] made them).
pub(crate) fn payload_len(frame: &[u8]) -> u32 {
    u32::try_from(frame.len() as u64 - FRAME_OVERHEAD).unwrap_or(u32::MAX)
}

/// The bytes a frame with `len` payload bytes takes in the journal.
pub(crate) fn frame_len(len: u32) -> u64 {
    FRAME_OVERHEAD + u64::from(len)
}

/// The objects a step frame commits join the committed ones.
fn commit_pending(
    committed: &mut Vec<(ObjectId, Location)>,
    pending: &mut Vec<(ObjectId, Location)>,
) {
    if committed.is_empty() {
        // Moved, not copied (the usual case: one step's objects or a whole import).
        std::mem::swap(committed, pending);
    } else {
        committed.append(pending);
    }
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

#[cfg(test)]
mod tests {
    //! Frames read straight from files a crash, a bad sector or a newer envgit would leave.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use super::*;
    use crate::journal_file::JournalFile;

    fn decoded(read: &JournalRead) -> Vec<Step> {
        read.steps
            .iter()
            .map(|r| r.get().unwrap().clone())
            .collect()
    }
    use crate::lock::Flock;
    use crate::step::{Placement, StepDraft};

    fn step(number: u64) -> Step {
        let draft = StepDraft {
            summary: format!("step {number}"),
            ..StepDraft::default()
        };
        let placement = Placement {
            number,
            parent: number.checked_sub(1).filter(|&p| p > 0),
            tree: ObjectId::of(ObjectKind::Tree, &number.to_le_bytes()),
            overlapped: false,
        };
        let mut step = draft.into_step(placement, Vec::new());
        // Fixed, so a step encoded twice is the same record.
        step.ended_at_ms = 1_000 + number;
        step
    }

    fn location(kind: ObjectKind, n: u64, delta: bool) -> Location {
        Location {
            pack: 0x1234_5678_9abc_def0 ^ n,
            offset: n * 1000,
            stored_len: 70_000 + n as u32,
            raw_len: u64::MAX - n,
            kind,
            delta,
        }
    }

    /// An objects frame naming every kind (and a delta), then the step committing them.
    fn commit(number: u64) -> (Vec<(ObjectId, Location)>, Vec<u8>) {
        let objects: Vec<(ObjectId, Location)> = ObjectKind::ALL
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let n = number * 10 + i as u64;
                (ObjectId::of(*k, &n.to_le_bytes()), location(*k, n, false))
            })
            .chain([(
                ObjectId::of(ObjectKind::Tree, b"delta"),
                location(ObjectKind::Tree, number * 10 + 9, true),
            )])
            .collect();
        let mut bytes = encode_objects(&objects);
        bytes.extend(encode_step(&step(number)).unwrap());
        (objects, bytes)
    }

    fn journal_with(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    fn message(e: StoreError) -> String {
        e.to_string()
    }

    #[test]
    fn frames_read_back_as_written() {
        let (objects1, mut bytes) = commit(1);
        let (objects2, second) = commit(2);
        bytes.extend(&second);
        let (_dir, path) = journal_with(&bytes);

        let read = read(&path, 0, true).unwrap();
        assert_eq!(decoded(&read), vec![step(1), step(2)]);
        assert_eq!(read.objects, [objects1, objects2].concat());
        assert_eq!(read.committed_end, bytes.len() as u64);

        // Skipping the objects frames gives the same steps and end.
        let steps_only = super::read(&path, 0, false).unwrap();
        assert_eq!(decoded(&steps_only), decoded(&read));
        assert!(steps_only.objects.is_empty());
        assert_eq!(steps_only.committed_end, read.committed_end);

        // Reading on from a committed end gives only what follows it.
        let first_end = (bytes.len() - second.len()) as u64;
        let later = super::read(&path, first_end, true).unwrap();
        assert_eq!(decoded(&later), vec![step(2)]);
        assert_eq!(later.committed_end, bytes.len() as u64);
    }

    #[test]
    fn a_missing_an_empty_and_a_header_only_journal_hold_no_steps() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read(&dir.path().join("journal"), 0, true).unwrap();
        assert!(missing.steps.is_empty() && missing.committed_end == 0);

        let (_d, empty) = journal_with(b"");
        let read_empty = read(&empty, 0, true).unwrap();
        assert!(read_empty.steps.is_empty() && read_empty.committed_end == 0);

        // A frame's header alone (the write stopped right after it), with no step before it
        // and after one.
        let header = encode_step(&step(1)).unwrap()[..9].to_vec();
        let (_d, only_header) = journal_with(&header);
        let r = read(&only_header, 0, true).unwrap();
        assert!(r.steps.is_empty() && r.committed_end == 0);

        let (_, mut bytes) = commit(1);
        let end = bytes.len() as u64;
        bytes.extend(&header);
        let (_d, after_step) = journal_with(&bytes);
        let r = read(&after_step, 0, true).unwrap();
        assert_eq!(decoded(&r), vec![step(1)]);
        assert_eq!(r.committed_end, end);
    }

    #[test]
    fn a_torn_last_commit_at_every_byte_is_not_committed_and_is_cut_only_there() {
        let (_, first) = commit(1);
        let (_, second) = commit(2);
        // Shorter than the torn commit, so a tail left in place would show after it.
        let third = encode_step(&step(3)).unwrap();
        let whole = [first.clone(), second].concat();
        for cut in first.len()..whole.len() {
            let (_dir, path) = journal_with(&whole[..cut]);
            let r = read(&path, 0, true).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert_eq!(decoded(&r), vec![step(1)], "cut at {cut}");
            assert_eq!(r.committed_end, first.len() as u64, "cut at {cut}");

            // The next writer cuts the torn tail off at the committed end, and nowhere else.
            let mut file = JournalFile::new(path.parent().unwrap());
            file.read_new(true).unwrap();
            file.append(&third).unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                [first.clone(), third.clone()].concat(),
                "cut at {cut}"
            );
            assert_eq!(
                decoded(&read(&path, 0, true).unwrap()),
                vec![step(1), step(3)]
            );
        }
    }

    #[test]
    fn a_damaged_frame_before_an_intact_one_is_an_error_naming_file_and_offset() {
        let (_, first) = commit(1);
        let (_, second) = commit(2);
        let whole = [first.clone(), second].concat();
        let objects_len = encode_objects(&commit(1).0).len();
        // A byte inside the first commit's objects frame, and one inside its step frame.
        // The next intact frame: the step frame after a damaged objects frame, the second
        // commit after a damaged step frame.
        for (at, frame_start, next) in [
            (20, 0, objects_len),
            (objects_len + 30, objects_len, first.len()),
        ] {
            let mut damaged = whole.clone();
            damaged[at] ^= 0x40;
            let (_dir, path) = journal_with(&damaged);
            let e = message(read(&path, 0, true).err().expect("damage is reported"));
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(
                e.contains(&format!("at byte {frame_start} is damaged")),
                "{e}"
            );
            assert!(e.contains(&format!("follows at byte {next}")), "{e}");

            // The writer refuses too, and leaves every byte where it was.
            let mut file = JournalFile::new(path.parent().unwrap());
            assert!(file.read_new(true).is_err());
            assert_eq!(std::fs::read(&path).unwrap(), damaged);
        }
    }

    #[test]
    fn an_unknown_frame_type_is_reported_with_its_offset() {
        let (_, first) = commit(1);
        let mut bytes = first.clone();
        let mut unknown = frame(FrameType::Step, b"from a newer envgit");
        unknown[4] = 9;
        let crc = crc32c::crc32c(&unknown[4..unknown.len() - 4]);
        let n = unknown.len();
        unknown[n - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes.extend(&unknown);
        let (_dir, path) = journal_with(&bytes);
        let e = message(
            read(&path, 0, true)
                .err()
                .expect("unknown type is reported"),
        );
        assert!(
            e.contains(&format!("at byte {} has type 9", first.len())),
            "{e}"
        );
        assert!(e.contains(&path.display().to_string()), "{e}");
    }

    #[test]
    fn an_objects_frame_with_an_unknown_kind_is_corrupt() {
        let (objects, _) = commit(1);
        let mut bytes = encode_objects(&objects[..1]);
        // The kind byte of the first entry, after the 9-byte header and the 32-byte id.
        bytes[9 + 32] = 7;
        let n = bytes.len();
        let crc = crc32c::crc32c(&bytes[4..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes.extend(encode_step(&step(1)).unwrap());
        let (_dir, path) = journal_with(&bytes);
        let e = message(
            read(&path, 0, true)
                .err()
                .expect("unknown kind is reported"),
        );
        assert!(e.contains("unknown object kind"), "{e}");
    }

    #[test]
    fn appends_from_two_threads_under_the_lock_never_interleave() {
        const EACH: u64 = 40;
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().to_path_buf();
        let writers: Vec<_> = [0u64, 1]
            .into_iter()
            .map(|w| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let mut file = JournalFile::new(&store);
                    for i in 0..EACH {
                        let _lock = Flock::exclusive(&store.join("lock")).unwrap();
                        file.read_new(false).unwrap();
                        let (_, bytes) = commit(1 + w * 1000 + i);
                        file.append(&bytes).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let r = read(&store.join("journal"), 0, true).unwrap();
        assert_eq!(r.steps.len() as u64, 2 * EACH);
        assert_eq!(r.objects.len() as u64, 2 * EACH * 4);
        assert_eq!(
            r.committed_end,
            std::fs::metadata(store.join("journal")).unwrap().len()
        );
        // Each writer's steps are all there, in its own order.
        for w in [0u64, 1] {
            let mine: Vec<u64> = r
                .steps
                .iter()
                .map(|s| s.number())
                .filter(|n| (n - 1) / 1000 == w)
                .collect();
            let want: Vec<u64> = (0..EACH).map(|i| 1 + w * 1000 + i).collect();
            assert_eq!(mine, want);
        }
    }
}
