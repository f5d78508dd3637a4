//! The store's steps as the journal holds them: each record decoded the first time it is
//! asked for. A one-shot command needs the newest step and a few more by number; decoding
//! every record of the history at each start cost ~2.4 µs a step (a 1,000-step project:
//! 2.4 ms of every `envgit run`, growing with every command). Reading every record's bytes
//! still cost ~1.2 µs a step (a 1,380-step project: 1.7 ms of every open), so the records the
//! steps table ([`crate::steps_table`]) names stay in the journal until asked for.
//!
//! A record's number is read from the start of its bytes (`{"number":N,`, how `encode_step`
//! writes it); a record that does not start so is decoded at once, so damage there is reported
//! when the journal is read. The newest record is always decoded when it is read: `head` never
//! fails. Any other record that turns out not to decode (or, left in the journal, not to be
//! the intact frame the table says) is reported, as corrupt, to whoever asks for it; it is
//! never skipped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

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
    /// In the journal `file` (at `path`), in the frame at the record's `start`.
    InJournal(Arc<(File, PathBuf)>),
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
    /// Boxed: a `Step` is hundreds of bytes, and a record per step of the history is made at
    /// every open; inline, their memory's page faults cost more than the table's read.
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

    /// Its step decoded from `raw`, which must be the step its number says.
    fn decode_checked(&self, raw: &[u8]) -> Result<Step> {
        let step = decode(raw, self.start)?;
        if step.number != self.number {
            return Err(StoreError::corrupt(format!(
                "journal step record at byte {}: its number is {} and {}",
                self.start, self.number, step.number
            )));
        }
        Ok(step)
    }

    pub(crate) fn get(&self) -> Result<&Step> {
        if let Some(step) = self.decoded.get() {
            return Ok(step.as_ref());
        }
        let step = match &self.bytes {
            Bytes::Held(raw) => self.decode_checked(raw)?,
            Bytes::InJournal(journal) => {
                let (file, path) = journal.as_ref();
                let raw = journal::read_step_frame(file, path, self.start, self.len)?;
                self.decode_checked(&raw)?
            }
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

/// Records at or after this many beyond what the steps table holds write a new table at the
/// next commit: an open reads at most this many records' bytes, ~60 KB.
const TABLE_AFTER: usize = 64;

#[derive(Default)]
pub(crate) struct StepLog {
    records: Vec<StepRecord>,
    /// Every step, decoded, for those who want them all as one slice.
    all: OnceLock<Vec<Step>>,
    /// How many of the first records the steps table on disk holds.
    tabled: usize,
}

impl StepLog {
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// The newest step (always decoded).
    pub(crate) fn head(&self) -> Option<&Step> {
        self.records
            .last()
            .and_then(|r| r.decoded.get())
            .map(AsRef::as_ref)
    }

    /// The step numbered `number`: where it is when numbers follow positions, as they do,
    /// else found by its number.
    pub(crate) fn by_number(&self, number: u64) -> Option<Result<&Step>> {
        let at = usize::try_from(number.checked_sub(1)?).ok()?;
        let record = match self.records.get(at) {
            Some(r) if r.number() == number => r,
            _ => self.records.iter().find(|r| r.number() == number)?,
        };
        Some(record.get())
    }

    /// Steps from the newest back.
    pub(crate) fn newest_first(&self) -> impl Iterator<Item = Result<&Step>> {
        self.records.iter().rev().map(StepRecord::get)
    }

    pub(crate) fn all(&self) -> Result<&[Step]> {
        if let Some(all) = self.all.get() {
            return Ok(all);
        }
        // The records still in the journal are read with one read, not one each.
        let in_journal = self
            .records
            .iter()
            .filter(|r| r.decoded.get().is_none())
            .filter_map(|r| match &r.bytes {
                Bytes::InJournal(j) => Some((r, j)),
                _ => None,
            });
        let span = in_journal.clone().next().zip(in_journal.last());
        let read = match span {
            Some(((first, journal), (last, _))) => {
                let (file, path) = journal.as_ref();
                let end = last.start + journal::frame_len(last.len);
                let mut bytes = vec![0u8; usize::try_from(end - first.start).unwrap_or(0)];
                std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, first.start)
                    .at(path)?;
                Some((first.start, bytes, path.as_path()))
            }
            None => None,
        };
        let steps = self
            .records
            .iter()
            .map(|r| match (&r.bytes, r.decoded.get(), &read) {
                (Bytes::InJournal(_), None, Some((from, bytes, path))) => {
                    let at = usize::try_from(r.start - from).unwrap_or(usize::MAX);
                    let frame = at
                        .checked_add(usize::try_from(journal::frame_len(r.len)).unwrap_or(0))
                        .and_then(|end| bytes.get(at..end))
                        .unwrap_or_default();
                    r.decode_checked(journal::step_payload(frame, path, r.start)?)
                }
                _ => r.get().cloned(),
            })
            .collect::<Result<Vec<Step>>>()?;
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
            // The table's newest record, when nothing followed it.
            last.get()?;
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
        self.tabled = 0;
        let Some((table, file)) = steps_table::load(store_dir, journal) else {
            return (0, None);
        };
        let source = Arc::new((file, store_dir.join("journal")));
        self.records = table
            .entries
            .iter()
            .map(|e| StepRecord {
                number: e.number,
                start: e.start,
                len: e.len,
                bytes: Bytes::InJournal(Arc::clone(&source)),
                decoded: OnceLock::new(),
            })
            .collect();
        self.tabled = self.records.len();
        (table.covers, table.objects)
    }

    /// Whether the records read by a whole read of the journal (`read`, oldest first) are
    /// where these say (fsck: the table's records are read only when asked for).
    pub(crate) fn same_places(&self, read: &[StepRecord]) -> bool {
        read.len() >= self.records.len()
            && self
                .records
                .iter()
                .zip(read)
                .all(|(a, b)| a.entry() == b.entry())
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
        if self.records.len() < self.tabled + TABLE_AFTER {
            return;
        }
        let entries: Vec<TableEntry> = self.records.iter().map(StepRecord::entry).collect();
        if steps_table::write(store_dir, mark, &entries, objects.untabled().as_ref()) {
            self.tabled = entries.len();
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
