//! The store's steps as the journal holds them: each record kept as its bytes and decoded the
//! first time it is asked for. A one-shot command needs the newest step and a few more by
//! number; decoding every record of the history at each start cost ~2.4 µs a step (a
//! 1,000-step project: 2.4 ms of every `envgit run`, growing with every command).
//!
//! A record's number is read from the start of its bytes (`{"number":N,`, how `encode_step`
//! writes it); a record that does not start so is decoded at once, so damage there is reported
//! when the journal is read. The newest record is always decoded when it is read: `head` never
//! fails. Any other record that turns out not to decode is reported, as corrupt, to whoever
//! asks for it; it is never skipped.

use std::sync::OnceLock;

use crate::error::{Result, StoreError};
use crate::step::Step;

/// One step record of the journal.
pub struct StepRecord {
    number: u64,
    /// Where the record's frame ends in the journal, for errors.
    at: u64,
    raw: Box<[u8]>,
    decoded: OnceLock<Step>,
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
    /// A record read from the journal, its frame ending at byte `at`.
    pub(crate) fn read(raw: Vec<u8>, at: u64) -> Result<Self> {
        let decoded = OnceLock::new();
        let number = match leading_number(&raw) {
            Some(n) => n,
            None => {
                let step = decode(&raw, at)?;
                let n = step.number;
                let _ = decoded.set(step);
                n
            }
        };
        Ok(Self {
            number,
            at,
            raw: raw.into_boxed_slice(),
            decoded,
        })
    }

    /// A record this process wrote (its bytes are in the journal; it needs no decoding).
    pub(crate) fn written(step: Step) -> Self {
        Self {
            number: step.number,
            at: 0,
            raw: Box::default(),
            decoded: OnceLock::from(step),
        }
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    pub(crate) fn get(&self) -> Result<&Step> {
        if let Some(step) = self.decoded.get() {
            return Ok(step);
        }
        let step = decode(&self.raw, self.at)?;
        if step.number != self.number {
            return Err(StoreError::corrupt(format!(
                "journal step record at byte {}: its number is {} and {}",
                self.at, self.number, step.number
            )));
        }
        Ok(self.decoded.get_or_init(|| step))
    }
}

#[derive(Default)]
pub(crate) struct StepLog {
    records: Vec<StepRecord>,
    /// Every step, decoded, for those who want them all as one slice.
    all: OnceLock<Vec<Step>>,
}

impl StepLog {
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// The newest step (always decoded).
    pub(crate) fn head(&self) -> Option<&Step> {
        self.records.last().and_then(|r| r.decoded.get())
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
        let steps = self
            .records
            .iter()
            .map(|r| r.get().cloned())
            .collect::<Result<Vec<Step>>>()?;
        Ok(self.all.get_or_init(|| steps))
    }

    /// A step this process committed.
    pub(crate) fn push(&mut self, step: Step) {
        if let Some(all) = self.all.get_mut() {
            all.push(step.clone());
        }
        self.records.push(StepRecord::written(step));
    }

    /// Records read from the journal; the newest is decoded now.
    pub(crate) fn extend(&mut self, records: Vec<StepRecord>) -> Result<()> {
        if let Some(last) = records.last() {
            last.get()?;
        }
        if !records.is_empty() {
            self.all = OnceLock::new();
        }
        self.records.extend(records);
        Ok(())
    }

    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.all = OnceLock::new();
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
        log.push(step(6));
        assert_eq!(log.all().expect("all").len(), 6);
        log.push(step(7));
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
