//! Steps that began and never committed, recorded as `interrupted` by the next open.

use crate::error::Result;
use crate::journal;
use crate::lock::Flock;
use crate::step::{ChangeCounts, Step, StepFlag, StepKind, now_ms};
use crate::store::Store;

impl Store {
    /// Record every step that began and never committed, and whose owner is gone (crashed,
    /// killed, signalled, or gave up after its command started), as an `interrupted` step:
    /// what its begin record knew (description, command, start), the tree of the step before
    /// it (what it changed, if anything, is in the next step), flagged `overlapped` if other
    /// steps committed meanwhile. Takes the commit lock only if it is free. Returns the
    /// numbers of the steps recorded.
    pub fn recover_interrupted(&mut self) -> Result<Vec<u64>> {
        let dead = crate::lock::dead_steps(&self.dir)?;
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let Some(_lock) = Flock::try_exclusive(&self.dir.join("lock"))? else {
            return Ok(Vec::new());
        };
        self.catch_up()?;
        let mut bytes = Vec::new();
        let mut recorded: Vec<Step> = Vec::new();
        // Where each recorded step's frame is in `bytes`, and its payload's length.
        let mut places: Vec<(u64, u32)> = Vec::new();
        for d in dead.iter().filter(|d| d.begun.open) {
            let note = format!("begun as inflight/{} by pid {}", d.id, d.begun.pid);
            // Recorded before, by an open that died before it removed the marker.
            let mut seen = false;
            for s in self.steps.newest_first().take(256) {
                seen |= s?.notes.contains(&note);
            }
            if seen {
                continue;
            }
            let prev = recorded.last().or(self.steps.head());
            let parent = prev.map(|s| s.number);
            let mut tree = recorded.iter().rev().find_map(|s| s.tree);
            if tree.is_none() {
                for s in self.steps.newest_first() {
                    tree = s?.tree;
                    if tree.is_some() {
                        break;
                    }
                }
            }
            let mut flags = Vec::new();
            if parent != d.begun.head {
                flags.push(StepFlag::Overlapped);
            }
            let step = Step {
                number: parent.unwrap_or(0) + 1,
                kind: StepKind::Interrupted,
                parent,
                started_at_ms: d.begun.started_at_ms,
                ended_at_ms: now_ms(),
                tree,
                summary: format!("interrupted: {}", d.begun.what),
                command: d.begun.command.clone(),
                cwd: d.begun.cwd.clone(),
                exit_code: None,
                policy_hash: None,
                changes: Vec::new(),
                changes_total: ChangeCounts::default(),
                changes_truncated: false,
                changes_omitted: 0,
                flags,
                requests: Vec::new(),
                refusals: Vec::new(),
                approvals: Vec::new(),
                target: None,
                origin: None,
                repl: None,
                notes: vec![
                    note,
                    "the step never committed (its process crashed, was killed or signalled, \
                     or the disk was full); what it changed, if anything, is recorded by the \
                     next step"
                        .into(),
                ],
            };
            let record = journal::encode_step(&step)?;
            let at = bytes.len() as u64;
            bytes.extend_from_slice(&record);
            places.push((at, journal::payload_len(&record)));
            recorded.push(step);
        }
        let start = self.journal.mark().pos;
        if !bytes.is_empty() {
            self.journal.append(&bytes)?;
        }
        let numbers = recorded.iter().map(|s| s.number).collect();
        for (step, (at, len)) in recorded.into_iter().zip(places) {
            self.steps.push(step, start + at, len);
        }
        self.steps
            .maybe_write_table(&self.dir, self.journal.mark(), self.objects.as_ref());
        for d in &dead {
            let _ = std::fs::remove_file(&d.path);
        }
        Ok(numbers)
    }
}
