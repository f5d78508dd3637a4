//! The store's steps as the journal holds them: each record decoded the first time it is
//! asked for. A one-shot command needs the newest step and a few more by number; decoding
//! every record of the history at each start cost ~2.4 µs a step (a 1,000-step project:
//! 2.4 ms of every `envgit run`, growing with every command). Reading every record's bytes
//! still cost ~1.2 µs a step (a 1,380-step project: 1.7 ms of every open), so the records the
//! steps table ([`crate::steps_table`]) names stay in the journal until asked for; and making
//! a record per tabled step at every open still grew with the history (~0.3 ms of a step at
//! 5,200 steps, in page faults), so those are read from the table's mapped bytes, by
//! position, and only a step asked for is decoded and kept.
//!
//! A record's number is read from the start of its bytes (`{"number":N,`, how `encode_step`
//! writes it); a record that does not start so is decoded at once, so damage there is reported
//! when the journal is read. The newest record is always decoded when it is read: `head` never
//! fails. Any other record that turns out not to decode (or, left in the journal, not to be
//! the intact frame the table says) is reported, as corrupt, to whoever asks for it; it is
//! never skipped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::backend::{ObjectBackend, Untabled};
use crate::error::{IoContext, Result, StoreError};
use crate::journal;
use crate::journal_file::JournalMark;
use crate::step::Step;
use crate::steps_table::{self, TableEntry};

/// Where a record's bytes are until it is decoded.
enum Bytes {
    /// Read with the journal's frames.
    Held(Box<[u8]>),
    /// None: a record this process wrote, decoded from the start.
    Written,
}

/// One step record of the journal.
pub struct StepRecord {
    number: u64,
    /// Where the record's frame starts in the journal.
    start: u64,
    /// How many bytes its payload is.
    len: u32,
    bytes: Bytes,
    /// Boxed: a `Step` is hundreds of bytes, and most records are never decoded.
    decoded: OnceLock<Box<Step>>,
}

fn decode(raw: &[u8], at: u64) -> Result<Step> {
    serde_json::from_slice(raw)
        .map_err(|e| StoreError::corrupt(format!("journal step record at byte {at}: {e}")))
}

/// The number a record starts with, if it starts as `encode_step` writes it.
fn leading_number(raw: &[u8]) -> Option<u64> {
    let rest = raw.strip_prefix(b"{\"number\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 || !matches!(rest.get(digits), Some(b',' | b'}')) {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

impl StepRecord {
    /// A record read from the journal, its frame starting at byte `start`.
    pub(crate) fn read(raw: Vec<u8>, start: u64) -> Result<Self> {
        let decoded = OnceLock::new();
        let number = match leading_number(&raw) {
            Some(n) => n,
            None => {
                let step = decode(&raw, start)?;
                let n = step.number;
                let _ = decoded.set(Box::new(step));
                n
            }
        };
        Ok(Self {
            number,
            start,
            len: u32::try_from(raw.len()).unwrap_or(u32::MAX),
            bytes: Bytes::Held(raw.into_boxed_slice()),
            decoded,
        })
    }

    /// A record this process wrote, its frame at `start` with a payload of `len` bytes.
    pub(crate) fn written(step: Step, start: u64, len: u32) -> Self {
        Self {
            number: step.number,
            start,
            len,
            bytes: Bytes::Written,
            decoded: OnceLock::from(Box::new(step)),
        }
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    fn entry(&self) -> TableEntry {
        TableEntry {
            number: self.number,
            start: self.start,
            len: self.len,
        }
    }

    pub(crate) fn get(&self) -> Result<&Step> {
        if let Some(step) = self.decoded.get() {
            return Ok(step.as_ref());
        }
        let step = match &self.bytes {
            Bytes::Held(raw) => decode_checked(&self.entry(), raw)?,
            Bytes::Written => {
                return Err(StoreError::corrupt(format!(
                    "journal step record at byte {} has no bytes",
                    self.start
                )));
            }
        };
        Ok(self.decoded.get_or_init(|| Box::new(step)).as_ref())
    }
}

/// A step decoded from `raw`, which must be the step `entry`'s number says.
fn decode_checked(entry: &TableEntry, raw: &[u8]) -> Result<Step> {
    let step = decode(raw, entry.start)?;
    if step.number != entry.number {
        return Err(StoreError::corrupt(format!(
            "journal step record at byte {}: its number is {} and {}",
            entry.start, entry.number, step.number
        )));
    }
    Ok(step)
}

/// The records the steps table holds: still in the journal, each read and decoded the first
/// time it is asked for.
struct Tabled {
    entries: steps_table::Entries,
    /// The journal `file` (at `path`) as the table was opened against it.
    journal: (File, PathBuf),
    /// One slot per entry, made at the first decode (most opens decode none of these).
    decoded: OnceLock<Box<[OnceLock<Box<Step>>]>>,
}

impl Tabled {
    fn slots(&self) -> &[OnceLock<Box<Step>>] {
        self.decoded
            .get_or_init(|| (0..self.entries.len()).map(|_| OnceLock::new()).collect())
    }

    fn entry(&self, i: usize) -> Result<TableEntry> {
        self.entries
            .get(i)
            .ok_or_else(|| StoreError::corrupt(format!("steps table: no entry {i}")))
    }

    fn decoded(&self, i: usize) -> Option<&Step> {
        self.decoded.get()?.get(i)?.get().map(AsRef::as_ref)
    }

    fn get(&self, i: usize) -> Result<&Step> {
        if let Some(step) = self.decoded(i) {
            return Ok(step);
        }
        let e = self.entry(i)?;
        let (file, path) = &self.journal;
        let raw = journal::read_step_frame(file, path, e.start, e.len)?;
        let step = decode_checked(&e, &raw)?;
        let slot = self
            .slots()
            .get(i)
            .ok_or_else(|| StoreError::corrupt(format!("steps table: no entry {i}")))?;
        Ok(slot.get_or_init(|| Box::new(step)).as_ref())
    }

    /// Every step, oldest first: the frames not yet decoded read with one read, not one each.
    fn all(&self) -> Result<Vec<Step>> {
        let n = self.entries.len();
        let (Some(first), Some(last)) = (self.entries.get(0), self.entries.get(n.wrapping_sub(1)))
        else {
            return Ok(Vec::new());
        };
        let (file, path) = &self.journal;
        let end = last.start + journal::frame_len(last.len);
        let mut bytes = vec![0u8; usize::try_from(end - first.start).unwrap_or(0)];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, first.start).at(path)?;
        self.entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                if let Some(step) = self.decoded(i) {
                    return Ok(step.clone());
                }
                let at = usize::try_from(e.start - first.start).unwrap_or(usize::MAX);
                let frame = at
                    .checked_add(usize::try_from(journal::frame_len(e.len)).unwrap_or(0))
                    .and_then(|end| bytes.get(at..end))
                    .unwrap_or_default();
                decode_checked(&e, journal::step_payload(frame, path, e.start)?)
            })
            .collect()
    }
}

/// Records at or after this many beyond what the steps table holds write a new table at the
/// next commit: an open reads at most this many records' bytes, ~60 KB.
const TABLE_AFTER: usize = 64;

#[derive(Default)]
pub(crate) struct StepLog {
    /// The oldest records, as the steps table the store was opened through holds them.
    tabled: Option<Tabled>,
    /// The records after those.
    records: Vec<StepRecord>,
    /// Every step, decoded, for those who want them all as one slice.
    all: OnceLock<Vec<Step>>,
    /// How many of the first records the steps table on disk holds.
    on_disk: usize,
}

impl StepLog {
    fn tabled_len(&self) -> usize {
        self.tabled.as_ref().map_or(0, |t| t.entries.len())
    }

    pub(crate) fn len(&self) -> usize {
        self.tabled_len() + self.records.len()
    }

    /// The newest step (always decoded).
    pub(crate) fn head(&self) -> Option<&Step> {
        match self.records.last() {
            Some(r) => r.decoded.get().map(AsRef::as_ref),
            None => self
                .tabled
                .as_ref()
                .and_then(|t| t.decoded(t.entries.len().checked_sub(1)?)),
        }
    }

    /// The step numbered `number`: where it is when numbers follow positions, as they do,
    /// else found by its number.
    pub(crate) fn by_number(&self, number: u64) -> Option<Result<&Step>> {
        let at = usize::try_from(number.checked_sub(1)?).ok()?;
        let tabled = self.tabled_len();
        if let Some(t) = &self.tabled
            && t.entries.get(at).is_some_and(|e| e.number == number)
        {
            return Some(t.get(at));
        }
        if let Some(r) = at.checked_sub(tabled).and_then(|i| self.records.get(i))
            && r.number() == number
        {
            return Some(r.get());
        }
        if let Some(t) = &self.tabled
            && let Some(i) = t.entries.iter().position(|e| e.number == number)
        {
            return Some(t.get(i));
        }
        let record = self.records.iter().find(|r| r.number() == number)?;
        Some(record.get())
    }

    /// Steps from the newest back.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = Result<&Step>> {
        let tabled = self
            .tabled
            .iter()
            .flat_map(|t| (0..t.entries.len()).rev().map(|i| t.get(i)));
        self.records.iter().rev().map(StepRecord::get).chain(tabled)
    }

    pub(crate) fn all(&self) -> Result<&[Step]> {
        if let Some(all) = self.all.get() {
            return Ok(all);
        }
        let mut steps = match &self.tabled {
            Some(t) => t.all()?,
            None => Vec::with_capacity(self.records.len()),
        };
        for r in &self.records {
            steps.push(r.get()?.clone());
        }
        Ok(self.all.get_or_init(|| steps))
    }

    /// A step this process committed, its frame at `start` with a payload of `len` bytes.
    pub(crate) fn push(&mut self, step: Step, start: u64, len: u32) {
        if let Some(all) = self.all.get_mut() {
            all.push(step.clone());
        }
        self.records.push(StepRecord::written(step, start, len));
    }

    /// Records read from the journal; the newest is decoded now.
    pub(crate) fn extend(&mut self, records: Vec<StepRecord>) -> Result<()> {
        if let Some(last) = records.last() {
            last.get()?;
        } else if let Some(last) = self.records.last() {
            last.get()?;
        } else if let Some(t) = &self.tabled
            && let Some(newest) = t.entries.len().checked_sub(1)
        {
            // The table's newest record, when nothing followed it.
            t.get(newest)?;
        }
        if !records.is_empty() {
            self.all = OnceLock::new();
        }
        self.records.extend(records);
        Ok(())
    }

    /// A read of the whole journal `journal` (device, inode) of the store at `store_dir`
    /// begins: the records are the steps table's, if a sound one names this journal, and the
    /// read starts where it ends (0 without one).
    /// With it, the objects the object table did not hold at that point, if the table has them.
    pub(crate) fn begin_full_read(
        &mut self,
        store_dir: &Path,
        journal: (u64, u64),
    ) -> (u64, Option<Untabled>) {
        self.records.clear();
        self.all = OnceLock::new();
        self.tabled = None;
        self.on_disk = 0;
        let Some((table, file)) = steps_table::load(store_dir, journal) else {
            return (0, None);
        };
        self.on_disk = table.entries.len();
        self.tabled = Some(Tabled {
            entries: table.entries,
            journal: (file, store_dir.join("journal")),
            decoded: OnceLock::new(),
        });
        (table.covers, table.objects)
    }

    /// Whether the records read by a whole read of the journal (`read`, oldest first) are
    /// where these say (fsck: the table's records are read only when asked for).
    pub(crate) fn same_places(&self, read: &[StepRecord]) -> bool {
        let tabled = self.tabled.iter().flat_map(|t| t.entries.iter());
        read.len() >= self.len()
            && tabled
                .chain(self.records.iter().map(StepRecord::entry))
                .zip(read)
                .all(|(a, b)| a == b.entry())
    }

    /// After a commit (under the store's lock, the journal read to `mark`): a new steps table
    /// once enough records are beyond the one on disk. Best effort, like the object table's.
    /// `objects` is the store's: what its object index did not hold then goes with it.
    pub(crate) fn maybe_write_table(
        &mut self,
        store_dir: &Path,
        mark: JournalMark,
        objects: &dyn ObjectBackend,
    ) {
        if self.len() < self.on_disk + TABLE_AFTER {
            return;
        }
        let tabled = self.tabled.iter().flat_map(|t| t.entries.iter());
        let entries: Vec<TableEntry> = tabled
            .chain(self.records.iter().map(StepRecord::entry))
            .collect();
        if steps_table::write(store_dir, mark, &entries, objects.untabled().as_ref()) {
            self.on_disk = entries.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(number: u64) -> Step {
        let mut s: Step = serde_json::from_str(
            r#"{"number":0,"kind":"run","parent":null,"started_at_ms":0,"ended_at_ms":0,
                "tree":null,"summary":"s"}"#,
        )
        .expect("a step");
        s.number = number;
        s.summary = format!("step {number}");
        s
    }

    fn record(step: &Step) -> StepRecord {
        StepRecord::read(serde_json::to_vec(step).expect("json"), 100).expect("read")
    }

    #[test]
    fn numbers_are_read_from_the_records_start_and_steps_decoded_on_demand() {
        assert_eq!(
            leading_number(b"{\"number\":42,\"kind\":\"run\"}"),
            Some(42)
        );
        assert_eq!(leading_number(b"{\"number\":7}"), Some(7));
        for bad in [
            &b"{\"number\": 42,"[..],
            b"{\"number\":\"42\",",
            b"{\"number\":42",
            b"{\"kind\":\"run\",\"number\":42}",
            b"{\"number\":99999999999999999999,",
        ] {
            assert_eq!(
                leading_number(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut log = StepLog::default();
        log.extend((1..=5).map(|n| record(&step(n))).collect())
            .expect("extend");
        assert_eq!(log.head().map(|s| s.number), Some(5));
        assert!(log.records[..4].iter().all(|r| r.decoded.get().is_none()));
        assert_eq!(
            log.by_number(3).expect("3").expect("decodes").summary,
            "step 3"
        );
        assert!(log.by_number(0).is_none() && log.by_number(6).is_none());
        log.push(step(6), 0, 0);
        assert_eq!(log.all().expect("all").len(), 6);
        log.push(step(7), 0, 0);
        let numbers: Vec<u64> = log.all().expect("all").iter().map(|s| s.number).collect();
        assert_eq!(numbers, (1..=7).collect::<Vec<_>>());
    }

    /// A record whose start is sound but whose rest does not decode is reported, as corrupt,
    /// when asked for; the newest record is decoded as it is read.
    #[test]
    fn a_record_that_does_not_decode_is_reported_when_asked_for() {
        let bad = StepRecord::read(b"{\"number\":2,\"kind\":17}".to_vec(), 321).expect("read");
        let mut log = StepLog::default();
        log.extend(vec![record(&step(1)), bad, record(&step(3))])
            .expect("extend");
        let err = log
            .by_number(2)
            .expect("2")
            .expect_err("decoded")
            .to_string();
        assert!(err.contains("corrupt") && err.contains("byte 321"), "{err}");
        assert!(log.all().is_err());
        assert!(log.newest_first().nth(1).expect("2").is_err());
        let bad_head = StepRecord::read(b"{\"number\":4,\"kind\":17}".to_vec(), 999).expect("read");
        assert!(log.extend(vec![bad_head]).is_err());
        assert!(StepRecord::read(b"{\"number\":\"x\"}".to_vec(), 5).is_err());
    }
}
